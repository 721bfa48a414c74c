//! Who the others wait for. Two questions, one answer for every front end (the dashboard's
//! warnings and row marks, `attach --json`, `run --headless`, `report`):
//!
//! - **Silent**: a process that has not exited and whose frames stopped coming (it was
//!   SIGSTOPped, or it hangs so hard that its collector thread does not run) is silent once
//!   nothing came from it for `silent_after` (1 s, or four of its snapshot intervals when they
//!   are longer than the default 250 ms). A live view measures that on its own clock, from the
//!   arrival of the process's latest frame (`ProcessState::last_seen_ns`); a view of the past
//!   (replay, `report`), from the process's snapshot times: a gap in its record. Its "now" rates
//!   are not known from then on (0, never its last rates).
//! - **Waited on**: a process waits on an edge when receives it posted there have not completed
//!   for `wait_ns` (they were outstanding `wait_ns` ago and none completed since), or when the
//!   endpoint's peer is silent and the endpoint moves nothing. Its far end is the endpoint's peer
//!   (a verbs QP's, a UCX or libfabric endpoint's: `agg::peers`); for receives posted on no
//!   endpoint (a UCX worker, an SRQ), the processes that send to it (their endpoints' peer is
//!   it), else the peers of its own endpoints. An edge counts only while its far end is silent
//!   or sent nothing to the waiter over `wait_ns`. Following the edges through processes that
//!   wait themselves leads to the ones the others wait for: silent processes, and processes that
//!   wait on nobody (a ring whose rank 3 sleeps before its send: r0 waits on r3, r1 on r0, r2 on
//!   r1, and r3 on nobody: r3 is named, with r0 waiting on it directly and r1, r2 behind it).
//!
//! `waits` gives one `WaitedOn` per such process (every silent process has one, waited on or
//! not); the warnings (`agg::warnings::Waits`), the row marks and the JSON all read it.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use super::at::{EndpointAt, ModelAt};
pub use super::silence::{
    SILENT_INTERVALS, SILENT_NS, Wait, WaitedOn, Waits, silent_after, silent_ns,
};
use super::snapshots::SnapshotHistory;
use super::sums::EpMap;
use super::window::idx_at;
use crate::event::{EndpointKind, Op};

/// Receives outstanding with none completed for this long, on an edge whose far end sent
/// nothing to the waiter meanwhile: a wait. The default of the hang threshold
/// (`warnings::hang_ns`: `--hang-after`, `SIGMATOP_HANG_AFTER`), which the front ends pass.
pub const WAIT_NS: u64 = super::nccl::HANG_NS;
/// The silent processes at the view time (indexes into `at.procs`): what a rule about edges
/// consults, so that the edges of a process that stopped reporting are said as "silent", not as
/// stalled.
pub fn silent(at: &ModelAt) -> BTreeSet<u32> {
    at.silent
        .iter()
        .enumerate()
        .filter(|(_, s)| s.is_some())
        .map(|(i, _)| i as u32)
        .collect()
}

/// Per process: the endpoint sums of its whole snapshot at or before `t - wait_ns` (None when it
/// has none that old), read once.
struct Bases<'a> {
    at: &'a ModelAt<'a>,
    from: u64,
    got: BTreeMap<u32, Option<EpMap>>,
}

impl Bases<'_> {
    fn get(&mut self, proc: u32) -> Option<&EpMap> {
        let (at, from) = (self.at, self.from);
        self.got
            .entry(proc)
            .or_insert_with(|| {
                let h = &at.procs.get(proc as usize)?.p.history;
                let i = h.full_at(idx_at(h, from)?)?;
                h.get(i).map(|s| EpMap::of_snapshot(&s, false))
            })
            .as_ref()
    }
}

/// A candidate far end: its index in `ModelAt::procs`.
type Far = u32;

/// Per process: the processes that send to it, and those it talks to.
type SendersAndTalks = (Vec<BTreeSet<u32>>, Vec<BTreeSet<u32>>);

