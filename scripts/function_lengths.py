#!/usr/bin/env python3
"""Lists C++ function bodies longer than a limit: `function_lengths.py LIMIT FILE...`.

A body is a `{ ... }` block that opens at brace depth 0 outside namespace blocks (a function,
method or constructor defined at file scope), counted from its signature's first line to its
closing brace. Strings, characters and comments are skipped when matching braces. Exits 1 when
any body exceeds LIMIT lines, naming each; docs/testing.md says why the limit exists.

A longer body is accepted when the comment just above its signature argues it, starting
`// function-length: ` and giving the reason (a dispatch table, say); those are listed apart.
"""
import re
import sys


def strip(text):
    """The text with comments, strings and character literals blanked, lines kept."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif text.startswith('R"', i):
            m = re.match(r'R"([^(]*)\(', text[i:])
            end = text.find(")" + m.group(1) + '"', i) if m else -1
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


ARGUED = re.compile(r"//\s*function-length:\s*\S.{20,}")


def argued(raw, start):
    """Whether the comment block just above line `start` (1-based) argues the length."""
    i = start - 2
    while i >= 0 and raw[i].strip().startswith("//"):
        if ARGUED.search(raw[i]):
            return True
        i -= 1
    return False


def long_bodies(path, limit):
    text = open(path, encoding="utf-8").read()
    raw = text.split("\n")
    lines = strip(text).split("\n")
    found, stack, start = [], [], None  # stack: 'ns' or 'fn' or 'other' per open brace
    for number, line in enumerate(lines, 1):
        for col, c in enumerate(line):
            if c == "{":
                before = line[:col]
                signature = " ".join(l.strip() for l in lines[max(0, number - 4):number - 1]) + " " + before
                if re.search(r"\bnamespace\b[\w\s:]*$", before) or re.search(r'extern\s*"?"?\s*$', before):
                    stack.append("ns")
                elif re.search(r"\b(class|struct|union|enum)\b[^;(){}]*$", signature) and "(" not in before:
                    stack.append("ns")  # a type's body: its inline methods count on their own
                elif all(k == "ns" for k in stack):
                    # A body at file scope: walk back to the first line of its signature.
                    first = number
                    while first > 1 and lines[first - 2].strip() and not re.search(r"[;{}]\s*$", lines[first - 2]) \
                            and not lines[first - 2].lstrip().startswith("#"):
                        first -= 1
                    stack.append("fn")
                    start = first
                else:
                    stack.append("other")
            elif c == "}" and stack:
                kind = stack.pop()
                if kind == "fn" and number - start + 1 > limit:
                    name = lines[start - 1].strip()[:90]
                    found.append((path, start, number - start + 1, name, argued(raw, start)))
    return found


def main():
    limit = int(sys.argv[1])
    found = []
    for path in sys.argv[2:]:
        found += long_bodies(path, limit)
    for path, line, length, name, ok in found:
        why = "argued in its comment" if ok else f"limit {limit}"
        print(f"{path}:{line}: {length} lines ({why}): {name}")
    return 1 if any(not ok for *_, ok in found) else 0


if __name__ == "__main__":
    sys.exit(main())
