#!/usr/bin/env python3
"""Summarises runs of benches/hotpath.c and benches/verbs_hotpath.c (one output line per run, as
benches/device_overhead.sh collects them in hotpath.txt) into a Markdown table: per bench, mode and
record, the median over runs of the added cost per call (min–max), of the clock's own cost timed in
the same bursts, and of their difference; and the same from each run's fastest bursts.

Usage: python3 benches/hotpath_table.py hotpath.txt
"""
import collections
import re
import statistics
import sys


def fields(text):
    return dict(re.findall(r"([\w-]+(?:\([a-z_]+\))?)=(-?[0-9.]+|[a-z]+)", text))


def main():
    rows = collections.OrderedDict()
    for line in open(sys.argv[1]):
        if "mode=" not in line:
            continue
        head, _, best = line.partition("best burst:")
        kv = fields(head)
        bench = re.search(r"bench=(\w+)", line)
        bench = bench.group(1) if bench else ("verbs_hotpath" if "post_send" in line else "hotpath")
        stamp = [float(v) for k, v in kv.items() if k.startswith("timestamp(")]
        stamp = stamp[0] if stamp else None
        best_adds = re.findall(r"added=(-?[0-9.]+)", best)
        best_stamp = re.search(r"timestamp=(-?[0-9.]+)", best)
        best_stamp = float(best_stamp.group(1)) if best_stamp else None
        adds = re.findall(r"added=(-?[0-9.]+)", head)
        if bench == "hotpath":
            parts = [("hotpath.c generic hook", adds[0], best_adds[0] if best_adds else None)]
        else:
            parts = [("verbs post_send", adds[0], best_adds[0] if len(best_adds) > 0 else None),
                     ("verbs poll_cq (1 completion)", adds[1], best_adds[1] if len(best_adds) > 1 else None)]
        for name, added, best_added in parts:
            rows.setdefault((name, kv.get("mode"), kv.get("record")), []).append(
                (float(added), stamp, float(best_added) if best_added else None, best_stamp))
    print("| bench | mode | record | added per call: median (min–max) | clock, same bursts | added − clock "
          "| fastest bursts: added / clock | runs |")
    print("|---|---|---|---|---|---|---|---|")
    for (name, mode, rec), vs in rows.items():
        a = [v[0] for v in vs]
        s = [v[1] for v in vs if v[1] is not None]
        d = [v[0] - v[1] for v in vs if v[1] is not None]
        ba = [v[2] for v in vs if v[2] is not None]
        bs = [v[3] for v in vs if v[3] is not None]
        med = lambda xs: "%.2f" % statistics.median(xs) if xs else "-"
        print("| %s | %s | %s | %.2f (%.2f–%.2f) ns | %s ns | %s ns | %s / %s ns | %d |" % (
            name, mode, rec, statistics.median(a), min(a), max(a), med(s), med(d), med(ba), med(bs),
            len(vs)))


if __name__ == "__main__":
    main()
