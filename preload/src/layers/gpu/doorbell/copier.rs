//! WQE recovery, off the doorbell's path (issue 41): its own thread ("sigmatop-wqe") copies the
//! WQEBBs behind each doorbell into a mirror of the send queue (an async device-to-host copy on
//! its own CUDA stream into pinned memory; a memcpy for a host-resident queue), parses them once
//! the batch is full or the QP is idle, and records each WQE as a GPU op event stamped with its
//! doorbell's timestamp. The poller only forwards, decodes the word and hands the range over
//! ([`Link`]): no copy, no sync, no parse ever sits between two doorbells. It also reads, for
//! the poller, the doorbell records that live in GPU memory (a shared register's check,
//! `Job::Check`), and answers with what it read (`MakeUp`).
//!
//! **Keeping up.** A slot can be reused as soon as the NIC has run the WQE in it, so the copy is
//! the one urgent thing: each pass drains every job first, then makes one copy per QP of the
//! union of its ranges not copied yet (a doorbell that covers what an earlier one left pending
//! costs no copy of its own), and parses only when nothing is left to copy (a parse looks at the
//! queue every [`PARSE_CHUNK`] WQEBBs and goes back to it as soon as a job is there). The mirror holds two rounds of the ring where the queue has
//! at most 16384 slots, so a copy never waits for the parse of the round before it. With nothing
//! to do the thread spins [`SPIN_NS`], then parks [`PARK_NS`] at a time ([`PARK_IDLE_NS`] once idle
//! [`ACTIVE_NS`]) with a 1 µs timer slack: the poller never wakes it (a wake is a syscall), and
//! a thread that sleeps is the one the scheduler runs first when it wakes, where a spinning one
//! is descheduled for milliseconds on a loaded machine.
//!
//! **Never wrong.** A slot the program reused before the copy read it is found by the WQE's own
//! index (the ctrl segment's `wqe_index`, and its QPN): the walk stops there, the copier skips
//! to the next slot that holds the WQE its position expects, and every WQEBB skipped is counted
//! in `overwritten_slots` (and in `unparsable`, the drop counter the dashboard shows). Slots the
//! program has certainly reused (a later doorbell posted the WQE that takes the slot) are counted
//! without a copy. A copy can also be torn (the program rewrites a slot while it is read): each
//! copied slot is read a second time after the copy (for GPU memory, a second copy on the same
//! stream), and a WQE with a slot whose two reads differ is treated as reused (`torn_slots`
//! counts those slots). What no second read can see: a program that writes a WQE's segments and
//! then its ctrl segment, interrupted between the two for longer than the copy and its second
//! read take, while the copy reads that very slot. A range the
//! poller could not hand over (the queue full: this thread [`JOBS`] jobs behind) is counted in
//! `dropped_wqebbs` (and `unparsable`): posted = recovered + overwritten + dropped, in WQEBBs.

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::collections::VecDeque;
use std::io::Write;
use std::sync::OnceLock;
use std::time::Duration;

use crossbeam_queue::ArrayQueue;
use sigmatop::decode::WQEBB_BYTES;
use sigmatop::decode::doorbell::WqeRange;
use sigmatop::decode::wqe::{CtrlSeg, Opcode, WalkError, Wqe, walk_new_wqes};
use sigmatop::event::{Op, flags};

use super::stats::{
    CHECKS, COPIES, COPY_FAILED, DROPPED, OVERWRITTEN, SYNCS, TORN, UNPARSABLE, WQES,
};
use super::{QpInfo, QpnMap, STATE};
use crate::layers::gpu::driver::{self as cuda_driver, Driver, Stream};
use crate::runtime::config::{Gpu, WqeCopy};
use crate::runtime::thread::{Detail, Outcome, ThreadState};

/// A QP idle this long has its pending WQEs parsed.
const IDLE_FLUSH_NS: u64 = 50_000;
/// Jobs the poller can hand over before it must drop a range (counted).
pub(super) const JOBS: usize = 4096;
/// After its last job the copier spins this long (it is on a CPU when the next doorbell comes)...
const SPIN_NS: u64 = 20_000;
/// ... then sleeps this long at a time while the GPU posted in the last [`ACTIVE_NS`] ...
const PARK_NS: u64 = 50_000;
const ACTIVE_NS: u64 = 100_000_000;
/// ... and this long once it is idle.
const PARK_IDLE_NS: u64 = 1_000_000;
/// Jobs taken before the copies they ask for are made (a poller that hands ranges over as fast
/// as they are taken never holds the copies up).
const DRAIN_MAX: usize = 256;
/// WQEBBs parsed before the copier looks at its queue again (a parse never holds a copy up
/// longer than this takes).
const PARSE_CHUNK: u32 = 8;
/// The mirror holds two rounds of a ring up to this many slots (one round above: a whole round's
/// copy then waits for the parse of the one before).
const DOUBLE_MIRROR_MAX: u32 = 16_384;

