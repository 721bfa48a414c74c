#!/usr/bin/env python3
"""Checks the nccl-tests runs of tests/gpu/nccl_device.sh (issue 23).

    python3 tests/gpu/nccl_check.py WORKDIR

WORKDIR holds one directory per run, TEST.npN.gdrG.MODE (MODE: base, aggregate, simple, full),
each with rc, args, np, gdr, trace, test, out.RANK, err.RANK, pid.RANK, nic/testnic-PID.log (the
NIC's own log: the ground truth, written by the NIC thread, never by sigmatop: one line per WQE
with its QP, length and connected peer QP and process) and, traced, agg.json (`sigmatop export
--json` of the record). For each run it checks:
  1. it exited 0; nccl-tests' own check passed (every #wrong 0, "Out of bounds values : 0 OK");
     its output has a row per size asked for (-b/-e/-f) and, traced, the shape of the untraced
     run's output (same lines, figures aside);
  2. traced: per rank and per QP, the operations and bytes of every opcode sigmatop counted
     equal the NIC log's (sends, writes, writes with immediate, reads); each QP's receives equal
     the writes with immediate and sends the NIC executed towards it; every QP's peer (process
     and rank) is the NIC's connected peer;
  3. traced: the rank x rank and node x node matrices equal the NIC log's bytes (each rank is
     its own host, softhostN);
  4. traced with the profiler plugin: per rank, the collectives (Send/Recv for alltoall's remote
     peers and sendrecv) and their bytes equal what nccl-tests was asked for (-b/-e/-f/-n/-w/-c,
     from nccl-tests 2.19.6's common.cu: a warm-up of -w calls per size doubling from -b to -e,
     then per size (-f) out-of-place and in-place each 1 + n + c calls); every verbs work request
     of the rank is joined to a collective (by IB QP event or proxy step; aggregate mode records
     no events, so there the collectives are checked and there is nothing to join).
Exits 1 on any mismatch, 0 when everything matched. Pure standard library.
"""
import json
import os
import re
import sys
from collections import defaultdict

problems = []
FUNC = {"all_reduce": "AllReduce", "all_gather": "AllGather", "reduce_scatter": "ReduceScatter"}
RECV_OPS = ("RDMA_WRITE_IMM", "SEND", "SEND_IMM")


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