/// Who waits on whom at the view time; waits need receives outstanding for `wait_ns` (and
/// their far end quiet as long) unless the far end is silent.
pub fn waits(at: &ModelAt, wait_ns: u64) -> Waits {
    let n = at.procs.len();
    let silent = |p: u32| at.silent_ns(p).is_some();
    // Judged: reports at the view time (a recording's processes have all exited, but not
    // before their last snapshot).
    let judged = |p: u32| {
        at.procs.get(p as usize).is_some_and(|a| {
            let h = &a.p.history;
            let ended = a.p.exited && idx_at(h, at.t).is_some_and(|i| i + 1 == h.len());
            a.has_data && !ended && !silent(p)
        })
    };
    // Nobody silent and no receive outstanding: nothing waits (a healthy job ends here).
    let any_silent = at.silent.iter().any(Option::is_some);
    if !any_silent
        && !at
            .endpoints
            .iter()
            .any(|e| e.tot.outstanding().is_some_and(|o| o > 0))
    {
        return Waits::default();
    }
    let mut bases = Bases {
        at,
        from: at.t.saturating_sub(wait_ns),
        got: BTreeMap::new(),
    };
    // Who sends to whom (their endpoint's peer is the receiver), and who talks to whom: read
    // when a wait has no peer of its own.
    let mut peers_of: Option<SendersAndTalks> = None;
    let who_sends = || {
        let mut senders: Vec<BTreeSet<u32>> = vec![BTreeSet::new(); n];
        let mut talks: Vec<BTreeSet<u32>> = vec![BTreeSet::new(); n];
        for e in &at.endpoints {
            let Some(q) = e.peer.process.filter(|&q| q != e.proc && (q as usize) < n) else {
                continue;
            };
            if e.tot.tx > 0 || e.tot.ops > 0 {
                talks[e.proc as usize].insert(q);
                if e.tot.tx > 0 {
                    senders[q as usize].insert(e.proc);
                }
            }
        }
        (senders, talks)
    };
    // The waiting endpoints and the far ends each may wait on.
    let mut waits: Vec<(Wait, Vec<Far>)> = Vec::new();
    for e in &at.endpoints {
        if e.unattributed() || !judged(e.proc) {
            continue;
        }
        let out = e.tot.outstanding().unwrap_or(0);
        let peer = e.peer.process.filter(|&q| q != e.proc && (q as usize) < n);
        let waiting = match peer {
            Some(q) if silent(q) => (out > 0 || e.tot.ops > 0) && e.ops_per_s == 0.0,
            _ => out > 0 && stuck(&mut bases, e),
        };
        if !waiting {
            continue;
        }
        let fars: Vec<Far> = match peer {
            Some(q) => vec![q],
            None => {
                let (senders, talks) = peers_of.get_or_insert_with(who_sends);
                let s = &senders[e.proc as usize];
                if s.is_empty() {
                    talks[e.proc as usize].iter().copied().collect()
                } else {
                    s.iter().copied().collect()
                }
            }
        };
        waits.push((
            Wait {
                proc: e.proc,
                ep: e.ep,
                outstanding: out,
            },
            fars,
        ));
    }
    // Edges that hold: the far end is silent, or sent nothing to the waiter over `wait_ns`.
    let mut quiet_to: BTreeMap<(u32, u32), bool> = BTreeMap::new();
    let mut holds = |from: u32, to: u32, bases: &mut Bases| -> bool {
        if silent(to) {
            return true;
        }
        if !judged(to) {
            return false;
        }
        *quiet_to
            .entry((to, from))
            .or_insert_with(|| sent_nothing(at, bases, to, from))
    };
    let mut edges: Vec<Vec<(usize, Vec<Far>)>> = vec![Vec::new(); n];
    for (i, (w, fars)) in waits.iter().enumerate() {
        let ok: Vec<Far> = fars
            .iter()
            .copied()
            .filter(|&q| holds(w.proc, q, &mut bases))
            .collect();
        if !ok.is_empty() {
            edges[w.proc as usize].push((i, ok));
        }
    }
    if !any_silent && edges.iter().all(Vec::is_empty) {
        return Waits::default();
    }
    let waiting = |p: u32| !edges[p as usize].is_empty();
    // Receives each process has outstanding now, and what it left unconsumed: messages sent
    // to it (two-sided sends on the endpoints whose peer it is) beyond the receives it
    // completed.
    let mut outstanding = vec![0u64; n];
    let mut consumed = vec![0u64; n];
    let mut arrived = vec![0u64; n];
    for e in &at.endpoints {
        let i = e.proc as usize;
        outstanding[i] += e.tot.outstanding().unwrap_or(0);
        consumed[i] += e.tot.recvs;
        if let Some(q) = e.peer.process.filter(|&q| q != e.proc && (q as usize) < n)
            && let Some(s) = at.procs[i].eps.get(e.ep)
        {
            arrived[q as usize] += s
                .ops
                .iter()
                .filter(|(op, _)| Op::from_u8(*op).is_some_and(consumes_receive))
                .map(|(_, n)| n)
                .sum::<u64>();
        }
    }
    // The ones waited for: silent; or waiting on nobody with nothing outstanding (a process
    // whose receives were posted a moment ago waits too: its wait is not yet old enough); or
    // one that leaves what was sent to it unconsumed (it does not wait for data: it does not
    // take it).
    let root = |p: u32| {
        let i = p as usize;
        silent(p) || arrived[i] > consumed[i] || (!waiting(p) && outstanding[i] == 0 && judged(p))
    };
    let mut out: BTreeMap<u32, WaitedOn> = BTreeMap::new();
    for p in 0..n as u32 {
        if silent(p) {
            out.insert(p, entry(at, p));
        }
    }
    for p in 0..n as u32 {
        // A root that waits itself (it leaves what was sent to it unconsumed) is the one waited
        // for, not a waiter.
        if !waiting(p) || root(p) {
            continue;
        }
        // Direct: the roots among its own far ends, with the endpoints that wait on them.
        let mut direct: BTreeSet<u32> = BTreeSet::new();
        for (i, fars) in &edges[p as usize] {
            for &q in fars.iter().filter(|&&q| root(q)) {
                direct.insert(q);
                let w = out.entry(q).or_insert_with(|| entry(at, q));
                if !w.waiters.contains(&waits[*i].0) {
                    w.waiters.push(waits[*i].0.clone());
                }
            }
        }
        // Behind: the roots reached through processes that wait themselves.
        let mut seen: BTreeSet<u32> = BTreeSet::from([p]);
        let mut queue: VecDeque<u32> = edges[p as usize]
            .iter()
            .flat_map(|(_, f)| f.iter().copied())
            .filter(|&q| !root(q))
            .collect();
        while let Some(q) = queue.pop_front() {
            if !seen.insert(q) {
                continue;
            }
            for (_, fars) in &edges[q as usize] {
                for &r in fars.iter().filter(|&&r| r != p) {
                    if root(r) {
                        if !direct.contains(&r) {
                            let w = out.entry(r).or_insert_with(|| entry(at, r));
                            if !w.behind.contains(&p) {
                                w.behind.push(p);
                            }
                        }
                    } else {
                        queue.push_back(r);
                    }
                }
            }
        }
    }
    let mut v: Vec<WaitedOn> = out
        .into_values()
        .filter(|w| w.silent_ns.is_some() || !w.waiters.is_empty() || !w.behind.is_empty())
        .map(|mut w| {
            w.waiters.sort_by_key(|x| (x.proc, x.ep));
            w.behind.sort_unstable();
            w
        })
        .collect();
    v.sort_by(|a, b| {
        b.silent_ns
            .is_some()
            .cmp(&a.silent_ns.is_some())
            .then(b.silent_ns.cmp(&a.silent_ns))
            .then((b.waiters.len() + b.behind.len()).cmp(&(a.waiters.len() + a.behind.len())))
            .then(a.proc.cmp(&b.proc))
    });
    Waits { waited_on: v }
}

