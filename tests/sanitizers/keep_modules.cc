// Linked into the sanitizer builds' test binaries only (tests/CMakeLists.txt): Open MPI loads
// its plugins (mca_*.so) with dlopen and closes them in MPI_Finalize, after which LeakSanitizer
// can no longer name the module that made an allocation ("<unknown module>") and the
// suppressions of Open MPI's own allocations (lsan.supp: leak:mca_) cannot match. A dlclose
// defined in the executable takes precedence over libc's, so the plugins stay mapped until exit.
extern "C" int dlclose(void*) { return 0; }
