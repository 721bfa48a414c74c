//! Outstanding work per queue (issue 36): for each verbs QP (and SRQ) of a process, the work
//! requests posted and completed on its send and receive queues, how long the oldest outstanding
//! one has waited, when the last completion came, and its error completions by status. The
//! preload's collector sends one [`Queues`] per interval (`wire::Frame::Queues`, and the record's
//! `ProcessRecord::Queues`); readers judge a *stalled edge* from it: send work outstanding and no
//! completion for longer than the threshold.
//!
//! Ages are measured in the traced process on CLOCK_MONOTONIC (a step of the wall clock changes
//! none of them) at the resolution of its intervals (250 ms): a work request first seen outstanding
//! at interval k is counted from interval k (ages are never over-stated). [`AgeTracker`] does
//! that, pure, over the cumulative counts each interval reads.

use std::collections::{HashMap, VecDeque};

use serde::{Deserialize, Serialize};

/// The state of one queue's QP as far as completions tell.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum QueueHealth {
    /// Working (or idle).
    #[default]
    Live,
    /// An error completion (not a flush) came: the QP is in the error state, its outstanding work
    /// will be flushed, not done. Not a stall.
    Error,
    /// Destroyed: its edge ended. Not a stall.
    Destroyed,
}

/// One queue pair (or shared receive queue) at one interval. Counts are cumulative since the QP
/// was created; ages are in ns at the interval's time (0: nothing outstanding).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueState {
    /// The endpoint (QP or SRQ) of the process.
    pub ep: u32,
    /// Send work requests the provider accepted.
    pub sq_posted: u64,
    /// Send work requests completed: those a send completion the program polled retired (the
    /// signaled one and the unsignaled ones posted before it on the same send queue, as verbs
    /// specifies), success or error.
    pub sq_completed: u64,
    /// Receive work requests posted (on the QP, or on the SRQ for an SRQ) and completed.
    pub rq_posted: u64,
    pub rq_completed: u64,
    /// Signaled send work requests whose completion has not come: the work the program awaits.
    /// Unsignaled requests posted after the last signaled one are outstanding too (verbs reports
    /// them with the next signaled one) but nothing waits for them: an idle QP of NCCL's FIFO
    /// writes holds some for good.
    pub sq_signaled_outstanding: u64,
    /// How long the oldest outstanding signaled send work request has waited since it was posted.
    pub sq_oldest_ns: u64,
    /// How long the oldest outstanding receive has waited since it was posted.
    pub rq_oldest_ns: u64,
    /// How long the send queue has had signaled work outstanding with no send completion: since
    /// the later of its last send completion and the post of its oldest outstanding signaled work
    /// request. What a stalled edge is judged on (0: nothing awaited).
    pub sq_stalled_ns: u64,
    /// How long ago the last completion (send or receive) came; None: none yet.
    pub last_completion_ns: Option<u64>,
    /// Error completions by `ibv_wc_status` (status, count), flushes (5) included.
    pub errors: Vec<(u8, u64)>,
    pub health: QueueHealth,
    /// Send completions that named this QP beyond the work requests sigmatop saw posted (posted
    /// before sigmatop was loaded, or through a path it does not see): counted, never guessed
    /// into the counts above.
    pub unmatched: u64,
    /// Its send completions cannot be seen: its CQ is polled through `ibv_start_poll` /
    /// `ibv_next_poll` (an extended CQ), which sigmatop does not interpose. Its outstanding
    /// count is what was posted; it is never judged stalled.
    pub blind: bool,
}

impl QueueState {
    /// Send work requests outstanding now.
    pub fn sq_outstanding(&self) -> u64 {
        self.sq_posted.saturating_sub(self.sq_completed)
    }
    /// Receives outstanding now.
    pub fn rq_outstanding(&self) -> u64 {
        self.rq_posted.saturating_sub(self.rq_completed)
    }
    /// Error completions other than flushes.
    pub fn hard_errors(&self) -> u64 {
        self.errors
            .iter()
            .filter(|(s, _)| *s != WC_WR_FLUSH_ERR)
            .map(|(_, n)| n)
            .sum()
    }
    /// This state as it stands at `t` when it was sent at `sent_at_ns` (both CLOCK_REALTIME ns):
    /// its ages moved on by the time since, while work is outstanding (nothing the process sent
    /// since then says otherwise).
    pub fn at(&self, sent_at_ns: u64, t: u64) -> QueueState {
        let dt = t.saturating_sub(sent_at_ns);
        let mut q = self.clone();
        if q.sq_signaled_outstanding > 0 {
            q.sq_oldest_ns += dt;
            q.sq_stalled_ns += dt;
        }
        if q.rq_outstanding() > 0 {
            q.rq_oldest_ns += dt;
        }
        if let Some(l) = q.last_completion_ns.as_mut() {
            *l += dt;
        }
        q
    }

