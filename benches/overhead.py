#!/usr/bin/env python3
"""End-to-end overhead of sigmatop on real benchmarks, runs with and without the preload alternated
within one invocation (the order rotates every repetition), median of N each.

Usage: python3 benches/overhead.py [--reps 7] [--preload target/release/libsigmatop_preload.so]
Prints a Markdown table for BENCHMARKS.md. Both sides of each pair are traced (as a job would be).
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

MODES = ["off", "aggregate", "simple", "full"]


def env_for(mode, preload, tmp):
    e = dict(os.environ)
    for k in list(e):
        if k.startswith("SIGMATOP_"):
            del e[k]
    e.pop("LD_PRELOAD", None)
    if mode != "off":
        e["LD_PRELOAD"] = preload
        e["SIGMATOP_MODE"] = mode
        e["SIGMATOP_SOCKET_DIR"] = os.path.join(tmp, "sock")
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
    def run(env):
        port = next_port()
        env = dict(env, UCX_TLS=tls)
        srv = subprocess.Popen(["ucx_perftest", "-p", str(port)], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(port)
        out = subprocess.run(["ucx_perftest", "127.0.0.1", "-p", str(port), "-t", test, "-s", str(size),
                              "-n", str(n)], env=env, capture_output=True, text=True, timeout=120)
        srv.wait(timeout=60)
        line = [l for l in out.stdout.splitlines() if l.startswith("Final:")]
        if out.returncode != 0 or not line:
            raise RuntimeError("ucx_perftest failed: %s" % out.stderr[-500:])
        f = line[0].split()
        # Final: iters lat50 lat_avg lat_overall bw_avg bw_overall rate_avg rate_overall
        return float(f[4]) if metric == "lat_us" else float(f[6])
    return run


def fi_pingpong(prov, ep, size, iters):
    def run(env):
        port = next_port()
        args = ["-p", prov, "-e", ep, "-I", str(iters), "-S", str(size)]
        srv = subprocess.Popen(["fi_pingpong", "-B", str(port)] + args, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.3)
        out = subprocess.run(["fi_pingpong", "-P", str(port)] + args + ["127.0.0.1"], env=env,
                             capture_output=True, text=True, timeout=120)
        srv.wait(timeout=60)
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
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    preload = os.path.abspath(a.preload)
    if not os.path.isfile(preload):
        sys.exit("build first: cargo build --release --workspace (%s missing)" % preload)
    print("| benchmark | untraced | aggregate | simple | full |")
    print("|---|---|---|---|---|")
    for name, run, higher_better in CASES:
        if a.only and a.only not in name:
            continue
        res = {m: [] for m in MODES}
        with tempfile.TemporaryDirectory() as tmp:
            for rep in range(a.reps):
                order = MODES[rep % 4:] + MODES[:rep % 4]
                for m in order:
                    res[m].append(run(env_for(m, preload, tmp)))
        med = {m: statistics.median(v) for m, v in res.items()}
        cells = ["%.2f" % med["off"]]
        for m in MODES[1:]:
            if higher_better:
                over = (med["off"] / med[m] - 1.0) * 100.0
            else:
                over = (med[m] / med["off"] - 1.0) * 100.0
            cells.append("%.2f (%+.2f %%)" % (med[m], over))
        print("| %s | %s |" % (name, " | ".join(cells)), flush=True)


if __name__ == "__main__":
    main()
