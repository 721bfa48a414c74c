#!/usr/bin/env python3
"""The Fig. 4 table of tests/gpu/run_device.sh from its raw files: for each placement (bench-host,
bench) and operation, the median over rounds of each round's median latency, the median over
rounds of each round's p99, the latency added to the untraced baseline, and the ratio.

Usage: python3 tests/gpu/fig4.py OUTDIR   (reads OUTDIR/{bench,bench-host}_{base,fwd,rec,recb}_N.txt)
Raw lines: "BENCH <op> median_ns=<n> p99_ns=<n> mean_ns=<n>" (tests/gpu/gpu_workload.cu).
"""
import glob
import os
import re
import statistics
import sys

CONFIGS = [("base", "baseline"), ("fwd", "forward only"), ("rec", "+ recovery, copy per doorbell"),
           ("recb", "+ recovery, copy per batch")]
LINE = re.compile(r"BENCH (\S+) median_ns=(\d+) p99_ns=(\d+)")


def rounds(outdir, mode, cfg):
    """{op: [(median, p99) per round]}"""
    out = {}
    for path in sorted(glob.glob(os.path.join(outdir, f"{mode}_{cfg}_*.txt"))):
        for m in LINE.finditer(open(path).read()):
            out.setdefault(m.group(1), []).append((int(m.group(2)), int(m.group(3))))
    return out


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else "."
    printed = False
    for mode in ("bench-host", "bench"):
        data = {cfg: rounds(outdir, mode, cfg) for cfg, _ in CONFIGS}
        if not data["base"]:
            continue
        printed = True
        where = "queues in pinned host memory" if mode == "bench-host" else "queues in GPU memory"
        print(f"\n{mode} ({where}); medians over rounds of per-round medians and p99s, µs\n")
        print("| operation | configuration | median | p99 | added median | added p99 | ratio |")
        print("|---|---|---|---|---|---|---|")
        for op in sorted(data["base"]):
            b = data["base"][op]
            bmed = statistics.median(r[0] for r in b) / 1000
            bp99 = statistics.median(r[1] for r in b) / 1000
            for cfg, label in CONFIGS:
                rs = data[cfg].get(op)
                if not rs:
                    continue
                med = statistics.median(r[0] for r in rs) / 1000
                p99 = statistics.median(r[1] for r in rs) / 1000
                print(f"| {op} | {label} ({len(rs)} rounds) | {med:.2f} | {p99:.2f} | "
                      f"{med - bmed:+.2f} | {p99 - bp99:+.2f} | {med / bmed:.2f}× |")
    if not printed:
        sys.exit(f"no raw files in {outdir}")


if __name__ == "__main__":
    main()