    /// A stalled edge at `threshold_ns`: live, send work outstanding, no completion for longer.
    pub fn stalled(&self, threshold_ns: u64) -> bool {
        self.health == QueueHealth::Live
            && !self.blind
            && self.sq_signaled_outstanding > 0
            && self.sq_stalled_ns >= threshold_ns
    }
}

/// Every queue of one process with something posted, at one interval.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Queues {
    /// CLOCK_REALTIME ns of the interval (the snapshot's `at_ns`).
    pub at_ns: u64,
    pub queues: Vec<QueueState>,
}

impl Queues {
    pub fn get(&self, ep: u32) -> Option<&QueueState> {
        self.queues
            .binary_search_by_key(&ep, |q| q.ep)
            .ok()
            .map(|i| &self.queues[i])
    }
}

/// `IBV_WC_WR_FLUSH_ERR`.
pub const WC_WR_FLUSH_ERR: u8 = 5;

/// `ibv_wc_status_str`'s words, short: what the QPs view and the warnings print.
pub fn status_name(status: u8) -> &'static str {
    match status {
        0 => "success",
        1 => "local length error",
        2 => "local QP operation error",
        3 => "local EE context operation error",
        4 => "local protection error",
        5 => "flushed",
        6 => "memory window bind error",
        7 => "bad response",
        8 => "local access error",
        9 => "remote invalid request",
        10 => "remote access error",
        11 => "remote operation error",
        12 => "transport retry exceeded",
        13 => "RNR retry exceeded",
        14 => "local RDD violation",
        15 => "remote invalid RD request",
        16 => "remote aborted",
        17 => "invalid EE context number",
        18 => "invalid EE context state",
        19 => "fatal error",
        20 => "response timeout",
        21 => "general error",
        22 => "TM error",
        23 => "TM rendezvous incomplete",
        _ => "unknown status",
    }
}

/// What one interval reads of a queue: cumulative counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueCounts {
    pub sq_posted: u64,
    pub sq_completed: u64,
    /// Signaled send work requests posted, and send completions polled for them.
    pub sq_signaled: u64,
    pub sq_signaled_done: u64,
    pub rq_posted: u64,
    pub rq_completed: u64,
}

/// One side (send or receive) of a queue across intervals.
#[derive(Clone, Debug, Default)]
struct Side {
    /// (monotonic ns, posted count) at each interval where `posted` grew while work was
    /// outstanding: the oldest outstanding work request (number `completed + 1`) was first seen
    /// at the first entry whose count reaches it.
    posts: VecDeque<(u64, u64)>,
    completed: u64,
    /// Monotonic ns of the interval that first saw the latest completion count.
    last_completion: Option<u64>,
}

/// Entries kept per side: a queue that grows every interval while its oldest work stays
/// outstanding keeps this many (a queue's depth bounds that in practice); beyond, the two newest
/// merge into one with the newer time, so that an age is never over-stated (the newest work's
/// ages may be under-stated, the oldest's stay exact).
const POSTS_KEPT: usize = 512;

impl Side {
    /// Reads this interval's counts; returns (oldest outstanding age, stalled age).
    fn step(&mut self, now: u64, posted: u64, completed: u64) -> (u64, u64) {
        if completed != self.completed {
            self.completed = completed;
            self.last_completion = Some(now);
        }
        // Work requests no longer outstanding leave: keep the first entry that still covers
        // the oldest outstanding one (its count is past `completed`).
        while self.posts.front().is_some_and(|&(_, n)| n <= completed) {
            self.posts.pop_front();
        }
        if posted > completed && self.posts.back().is_none_or(|&(_, n)| n < posted) {
            self.posts.push_back((now, posted));
            if self.posts.len() > POSTS_KEPT {
                // The older of the two newest goes: the newest covers its work, at its later time.
                self.posts.remove(self.posts.len() - 2);
            }
        }
        let Some(&(first, _)) = self.posts.front().filter(|_| posted > completed) else {
            return (0, 0);
        };
        let oldest = now.saturating_sub(first);
        let since = self.last_completion.map_or(first, |c| c.max(first));
        (oldest, now.saturating_sub(since))
    }
}

