#!/usr/bin/env python3
"""Reads a `tessera train --timeline` trace and prints, per training step, when backward ran and
when the gradients' collectives ran: the overlap of communication with backward.

    scripts/timeline_overlap.py timeline.json
"""
import json
import sys


def main(path):
    with open(path) as f:
        events = json.load(f)
    rows = {e["tid"]: e["args"]["name"] for e in events if e.get("ph") == "M"}
    spans = [e for e in events if e.get("ph") == "X"]
    backward = sorted((e["ts"], e["ts"] + e["dur"]) for e in spans
                      if rows.get(e["tid"]) == "train" and e["name"] == "BACKWARD")
    skip = ("NEGOTIATE", "QUEUE", "MEMCPY_IN_FUSION_BUFFER", "MEMCPY_OUT_FUSION_BUFFER")
    collectives = sorted((e["ts"], e["ts"] + e["dur"], rows[e["tid"]]) for e in spans
                         if rows.get(e["tid"], "").startswith("grad.") and e["name"] not in skip)
    if not backward or not collectives:
        sys.exit("no BACKWARD spans or no gradient collectives in " + path)
    for i, (b0, b1) in enumerate(backward):
        end = backward[i + 1][0] if i + 1 < len(backward) else float("inf")
        mine = [c for c in collectives if b0 <= c[0] < end]
        if not mine:
            continue
        first = mine[0]
        during = sum(1 for c in mine if c[0] < b1)
        print(f"step {i + 1}: backward {b0 / 1e3:.1f}-{b1 / 1e3:.1f} ms; first gradient "
              f"collective ({first[2]}) at {first[0] / 1e3:.1f} ms, "
              f"{(b1 - first[0]) / 1e3:.1f} ms before backward ended; "
              f"{during} of {len(mine)} gradient collectives started during backward; "
              f"last ended {(mine[-1][1] - b1) / 1e3:.1f} ms after it")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "timeline.json")
