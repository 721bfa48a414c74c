//! Silence and the waits' data: below the view time (`at`), which reads who is silent, and below
//! the waits rule (`waits`), which fills them. A process that sent nothing for longer than
//! [`SILENT_NS`] (or [`SILENT_INTERVALS`] of its own intervals) is silent; [`Waits`] is who the
//! others wait on at a view time (computed by `waits::waits`).

use super::model::ProcessState;
use super::snapshots::SnapshotHistory;

/// A process that sent nothing for this long is silent (its snapshots come every 250 ms).
pub const SILENT_NS: u64 = 1_000_000_000;
/// ... or for this many of its own snapshot intervals, when they are longer
/// (`SIGMATOP_INTERVAL_MS`).
pub const SILENT_INTERVALS: u64 = 4;
/// How long process history `h`, read at its snapshot `i`, may send nothing before it is silent:
/// `SILENT_NS`, or `SILENT_INTERVALS` of its snapshot interval (the shorter of its last two steps
/// up to `i`, so that the gap of a stop just ended does not count as its interval) when longer.
pub fn silent_after(h: &SnapshotHistory, i: usize) -> u64 {
    let step =
        |j: usize| (j >= 1 && j < h.len()).then(|| h.at_ns(j).saturating_sub(h.at_ns(j - 1)));
    let interval = match (step(i), i.checked_sub(1).and_then(step)) {
        (Some(a), Some(b)) => a.min(b),
        (Some(a), None) => a,
        _ => 0,
    };
    SILENT_NS.max(interval.saturating_mul(SILENT_INTERVALS))
}

/// How long process `p` has been silent at view time `t` (None: it reports, it exited, or it
/// has sent nothing yet). `live_now`: the wall clock of a live view at its newest data; then
/// the arrival of its latest frame decides, when known.
pub fn silent_ns(p: &ProcessState, t: u64, live_now: Option<u64>) -> Option<u64> {
    let h = &p.history;
    if let Some(now) = live_now
        && p.last_seen_ns > 0
    {
        if p.exited {
            return None;
        }
        let after = h
            .len()
            .checked_sub(1)
            .map_or(SILENT_NS, |i| silent_after(h, i));
        let age = now.saturating_sub(p.last_seen_ns);
        return (age > after).then_some(age);
    }
    let i = h.partition_point(t).checked_sub(1)?;
    // An exited process's last snapshot is its end, not a silence; a gap before a later
    // snapshot is one (a record of a process that was stopped for a while).
    if p.exited && i + 1 == h.len() {
        return None;
    }
    let age = t.saturating_sub(h.at_ns(i));
    (age > silent_after(h, i)).then_some(age)
}

/// One endpoint that waits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wait {
    /// The waiting process (index into `ModelAt::procs`) and its endpoint.
    pub proc: u32,
    pub ep: u32,
    /// Receives posted there and not completed (0: it waits on a silent peer with nothing
    /// posted, and nothing moves).
    pub outstanding: u64,
}

/// A process the others wait for.
#[derive(Clone, Debug, PartialEq)]
pub struct WaitedOn {
    /// Its index in `ModelAt::procs`.
    pub proc: u32,
    /// How long it has been silent (None: it reports, and sent nothing to its waiters).
    pub silent_ns: Option<u64>,
    /// How long it has sent nothing at all (ns; 0 when it sends to others, or is silent).
    pub quiet_ns: u64,
    /// The endpoints that wait on it directly, by process then endpoint.
    pub waiters: Vec<Wait>,
    /// Processes that wait on it through others (r1 waits on r0, which waits on it), sorted.
    pub behind: Vec<u32>,
}

impl WaitedOn {
    /// The waiting processes, direct ones first.
    pub fn waiting_processes(&self) -> Vec<u32> {
        let mut out: Vec<u32> = Vec::new();
        for w in &self.waiters {
            if !out.contains(&w.proc) {
                out.push(w.proc);
            }
        }
        out.extend(
            self.behind
                .iter()
                .filter(|p| !out.contains(p))
                .copied()
                .collect::<Vec<_>>(),
        );
        out
    }
}

/// Everything waited on at the view time: silent processes first (the longest silent first),
/// then the others by how many wait on them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Waits {
    pub waited_on: Vec<WaitedOn>,
}

impl Waits {
    /// Is endpoint `ep` of process `proc` one of the waiting endpoints? The far end it waits on
    /// (index into `waited_on`) when so.
    pub fn waiter(&self, proc: u32, ep: u32) -> Option<usize> {
        self.waited_on
            .iter()
            .position(|w| w.waiters.iter().any(|x| x.proc == proc && x.ep == ep))
    }

    /// The entry of process `proc`, when it is waited on (or silent).
    pub fn of(&self, proc: u32) -> Option<&WaitedOn> {
        self.waited_on.iter().find(|w| w.proc == proc)
    }
}
