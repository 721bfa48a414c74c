#!/usr/bin/env python3
"""Recomputes BENCHMARKS.md's tables and verdicts from the raw files committed under
benches/results/ (python3, standard library only).

How a verdict is judged (BENCHMARKS.md, "How verdicts are judged"): on what a traced program pays,
i.e. each run's mean over ALL its bursts (or all its calls, iterations, ticks), and across runs the
median of those. The fastest burst is printed beside it where the raw file has it: it is what the
code costs when nothing else on the machine interferes, never the verdict.

Usage:
  python3 benches/summarize.py hotpath FILE [--lib new]   # hotpath_ab.sh / device_overhead.sh hot-path runs
  python3 benches/summarize.py floor FILE                 # hotpath_floor.sh runs
  python3 benches/summarize.py overhead FILE.csv          # overhead.py --csv (paired verdicts)
  python3 benches/summarize.py ucx FILE                   # device_overhead.sh ucx_hotpath.txt
  python3 benches/summarize.py export FILE                # benches/devvm_export.sh, devvm_export_rate.sh output
  python3 benches/summarize.py tui FILE                   # benches/devvm_tui.sh output
  python3 benches/summarize.py fig5 DIR                   # nccl_device.sh fig5 (DIR/fig5.*.json)
  python3 benches/summarize.py proxy FILE                 # benches/nccl_proxy_callgrind.sh output
"""
import argparse
import collections
import os
import random
import re
import statistics
import sys

med = statistics.median


def num(pattern, text, default=None):
    m = re.search(pattern, text)
    return float(m.group(1)) if m else default


# ---------------------------------------------------------------------------------------------
# Hot path: lines of benches/hotpath.c and benches/verbs_hotpath.c, as benches/hotpath_ab.sh
# ("round=R lib=L mode=M rec=R bench=B <bench line>") or benches/device_overhead.sh
# ("round=R bench=B <bench line>") collect them. Each bench line has the mean over all bursts
# (`added=`, `timestamp(rdtsc)=`) and, after "best burst:", the fastest burst's.

def hot_runs(path, want_lib):
    """{(hook, mode, record): {round: (mean_added, mean_clock, best_added, best_clock)}}"""
    runs = collections.defaultdict(dict)
    for line in open(path):
        if "mode=" not in line or "best burst:" not in line:
            continue
        lib = re.search(r"\blib=(\w+)", line)
        if want_lib and lib and lib.group(1) != want_lib:
            continue
        rnd = int(num(r"\bround=(\d+)", line, 0))
        bench = re.search(r"\bbench=(\w+)", line)
        bench = bench.group(1) if bench else ("verbs_hotpath" if "post_send" in line else "hotpath")
        mode = re.findall(r"\bmode=(\w+)", line)[-1]
        record = re.search(r"\brecord=(yes|no)", line).group(1) == "yes"
        head, _, best = line.partition("best burst:")
        adds = [float(x) for x in re.findall(r"added=(-?[0-9.]+)", head)]
        clock = num(r"timestamp\(\w+\)=(-?[0-9.]+)", head)
        best_adds = [float(x) for x in re.findall(r"added=(-?[0-9.]+)", best)]
        best_clock = num(r"timestamp=(-?[0-9.]+)", best)
        hooks = ["generic"] if bench == "hotpath" else ["post_send", "poll_cq"]
        for i, hook in enumerate(hooks):
            runs[(hook, mode, record)][rnd] = (adds[i], clock, best_adds[i], best_clock)
    return runs