/// A send that consumes a receive posted at its peer (a two-sided message), as
/// `Op::is_receive` counts them there.
fn consumes_receive(op: Op) -> bool {
    matches!(
        op,
        Op::UcxTagSend
            | Op::UcxTagSendSync
            | Op::OfiSend
            | Op::OfiTSend
            | Op::VerbsSend
            | Op::VerbsSendImm
            | Op::VerbsWriteImm
            | Op::GpuSend
    )
}

/// `waits`, computed once per view time for the first threshold asked (the warnings, the row
/// marks and the idle rule of one frame read the same), again for another.
pub fn waits_cached<'a>(at: &'a ModelAt, wait_ns: u64) -> std::borrow::Cow<'a, Waits> {
    use std::borrow::Cow;
    let (ns, w) = at.waits_memo.get_or_init(|| (wait_ns, waits(at, wait_ns)));
    if *ns == wait_ns {
        Cow::Borrowed(w)
    } else {
        Cow::Owned(waits(at, wait_ns))
    }
}

/// The entry of process `p`, without waiters yet.
fn entry(at: &ModelAt, p: u32) -> WaitedOn {
    let silent_ns = at.silent_ns(p);
    WaitedOn {
        proc: p,
        silent_ns,
        quiet_ns: if silent_ns.is_some() {
            0
        } else {
            quiet_ns(at, p)
        },
        waiters: Vec::new(),
        behind: Vec::new(),
    }
}

