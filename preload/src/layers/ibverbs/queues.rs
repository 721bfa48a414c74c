//! Outstanding work per QP (issue 36, docs/COUNTS.md "Outstanding work"): each QP the process
//! creates gets a send-queue tracker, found by its endpoint id. The post wrappers count every send
//! work request the provider accepted and note the position of each signaled one; `poll_cq`
//! retires, at each send completion of that QP (named by `qp_num`), the work requests up to the
//! signaled one it completes — the unsignaled ones before it complete with it, as verbs specifies.
//! Error completions are counted by status; a QP that reports one (or that the program moves to
//! the error state) is in error: its outstanding work is flushed, not stalled.
//!
//! The collector reads every tracker once per interval ([`collect`]) and turns the cumulative
//! counts into ages (`sigmatop::queue::AgeTracker`, on the monotonic clock); receives posted and
//! completed come from the process's own counters (the snapshot).
//!
//! Hot path: a tracker is one load from a static table by endpoint id; a send work request costs
//! a load and a store of its QP's count (and, when signaled, one more store into a 256-slot ring
//! and of the signaled count); a send completion a few loads and stores. Plain loads and stores:
//! the verbs API leaves a QP's posts to one thread at a time, and a completion queue's polls too;
//! a program that breaks that can only mis-count here, never fault.

use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU8, AtomicU64, Ordering};
use std::sync::Mutex;

use sigmatop::event::{Op, OpCount, Snapshot};
use sigmatop::queue::{AgeTracker, QueueCounts, QueueHealth, QueueState, Queues};

use crate::runtime::thread::MAX_EPS;

/// Signaled work requests whose positions a tracker keeps: more outstanding at once than this
/// (on a queue that mixes unsignaled ones) makes a completion's position unknown: counted in
/// `overrun`, and the queue's completed count then moves by one per completion (a lower bound).
const RING: usize = 256;
const RING_MASK: u64 = RING as u64 - 1;
/// Statuses counted one by one (`ibv_wc_status` 0..=23); others in the last.
const STATUSES: usize = 24;
/// A destroyed QP's tracker is reused for a new QP only this long after it was retired, so that a
/// completion racing its destruction never counts on the new QP.
const QUARANTINE_NS: u64 = 5_000_000_000;

const LIVE: u8 = 0;
const ERROR: u8 = 1;
const DESTROYED: u8 = 2;

/// One QP's send queue.
pub struct SqTrack {
    posted: AtomicU64,
    sig_posted: AtomicU64,
    completed: AtomicU64,
    sig_done: AtomicU64,
    /// Some work request was posted unsignaled (only then are positions read from the ring).
    mixed: AtomicBool,
    /// The QP signals every work request (`sq_sig_all`).
    sig_all: AtomicBool,
    /// Its send CQ is an extended CQ (polled with ibv_start_poll, not seen).
    blind: AtomicBool,
    health: AtomicU8,
    unmatched: AtomicU64,
    overrun: AtomicU64,
    errors: [AtomicU64; STATUSES],
    /// `posted` after each signaled work request, by its signaled index.
    ring: [AtomicU64; RING],
}

impl SqTrack {
    fn new() -> SqTrack {
        SqTrack {
            posted: AtomicU64::new(0),
            sig_posted: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            sig_done: AtomicU64::new(0),
            mixed: AtomicBool::new(false),
            sig_all: AtomicBool::new(false),
            blind: AtomicBool::new(false),
            health: AtomicU8::new(LIVE),
            unmatched: AtomicU64::new(0),
            overrun: AtomicU64::new(0),
            errors: [const { AtomicU64::new(0) }; STATUSES],
            ring: [const { AtomicU64::new(0) }; RING],
        }
    }

    fn reset(&self, sig_all: bool, blind: bool) {
        for c in [
            &self.posted,
            &self.sig_posted,
            &self.completed,
            &self.sig_done,
            &self.unmatched,
            &self.overrun,
        ] {
            c.store(0, Ordering::Relaxed);
        }
        for e in &self.errors {
            e.store(0, Ordering::Relaxed);
        }
        self.mixed.store(false, Ordering::Relaxed);
        self.sig_all.store(sig_all, Ordering::Relaxed);
        self.blind.store(blind, Ordering::Relaxed);
        self.health.store(LIVE, Ordering::Release);
    }

