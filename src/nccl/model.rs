//! Collectives read back from the NCCL plugin's files (`nccl-<pid>.stn`) and joined to the verbs
//! work requests the same process posted: per communicator and collective the count, bytes,
//! algorithm, protocol, channels, time and bus bandwidth; per rank the arrival at each
//! collective (the last rank to arrive); the work requests of each collective. Pure functions
//! over records and events (`build`), plus the loader for a record directory (`load`).
//!
//! The join (docs/NCCL.md): NCCL's IB transport starts a net-plugin event `{qpNum, wr_id,
//! length}` on the proxy thread right before each `ibv_post_send` / `ibv_post_recv` of a proxy
//! step, so a QP event joins the first post on the same thread and QP at or after it. Posts with
//! no QP event (the receiver's FIFO write, the GPU Direct flush read, or an NCCL that emits no QP
//! events) join through the proxy step instead: the first step state "posted" (SendWait,
//! RecvWait, RecvFlushWait) recorded on that thread at or after the post is the step whose
//! `isend` / `irecv` / `iflush` made it. Whatever joins nothing is counted, never dropped.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use super::format::{self, ALGOS, DATATYPES, FUNCS, PROTOS, Rec, etype, kind, state};
use crate::event::{ClockSample, TscClock};

/// One verbs post as the join needs it (from the process's record).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Post {
    pub tsc: u64,
    pub tid: u32,
    pub qpn: u32,
    /// `event::Op` as u8.
    pub op: u8,
    pub bytes: u64,
}

/// One process's NCCL file and what the join needs of its record.
#[derive(Clone, Debug, Default)]
pub struct ProcessInput {
    pub host: String,
    pub pid: u32,
    pub recs: Vec<Rec>,
    pub posts: Vec<Post>,
    pub problem: Option<String>,
}

/// A row per (process, communicator, function, algorithm, protocol).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CollRow {
    pub host: String,
    pub pid: u32,
    /// The rank in this communicator.
    pub rank: u32,
    pub nranks: u32,
    /// NCCL's communicator id (hex).
    pub comm: String,
    pub comm_name: String,
    pub func: String,
    pub algo: String,
    pub proto: String,
    /// Channels of the last one.
    pub channels: u32,
    /// How many.
    pub count: u64,
    /// NCCL's element count × the datatype size, summed (AllReduce: the buffer; AllGather: each
    /// rank's part; ReduceScatter: each rank's result; Send/Recv: the message).
    pub bytes: u64,
    /// From the host call (`Coll`/`P2p` start), or the end of the call before it on the same
    /// communicator (point-to-point: same direction and peer) when that came later, to the last
    /// of its proxy operations' stop; summed.
    pub time_ns: u64,
    /// Bus bandwidth over `time_ns` (nccl-tests' definition), GB/s.
    pub busbw_gbs: f64,
    /// Verbs work requests joined to them, and their bytes.
    pub wrs: u64,
    pub wr_bytes: u64,
    /// Not completed when the record ended (no stop of the call or of a proxy operation).
    pub incomplete: u64,
}

/// Per communicator: how ranks arrived at each collective (same sequence number).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Arrivals {
    pub comm: String,
    pub collectives: u64,
    /// Largest and median spread between the first and the last rank's start, ns.
    pub max_spread_ns: u64,
    pub median_spread_ns: u64,
    /// The rank that arrived last at the collective of the largest spread (a stalled rank).
    pub max_spread_last_rank: u32,
    /// rank → times it was the last to arrive.
    pub last_rank: BTreeMap<u32, u64>,
}

/// How the join went, summed over processes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct JoinStats {
    /// IB net-plugin QP events, those NCCL gave without a parent step, and those that joined a
    /// post (the others are counted in `qp_events_unjoined`).
    pub qp_events: u64,
    pub qp_events_without_step: u64,
    pub qp_events_joined: u64,
    pub qp_events_unjoined: u64,
    /// QP events whose length differs from the joined post's bytes.
    pub qp_length_mismatches: u64,
    pub socket_events: u64,
    pub proxy_steps: u64,
    /// Proxy steps that said they posted work (SendWait, RecvWait, RecvFlushWait) and that no
    /// verbs work request sigmatop recorded joined: profiler events for work requests sigmatop
    /// never saw (a verbs layer off, a record cut, a post outside the traced libraries).
    pub steps_without_wr: u64,
    /// Verbs posts of NCCL processes, those joined by a QP event, by a proxy step, and neither.
    pub wrs: u64,
    pub wrs_via_qp_event: u64,
    pub wrs_via_step: u64,
    pub wrs_unjoined: u64,
    /// Records the plugin could not keep (its queue was full) and events of types it skips.
    pub dropped_records: u64,
    pub unknown_events: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct NcclReport {
    pub collectives: Vec<CollRow>,
    pub arrivals: Vec<Arrivals>,
    /// Per communicator, the first collective that did not complete everywhere (none: every
    /// collective every rank started completed).
    pub stalled: Vec<Stalled>,
    pub join: JoinStats,
    pub problems: Vec<String>,
}