/// The copier has applied the poller's generation `g` (`Job::Ack`): a QP the poller dropped
/// before it is flushed and its copies synced.
pub(super) static COPY_ACK: AtomicU64 = AtomicU64::new(0);
pub(super) static COPIER_RUNNING: AtomicBool = AtomicBool::new(false);

/// What the poller hands the copier, in order.
pub(super) enum Job {
    /// A devx QP to recover WQEs of.
    Add(QpInfo),
    /// New WQEBBs of a QP, posted by the doorbell seen at `tsc`.
    Range { qpn: u32, range: WqeRange, tsc: u64 },
    /// Parse what is pending of a QP now (its ring was overrun).
    Flush(u32),
    /// The QP is gone: parse what is pending, sync its copies, forget it.
    Gone(u32),
    /// Read the send counter of a QP's doorbell record in GPU memory (a shared register).
    Check { qpn: u32, dbr: u64 },
    /// Everything before this is done when `COPY_ACK` says `g`.
    Ack(u64),
    /// Parse everything and end.
    Stop,
}

/// A shared register's other QP, its doorbell record's send counter as read.
pub(super) struct MakeUp {
    pub qpn: u32,
    /// None: the read failed.
    pub rec: Option<u16>,
}

/// The poller → copier queue and the answers back: lock-free, bounded, allocated once.
pub(super) struct Link {
    pub jobs: ArrayQueue<Job>,
    pub makeups: ArrayQueue<MakeUp>,
    /// The copier thread, for the control path's wake-ups (never the doorbell path's).
    thread: OnceLock<std::thread::Thread>,
}

impl Link {
    pub fn new() -> Link {
        Link {
            jobs: ArrayQueue::new(JOBS),
            makeups: ArrayQueue::new(1024),
            thread: OnceLock::new(),
        }
    }

    /// Hands a range over: lock-free, no allocation, no syscall (the copier is not woken: it
    /// looks again within [`PARK_NS`], [`PARK_IDLE_NS`] after [`ACTIVE_NS`] without a job).
    /// False, counted, when the copier is [`JOBS`] jobs behind.
    #[inline]
    pub fn range(&self, qpn: u32, range: WqeRange, tsc: u64) -> bool {
        if self.jobs.push(Job::Range { qpn, range, tsc }).is_err() {
            let n = u64::from(range.wqebbs).max(1);
            DROPPED.fetch_add(n, Ordering::Relaxed);
            UNPARSABLE.fetch_add(n, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// Hands a control job over, waiting for room (control path: the copier always drains),
    /// and wakes the copier; false when it is not running.
    pub fn control(&self, mut job: Job) -> bool {
        loop {
            match self.jobs.push(job) {
                Ok(()) => {
                    if let Some(t) = self.thread.get() {
                        t.unpark();
                    }
                    return true;
                }
                Err(j) => {
                    if !COPIER_RUNNING.load(Ordering::Acquire) {
                        return false;
                    }
                    job = j;
                    std::thread::yield_now();
                }
            }
        }
    }
}

struct Pending {
    range: WqeRange,
    tsc: u64,
    /// Its copy was issued (or it needs none: all of it is `lost`).
    copied: bool,
    /// The sequence number of its copy on the stream (GPU memory): readable once `synced`
    /// reaches it; 0: nothing in flight (a memcpy, or nothing to copy).
    seq: u64,
    /// Its copy could not be issued.
    failed: bool,
    /// Parsed up to here (None: not started).
    at: Option<u16>,
    /// WQEBBs at its start the program had reused before the copy (a later doorbell posted the
    /// WQEs that take their slots): counted, not copied.
    lost: u32,
}

struct QpCopy {
    info: QpInfo,
    /// Host mirror of the SQ: `mcnt` WQEBBs, WQEBB `p` (a 16-bit producer index) at slot
    /// `p & (mcnt-1)`; pinned for a queue in GPU memory.
    mirror: *mut u8,
    /// For a queue in GPU memory: the second copy of each slot, read after the mirror's (torn
    /// copies), same layout; null for host memory (re-read in place).
    check: *mut u8,
    /// One bit per mirror slot: its two reads differed (a torn copy). Mapped like the mirror.
    torn: *mut u64,
    /// Mirror slots: twice the ring's where it has at most [`DOUBLE_MIRROR_MAX`], else the ring's.
    mcnt: u32,
    pending: VecDeque<Pending>,
    /// WQEBBs of `pending` (contiguous: they never span more than `mcnt`).
    span: u32,
    /// Copied ranges not parsed yet, in WQEBBs.
    unparsed: u32,
    /// Ranges not copied yet, in WQEBBs.
    uncopied: u32,
    /// The end of the newest range handed over.
    last_end: Option<u16>,
    threshold: u32,
    last_db_ns: u64,
}

/// A gone QP's buffers, for the next QP of the same size.
struct Spare {
    mirror: *mut u8,
    check: *mut u8,
    torn: *mut u64,
    mcnt: u32,
}

/// A piece of the mirror whose check copy (GPU memory) is compared after the next sync.
struct CheckPiece {
    /// The QP's mirror, check buffer and torn bits (mapped for the process's life), and the
    /// piece's slots.
    mirror: *const u8,
    check: *const u8,
    torn: *mut u64,
    mcnt: u32,
    at: u16,
    n: u32,
}

pub(super) struct Copier {
    qps: QpnMap<QpCopy>,
    cx: Cx,
}

/// Everything of the copier but its QPs (so that one QP and the rest are borrowed apart).
struct Cx {
    cfg: &'static Gpu,
    link: std::sync::Arc<Link>,
    /// QPs with ranges not copied yet / with pending ranges (may hold stale or repeated QPNs).
    to_copy: Vec<u32>,
    busy: Vec<u32>,
    /// Copies issued on the stream / all complete up to this number.
    seq: u64,
    synced: u64,
    checks: Vec<CheckPiece>,
    ts: Option<&'static ThreadState>,
    drv: Option<&'static Driver>,
    stream: Option<Stream>,
    ctx_set: bool,
    log: Option<std::io::BufWriter<std::fs::File>>,
    stop: bool,
    spare: Vec<Spare>,
}

/// Starts the copier thread; false when it could not be started (the poller then forwards only).
pub(super) fn start(link: std::sync::Arc<Link>) -> bool {
    COPIER_RUNNING.store(true, Ordering::Release);
    let l2 = std::sync::Arc::clone(&link);
    let r = std::thread::Builder::new()
        .name("sigmatop-wqe".into())
        .stack_size(1 << 20)
        .spawn(move || {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                Copier::new(l2).run()
            }));
            if r.is_err() {
                eprintln!(
                    "sigmatop: WQE recovery failed; GPU doorbells are still forwarded and counted, their WQEs no longer read"
                );
            }
            COPIER_RUNNING.store(false, Ordering::Release);
        });
    match r {
        Ok(h) => {
            let _ = link.thread.set(h.thread().clone());
            true
        }
        Err(_) => {
            COPIER_RUNNING.store(false, Ordering::Release);
            eprintln!(
                "sigmatop: cannot start the WQE recovery thread; GPU doorbells are forwarded, their WQEs not read"
            );
            false
        }
    }
}

