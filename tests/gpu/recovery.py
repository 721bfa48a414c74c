#!/usr/bin/env python3
"""The WQE recovery contract of the GPU checkers (issue 41), the same as tests/gpu/check.rs's
`check_recovery` on the CPU harness.

sigmatop copies the WQEs behind each GPU doorbell on a copier thread of its own, after the
doorbell was forwarded. A slot the GPU reuses before the copy reads it is detected from the WQE's
own index and QPN and counted (`overwritten_slots` in the SIGMATOP_GPU_STATS line, in WQEBBs), as
is a full hand-over queue (`dropped_wqebbs`). So what a checker may demand is:
  1. every WQE sigmatop reports is one the NIC executed, field for field, and per QP in the NIC's
     order, none twice (never wrong);
  2. a WQE missing from the report is counted: missing WQEs <= overwritten + dropped WQEBBs, and
     nothing is counted when nothing is missing (a WQE is at least one WQEBB);
  3. the last WQE of every QP is reported unless the hand-over queue dropped some (its slot can
     not have been reused: nothing came after it);
  4. the stats line's `wqes` is the number reported.
With no loss this is the old "recovered exactly".

    from recovery import compare, gpu_stats
    problems, lost = compare(got, want, stats)   # got, want: {qpn: [tuple, ...]}, NIC order

    python3 tests/gpu/recovery.py --self-test
    python3 tests/gpu/recovery.py WQE_LOG LIST ERR   (tests/gpu/run_device.sh: the workload's
                                                      posted list against sigmatop's WQE log)
Exits 1 on a problem. Pure standard library.
"""
import re
import sys
from collections import defaultdict


def gpu_stats(err_text):
    """The SIGMATOP_GPU_STATS line's counters as ints ({} when there is none)."""
    m = re.search(r"sigmatop-gpu: (.*)", err_text)
    if not m:
        return {}
    out = {}
    for x in m.group(1).split():
        k, _, v = x.partition("=")
        if v.isdigit():
            out[k] = int(v)
    return out


def compare(got, want, stats):
    """(problems, lost): the contract above for one process."""
    problems = []
    lost = 0
    reported = 0
    for q in sorted(set(got) | set(want)):
        g = got.get(q, [])
        w = want.get(q, [])
        reported += len(g)
        i = 0
        for n, x in enumerate(g):
            while i < len(w) and w[i] != x:
                i += 1
            if i == len(w):
                near = [y for y in w if y[:1] == x[:1]][:1]
                problems.append(f"QP {q:#x}: reported WQE {n} {x} is not among the posted WQEs after "
                                f"the one before it (wrong, out of order or twice; the posted one at "
                                f"that index: {near[0] if near else None})")
                break
            i += 1
        else:
            lost += len(w) - len(g)
            if w and (not g or g[-1] != w[-1]) and stats.get("dropped_wqebbs", 0) == 0:
                problems.append(f"QP {q:#x}: the last WQE posted, {w[-1]}, is not reported, and "
                                f"nothing was dropped (its slot was never reused)")
    counted = stats.get("overwritten_slots", 0) + stats.get("dropped_wqebbs", 0)
    if lost > counted:
        problems.append(f"{lost} WQEs missing, {counted} WQEBBs counted lost "
                        f"(overwritten_slots + dropped_wqebbs): a silent loss")
    if lost == 0 and counted:
        problems.append(f"nothing missing, yet {counted} WQEBBs counted lost")
    if "wqes" in stats and stats["wqes"] != reported:
        problems.append(f"the stats line says wqes={stats['wqes']}, {reported} reported")
    return problems, lost


def describe(lost, stats):
    if not lost:
        return "recovered exactly"
    return (f"recovered all but {lost} WQEs, counted (overwritten_slots="
            f"{stats.get('overwritten_slots', 0)} dropped_wqebbs={stats.get('dropped_wqebbs', 0)})")


def lines_by_qp(path):
    """run_device.sh's posted list and WQE log: 'wqe qpn=.. idx=.. ...' lines, opmod and
    signaled left out (the list has neither), by QPN in file order."""
    m = defaultdict(list)
    with open(path) as f:
        for line in f:
            if not line.startswith("wqe "):
                continue
            kv = []
            for x in line.split()[1:]:
                k, _, v = x.partition("=")
                if k in ("opmod", "signaled"):
                    continue
                try:
                    kv.append((k, int(v, 0)))  # C's %#x writes 0 as "0", Rust's {:#x} as "0x0"
                except ValueError:
                    kv.append((k, v))
            qpn = dict(kv).get("qpn", 0)
            m[qpn].append(tuple(kv))
    return m


def self_test():
    def t(idx, n=1):
        return (idx, 0x8, n)
    want = {1: [t(0), t(1), t(2), t(3)], 2: [t(0), t(1)]}
    ok = {"overwritten_slots": 0, "dropped_wqebbs": 0}
    cases = [
        ("exact", {1: want[1][:], 2: want[2][:]}, dict(ok, wqes=6), 0, 0),
        ("counted loss", {1: [t(0), t(3)], 2: want[2][:]}, dict(ok, overwritten_slots=2, wqes=4), 2, 0),
        ("silent loss", {1: [t(0), t(3)], 2: want[2][:]}, dict(ok, wqes=4), 2, 1),
        ("wrong fields", {1: [t(0), t(1, 9), t(2), t(3)], 2: want[2][:]}, dict(ok, wqes=6), 0, 1),
        ("out of order", {1: [t(1), t(0), t(2), t(3)], 2: want[2][:]}, dict(ok, wqes=6), 0, 1),
        ("twice", {1: [t(0), t(0), t(1), t(2), t(3)], 2: want[2][:]}, dict(ok, wqes=7), 0, 1),
        ("tail missing", {1: [t(0), t(1), t(2)], 2: want[2][:]}, dict(ok, overwritten_slots=1, wqes=5), 1, 1),
        ("tail dropped", {1: [t(0), t(1), t(2)], 2: want[2][:]}, dict(ok, dropped_wqebbs=1, wqes=5), 1, 0),
        ("counted, none missing", {1: want[1][:], 2: want[2][:]}, dict(ok, overwritten_slots=1, wqes=6), 0, 1),
        ("never executed", {1: want[1][:], 2: want[2][:], 3: [t(0)]}, dict(ok, wqes=7), 0, 1),
        ("stats disagree", {1: want[1][:], 2: want[2][:]}, dict(ok, wqes=5), 0, 1),
    ]
    bad = 0
    for name, got, stats, lost_want, problems_want in cases:
        problems, lost = compare(got, want, stats)
        if len(problems) != problems_want or (problems_want == 0 and lost != lost_want):
            print(f"self-test {name}: lost {lost} (want {lost_want}), problems {problems}")
            bad += 1
    print(f"recovery.py self-test: {len(cases) - bad} of {len(cases)} cases as expected")
    return 1 if bad else 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        sys.exit(self_test())
    if len(sys.argv) != 4:
        print(__doc__)
        sys.exit(2)
    wlog, posted, err = sys.argv[1:]
    with open(err, errors="replace") as f:
        stats = gpu_stats(f.read())
    problems, lost = compare(lines_by_qp(wlog), lines_by_qp(posted), stats)
    for p in problems:
        print(f"MISMATCH: {p}")
    if not problems:
        print(describe(lost, stats))
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