/// Receives of endpoint `e` were outstanding at `t - wait_ns` already, and none completed since.
fn stuck(bases: &mut Bases, e: &EndpointAt) -> bool {
    // One completed in the last step: not stuck (and no older snapshot to decode: a healthy
    // job's endpoints all end here).
    let a = &bases.at.procs[e.proc as usize];
    if a.now_ns > 0 && a.eps.get(e.ep).is_some_and(|s| s.now.recvs > 0) {
        return false;
    }
    let Some(base) = bases.get(e.proc).and_then(|b| b.get(e.ep)) else {
        return false;
    };
    base.tot.outstanding().is_some_and(|n| n > 0) && base.tot.recvs == e.tot.recvs
}

/// Process `from` sent nothing to process `to` over the wait: its endpoints whose peer is `to`
/// did not grow their sent bytes or operations; when it has none, it sent nothing at all.
fn sent_nothing(at: &ModelAt, bases: &mut Bases, from: u32, to: u32) -> bool {
    let now: Vec<(u32, u64, u64)> = at
        .endpoints
        .iter()
        .filter(|e| e.proc == from && e.peer.process == Some(to))
        .map(|e| (e.ep, e.tot.tx, e.tot.ops))
        .collect();
    let Some(base) = bases.get(from) else {
        // Not reported for a whole wait yet: not judged as quiet.
        return false;
    };
    if now.is_empty() {
        let Some(a) = at.procs.get(from as usize) else {
            return false;
        };
        let was = base.totals();
        return a.sums.tot.tx == was.tx && a.sums.tot.ops == was.ops;
    }
    now.iter().all(|&(ep, tx, ops)| {
        base.get(ep)
            .is_some_and(|b| b.tot.tx == tx && b.tot.ops == ops)
    })
}

/// How long process `p` has sent nothing at the view time: since the snapshot where its sent
/// bytes last grew (from the kept history; 0 when they grew in its latest step).
pub fn quiet_ns(at: &ModelAt, p: u32) -> u64 {
    let Some(a) = at.procs.get(p as usize) else {
        return 0;
    };
    let h = &a.p.history;
    let Some(i) = idx_at(h, at.t) else {
        return 0;
    };
    let tx = h.tx_rx(i).0;
    let mut j = i;
    while j > 0 && h.tx_rx(j - 1).0 == tx {
        j -= 1;
    }
    if j == i {
        return 0;
    }
    // The bytes last grew in the step to snapshot j.
    at.t.saturating_sub(h.at_ns(j))
}