/// The event op of a recovered WQE's opcode.
fn op_of(opcode: Opcode) -> Op {
    match opcode {
        Opcode::RdmaWrite | Opcode::RdmaWriteImm => Op::GpuWrite,
        Opcode::RdmaRead => Op::GpuRead,
        o if o.is_atomic() => Op::GpuAtomic,
        Opcode::Send | Opcode::SendImm | Opcode::SendInval => Op::GpuSend,
        _ => Op::GpuOther,
    }
}

/// Mirror (or check buffer) slot `at`: its offset in a buffer of `mcnt` WQEBBs.
#[inline]
fn slot_off(mcnt: u32, at: u16) -> usize {
    (u32::from(at) & (mcnt - 1)) as usize * WQEBB_BYTES
}

/// Sets (`v`) or clears the torn bit of mirror slot `at`.
fn set_torn(torn: *mut u64, mcnt: u32, at: u16, v: bool) {
    let i = (u32::from(at) & (mcnt - 1)) as usize;
    // SAFETY: `torn` holds mcnt.div_ceil(64) words (new_qp), i / 64 is below that; only this
    // thread touches it.
    let w = unsafe { &mut *torn.add(i / 64) };
    if v {
        *w |= 1 << (i % 64);
    } else {
        *w &= !(1 << (i % 64));
    }
}

/// Whether any of the `n` mirror slots from `at` is torn.
fn any_torn(torn: *const u64, mcnt: u32, at: u16, n: u16) -> bool {
    (0..n).any(|k| {
        let i = (u32::from(at.wrapping_add(k)) & (mcnt - 1)) as usize;
        // SAFETY: as in set_torn.
        unsafe { *torn.add(i / 64) & (1 << (i % 64)) != 0 }
    })
}

/// The WQEBB the walk can resume at after a reused slot: the first at or after `from` (before
/// `end`) whose ctrl segment names itself and this QP, with a sane size.
fn resume_at(ring: &[u8], mcnt: u32, qpn: u32, from: u16, end: u16) -> Option<u16> {
    let mut at = from;
    while at != end {
        let off = (u32::from(at) & (mcnt - 1)) as usize * WQEBB_BYTES;
        if let Some(b) = ring.get(off..off + CtrlSeg::BYTES) {
            let mut c = [0u8; 16];
            c.copy_from_slice(b);
            let c = CtrlSeg::from_bytes(&c);
            if c.wqe_index == at && c.qpn == qpn && c.ds != 0 {
                return Some(at);
            }
        }
        at = at.wrapping_add(1);
    }
    None
}