#[derive(Clone, Debug, Default)]
struct Tracked {
    sq: Side,
    rq: Side,
    last_completion: Option<u64>,
}

/// Ages of every queue of a process, from the cumulative counts read once per interval.
#[derive(Clone, Debug, Default)]
pub struct AgeTracker {
    queues: HashMap<u32, Tracked>,
}

impl AgeTracker {
    pub fn new() -> AgeTracker {
        AgeTracker::default()
    }

    /// Reads queue `ep`'s counts at monotonic time `now_ns` and fills the ages of `out` (its
    /// counts are set from `c`).
    pub fn step(&mut self, ep: u32, now_ns: u64, c: QueueCounts, out: &mut QueueState) {
        let t = self.queues.entry(ep).or_default();
        let before = (t.sq.completed, t.rq.completed);
        // The send side's ages are of the signaled work: what a completion is awaited for.
        let (sq_oldest, sq_stalled) = t.sq.step(now_ns, c.sq_signaled, c.sq_signaled_done);
        let (rq_oldest, _) = t.rq.step(now_ns, c.rq_posted, c.rq_completed);
        if before != (c.sq_signaled_done, c.rq_completed) {
            t.last_completion = Some(now_ns);
        }
        out.ep = ep;
        out.sq_posted = c.sq_posted;
        out.sq_completed = c.sq_completed;
        out.sq_signaled_outstanding = c.sq_signaled.saturating_sub(c.sq_signaled_done);
        out.rq_posted = c.rq_posted;
        out.rq_completed = c.rq_completed;
        out.sq_oldest_ns = sq_oldest;
        out.rq_oldest_ns = rq_oldest;
        out.sq_stalled_ns = sq_stalled;
        out.last_completion_ns = t.last_completion.map(|l| now_ns.saturating_sub(l));
    }

    /// Reads queue `ep`'s signaled send counts (posted, completions) between intervals (the
    /// collector's drains, every few ms), so that its send ages are that precise rather than an
    /// interval's.
    pub fn tick_sq(&mut self, ep: u32, now_ns: u64, posted: u64, completed: u64) {
        let t = self.queues.entry(ep).or_default();
        if completed != t.sq.completed {
            t.last_completion = Some(now_ns);
        }
        t.sq.step(now_ns, posted, completed);
    }

