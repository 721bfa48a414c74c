//! NCCL collectives across the processes of the model, live: each process's latest
//! `Frame::Nccl` (`nccl::live::NcclLive`) grouped by communicator (NCCL's `commId`, the same on
//! every rank): rows per collective, the ranks' arrival at the latest collectives (spread, the
//! last rank to arrive), and the hung collective: the oldest collective a rank started that has
//! not completed after the threshold, with the ranks it waits for. Pure over (model, view time).

use std::collections::BTreeMap;

use super::Model;
use crate::nccl::format::{self, ALGOS, FUNCS, PROTOS};
use crate::nccl::live::{CommLive, NcclLive};

/// A collective open longer than this on some rank is reported as hung.
pub const HANG_NS: u64 = 2_000_000_000;

/// CLOCK_REALTIME now, ns: the view time of a live front end.
pub fn wall_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// One process of a communicator, as its latest frame says.
#[derive(Clone, Debug, PartialEq)]
pub struct RankView {
    pub host: String,
    pub pid: u32,
    pub rank: u32,
    pub started: u64,
    pub completed: u64,
    /// Sequence number of the newest collective started / completed.
    pub last_started: Option<u64>,
    pub last_completed: Option<u64>,
    /// The oldest open collective: (sequence number, function, ns open at the view time).
    pub oldest_open: Option<(u64, String, u64)>,
    /// Among the latest collectives every rank started: how often this rank came last, and its
    /// mean lag behind the first rank to arrive.
    pub last_arrivals: u64,
    pub mean_lag_ns: u64,
    /// Its process sent nothing for longer than the threshold (stopped, or gone without a
    /// goodbye) and has not exited.
    pub silent_ns: Option<u64>,
    pub exited: bool,
}

/// One row per (communicator, collective, algorithm, protocol): the figures of the rank that
/// completed the most (count, bytes), the slowest rank's time.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CollRowView {
    pub func: String,
    pub algo: String,
    pub proto: String,
    pub channels: u32,
    pub count: u64,
    pub bytes: u64,
    pub time_ns: u64,
    pub busbw_gbs: f64,
    /// Calls open now, summed over the ranks.
    pub open: u64,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct CommView {
    pub comm_id: u64,
    pub name: String,
    pub nranks: u32,
    pub rows: Vec<CollRowView>,
    pub ranks: Vec<RankView>,
    /// Over the latest collectives every rank reported a start of: how many, the median and
    /// largest spread between the first and the last rank, the last rank at the largest.
    pub arrivals: u64,
    pub median_spread_ns: u64,
    pub max_spread_ns: u64,
    pub max_spread_last_rank: Option<u32>,
}

/// A collective some rank started and that has not completed after the threshold.
#[derive(Clone, Debug, PartialEq)]
pub struct Hung {
    pub comm_id: u64,
    pub func: String,
    pub seq: u64,
    pub nranks: u32,
    /// How long it has waited (since the later of its host call and the previous completion)
    /// on the rank that waited longest for it.
    pub open_ns: u64,
    /// The ranks it waits for: those that have not started it (or of which nothing is known),
    /// and those whose process went silent; `silent` says which of them are silent.
    pub waiting_for: Vec<u32>,
    pub silent: Vec<u32>,
    /// The ranks that started it and have not completed it.
    pub incomplete: Vec<u32>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct CollectivesView {
    pub comms: Vec<CommView>,
    pub hung: Vec<Hung>,
    /// Summed over the processes: records the plugin could not keep, events of types it does
    /// not read, events naming calls it never saw start.
    pub dropped_records: u64,
    pub unknown_events: u64,
    pub untracked: u64,
}

struct Member<'m> {
    host: &'m str,
    pid: u32,
    last_ns: u64,
    exited: bool,
    c: &'m CommLive,
}

/// The collectives of every process at view time `t` (CLOCK_REALTIME ns), hung after
/// `hang_ns`.
pub fn collectives(model: &Model, t: u64, hang_ns: u64) -> CollectivesView {
    let mut v = CollectivesView::default();
    let mut by_comm: BTreeMap<u64, Vec<Member>> = BTreeMap::new();
    for (key, p) in &model.processes {
        let Some(n) = p.nccl.as_ref() else { continue };
        add_losses(&mut v, n);
        let last_ns = p
            .history
            .last_head()
            .map_or(n.at_ns, |s| s.at_ns)
            .max(n.at_ns);
        for c in &n.comms {
            by_comm.entry(c.comm_id).or_default().push(Member {
                host: &key.host,
                pid: key.pid,
                last_ns,
                exited: p.exited,
                c,
            });
        }
    }
    for (comm_id, mut ms) in by_comm {
        ms.sort_by_key(|m| m.c.rank);
        v.comms.push(comm_view(comm_id, &ms, t, hang_ns));
        if let Some(h) = hung(comm_id, &ms, t, hang_ns) {
            v.hung.push(h);
        }
    }
    v
}

fn add_losses(v: &mut CollectivesView, n: &NcclLive) {
    v.dropped_records += n.dropped_records;
    v.unknown_events += n.unknown_events;
    v.untracked += n.untracked;
}