impl Copier {
    fn new(link: std::sync::Arc<Link>) -> Copier {
        let cfg = crate::runtime::config::gpu();
        let log = cfg.wqe_log.as_ref().and_then(|p| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .ok()
                .map(std::io::BufWriter::new)
        });
        Copier {
            qps: QpnMap::default(),
            cx: Cx {
                cfg,
                link,
                to_copy: Vec::with_capacity(64),
                busy: Vec::with_capacity(64),
                seq: 0,
                synced: 0,
                checks: Vec::with_capacity(64),
                ts: None,
                drv: None,
                stream: None,
                ctx_set: false,
                log,
                stop: false,
                spare: Vec::new(),
            },
        }
    }

    fn run(mut self) {
        self.cx.ts = crate::runtime::thread::current();
        // A 1 µs timer slack: the parks below wake on time, not 50 µs late (the default).
        // SAFETY: prctl(PR_SET_TIMERSLACK) on the calling thread, plain integer arguments.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong, 0, 0, 0) };
        let mut last_job = crate::runtime::clock::mono_ns();
        loop {
            let got = self.drain();
            if self.cx.stop {
                self.flush_all();
                if let Some(l) = self.cx.log.as_mut() {
                    let _ = l.flush();
                }
                return;
            }
            if got {
                self.copy_all();
                last_job = crate::runtime::clock::mono_ns();
                continue;
            }
            let now = crate::runtime::clock::mono_ns();
            if self.parse_due(now) {
                continue;
            }
            let idle = now.saturating_sub(last_job);
            if idle < SPIN_NS {
                core::hint::spin_loop();
            } else if idle < ACTIVE_NS {
                std::thread::park_timeout(Duration::from_nanos(PARK_NS));
            } else {
                if let Some(l) = self.cx.log.as_mut() {
                    let _ = l.flush();
                }
                std::thread::park_timeout(Duration::from_nanos(PARK_IDLE_NS));
            }
        }
    }

    /// Takes the jobs there are, up to [`DRAIN_MAX`] before the copies they ask for (ranges join
    /// their QP's pending list; control jobs are done in order). True when there was one.
    fn drain(&mut self) -> bool {
        let mut n = 0;
        while n < DRAIN_MAX
            && let Some(job) = self.cx.link.jobs.pop()
        {
            n += 1;
            self.job(job);
            if self.cx.stop {
                break;
            }
        }
        n > 0
    }

    fn job(&mut self, job: Job) {
        let cx = &mut self.cx;
        match job {
            Job::Add(info) => {
                if let Some(mut old) = self.qps.remove(&info.qpn) {
                    cx.flush(&mut old);
                }
                if let Some(q) = cx.new_qp(info) {
                    self.qps.insert(q.info.qpn, q);
                }
            }
            Job::Range { qpn, range, tsc } => {
                if let Some(q) = self.qps.get_mut(&qpn) {
                    cx.add_range(q, range, tsc);
                } else {
                    let n = u64::from(range.wqebbs).max(1);
                    DROPPED.fetch_add(n, Ordering::Relaxed);
                    UNPARSABLE.fetch_add(n, Ordering::Relaxed);
                }
            }
            Job::Flush(qpn) => {
                if let Some(q) = self.qps.get_mut(&qpn) {
                    cx.flush(q);
                }
            }
            Job::Gone(qpn) => {
                if let Some(mut q) = self.qps.remove(&qpn) {
                    cx.flush(&mut q);
                    // Its buffers go to the next QP of its size once no copy can land in them.
                    if q.info.gpu.is_none() || cx.synced >= cx.seq {
                        cx.spare.push(Spare {
                            mirror: q.mirror,
                            check: q.check,
                            torn: q.torn,
                            mcnt: q.mcnt,
                        });
                    }
                }
            }
            Job::Check { qpn, dbr } => {
                CHECKS.fetch_add(1, Ordering::Relaxed);
                let mut m = MakeUp {
                    qpn,
                    rec: cx.read_device_send_counter(dbr),
                };
                // Always answered (the poller asks again only then). The poller takes answers
                // whenever one is out; it holds at most one per QP.
                while let Err(back) = cx.link.makeups.push(m) {
                    if !super::POLLER_RUNNING.load(Ordering::Acquire) {
                        break;
                    }
                    m = back;
                    std::thread::yield_now();
                }
            }
            Job::Ack(g) => {
                // Copies in flight of a QP not yet flushed read only queues still alive (a QP
                // leaves through Gone, which syncs first).
                COPY_ACK.store(g, Ordering::Release);
            }
            Job::Stop => cx.stop = true,
        }
    }

    /// Copies what every QP has pending, one copy of the union per QP.
    fn copy_all(&mut self) {
        let cx = &mut self.cx;
        let batch = cx.cfg.copy == WqeCopy::PerBatch;
        let mut list = std::mem::take(&mut cx.to_copy);
        for qpn in list.drain(..) {
            let Some(q) = self.qps.get_mut(&qpn) else {
                continue;
            };
            // One copy per batch (SIGMATOP_WQE_COPY=batch) waits for the batch or the idle
            // flush, for queues in GPU memory.
            if q.uncopied > 0 && (!batch || q.info.gpu.is_none() || q.uncopied >= q.threshold) {
                cx.copy_qp(q);
            }
            if q.uncopied > 0 {
                cx.to_copy.push(qpn);
            }
        }
        // The list's capacity is kept for the next pass (no allocation once it has grown).
        if cx.to_copy.is_empty() {
            cx.to_copy = list;
        }
    }

    /// Parses what is due (a full batch, an idle QP), looking at the queue between two pieces
    /// and going back to it as soon as a job is there. True when it did something.
    fn parse_due(&mut self, now: u64) -> bool {
        let cx = &mut self.cx;
        let mut did = false;
        let mut i = 0;
        while i < cx.busy.len() {
            let qpn = cx.busy[i];
            let Some(q) = self.qps.get_mut(&qpn) else {
                cx.busy.swap_remove(i);
                continue;
            };
            let idle = now.saturating_sub(q.last_db_ns) > IDLE_FLUSH_NS;
            while !q.pending.is_empty()
                && (idle || q.unparsed + q.uncopied >= q.threshold)
                && cx.link.jobs.is_empty()
            {
                if q.pending.front().is_some_and(|p| !p.copied) {
                    cx.copy_qp(q);
                }
                cx.parse_front(q);
                did = true;
            }
            if q.pending.is_empty() {
                cx.busy.swap_remove(i);
            } else {
                i += 1;
            }
            if !cx.link.jobs.is_empty() {
                break;
            }
        }
        did
    }

    fn flush_all(&mut self) {
        for q in self.qps.values_mut() {
            self.cx.flush(q);
        }
    }
}

