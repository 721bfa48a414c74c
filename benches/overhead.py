#!/usr/bin/env python3
"""End-to-end overhead of sigmatop on real benchmarks: untraced, aggregate, simple and full mode, each
traced mode with and without a record (SIGMATOP_RECORD; users of `--record` pay for it), alternated
within one invocation (the order rotates every repetition), medians and spread of N each.

Usage: python3 benches/overhead.py [--reps 7] [--preload target/release/libsigmatop_preload.so]
           [--no-record] [--only NAME] [--scale 1.0] [--record-dir DIR] [--csv FILE]
           [--pin SERVER_CPUS:CLIENT_CPUS] [--compare OTHER.so]
Both sides of each pair are traced (as a job would be); with a record both write into one record
root (one directory per process), removed after each run. --scale multiplies every benchmark's
iteration count (for a quick trial). Prints a Markdown table for BENCHMARKS.md: per benchmark and
configuration the median, the spread (min–max) and the slowdown against untraced (bandwidth lost,
latency added); --csv writes every run's value.

A second table judges each cell against its target (aggregate 0.5 %, simple 1 %, full 5 %, with
or without a record) from paired runs: each repetition runs every configuration back to back, so
the overhead of a repetition is its configuration against the untraced run of the same
repetition (slow drifts of the machine cancel). Per cell: the median of those paired overheads
and a 90 % bootstrap interval of that median; "met" when the whole interval is within the target,
"not met" when the whole interval is above it, "not confirmed" when the interval straddles it.

--compare OTHER.so adds aggregate / simple / full runs of a second library (an older build),
labelled "[before]", alternated with the others in the same repetitions: a change is judged
against its predecessor on the same machine in the same sitting.

--pin runs the server and the client under `taskset -c` on the CPU lists given (for example
2,3:4,5): each process keeps one CPU for its busy-polling thread and one for sigmatop's collector,
and the scheduler no longer moves the pair across cores or sockets between runs, the main source
of spread on a many-core host.
"""
import argparse
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

# (label, mode, record)
CONFIGS = [
    ("untraced", "off", False),
    ("aggregate", "aggregate", False),
    ("aggregate + record", "aggregate", True),
    ("simple", "simple", False),
    ("simple + record", "simple", True),
    ("full", "full", False),
    ("full + record", "full", True),
]


def env_for(mode, preload, tmp, record):
    if "=" in mode:
        # "MODE=PATH": a configuration of the --compare library.
        mode, preload = mode.split("=", 1)
    e = dict(os.environ)
    for k in list(e):
        if k.startswith("SIGMATOP_"):
            del e[k]
    e.pop("LD_PRELOAD", None)
    if mode != "off":
        e["LD_PRELOAD"] = preload
        e["SIGMATOP_MODE"] = mode
        e["SIGMATOP_SOCKET_DIR"] = os.path.join(tmp, "sock")
        if record:
            e["SIGMATOP_RECORD"] = record
    return e


def wait_port(port, limit=10.0):
    end = time.time() + limit
    hexport = ":%04X" % port
    while time.time() < end:
        for f in ("/proc/net/tcp", "/proc/net/tcp6"):
            try:
                for line in open(f).read().splitlines()[1:]:
                    parts = line.split()
                    if parts[1].endswith(hexport) and parts[3] == "0A":
                        return
            except OSError:
                pass
        time.sleep(0.01)
    raise RuntimeError("server did not listen on %d" % port)


PORT = [24000 + os.getpid() % 1000 * 7]
# (server prefix, client prefix): `taskset -c CPUS` when --pin is given.
PIN = [[], []]

# Targets per traced mode (issue 2 / 15): slowdown against untraced, in percent.
TARGETS = {"aggregate": 0.5, "simple": 1.0, "full": 5.0}


def next_port():
    PORT[0] += 1
    return PORT[0]