fn silent(m: &Member, t: u64, hang_ns: u64) -> Option<u64> {
    let quiet = t.saturating_sub(m.last_ns);
    (!m.exited && quiet > hang_ns).then_some(quiet)
}

fn comm_view(comm_id: u64, ms: &[Member], t: u64, hang_ns: u64) -> CommView {
    let nranks = ms.iter().map(|m| m.c.nranks).max().unwrap_or(0);
    let mut rows: BTreeMap<(u8, u8, u8, bool), CollRowView> = BTreeMap::new();
    for m in ms {
        for r in &m.c.rows {
            let mut func = format::name(FUNCS, r.func).to_string();
            if r.to_self {
                func.push_str(" (self)");
            }
            let p2p = r.algo == 255 && r.proto == 255;
            let row = rows
                .entry((r.func, r.algo, r.proto, r.to_self))
                .or_insert_with(|| CollRowView {
                    func,
                    algo: if p2p {
                        "-"
                    } else {
                        format::name(ALGOS, r.algo)
                    }
                    .into(),
                    proto: if p2p {
                        "-"
                    } else {
                        format::name(PROTOS, r.proto)
                    }
                    .into(),
                    ..Default::default()
                });
            row.channels = row.channels.max(r.channels as u32);
            if r.count > row.count || (r.count == row.count && r.bytes > row.bytes) {
                row.count = r.count;
                row.bytes = r.bytes;
            }
            row.time_ns = row.time_ns.max(r.time_ns);
            row.open += r.open;
        }
    }
    let rows: Vec<CollRowView> = rows
        .into_values()
        .map(|mut r| {
            let (size, factor) = bus(&r.func, r.bytes, nranks as u64);
            if r.time_ns > 0 {
                r.busbw_gbs = size as f64 * factor / r.time_ns as f64;
            }
            r
        })
        .collect();
    // Arrivals: the sequence numbers every rank of the communicator reported a start of.
    let mut starts: BTreeMap<u64, Vec<(u32, u64)>> = BTreeMap::new();
    for m in ms {
        for &(seq, ns) in &m.c.recent {
            starts.entry(seq).or_default().push((m.c.rank, ns));
        }
    }
    let full = ms.len() as u32 >= nranks.max(2);
    let mut spreads = Vec::new();
    let mut last: BTreeMap<u32, u64> = BTreeMap::new();
    let mut lag: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    let mut worst: Option<(u64, u32)> = None;
    for v in starts.values().filter(|v| full && v.len() as u32 >= nranks) {
        let lo = v.iter().map(|x| x.1).min().unwrap_or(0);
        let Some(&(lr, hi)) = v.iter().max_by_key(|x| x.1) else {
            continue;
        };
        spreads.push(hi - lo);
        *last.entry(lr).or_default() += 1;
        for &(r, ns) in v {
            let e = lag.entry(r).or_default();
            e.0 += ns - lo;
            e.1 += 1;
        }
        if worst.is_none_or(|w| hi - lo >= w.0) {
            worst = Some((hi - lo, lr));
        }
    }
    spreads.sort_unstable();
    let ranks = ms
        .iter()
        .map(|m| RankView {
            host: m.host.to_string(),
            pid: m.pid,
            rank: m.c.rank,
            started: m.c.started,
            completed: m.c.completed,
            last_started: m.c.last_started.map(|a| a.seq),
            last_completed: m.c.last_completed,
            oldest_open: m.c.oldest_open.map(|a| {
                (
                    a.seq,
                    format::name(FUNCS, a.func).to_string(),
                    t.saturating_sub(waited_since(m.c, a.start_ns)),
                )
            }),
            last_arrivals: last.get(&m.c.rank).copied().unwrap_or(0),
            mean_lag_ns: lag
                .get(&m.c.rank)
                .map_or(0, |(s, n)| if *n > 0 { s / n } else { 0 }),
            silent_ns: silent(m, t, hang_ns),
            exited: m.exited,
        })
        .collect();
    CommView {
        comm_id,
        name: ms.first().map(|m| m.c.name.clone()).unwrap_or_default(),
        nranks,
        rows,
        ranks,
        arrivals: spreads.len() as u64,
        median_spread_ns: spreads.get(spreads.len() / 2).copied().unwrap_or(0),
        max_spread_ns: spreads.last().copied().unwrap_or(0),
        max_spread_last_rank: worst.map(|w| w.1),
    }
}

/// nccl-tests' size of one call and its bus factor (as `nccl::model`).
fn bus(func: &str, bytes: u64, n: u64) -> (u64, f64) {
    let n = n.max(1);
    let nf = n as f64;
    match func {
        "AllReduce" => (bytes, 2.0 * (nf - 1.0) / nf),
        "AllGather" | "ReduceScatter" | "AlltoAll" => (bytes * n, (nf - 1.0) / nf),
        _ => (bytes, 1.0),
    }
}

/// Since when the oldest open collective of a rank has waited: the later of its host call and
/// the end of the collective completed last (collectives enqueued ahead of the GPU wait their
/// turn; a rank that completes collectives is not stuck).
fn waited_since(c: &CommLive, start_ns: u64) -> u64 {
    start_ns.max(c.last_completed_ns)
}

