#!/usr/bin/env python3
"""End-to-end overhead of sigmatop on real benchmarks: untraced, aggregate, simple and full mode, each
traced mode with and without a record (SIGMATOP_RECORD; users of `--record` pay for it), alternated
within one invocation (the order rotates every repetition), medians and spread of N each.

Usage: python3 benches/overhead.py [--reps 7] [--preload target/release/libsigmatop_preload.so]
           [--no-record] [--only NAME] [--scale 1.0] [--record-dir DIR] [--csv FILE]
Both sides of each pair are traced (as a job would be); with a record both write into one record
root (one directory per process), removed after each run. --scale multiplies every benchmark's
iteration count (for a quick trial). Prints a Markdown table for BENCHMARKS.md: per benchmark and
configuration the median, the spread (min–max) and the slowdown against untraced (bandwidth lost,
latency added); --csv writes every run's value.
"""
import argparse
import os
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


def next_port():
    PORT[0] += 1
    return PORT[0]


def ucx(test, size, n, tls, metric):
    def run(env, scale):
        port = next_port()
        env = dict(env, UCX_TLS=tls)
        srv = subprocess.Popen(["ucx_perftest", "-p", str(port)], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_port(port)
            out = subprocess.run(["ucx_perftest", "127.0.0.1", "-p", str(port), "-t", test, "-s",
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
        srv = subprocess.Popen(["fi_pingpong", "-B", str(port)] + args, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            time.sleep(0.3)
            out = subprocess.run(["fi_pingpong", "-P", str(port)] + args + ["127.0.0.1"], env=env,
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
    a = ap.parse_args()
    preload = os.path.abspath(a.preload)
    if not os.path.isfile(preload):
        sys.exit("build first: cargo build --release --workspace (%s missing)" % preload)
    configs = [c for c in CONFIGS if not (a.no_record and c[2])]
    csv = open(a.csv, "w") if a.csv else None
    if csv:
        csv.write("benchmark,configuration,rep,value\n")
    print("| benchmark | " + " | ".join(c[0] for c in configs) + " |")
    print("|---" * (len(configs) + 1) + "|")
    for name, run, higher_better in CASES:
        if a.only and a.only not in name:
            continue
        res = {c[0]: [] for c in configs}
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
                if higher_better:
                    over = (base / med[label] - 1.0) * 100.0
                else:
                    over = (med[label] / base - 1.0) * 100.0
                cell += " %+.2f %%" % over
            cells.append(cell)
        print("| %s | %s |" % (name, " | ".join(cells)), flush=True)


if __name__ == "__main__":
    main()