HOT_CLAIMS = [
    # (claim, target ns, kind, hook, mode, record, against: mode subtracted, paired by round)
    ("aggregate, generic hook: added per call", 3, "added", "generic", "aggregate", False),
    ("aggregate, verbs post_send: added per call", 3, "added", "post_send", "aggregate", False),
    ("simple without a record − aggregate, generic hook", 1, "delta", "generic", "simple", False),
    ("simple without a record − aggregate, verbs post_send", 1, "delta", "post_send", "simple", False),
    ("full without a record − aggregate, generic hook", 1, "delta", "generic", "full", False),
    ("full without a record − aggregate, verbs poll_cq", 1, "delta", "poll_cq", "full", False),
    ("simple with a record: added − clock, generic hook", 6, "clock", "generic", "simple", True),
    ("full with a record: added − clock, generic hook", 6, "clock", "generic", "full", True),
    ("simple with a record: added − clock, verbs post_send", 6, "clock", "post_send", "simple", True),
    ("full with a record: added − clock, verbs poll_cq", 6, "clock", "poll_cq", "full", True),
    ("simple without a record, generic hook: added per call (issue 2)", 15, "added", "generic", "simple", False),
]


def claim_values(runs, kind, hook, mode, record):
    """Per round: (value from the means over all bursts, value from the fastest bursts)."""
    cur = runs.get((hook, mode, record), {})
    out = []
    for rnd, (a, c, ba, bc) in sorted(cur.items()):
        if kind == "added":
            out.append((a, ba))
        elif kind == "clock":
            out.append((a - c, ba - bc))
        else:  # delta against aggregate of the same round (same library)
            agg = runs.get((hook, "aggregate", False), {}).get(rnd)
            if agg:
                out.append((a - agg[0], ba - agg[2]))
    return out


def verdict(value, target):
    return "met" if value <= target else "**not met**"


def cmd_hotpath(a):
    runs = hot_runs(a.file, a.lib)
    if not runs:
        sys.exit("no hot-path runs in %s" % a.file)
    n = max(len(v) for v in runs.values())
    print("Per run: the mean over all its bursts (what a traced program pays), and its fastest burst; "
          "across the %d runs the median (min–max). Verdict on the mean over all bursts." % n)
    print()
    print("| claim | target | all bursts: median of runs (min–max) | fastest burst: median of runs "
          "| verdict (all bursts) | runs within target |")
    print("|---|---|---|---|---|---|")
    for claim, target, kind, hook, mode, record in HOT_CLAIMS:
        vs = claim_values(runs, kind, hook, mode, record)
        if not vs:
            continue
        mean = [v[0] for v in vs]
        best = [v[1] for v in vs]
        sign = "%+.2f" if kind == "delta" else "%.2f"
        print("| %s | ≤ %d ns | %s ns (%s – %s) | %s ns | %s | %d of %d |" % (
            claim, target, sign % med(mean), sign % min(mean), sign % max(mean), sign % med(best),
            verdict(med(mean), target), sum(1 for x in mean if x <= target), len(mean)))
    clocks = [v[1] for r in runs.values() for v in r.values() if v[1] is not None]
    bclocks = [v[3] for r in runs.values() for v in r.values() if v[3] is not None]
    print()
    print("Clock (`rdtsc`) timed in the same bursts: all bursts %.2f–%.2f ns (median %.2f), "
          "fastest bursts %.2f–%.2f ns (median %.2f)." % (
              min(clocks), max(clocks), med(clocks), min(bclocks), max(bclocks), med(bclocks)))
    # Against the other build, when the file alternates two (hotpath_ab.sh).
    old = hot_runs(a.file, "old") if a.lib else {}
    if not old or old == runs:
        return
    print()
    print("New − old, paired by round: median of the differences, and how many rounds new was slower.")
    print()
    print("| hook | configuration | all bursts: new − old | rounds slower | fastest bursts: new − old | rounds slower |")
    print("|---|---|---|---|---|---|")
    for hook in ("generic", "post_send", "poll_cq"):
        for mode, record in (("aggregate", False), ("simple", False), ("full", False),
                             ("simple", True), ("full", True)):
            nw, ol = runs.get((hook, mode, record), {}), old.get((hook, mode, record), {})
            rs = sorted(set(nw) & set(ol))
            if not rs:
                continue
            dm = [nw[r][0] - ol[r][0] for r in rs]
            db = [nw[r][2] - ol[r][2] for r in rs]
            print("| %s | %s%s | %+.2f ns | %d/%d | %+.2f ns | %d/%d |" % (
                hook, mode, " + record" if record else "", med(dm), sum(x > 0 for x in dm), len(rs),
                med(db), sum(x > 0 for x in db), len(rs)))


