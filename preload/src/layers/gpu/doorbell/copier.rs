//! WQE recovery, off the doorbell's path (issue 41): its own thread ("sigmatop-wqe") copies the
//! WQEBBs behind each doorbell into a pinned mirror of the send queue (an async device-to-host
//! copy on its own CUDA stream, wrap-aware; a memcpy for a host-resident queue), parses them in
//! batches with [`walk_new_wqes`] once the batch is full or the QP is idle, and records each WQE
//! as a GPU op event stamped with its doorbell's timestamp. The poller only forwards, decodes the
//! word and hands the range over ([`Link`]): no copy, no sync, no parse ever sits between two
//! doorbells. It also reads, for the poller, the doorbell records that live in GPU memory (a
//! shared register's check, `Job::Check`), and answers with what it read (`MakeUp`).
//!
//! A slot the program reused before the copy read it is found by the WQE's own index and counted
//! (`overwritten_slots`), never parsed as the doorbell's. A range the poller could not hand over
//! (the queue between the two full: this thread fell 4096 doorbells behind) is counted in
//! `unparsable` and `handoff_full`, never silently lost.

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::collections::HashMap;
use std::io::Write;
use std::time::Duration;

use crossbeam_queue::ArrayQueue;
use sigmatop::decode::WQEBB_BYTES;
use sigmatop::decode::doorbell::WqeRange;
use sigmatop::decode::wqe::{WalkError, Wqe, walk_new_wqes};
use sigmatop::event::flags;

use super::poller::op_of;
use super::stats::{
    CHECKS, COPIES, COPY_FAILED, HANDOFF_FULL, OVERWRITTEN, SYNCS, UNPARSABLE, WQES,
};
use super::{QpInfo, STATE};
use crate::layers::gpu::driver::{self as cuda_driver, Driver, Stream};
use crate::runtime::config::{Gpu, WqeCopy};
use crate::runtime::thread::{Detail, Outcome, ThreadState};

/// A QP idle this long has its pending WQEs parsed.
const IDLE_FLUSH_NS: u64 = 50_000;
/// Jobs the poller can hand over before it must drop a range (counted).
const JOBS: usize = 4096;
/// After this long without a job the copier sleeps between looks; before, it spins (a slot can
/// be reused once the NIC has run the ring round: the copy must not wait for a timer).
const SPIN_NS: u64 = 20_000_000;

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
}

impl Link {
    pub fn new() -> Link {
        Link {
            jobs: ArrayQueue::new(JOBS),
            makeups: ArrayQueue::new(1024),
        }
    }

    /// Hands a range over; false (counted) when the copier is that far behind.
    #[inline]
    pub fn range(&self, qpn: u32, range: WqeRange, tsc: u64) -> bool {
        if self.jobs.push(Job::Range { qpn, range, tsc }).is_err() {
            HANDOFF_FULL.fetch_add(1, Ordering::Relaxed);
            UNPARSABLE.fetch_add(u64::from(range.wqebbs).max(1), Ordering::Relaxed);
            return false;
        }
        true
    }