/// The hung collective of a communicator: the lowest sequence number that some rank has waited
/// on for longer than `hang_ns` with nothing completing.
fn hung(comm_id: u64, ms: &[Member], t: u64, hang_ns: u64) -> Option<Hung> {
    let (seq, func, since) = ms
        .iter()
        .filter_map(|m| m.c.oldest_open.map(|a| (a, waited_since(m.c, a.start_ns))))
        .filter(|(_, since)| t.saturating_sub(*since) > hang_ns)
        .map(|(a, since)| (a.seq, a.func, since))
        .min()?;
    let nranks = ms.iter().map(|m| m.c.nranks).max().unwrap_or(0);
    let mut waiting_for = Vec::new();
    let mut silent_ranks = Vec::new();
    let mut incomplete = Vec::new();
    for r in 0..nranks {
        let Some(m) = ms.iter().find(|m| m.c.rank == r) else {
            waiting_for.push(r);
            continue;
        };
        let started = m.c.last_started.is_some_and(|a| a.seq >= seq);
        let done = m.c.last_completed.is_some_and(|s| s >= seq)
            && m.c.oldest_open.is_none_or(|a| a.seq > seq);
        let quiet = silent(m, t, hang_ns).is_some();
        if quiet {
            silent_ranks.push(r);
        }
        if !started || (quiet && !done) {
            waiting_for.push(r);
        } else if !done {
            incomplete.push(r);
        }
    }
    Some(Hung {
        comm_id,
        func: format::name(FUNCS, func).to_string(),
        seq,
        nranks,
        open_ns: t.saturating_sub(since),
        waiting_for,
        silent: silent_ranks,
        incomplete,
    })
}

/// The warning's text: "AllReduce #225 waits for r1 (silent) 3.1s · comm 7773728f" (the
/// communicator's first 8 hex digits), or, when every rank started it and reports, the ranks
/// where it is not completed.
pub fn hung_text(h: &Hung) -> String {
    let who = ranks_text(h);
    let open = h.open_ns as f64 / 1e9;
    let comm = h.comm_id >> 32;
    if who.is_empty() {
        let on: Vec<String> = h.incomplete.iter().map(|r| format!("r{r}")).collect();
        format!(
            "{} #{} not completed on {} {open:.1}s · comm {comm:08x}",
            h.func,
            h.seq,
            on.join(", ")
        )
    } else {
        format!(
            "{} #{} waits for {who} {open:.1}s · comm {comm:08x}",
            h.func, h.seq
        )
    }
}

/// Follows the hung collectives of a live model for a front end that prints lines (`run
/// --headless`): a line when a collective becomes hung or the ranks it waits for change, and one
/// when it completes.
#[derive(Debug, Default)]
pub struct HungWatch {
    /// (communicator, sequence number) → (waiting for, open since ns, function).
    shown: BTreeMap<(u64, u64), (Vec<u32>, u64, String)>,
    /// Hung collectives that name no rank to wait for (every rank started it and reports), seen
    /// at the previous check: such a one is said once it holds over two checks, since a rank
    /// that just resumed reports before its tracker read its progress (the H200 stall run).
    unnamed: std::collections::BTreeSet<(u64, u64)>,
}

impl HungWatch {
    /// The lines to print at view time `t`.
    pub fn check(&mut self, model: &Model, t: u64, hang_ns: u64) -> Vec<String> {
        let mut lines = Vec::new();
        if !model.processes.values().any(|p| p.nccl.is_some()) {
            return lines;
        }
        let v = collectives(model, t, hang_ns);
        let mut now: BTreeMap<(u64, u64), (Vec<u32>, u64, String)> = BTreeMap::new();
        let mut unnamed = std::collections::BTreeSet::new();
        for h in &v.hung {
            let key = (h.comm_id, h.seq);
            if h.waiting_for.is_empty() && !self.shown.contains_key(&key) {
                unnamed.insert(key);
                if !self.unnamed.contains(&key) {
                    continue;
                }
            }
            let val = (
                h.waiting_for.clone(),
                t.saturating_sub(h.open_ns),
                h.func.clone(),
            );
            if self.shown.get(&key).map(|x| &x.0) != Some(&val.0) {
                lines.push(format!("⚠ {}", hung_text(h)));
            }
            now.insert(key, val);
        }
        for ((comm, seq), (_, since, func)) in &self.shown {
            if !now.contains_key(&(*comm, *seq)) {
                lines.push(format!(
                    "✓ {func} #{seq} · comm {:08x}: no longer hung, after {:.1}s open",
                    comm >> 32,
                    t.saturating_sub(*since) as f64 / 1e9
                ));
            }
        }
        self.shown = now;
        self.unnamed = unnamed;
        lines
    }
}

/// The ranks as the warning writes them: "r1 (silent), r3".
pub fn ranks_text(h: &Hung) -> String {
    if h.waiting_for.is_empty() {
        return String::new();
    }
    h.waiting_for
        .iter()
        .map(|r| {
            if h.silent.contains(r) {
                format!("r{r} (silent)")
            } else {
                format!("r{r}")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}