# ---------------------------------------------------------------------------------------------
# Floor: benches/hotpath_floor.sh keeps only each run's fastest burst ("round=R lib=L best burst:
# added=X"); when a line carries the whole bench line (`added=` before "best burst:") its mean over
# all bursts is used too.

def cmd_floor(a):
    best, mean = collections.OrderedDict(), collections.OrderedDict()
    for line in open(a.file):
        m = re.search(r"lib=(\S+)", line)
        if not m or "best burst:" not in line:
            continue
        head, _, tail = line.partition("best burst:")
        best.setdefault(m.group(1), []).append(num(r"added=(-?[0-9.]+)", tail))
        hm = num(r"added=(-?[0-9.]+)", head)
        if hm is not None:
            mean.setdefault(m.group(1), []).append(hm)
    print("| library | all bursts: median of runs (min–max) | fastest burst: median of runs (min–max) | runs |")
    print("|---|---|---|---|")
    for lib, v in best.items():
        mv = mean.get(lib)
        cell = "%.2f (%.2f – %.2f) ns" % (med(mv), min(mv), max(mv)) if mv else "not in the raw file"
        print("| %s | %s | %.2f (%.2f – %.2f) ns | %d |" % (lib, cell, med(v), min(v), max(v), len(v)))


# ---------------------------------------------------------------------------------------------
# End-to-end: the CSV of benches/overhead.py; the same paired verdicts it prints (same seed, same
# order), from the file alone.

def cmd_overhead(a):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import overhead  # noqa: E402  (benches/overhead.py: the one definition of the verdict)
    data = collections.OrderedDict()
    for line in open(a.file):
        m = re.match(r'"(.*)","(.*)",(\d+),(.*)$', line.strip())
        if not m or m.group(4) == "None":
            continue
        data.setdefault(m.group(1), collections.OrderedDict()).setdefault(m.group(2), {})[
            int(m.group(3))] = float(m.group(4))
    rng = random.Random(15)
    labels = [l for l in next(iter(data.values())) if l != "untraced"]
    print("Paired overhead per repetition against the same repetition's untraced run: median "
          "[90 % bootstrap interval], target, verdict; n = pairs.")
    print()
    print("| benchmark | " + " | ".join(labels) + " |")
    print("|---" * (len(labels) + 1) + "|")
    for name, by_cfg in data.items():
        higher_better = "(MB/s)" in name
        base = by_cfg["untraced"]
        cells = []
        for label in labels:
            reps = sorted(set(by_cfg.get(label, {})) & set(base))
            pairs = [overhead.overhead_pct(base[r], by_cfg[label][r], higher_better) for r in reps]
            if len(pairs) < 3:
                cells.append("too few pairs (%d)" % len(pairs))
                continue
            mode = label.split(" ")[0]
            target = overhead.TARGETS[mode]
            m, low, high, v = overhead.paired_verdict(pairs, target, rng)
            cells.append("%+.2f %% [%+.2f, %+.2f] ≤ %.1f %%: %s (n=%d)" % (m, low, high, target, v,
                                                                           len(pairs)))
        print("| %s | %s |" % (name, " | ".join(cells)))


# ---------------------------------------------------------------------------------------------
# Export: benches/devvm_export.sh writes "run=... key=value ..." lines.

def kv(line):
    return dict(re.findall(r"(\w+)=(\S+)", line))


