#!/usr/bin/env python3
"""Checks the NVSHMEM perftest runs of tests/gpu/nvshmem_device.sh (issue 11, item 5).

    python3 tests/gpu/nvshmem_check.py WORKDIR

WORKDIR holds one directory per run, TEST.MEM.base and TEST.MEM.traced (TEST: put_bw, get_bw,
p_latency, put_latency, atomic_bw; MEM: gpumem or hostmem), each with rc, args, out.RANK,
err.RANK, pid.RANK, nic/testnic-PID.log (the NIC's own log: the ground truth, written by the NIC
thread, never by sigmatop) and, traced, wqe.RANK.log (sigmatop's recovered WQEs,
SIGMATOP_WQE_LOG) and agg.json (`sigmatop export --json` of the record). For each test and
placement it checks:
  1. both runs exited 0; the traced output has the untraced one's shape (same lines, numbers
     aside) and every row the arguments ask for, with positive figures; the NIC refused nothing;
  2. the bytes of the test's own operation (RDMA write for put/p, RDMA read for get, masked
     fetch-add for atomic inc) per PE and per QP, in the NIC log of both runs, equal what the
     perftest's loops move for its arguments (recomputed here from NVIDIA's sources: warm-up +
     timed iterations, blocks mapped to NVSHMEM's two RC QPs per peer by CTA id);
  3. traced: sigmatop recovered the WQEs the NIC executed, QP by QP in order: QPN, index,
     opcode, opmod, length, remote address and all 32 bits of the rkey (the record's events carry
     the whole 32-bit rkey in schema-2 records: the Rust test gpu_nvshmem compares those), under
     the recovery contract of tests/gpu/recovery.py: every WQE reported is the NIC's, in order;
     one missing is counted (a slot the GPU reused before the copier read it); with no loss,
     exactly the NIC's;
  4. traced: sigmatop's per-QP counters (JSON) equal the NIC log's per-QP sums for writes, reads and
     atomics (where WQEs were lost, counted, in 3: the sums of the WQEs sigmatop reported); every RC QP's peer is the other process; the GPU x GPU matrix (queues in GPU memory
     by the memory's GPU, in host memory by the registering context's GPU) and the process matrix
     hold exactly PE0->PE1 and PE1->PE0 as the NIC log has them (writes and atomics
     issuer->target, reads target->issuer);
  5. traced: sigmatop took its hardware branch: the UAR registrations were hijacked
     (SIGMATOP_GPU_STATS hijacks >= 1, hijack_failed 0, unparsable 0, unknown QP 0) and never
     reached the harness (lookups_wrapped=0 uar_retries=0); untraced, the harness let them through.
Exits 1 on any mismatch, 0 when everything matched. Pure standard library.
"""
import json
import os
import re
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import recovery  # noqa: E402

WRITE, READ = 0x08, 0x10
ATOMICS = (0x11, 0x12, 0x14, 0x15)
WRITES = (0x08, 0x09)
# The test's own operation: opcode (and opmod) of the WQEs that carry its data.
DATA_OP = {
    "put_bw": (WRITE, None),
    "get_bw": (READ, None),
    "p_latency": (WRITE, None),
    "put_latency": (WRITE, None),
    "atomic_bw": (0x15, 0x09),  # nvshmem_uint64_atomic_inc: 8-byte masked fetch-add
}
NUM_RC_PER_PE = 2  # NVSHMEM_IBGDA_NUM_RC_PER_PE default; RC_MAP_BY=cta: QP = ctaid % 2

problems = []

# Lines the NIC prints that are expected with NVSHMEM 3.4.5 (docs/TESTNIC.md): NVSHMEM tries a
# dma-buf umem for its GPU-resident queues, the NIC cannot map a CUDA dma-buf and refuses it, and
# NVSHMEM falls back to mlx5dv_devx_umem_reg of the device address. NIC builds before the first GPU
# run also warned about NVSHMEM's RoCE INIT2RTR leaving the grh bit 0 (valid on RoCE; the warning
# is gone). Shown as notes; any other "testnic:" line is a mismatch.
KNOWN_NIC_LINES = (
    re.compile(r"testnic: mlx5dv_devx_umem_reg_ex: dma-buf fd \d+ cannot be mapped"),
    re.compile(r"testnic: INIT2RTR of QP 0x[0-9a-f]+ without a GRH"),
)