impl Cx {
    fn ensure_stream(&mut self) -> Option<(&'static Driver, Stream)> {
        if self.drv.is_none() {
            self.drv = cuda_driver::driver();
        }
        let d = self.drv?;
        if !self.ctx_set
            && let Some(c) = STATE.lock().ok().and_then(|s| s.ctx)
        {
            self.ctx_set = d.set_ctx(c);
        }
        if self.stream.is_none() {
            self.stream = d.stream();
        }
        Some((d, self.stream?))
    }

    fn new_qp(&mut self, info: QpInfo) -> Option<QpCopy> {
        let mcnt = if info.sq_cnt <= DOUBLE_MIRROR_MAX {
            info.sq_cnt * 2
        } else {
            info.sq_cnt
        };
        let (mirror, check, torn) = match self
            .spare
            .iter()
            .position(|b| b.mcnt == mcnt && b.check.is_null() == info.gpu.is_none())
        {
            // A gone QP's buffers, nothing in flight into them (Gone): what they hold is
            // never read before a copy of this QP's overwrites it.
            Some(i) => {
                let b = self.spare.swap_remove(i);
                (b.mirror, b.check, b.torn)
            }
            None => self.new_buffers(&info, mcnt)?,
        };
        let threshold = self.cfg.batch.min(info.sq_cnt).max(1);
        Some(QpCopy {
            info,
            mirror,
            check,
            torn,
            mcnt,
            pending: VecDeque::with_capacity(64),
            span: 0,
            unparsed: 0,
            uncopied: 0,
            last_end: None,
            threshold,
            last_db_ns: 0,
        })
    }

    /// A QP's mirror, torn bits and, for a queue in GPU memory, check buffer, pinned. They are
    /// never unmapped (a copy that failed to sync may still land in them; the driver here has no
    /// unregister); a gone QP's are reused by the next QP of the same size (`spare`).
    fn new_buffers(&mut self, info: &QpInfo, mcnt: u32) -> Option<(*mut u8, *mut u8, *mut u64)> {
        let len = mcnt as usize * WQEBB_BYTES;
        let mirror = crate::runtime::os::map_zeroed(len, true)?;
        let torn = crate::runtime::os::map_zeroed((mcnt as usize).div_ceil(64) * 8, true)?;
        let mut check = core::ptr::null_mut();
        if info.gpu.is_some() {
            check = crate::runtime::os::map_zeroed(len, true)?;
            if let Some((d, _)) = self.ensure_stream() {
                for m in [mirror, check] {
                    // Pinned, so the copies are truly asynchronous (best effort).
                    // SAFETY: the real cuMemHostRegister on our own mapping of `len` bytes.
                    let _ = unsafe { (d.host_register)(m as *mut core::ffi::c_void, len, 0) };
                }
            }
        }
        Some((mirror, check, torn as *mut u64))
    }