    /// Hands a control job over, waiting for room (control path: the copier always drains);
    /// false when the copier is not running.
    pub fn control(&self, mut job: Job) -> bool {
        loop {
            match self.jobs.push(job) {
                Ok(()) => return true,
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
    copied: bool,
}

struct QpCopy {
    info: QpInfo,
    /// Pinned host mirror of the SQ (sq_cnt WQEBBs, same slot offsets).
    mirror: *mut u8,
    pending: Vec<Pending>,
    pending_wqebbs: u32,
    threshold: u32,
    last_db_ns: u64,
}

pub(super) struct Copier {
    cfg: &'static Gpu,
    link: std::sync::Arc<Link>,
    qps: HashMap<u32, QpCopy>,
    ts: Option<&'static ThreadState>,
    drv: Option<&'static Driver>,
    stream: Option<Stream>,
    ctx_set: bool,
    log: Option<std::io::BufWriter<std::fs::File>>,
}

/// Starts the copier thread; false when it could not be started (the poller then drops ranges).
pub(super) fn start(link: std::sync::Arc<Link>) -> bool {
    COPIER_RUNNING.store(true, Ordering::Release);
    let r = std::thread::Builder::new()
        .name("sigmatop-wqe".into())
        .stack_size(1 << 20)
        .spawn(move || {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                Copier::new(link).run()
            }));
            if r.is_err() {
                eprintln!(
                    "sigmatop: WQE recovery failed; GPU doorbells are still forwarded and counted, their WQEs no longer read"
                );
            }
            COPIER_RUNNING.store(false, Ordering::Release);
        });
    if r.is_err() {
        COPIER_RUNNING.store(false, Ordering::Release);
        eprintln!(
            "sigmatop: cannot start the WQE recovery thread; GPU doorbells are forwarded, their WQEs not read"
        );
        return false;
    }
    true
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
            cfg,
            link,
            qps: HashMap::new(),
            ts: None,
            drv: None,
            stream: None,
            ctx_set: false,
            log,
        }
    }

    fn run(mut self) {
        self.ts = crate::runtime::thread::current();
        let mut last_job = crate::runtime::clock::mono_ns();
        loop {
            let mut any = false;
            while let Some(job) = self.link.jobs.pop() {
                any = true;
                if !self.job(job) {
                    self.flush_all();
                    if let Some(l) = self.log.as_mut() {
                        let _ = l.flush();
                    }
                    return;
                }
            }
            let now = crate::runtime::clock::mono_ns();
            if any {
                last_job = now;
                continue;
            }
            self.idle_flush(now);
            if now.saturating_sub(last_job) < SPIN_NS {
                core::hint::spin_loop();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }

    /// Does one job; false on Stop.
    fn job(&mut self, job: Job) -> bool {
        match job {
            Job::Add(info) => {
                if let Some(mut old) = self.qps.remove(&info.qpn) {
                    self.flush(&mut old);
                }
                if let Some(q) = self.new_qp(info) {
                    self.qps.insert(q.info.qpn, q);
                }
            }
            Job::Range { qpn, range, tsc } => {
                if let Some(mut q) = self.qps.remove(&qpn) {
                    self.recover(&mut q, range, tsc);
                    self.qps.insert(qpn, q);
                } else {
                    UNPARSABLE.fetch_add(u64::from(range.wqebbs).max(1), Ordering::Relaxed);
                }
            }
            Job::Flush(qpn) | Job::Gone(qpn) => {
                let gone = matches!(job, Job::Gone(_));
                if let Some(mut q) = self.qps.remove(&qpn) {
                    self.flush(&mut q);
                    if !gone {
                        self.qps.insert(qpn, q);
                    }
                }
            }
            Job::Check { qpn, dbr } => {
                CHECKS.fetch_add(1, Ordering::Relaxed);
                let mut m = MakeUp {
                    qpn,
                    rec: self.read_device_send_counter(dbr),
                };
                // Always answered (the poller asks again only then). The poller takes answers
                // whenever one is out; it holds at most one per QP.
                while let Err(back) = self.link.makeups.push(m) {
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
            Job::Stop => return false,
        }
        true
    }

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
        let len = info.sq_cnt as usize * WQEBB_BYTES;
        let mirror = crate::runtime::os::map_zeroed(len, true)?;
        if info.gpu.is_some()
            && let Some((d, _)) = self.ensure_stream()
        {
            // Pinned, so the copies are truly asynchronous (best effort).
            // SAFETY: the real cuMemHostRegister on our own mapping.
            let _ = unsafe { (d.host_register)(mirror as *mut core::ffi::c_void, len, 0) };
        }
        let threshold = self.cfg.batch.min(info.sq_cnt).max(1);
        Some(QpCopy {
            info,
            mirror,
            pending: Vec::new(),
            pending_wqebbs: 0,
            threshold,
            last_db_ns: 0,
        })
    }

    /// The send counter (`[1]`, big-endian, 16 bits) of a doorbell record in GPU memory.
    fn read_device_send_counter(&mut self, dbr: u64) -> Option<u16> {
        let (d, s) = self.ensure_stream()?;
        let mut b = [0u8; 4];
        // SAFETY: a 4-byte copy of the QP's record (device memory) into a local; synced before
        // b is read.
        if !unsafe { d.dtoh_async(b.as_mut_ptr(), dbr + 4, 4, s) } || !d.sync(s) {
            return None;
        }
        Some((u32::from_be(u32::from_ne_bytes(b)) & 0xffff) as u16)
    }

    fn recover(&mut self, q: &mut QpCopy, range: WqeRange, tsc: u64) {
        if q.pending_wqebbs + range.wqebbs > q.info.sq_cnt {
            self.flush(q);
        }
        let copied = if q.info.gpu.is_none() || self.cfg.copy == WqeCopy::PerDoorbell {
            self.copy_range(q, &range)
        } else {
            false
        };
        q.pending.push(Pending { range, tsc, copied });
        q.pending_wqebbs += range.wqebbs;
        q.last_db_ns = crate::runtime::clock::mono_ns();
        if q.pending_wqebbs >= q.threshold {
            self.flush(q);
        }
    }

    /// Copies the WQEBBs of `range` into the mirror (async for device memory). False if not.
    fn copy_range(&mut self, q: &QpCopy, range: &WqeRange) -> bool {
        let cnt = q.info.sq_cnt;
        let first = u32::from(range.start) & (cnt - 1);
        let n1 = range.wqebbs.min(cnt - first);
        let parts = [(first, n1), (0, range.wqebbs - n1)];
        for (slot, n) in parts {
            if n == 0 {
                continue;
            }
            let off = slot as usize * WQEBB_BYTES;
            let len = n as usize * WQEBB_BYTES;
            // SAFETY: off+len <= sq_cnt*64, the mirror's size.
            let dst = unsafe { q.mirror.add(off) };
            let src = q.info.sq_addr + off as u64;
            if q.info.gpu.is_some() {
                let Some((d, s)) = self.ensure_stream() else {
                    COPY_FAILED.fetch_add(1, Ordering::Relaxed);
                    return false;
                };
                // SAFETY: dst is our pinned mirror, alive for the process; src is the SQ range
                // (the QP is alive: its destroy waits for this thread's Gone).
                if !unsafe { d.dtoh_async(dst, src, len, s) } {
                    COPY_FAILED.fetch_add(1, Ordering::Relaxed);
                    return false;
                }
                COPIES.fetch_add(1, Ordering::Relaxed);
            } else {
                // SAFETY: a host-resident SQ registered with the NIC: readable for its size
                // while the QP lives (its destroy waits for this thread's Gone).
                unsafe { core::ptr::copy_nonoverlapping(src as *const u8, dst, len) };
            }
        }
        true
    }

    fn idle_flush(&mut self, now: u64) {
        if !self.qps.values().any(|q| !q.pending.is_empty()) {
            return;
        }
        let due: Vec<u32> = self
            .qps
            .values()
            .filter(|q| !q.pending.is_empty() && now.saturating_sub(q.last_db_ns) > IDLE_FLUSH_NS)
            .map(|q| q.info.qpn)
            .collect();
        for qpn in due {
            if let Some(mut q) = self.qps.remove(&qpn) {
                self.flush(&mut q);
                self.qps.insert(qpn, q);
            }
        }
    }

    fn flush_all(&mut self) {
        let keys: Vec<u32> = self.qps.keys().copied().collect();
        for k in keys {
            if let Some(mut q) = self.qps.remove(&k) {
                self.flush(&mut q);
                self.qps.insert(k, q);
            }
        }
    }

    /// Syncs the copies of `q`'s pending ranges and parses them.
    fn flush(&mut self, q: &mut QpCopy) {
        if q.pending.is_empty() {
            return;
        }
        let mut pending = std::mem::take(&mut q.pending);
        let mut ok = true;
        for p in pending.iter_mut() {
            if !p.copied {
                p.copied = self.copy_range(q, &p.range);
            }
        }
        if q.info.gpu.is_some() {
            SYNCS.fetch_add(1, Ordering::Relaxed);
            ok = match (self.drv, self.stream) {
                (Some(d), Some(s)) => d.sync(s),
                _ => false,
            };
        }
        let ring_len = q.info.sq_cnt as usize * WQEBB_BYTES;
        // SAFETY: the mirror is sq_cnt*64 bytes, mapped for the process's life; the copies into
        // it completed (stream synced) or were plain memcpys.
        let ring = unsafe { core::slice::from_raw_parts(q.mirror as *const u8, ring_len) };
        for p in &pending {
            if !ok || !p.copied {
                COPY_FAILED.fetch_add(1, Ordering::Relaxed);
                UNPARSABLE.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let out = walk_new_wqes(ring, q.info.sq_cnt, &p.range, q.info.qp_type);
            if out.unparsable > 0 {
                UNPARSABLE.fetch_add(u64::from(out.unparsable), Ordering::Relaxed);
            }
            if let Some(e) = out.error {
                UNPARSABLE.fetch_add(1, Ordering::Relaxed);
                // A slot holding a later WQE than the range expects was reused before the copy
                // read it: it and the rest of the range are lost, and said so (never parsed as
                // if they were the doorbell's WQEs).
                if matches!(e, WalkError::IndexMismatch { .. }) {
                    OVERWRITTEN.fetch_add(
                        u64::from(p.range.wqebbs.saturating_sub(out.walked)),
                        Ordering::Relaxed,
                    );
                }
            }
            for w in &out.wqes {
                self.emit_wqe(q, w, p.tsc);
            }
        }
        q.pending_wqebbs = 0;
        pending.clear();
        q.pending = pending;
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
