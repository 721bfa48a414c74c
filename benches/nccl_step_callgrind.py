#!/usr/bin/env python3
"""What sigmatop costs per NCCL proxy step, in instructions, the NCCL profiler plugin's own
callbacks included (issue 38, item 7), under callgrind, on tests/programs/nccl_ring.c: the
NCCL-shaped ring all-reduce on the software mlx5 NIC (real verbs; the plugin dlopened by path and
driven in NCCL 2.28.9's order, its proxy events only where the mask init gave asks for them, as
NCCL checks).

    python3 benches/nccl_step_callgrind.py OUT NAME=PRELOAD.so [NAME=PRELOAD.so ...]
        [--ranks 4] [--channels 2] [--size 49152] [--iters 20,60] [--idle 2000]
        [--modes aggregate,simple,full]

For each preload and mode (and once untraced: `base`), and for each of the two ITERS, the ranks
run with SIGMATOP_MODE, SIGMATOP_RECORD and NCCL_PROFILER_PLUGIN=the preload (as `sigmatop run`
sets them); rank 0 runs under `valgrind --tool=callgrind --separate-threads=yes`. Per thread of
rank 0 it counts sigmatop's instructions: the self instructions of every function of the preload
(the LD_PRELOAD library: its hooks, the plugin's entry points, the runtime), plus the inclusive
instructions of the calls those functions make out of the preload other than into the verbs
libraries (libibverbs, libmlx5: the provider work a hook forwards to): libc, the dynamic loader's
TLS lookups, the vDSO. The proxy thread is the one running `proxy_thread`; the host thread is
thread 1; the rest are the NIC's and sigmatop's own threads.

Per (preload, mode), the difference between the two ITERS runs removes what does not grow with
the calls (start-up, QP setup, teardown):
  - proxy_per_step = (Δ proxy-thread instructions − empty_poll × Δ empty polls) / Δ steps:
    what sigmatop adds to the proxy thread per step, its plugin callbacks included, without the
    polls that returned nothing (their number is set by the NIC's latency, not by NCCL);
  - empty_poll = (idle_polls' inclusive instructions − untraced) / IDLE: an empty poll's price
    (rank 0 polls a CQ no QP uses IDLE times after its last call, `nccl_ring -e`);
  - host_per_call = Δ host-thread instructions / Δ calls (GroupApi, CollApi, Group, Coll events,
    the host's share);
  - nccl_drain_per_step, collector_per_step, other_per_step: sigmatop's instructions per step on
    its own threads (the one draining the plugin's queue into the record and the live tracker;
    the collector and writer) and on any other (hooks the NIC's threads run).
Prints one "run ..." line per run and one "step ..." line per (preload, mode); keeps every run's
callgrind files (gzip) and rank outputs under OUT/NAME.MODE.ITERS/.
"""
import argparse
import gzip
import os
import re
import shutil
import subprocess
import sys
import time
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VERBS_LIBS = ("libibverbs", "libmlx5")


def names():
    tables = {"fn": {}, "ob": {}, "fl": {}}
    kind_of = {"fn": "fn", "cfn": "fn", "ob": "ob", "cob": "ob"}

    def name(kind, val):
        m = re.match(r"\((\d+)\)(?: (.*))?", val)
        if not m:
            return val
        table = tables[kind_of.get(kind, "fl")]
        if m.group(2) is not None:
            table[m.group(1)] = m.group(2)
        return table.get(m.group(1), val)

    return name


def parse(path):
    """Per (object, function): self instructions, and the calls it made as
    (callee object, callee function, inclusive instructions)."""
    name = names()
    selfir = defaultdict(int)
    calls = defaultdict(int)
    cur_ob = cur_fn = None
    call_ob = call_fn = None
    pending = None
    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            k, sep, v = line.partition("=")
            if sep and k in ("ob", "fn", "cob", "cfn", "fl", "fi", "fe", "cfi", "cfl", "calls"):
                if k == "ob":
                    cur_ob = name("ob", v)
                elif k == "fn":
                    cur_fn = name("fn", v)
                    call_ob = None
                elif k == "cob":
                    call_ob = name("cob", v)
                elif k == "cfn":
                    call_fn = name("cfn", v)
                elif k == "calls":
                    pending = (call_ob or cur_ob, call_fn)
                    call_ob = None
                else:
                    name("fl", v)
                continue
            if line[0].isdigit() or line[0] in "+-*":
                parts = line.split()
                ir = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
                if pending is not None:
                    calls[((cur_ob, cur_fn), pending)] += ir
                    pending = None
                else:
                    selfir[(cur_ob, cur_fn)] += ir
    return selfir, calls