    /// The send counter (`[1]`, big-endian, 16 bits) of a doorbell record in GPU memory.
    fn read_device_send_counter(&mut self, dbr: u64) -> Option<u16> {
        let (d, s) = self.ensure_stream()?;
        let mut b = [0u8; 4];
        // SAFETY: a 4-byte copy of the QP's record (device memory) into a local; synced before
        // b is read.
        if !unsafe { d.dtoh_async(b.as_mut_ptr(), dbr + 4, 4, s) } || !self.sync() {
            return None;
        }
        Some((u32::from_be(u32::from_ne_bytes(b)) & 0xffff) as u16)
    }

    fn add_range(&mut self, q: &mut QpCopy, range: WqeRange, tsc: u64) {
        // Ranges follow each other (the poller's tracker); after an overrun they may not, and a
        // range that does not continue the last one is parsed apart.
        if q.last_end.is_some_and(|e| e != range.start) || q.span + range.wqebbs > q.mcnt {
            self.make_room(q, range.wqebbs);
        }
        if q.pending.is_empty() {
            self.busy.push(q.info.qpn);
        }
        if q.uncopied == 0 {
            self.to_copy.push(q.info.qpn);
        }
        q.pending.push_back(Pending {
            range,
            tsc,
            copied: false,
            seq: 0,
            failed: false,
            at: None,
            lost: 0,
        });
        q.span += range.wqebbs;
        q.uncopied += range.wqebbs;
        q.last_end = Some(range.end);
        q.last_db_ns = crate::runtime::clock::mono_ns();
    }

    /// Parses the oldest pending ranges of `q` until `n` more WQEBBs fit the mirror (all of
    /// them when the next range does not continue the last).
    fn make_room(&mut self, q: &mut QpCopy, n: u32) {
        let contiguous = q.pending.back().map(|p| p.range.end) == q.last_end;
        while !q.pending.is_empty() && (!contiguous || q.span + n > q.mcnt) {
            if q.pending.front().is_some_and(|p| !p.copied) {
                self.copy_qp(q);
            }
            self.parse_front(q);
        }
        if q.pending.is_empty() {
            q.last_end = None;
        }
    }

    /// One copy of the WQEBBs of `q`'s uncopied ranges (two pieces where the ring wraps),
    /// without the slots a later doorbell says were reused already.
    fn copy_qp(&mut self, q: &mut QpCopy) {
        let Some(newest) = q.last_end else { return };
        let cnt = q.info.sq_cnt;
        let Some(first_idx) = q.pending.iter().position(|p| !p.copied) else {
            return;
        };
        let mut from: Option<u16> = None;
        let seq = if q.info.gpu.is_some() {
            self.seq += 1;
            self.seq
        } else {
            0
        };
        for p in q.pending.range_mut(first_idx..) {
            // WQEBB x was reused once the program posted x + cnt, i.e. newest - x > cnt.
            let d = u32::from(newest.wrapping_sub(p.range.start));
            let d = if d == 0 { 65536 } else { d };
            p.lost = d.saturating_sub(cnt).min(p.range.wqebbs);
            p.copied = true;
            p.seq = seq;
            if from.is_none() && p.lost < p.range.wqebbs {
                from = Some(p.range.start.wrapping_add(p.lost as u16));
            }
            q.unparsed += p.range.wqebbs;
        }
        q.uncopied = 0;
        let Some(from) = from else { return };
        let n = u32::from(newest.wrapping_sub(from));
        let n = if n == 0 { 65536 } else { n };
        let first = u32::from(from) & (cnt - 1);
        let n1 = n.min(cnt - first);
        let mut ok = true;
        for (at, k) in [(from, n1), (from.wrapping_add(n1 as u16), n - n1)] {
            if k == 0 {
                continue;
            }
            ok &= self.copy_piece(q, at, k);
        }
        if !ok {
            // Counted as unparsable when parsed.
            for p in q.pending.range_mut(first_idx..) {
                p.failed = p.lost < p.range.wqebbs;
            }
        }
    }