#[derive(Clone, Debug, Default)]
struct Call {
    comm: u64,
    is_p2p: bool,
    /// Send/Recv: the peer rank.
    peer: u32,
    seq: u64,
    count: u64,
    func: u8,
    dtype: u8,
    algo: u8,
    proto: u8,
    channels: u8,
    start: u64,
    stop: Option<u64>,
    last_op_stop: u64,
    ops_open: i64,
    wrs: u64,
    wr_bytes: u64,
}

#[derive(Clone, Debug, Default)]
struct Comm {
    id: u64,
    name: String,
    nranks: u32,
    rank: u32,
}

/// nccl-tests' "size" of one call (the bytes its bus bandwidth is computed over) and its bus
/// factor.
fn size_and_factor(func: &str, bytes: u64, n: u64) -> (u64, f64) {
    let n = n.max(1);
    let nf = n as f64;
    match func {
        "AllReduce" => (bytes, 2.0 * (nf - 1.0) / nf),
        "AllGather" | "ReduceScatter" | "AlltoAll" => (bytes * n, (nf - 1.0) / nf),
        _ => (bytes, 1.0),
    }
}

/// Communicator id → collective sequence number → each rank's start of it.
type Starts = BTreeMap<u64, BTreeMap<u64, Vec<Start>>>;

#[derive(Clone, Debug)]
struct Start {
    rank: u32,
    nranks: u32,
    func: String,
    real_ns: u64,
    completed: bool,
}

/// A collective some ranks started and that did not complete before the record ended: a hung
/// job's first question is which ranks it waits for.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Stalled {
    pub comm: String,
    pub func: String,
    /// NCCL's sequence number of the collective in its communicator.
    pub seq: u64,
    pub nranks: u32,
    /// Ranks that started it, those of them that never saw it complete, and the ranks that never
    /// started it: the ones the others wait for.
    pub started: Vec<u32>,
    pub incomplete: Vec<u32>,
    pub waiting_for: Vec<u32>,
    /// rank → the last sequence number it completed in this communicator (a rank killed loses
    /// its last ~20 ms of records: the lowest figure is the rank the job stopped on).
    pub last_completed: BTreeMap<u32, u64>,
}

/// Builds the report of several processes (their files and posts).
pub fn build(inputs: &[ProcessInput]) -> NcclReport {
    let mut rep = NcclReport::default();
    // (comm id, seq) → [(rank, start real ns)], for arrivals.
    let mut starts: Starts = BTreeMap::new();
    for p in inputs {
        if let Some(pr) = &p.problem {
            rep.problems.push(format!("{} pid {}: {pr}", p.host, p.pid));
        }
        build_one(p, &mut rep, &mut starts);
    }
    for (comm, seqs) in starts {
        let mut spreads = Vec::new();
        let mut last: BTreeMap<u32, u64> = BTreeMap::new();
        let mut worst = (0u64, 0u32);
        for (seq, v) in &seqs {
            if rep.stalled.iter().all(|x| x.comm != format!("{comm:016x}"))
                && let Some(mut st) = stalled(comm, *seq, v)
            {
                for (s2, v2) in &seqs {
                    for x in v2.iter().filter(|x| x.completed) {
                        let e = st.last_completed.entry(x.rank).or_default();
                        *e = (*e).max(*s2);
                    }
                }
                rep.stalled.push(st);
            }
            if v.len() < 2 {
                continue;
            }
            let lo = v.iter().map(|x| x.real_ns).min().unwrap_or(0);
            let (lr, hi) = v
                .iter()
                .map(|x| (x.rank, x.real_ns))
                .max_by_key(|x| x.1)
                .unwrap_or((0, 0));
            spreads.push(hi - lo);
            if hi - lo >= worst.0 {
                worst = (hi - lo, lr);
            }
            *last.entry(lr).or_default() += 1;
        }
        if spreads.is_empty() {
            continue;
        }
        spreads.sort_unstable();
        rep.arrivals.push(Arrivals {
            comm: format!("{comm:016x}"),
            collectives: spreads.len() as u64,
            max_spread_ns: spreads[spreads.len() - 1],
            median_spread_ns: spreads[spreads.len() / 2],
            max_spread_last_rank: worst.1,
            last_rank: last,
        });
    }
    rep
}