    /// Forgets queue `ep` (destroyed and reported).
    pub fn forget(&mut self, ep: u32) {
        self.queues.remove(&ep);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;
    const MS: u64 = 1_000_000;

    fn step(t: &mut AgeTracker, now: u64, sp: u64, sc: u64) -> QueueState {
        let mut q = QueueState::default();
        t.step(
            7,
            now,
            QueueCounts {
                sq_posted: sp,
                sq_completed: sc,
                sq_signaled: sp,
                sq_signaled_done: sc,
                ..Default::default()
            },
            &mut q,
        );
        q
    }

    #[test]
    fn a_queue_that_stops_completing_ages_from_its_last_completion() {
        let mut t = AgeTracker::new();
        // Streaming: 100 posted per interval, completions close behind.
        for i in 1..=8u64 {
            let q = step(&mut t, i * 250 * MS, i * 100, i * 100 - 10);
            assert_eq!(q.sq_outstanding(), 10);
            // The oldest outstanding was posted in this interval.
            assert_eq!((q.sq_oldest_ns, q.sq_stalled_ns), (0, 0), "interval {i}");
        }
        // Completions stop at 790; posts go on to 850, then stop.
        let q = step(&mut t, 9 * 250 * MS, 850, 790);
        assert_eq!((q.sq_oldest_ns, q.sq_stalled_ns), (250 * MS, 250 * MS));
        for i in 10..=24u64 {
            let q = step(&mut t, i * 250 * MS, 850, 790);
            // WR 791 was first seen at interval 8; the last completion at interval 8 too.
            assert_eq!(q.sq_oldest_ns, (i - 8) * 250 * MS);
            assert_eq!(q.sq_stalled_ns, (i - 8) * 250 * MS);
            assert_eq!(q.last_completion_ns, Some((i - 8) * 250 * MS));
            assert_eq!(
                q.stalled(2 * S),
                (i - 8) * 250 * MS >= 2 * S,
                "interval {i}"
            );
        }
        // Completions resume: the stall clears at once.
        let q = step(&mut t, 25 * 250 * MS, 850, 800);
        assert_eq!(q.sq_stalled_ns, 0);
        assert!(!q.stalled(1));
        assert_eq!(q.last_completion_ns, Some(0));
        // All done: nothing outstanding, no age.
        let q = step(&mut t, 26 * 250 * MS, 850, 850);
        assert_eq!(
            (q.sq_oldest_ns, q.sq_stalled_ns, q.sq_outstanding()),
            (0, 0, 0)
        );
    }

    #[test]
    fn a_request_posted_after_a_quiet_time_ages_from_its_post() {
        let mut t = AgeTracker::new();
        step(&mut t, S, 10, 10);
        // Idle for 9 s, then one post that never completes.
        let q = step(&mut t, 10 * S, 11, 10);
        assert_eq!((q.sq_oldest_ns, q.sq_stalled_ns), (0, 0));
        let q = step(&mut t, 13 * S, 11, 10);
        assert_eq!((q.sq_oldest_ns, q.sq_stalled_ns), (3 * S, 3 * S));
        assert_eq!(q.last_completion_ns, Some(12 * S));
    }

    #[test]
    fn the_post_history_stays_bounded_and_ages_stay_lower_bounds() {
        let mut t = AgeTracker::new();
        for i in 1..=2000u64 {
            step(&mut t, i * MS, i, 0);
        }
        assert!(t.queues[&7].sq.posts.len() <= POSTS_KEPT);
        let q = step(&mut t, 3000 * MS, 2000, 0);
        // The oldest work's age stays exact.
        assert_eq!(q.sq_oldest_ns, 2999 * MS);
        // Part done: WR 301 was first seen at 301 ms, exact still; WR 1801 at 1801 ms, and the
        // merged entries may say later, never earlier.
        let q = step(&mut t, 3001 * MS, 2000, 300);
        assert_eq!(q.sq_oldest_ns, 2700 * MS);
        let q = step(&mut t, 3002 * MS, 2000, 1800);
        assert!(q.sq_oldest_ns <= 1201 * MS, "{}", q.sq_oldest_ns);
        assert_eq!(q.sq_stalled_ns, 0);
    }

    #[test]
    fn ticks_between_intervals_make_the_ages_finer() {
        let mut t = AgeTracker::new();
        step(&mut t, 0, 100, 100);
        // Completions stop 5 ms into the interval; a tick sees the last one there.
        t.tick_sq(7, 5 * MS, 120, 110);
        t.tick_sq(7, 10 * MS, 120, 110);
        let q = step(&mut t, 250 * MS, 120, 110);
        assert_eq!((q.sq_oldest_ns, q.sq_stalled_ns), (245 * MS, 245 * MS));
        assert_eq!(q.last_completion_ns, Some(245 * MS));
    }

    /// NCCL's FIFO writes: unsignaled but every Nth; after the last signaled one completed,
    /// the unsignaled ones after it stay outstanding for good on an idle QP, and that is no stall.
    #[test]
    fn trailing_unsignaled_requests_are_outstanding_but_not_awaited() {
        let mut t = AgeTracker::new();
        let mut q = QueueState::default();
        let c = QueueCounts {
            sq_posted: 20,
            sq_completed: 16,
            sq_signaled: 1,
            sq_signaled_done: 1,
            ..Default::default()
        };
        t.step(7, S, c, &mut q);
        t.step(7, 60 * S, c, &mut q);
        assert_eq!((q.sq_outstanding(), q.sq_signaled_outstanding), (4, 0));
        assert_eq!(q.sq_stalled_ns, 0);
        assert!(!q.stalled(S));
    }

    #[test]
    fn errors_and_health_decide_what_is_a_stall() {
        let mut q = QueueState {
            sq_posted: 5,
            sq_completed: 1,
            sq_signaled_outstanding: 2,
            sq_stalled_ns: 10 * S,
            errors: vec![(5, 3), (12, 1)],
            ..Default::default()
        };
        assert!(q.stalled(S));
        assert_eq!(q.hard_errors(), 1);
        q.health = QueueHealth::Error;
        assert!(!q.stalled(S));
        q.health = QueueHealth::Destroyed;
        assert!(!q.stalled(S));
        assert_eq!(status_name(12), "transport retry exceeded");
        let qs = Queues {
            at_ns: 1,
            queues: vec![
                QueueState {
                    ep: 2,
                    ..Default::default()
                },
                QueueState {
                    ep: 9,
                    ..Default::default()
                },
            ],
        };
        assert_eq!(qs.get(9).map(|q| q.ep), Some(9));
        assert!(qs.get(3).is_none());
    }
}