    /// Copies WQEBBs `at..at+n` (no wrap of the ring in between) into the mirror, and reads
    /// them a second time to find torn copies. False if the copy could not be issued.
    fn copy_piece(&mut self, q: &QpCopy, at: u16, n: u32) -> bool {
        let cnt = q.info.sq_cnt;
        let src = q.info.sq_addr + (u32::from(at) & (cnt - 1)) as u64 * WQEBB_BYTES as u64;
        let moff = slot_off(q.mcnt, at);
        let len = n as usize * WQEBB_BYTES;
        for k in 0..n {
            set_torn(q.torn, q.mcnt, at.wrapping_add(k as u16), false);
        }
        // SAFETY: moff + len <= mcnt*64, the mirror's size (n <= cnt - (at mod cnt) and mcnt is
        // a multiple of cnt, so the piece does not wrap the mirror either).
        let dst = unsafe { q.mirror.add(moff) };
        if q.info.gpu.is_some() {
            let Some((d, s)) = self.ensure_stream() else {
                COPY_FAILED.fetch_add(1, Ordering::Relaxed);
                return false;
            };
            // SAFETY: as dst, for the check buffer (same size and layout).
            let chk = unsafe { q.check.add(moff) };
            // SAFETY: dst and chk are our pinned buffers, alive for the process; src is the SQ
            // range (the QP is alive: its destroy waits for this thread's Gone). The two copies
            // run in order on the stream: the check reads after the mirror's copy.
            if !unsafe { d.dtoh_async(dst, src, len, s) && d.dtoh_async(chk, src, len, s) } {
                COPY_FAILED.fetch_add(1, Ordering::Relaxed);
                return false;
            }
            COPIES.fetch_add(1, Ordering::Relaxed);
            self.checks.push(CheckPiece {
                mirror: q.mirror,
                check: q.check,
                torn: q.torn,
                mcnt: q.mcnt,
                at,
                n,
            });
        } else {
            // SAFETY: a host-resident SQ registered with the NIC: readable for its size while
            // the QP lives (its destroy waits for this thread's Gone).
            unsafe { core::ptr::copy_nonoverlapping(src as *const u8, dst, len) };
            COPIES.fetch_add(1, Ordering::Relaxed);
            for k in 0..n {
                let off = k as usize * WQEBB_BYTES;
                let mut same = true;
                for w in 0..WQEBB_BYTES / 8 {
                    // SAFETY: within the SQ range just copied (volatile: the program may be
                    // writing it) and within the mirror's copy of it.
                    let (now, was) = unsafe {
                        (
                            core::ptr::read_volatile((src as *const u64).add(off / 8 + w)),
                            core::ptr::read_unaligned((dst.add(off) as *const u64).add(w)),
                        )
                    };
                    same &= now == was;
                }
                if !same {
                    TORN.fetch_add(1, Ordering::Relaxed);
                    set_torn(q.torn, q.mcnt, at.wrapping_add(k as u16), true);
                }
            }
        }
        true
    }

    /// Syncs the stream; then compares every check copy with its mirror copy. False when the
    /// sync failed.
    fn sync(&mut self) -> bool {
        let Some((d, s)) = self.drv.zip(self.stream) else {
            return false;
        };
        SYNCS.fetch_add(1, Ordering::Relaxed);
        if !d.sync(s) {
            return false;
        }
        self.synced = self.seq;
        for c in self.checks.drain(..) {
            for k in 0..c.n {
                let a = c.at.wrapping_add(k as u16);
                let off = slot_off(c.mcnt, a);
                // SAFETY: both buffers hold mcnt*64 bytes and off + 64 <= that; the copies into
                // them completed (synced).
                let same = unsafe {
                    core::slice::from_raw_parts(c.mirror.add(off), WQEBB_BYTES)
                        == core::slice::from_raw_parts(c.check.add(off), WQEBB_BYTES)
                };
                if !same {
                    TORN.fetch_add(1, Ordering::Relaxed);
                    set_torn(c.torn, c.mcnt, a, true);
                }
            }
        }
        true
    }

    /// Copies, syncs and parses everything `q` has pending.
    fn flush(&mut self, q: &mut QpCopy) {
        if q.uncopied > 0 {
            self.copy_qp(q);
        }
        while !q.pending.is_empty() {
            self.parse_front(q);
        }
        q.last_end = None;
    }