/// The collective `seq` of `comm`, when some rank started it and it did not complete on every
/// rank of the communicator.
fn stalled(comm: u64, seq: u64, v: &[Start]) -> Option<Stalled> {
    let nranks = v.iter().map(|x| x.nranks).max().unwrap_or(0);
    let started: Vec<u32> = v.iter().map(|x| x.rank).collect();
    let incomplete: Vec<u32> = v.iter().filter(|x| !x.completed).map(|x| x.rank).collect();
    let waiting_for: Vec<u32> = (0..nranks).filter(|r| !started.contains(r)).collect();
    if incomplete.is_empty() && waiting_for.is_empty() {
        return None;
    }
    let mut st = Stalled {
        comm: format!("{comm:016x}"),
        func: v.first().map(|x| x.func.clone()).unwrap_or_default(),
        seq,
        nranks,
        started,
        incomplete,
        waiting_for,
        last_completed: BTreeMap::new(),
    };
    st.started.sort_unstable();
    st.incomplete.sort_unstable();
    Some(st)
}

fn build_one(p: &ProcessInput, rep: &mut NcclReport, starts: &mut Starts) {
    let mut recs = p.recs.clone();
    // Records of several threads interleave in the file in queue order; the join wants time.
    recs.sort_by_key(|r| r.tsc());
    let clocks: Vec<ClockSample> = recs
        .iter()
        .filter(|r| r.kind() == kind::CLOCK)
        .map(|r| ClockSample {
            tsc: r.tsc(),
            mono_ns: r.p(0),
            real_ns: r.p(1),
        })
        .collect();
    let clock = TscClock::new(clocks);
    let mut comms: HashMap<u64, Comm> = HashMap::new();
    let mut calls: BTreeMap<u64, Call> = BTreeMap::new();
    // proxy op id → call id; step id → op id.
    let mut op_call: HashMap<u64, u64> = HashMap::new();
    let mut step_op: HashMap<u64, u64> = HashMap::new();
    // QP events: (tsc, tid, qpn, length, step id).
    let mut qp_events: Vec<(u64, u32, u32, u64, u64)> = Vec::new();
    // "posted" step states per thread: (tsc, step id).
    let mut posted: HashMap<u32, Vec<(u64, u64)>> = HashMap::new();
    let j = &mut rep.join;
    for r in &recs {
        match (r.kind(), r.etype()) {
            (kind::INIT, _) => {
                comms.insert(
                    r.comm(),
                    Comm {
                        id: r.p(0),
                        nranks: r.p(1) as u32,
                        rank: r.p(3) as u32,
                        name: format::unpack_name(&r.0[10..14]),
                    },
                );
            }
            (kind::TOTALS, _) => {
                j.dropped_records += r.p(0);
                j.unknown_events += r.p(1);
            }
            (kind::START, t @ (etype::COLL | etype::P2P)) => {
                let (func, dtype, algo, proto, channels, _) = format::unpack_coll(r.p(2));
                calls.insert(
                    r.id(),
                    Call {
                        comm: r.comm(),
                        is_p2p: t == etype::P2P,
                        peer: r.p(3) as u32,
                        seq: r.p(0),
                        count: r.p(1),
                        func,
                        dtype,
                        algo,
                        proto,
                        channels,
                        start: r.tsc(),
                        ..Default::default()
                    },
                );
            }
            (kind::START, etype::PROXY_OP) => {
                if let Some(c) = calls.get_mut(&r.parent()) {
                    c.ops_open += 1;
                    op_call.insert(r.id(), r.parent());
                }
            }
            (kind::START, etype::PROXY_STEP) => {
                j.proxy_steps += 1;
                step_op.insert(r.id(), r.parent());
            }
            (kind::START, etype::NET_PLUGIN) => {
                let typ = r.p(0) & format::NET_TYPE_MASK;
                if typ == format::NET_TYPE_IB {
                    j.qp_events += 1;
                    if r.parent() == 0 {
                        j.qp_events_without_step += 1;
                    }
                    qp_events.push((r.tsc(), r.tid(), r.p(5) as u32, r.p(6), r.parent()));
                } else if typ == format::NET_TYPE_SOCK {
                    j.socket_events += 1;
                }
            }
            (kind::STATE, etype::PROXY_STEP) => {
                if matches!(
                    r.state(),
                    state::SEND_WAIT | state::RECV_WAIT | state::RECV_FLUSH_WAIT
                ) {
                    posted.entry(r.tid()).or_default().push((r.tsc(), r.id()));
                }
            }
            (kind::STOP, etype::COLL | etype::P2P) => {
                if let Some(c) = calls.get_mut(&r.id()) {
                    c.stop = Some(r.tsc());
                }
            }
            (kind::STOP, etype::PROXY_OP) => {
                if let Some(c) = op_call.get(&r.id()).and_then(|c| calls.get_mut(c)) {
                    c.ops_open -= 1;
                    c.last_op_stop = c.last_op_stop.max(r.tsc());
                }
            }
            _ => {}
        }
    }
    // The join. Posts per (tid, qpn) in time order; a cursor each.
    let mut posts = p.posts.clone();
    posts.sort_by_key(|x| x.tsc);
    j.wrs += posts.len() as u64;
    let mut by_q: HashMap<(u32, u32), Vec<usize>> = HashMap::new();
    for (i, x) in posts.iter().enumerate() {
        by_q.entry((x.tid, x.qpn)).or_default().push(i);
    }
    let mut cursor: HashMap<(u32, u32), usize> = HashMap::new();
    let mut post_step: Vec<Option<u64>> = vec![None; posts.len()];
    let mut via_qp = vec![false; posts.len()];
    for &(tsc, tid, qpn, len, step) in &qp_events {
        let list = by_q.get(&(tid, qpn));
        let cur = cursor.entry((tid, qpn)).or_insert(0);
        let found = list.and_then(|l| {
            while *cur < l.len() && posts[l[*cur]].tsc < tsc {
                *cur += 1;
            }
            let i = *l.get(*cur)?;
            *cur += 1;
            Some(i)
        });
        match found {
            Some(i) => {
                j.qp_events_joined += 1;
                if posts[i].bytes != len
                    && !crate::event::Op::from_u8(posts[i].op).is_some_and(|o| o.is_receive())
                {
                    j.qp_length_mismatches += 1;
                }
                via_qp[i] = true;
                post_step[i] = Some(step);
            }
            None => j.qp_events_unjoined += 1,
        }
    }
    for v in posted.values_mut() {
        v.sort_unstable();
    }
    for (i, x) in posts.iter().enumerate() {
        if post_step[i].is_some_and(|s| s != 0) {
            j.wrs_via_qp_event += 1;
            continue;
        }
        let step = posted.get(&x.tid).and_then(|v| {
            let k = v.partition_point(|e| e.0 < x.tsc);
            v.get(k).map(|e| e.1)
        });
        match step {
            Some(s) => {
                post_step[i] = Some(s);
                if via_qp[i] {
                    j.wrs_via_qp_event += 1;
                } else {
                    j.wrs_via_step += 1;
                }
            }
            None => {
                j.wrs_unjoined += 1;
                post_step[i] = None;
            }
        }
    }
    let joined: std::collections::HashSet<u64> = post_step.iter().flatten().copied().collect();
    let posted_steps: std::collections::HashSet<u64> =
        posted.values().flatten().map(|e| e.1).collect();
    j.steps_without_wr += posted_steps.difference(&joined).count() as u64;
    for (i, x) in posts.iter().enumerate() {
        let call = post_step[i]
            .and_then(|s| step_op.get(&s))
            .and_then(|o| op_call.get(o))
            .and_then(|c| calls.get_mut(c));
        if let Some(c) = call {
            c.wrs += 1;
            c.wr_bytes += x.bytes;
        }
    }
    // Rows.
    let mut rows: BTreeMap<(u64, String, String, String), CollRow> = BTreeMap::new();
    // A program enqueues collectives ahead of the GPU, so a call's own time starts when the one
    // before it on the same stream of work ended: collectives serialised per communicator,
    // point-to-point calls per (communicator, direction, peer).
    let mut ordered: Vec<&Call> = calls.values().collect();
    ordered.sort_by_key(|c| c.start);
    let mut prev_end: HashMap<(u64, bool, u8, u32), u64> = HashMap::new();
    for c in ordered {
        let comm = comms.get(&c.comm).cloned().unwrap_or_default();
        let mut func = format::name(FUNCS, c.func).to_string();
        // A rank's send to or receive from itself (AlltoAll's own part) moves no network data.
        if c.is_p2p && c.peer == comm.rank {
            func.push_str(" (self)");
        }
        let (algo, proto) = if c.is_p2p {
            ("-", "-")
        } else {
            (format::name(ALGOS, c.algo), format::name(PROTOS, c.proto))
        };
        let esize = DATATYPES.get(c.dtype as usize).map_or(1, |d| d.1);
        let bytes = c.count * esize;
        let end = match c.stop {
            Some(s) if c.ops_open <= 0 => Some(s.max(c.last_op_stop)),
            _ => None,
        };
        let row = rows
            .entry((comm.id, func.clone(), algo.to_string(), proto.to_string()))
            .or_insert_with(|| CollRow {
                host: p.host.clone(),
                pid: p.pid,
                rank: comm.rank,
                nranks: comm.nranks,
                comm: format!("{:016x}", comm.id),
                comm_name: comm.name.clone(),
                func: func.clone(),
                algo: algo.to_string(),
                proto: proto.to_string(),
                ..Default::default()
            });
        row.count += 1;
        row.bytes += bytes;
        row.channels = c.channels as u32;
        row.wrs += c.wrs;
        row.wr_bytes += c.wr_bytes;
        let lane = (
            c.comm,
            c.is_p2p,
            if c.is_p2p { c.func } else { 0 },
            if c.is_p2p { c.peer } else { 0 },
        );
        match end {
            Some(e) => {
                let from = prev_end.get(&lane).map_or(c.start, |&p| p.max(c.start));
                prev_end.insert(lane, e);
                row.time_ns += clock.to_real_ns(e).saturating_sub(clock.to_real_ns(from));
            }
            None => row.incomplete += 1,
        }
        if !c.is_p2p {
            starts
                .entry(comm.id)
                .or_default()
                .entry(c.seq)
                .or_default()
                .push(Start {
                    rank: comm.rank,
                    nranks: comm.nranks,
                    func: func.clone(),
                    real_ns: clock.to_real_ns(c.start),
                    completed: end.is_some(),
                });
        }
    }
    for mut row in rows.into_values() {
        let (size, factor) = size_and_factor(&row.func, row.bytes, row.nranks as u64);
        if row.time_ns > 0 {
            row.busbw_gbs = size as f64 * factor / row.time_ns as f64;
        }
        rep.collectives.push(row);
    }
}