def cmd_export(a):
    """benches/devvm_export.sh and benches/devvm_export_rate.sh output: one row per (binary, what)
    with medians over its runs; with floor-read and floor-write runs, the floor (their medians
    added) as the last row."""
    rec, runs = {}, collections.OrderedDict()
    for line in open(a.file):
        d = kv(line)
        if line.startswith("record "):
            rec = d
        elif line.startswith("run "):
            runs.setdefault((d.get("bin", ""), d["what"]), []).append(d)
    if rec:
        ev, by = int(rec["events"]), int(rec["bytes"])
        print("Record: %s events in %s bytes on disk = **%.2f bytes per event** (%s)." % (
            format(ev, ","), format(by, ","), by / ev, rec.get("workload", "")))
        if "trace_bytes" in rec:
            print("Perfetto trace: %s bytes (%.1f per event)." % (
                format(int(rec["trace_bytes"]), ","), int(rec["trace_bytes"]) / ev))
        print()
    bins = any(b for b, _ in runs)
    print("| %swhat | runs | wall, median (min–max) | CPU user + sys, median (user, sys) "
          "| events/s per wall second, median | events/s per CPU second (per core), median | peak RSS, max |"
          % ("binary | " if bins else ""))
    print("|---|---|---|---|---|---|---|" + ("---|" if bins else ""))
    ev = int(rec["events"]) if rec else None

    def rate(secs):
        return "%.1f M" % (ev / secs / 1e6) if ev and secs > 0 else "-"

    for (b, what), rs in runs.items():
        wall = [float(r["wall_s"]) for r in rs]
        cpu = [float(r["user_s"]) + float(r["sys_s"]) for r in rs]
        user = [float(r["user_s"]) for r in rs]
        sys_ = [float(r["sys_s"]) for r in rs]
        rss = [int(r["rss_kb"]) for r in rs]
        print("| %s%s | %d | %.2f s (%.2f–%.2f) | %.2f s (%.2f, %.2f) | %s | %s | %.0f MB |" % (
            (b + " | ") if bins else "", what, len(rs), med(wall), min(wall), max(wall), med(cpu),
            med(user), med(sys_), rate(med(wall)), rate(med(cpu)), max(rss) / 1024))
    fr, fw = runs.get(("-", "floor-read")), runs.get(("-", "floor-write"))
    if fr and fw:
        wall = med([float(r["wall_s"]) for r in fr]) + med([float(r["wall_s"]) for r in fw])
        cpu = med([float(r["user_s"]) + float(r["sys_s"]) for r in fr]) + \
            med([float(r["user_s"]) + float(r["sys_s"]) for r in fw])
        print("| %sfloor = read + write (medians added) | %d | %.2f s | %.2f s | %s | %s | - |" % (
            "- | " if bins else "", min(len(fr), len(fw)), wall, cpu, rate(wall), rate(cpu)))


# ---------------------------------------------------------------------------------------------
# UCX hooks: benches/ucx_hotpath.c runs, "round=R lib=L mode=M ... mean_ns=X fastest_ns=Y";
# added = traced − the untraced run of the same round.

def cmd_ucx(a):
    runs = collections.defaultdict(dict)
    for line in open(a.file):
        d = kv(line)
        if "mean_ns" in d:
            runs[(d["lib"], d["mode"])][int(d["round"])] = (float(d["mean_ns"]), float(d["fastest_ns"]))
    base = runs.get(("none", "untraced"), {})
    print("| library | mode | ns per iteration, all bursts: median of runs (min – max) | fastest | "
          "added vs untraced, paired by round: all bursts | fastest | runs |")
    print("|---|---|---|---|---|---|---|")
    for (lib, mode), rs in runs.items():
        mean = [v[0] for v in rs.values()]
        best = [v[1] for v in rs.values()]
        rr = sorted(set(rs) & set(base))
        am = [rs[r][0] - base[r][0] for r in rr]
        ab = [rs[r][1] - base[r][1] for r in rr]
        added = ("%+.2f ns" % med(am), "%+.2f ns" % med(ab)) if rr and lib != "none" else ("", "")
        print("| %s | %s | %.2f (%.2f – %.2f) | %.2f | %s | %s | %d |" % (
            lib, mode, med(mean), min(mean), max(mean), med(best), added[0], added[1], len(rs)))


# ---------------------------------------------------------------------------------------------
# Dashboard and many hosts: benches/devvm_tui.sh output (the ignored benches' own lines). Each
# figure is a whole run's (CPU over the run's wall time, per tick the mean over all windows).