/// "r3 (node2 pid 4242)" or "pid 4242 (node2)": how a warning names a process.
pub fn who(at: &ModelAt, p: u32) -> String {
    let Some(a) = at.procs.get(p as usize) else {
        return format!("process #{p}");
    };
    match a.p.identity.rank {
        Some(r) => format!("r{r} ({} pid {})", a.key.host, a.key.pid),
        None => format!("pid {} ({})", a.key.pid, a.key.host),
    }
}

/// "r3" or "pid 4242": how a warning names a waiting process.
pub fn short(at: &ModelAt, p: u32) -> String {
    let Some(a) = at.procs.get(p as usize) else {
        return format!("process #{p}");
    };
    match a.p.identity.rank {
        Some(r) => format!("r{r}"),
        None => format!("pid {}", a.key.pid),
    }
}

/// "QP 0x107", "ucp_worker", "ep#3": how a warning names an endpoint.
pub fn endpoint_name(at: &ModelAt, p: u32, ep: u32) -> String {
    let def = at
        .procs
        .get(p as usize)
        .and_then(|a| a.p.endpoints.get(&ep));
    match def {
        Some(d) => match (d.qpn, d.kind) {
            (Some(q), _) => format!("QP 0x{q:x}"),
            (None, EndpointKind::UcpWorker) => "ucp_worker".into(),
            (None, EndpointKind::VerbsSrq) if !d.label.is_empty() => format!("SRQ {}", d.label),
            (None, _) if !d.label.is_empty() => d.label.clone(),
            _ => format!("ep#{ep}"),
        },
        None => format!("ep#{ep}"),
    }
}

/// The text of one `WaitedOn`, as the warnings, `run --headless` and the JSON say it:
/// "pid 30459 (vm) silent 6.2s — waited on by pid 30460 (QP 0x107: 382 receives posted)",
/// "r3 (vm pid 4242) sent nothing 18.2s — waited on by r0 (ucp_worker: 1 receive posted);
/// behind it r1, r2".
pub fn text(at: &ModelAt, w: &WaitedOn) -> String {
    use std::fmt::Write;
    let mut s = who(at, w.proc);
    match w.silent_ns {
        Some(ns) => {
            let _ = write!(s, " silent {:.1}s", ns as f64 / 1e9);
        }
        None if w.quiet_ns > 0 => {
            let _ = write!(s, " sent nothing {:.1}s", w.quiet_ns as f64 / 1e9);
        }
        None => s.push_str(" sends nothing to them"),
    }
    if w.waiters.is_empty() && w.behind.is_empty() {
        return s;
    }
    // Direct waiters, one entry per process: "pid 30460 (QP 0x107: 382 receives posted)".
    let mut procs: Vec<(u32, Vec<String>)> = Vec::new();
    for x in &w.waiters {
        let what = if x.outstanding > 0 {
            format!(
                "{}: {} receive{} posted",
                endpoint_name(at, x.proc, x.ep),
                x.outstanding,
                if x.outstanding == 1 { "" } else { "s" }
            )
        } else {
            format!("{}: nothing moves", endpoint_name(at, x.proc, x.ep))
        };
        match procs.iter_mut().find(|(p, _)| *p == x.proc) {
            Some((_, v)) => v.push(what),
            None => procs.push((x.proc, vec![what])),
        }
    }
    const SHOWN: usize = 4;
    let mut parts: Vec<String> = procs
        .iter()
        .take(SHOWN)
        .map(|(p, eps)| {
            let more = eps.len().saturating_sub(2);
            let mut list = eps.iter().take(2).cloned().collect::<Vec<_>>().join(", ");
            if more > 0 {
                let _ = write!(list, ", +{more}");
            }
            format!("{} ({list})", short(at, *p))
        })
        .collect();
    if procs.len() > SHOWN {
        parts.push(format!("+{} more", procs.len() - SHOWN));
    }
    if !parts.is_empty() {
        let _ = write!(s, " — waited on by {}", parts.join(", "));
    }
    if !w.behind.is_empty() {
        let names: Vec<String> = w.behind.iter().take(SHOWN).map(|p| short(at, *p)).collect();
        let more = w.behind.len().saturating_sub(SHOWN);
        let _ = write!(
            s,
            "{} behind it {}{}",
            if parts.is_empty() { " —" } else { ";" },
            names.join(", "),
            if more > 0 {
                format!(", +{more} more")
            } else {
                String::new()
            }
        );
    }
    s
}