def thread_figures(path, preload):
    """sigmatop's instructions in this thread; whether it ran proxy_thread; idle_polls'
    inclusive instructions."""
    selfir, calls = parse(path)
    lib = os.path.realpath(preload) if preload else None

    def ours(key):
        ob, fn = key
        return (fn or "").startswith(("sigmatop_preload::", "<sigmatop_preload::")) or (
            lib is not None and ob is not None and os.path.realpath(ob) == lib
        )

    total = sum(ir for key, ir in selfir.items() if ours(key))
    for (caller, callee), ir in calls.items():
        if ours(caller) and not ours(callee):
            base = os.path.basename(callee[0] or "")
            if not base.startswith(VERBS_LIBS):
                total += ir
    fns = {fn for (_, fn) in selfir}
    role = "other"
    if "proxy_thread" in fns:
        role = "proxy"
    elif any(fn and "nccl::ring::drain" in fn for fn in fns):
        role = "nccl_drain"
    elif any(fn and "runtime::collector::run" in fn for fn in fns):
        role = "collector"
    idle = 0
    for (ob, fn), ir in selfir.items():
        if fn == "idle_polls":
            idle += ir
    for (caller, callee), ir in calls.items():
        if caller[1] == "idle_polls":
            idle += ir
    return total, role, idle