    /// One send work request the provider accepted.
    #[inline(always)]
    pub fn posted(&self, signaled: bool) {
        let n = self.posted.load(Ordering::Relaxed) + 1;
        self.posted.store(n, Ordering::Relaxed);
        if signaled || self.sig_all.load(Ordering::Relaxed) {
            let s = self.sig_posted.load(Ordering::Relaxed);
            self.ring[(s & RING_MASK) as usize].store(n, Ordering::Relaxed);
            // Release: a poller that sees the count sees the position.
            self.sig_posted.store(s + 1, Ordering::Release);
        } else if !self.mixed.load(Ordering::Relaxed) {
            self.mixed.store(true, Ordering::Relaxed);
        }
    }

    /// A successful send completion of this QP: retires the work requests up to its signaled one.
    #[inline(always)]
    pub fn completed(&self) {
        let d = self.sig_done.load(Ordering::Relaxed);
        let s = self.sig_posted.load(Ordering::Acquire);
        if d >= s {
            // A completion of work sigmatop did not see posted.
            self.unmatched.store(
                self.unmatched.load(Ordering::Relaxed) + 1,
                Ordering::Relaxed,
            );
            return;
        }
        self.sig_done.store(d + 1, Ordering::Relaxed);
        let done = self.completed.load(Ordering::Relaxed);
        let pos = if !self.mixed.load(Ordering::Relaxed) {
            // Every work request so far was signaled: the d-th completion is the d-th post.
            d + 1
        } else if s - d <= RING as u64 {
            self.ring[(d & RING_MASK) as usize].load(Ordering::Relaxed)
        } else {
            self.overrun
                .store(self.overrun.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
            done + 1
        };
        if pos > done {
            self.completed.store(pos, Ordering::Relaxed);
        }
    }

    /// An error completion naming this QP (its opcode is undefined: a send's or a receive's).
    #[cold]
    pub fn failed(&self, status: u32) {
        let e = &self.errors[(status as usize).min(STATUSES - 1)];
        e.store(e.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        if status != sigmatop::queue::WC_WR_FLUSH_ERR as u32 {
            self.health.store(ERROR, Ordering::Relaxed);
        }
    }
}

/// Trackers by endpoint id (null: not a tracked QP).
static TRACKS: [AtomicPtr<SqTrack>; MAX_EPS as usize] =
    [const { AtomicPtr::new(core::ptr::null_mut()) }; MAX_EPS as usize];

/// The tracker of endpoint `ep`, if it is a QP this layer saw created.
#[inline(always)]
pub fn track(ep: u32) -> Option<&'static SqTrack> {
    let p = TRACKS.get(ep as usize)?.load(Ordering::Acquire);
    // SAFETY: trackers are never freed (a retired one is reused after its quarantine).
    unsafe { p.as_ref() }
}

/// Control-path bookkeeping: the QPs tracked (endpoint ids), retired trackers waiting for reuse.
struct Book {
    tracked: Vec<u32>,
    /// Extended CQs (`create_cq_ex`), whose polls sigmatop does not see.
    cqs_ex: Vec<usize>,
    /// (monotonic ns when retired, tracker).
    quarantine: Vec<(u64, &'static SqTrack)>,
    ages: AgeTracker,
}

static BOOK: Mutex<Option<Book>> = Mutex::new(None);

/// The bookkeeping's lock, for `fork::prepare` (a leaf).
pub(super) fn hold_for_fork(h: &mut crate::runtime::held::Held) {
    h.lock(&BOOK);
}

fn with_book<R>(f: impl FnOnce(&mut Book) -> R) -> Option<R> {
    let mut g = BOOK.lock().ok()?;
    let b = g.get_or_insert_with(|| Book {
        tracked: Vec::new(),
        cqs_ex: Vec::new(),
        quarantine: Vec::new(),
        ages: AgeTracker::new(),
    });
    Some(f(b))
}

/// An extended CQ was created (control path): the QPs that complete on it are blind.
pub fn note_cq_ex(cq: usize) {
    if cq != 0 {
        with_book(|b| b.cqs_ex.push(cq));
    }
}

/// A QP was created as endpoint `ep`, completing its sends on `send_cq`: it gets a tracker
/// (control path).
pub fn on_created(ep: u32, sig_all: bool, send_cq: usize) {
    let Some(slot) = TRACKS.get(ep as usize) else {
        return;
    };
    let now = crate::runtime::clock::mono_ns();
    let t = with_book(|b| {
        let reuse = b
            .quarantine
            .iter()
            .position(|(at, _)| now.saturating_sub(*at) >= QUARANTINE_NS);
        let t: &'static SqTrack = match reuse {
            Some(i) => b.quarantine.swap_remove(i).1,
            None => Box::leak(Box::new(SqTrack::new())),
        };
        t.reset(sig_all, b.cqs_ex.contains(&send_cq));
        b.tracked.push(ep);
        t
    });
    if let Some(t) = t {
        slot.store(t as *const SqTrack as *mut SqTrack, Ordering::Release);
    }
}

/// The program moved QP `ep` to `state` (`ibv_qp_state`): the error state ends its edge; a reset
/// QP starts over with nothing outstanding.
pub fn on_state(ep: u32, state: u32) {
    let Some(t) = track(ep) else { return };
    match state {
        // IBV_QPS_RESET: what was outstanding is gone with the queue's contents.
        0 => {
            t.completed
                .store(t.posted.load(Ordering::Relaxed), Ordering::Relaxed);
            t.sig_done
                .store(t.sig_posted.load(Ordering::Relaxed), Ordering::Relaxed);
            t.health.store(LIVE, Ordering::Relaxed);
        }
        // IBV_QPS_SQE, IBV_QPS_ERR.
        5 | 6 => t.health.store(ERROR, Ordering::Relaxed),
        _ => {}
    }
}

/// QP `ep` was destroyed: reported once more as destroyed, then retired by [`collect`].
pub fn on_destroyed(ep: u32) {
    if let Some(t) = track(ep) {
        t.health.store(DESTROYED, Ordering::Release);
    }
}

/// Between intervals (each collector drain, every few ms): the send counts of every tracked QP,
/// so that a stall's age is that precise. A try-lock: a drain never waits for the control path.
pub fn tick() {
    let Ok(mut g) = BOOK.try_lock() else { return };
    let Some(b) = g.as_mut() else { return };
    let now = crate::runtime::clock::mono_ns();
    for &ep in &b.tracked {
        if let Some(t) = track(ep) {
            b.ages.tick_sq(
                ep,
                now,
                t.sig_posted.load(Ordering::Acquire),
                t.sig_done.load(Ordering::Relaxed),
            );
        }
    }
}

/// The receive counts of endpoint `ep` in a snapshot's counters (sorted by endpoint, op).
fn receives(counts: &[OpCount], ep: u32) -> (u64, u64) {
    let from = counts.partition_point(|c| c.ep < ep);
    counts[from..]
        .iter()
        .take_while(|c| c.ep == ep)
        .filter(|c| matches!(Op::from_u8(c.op), Some(Op::VerbsRecv | Op::VerbsSrqRecv)))
        .fold((0, 0), |(p, d), c| (p + c.posted, d + c.ops))
}

/// Every tracked QP (and every verbs SRQ with receives posted) at this interval: counts, ages,
/// error completions. Collector thread only. None when the process tracks no QP.
pub fn collect(snap: &Snapshot) -> Option<Queues> {
    let now = crate::runtime::clock::mono_ns();
    let srqs: Vec<u32> = snap
        .counts
        .iter()
        .filter(|c| c.op == Op::VerbsSrqRecv as u8 && c.posted > 0)
        .map(|c| c.ep)
        .collect();
    with_book(|b| {
        if b.tracked.is_empty() && srqs.is_empty() {
            return None;
        }
        let mut out = Vec::with_capacity(b.tracked.len() + srqs.len());
        let mut retired = Vec::new();
        for &ep in &b.tracked {
            let Some(t) = track(ep) else { continue };
            let (rq_posted, rq_completed) = receives(&snap.counts, ep);
            let c = QueueCounts {
                sq_posted: t.posted.load(Ordering::Relaxed),
                sq_completed: t.completed.load(Ordering::Relaxed),
                sq_signaled: t.sig_posted.load(Ordering::Acquire),
                sq_signaled_done: t.sig_done.load(Ordering::Relaxed),
                rq_posted,
                rq_completed,
            };
            let mut q = QueueState::default();
            b.ages.step(ep, now, c, &mut q);
            q.errors = t
                .errors
                .iter()
                .enumerate()
                .filter_map(|(s, n)| {
                    let n = n.load(Ordering::Relaxed);
                    (n > 0).then_some((s as u8, n))
                })
                .collect();
            q.unmatched = t.unmatched.load(Ordering::Relaxed) + t.overrun.load(Ordering::Relaxed);
            q.blind = t.blind.load(Ordering::Relaxed);
            q.health = match t.health.load(Ordering::Acquire) {
                LIVE => QueueHealth::Live,
                ERROR => QueueHealth::Error,
                _ => {
                    retired.push((ep, t));
                    QueueHealth::Destroyed
                }
            };
            // Nothing ever posted: not a queue to show.
            if c != QueueCounts::default() || !q.errors.is_empty() || q.unmatched > 0 {
                out.push(q);
            }
        }
        for &ep in &srqs {
            let (rq_posted, rq_completed) = receives(&snap.counts, ep);
            let mut q = QueueState::default();
            b.ages.step(
                ep,
                now,
                QueueCounts {
                    rq_posted,
                    rq_completed,
                    ..Default::default()
                },
                &mut q,
            );
            out.push(q);
        }
        for (ep, t) in retired {
            if let Some(slot) = TRACKS.get(ep as usize) {
                slot.store(core::ptr::null_mut(), Ordering::Release);
            }
            b.tracked.retain(|&e| e != ep);
            b.ages.forget(ep);
            b.quarantine.push((now, t));
        }
        out.sort_by_key(|q| q.ep);
        out.dedup_by_key(|q| q.ep);
        Some(Queues {
            at_ns: snap.at_ns,
            queues: out,
        })
    })
    .flatten()
}

/// After a fork, in the child: its QPs are the parent's (a child does not use them: verbs
/// resources do not survive fork without `ibv_fork_init`, and the child's counters start from
/// zero), so nothing is tracked.
pub fn reset_after_fork() {
    if let Ok(mut g) = BOOK.lock() {
        if let Some(b) = g.as_mut() {
            for &ep in &b.tracked {
                if let Some(slot) = TRACKS.get(ep as usize) {
                    slot.store(core::ptr::null_mut(), Ordering::Release);
                }
            }
        }
        *g = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsignaled_requests_complete_with_the_next_signaled_one() {
        let t = SqTrack::new();
        // A signaled write every 4th, as perftest's cq_mod does.
        for i in 1..=12u64 {
            t.posted(i % 4 == 0);
        }
        assert_eq!(t.posted.load(Ordering::Relaxed), 12);
        t.completed();
        assert_eq!(t.completed.load(Ordering::Relaxed), 4);
        t.completed();
        t.completed();
        assert_eq!(t.completed.load(Ordering::Relaxed), 12);
        // One completion too many: unmatched, nothing moves.
        t.completed();
        assert_eq!(t.completed.load(Ordering::Relaxed), 12);
        assert_eq!(t.unmatched.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn sq_sig_all_signals_every_request_and_a_deep_queue_stays_exact() {
        let t = SqTrack::new();
        t.reset(true, false);
        for _ in 0..1000 {
            t.posted(false);
        }
        for i in 1..=1000u64 {
            t.completed();
            assert_eq!(t.completed.load(Ordering::Relaxed), i);
        }
        assert_eq!(t.overrun.load(Ordering::Relaxed), 0);
        // Mixed and deeper than the ring: lower bounds, counted.
        let t = SqTrack::new();
        for i in 0..4 * RING as u64 {
            t.posted(i % 2 == 1);
        }
        t.completed();
        assert_eq!(t.completed.load(Ordering::Relaxed), 1);
        assert_eq!(t.overrun.load(Ordering::Relaxed), 1);
    }

    /// A QP destroyed with work outstanding: reported once as destroyed (no stall), then
    /// forgotten; its tracker waits out its quarantine before a new QP gets it.
    #[test]
    fn a_destroyed_queue_ends_its_edge() {
        let ep = MAX_EPS - 3;
        on_created(ep, false, 0);
        let t = track(ep).expect("tracked");
        for _ in 0..5 {
            t.posted(true);
        }
        let snap = Snapshot::default();
        let q = collect(&snap).expect("queues");
        let s = q.get(ep).expect("its queue");
        assert_eq!((s.sq_outstanding(), s.sq_signaled_outstanding), (5, 5));
        on_destroyed(ep);
        let q = collect(&snap).expect("queues");
        let s = q.get(ep).expect("reported once more");
        assert_eq!(s.health, QueueHealth::Destroyed);
        assert!(!s.stalled(0));
        assert!(track(ep).is_none(), "retired");
        assert!(
            collect(&snap).is_none_or(|q| q.get(ep).is_none()),
            "forgotten"
        );
    }

    #[test]
    fn errors_count_by_status_and_only_a_real_error_ends_the_edge() {
        let t = SqTrack::new();
        t.failed(5);
        assert_eq!(t.health.load(Ordering::Relaxed), LIVE);
        t.failed(12);
        t.failed(99);
        assert_eq!(t.health.load(Ordering::Relaxed), ERROR);
        assert_eq!(t.errors[12].load(Ordering::Relaxed), 1);
        assert_eq!(t.errors[STATUSES - 1].load(Ordering::Relaxed), 1);
    }
}