    /// Parses up to [`PARSE_CHUNK`] WQEBBs of `q`'s oldest pending range (copied), syncing the
    /// stream first when its copy may be in flight; the range leaves `pending` once parsed whole.
    fn parse_front(&mut self, q: &mut QpCopy) {
        let Some(p) = q.pending.front() else { return };
        let (range, tsc, lost, seq, started) = (p.range, p.tsc, p.lost, p.seq, p.at);
        if started.is_none() {
            let mut ok = !p.failed;
            if ok && seq > self.synced {
                ok = self.sync();
            }
            if !ok {
                COPY_FAILED.fetch_add(1, Ordering::Relaxed);
                UNPARSABLE.fetch_add(u64::from(range.wqebbs), Ordering::Relaxed);
                self.pop_front(q);
                return;
            }
            if lost > 0 {
                OVERWRITTEN.fetch_add(u64::from(lost), Ordering::Relaxed);
                UNPARSABLE.fetch_add(u64::from(lost), Ordering::Relaxed);
            }
        }
        let end = range.end;
        let mut at = started.unwrap_or(range.start.wrapping_add(lost as u16));
        let ring_len = q.mcnt as usize * WQEBB_BYTES;
        // SAFETY: the mirror is mcnt*64 bytes, mapped for the process's life; the copies into it
        // completed (stream synced) or were plain memcpys; only this thread writes it.
        let ring = unsafe { core::slice::from_raw_parts(q.mirror as *const u8, ring_len) };
        let mut chunk = PARSE_CHUNK;
        let mut budget = PARSE_CHUNK;
        while at != end && budget > 0 {
            let left = u32::from(end.wrapping_sub(at));
            let n = left.min(chunk);
            let whole = n == left;
            let sub = WqeRange {
                start: at,
                end: at.wrapping_add(n as u16),
                wqebbs: n,
                // CPU convention: the named WQE is the last of the range, so of its last piece.
                last_wqe: if whole { range.last_wqe } else { None },
            };
            let out = walk_new_wqes(ring, q.mcnt, &sub, q.info.qp_type);
            if out.unparsable > 0 {
                UNPARSABLE.fetch_add(u64::from(out.unparsable), Ordering::Relaxed);
            }
            for w in &out.wqes {
                let k = w.ctrl.wqebbs();
                if any_torn(q.torn, q.mcnt, w.ctrl.wqe_index, k) {
                    // Read while the program rewrote it: not this doorbell's WQE for sure.
                    OVERWRITTEN.fetch_add(u64::from(k), Ordering::Relaxed);
                    UNPARSABLE.fetch_add(u64::from(k), Ordering::Relaxed);
                } else {
                    self.emit_wqe(q, w, tsc);
                }
            }
            budget = budget.saturating_sub(out.walked.max(1));
            let stop = at.wrapping_add(out.walked as u16);
            match out.error {
                None => at = sub.end,
                Some(WalkError::Overshoot { .. }) if !whole => {
                    // A WQE across the piece's end: the next piece starts with it, and is the
                    // whole rest when the WQE alone is longer than a piece.
                    if stop == at {
                        chunk = left;
                    }
                    at = stop;
                }
                Some(WalkError::IndexMismatch { .. }) => {
                    // A slot the program reused before the copy read it (or while it did):
                    // skip to the next slot that holds its own WQE; every WQEBB skipped is
                    // counted.
                    let next = resume_at(ring, q.mcnt, q.info.qpn, stop.wrapping_add(1), end);
                    let to = next.unwrap_or(end);
                    let skipped = u64::from(to.wrapping_sub(stop));
                    OVERWRITTEN.fetch_add(skipped, Ordering::Relaxed);
                    UNPARSABLE.fetch_add(skipped, Ordering::Relaxed);
                    at = to;
                }
                Some(_) => {
                    UNPARSABLE
                        .fetch_add(u64::from(end.wrapping_sub(stop)).max(1), Ordering::Relaxed);
                    at = end;
                }
            }
        }
        if at == end {
            self.pop_front(q);
        } else if let Some(p) = q.pending.front_mut() {
            p.at = Some(at);
        }
    }

    fn pop_front(&mut self, q: &mut QpCopy) {
        if let Some(p) = q.pending.pop_front() {
            q.span -= p.range.wqebbs;
            q.unparsed -= p.range.wqebbs;
        }
    }

    fn emit_wqe(&mut self, q: &QpCopy, w: &Wqe, tsc: u64) {
        WQES.fetch_add(1, Ordering::Relaxed);
        let op = op_of(w.opcode);
        let (raddr, rkey) = w.raddr.map_or((0, 0), |r| (r.raddr, r.rkey));
        let mut fl = 0;
        if w.ctrl.signaled() {
            fl |= flags::SIGNALED;
        }
        if w.inline_bytes.is_some() {
            fl |= flags::INLINE;
        }
        let bytes = w.bytes();
        let detail = Detail {
            addr: raddr,
            flags: fl,
            aux: rkey,
        };
        if let Some(ts) = self.ts {
            ts.record_at(tsc, q.info.ep, op, bytes, Outcome::Ok, detail);
        }
        if let Some(l) = self.log.as_mut() {
            let _ = writeln!(
                l,
                "wqe qpn={:#x} idx={} opcode={:#x} opmod={:#x} bytes={} raddr={:#x} rkey={:#x} signaled={}",
                q.info.qpn,
                w.ctrl.wqe_index,
                w.ctrl.opcode,
                w.ctrl.opmod,
                bytes,
                raddr,
                rkey,
                u8::from(w.ctrl.signaled())
            );
        }
    }
}
