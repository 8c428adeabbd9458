#!/usr/bin/env python3
"""Overlap fraction of a zeroeng trace (zeroeng run --trace FILE): for one rank, the share of the
time its communication queue was busy (the union of the "comm" lane's events) that lies inside
its forward and backward passes (the "compute" lane), over the steps after the first.

    bench/trace_overlap.py trace.json [rank]    # prints {"comm_ms": .., "overlapped_ms": .., "overlap": ..}
"""
import json
import sys


def union(intervals):
    out = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def intersect(a, b):
    total, i, j = 0.0, 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            total += hi - lo
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    rank = int(sys.argv[2]) if len(sys.argv) == 3 else 0
    with open(sys.argv[1]) as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X" and e.get("pid") == rank]
    forwards = sorted(e["ts"] for e in events if e.get("cat") == "compute" and e["name"] == "forward")
    if len(forwards) < 2:
        sys.exit(f"trace_overlap.py: rank {rank} has {len(forwards)} forward passes; two or more are needed")
    start = forwards[1]  # the first step warms up
    lane = lambda cat: union([e["ts"], e["ts"] + e["dur"]] for e in events if e.get("cat") == cat and e["ts"] >= start)
    comm, compute = lane("comm"), lane("compute")
    busy = sum(e - s for s, e in comm)
    both = intersect(comm, compute)
    print(json.dumps({"comm_ms": round(busy / 1e3, 1), "overlapped_ms": round(both / 1e3, 1),
                      "overlap": round(both / busy, 3) if busy else 0}))


if __name__ == "__main__":
    main()