def fail(ctx, msg):
    problems.append(f"{ctx}: {msg}")
    print(f"  MISMATCH {ctx}: {msg}")


def read(path, default=None):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        if default is None:
            raise
        return default


def parse_args(text):
    """utils.cu read_args: -b min -e max -f step -n iters -w warmup -c blocks -t threads -a op."""
    a = {"b": 4, "e": 4 * 1024 * 1024, "f": 2, "n": 10, "w": 5, "c": 32, "t": 256, "a": None}
    toks = text.split()
    for i, t in enumerate(toks):
        if t.startswith("-") and len(t) == 2 and t[1] in a and i + 1 < len(toks):
            v = toks[i + 1]
            a[t[1]] = v if t[1] == "a" else scaled(v)
    return a


def scaled(v):
    m = re.fullmatch(r"(\d+)([kKmMgG]?)", v)
    n, s = int(m.group(1)), m.group(2).lower()
    return n * {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[s]


def sizes(a):
    s, out = a["b"], []
    while s <= a["e"]:
        out.append(s)
        s *= a["f"]
    return out


def expected(test, a):
    """Bytes of the test's own operation, per PE 0 QP index (0, 1), from the perftest's loops."""
    per_qp = [0] * NUM_RC_PER_PE
    rounds = a["w"] + a["n"]  # a warm-up launch with -w iterations, then the timed one with -n
    for s in sizes(a):
        if test in ("put_bw", "get_bw"):
            # bw kernel: each of the -c blocks moves len/nblocks doubles per iteration.
            chunk = (s // 8 // a["c"]) * 8
            for b in range(a["c"]):
                per_qp[b % NUM_RC_PER_PE] += rounds * chunk
        elif test == "p_latency":
            # one block; per iteration one 4-byte nvshmem_int_p per int of the size.
            per_qp[0] += rounds * (s // 4) * 4
        elif test == "put_latency":
            # three one-block kernels (thread, warp, block scope), one put of the size each.
            per_qp[0] += 3 * rounds * s
        elif test == "atomic_bw":
            # element e is incremented by global thread e mod (blocks*threads) once per iteration.
            slice_ = a["c"] * a["t"]
            for e in range(s // 8):
                per_qp[((e % slice_) // a["t"]) % NUM_RC_PER_PE] += rounds * 8
    return per_qp


def nic_log(d):
    """pid -> list of WQE dicts in the NIC's execution order (per QP order is what matters)."""
    out = defaultdict(list)
    nd = os.path.join(d, "nic")
    for f in sorted(os.listdir(nd)) if os.path.isdir(nd) else []:
        for line in read(os.path.join(nd, f)).splitlines():
            if not line.startswith("testnic pid="):
                continue  # TESTNIC_STALL / TESTNIC_FAIL event lines
            kv = dict(x.split("=", 1) for x in line.split()[1:] if "=" in x)
            w = {
                "qpn": int(kv["qpn"], 16),
                "idx": int(kv["idx"]),
                "opcode": int(kv["opcode"], 16),
                "opmod": int(kv["opmod"], 16),
                "len": int(kv["len"]),
                "raddr": int(kv["raddr"], 16),
                "rkey": int(kv["rkey"], 16),
                "status": int(kv["status"], 16),
            }
            out[int(kv["pid"])].append(w)
    return out


def wqe_log(path):
    out = []
    for line in read(path, "").splitlines():
        if not line.startswith("wqe "):
            continue
        kv = dict(x.split("=", 1) for x in line.split()[1:] if "=" in x)
        out.append({
            "qpn": int(kv["qpn"], 16),
            "idx": int(kv["idx"]),
            "opcode": int(kv["opcode"], 16),
            "opmod": int(kv["opmod"], 16),
            "len": int(kv["bytes"]),
            "raddr": int(kv["raddr"], 16),
            "rkey": int(kv["rkey"], 16),
        })
    return out


def by_qp(ws):
    m = defaultdict(list)
    for w in ws:
        m[w["qpn"]].append(w)
    return m


def shape(text):
    """Output lines with measured figures blanked (floats; the bandwidth/latency columns)."""
    lines = []
    banner = False
    for l in text.splitlines():
        # NVSHMEM's own log lines and its configuration banner (printed with NVSHMEM_DEBUG set;
        # with INFO it ends with a CPU-affinity row) and blank lines are no part of the
        # perftest's output: the banner runs from "NVSHMEM configuration:" to the perftest's
        # "mype:" line.
        if l.startswith("NVSHMEM configuration:"):
            banner = True
        if l.startswith("mype:"):
            banner = False
        if banner or "NVSHMEM INFO" in l or "NVSHMEM WARN" in l or not l.strip():
            continue
        lines.append(re.sub(r"\d+\.\d+", "#", l.rstrip()))
    return lines


def pids(d):
    return [int(read(os.path.join(d, f"pid.{r}"), "0").strip() or 0) for r in (0, 1)]


def data_bytes(ws, test):
    op, opmod = DATA_OP[test]
    return [w for w in ws if w["opcode"] == op and (opmod is None or w["opmod"] == opmod)]


def check_run(ctx, d, test, a):
    """Checks common to both runs; returns (pids, nic log) or None."""
    rc = read(os.path.join(d, "rc"), "missing").strip()
    if rc != "0":
        fail(ctx, f"exit status {rc}")
        return None
    pp = pids(d)
    nic = nic_log(d)
    if set(nic) - set(pp):
        fail(ctx, f"NIC logs of unknown processes {sorted(set(nic) - set(pp))}")
    refused = [w for ws in nic.values() for w in ws if w["status"] != 0]
    if refused:
        fail(ctx, f"{len(refused)} WQEs refused by the NIC, first {refused[0]}")
    errs = "".join(read(os.path.join(d, f"err.{r}"), "") for r in (0, 1))
    notes = defaultdict(int)
    for l in errs.splitlines():
        if not l.startswith("testnic:"):
            continue
        known = next((k for k in KNOWN_NIC_LINES if k.match(l)), None)
        if known:
            notes[known.pattern] += 1
        else:
            fail(ctx, f"NIC stderr: {l}")
    for k, n in notes.items():
        print(f"  {ctx}: note: {n} x NIC line /{k}/ (expected, see KNOWN_NIC_LINES)")
    # The test's own bytes, per PE and per QP, against its arguments.
    want = expected(test, a)
    for rank, pid in enumerate(pp):
        got_q = defaultdict(int)
        for w in data_bytes(nic.get(pid, []), test):
            got_q[w["qpn"]] += w["len"]
        got = sorted(got_q.values(), reverse=True)
        exp = sorted([x for x in want if x], reverse=True) if rank == 0 else []
        if got != exp:
            fail(ctx, f"PE{rank} data bytes per QP {got}, the arguments give {exp}")
    return pp, nic


def debug_level(d):
    m = re.search(r"NVSHMEM_DEBUG=(\S+)", read(os.path.join(d, "env"), ""))
    return m.group(1) if m else None


def check_output(ctx, base, traced, test, a):
    # Runs with different NVSHMEM_DEBUG levels (the first device session logged INFO in one
    # baseline) differ by NVSHMEM's INFO tables: rows of bare integers, left out then.
    info_rows = debug_level(base) != debug_level(traced)
    if info_rows:
        print(f"  {ctx}: note: NVSHMEM_DEBUG {debug_level(base)} vs {debug_level(traced)}: "
              "NVSHMEM's integer-only table rows left out of the comparison")
    for r in (0, 1):
        b = shape(read(os.path.join(base, f"out.{r}"), ""))
        t = shape(read(os.path.join(traced, f"out.{r}"), ""))
        if info_rows:
            b = [l for l in b if not re.fullmatch(r"[\d\s]+", l)]
            t = [l for l in t if not re.fullmatch(r"[\d\s]+", l)]
        if b != t:
            fail(ctx, f"PE{r} output shape differs:\n    base:   {b}\n    traced: {t}")
    out = read(os.path.join(traced, "out.0"), "")
    rows = [l.split() for l in out.splitlines() if re.match(r"^\d+\s+\S+\s+\d+\.\d+", l)]
    tables = {"put_latency": 3}.get(test, 1)
    want_sizes = sizes(a) * tables
    got_sizes = [int(r[0]) for r in rows]
    if got_sizes != want_sizes:
        fail(ctx, f"result rows for sizes {got_sizes}, the arguments ask for {want_sizes}")
    if any(float(r[2]) <= 0 for r in rows):
        fail(ctx, f"non-positive figure in {rows}")


def check_traced(ctx, d, test, pp, nic):
    key = ("idx", "opcode", "opmod", "len", "raddr", "rkey")
    # What the export's counters and matrices must equal, per PE: the NIC's WQEs, or, where the
    # copier lost some (counted), the WQEs sigmatop reported.
    basis = {}
    for rank, pid in enumerate(pp):
        err = read(os.path.join(d, f"err.{rank}"), "")
        s = recovery.gpu_stats(err)
        # 5. which branch sigmatop took, from its stats line and the harness's exit line.
        if not s:
            fail(ctx, f"PE{rank}: no SIGMATOP_GPU_STATS line")
            continue
        if (s.get("hijacks", 0) < 1 or s.get("hijack_failed") or s.get("unparsable") or s.get("unknown_qp")
                or s.get("overruns") or s.get("copy_failed")):
            fail(ctx, f"PE{rank} sigmatop-gpu {s}")
        # 3. sigmatop's recovered WQEs against the NIC's, QP by QP (tests/gpu/recovery.py).
        got = by_qp(wqe_log(os.path.join(d, f"wqe.{rank}.log")))
        want = by_qp(nic.get(pid, []))
        problems, lost = recovery.compare(
            {q: [tuple(w[k] for k in key) for w in ws] for q, ws in got.items()},
            {q: [tuple(w[k] for k in key) for w in ws] for q, ws in want.items()}, s)
        for p in problems:
            fail(ctx, f"PE{rank} {p}")
        basis[rank] = got if lost else want
        print(f"  {ctx} PE{rank}: {sum(len(v) for v in want.values())} WQEs on {len(want)} QPs: "
              f"{recovery.describe(lost, s)} (qpn, idx, opcode, opmod, len, raddr, 32-bit rkey)")
        h = re.search(r"nvshmem_harness: .*lookups_wrapped=(\d+) uar_retries=(\d+)", err)
        if not h or h.group(1) != "0" or h.group(2) != "0":
            fail(ctx, f"PE{rank}: the harness acted under sigmatop: {h.group(0) if h else 'no line'}")
        print(f"  {ctx} PE{rank}: hijacks={s['hijacks']} doorbells={s.get('doorbells')} wqes={s.get('wqes')} "
              f"coalesced={s.get('coalesced')} duplicates={s.get('duplicates')}; harness bypassed")
    # 4. the export: per-QP counters, peers, matrix.
    try:
        j = json.loads(read(os.path.join(d, "agg.json")))
    except (OSError, ValueError) as e:
        fail(ctx, f"no export JSON: {e}")
        return
    procs = {p["pid"]: p for p in j["processes"]}
    truth = {}  # (from rank, to rank) -> bytes
    for rank, pid in enumerate(pp):
        p = procs.get(pid)
        if p is None:
            fail(ctx, f"PE{rank} (pid {pid}) not in the export")
            continue
        if p.get("rank") != rank:
            fail(ctx, f"pid {pid} has rank {p.get('rank')}, want {rank}")
        eps = {}
        for e in p["endpoints"]:
            m = re.fullmatch(r"devx qp (0x[0-9a-f]+)", e["label"])
            if m:
                eps[int(m.group(1), 16)] = e
        nq = basis.get(rank) or by_qp(nic.get(pid, []))
        for q, ws in nq.items():
            e = eps.get(q)
            if e is None:
                fail(ctx, f"PE{rank}: QP {q:#x} of the NIC log is no devx QP of the export")
                continue
            for name, ops in (("RDMA_WRITE", WRITES), ("RDMA_READ", (READ,)), ("ATOMIC", ATOMICS)):
                n = [w for w in ws if w["opcode"] in ops]
                want = (len(n), sum(w["len"] for w in n))
                o = e["ops"].get(name, {"ops": 0, "bytes": 0})
                if (o["ops"], o["bytes"]) != want:
                    fail(ctx, f"PE{rank} QP {q:#x} {name}: sigmatop {o['ops']} ops {o['bytes']} B, NIC {want[0]} ops {want[1]} B")
            if e["transport"] == "RC":
                other = pp[1 - rank]
                if not e.get("peer") or e["peer"].get("pid") != other:
                    fail(ctx, f"PE{rank} QP {q:#x}: peer {e.get('peer')}, want pid {other}")
            for w in ws:
                if w["opcode"] in WRITES + ATOMICS:
                    k = (rank, 1 - rank)
                elif w["opcode"] == READ:
                    k = (1 - rank, rank)
                else:
                    continue
                truth[k] = truth.get(k, 0) + w["len"]
        rc_peers = [e for e in eps.values() if e["transport"] == "RC"]
        if not rc_peers or any(not e.get("peer") or e["peer"].get("pid") != pp[1 - rank] for e in rc_peers):
            fail(ctx, f"PE{rank}: RC QPs without the other PE as peer: "
                      f"{[(e['label'], e.get('peer')) for e in rc_peers if not e.get('peer') or e['peer'].get('pid') != pp[1 - rank]]}")
    # Both placements drive the QPs from GPU 0: queues in GPU memory by the memory's device,
    # host-resident queues (hostmem) by the CUDA context that registered them. The GPU matrix
    # and the process matrix both carry exactly the NIC's bytes.
    for name, m, label in gpu_and_process(j, pp):
        compare_matrix(ctx, name, m, label, truth)


def gpu_and_process(j, pp):
    """The GPU x GPU and process matrices of an export, with a label function for PE r."""
    pm = j["process_matrix"]
    lbl = {r: next((x for x in pm["labels"] if f" {pid}@" in x), f"pid {pid}") for r, pid in enumerate(pp)}
    return [("GPU x GPU", j["gpu_matrix"], lambda r: f"r{r}:gpu0"), ("process", pm, lambda r: lbl[r])]


def compare_matrix(ctx, name, m, label, truth):
    cells = {}
    for i, li in enumerate(m["labels"]):
        for k, lk in enumerate(m["labels"]):
            if m["bytes"][i][k]:
                cells[(li, lk)] = m["bytes"][i][k]
    want_cells = {(label(a), label(b)): v for (a, b), v in truth.items() if v}
    if cells != want_cells:
        fail(ctx, f"{name} matrix {cells}, the NIC log gives {want_cells}")
    else:
        print(f"  {ctx}: {name} matrix = NIC log: {want_cells}")
    if (label(0), label(1)) not in cells or (label(1), label(0)) not in cells:
        fail(ctx, f"{name} matrix lacks PE0->PE1 or PE1->PE0: {cells}")


def main():
    w = sys.argv[1]
    runs = sorted(x for x in os.listdir(w) if re.fullmatch(r"\w+\.(gpumem|hostmem)\.(base|traced)", x))
    pairs = sorted({x.rsplit(".", 1)[0] for x in runs})
    if not pairs:
        fail("runs", f"no runs in {w}")
    for p in pairs:
        test, mem = p.split(".")
        base, traced = os.path.join(w, p + ".base"), os.path.join(w, p + ".traced")
        a = parse_args(read(os.path.join(base, "args"), ""))
        print(f"== {p}: {read(os.path.join(base, 'args'), '').strip()}; expected data bytes per QP {expected(test, a)}")
        before = len(problems)
        b = check_run(p + ".base", base, test, a)
        if b:
            err = "".join(read(os.path.join(base, f"err.{r}"), "") for r in (0, 1))
            retries = sum(int(x) for x in re.findall(r"uar_retries=(\d+)", err))
            print(f"  {p}.base: harness let {retries} UAR registrations through without IoMemory; "
                  f"{sum(len(v) for v in b[1].values())} WQEs in the NIC log")
            if retries < 1:
                fail(p + ".base", "the harness let no UAR registration through")
        if not os.path.isdir(traced):
            fail(p, "no traced run")
            continue
        t = check_run(p + ".traced", traced, test, a)
        if b and t:
            check_output(p, base, traced, test, a)
            check_traced(p + ".traced", traced, test, *t)
        print(f"  {p}: {'OK' if len(problems) == before else 'MISMATCH'}")
    print(f"nvshmem_check: {len(pairs)} test/placement pairs, {len(problems)} mismatches")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