/// The NCCL file of each process of a recording (`nccl-<pid>.stn` beside its directory) with
/// the verbs posts of its record. None when no process has one.
pub fn load(recording: &crate::trace::reader::Recording) -> Option<NcclReport> {
    let mut inputs = Vec::new();
    for pr in &recording.processes {
        let pid = pr.identity.pid;
        let Some(path) = pr.dir.parent().map(|h| h.join(format!("nccl-{pid}.stn"))) else {
            continue;
        };
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                inputs.push(ProcessInput {
                    host: pr.identity.host.clone(),
                    pid,
                    problem: Some(format!("{}: {e}", path.display())),
                    ..Default::default()
                });
                continue;
            }
        };
        let d = format::decode(&bytes);
        inputs.push(ProcessInput {
            host: pr.identity.host.clone(),
            pid,
            recs: d.recs,
            posts: posts_of(pr),
            problem: d.problem.map(|p| format!("{}: {p}", path.display())),
        });
    }
    (!inputs.is_empty()).then(|| build(&inputs))
}

/// The verbs posts of one process record: send-queue work requests and receives, with the QPN of
/// their endpoint.
pub fn posts_of(pr: &crate::trace::reader::ProcessRecording) -> Vec<Post> {
    use crate::event::{Layer, Op};
    let qpn: HashMap<u32, u32> = pr
        .endpoints
        .iter()
        .filter_map(|e| e.qpn.map(|q| (e.id, q)))
        .collect();
    let mut problems = Vec::new();
    pr.read_all_events(&mut problems)
        .into_iter()
        .filter_map(|e| {
            let op = Op::from_u8(e.op)?;
            if op.layer() != Layer::Ibverbs || matches!(op, Op::VerbsPollCq | Op::VerbsCqEvent) {
                return None;
            }
            Some(Post {
                tsc: e.tsc,
                tid: e.tid,
                qpn: *qpn.get(&e.ep)?,
                op: e.op,
                bytes: e.bytes,
            })
        })
        .collect()
}

