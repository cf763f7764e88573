#!/usr/bin/env python3
"""Sorts ThreadSanitizer's reports of a test run into Open MPI's own and tessera's.

Open MPI is not built with TSan, so TSan sees only what its libraries do through intercepted
calls (memcpy, pthread_*), and orderings made by Open MPI's own atomics look like races there.
Suppressions cannot single those out: a `race:` or `called_from_lib:` entry also matches a race
between Open MPI reading a user buffer and a tessera thread writing it. So the TSan build runs
without suppressions and with reports logged, and this script reads them after the tests: a
report is Open MPI's own when none of its access stacks (the accesses, or the mutex operations,
that TSan reports as conflicting) has a frame in tessera's sources, and each was restored (an
access whose stack TSan could not restore counts as tessera's: nothing shows it is not). Stacks that only say where
memory was allocated, or a thread or mutex created, are not accesses and do not count: tessera
allocates the buffers Open MPI works in, and creates the threads that call it.

Usage: tsan_reports.py REPO_ROOT LOG_FILE...
Prints every report that involves tessera in full and a count of the rest by kind and top Open
MPI frame; exits 1 if any report involves tessera, 0 otherwise.
"""
import collections
import re
import sys

NOT_ACCESS = re.compile(r"(created at|created by|allocated by|Location is)")
FRAME = re.compile(r"^\s+#\d+ ")


def reports(text):
    current = []
    for line in text.splitlines():
        if line.startswith("WARNING: ThreadSanitizer:"):
            current = [line]
        elif current:
            current.append(line)
            if line.startswith("SUMMARY: ThreadSanitizer:"):
                yield current
                current = []


def involves(report, ours):
    """Whether an access stack of the report has a frame in tessera's sources, or could not be
    restored (TSan prints the heading and no frame): then nothing shows it is Open MPI's alone."""
    access = True
    frames = None  # frames under the current access heading; None outside one
    for line in report[1:] + [""]:
        if FRAME.match(line):
            if access and any(o in line for o in ours):
                return True
            if frames is not None:
                frames += 1
        elif line.strip() or frames is not None:
            if frames == 0:
                return True
            access = bool(line.strip()) and not NOT_ACCESS.search(line) and \
                not line.startswith("SUMMARY")
            frames = 0 if access and line.strip().endswith(":") else None
    return False


def first_library_frame(report):
    for line in report:
        m = re.match(r"^\s+#\d+ (\S+).*\((lib[^+)]*|mca_[^+)]*)\+0x", line)
        if m:
            return f"{m.group(1)} in {m.group(2)}"
    return "?"


def main():
    root = sys.argv[1].rstrip("/")
    ours = [root + "/src/", root + "/tests/", root + "/apps/"]
    theirs = collections.Counter()
    found = 0
    for path in sys.argv[2:]:
        with open(path, errors="replace") as f:
            for r in reports(f.read()):
                kind = r[0].split("ThreadSanitizer:", 1)[1].split("(")[0].strip()
                if involves(r, ours):
                    found += 1
                    print(f"== a ThreadSanitizer report in tessera's code ({path}):")
                    print("\n".join(r))
                else:
                    theirs[f"{kind}: {first_library_frame(r)}"] += 1
    total = sum(theirs.values())
    print(f"tsan: {found} report(s) with a frame of tessera's in an access stack; "
          f"{total} inside Open MPI only (no tessera frame in any access stack)")
    for what, n in theirs.most_common():
        print(f"  {n:4d}  {what}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
