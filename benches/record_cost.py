#!/usr/bin/env python3
"""What recording costs at the highest event rate (issue 15, item 5).

benches/record_rate.c calls sigmatop's hook as fast as THREADS threads can, never waiting for the
collector; in full mode with SIGMATOP_RECORD every call is one event. For each thread count this
runs, in one sitting:

  norecord  full mode without a record (the hot path's sampled events only): the call rate an
            application gets when nothing is written;
  record    full mode recording to --dir: bytes per second written, bytes per event, the
            collector thread's CPU, events lost to full rings;
  slowdisk  the same, with the collector's writes held to --slow-fraction of the bytes per second
            `record` wrote (SIGMATOP_BENCH_RECORD_BPS, a switch of the bench build: after each chunk
            the collector sleeps until its bytes fit the rate, as a write() blocks once a slow
            disk's page cache is full). The rings fill and events are lost, counted; the
            application must not slow down (its call rate and its longest 4,096-call burst).

Every run's events are accounted for exactly: events in the record (`sigmatop export --json`) +
events counted lost == calls made; the script fails when they are not.

Usage: python3 benches/record_cost.py [--threads 1,4] [--seconds 5] [--dir DIR]
           [--preload target/release/libsigmatop_preload.so] [--sigmatop target/release/sigmatop]
           [--bin target/record_rate] [--slow-fraction 0.25]
The preload must be built with `--features bench`. Prints a Markdown table.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys


def run_rate(args, threads, mode, record=None, bps=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIGMATOP_")}
    env.update(LD_PRELOAD=args.preload, SIGMATOP_MODE=mode,
               SIGMATOP_SOCKET_DIR=os.path.join(args.dir, "sock"))
    if record:
        env["SIGMATOP_RECORD"] = record
    if bps:
        env["SIGMATOP_BENCH_RECORD_BPS"] = str(int(bps))
    out = subprocess.run([args.bin, str(threads), str(args.seconds)], env=env, capture_output=True,
                         text=True, timeout=args.seconds * 10 + 120)
    if out.returncode != 0:
        sys.exit("record_rate failed (%d): %s %s" % (out.returncode, out.stdout, out.stderr))
    fields = dict(re.findall(r"(\w+)=(-?[0-9.]+)", out.stdout))
    r = {k: float(v) for k, v in fields.items()}
    if out.stderr.strip():
        r["stderr"] = out.stderr.strip()
    return r


def dir_bytes(path):
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            total += os.path.getsize(os.path.join(root, f))
    return total


def recorded_events(args, rec):
    out = subprocess.run([args.sigmatop, "export", rec, "--json", "-"], capture_output=True,
                         text=True, timeout=600)
    if out.returncode != 0:
        sys.exit("sigmatop export failed: %s" % out.stderr[-500:])
    return int(json.loads(out.stdout)["events"])


def recorded(args, threads, name, bps=None):
    rec = os.path.join(args.dir, "rec-%d-%s" % (threads, name))
    shutil.rmtree(rec, ignore_errors=True)
    r = run_rate(args, threads, "full", record=rec, bps=bps)
    r["bytes"] = dir_bytes(rec)
    r["events"] = recorded_events(args, rec)
    lost = int(r["ring_full"])
    calls = int(r["calls"])
    if r["events"] + lost != calls:
        sys.exit("%s, %d threads: %d events recorded + %d counted lost != %d calls"
                 % (name, threads, r["events"], lost, calls))
    if not args.keep:
        shutil.rmtree(rec, ignore_errors=True)
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", default="1,4")
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--dir", default="target/record-cost")
    ap.add_argument("--preload", default="target/release/libsigmatop_preload.so")
    ap.add_argument("--sigmatop", default="target/release/sigmatop")
    ap.add_argument("--bin", default="target/record_rate")
    ap.add_argument("--slow-fraction", type=float, default=0.25)
    ap.add_argument("--keep", action="store_true", help="keep the record directories")
    args = ap.parse_args()
    args.preload = os.path.abspath(args.preload)
    args.dir = os.path.abspath(args.dir)
    os.makedirs(args.dir, exist_ok=True)
    for p in (args.preload, args.sigmatop, args.bin):
        if not os.path.isfile(p):
            sys.exit("%s missing (build the preload with --features bench, sigmatop, and "
                     "gcc -O2 -pthread -o target/record_rate benches/record_rate.c -ldl)" % p)
    print("| threads | run | calls/s (all threads) | ns per call per thread | longest 4,096-call burst | "
          "MB/s written | bytes/event | collector CPU (% of a core) | events lost (ring full) | "
          "recorded + lost = calls |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for threads in [int(t) for t in args.threads.split(",")]:
        base = run_rate(args, threads, "full")
        rec = recorded(args, threads, "record")
        bps = rec["bytes"] / rec["seconds"]
        slow = recorded(args, threads, "slowdisk", bps=bps * args.slow_fraction)
        for name, r in (("no record", base), ("record", rec),
                        ("record, disk at %.0f MB/s" % (bps * args.slow_fraction / 1e6), slow)):
            written = "%.1f" % (r["bytes"] / r["seconds"] / 1e6) if "bytes" in r else "-"
            per_event = "%.2f" % (r["bytes"] / r["events"]) if r.get("events") else "-"
            lost = int(r["ring_full"])
            check = "%d + %d = %d" % (r["events"], lost, r["calls"]) if "events" in r else "-"
            print("| %d | %s | %.2f M | %.2f | %.0f µs | %s | %s | %.1f | %d (%.2f %%) | %s |" % (
                threads, name, r["calls_per_s"] / 1e6, r["mean_call_ns"], r["max_burst_us"], written,
                per_event, r["collector_cpu_pct"], lost, 100.0 * lost / max(r["calls"], 1), check),
                flush=True)


if __name__ == "__main__":
    main()