/// The short form of `text`, for a narrow status line: "pid 30459 silent 6.2s · waited on by
/// pid 30460", "r3 sent nothing 18.2s · waited on by r0 +2".
pub fn short_text(at: &ModelAt, w: &WaitedOn) -> String {
    let mut s = short(at, w.proc);
    match w.silent_ns {
        Some(ns) => s.push_str(&format!(" silent {:.1}s", ns as f64 / 1e9)),
        None if w.quiet_ns > 0 => {
            s.push_str(&format!(" sent nothing {:.1}s", w.quiet_ns as f64 / 1e9))
        }
        None => s.push_str(" sends nothing to them"),
    }
    let procs = w.waiting_processes();
    if let Some(first) = procs.first() {
        s.push_str(&format!(" · waited on by {}", short(at, *first)));
        if procs.len() > 1 {
            s.push_str(&format!(" +{}", procs.len() - 1));
        }
    }
    s
}

/// The text of a traced process that never answered: "pid 4242 (vm) silent 3.1s: traced (its
/// socket is there) but not answering; stopped (SIGSTOP or Ctrl-Z)".
pub fn not_answering_text(
    host: &str,
    pid: u32,
    n: &super::model::NotAnswering,
    age_ns: u64,
) -> String {
    format!(
        "pid {pid} ({host}{}) silent {:.1}s: traced (its socket is there) but not answering{}",
        if n.exe.is_empty() {
            String::new()
        } else {
            format!(" {}", n.exe)
        },
        age_ns as f64 / 1e9,
        if n.stopped {
            "; stopped (SIGSTOP, Ctrl-Z or a debugger)"
        } else {
            ""
        }
    )
}

/// The longest period of a record in which no traced process received a byte, and who was
/// waiting on whom at its end.
#[derive(Clone, Debug, PartialEq)]
pub struct Quiet {
    /// From the last snapshot that saw bytes arrive before it, to the last snapshot before
    /// bytes arrived again (ns, CLOCK_REALTIME): the quiet period is at least this long, and at most
    /// one snapshot interval longer on each side.
    pub from_ns: u64,
    pub to_ns: u64,
}

/// The longest quiet period between the first and the last bytes received by the processes of
/// `model` (a recording: `Model::from_recording`): what arrived is what made progress (a sender
/// may go on filling its buffers for a while after its receiver stopped). A record in which
/// nothing was ever received (one-sided writes alone) is read by the bytes sent instead. A step
/// between two snapshots of a process in which those bytes grew is activity somewhere in that
/// step; a step longer than `silent_after` (the process was stopped: its record has a gap) is
/// activity at its two ends only, for a stopped process moves nothing. None when nothing moved,
/// or in one step.
pub fn longest_quiet(model: &super::Model) -> Option<Quiet> {
    let received = model.processes.values().any(|p| {
        let h = &p.history;
        !h.is_empty() && h.tx_rx(h.len() - 1).1 > 0
    });
    let bytes = |h: &SnapshotHistory, j: usize| {
        let (tx, rx) = h.tx_rx(j);
        if received { rx } else { tx }
    };
    let mut busy: Vec<(u64, u64)> = Vec::new();
    for p in model.processes.values() {
        let h = &p.history;
        for j in 1..h.len() {
            if bytes(h, j) == bytes(h, j - 1) {
                continue;
            }
            let (a, b) = (h.at_ns(j - 1), h.at_ns(j));
            let after = silent_after(h, j.saturating_sub(1));
            if b.saturating_sub(a) > after {
                // A gap: the bytes moved right before it or right after it.
                let interval = after / SILENT_INTERVALS;
                busy.push((a, a + interval));
                busy.push((b.saturating_sub(interval), b));
            } else {
                busy.push((a, b));
            }
        }
    }
    busy.sort_unstable();
    let mut best: Option<Quiet> = None;
    let mut end = busy.first()?.1;
    for &(a, b) in &busy[1..] {
        if a > end && best.as_ref().is_none_or(|q| a - end > q.to_ns - q.from_ns) {
            best = Some(Quiet {
                from_ns: end,
                to_ns: a,
            });
        }
        end = end.max(b);
    }
    best
}