def cmd_tui(a):
    rows = []
    windows = []
    test = None

    def row(fig, val, target, ok):
        rows.append((test, fig, val, target, "" if ok is None else ("met" if ok else "**not met**")))

    for line in open(a.file):
        if line.startswith("test "):
            test = line.split()[1]
            windows = []
        m = re.search(r"DASHBOARD 4096: (\d+) endpoint rows, (\d+) frames in ([0-9.]+)s \(([0-9.]+) Hz\).*"
                      r"CPU ([0-9.]+)% of one core, peak RSS ([0-9.]+) MB", line)
        if m:
            cpu, rss = float(m.group(5)), float(m.group(6))
            row("%s rows at %s Hz: CPU of one core" % (m.group(1), m.group(4)), "%.2f %%" % cpu, "≤ 2 %", cpu <= 2)
            row("the same: peak RSS", "%.1f MB" % rss, "≤ 100 MB", rss <= 100)
        m = re.search(r"DASHBOARD 1M events/s: .*dropped (\d+) \(([0-9.]+)%\).*CPU ([0-9.]+)% of one core, "
                      r"peak RSS ([0-9.]+) MB", line)
        if m:
            row("1 M sampled events/s: events dropped", "%s (%s %%)" % (m.group(1), m.group(2)), "0", int(m.group(1)) == 0)
            row("the same: dashboard thread CPU", "%s %%" % m.group(3), "", None)
            row("the same: peak RSS", "%s MB" % m.group(4), "", None)
        m = re.search(r"DASHBOARD build_view: .* of (\d+) rows \(([0-9.]+) ms of CPU\)", line)
        if m:
            row("build_view of %s rows, CPU per build (mean of 200)" % m.group(1), "%s ms" % m.group(2), "", None)
        m = re.search(r"DASHBOARD draw: ([0-9.]+) ms of CPU per frame", line)
        if m:
            row("draw of the QPs tab, CPU per frame (mean of 200)", "%s ms" % m.group(1), "", None)
        m = re.search(r"ticks +\d+- *\d+ .*merge ([0-9.]+) ms, build ([0-9.]+) ms, draw ([0-9.]+) ms = "
                      r"([0-9.]+) % of a core at 4 Hz; RSS ([0-9.]+) MB", line)
        if m:
            windows.append(tuple(float(x) for x in m.groups()))
        m = re.search(r"MERGE PER TICK .*qp-every (\d+), (\d+) ticks", line)
        if m and windows:
            pct = [w[3] for w in windows]
            mean = statistics.mean(pct)
            row("per tick, qp-every %s, %s ticks: merge + build + draw, mean of all %d windows (min – max)" % (
                m.group(1), m.group(2), len(windows)), "%.1f %% (%.1f – %.1f); merge %.2f ms, build %.2f ms, "
                "draw %.2f ms" % (mean, min(pct), max(pct), statistics.mean(w[0] for w in windows),
                                  statistics.mean(w[1] for w in windows), statistics.mean(w[2] for w in windows)),
                "≤ 5 %", mean <= 5)
            row("the same: RSS at the end", "%.0f MB" % windows[-1][4], "≤ 300 MB", windows[-1][4] <= 300)
        m = re.search(r"^MERGE \d+ hosts.*: (\d+) frames in ([0-9.]+) s \(([0-9.]+) Hz\), dashboard thread "
                      r"([0-9.]+) % of one core, peak RSS ([0-9.]+) MB", line)
        if m:
            cpu, rss = float(m.group(4)), float(m.group(5))
            row("256 hosts at 4 Hz, %s s wall clock (%s frames/s): dashboard thread CPU" % (m.group(2), m.group(3)),
                "%.1f %%" % cpu, "≤ 5 %", cpu <= 5)
            row("the same: peak RSS", "%.0f MB" % rss, "≤ 300 MB", rss <= 300)
        m = re.search(r"SERVE .*response (\d+) bytes, scrape median ([0-9.]+) ms, max ([0-9.]+) ms; serve (.*)", line)
        if m:
            row("serve: scrape of 64 processes with --qp-metrics (%s bytes)" % m.group(1),
                "median %s ms, max %s ms" % (m.group(2), m.group(3)), "", None)
            row("serve: memory", " ".join(m.group(4).split()), "", None)
        m = re.search(r"RELAY: .*: ([0-9]+) bytes/s per process", line)
        if m:
            row("relay: bytes per second per traced process", m.group(1), "", None)
    print("| test | figure | value | target | verdict |")
    print("|---|---|---|---|---|")
    for r in rows:
        print("| %s | %s | %s | %s | %s |" % r)


