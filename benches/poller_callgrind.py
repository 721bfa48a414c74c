#!/usr/bin/env python3
"""What the GPU doorbell poller pays per doorbell with WQE recovery on, in instructions, under
callgrind (issue 41, item 2: the CPU figure), on the CPU-played GPU of tests/devx_doorbell.rs
(tests/gpu/devx_cpu.c: NVSHMEM's host set-up against the devx emulation, the stand-in libcuda,
whose device-to-host copy is a memcpy, a CPU thread ringing doorbells through the hijacked UAR
and a NIC thread running them).

    python3 benches/poller_callgrind.py OUT NAME=PRELOAD.so [NAME=PRELOAD.so ...]
        [--doorbells 200,600] [--reps 3] [--mode simple]

Each run is devx_cpu with DEVX_CPU_DOORBELLS=N (its whole scenario, then N doorbells of one RDMA
write each on QP 0, each waited for) under `valgrind --tool=callgrind --separate-threads=yes`,
SIGMATOP_MODE=MODE, recovery on (the default: one async copy per doorbell, batches of 128
WQEBBs). From the poller thread's file (the one running `Poller::run`) it takes the inclusive
instructions of the calls `Poller::run` makes into the doorbell path: `on_change` (forward,
decode, record, and, inline, the copy and the batch parses it triggers), the parses of idle QPs
(`flush`, `idle_flush`, `flush_all`: inline only) and `make_up` (the copier's answers for a
shared register) -- not the spin loop between doorbells (its price is set by how long the poller
waits, not by the doorbells), not the control path (QPs and registrations applied). From the
copier thread's file (`Copier::run`, the copier build only) it takes all of it: copies, parses,
and its idle loop (parks).

Per (preload, repetition), the difference between the runs with the two N removes what does not
grow with the doorbells (the scenario, set-up, teardown):
  - poller_per_doorbell = Δ poller doorbell-path instructions / Δ doorbells;
  - copier_per_doorbell = Δ copier-thread instructions / Δ doorbells (all of it, its loop of
    looks and parks included, which grows with the run's wall time under valgrind);
  - copier_work_per_doorbell = the same for its copies and parses alone (`Cx::copy_qp`,
    `Cx::parse_front`, ... inclusive);
  - wqes_per_doorbell = Δ WQEs recovered / Δ doorbells (1 when recovery kept up).
Prints one "run ..." line per run, one "doorbell ..." line per (preload, repetition) and a
"median ..." line per preload; keeps callgrind's files of the poller and copier threads (gzip)
under OUT/NAME.repR.N/.
"""
import argparse
import gzip
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# The callgrind parser of the NCCL step bench (same format, same rules).
_src = open(os.path.join(ROOT, "benches/nccl_step_callgrind.py")).read().replace("\nmain()\n", "\n")
_ns = {"__file__": os.path.join(ROOT, "benches/nccl_step_callgrind.py"), "__name__": "nccl_step_callgrind"}
exec(compile(_src, "nccl_step_callgrind.py", "exec"), _ns)
parse = _ns["parse"]

DOORBELL_PATH = ("::on_change", "::flush", "::idle_flush", "::flush_all", "::make_up")
# The copier's work proper (its copies and parses), apart from its loop of looks and parks.
COPIER_WORK = ("Cx::copy_qp", "Cx::copy_piece", "Cx::sync", "Cx::parse_front", "Cx::flush",
               "Cx::make_room", "Cx::add_range", "Cx::read_device_send_counter")


def build(out):
    src = os.path.join(ROOT, "tests/gpu")
    cc = ["gcc", "-O2", "-g", "-Wall", "-I", src]
    subprocess.run(cc + ["-shared", "-fPIC", "-o", os.path.join(out, "libmlx5emu.so"),
                         os.path.join(src, "devx_emu.c")], check=True)
    subprocess.run(cc + ["-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-Wl,-Bsymbolic", "-o",
                         os.path.join(out, "libcuda.so.1"), os.path.join(src, "fake_cuda.c")], check=True)
    subprocess.run(cc + ["-o", os.path.join(out, "devx_cpu"), os.path.join(src, "devx_cpu.c"), "-L" + out,
                         "-lmlx5emu", "-Wl,-rpath," + out, "-ldl", "-lpthread"], check=True)
    return os.path.join(out, "devx_cpu")


def stat(text, key):
    m = re.search(r"\b" + key + r"=(\d+)", text)
    if not m:
        sys.exit(f"no {key}= in the stats line:\n{text[-2000:]}")
    return int(m.group(1))


