//! Time-window arithmetic over the model's cumulative snapshots: where each process stands at a
//! view time, with its totals, its rates "now" and its rates over a window; and the history
//! positions a viewer steps through.
//!
//! Rates come from differences of cumulative snapshots:
//! - "now": the last two snapshots of each process at or before the view time;
//! - window (1 s / 10 s / 60 s / all): the snapshot at or before `t - window` (or zero at the
//!   process start when it started inside the window) to the snapshot at or before `t`;
//! - totals: the snapshot at or before `t` itself (cumulative since the process started).
//!
//! History positions follow the reference timeline: the snapshot times of the process with the
//! longest kept history.

use std::borrow::Cow;

use super::model::{Model, ProcKey, ProcessState};
use super::snapshots::SnapshotHistory;
use crate::event::{DropCounters, Snapshot};

/// A process that exited, whose last snapshot is older than this (relative to the view time),
/// has a "now" rate of zero. A process that has not exited and sends no snapshot is silent
/// sooner (`agg::waits::silent_after`: 1 s, or four of its snapshot intervals), and its "now"
/// rates are zero from then on.
pub const STALE_NS: u64 = 2_000_000_000;

/// The period windowed figures cover, ending at the view time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Window {
    /// The last `n` seconds.
    Seconds(u64),
    /// Since each process started.
    #[default]
    All,
}

impl Window {
    pub fn seconds(self) -> Option<u64> {
        match self {
            Window::Seconds(s) => Some(s),
            Window::All => None,
        }
    }
}

/// The process whose kept history is the longest: its snapshot times are the history positions.
pub fn reference(model: &Model) -> Option<&ProcessState> {
    model
        .processes
        .values()
        .max_by_key(|p| (p.history.len(), std::cmp::Reverse(p.identity.start_ns)))
}

/// Index of the last snapshot at or before `t`.
pub fn idx_at(hist: &SnapshotHistory, t: u64) -> Option<usize> {
    hist.partition_point(t).checked_sub(1)
}

/// The view time for `at` (None: the newest data).
pub fn view_time(model: &Model, at: Option<u64>) -> u64 {
    at.unwrap_or_else(|| model.latest_ns())
}

/// Moves `at` by `d` samples on the reference timeline. Returns None when the step lands on the
/// newest sample (back to live).
pub fn step(model: &Model, at: Option<u64>, d: i32) -> Option<u64> {
    let r = reference(model)?;
    let len = r.history.len();
    if len == 0 {
        return None;
    }
    let pos = match at {
        None => len - 1,
        Some(t) => idx_at(&r.history, t).unwrap_or(0),
    };
    let new = (pos as i64 + d as i64).clamp(0, len as i64 - 1) as usize;
    if new + 1 == len {
        None
    } else {
        Some(r.history.at_ns(new))
    }
}

/// Index of the history position shown for `at` on the reference timeline, and the number of
/// positions.
pub fn history_position(model: &Model, at: Option<u64>) -> (usize, usize) {
    let r = reference(model);
    let len = r.map_or(0, |r| r.history.len());
    let pos = match (r, at) {
        (Some(r), Some(at)) => idx_at(&r.history, at).unwrap_or(0),
        _ => len.saturating_sub(1),
    };
    (pos, len)
}

pub use super::sums::{ChangeSums, EpMap, EpSums, OpTally, Sums, per_s};

/// What a process's rows and the node and rank rows read: its totals, its bytes over the
/// window, and its "now" rates (sums of its endpoints' rates, in endpoint order).
#[derive(Clone, Copy, Debug, Default)]
pub struct ProcSums {
    pub tot: Sums,
    pub win_tx: u64,
    pub win_rx: u64,
    pub tx_bps: f64,
    pub rx_bps: f64,
    pub ops_per_s: f64,
}

/// Where one process stands at the view time.
#[derive(Clone, Debug)]
pub struct ProcAt<'a> {
    pub key: &'a ProcKey,
    pub p: &'a ProcessState,
    /// Per endpoint: its sums. Empty when the process was read from its totals alone
    /// (`detailed` false).
    pub eps: EpMap,
    /// The snapshot at the view time and the window's base (None: zero at the process start);
    /// both None when not `detailed`.
    pub s1: Option<Cow<'a, Snapshot>>,
    pub base: Option<Cow<'a, Snapshot>>,
    pub window_ns: u64,
    /// Distance of the last two snapshots (0: no "now" rate).
    pub now_ns: u64,
    pub drops: DropCounters,
    /// The process has a snapshot at or before the view time.
    pub has_data: bool,
    /// The process's own figures (equal whether `detailed` or not).
    pub sums: ProcSums,
    /// `eps`, `s1` and `base` are filled.
    pub detailed: bool,
}

