#!/usr/bin/env python3
"""Checks the NCCL GIN runs of tests/gpu/gin_device.sh (issue 28).

    python3 tests/gpu/gin_check.py WORKDIR

WORKDIR holds one directory per run, TYPE.npN.TRACE (TYPE: proxy = NCCL_GIN_TYPE 2, gdaki or
gdakicpu, gdakigpu, gdakibf = 3 with DOCA's NIC handler left to AUTO or set to the CPU proxy, GPU
doorbells, GPU BlueFlame; TRACE: base or traced), each with rc, np, args (nccl_gin's -s/-n), out.RANK,
err.RANK, pid.RANK, nic/testnic-PID.log (the NIC's own log, the ground truth: one line per WQE it
executed, written by the NIC thread, never by sigmatop) and, traced, agg.json (`sigmatop export
--json` of the record) and wqe.RANK.log (sigmatop's recovered GPU WQEs). For each run:
  1. it exited 0; every rank printed "nccl_gin: rank R OK" (the program checked every word it
     received and both signals' final values) and the GIN type NCCL chose is the one asked for;
  2. per rank, the NIC log holds exactly what the program asked for: ROUNDS x (N-1) RDMA writes of
     BYTES (ROUNDS to each peer), and, proxy type, (ROUNDS + 1) x (N-1) 8-byte fetch-adds (one
     signal increment per put, one signal add per peer: net_ib.cc's ncclGinIbProxyIPutSignal);
     the NIC refused nothing; a GDAKI run's opcode histogram is printed;
  3. traced: per rank and QP, the operations and bytes of every opcode sigmatop counted equal the
     NIC log's, every QP's peer is the NIC's, the rank and node matrices equal the NIC log's
     (tests/gpu/nccl_check.py's check_traced, without its nccl-tests collective part);
  4. traced GDAKI: sigmatop's recovered GPU WQEs are the NIC's, QP by QP in order (QPN, index,
     opcode, opmod, length, remote address, rkey), under tests/gpu/recovery.py's contract (a WQE
     missing is counted; with no loss, exactly the NIC's);
  5. GDAKI: no "Failed to query QP" (NCCL's QP error query, devx QUERY_QP, answered by the NIC: its
     "QUERY_QP answered N times, M in ERR" exit line, printed, with M = 0), and the NIC handler
     DOCA chose ("Enabling CPU proxy mode" per QP in CPU proxy mode) printed per rank; a run that
     asked for GPU doorbells (gdakigpu, gdakibf) fails when any QP fell back to the CPU proxy.
Exits 1 on any mismatch, 0 when everything matched. Pure standard library.
"""
import os
import re
import sys
from collections import Counter, defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nccl_check  # noqa: E402
import nvshmem_check  # noqa: E402
import recovery  # noqa: E402

GIN_TYPE = {"proxy": 2, "gdaki": 3, "gdakicpu": 3, "gdakigpu": 3, "gdakibf": 3}
# The NIC handler NCCL_GIN_GDAKI_NIC_HANDLER asked DOCA for: cpu (1), gpu (2, 3); None: AUTO.
HANDLER = {"gdakicpu": "cpu", "gdakigpu": "gpu", "gdakibf": "gpu"}


def fail(ctx, msg):
    nccl_check.fail(ctx, msg)


def read(path, default=None):
    return nccl_check.read(path, default)


def args(d):
    a = {"s": 65536, "n": 8}
    t = read(os.path.join(d, "args"), "").split()
    for i, x in enumerate(t):
        if x in ("-s", "-n") and i + 1 < len(t):
            a[x[1]] = int(t[i + 1], 0)
    return a