def run_once(exe, d, preload, mode, n):
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(os.path.join(d, "sock"))
    os.chmod(os.path.join(d, "sock"), 0o700)
    env = dict(os.environ)
    env.update(LD_LIBRARY_PATH=os.path.dirname(exe), LD_PRELOAD=preload, SIGMATOP_MODE=mode,
               SIGMATOP_RECORD=os.path.join(d, "rec"), SIGMATOP_SOCKET_DIR=os.path.join(d, "sock"),
               SIGMATOP_GPU_STATS="1", DEVX_CPU_DOORBELLS=str(n))
    cmd = ["valgrind", "--tool=callgrind", "--separate-threads=yes", "--fair-sched=yes", f"--callgrind-out-file={d}/cg",
           exe, os.path.join(d, "list")]
    with open(os.path.join(d, "out"), "w") as o, open(os.path.join(d, "err"), "w") as e:
        r = subprocess.run(cmd, env=env, stdout=o, stderr=e, timeout=1800)
    err = open(os.path.join(d, "err")).read()
    if r.returncode != 0:
        sys.exit(f"{d}: devx_cpu exited {r.returncode}:\n{err[-2000:]}")
    fig = {"doorbells": stat(err, "doorbells"), "wqes": stat(err, "wqes"), "poller": None, "copier": 0,
           "copier_work": 0}
    files = sorted(f for f in os.listdir(d) if re.fullmatch(r"cg-\d+", f))
    for f in files:
        path = os.path.join(d, f)
        selfir, calls = parse(path)
        fns = {fn or "" for (_, fn) in selfir}
        keep = False
        if any(fn.endswith("Poller::run") for fn in fns):
            fig["poller"] = sum(ir for (caller, callee), ir in calls.items()
                                if (caller[1] or "").endswith("Poller::run")
                                and (callee[1] or "").endswith(DOORBELL_PATH))
            keep = True
        elif any(fn.endswith("Copier::run") for fn in fns):
            fig["copier"] = sum(selfir.values())
            fig["copier_work"] = sum(ir for (caller, callee), ir in calls.items()
                                     if (callee[1] or "").endswith(COPIER_WORK)
                                     and not (caller[1] or "").endswith(COPIER_WORK))
            keep = True
        if keep:
            with open(path, "rb") as src, gzip.open(path + ".gz", "wb") as dst:
                shutil.copyfileobj(src, dst)
        os.remove(path)
    if fig["poller"] is None:
        sys.exit(f"{d}: no thread ran Poller::run ({files})")
    for sub in ("rec", "sock"):
        shutil.rmtree(os.path.join(d, sub), ignore_errors=True)
    os.remove(os.path.join(d, "list"))
    bare = os.path.join(d, "cg")  # callgrind's empty file of the whole process (--separate-threads)
    if os.path.exists(bare) and os.path.getsize(bare) == 0:
        os.remove(bare)
    return fig


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("preloads", nargs="+", help="NAME=PRELOAD.so")
    ap.add_argument("--doorbells", default="200,600")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--mode", default="simple")
    args = ap.parse_args()
    n1, n2 = (int(x) for x in args.doorbells.split(","))
    if n2 <= n1:
        sys.exit("--doorbells A,B: B > A")
    os.makedirs(args.out, exist_ok=True)
    out = os.path.realpath(args.out)
    exe = build(out)
    pre = []
    for spec in args.preloads:
        nm, _, so = spec.partition("=")
        if not so or not os.path.exists(so):
            sys.exit(f"{spec}: expected NAME=PATH to an existing preload library")
        pre.append((nm, os.path.realpath(so)))
    print(f"# {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {os.uname().nodename} nproc={os.cpu_count()} "
          f"load={open('/proc/loadavg').read().split()[:3]} mode={args.mode} doorbells={n1},{n2} "
          f"reps={args.reps} preloads={' '.join(args.preloads)}", flush=True)
    per = {nm: [] for nm, _ in pre}
    for rep in range(1, args.reps + 1):
        for nm, so in pre:
            f = {}
            for n in (n1, n2):
                f[n] = run_once(exe, os.path.join(out, f"{nm}.rep{rep}.{n}"), so, args.mode, n)
                print(f"run preload={nm} rep={rep} extra_doorbells={n} doorbells={f[n]['doorbells']} "
                      f"wqes={f[n]['wqes']} poller_doorbell_path_ir={f[n]['poller']} "
                      f"copier_thread_ir={f[n]['copier']} copier_work_ir={f[n]['copier_work']}", flush=True)
            dd = f[n2]["doorbells"] - f[n1]["doorbells"]
            p = (f[n2]["poller"] - f[n1]["poller"]) / dd
            c = (f[n2]["copier"] - f[n1]["copier"]) / dd
            cw = (f[n2]["copier_work"] - f[n1]["copier_work"]) / dd
            w = (f[n2]["wqes"] - f[n1]["wqes"]) / dd
            per[nm].append((p, c, cw))
            print(f"doorbell preload={nm} rep={rep} poller_per_doorbell={p:.1f} copier_per_doorbell={c:.1f} "
                  f"copier_work_per_doorbell={cw:.1f} wqes_per_doorbell={w:.3f}", flush=True)

    def med(v):
        return f"{statistics.median(v):.1f} ({min(v):.1f}-{max(v):.1f})"

    for nm, _ in pre:
        v = per[nm]
        print(f"median preload={nm} poller_per_doorbell={med([x[0] for x in v])} "
              f"copier_per_doorbell={med([x[1] for x in v])} "
              f"copier_work_per_doorbell={med([x[2] for x in v])}", flush=True)


main()
