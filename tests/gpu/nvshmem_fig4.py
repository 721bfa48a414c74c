#!/usr/bin/env python3
"""Paper Fig. 4 with NVIDIA's device code: medians and p99 from the raw files of
`bash tests/gpu/nvshmem_device.sh OUT bench` (tests/gpu/nvshmem_fig4.cu).

    python3 tests/gpu/nvshmem_fig4.py DIR...   (DIR: the run directories, or fig4.tgz unpacked;
                                                several DIRs: the rounds of several sittings together)

DIR/fig4.MEM.CONFIG.ROUND/OP.ns holds one latency in ns per line (MEM: hostmem or gpumem, the
NIC's queues; CONFIG: base = no sigmatop, fwd = forward only, rec = forward + WQE recovery with a
copy per doorbell, recb = with a copy per batch, reci = rec with the preload from before the copier
thread (the copy on the poller thread); OP: put, get, atomic, put64). For every round
the median and p99 of its samples; the table gives, per configuration, the median over the rounds
of those per-round figures in µs, and in brackets what sigmatop added to the baseline's median and
p99. Then the targets of issue 11 (median added <= 0.3 µs forward-only and <= 1 µs with recovery;
p99 added <= 1 µs forward-only and <= 2 µs with recovery): met / not met per cell.
"""
import os
import re
import sys
from collections import defaultdict

CONFIGS = [("base", "baseline"), ("fwd", "forward-only"), ("rec", "+ recovery (copy per doorbell)"),
           ("recb", "+ recovery (copy per batch)"), ("reci", "+ recovery, copy on the poller (before)")]
TARGET = {"fwd": (0.3, 1.0), "rec": (1.0, 2.0), "recb": (1.0, 2.0), "reci": (1.0, 2.0)}  # (median, p99) added, µs


def pct(sorted_v, p):
    """Nearest-rank percentile of a sorted list."""
    if not sorted_v:
        return float("nan")
    k = max(0, min(len(sorted_v) - 1, int(-(-p * len(sorted_v) // 100)) - 1))
    return sorted_v[k]


def median(v):
    s = sorted(v)
    n = len(s)
    if n == 0:
        return float("nan")
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def main():
    per = defaultdict(list)  # (mem, config, op) -> [(median, p99)] per round, µs
    rounds = defaultdict(set)
    runs = [(k, d, run) for k, d in enumerate(sys.argv[1:]) for run in sorted(os.listdir(d))]
    for k, d, run in runs:
        m = re.fullmatch(r"fig4\.(\w+)\.(\w+)\.(\d+)", run)
        if not m:
            continue
        mem, cfg, r = m.group(1), m.group(2), (k, int(m.group(3)))
        for f in sorted(os.listdir(os.path.join(d, run))):
            if not f.endswith(".ns"):
                continue
            with open(os.path.join(d, run, f)) as fh:
                v = sorted(int(x) / 1000.0 for x in fh if x.strip())
            if not v:
                continue
            per[(mem, cfg, f[:-3])].append((median(v), pct(v, 99)))
            rounds[(mem, cfg)].add(r)
    if not per:
        print("nvshmem_fig4: no raw files")
        sys.exit(1)
    ops = [o for o in ("put", "get", "atomic", "put64") if any(k[2] == o for k in per)]
    for mem in sorted({k[0] for k in per}):
        print(f"\n{mem}: median / p99 in µs (median over rounds of each round's figure); "
              f"rounds: " + ", ".join(f"{c} {len(rounds[(mem, c)])}" for c, _ in CONFIGS))
        print("| op | " + " | ".join(n for _, n in CONFIGS) + " |")
        print("|---|" + "---|" * len(CONFIGS))
        verdicts = []
        for op in ops:
            cells = []
            base = None
            for cfg, _ in CONFIGS:
                rs = per.get((mem, cfg, op), [])
                if not rs:
                    cells.append("—")
                    continue
                med = median([x[0] for x in rs])
                p99 = median([x[1] for x in rs])
                if cfg == "base":
                    base = (med, p99)
                    cells.append(f"{med:.2f} / {p99:.2f}")
                    continue
                if base is None:
                    cells.append(f"{med:.2f} / {p99:.2f}")
                    continue
                dm, dp = med - base[0], p99 - base[1]
                cells.append(f"{med:.2f} / {p99:.2f} ({dm:+.2f} / {dp:+.2f})")
                tm, tp = TARGET[cfg]
                verdicts.append(f"{op} {cfg}: median {dm:+.2f} ≤ {tm}: {'met' if dm <= tm else 'NOT met'}; "
                                f"p99 {dp:+.2f} ≤ {tp}: {'met' if dp <= tp else 'NOT met'}")
            print(f"| {op} | " + " | ".join(cells) + " |")
        print()
        for v in verdicts:
            print(f"  {mem} {v}")


if __name__ == "__main__":
    main()
