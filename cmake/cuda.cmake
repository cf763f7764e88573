# Sets TESSERA_HAVE_CUDA (and enables the CUDA language, with CUDA::cudart and NCCL's
# TESSERA_NCCL_LIBRARY / TESSERA_NCCL_INCLUDE_DIR where found) according to TESSERA_CUDA.
set(TESSERA_HAVE_CUDA OFF)
set(TESSERA_HAVE_NCCL OFF)
if(NOT TESSERA_CUDA MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "TESSERA_CUDA must be AUTO, ON or OFF, got '${TESSERA_CUDA}'")
endif()
if(TESSERA_CUDA STREQUAL "OFF" OR TESSERA_SANITIZE OR TESSERA_FUZZ)
  message(STATUS "tessera: GPU backend off (TESSERA_CUDA=${TESSERA_CUDA}${TESSERA_SANITIZE})")
  return()
endif()

# The toolkit's usual home, when nvcc is not on PATH (CI's machines).
if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
  set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc CACHE FILEPATH "CUDA compiler")
endif()
include(CheckLanguage)
check_language(CUDA)
if(NOT CMAKE_CUDA_COMPILER)
  if(TESSERA_CUDA STREQUAL "ON")
    message(FATAL_ERROR
      "TESSERA_CUDA=ON but no CUDA compiler (nvcc) was found: install the CUDA toolkit and put "
      "nvcc on PATH, or pass -DCMAKE_CUDA_COMPILER=/path/to/nvcc; -DTESSERA_CUDA=AUTO (the "
      "default) builds without the GPU backend where there is none")
  endif()
  message(STATUS "tessera: no CUDA compiler found, building without the GPU backend")
  return()
endif()

# Hopper (the H100/H200 this project measures on) unless the caller chose.
if(NOT CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES 90)
endif()
enable_language(CUDA)
set(CMAKE_CUDA_STANDARD 17)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
find_package(CUDAToolkit REQUIRED)
set(TESSERA_HAVE_CUDA ON)

# NCCL: the toolkit's, or a pip wheel's (which ships libnccl.so.2 without the libnccl.so link).
find_path(TESSERA_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ENV NCCL_HOME
          PATH_SUFFIXES include)
find_library(TESSERA_NCCL_LIBRARY NAMES nccl libnccl.so.2
             HINTS ${CUDAToolkit_LIBRARY_DIR} ENV NCCL_HOME PATH_SUFFIXES lib lib64)
if(TESSERA_NCCL_INCLUDE_DIR AND TESSERA_NCCL_LIBRARY)
  set(TESSERA_HAVE_NCCL ON)
endif()
message(STATUS "tessera: GPU backend on (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, "
               "architectures ${CMAKE_CUDA_ARCHITECTURES}, NCCL ${TESSERA_HAVE_NCCL})")