def ucx(test, size, n, tls, metric):
    def run(env, scale):
        port = next_port()
        env = dict(env, UCX_TLS=tls)
        srv = subprocess.Popen(PIN[0] + ["ucx_perftest", "-p", str(port)], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_port(port)
            out = subprocess.run(PIN[1] + ["ucx_perftest", "127.0.0.1", "-p", str(port), "-t", test, "-s",
                                  str(size), "-n", str(max(1000, int(n * scale)))], env=env,
                                 capture_output=True, text=True, timeout=300)
            srv.wait(timeout=60)
        finally:
            if srv.poll() is None:
                srv.kill()
                srv.wait()
        line = [l for l in out.stdout.splitlines() if l.startswith("Final:")]
        if out.returncode != 0 or not line:
            raise RuntimeError("ucx_perftest failed: %s" % out.stderr[-500:])
        f = line[0].split()
        # Final: iters lat50 lat_avg lat_overall bw_avg bw_overall rate_avg rate_overall
        return float(f[4]) if metric == "lat_us" else float(f[6])
    return run


def fi_pingpong(prov, ep, size, iters):
    def run(env, scale):
        port = next_port()
        args = ["-p", prov, "-e", ep, "-I", str(max(1000, int(iters * scale))), "-S", str(size)]
        srv = subprocess.Popen(PIN[0] + ["fi_pingpong", "-B", str(port)] + args, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            time.sleep(0.3)
            out = subprocess.run(PIN[1] + ["fi_pingpong", "-P", str(port)] + args + ["127.0.0.1"], env=env,
                                 capture_output=True, text=True, timeout=300)
            srv.wait(timeout=60)
        finally:
            if srv.poll() is None:
                srv.kill()
                srv.wait()
        rows = [l.split() for l in out.stdout.splitlines() if re.match(r"^\d+[kmg]?\s", l)]
        if out.returncode != 0 or not rows:
            raise RuntimeError("fi_pingpong failed: %s %s" % (out.stdout[-300:], out.stderr[-300:]))
        return float(rows[-1][5])  # MB/sec
    return run


CASES = [
    ("ucx_perftest tag_bw 64 KiB, UCX_TLS=shm,self (MB/s)", ucx("tag_bw", 65536, 200000, "shm,self", "bw"), True),
    ("ucx_perftest ucp_put_bw 64 KiB, UCX_TLS=shm,self (MB/s)", ucx("ucp_put_bw", 65536, 200000, "shm,self", "bw"), True),
    ("fi_pingpong shm rdm 64 KiB (MB/s)", fi_pingpong("shm", "rdm", 65536, 50000), True),
    ("ucx_perftest tag_lat 8 B, UCX_TLS=shm,self (µs per op)", ucx("tag_lat", 8, 2000000, "shm,self", "lat_us"), False),
]


def overhead_pct(base, v, higher_better):
    """Slowdown of `v` against `base` in percent: bandwidth lost, or latency added."""
    return (base / v - 1.0) * 100.0 if higher_better else (v / base - 1.0) * 100.0


def paired_verdict(pairs, target, rng):
    """(median, low, high, verdict) of the paired overheads `pairs` against `target` (percent):
    a 90 % percentile-bootstrap interval of the median."""
    med = statistics.median(pairs)
    boots = sorted(statistics.median(rng.choices(pairs, k=len(pairs))) for _ in range(2000))
    low, high = boots[int(0.05 * len(boots))], boots[int(0.95 * len(boots)) - 1]
    if high <= target:
        verdict = "met"
    elif low > target:
        verdict = "**not met**"
    else:
        verdict = "not confirmed"
    return med, low, high, verdict


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--preload", default="target/release/libsigmatop_preload.so")
    ap.add_argument("--only", default="", help="run only the benchmarks whose name contains this")
    ap.add_argument("--no-record", action="store_true", help="leave out the recording configurations")
    ap.add_argument("--scale", type=float, default=1.0, help="multiplies every iteration count")
    ap.add_argument("--record-dir", default=None, help="where records are written (default: a "
                    "temporary directory); each run's record is removed after it")
    ap.add_argument("--csv", default=None, help="also write every run's value here")
    ap.add_argument("--pin", default=None, help="SERVER_CPUS:CLIENT_CPUS for taskset -c")
    ap.add_argument("--compare", default=None, help="a second preload library, run as [before]")
    a = ap.parse_args()
    if a.pin:
        parts = a.pin.split(":")
        if len(parts) != 2 or not all(parts) or shutil.which("taskset") is None:
            sys.exit("--pin wants SERVER_CPUS:CLIENT_CPUS (for example 2,3:4,5) and taskset")
        PIN[0], PIN[1] = ["taskset", "-c", parts[0]], ["taskset", "-c", parts[1]]
    preload = os.path.abspath(a.preload)
    if not os.path.isfile(preload):
        sys.exit("build first: cargo build --release --workspace (%s missing)" % preload)
    configs = [c for c in CONFIGS if not (a.no_record and c[2])]
    if a.compare:
        other = os.path.abspath(a.compare)
        if not os.path.isfile(other):
            sys.exit("--compare: %s does not exist" % other)
        configs += [("%s [before]" % m, "%s=%s" % (m, other), False)
                    for m in ("aggregate", "simple", "full")]
    csv = open(a.csv, "w") if a.csv else None
    if csv:
        csv.write("benchmark,configuration,rep,value\n")
    print("| benchmark | " + " | ".join(c[0] for c in configs) + " |")
    print("|---" * (len(configs) + 1) + "|")
    verdicts = []
    for name, run, higher_better in CASES:
        if a.only and a.only not in name:
            continue
        res = {c[0]: [] for c in configs}
        by_rep = {c[0]: {} for c in configs}
        with tempfile.TemporaryDirectory() as tmp:
            rec_root = a.record_dir or os.path.join(tmp, "rec")
            for rep in range(a.reps):
                k = rep % len(configs)
                for label, mode, record in configs[k:] + configs[:k]:
                    rec = os.path.join(rec_root, "run") if record else None
                    if rec:
                        shutil.rmtree(rec, ignore_errors=True)
                    try:
                        v = run(env_for(mode, preload, tmp, rec), a.scale)
                    except (RuntimeError, subprocess.TimeoutExpired, OSError) as e:
                        # One failed run leaves a gap (counted in the table), not a lost table.
                        print("%s, %s, repetition %d failed: %s" % (name, label, rep, e),
                              file=sys.stderr, flush=True)
                        v = None
                    if rec:
                        shutil.rmtree(rec, ignore_errors=True)
                    if v is not None:
                        res[label].append(v)
                        by_rep[label][rep] = v
                    if csv:
                        csv.write('"%s","%s",%d,%s\n' % (name, label, rep, v))
                        csv.flush()
        med = {k: statistics.median(v) for k, v in res.items() if v}
        base = med.get("untraced")
        cells = []
        for label, _, _ in configs:
            v = res[label]
            if not v:
                cells.append("all %d runs failed" % a.reps)
                continue
            cell = "%.2f (%.2f–%.2f)" % (med[label], min(v), max(v))
            if len(v) < a.reps:
                cell += " [%d of %d runs failed]" % (a.reps - len(v), a.reps)
            if label != "untraced" and base:
                over = overhead_pct(base, med[label], higher_better)
                cell += " %+.2f %%" % over
            cells.append(cell)
        print("| %s | %s |" % (name, " | ".join(cells)), flush=True)
        verdicts.append((name, higher_better, by_rep))
    # The paired judgement, one row per benchmark.
    rng = random.Random(15)
    traced = [c for c in configs if c[0] != "untraced"]
    print()
    print("Paired overhead per repetition against the same repetition's untraced run: median "
          "[90 % bootstrap interval], target, verdict.")
    print()
    print("| benchmark | " + " | ".join(c[0] for c in traced) + " |")
    print("|---" * (len(traced) + 1) + "|")
    for name, higher_better, by_rep in verdicts:
        cells = []
        for label, mode, _ in traced:
            reps = sorted(set(by_rep[label]) & set(by_rep["untraced"]))
            pairs = [overhead_pct(by_rep["untraced"][r], by_rep[label][r], higher_better)
                     for r in reps]
            if len(pairs) < 3:
                cells.append("too few pairs (%d)" % len(pairs))
                continue
            target = TARGETS[mode.split("=", 1)[0]]
            med, low, high, verdict = paired_verdict(pairs, target, rng)
            cells.append("%+.2f %% [%+.2f, %+.2f] ≤ %.1f %%: %s" % (med, low, high, target,
                                                                   verdict))
        print("| %s | %s |" % (name, " | ".join(cells)), flush=True)


if __name__ == "__main__":
    main()
