#!/usr/bin/env python3
"""Fails if any error the test suite provoked names a source position (`engine.cc:315:`):
STYLE.md keeps file:line out of what a user reads. The log is written by every tessera error
made while TESSERA_ERROR_LOG is set (src/common/error.h); internal errors (TESSERA_ASSERT,
"internal error: ...") keep their position for the bug report and are counted apart.

    scripts/error_positions.py LOG
"""
import re
import sys

POSITION = re.compile(r"[\w./-]+\.(?:cc|cpp|cu|h|hpp|c):\d+")


def main(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = [line.rstrip("\n") for line in f]
    except FileNotFoundError:
        print(f"error_positions: no error was provoked ({path} was not written)")
        return 0
    internal = [line for line in lines if "internal error:" in line]
    bad = sorted({line for line in lines if POSITION.search(line) and line not in internal})
    print(f"error_positions: {len(lines)} errors provoked, {len(set(lines))} distinct, "
          f"{len(internal)} internal; {len(bad)} name a source position")
    for line in bad[:40]:
        print(f"  {line[:300]}")
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: error_positions.py LOG")
    sys.exit(main(sys.argv[1]))