/// The report's text (`sigmatop report`): one line per collective row, the join, arrivals.
pub fn render(r: &NcclReport) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(s, "NCCL collectives (per rank, communicator, collective):");
    let _ = writeln!(
        s,
        "  {:<12} {:>5} {:<16} {:<13} {:<6} {:<6} {:>3} {:>7} {:>14} {:>11} {:>9} {:>8} {:>13}",
        "host",
        "rank",
        "comm",
        "collective",
        "algo",
        "proto",
        "ch",
        "count",
        "bytes",
        "time ms",
        "busbw GB/s",
        "WRs",
        "WR bytes"
    );
    for c in &r.collectives {
        let _ = writeln!(
            s,
            "  {:<12} {:>2}/{:<2} {:<16} {:<13} {:<6} {:<6} {:>3} {:>7} {:>14} {:>11.3} {:>9.3} {:>8} {:>13}{}",
            c.host,
            c.rank,
            c.nranks,
            c.comm,
            c.func,
            c.algo,
            c.proto,
            c.channels,
            c.count,
            c.bytes,
            c.time_ns as f64 / 1e6,
            c.busbw_gbs,
            c.wrs,
            c.wr_bytes,
            if c.incomplete > 0 {
                format!("  ⚠ {} not completed", c.incomplete)
            } else {
                String::new()
            }
        );
    }
    let j = &r.join;
    let _ = writeln!(
        s,
        "NCCL ↔ verbs: {} WRs: {} joined by IB QP events, {} by proxy step, {} not joined; {} QP events ({} without a step, {} joined, {} not, {} length mismatches); {} socket events; {} proxy steps, {} that posted with no WR seen",
        j.wrs,
        j.wrs_via_qp_event,
        j.wrs_via_step,
        j.wrs_unjoined,
        j.qp_events,
        j.qp_events_without_step,
        j.qp_events_joined,
        j.qp_events_unjoined,
        j.qp_length_mismatches,
        j.socket_events,
        j.proxy_steps,
        j.steps_without_wr
    );
    // A warning only for what is lost; events of the types the plugin does not read are not
    // (issue 39, item 7: "⚠ 0 records dropped, 80 events of types not read" warned of nothing
    // and did not say what the 80 were).
    if j.dropped_records > 0 {
        let _ = writeln!(
            s,
            "  ⚠ NCCL plugin: {} records dropped (its queue was full): the collectives above miss them",
            j.dropped_records
        );
    }
    if j.unknown_events > 0 {
        let _ = writeln!(
            s,
            "  NCCL plugin: {} events of types it does not read (NCCL's API-call events, or types newer than NCCL 2.28), counted and set aside: no figure here comes from them",
            j.unknown_events
        );
    }
    for a in &r.arrivals {
        let last: Vec<String> = a
            .last_rank
            .iter()
            .map(|(r, n)| format!("r{r}×{n}"))
            .collect();
        let _ = writeln!(
            s,
            "  comm {}: {} collectives, arrival spread median {:.3} ms, max {:.3} ms (r{} last); last to arrive: {}",
            a.comm,
            a.collectives,
            a.median_spread_ns as f64 / 1e6,
            a.max_spread_ns as f64 / 1e6,
            a.max_spread_last_rank,
            last.join(" ")
        );
    }
    for x in &r.stalled {
        let _ = writeln!(
            s,
            "  ⚠ comm {}: {} #{} did not complete: started by ranks {:?}, not completed on {:?}, waiting for ranks {:?}; last completed: {}",
            x.comm,
            x.func,
            x.seq,
            x.started,
            x.incomplete,
            x.waiting_for,
            x.last_completed
                .iter()
                .map(|(r, s)| format!("r{r} #{s}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    for p in &r.problems {
        let _ = writeln!(s, "  ⚠ {p}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Op;

    fn rec(tsc: u64, tid: u32, k: u8, t: u8, id: u64, parent: u64, p: &[u64]) -> Rec {
        let mut r = Rec::new(tsc, tid, k, t, 0);
        r.0[2] = id;
        r.0[3] = parent;
        r.0[4] = 1;
        for (i, v) in p.iter().enumerate() {
            r.0[5 + i] = *v;
        }
        r
    }

    /// Issue 39, item 7: the committed all_reduce_perf record holds 80 events of types the
    /// plugin does not read and no dropped record: `report` puts no warning sign on that (it
    /// said "⚠ NCCL plugin: 0 records dropped (queue full), 80 events of types not read") and
    /// says what the 80 are.
    #[test]
    fn events_not_read_are_said_without_a_warning_sign() {
        let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures/nccl/all_reduce_np2/rec");
        let rec = crate::trace::reader::Recording::open(&[dir]).expect("fixture");
        let r = super::load(&rec).expect("NCCL records");
        assert_eq!((r.join.dropped_records, r.join.unknown_events), (0, 80));
        let text = super::render(&r);
        let lines: Vec<&str> = text.lines().filter(|l| l.contains("NCCL plugin")).collect();
        assert_eq!(
            lines,
            [
                "  NCCL plugin: 80 events of types it does not read (NCCL's API-call events, or types newer than NCCL 2.28), counted and set aside: no figure here comes from them"
            ],
            "{text}"
        );
    }

    /// One AllReduce with one proxy step on thread 9: an IB QP event before each of two posts
    /// on QP 0x1c3 (the second of a wrong length), then a FIFO write with no QP event, which
    /// joins through the step's SendWait; a post on another thread joins nothing.
    #[test]
    fn qp_events_join_their_posts_and_the_rest_go_through_the_step() {
        let coll = format::pack_coll(1, 7, 1, 2, 2, 0);
        let mut init = rec(1, 1, kind::INIT, 0, 0, 0, &[0xabc, 2, 2, 0]);
        init.0[4] = 1;
        let mut step_state = rec(75, 9, kind::STATE, etype::PROXY_STEP, 0x34, 0, &[8192]);
        step_state.0[1] |= (state::SEND_WAIT as u64) << 48;
        let ib = format::NET_TYPE_IB | 1;
        let recs = vec![
            init,
            rec(10, 1, kind::START, etype::COLL, 0x11, 0, &[0, 2048, coll]),
            rec(
                20,
                9,
                kind::START,
                etype::PROXY_OP,
                0x23,
                0x11,
                &[7, 0, 1, 1, 8192, 1],
            ),
            rec(30, 9, kind::START, etype::PROXY_STEP, 0x34, 0x23, &[0]),
            rec(
                40,
                9,
                kind::START,
                etype::NET_PLUGIN,
                0x47,
                0x34,
                &[ib, 1, 0, 5, 3, 0x1c3, 4096],
            ),
            rec(
                50,
                9,
                kind::START,
                etype::NET_PLUGIN,
                0x57,
                0x34,
                &[ib, 1, 0, 6, 3, 0x1c3, 4096],
            ),
            step_state,
            rec(80, 9, kind::STOP, etype::PROXY_STEP, 0x34, 0, &[]),
            rec(90, 9, kind::STOP, etype::PROXY_OP, 0x23, 0, &[]),
            rec(95, 1, kind::STOP, etype::COLL, 0x11, 0, &[]),
        ];
        let post = |tsc, tid, qpn, op: Op, bytes| Post {
            tsc,
            tid,
            qpn,
            op: op as u8,
            bytes,
        };
        let posts = vec![
            post(41, 9, 0x1c3, Op::VerbsWriteImm, 4096),
            post(51, 9, 0x1c3, Op::VerbsWriteImm, 2048),
            post(60, 9, 0x1c4, Op::VerbsWrite, 64),
            post(70, 3, 0x1c4, Op::VerbsWrite, 64),
        ];
        let r = build(&[ProcessInput {
            host: "h".into(),
            pid: 7,
            recs,
            posts,
            problem: None,
        }]);
        let j = &r.join;
        assert_eq!(
            (j.qp_events, j.qp_events_joined, j.qp_events_unjoined),
            (2, 2, 0)
        );
        assert_eq!(j.qp_length_mismatches, 1);
        assert_eq!(
            (j.wrs, j.wrs_via_qp_event, j.wrs_via_step, j.wrs_unjoined),
            (4, 2, 1, 1)
        );
        assert_eq!(r.collectives.len(), 1);
        let c = &r.collectives[0];
        assert_eq!((c.func.as_str(), c.count, c.bytes), ("AllReduce", 1, 8192));
        assert_eq!((c.wrs, c.wr_bytes, c.incomplete), (3, 4096 + 2048 + 64, 0));
    }
}