# ---------------------------------------------------------------------------------------------
# Fig. 5 / 6 on the H200 (tests/gpu/nccl_device.sh fig5): one nccl-tests JSON (-I 1 -J) per run,
# DIR/fig5.npN.SIZE.MODE.rR.json, with every iteration's time (out-of-place and in-place).

FIG5_TARGETS = {"aggregate": 0.5, "simple": 0.5, "full": 5.0}


def fig5_runs(d):
    runs = {}
    for f in sorted(os.listdir(d)):
        m = re.fullmatch(r"fig5\.np(\d+)\.(\w+)\.(base|aggregate|simple|full)\.r(\d+)\.json", f)
        if not m:
            continue
        import json
        j = json.load(open(os.path.join(d, f)))
        times = []
        for r in j["results"]:
            for k in ("out_of_place_per_iter", "in_place_per_iter"):
                times += r.get(k, {}).get("times_us", [])
        if times:
            runs[(int(m.group(1)), m.group(2), m.group(3), int(m.group(4)))] = times
    return runs


def cmd_fig5(a):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import overhead  # noqa: E402  (the paired verdict of the end-to-end benchmarks)
    runs = fig5_runs(a.file)
    rec = {}
    rb = os.path.join(a.file, "record_bytes.txt")
    if os.path.exists(rb):
        for line in open(rb):
            f = line.split()
            m = re.fullmatch(r"fig5\.np(\d+)\.(\w+)\.(\w+)\.r(\d+)", f[0])
            if m and len(f) == 2:
                rec.setdefault((int(m.group(1)), m.group(2), m.group(3)), []).append(int(f[1]))
    rng = random.Random(24)
    rounds = sorted({k[3] for k in runs})
    print("Per run: the median of its per-iteration times (nccl-tests -I 1, out-of-place and "
          "in-place); per configuration: the median of the %d rounds' run medians (min - max); "
          "overhead: the median of the per-round paired overheads against the same round's "
          "untraced run, [90 %% bootstrap interval], verdict as overhead.py gives it." % len(rounds))
    print()
    print("| ranks | size | mode | iterations per run | median time per collective | overhead (paired by round) | target | verdict | record per run |")
    print("|---|---|---|---|---|---|---|---|---|")
    for np_ in sorted({k[0] for k in runs}):
        for size in sorted({k[1] for k in runs}, key=lambda s: int(s[:-1]) * (1 << 20 if s[-1] == "M" else 1 << 10)):
            base = {r: med(runs[(np_, size, "base", r)]) for r in rounds if (np_, size, "base", r) in runs}
            for mode in ("base", "aggregate", "simple", "full"):
                rm = {r: med(runs[(np_, size, mode, r)]) for r in rounds if (np_, size, mode, r) in runs}
                if not rm:
                    continue
                n_it = sorted({len(runs[(np_, size, mode, r)]) for r in rm})
                vals = sorted(rm.values())
                cell = "%.1f µs (%.1f - %.1f)" % (med(vals), vals[0], vals[-1])
                rb_ = rec.get((np_, size, mode))
                rcell = "%.1f MB" % (med(rb_) / 1e6) if rb_ else "-"
                if mode == "base":
                    print("| %d | %s | untraced | %s | %s | | | | %s |" % (np_, size, "/".join(map(str, n_it)), cell, rcell))
                    continue
                pairs = [(rm[r] / base[r] - 1.0) * 100.0 for r in rm if r in base]
                target = FIG5_TARGETS[mode]
                m, low, high, v = overhead.paired_verdict(pairs, target, rng)
                print("| %d | %s | %s | %s | %s | %+.2f %% [%+.2f, %+.2f] (n=%d) | ≤ %.1f %% | %s | %s |" % (
                    np_, size, mode, "/".join(map(str, n_it)), cell, m, low, high, len(pairs), target, v, rcell))
    # Pooled within the sitting: every iteration of every round, median against median.
    print()
    print("Pooled: the median of all iterations of all rounds, traced against untraced, with a 90 %"
          " bootstrap interval over iterations (resampled per round).")
    print()
    print("| ranks | size | mode | iterations | median µs | untraced median µs | overhead [90 %] |")
    print("|---|---|---|---|---|---|---|")
    for np_ in sorted({k[0] for k in runs}):
        for size in sorted({k[1] for k in runs}, key=lambda s: int(s[:-1]) * (1 << 20 if s[-1] == "M" else 1 << 10)):
            b = [t for r in rounds for t in runs.get((np_, size, "base", r), [])]
            for mode in ("aggregate", "simple", "full"):
                x = [t for r in rounds for t in runs.get((np_, size, mode, r), [])]
                if not x or not b:
                    continue
                o = (med(x) / med(b) - 1) * 100
                boots = sorted((med(rng.choices(x, k=len(x))) / med(rng.choices(b, k=len(b))) - 1) * 100
                               for _ in range(400))
                print("| %d | %s | %s | %d | %.1f | %.1f | %+.2f %% [%+.2f, %+.2f] |" % (
                    np_, size, mode, len(x), med(x), med(b), o, boots[20], boots[379]))