def scaled(v):
    m = re.fullmatch(r"(\d+)([kKmMgG]?)", v)
    n, s = int(m.group(1)), m.group(2).lower()
    return n * {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[s]


def parse_args(text):
    a = {"b": 32 << 20, "e": 32 << 20, "f": 2, "n": 20, "w": 1, "c": 1}
    t = text.split()
    for i, x in enumerate(t):
        if len(x) == 2 and x[0] == "-" and x[1] in a and i + 1 < len(t):
            a[x[1]] = scaled(t[i + 1])
    return a


def bench_sizes(a):
    s, out = a["b"], []
    while s <= a["e"]:
        out.append(s)
        s *= a["f"]
    return out


def warm_sizes(a):
    s, out = a["b"], []
    while s <= a["e"]:
        out.append(s)
        s *= 2
    return out


def param_count(test, size, n):
    """nccl-tests' paramcount (NCCL's count argument) for a size in bytes, float."""
    count = size // 4
    if test in ("all_gather", "reduce_scatter", "alltoall"):
        return (count // n) & ~3
    return count


def expected_calls(test, a, n):
    """[(NCCL count, calls)] per rank for one run."""
    out = defaultdict(int)
    for s in warm_sizes(a):
        out[param_count(test, s, n)] += a["w"]
    for s in bench_sizes(a):
        out[param_count(test, s, n)] += 2 * (1 + a["n"] + a["c"])
    return out


def data_rows(text):
    return [l for l in text.splitlines() if re.match(r"^\s+\d+\s+\d+\s+\w+", l)]


def shape(text):
    # Figures blanked and runs of spaces made one (a wider time figure shifts the columns).
    return [" ".join(re.sub(r"\d+(\.\d+)?(e[-+]\d+)?", "#", l).split()) for l in text.splitlines() if l.strip()]


def nic_log(d):
    out = defaultdict(list)
    nd = os.path.join(d, "nic")
    for f in sorted(os.listdir(nd)) if os.path.isdir(nd) else []:
        for line in read(os.path.join(nd, f)).splitlines():
            if not line.startswith("testnic pid="):
                continue  # TESTNIC_STALL / TESTNIC_FAIL event lines
            kv = dict(x.split("=", 1) for x in line.split()[1:] if "=" in x)
            out[int(kv["pid"])].append({
                "qpn": int(kv["qpn"], 16), "op": kv["op"], "len": int(kv["len"]),
                "status": int(kv["status"], 16), "rqpn": int(kv.get("rqpn", "0"), 16),
                "rpid": int(kv.get("rpid", "0")),
            })
    return out


def check_output(ctx, d, a, base_out):
    out = read(os.path.join(d, "out.0"), "")
    rows = data_rows(out)
    if len(rows) != len(bench_sizes(a)):
        fail(ctx, f"{len(rows)} result rows, the arguments ask for {len(bench_sizes(a))}")
    for r in rows:
        f = r.split()
        # size count type redop root | time algbw busbw #wrong | time algbw busbw #wrong
        wrong = [f[8], f[12]] if len(f) >= 13 else ["?"]
        # In-place is not applicable to sendrecv and alltoall: nccl-tests prints N/A there.
        if wrong[0] != "0" or wrong[-1] not in ("0", "N/A"):
            fail(ctx, f"#wrong {wrong} in: {r.strip()}")
    if "# Out of bounds values : 0 OK" not in out:
        fail(ctx, "no '# Out of bounds values : 0 OK' line")
    if base_out is not None and shape(out) != shape(base_out):
        fail(ctx, "output's shape differs from the untraced run's")


def check_traced(ctx, d, test, a, np_, nic, pids):
    try:
        j = json.load(open(os.path.join(d, "agg.json")))
    except (OSError, ValueError) as e:
        fail(ctx, f"no agg.json: {e}")
        return
    rank_of = {pid: r for r, pid in enumerate(pids)}
    procs = {p["pid"]: p for p in j["processes"]}
    truth_rank = defaultdict(int)
    qps_checked = 0
    # Receives each QP should have completed: writes with immediate and sends aimed at it.
    recv_truth = defaultdict(lambda: [0, 0])
    for pid, ws in nic.items():
        for w in ws:
            if w["op"] in RECV_OPS and w["status"] == 0:
                recv_truth[(w["rpid"], w["rqpn"])][0] += 1
                recv_truth[(w["rpid"], w["rqpn"])][1] += w["len"]
    for pid in pids:
        r = rank_of[pid]
        p = procs.get(pid)
        if p is None:
            fail(ctx, f"rank {r} (pid {pid}) not in the export")
            continue
        if p.get("rank") != r:
            fail(ctx, f"pid {pid}: rank {p.get('rank')} in the export, want {r}")
        nq = defaultdict(lambda: defaultdict(lambda: [0, 0]))
        npeer = {}
        for w in nic.get(pid, []):
            if w["status"] != 0:
                fail(ctx, f"rank {r}: the NIC refused a WQE: {w}")
            nq[w["qpn"]][w["op"]][0] += 1
            nq[w["qpn"]][w["op"]][1] += w["len"]
            npeer[w["qpn"]] = w["rpid"]
            if w["op"] == "RDMA_READ":
                truth_rank[(rank_of.get(w["rpid"], -1), r)] += w["len"]
            elif w["op"] != "NOP":
                truth_rank[(r, rank_of.get(w["rpid"], -1))] += w["len"]
        sq = {}
        for e in p["endpoints"]:
            m = re.fullmatch(r"qp 0x([0-9a-f]+)", e["label"])
            if m:
                sq[int(m.group(1), 16)] = e
        for q in sorted(set(nq) | {q for q, e in sq.items() if any(o != "RECV" for o in e["ops"])}):
            e = sq.get(q)
            if e is None:
                fail(ctx, f"rank {r} QP {q:#x}: in the NIC log, not in the export")
                continue
            got = {o: [v["ops"], v["bytes"]] for o, v in e["ops"].items() if o != "RECV"}
            want = {o: v for o, v in nq.get(q, {}).items()}
            if got != want:
                fail(ctx, f"rank {r} QP {q:#x}: sigmatop {got}, the NIC {want}")
            qps_checked += 1
            want_peer = npeer.get(q)
            peer = e.get("peer") or {}
            if want_peer and (peer.get("pid") != want_peer or peer.get("rank") != rank_of.get(want_peer)):
                fail(ctx, f"rank {r} QP {q:#x}: peer {peer}, the NIC's is pid {want_peer} (rank {rank_of.get(want_peer)})")
        for q, e in sq.items():
            want = recv_truth.get((pid, q), [0, 0])
            rv = e["ops"].get("RECV", {})
            if [rv.get("ops", 0), rv.get("bytes", 0)] != want:
                fail(ctx, f"rank {r} QP {q:#x}: {rv.get('ops', 0)} receives of {rv.get('bytes', 0)} B, the peers' writes with immediate / sends to it: {want}")
    # Matrices.
    for name, key, label in (("rank", "rank_matrix", lambda r: f"r{r}"), ("node", "node_matrix", lambda r: f"softhost{r}")):
        m = j.get(key, {})
        cells = {}
        for i, li in enumerate(m.get("labels", [])):
            for k, lk in enumerate(m["labels"]):
                if m["bytes"][i][k]:
                    cells[(li, lk)] = m["bytes"][i][k]
        want = {(label(a_), label(b_)): v for (a_, b_), v in truth_rank.items() if v}
        if cells != want:
            fail(ctx, f"{name} matrix {cells}, the NIC log gives {want}")
    print(f"  {ctx}: {qps_checked} QPs = NIC log; rank and node matrices = NIC log "
          f"({sum(truth_rank.values())} B)")
    # Collectives.
    n = j.get("nccl")
    if read(os.path.join(d, "plugin"), "1").strip() == "0":
        return
    if n is None:
        fail(ctx, "no NCCL collectives in the export (profiler plugin)")
        return
    exp = expected_calls(test, a, np_)
    want_calls = sum(exp.values())
    want_bytes = sum(c * 4 * k for c, k in exp.items())
    for pid in pids:
        r = rank_of[pid]
        rows = [c for c in n["collectives"] if c["pid"] == pid]
        by = defaultdict(lambda: [0, 0])
        for c in rows:
            by[c["func"]][0] += c["count"]
            by[c["func"]][1] += c["bytes"]
            if c["incomplete"]:
                fail(ctx, f"rank {r}: {c['incomplete']} {c['func']} not completed")
        if test in FUNC:
            want = {FUNC[test]: [want_calls, want_bytes]}
        elif test == "sendrecv":
            want = {"Send": [want_calls, want_bytes], "Recv": [want_calls, want_bytes]}
        else:  # alltoall: one Send and one Recv per remote peer per call (self: apart)
            want = {"Send": [want_calls * (np_ - 1), want_bytes * (np_ - 1)],
                    "Recv": [want_calls * (np_ - 1), want_bytes * (np_ - 1)]}
        got = {f: v for f, v in by.items() if f in want}
        if got != want:
            fail(ctx, f"rank {r}: collectives {dict(by)}, nccl-tests asked for {want}")
    jn = n["join"]
    # Aggregate mode records no events, so there are no work requests to join (only counters).
    aggregate = read(os.path.join(d, "trace"), "").strip() == "aggregate"
    if jn["wrs_unjoined"] or (jn["wrs"] == 0) != aggregate:
        fail(ctx, f"join: {jn}")
    if n.get("problems"):
        fail(ctx, f"NCCL file problems: {n['problems']}")
    print(f"  {ctx}: collectives = nccl-tests' arguments ({want_calls} calls per rank, "
          f"{want_bytes} B); {jn['wrs']} WRs joined ({jn['wrs_via_qp_event']} by QP event, "
          f"{jn['wrs_via_step']} by proxy step); {jn['qp_events']} QP events")


def main():
    w = sys.argv[1]
    runs = sorted(x for x in os.listdir(w) if os.path.isfile(os.path.join(w, x, "test")))
    checked = 0
    for name in runs:
        d = os.path.join(w, name)
        trace = read(os.path.join(d, "trace")).strip()
        test = read(os.path.join(d, "test")).strip()
        np_ = int(read(os.path.join(d, "np")).strip())
        a = parse_args(read(os.path.join(d, "args")))
        ctx = name
        rc = read(os.path.join(d, "rc"), "?").strip()
        if rc != "0":
            fail(ctx, f"exit status {rc}")
            continue
        pids = [int(read(os.path.join(d, f"pid.{r}"), "0").strip() or 0) for r in range(np_)]
        base = name.rsplit(".", 1)[0] + ".base"
        base_out = None if trace == "base" else read(os.path.join(w, base, "out.0"), "")
        check_output(ctx, d, a, base_out or None)
        if trace != "base":
            check_traced(ctx, d, test, a, np_, nic_log(d), pids)
        checked += 1
    print(f"nccl_check: {checked} runs, {len(problems)} mismatches")
    sys.exit(1 if problems or not checked else 0)


if __name__ == "__main__":
    main()