def run_once(binary, out, preload, mode, args, iters):
    d = out
    shutil.rmtree(d, ignore_errors=True)
    for sub in ("rdv", "nic", "sock"):
        os.makedirs(os.path.join(d, sub))
    os.chmod(os.path.join(d, "sock"), 0o700)
    procs = []
    for r in range(args.ranks):
        env = dict(os.environ)
        # Hosts of the NIC no test uses (their QP directories are shared by every process of
        # this user), and a transport timeout that rank 0's slowness under callgrind never hits.
        env.update(TESTNIC_HOST=str(args.host_base + r), TESTNIC_LOG=os.path.join(d, "nic"),
                   TESTNIC_TIMEOUT_MS="600000", RANK=str(r), WORLD_SIZE=str(args.ranks))
        if preload:
            env.update(LD_PRELOAD=preload, SIGMATOP_MODE=mode, SIGMATOP_RECORD=os.path.join(d, "rec"),
                       SIGMATOP_SOCKET_DIR=os.path.join(d, "sock"), NCCL_PROFILER_PLUGIN=preload)
        else:
            env.pop("LD_PRELOAD", None)
            env.pop("NCCL_PROFILER_PLUGIN", None)
        cmd = [binary, "-n", str(args.ranks), "-r", str(r), "-c", str(args.channels), "-b", str(args.size),
               "-i", str(iters), "-t", "600", "-d", os.path.join(d, "rdv")]
        if r == 0:
            cmd = ["valgrind", "--tool=callgrind", "--separate-threads=yes",
                   f"--callgrind-out-file={d}/cg"] + cmd + ["-e", str(args.idle)]
        with open(os.path.join(d, f"out.{r}"), "w") as o, open(os.path.join(d, f"err.{r}"), "w") as e:
            procs.append(subprocess.Popen(["bash", os.path.join(ROOT, "scripts/with-testnic.sh")] + cmd,
                                          env=env, stdout=o, stderr=e))
    deadline = time.time() + 900
    try:
        for p in procs:
            p.wait(timeout=max(1, deadline - time.time()))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for r in range(args.ranks):
        text = open(os.path.join(d, f"out.{r}")).read()
        if "check ok" not in text:
            err = open(os.path.join(d, f"err.{r}")).read()[-2000:]
            sys.exit(f"{d}: rank {r} printed no 'check ok':\n{text[-500:]}\n{err}")
    text = open(os.path.join(d, "out.0")).read()
    m = re.search(r"proxy polls (\d+) completed (\d+) steps (\d+)", text)
    if not m:
        sys.exit(f"{d}: rank 0 printed no 'proxy polls'")
    polls, done, steps = map(int, m.groups())
    fig = {"polls": polls, "done": done, "steps": steps, "iters": iters, "proxy": 0, "host": 0,
           "nccl_drain": 0, "collector": 0, "other": 0, "idle": 0}
    files = sorted(f for f in os.listdir(d) if re.fullmatch(r"cg-\d+", f) or re.fullmatch(r"cg\.\d+-\d+", f)
                   or re.fullmatch(r"cg-\d+-\d+", f))
    if not files:
        sys.exit(f"{d}: no callgrind output ({os.listdir(d)})")
    for f in files:
        path = os.path.join(d, f)
        total, role, idle = thread_figures(path, preload)
        tid = int(f.rsplit("-", 1)[1])
        fig["idle"] += idle
        # Thread 1 is the host's, whatever sigmatop runs on it (the final drain at exit).
        fig["host" if tid == 1 and role != "proxy" else role] += total
        with open(path, "rb") as src, gzip.open(path + ".gz", "wb") as dst:
            shutil.copyfileobj(src, dst)
        os.remove(path)
    shutil.rmtree(os.path.join(d, "rec"), ignore_errors=True)
    shutil.rmtree(os.path.join(d, "rdv"), ignore_errors=True)
    shutil.rmtree(os.path.join(d, "nic"), ignore_errors=True)
    shutil.rmtree(os.path.join(d, "sock"), ignore_errors=True)
    return fig


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("preloads", nargs="+", help="NAME=PRELOAD.so")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--channels", type=int, default=2)
    ap.add_argument("--size", type=int, default=49152)
    ap.add_argument("--iters", default="20,60")
    ap.add_argument("--idle", type=int, default=2000)
    ap.add_argument("--host-base", type=int, default=200, help="TESTNIC_HOST of rank 0")
    ap.add_argument("--modes", default="aggregate,simple,full")
    args = ap.parse_args()
    i1, i2 = (int(x) for x in args.iters.split(","))
    if i2 <= i1:
        sys.exit("--iters A,B: B > A")
    os.makedirs(args.out, exist_ok=True)
    out = os.path.realpath(args.out)
    binary = os.path.join(out, "nccl_ring")
    subprocess.run(["gcc", "-O2", "-g", "-Wall", "-Werror", "-o", binary,
                    os.path.join(ROOT, "tests/programs/nccl_ring.c"), "-libverbs", "-ldl"], check=True)
    subprocess.run(["bash", os.path.join(ROOT, "scripts/with-testnic.sh"), "true"], check=True)
    configs = [("base", None, "-")]
    for spec in args.preloads:
        nm, _, so = spec.partition("=")
        if not so or not os.path.exists(so):
            sys.exit(f"{spec}: expected NAME=PATH to an existing preload library")
        for mode in args.modes.split(","):
            configs.append((nm, os.path.realpath(so), mode))
    print(f"# {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {os.uname().nodename} nproc={os.cpu_count()} "
          f"load={open('/proc/loadavg').read().split()[:3]} ranks={args.ranks} channels={args.channels} "
          f"size={args.size} iters={i1},{i2} idle={args.idle} preloads={' '.join(args.preloads)}", flush=True)
    figs = {}
    for nm, so, mode in configs:
        for it in (i1, i2):
            f = run_once(binary, os.path.join(out, f"{nm}.{mode}.{it}"), so, mode, args, it)
            figs[(nm, mode, it)] = f
            print(f"run preload={nm} mode={mode} iters={it} steps={f['steps']} polls={f['polls']} "
                  f"completed={f['done']} proxy_ir={f['proxy']} host_ir={f['host']} nccl_drain_ir={f['nccl_drain']} "
                  f"collector_ir={f['collector']} other_ir={f['other']} "
                  f"idle_polls_ir={f['idle']}", flush=True)
    base_idle = figs[("base", "-", i2)]["idle"]
    for nm, so, mode in configs:
        if so is None:
            continue
        a, b = figs[(nm, mode, i1)], figs[(nm, mode, i2)]
        empty_poll = (b["idle"] - base_idle) / args.idle
        dsteps = b["steps"] - a["steps"]
        dempty = (b["polls"] - b["done"]) - (a["polls"] - a["done"])
        ddone = b["done"] - a["done"]
        dproxy = b["proxy"] - a["proxy"]
        per_step = (dproxy - empty_poll * dempty) / dsteps
        print(f"step preload={nm} mode={mode} proxy_per_step={per_step:.1f} empty_poll={empty_poll:.1f} "
              f"empty_polls_per_step={dempty / dsteps:.2f} completed_polls_per_step={ddone / dsteps:.2f} "
              f"proxy_per_step_with_empty_polls={dproxy / dsteps:.1f} "
              f"host_per_call={(b['host'] - a['host']) / (b['iters'] - a['iters']):.1f} "
              f"nccl_drain_per_step={(b['nccl_drain'] - a['nccl_drain']) / dsteps:.1f} "
              f"collector_per_step={(b['collector'] - a['collector']) / dsteps:.1f} "
              f"other_per_step={(b['other'] - a['other']) / dsteps:.1f}", flush=True)


main()