impl<'a> ProcAt<'a> {
    /// The state of process `p` at time `t` over `window`, for a view whose first process
    /// started at `first_ns` (`Model::first_start_ns`; 0: unknown). A window's rates are its
    /// bytes over its length, for every process alike: one that started inside it moved nothing
    /// before, so "10s avg" is over 10 s, not over its own life (issue 39, item 2); a window
    /// longer than the view (the job is younger than it) is as long as the view.
    ///
    /// With `detail` false, a process whose
    /// newest snapshot is the one at `t`, and whose counters only grew since the window's base,
    /// and that has no failed operation, is read from its per-snapshot totals (the same figures, without a pass over its
    /// endpoints); otherwise, and always with `detail`, from its endpoints.
    pub fn new(
        key: &'a ProcKey,
        p: &'a ProcessState,
        t: u64,
        window: Window,
        detail: bool,
        first_ns: u64,
    ) -> ProcAt<'a> {
        let mut out = ProcAt {
            key,
            p,
            eps: EpMap::default(),
            s1: None,
            base: None,
            window_ns: 0,
            now_ns: 0,
            drops: DropCounters::default(),
            has_data: false,
            sums: ProcSums::default(),
            detailed: true,
        };
        let h = &p.history;
        let Some(i1) = idx_at(h, t) else {
            return out;
        };
        out.has_data = true;
        let s1_at = h.at_ns(i1);
        // An exited process's last rates stand for STALE_NS; one that goes on without sending
        // snapshots (stopped, hung, or in a gap of its record) is silent sooner, and its "now"
        // is unknown from then on (shown as 0, never frozen at its last value).
        let stale = t.saturating_sub(s1_at)
            > if p.exited && i1 + 1 == h.len() {
                STALE_NS
            } else {
                super::silence::silent_after(h, i1)
            };
        let start = p.identity.start_ns;
        // Averages stop at the end of a process that exited; a live one that went quiet is
        // averaged up to the view time.
        let end_ns = if stale && !p.exited { t } else { s1_at };
        // The window ends at the view time, or at the end of a process that exited before it.
        let win_end = if p.exited { s1_at.min(t) } else { t };
        let from = window
            .seconds()
            .map(|s| win_end.saturating_sub(s * 1_000_000_000));
        // The baseline: zero at the process start when it started inside the window, else the
        // snapshot at or before the window's start (the oldest kept one when none is that old).
        let zero_base = start > 0 && start < s1_at && from.is_none_or(|f| f <= start);
        // Where the window starts for the rates: its start, or the view's first process's start
        // when the view is younger than the window (never after this process's own start).
        let view_start = if first_ns > 0 && first_ns <= start {
            first_ns
        } else {
            start
        };
        let win_start = from.map_or(view_start, |f| f.max(view_start));
        let j = (!zero_base).then(|| from.and_then(|f| idx_at(h, f)).unwrap_or(0).min(i1));
        // Failed operations are named per endpoint (the status line, the warnings): a process
        // with any is read from its endpoints.
        if !detail
            && i1 + 1 == h.len()
            && i1 > 0
            && h.last_errors() == 0
            && j.is_none_or(|j| h.monotone(j, i1))
            && let Some(last) = h.last_head()
        {
            out.detailed = false;
            out.drops = last.drops;
            let tot = h.last_sums();
            out.sums.tot = tot;
            if !stale && let Some(now) = h.last_now() {
                out.now_ns = now.dt_ns;
                out.sums.tx_bps = now.tx_bps;
                out.sums.rx_bps = now.rx_bps;
                out.sums.ops_per_s = now.ops_per_s;
            }
            match j {
                None => {
                    (out.sums.win_tx, out.sums.win_rx) = (tot.tx, tot.rx);
                    out.window_ns = end_ns.saturating_sub(win_start);
                }
                Some(j) if h.at_ns(j) < end_ns => {
                    let (tx, rx) = h.tx_rx(j);
                    out.sums.win_tx = tot.tx.saturating_sub(tx);
                    out.sums.win_rx = tot.rx.saturating_sub(rx);
                    out.window_ns = end_ns - h.at_ns(j);
                }
                Some(_) => {}
            }
            return out;
        }
        // Per endpoint, the process is read at its newest whole snapshot at or before `t` (a
        // relay at scale sends a process's counters every few ticks and its totals alone on the
        // others): exact figures of that time, "now" over the step from the whole one before.
        let Some(f1) = h.full_at(i1) else {
            return out;
        };
        let Some(s1) = h.get(f1) else {
            return out;
        };
        let end_ns = if f1 == i1 { end_ns } else { s1.at_ns };
        out.drops = s1.drops;
        out.eps = EpMap::of_snapshot(&s1, true);
        if f1 > 0 && !stale {
            if let Some(s0) = h.full_at(f1 - 1).and_then(|f0| h.get(f0))
                && s1.at_ns > s0.at_ns
            {
                out.eps.set_now(&s0.counts);
                out.now_ns = s1.at_ns - s0.at_ns;
            }
        } else if f1 == 0 && !stale && s1.seq == 0 && start > 0 && start < s1.at_ns {
            // The process's first snapshot: its counts since the start are the first rate (a
            // short run is not all zeros). A first snapshot seen later (an attach to a running
            // process) covers an interval nobody observed: no rate until the next one.
            for e in out.eps.values_mut() {
                e.now = e.tot;
            }
            out.now_ns = s1.at_ns - start;
        }
        match j {
            None => {
                for e in out.eps.values_mut() {
                    e.win = e.tot;
                }
                out.window_ns = end_ns.saturating_sub(win_start);
            }
            Some(j) => {
                // The whole snapshot at or before the window's start (the oldest whole one when
                // none is kept that old).
                let j = h
                    .full_at(j)
                    .or_else(|| (j..=f1).find(|&x| h.is_full(x)))
                    .unwrap_or(f1);
                if h.at_ns(j) < end_ns
                    && let Some(base) = h.get(j)
                {
                    for e in out.eps.values_mut() {
                        e.win = e.tot;
                    }
                    for c in &base.counts {
                        if let Some(e) = out.eps.get_mut(c.ep) {
                            e.win.sub(c);
                        }
                    }
                    out.window_ns = end_ns - base.at_ns;
                    out.base = Some(base);
                }
            }
        }
        out.s1 = Some(s1);
        let (tx_bps, rx_bps, ops_per_s) = out.eps.now_rates(out.now_ns);
        out.sums = ProcSums {
            tot: out.eps.totals(),
            win_tx: out.eps.iter().map(|(_, e)| e.win.tx).sum(),
            win_rx: out.eps.iter().map(|(_, e)| e.win.rx).sum(),
            tx_bps,
            rx_bps,
            ops_per_s,
        };
        out
    }

    /// Operations by code over the window for one endpoint (the GPU opcode mix). Needs a
    /// `detailed` state.
    pub fn window_ops(&self, ep: u32) -> Vec<(u8, u64)> {
        debug_assert!(
            self.detailed,
            "window_ops of a process read from its totals"
        );
        let mut out: Vec<(u8, u64)> = Vec::new();
        let Some(s1) = self.s1.as_deref() else {
            return out;
        };
        for c in s1.counts.iter().filter(|c| c.ep == ep) {
            match out.iter_mut().find(|(o, _)| *o == c.op) {
                Some(e) => e.1 += c.ops,
                None => out.push((c.op, c.ops)),
            }
        }
        if let Some(b) = self.base.as_deref() {
            for c in b.counts.iter().filter(|c| c.ep == ep) {
                if let Some(e) = out.iter_mut().find(|(o, _)| *o == c.op) {
                    e.1 = e.1.saturating_sub(c.ops);
                }
            }
        }
        out
    }

    /// Forgets the "now" rates (the process went silent: what it does now is not known).
    pub fn forget_now(&mut self) {
        self.now_ns = 0;
        self.sums.tx_bps = 0.0;
        self.sums.rx_bps = 0.0;
        self.sums.ops_per_s = 0.0;
    }

    /// The sums of every endpoint of the process.
    pub fn totals(&self) -> Sums {
        self.sums.tot
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Dir, Op, OpCount};

    /// `Sums` by op class adds and subtracts what the direction, receive and one-sided rules of
    /// each op say, for every code (unknown codes: refusals and posted receives only).
    #[test]
    fn sums_follow_each_ops_rules() {
        for code in 0..=255u8 {
            let c = OpCount {
                ep: 1,
                op: code,
                ops: 3,
                bytes: 1000,
                errors: 1,
                refused: 2,
                posted: 5,
                posted_bytes: 7,
            };
            let mut want = Sums {
                refused: 2,
                posted: 5,
                ..Default::default()
            };
            match Op::from_u8(code) {
                Some(Op::GpuDoorbell) => want.doorbells = 3,
                Some(o) => {
                    if o.is_receive() {
                        want.recvs = 3;
                    }
                    match o.dir() {
                        Dir::Tx => (want.tx, want.ops) = (1000, 3),
                        Dir::Rx => {
                            (want.rx, want.ops) = (1000, 3);
                            if o.toward_peer() == Some(false) {
                                want.rx1 = 1000;
                            }
                        }
                        Dir::None => {}
                    }
                }
                None => {}
            }
            let mut s = Sums::default();
            s.add(&c);
            assert_eq!(format!("{s:?}"), format!("{want:?}"), "op {code}");
            s.add(&c);
            s.sub(&c);
            assert_eq!(format!("{s:?}"), format!("{want:?}"), "op {code}");
            s.sub(&c);
            s.sub(&c);
            assert_eq!(
                format!("{s:?}"),
                format!("{:?}", Sums::default()),
                "op {code}"
            );
        }
    }
}