def check_run(name, d):
    typ, np_s, trace = name.split(".")
    n = int(np_s[2:])
    a = args(d)
    rc = read(os.path.join(d, "rc"), "?").strip()
    if rc != "0":
        fail(name, f"exit status {rc}")
        return False
    pids = [int(read(os.path.join(d, f"pid.{r}"), "0").strip() or 0) for r in range(n)]
    for r in range(n):
        out = read(os.path.join(d, f"out.{r}"), "")
        if not re.search(rf"nccl_gin: rank {r} OK", out):
            fail(name, f"rank {r}: no 'nccl_gin: rank {r} OK' line")
        m = re.search(r"GIN type (-?\d+)", out)
        if not m or int(m.group(1)) != GIN_TYPE[typ]:
            fail(name, f"rank {r}: GIN type {m.group(1) if m else None}, asked for {GIN_TYPE[typ]}")
    nic = nccl_check.nic_log(d)
    puts = a["n"] * (n - 1)
    for r, pid in enumerate(pids):
        ws = nic.get(pid, [])
        refused = [w for w in ws if w["status"]]
        if refused:
            fail(name, f"rank {r}: the NIC refused {len(refused)} WQEs, first {refused[0]}")
        data = [w for w in ws if w["op"] == "RDMA_WRITE" and w["len"] == a["s"]]
        per_peer = Counter(w["rpid"] for w in data)
        want_peer = {p: a["n"] for q, p in enumerate(pids) if q != r}
        if len(data) != puts or dict(per_peer) != want_peer:
            fail(name, f"rank {r}: {len(data)} RDMA writes of {a['s']} B (per peer pid {dict(per_peer)}), "
                       f"the program asked for {puts} ({a['n']} to each of {n - 1} peers)")
        fa = [w for w in ws if w["op"] == "ATOMIC_FA"]
        if typ == "proxy":
            want_fa = (a["n"] + 1) * (n - 1)
            if len(fa) != want_fa or any(w["len"] != 8 for w in fa):
                fail(name, f"rank {r}: {len(fa)} fetch-adds ({Counter(w['len'] for w in fa)} by length), "
                           f"want {want_fa} of 8 B")
        if typ.startswith("gdaki"):
            err = read(os.path.join(d, f"err.{r}"), "")
            proxies = err.count("Enabling CPU proxy mode")
            if "Failed to query QP" in err:
                fail(name, f"rank {r}: DOCA failed a QP query (devx QUERY_QP)")
            answered = re.findall(r"QUERY_QP answered (\d+) times, (\d+) in ERR", err)
            for _, in_err in answered:
                if int(in_err):
                    fail(name, f"rank {r}: {in_err} QP queries said ERR")
            if HANDLER.get(typ) == "gpu" and proxies:
                fail(name, f"rank {r}: asked for GPU doorbells, {proxies} QPs in DOCA's CPU proxy mode")
            print(f"  {name} rank {r}: NIC handler: "
                  + (f"CPU proxy ({proxies} QPs)" if proxies else "GPU doorbells")
                  + "; QUERY_QP answered: " + (", ".join(f"{a} ({e} in ERR)" for a, e in answered) or "none"))
        hist = Counter((w["op"], w["len"]) for w in ws)
        print(f"  {name} rank {r}: NIC executed {len(ws)} WQEs: "
              + ", ".join(f"{o} {ln} B x{c}" for (o, ln), c in sorted(hist.items())))
    if trace == "traced":
        nccl_check.check_traced(name, d, "gin", {}, n, nic, pids)
        if typ.startswith("gdaki"):
            nv = nvshmem_check.nic_log(d)
            for r, pid in enumerate(pids):
                got = nvshmem_check.by_qp(nvshmem_check.wqe_log(os.path.join(d, f"wqe.{r}.log")))
                # Only the QPs whose WQEs the GPU wrote: the QPs sigmatop recovered WQEs on.
                want = nvshmem_check.by_qp(nv.get(pid, []))
                gpu_qps = set(got)
                if not gpu_qps:
                    fail(name, f"rank {r}: sigmatop recovered no GPU WQE")
                key = ("idx", "opcode", "opmod", "len", "raddr", "rkey")
                stats = recovery.gpu_stats(read(os.path.join(d, f"err.{r}"), ""))
                problems, lost = recovery.compare(
                    {q: [tuple(w[k] for k in key) for w in got[q]] for q in gpu_qps},
                    {q: [tuple(w[k] for k in key) for w in want.get(q, [])] for q in gpu_qps}, stats)
                for p in problems:
                    fail(name, f"rank {r} {p}")
                print(f"  {name} rank {r}: {sum(len(v) for v in got.values())} GPU WQEs on "
                      f"{len(gpu_qps)} QPs: {recovery.describe(lost, stats)}")
    return True


def main():
    w = sys.argv[1]
    runs = sorted(x for x in os.listdir(w) if re.fullmatch(r"\w+\.np\d+\.(base|traced)", x)
                  and os.path.isdir(os.path.join(w, x)))
    checked = 0
    for name in runs:
        if check_run(name, os.path.join(w, name)):
            checked += 1
    print(f"gin_check: {len(runs)} runs, {checked} ran to the end, {len(nccl_check.problems)} mismatches")
    sys.exit(1 if nccl_check.problems or not checked else 0)


if __name__ == "__main__":
    main()