/// Follows the waits of a live model for a front end that prints lines (`run --headless`): a
/// line when a process goes silent or becomes the one the others wait on, and one when that
/// ends (it answers again, exits, or nobody waits on it any more).
#[derive(Debug, Default)]
pub struct WaitWatch {
    /// (host, pid, silent) → (since ns, how the clearing line names it).
    shown: BTreeMap<(String, u32, bool), (u64, String)>,
}

impl WaitWatch {
    /// The lines to print at wall clock `now_ns`, waits judged over `wait_ns`.
    pub fn check(&mut self, model: &super::Model, now_ns: u64, wait_ns: u64) -> Vec<String> {
        let mut lines = Vec::new();
        if model.processes.is_empty() && model.not_answering.is_empty() && self.shown.is_empty() {
            return lines;
        }
        let at = ModelAt::new(
            model,
            &super::at::AtOptions {
                now_ns: Some(now_ns),
                detail: super::at::Detail::Processes,
                ..Default::default()
            },
        );
        let mut now: BTreeMap<(String, u32, bool), (u64, String)> = BTreeMap::new();
        for w in waits(&at, wait_ns).waited_on {
            let Some(a) = at.procs.get(w.proc as usize) else {
                continue;
            };
            let silent = w.silent_ns.is_some();
            let key = (a.key.host.clone(), a.key.pid, silent);
            let since = now_ns.saturating_sub(w.silent_ns.unwrap_or(w.quiet_ns));
            match self.shown.get(&key) {
                Some(v) => {
                    now.insert(key, v.clone());
                }
                None => {
                    lines.push(format!("⚠ {}", text(&at, &w)));
                    now.insert(key, (since, who(&at, w.proc)));
                }
            }
        }
        for ((host, pid), n) in &model.not_answering {
            let key = (host.clone(), *pid, true);
            match self.shown.get(&key) {
                Some(v) => {
                    now.insert(key, v.clone());
                }
                None => {
                    let age = now_ns.saturating_sub(n.since_ns);
                    lines.push(format!("⚠ {}", not_answering_text(host, *pid, n, age)));
                    now.insert(key, (n.since_ns, format!("pid {pid} ({host})")));
                }
            }
        }
        for ((host, pid, silent), (since, name)) in &self.shown {
            if now.contains_key(&(host.clone(), *pid, *silent)) {
                continue;
            }
            let secs = now_ns.saturating_sub(*since) as f64 / 1e9;
            let exited = model
                .processes
                .iter()
                .rfind(|(k, _)| k.host == *host && k.pid == *pid)
                .is_some_and(|(_, p)| p.exited);
            lines.push(match (silent, exited) {
                (true, true) => format!("✓ {name}: exited, after {secs:.1}s silent"),
                (true, false) => format!("✓ {name} answers again, after {secs:.1}s silent"),
                (false, _) => format!("✓ {name}: no longer waited on, after {secs:.1}s"),
            });
        }
        self.shown = now;
        lines
    }
}

#[cfg(test)]
mod tests;