# ---------------------------------------------------------------------------------------------
# NCCL's proxy calls under callgrind (benches/nccl_proxy_callgrind.sh): instructions per call.

def cmd_proxy(a):
    rows = collections.OrderedDict()
    raw = {}
    for line in open(a.file):
        if not line.startswith("mode="):
            continue
        k = kv(line)
        key = (k["role"], k["call"])
        rows.setdefault(key, {})[(k["mode"], k["rec"])] = float(k["ir_per_call"])
        if k["call"] == "poll":
            raw.setdefault((k["role"], k["mode"], k["rec"]), {})["poll"] = (
                int(k["ir"]), int(k["calls"]), int(k["empty_in_waits"]))
        if k["call"] == "poll_empty":
            raw.setdefault((k["role"], k["mode"], k["rec"]), {})["empty"] = float(k["ir_per_call"])
    # A poll that returned completions: the waits' polls less their empty ones at the empty
    # phase's cost per poll.
    for (role, mode, rec), v in raw.items():
        if "poll" in v and "empty" in v:
            ir, calls, empty = v["poll"]
            if calls > empty:
                rows.setdefault((role, "poll returning completions"), {})[(mode, rec)] = (
                    (ir - empty * v["empty"]) / (calls - empty))
    cfgs = [("aggregate", "none"), ("simple", "none"), ("full", "none"), ("simple", "rec"), ("full", "rec")]
    print("Instructions per call (callgrind, the call's wrapper function inclusive: provider + "
          "sigmatop); added = traced - untraced.")
    print()
    print("| role | call | untraced | " + " | ".join("%s%s" % (m, " + record" if r == "rec" else "") for m, r in cfgs) + " |")
    print("|---" * (3 + len(cfgs)) + "|")
    for (role, call), by in rows.items():
        if call == "poll":
            continue  # empty and completed polls together: split into the two rows
        b = by.get(("base", "none"))
        if b is None:
            continue
        cells = ["%+.0f" % (by[c] - b) if c in by else "-" for c in cfgs]
        print("| %s | %s | %.0f | %s |" % (role, call, b, " | ".join(cells)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("hotpath")
    p.add_argument("file")
    p.add_argument("--lib", default=None, help="only runs of this library (hotpath_ab.sh: old / new)")
    p.set_defaults(fn=cmd_hotpath)
    for name, fn in (("floor", cmd_floor), ("overhead", cmd_overhead), ("ucx", cmd_ucx), ("tui", cmd_tui), ("export", cmd_export), ("fig5", cmd_fig5), ("proxy", cmd_proxy)):
        p = sub.add_parser(name)
        p.add_argument("file")
        p.set_defaults(fn=fn)
    a = ap.parse_args()
    a.fn(a)


if __name__ == "__main__":
    main()
