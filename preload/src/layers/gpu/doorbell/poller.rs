//! The poller thread ("sigmatop-db"): spins over the watched 64-byte blocks of every shadow
//! page, forwards each change to the real UAR page at once (8 bytes, or a whole BlueFlame block),
//! decodes the doorbell word, joins it by QPN to the devx QP and records it; the range of WQEBBs
//! it posted goes to the copier thread (copier.rs), which reads and parses the WQEs. Nothing here
//! copies, syncs with the GPU or parses between two doorbells.

use std::sync::Arc;
use std::time::Duration;

use core::sync::atomic::Ordering;

use sigmatop::decode::doorbell::{DoorbellKind, DoorbellStep, DoorbellWord, SqTracker};
use sigmatop::decode::valid_sq_cnt;
use sigmatop::event::{Op, UNATTRIBUTED_EP, flags};

use super::copier::{self, COPIER_RUNNING, Job, Link};
use super::stats::{
    BLUEFLAME, COALESCED, DOORBELLS, DUPLICATES, OTHER_STORES, OVERRUNS, SHARED, UNKNOWN_QP,
    UNPARSABLE,
};
use super::{
    ACK, GEN, MAX_WATCH_BYTES, QpInfo, QpnMap, Registration, STATE, STOP, page_of, page_size,
};
use crate::runtime::config::Gpu;
use crate::runtime::thread::{Detail, Outcome, ThreadState};

/// One watched 64-byte block of a shadow page.
struct Block {
    shadow: *const u64,
    real: *mut u64,
    /// Watched words (bit i = word i).
    mask: u8,
    last: [u64; 8],
    /// QPNs of the QPs whose doorbell register this block holds, when more than one QP shares
    /// it (empty otherwise): see `forward_shared`.
    sharers: Vec<u32>,
}

struct QpRt {
    info: QpInfo,
    tracker: SqTracker,
    /// The producer index of a doorbell the poller made up from the doorbell record (shared
    /// register): the program's own doorbell for it, if it comes, is that same doorbell seen
    /// late, forwarded but not recorded again.
    made_up: Option<u16>,
    /// A read of its doorbell record (in GPU memory) is with the copier (`Job::Check`).
    checking: bool,
    /// Another doorbell of its register came while `checking`: its answer may be older than
    /// that doorbell, so it is asked again when the answer comes.
    again: bool,
    /// Its last producer index when the read was asked for.
    check_base: u16,
}

pub(super) struct Poller {
    cfg: &'static Gpu,
    seen_gen: u64,
    blocks: Vec<Block>,
    qps: QpnMap<QpRt>,
    ts: Option<&'static ThreadState>,
    /// To the copier thread (None: WQEs are not recovered, or it could not start).
    link: Option<Arc<Link>>,
    /// `Job::Check`s whose answer has not come back.
    checks_out: u32,
    /// What was last forwarded of each block no longer watched, by its shadow address.
    unwatched: std::collections::HashMap<u64, [u64; 8]>,
}

#[inline(always)]
fn sfence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: sfence has no preconditions.
    unsafe {
        core::arch::x86_64::_mm_sfence()
    };
    #[cfg(not(target_arch = "x86_64"))]
    core::sync::atomic::fence(Ordering::SeqCst);
}

impl Poller {
    pub fn new() -> Poller {
        Poller {
            cfg: crate::runtime::config::gpu(),
            seen_gen: 0,
            blocks: Vec::new(),
            qps: QpnMap::default(),
            ts: None,
            link: None,
            checks_out: 0,
            unwatched: std::collections::HashMap::new(),
        }
    }

    /// Ends the copier after everything handed to it is parsed (bounded: `shutdown` waits 500
    /// ms for the poller in all).
    fn stop_copier(&mut self) {
        let Some(l) = self.link.take() else { return };
        if !l.control(Job::Stop) {
            return;
        }
        let deadline = std::time::Instant::now() + Duration::from_millis(400);
        while COPIER_RUNNING.load(Ordering::Acquire) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    pub fn run(mut self) {
        if let Some(cpu) = self.cfg.poller_cpu {
            crate::runtime::os::pin_to_cpu(cpu);
        }
        self.ts = crate::runtime::thread::current();
        if self.cfg.recover_wqes {
            let link = Arc::new(Link::new());
            if copier::start(Arc::clone(&link)) {
                self.link = Some(link);
            }
        }
        loop {
            let g = GEN.load(Ordering::Acquire);
            if g != self.seen_gen {
                self.apply(g);
            }
            if STOP.load(Ordering::Acquire) {
                self.stop_copier();
                break;
            }
            if self.checks_out > 0 {
                self.make_up();
            }
            if self.blocks.is_empty() {
                std::thread::sleep(Duration::from_micros(500));
                continue;
            }
            let mut any = false;
            for i in 0..self.blocks.len() {
                let b = &self.blocks[i];
                let mut changed = 0u8;
                for w in 0..8 {
                    if b.mask & (1 << w) != 0 {
                        // SAFETY: the shadow page is mapped for the life of the process.
                        let v = unsafe { core::ptr::read_volatile(b.shadow.add(w)) };
                        if v != b.last[w] {
                            changed |= 1 << w;
                        }
                    }
                }
                if changed != 0 {
                    any = true;
                    self.on_change(i, changed);
                }
            }
            if !any {
                core::hint::spin_loop();
            }
        }
        if self.cfg.stats {
            eprintln!("{}", super::stats_line());
        }
    }

    /// Applies control-path changes: rebuild the watched blocks, add/drop QPs.
    fn apply(&mut self, g: u64) {
        if crate::runtime::config::fault() == crate::runtime::config::Fault::PollerLate {
            std::thread::sleep(Duration::from_millis(300));
        }
        let (blocks, qps) = {
            let Ok(s) = STATE.lock() else { return };
            let mut blocks: Vec<Block> = Vec::new();
            let ps = page_size();
            for sh in &s.shadows {
                let regs: Vec<&Registration> =
                    s.regs.iter().filter(|r| r.page == sh.real_page).collect();
                if regs.is_empty() {
                    continue;
                }
                let words = (ps / 8) as usize;
                let mut watched = vec![false; words];
                let mut mark = |from: u64, len: u64| {
                    let a = from.saturating_sub(sh.real_page) / 8;
                    let end = (from + len)
                        .min(sh.real_page + ps)
                        .saturating_sub(sh.real_page);
                    let b = end.div_ceil(8);
                    for w in a..b {
                        if let Some(x) = watched.get_mut(w as usize) {
                            *x = true;
                        }
                    }
                };
                for r in &regs {
                    mark(r.p, r.size.min(MAX_WATCH_BYTES));
                }
                for u in &s.uars {
                    if page_of(u.uar.reg_addr) == sh.real_page {
                        mark(u.uar.reg_addr, 8);
                    }
                }
                for blk in 0..words / 8 {
                    let mut mask = 0u8;
                    for w in 0..8 {
                        if watched[blk * 8 + w] {
                            mask |= 1 << w;
                        }
                    }
                    if mask == 0 {
                        continue;
                    }
                    let shadow = (sh.host + blk as u64 * 64) as *const u64;
                    let real = (sh.real_page + blk as u64 * 64) as *mut u64;
                    // What was last forwarded of this block (of a block that stays watched, or
                    // was watched before); a block never watched holds what the shadow held
                    // when it was made, zeros: a doorbell the program stored before this
                    // poller first looked at it is a change, and is forwarded (it was taken
                    // for the block's starting value, and lost, when the poller started late).
                    let last = self
                        .blocks
                        .iter()
                        .find(|b| b.shadow == shadow)
                        .map(|b| b.last)
                        .or_else(|| self.unwatched.get(&(shadow as u64)).copied())
                        .unwrap_or([0u64; 8]);
                    // The QPs bound (qpc.uar_page) to a UAR whose register is in this block.
                    let lo = sh.real_page + blk as u64 * 64;
                    let mut sharers: Vec<u32> = s
                        .qps
                        .iter()
                        .filter(|q| {
                            s.uars.iter().any(|u| {
                                u.uar.page_id == q.uar_page
                                    && (lo..lo + 64).contains(&u.uar.reg_addr)
                            })
                        })
                        .map(|q| q.qpn)
                        .collect();
                    sharers.sort_unstable();
                    if sharers.len() < 2 {
                        sharers.clear();
                    }
                    blocks.push(Block {
                        shadow,
                        real,
                        mask,
                        last,
                        sharers,
                    });
                }
            }
            (blocks, s.qps.clone())
        };
        // Blocks no longer watched keep what was last forwarded of them, should they come back.
        for b in &self.blocks {
            if !blocks.iter().any(|n| n.shadow == b.shadow) {
                self.unwatched.insert(b.shadow as u64, b.last);
            }
        }
        for b in &blocks {
            self.unwatched.remove(&(b.shadow as u64));
        }
        self.blocks = blocks;
        // QPs gone: the copier parses what is pending and syncs its copies of their queues
        // (their destroy waits for its Ack below), then forgets them.
        let gone: Vec<u32> = self
            .qps
            .keys()
            .filter(|k| !qps.iter().any(|q| q.qpn == **k))
            .copied()
            .collect();
        for qpn in gone {
            if self.qps.remove(&qpn).is_some_and(|q| q.checking) {
                self.checks_out -= 1;
            }
            if let Some(l) = &self.link {
                l.control(Job::Gone(qpn));
            }
        }
        for q in qps {
            if !self.qps.contains_key(&q.qpn)
                && valid_sq_cnt(q.sq_cnt)
                && let Ok(tracker) = SqTracker::new(q.sq_cnt)
            {
                if let Some(l) = &self.link {
                    l.control(Job::Add(q.clone()));
                }
                self.qps.insert(
                    q.qpn,
                    QpRt {
                        info: q,
                        tracker,
                        made_up: None,
                        checking: false,
                        again: false,
                        check_base: 0,
                    },
                );
            }
        }
        if let Some(l) = &self.link {
            l.control(Job::Ack(g));
        }
        self.seen_gen = g;
        ACK.store(g, Ordering::Release);
    }

    /// A watched block changed: forward it, then decode and record the doorbell. Kept out of the
    /// spin loop's body (and so priced on its own by benches/poller_callgrind.py).
    #[cold]
    #[inline(never)]
    fn on_change(&mut self, i: usize, changed: u8) {
        let tsc = crate::runtime::clock::now();
        let b = &mut self.blocks[i];
        if changed.count_ones() > 1 {
            // A BlueFlame write: read the whole block until it is stable, forward it whole.
            let mut vals = [0u64; 8];
            let mut stable = false;
            for _ in 0..64 {
                let mut again = [0u64; 8];
                for (w, x) in again.iter_mut().enumerate() {
                    // SAFETY: our shadow page.
                    *x = unsafe { core::ptr::read_volatile(b.shadow.add(w)) };
                }
                if again == vals {
                    stable = true;
                    break;
                }
                vals = again;
            }
            if !stable {
                COALESCED.fetch_add(1, Ordering::Relaxed);
            }
            if !self.blocks[i].sharers.is_empty() {
                self.forward_shared(i, vals[0], tsc);
            }
            let b = &mut self.blocks[i];
            for (w, v) in vals.iter().enumerate() {
                // SAFETY: the real UAR page is mapped while it is watched (free_uar waits for
                // the poller to drop it first).
                unsafe { core::ptr::write_volatile(b.real.add(w), *v) };
            }
            sfence();
            b.last = vals;
            BLUEFLAME.fetch_add(1, Ordering::Relaxed);
            self.doorbell(vals[0], tsc, true);
            return;
        }
        let w = changed.trailing_zeros() as usize;
        // SAFETY: as above.
        let v = unsafe { core::ptr::read_volatile(b.shadow.add(w)) };
        if w == 0 && !b.sharers.is_empty() {
            self.forward_shared(i, v, tsc);
        }
        let b = &mut self.blocks[i];
        // SAFETY: as above.
        unsafe { core::ptr::write_volatile(b.real.add(w), v) };
        sfence();
        b.last[w] = v;
        if w == 0 {
            self.doorbell(v, tsc, false);
        } else {
            OTHER_STORES.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Before the doorbell `v` of block `i` is forwarded: on a register several QPs share, a
    /// QP's doorbell overwritten by another's between two reads would be lost (the NIC rings
    /// only the QP a doorbell names). Each other QP of the register whose doorbell record's send
    /// counter is past the last producer index its doorbells said gets a doorbell of its own
    /// first, in NVSHMEM's GPU convention `{pi << 8, qpn << 8}`: forwarded to the register,
    /// recorded and its WQEs recovered like any other. The record is written (after the WQEs)
    /// before the doorbell, so a doorbell forwarded from it never runs an unfinished WQE; the
    /// program's own doorbell, if it comes later, is forwarded but not recorded again. Counted in
    /// `shared_register`.
    fn forward_shared(&mut self, i: usize, v: u64, tsc: u64) {
        let n = self.blocks[i].sharers.len();
        if n == 0 {
            return;
        }
        let named = DoorbellWord::from_mem_u64(v).qpn;
        for k in 0..n {
            let qpn = self.blocks[i].sharers[k];
            if qpn == named {
                continue;
            }
            let Some(q) = self.qps.get_mut(&qpn) else {
                continue;
            };
            if q.info.dbr == 0 {
                continue;
            }
            if q.info.dbr_gpu.is_some() {
                // In GPU memory: the copier reads it (a sync with the GPU has no place between
                // two doorbells) and the answer is taken in `make_up`, one read at a time.
                if q.checking {
                    q.again = true;
                } else if let Some(l) = &self.link
                    && l.jobs
                        .push(Job::Check {
                            qpn,
                            dbr: q.info.dbr,
                        })
                        .is_ok()
                {
                    q.checking = true;
                    q.check_base = q.tracker.last_pi();
                    self.checks_out += 1;
                }
                continue;
            }
            // SAFETY: a host-resident doorbell record registered as a umem: readable.
            let raw = unsafe { core::ptr::read_volatile((q.info.dbr + 4) as *const u32) };
            let rec = (u32::from_be(raw) & 0xffff) as u16;
            self.ring_for(i, qpn, rec, tsc);
        }
    }

    /// The answers of the copier's reads of doorbell records in GPU memory: each QP whose record
    /// is past its last doorbell gets a doorbell of its own (as `forward_shared`), now.
    #[cold]
    fn make_up(&mut self) {
        let Some(l) = self.link.clone() else {
            return;
        };
        while let Some(m) = l.makeups.pop() {
            let Some(q) = self.qps.get_mut(&m.qpn) else {
                continue;
            };
            if !q.checking {
                continue;
            }
            if q.again
                && l.jobs
                    .push(Job::Check {
                        qpn: m.qpn,
                        dbr: q.info.dbr,
                    })
                    .is_ok()
            {
                // Still checking: the next answer is read after the doorbell that hid it.
                q.again = false;
            } else {
                q.checking = false;
                q.again = false;
                self.checks_out -= 1;
            }
            let Some(rec) = m.rec else { continue };
            // The record had moved past the QP's doorbells when it was read, and a doorbell of
            // the QP's own has since covered it: a hidden doorbell seen as one with the next.
            let base = q.check_base;
            let last = q.tracker.last_pi();
            if rec != base && last != base && rec.wrapping_sub(base) <= last.wrapping_sub(base) {
                COALESCED.fetch_add(1, Ordering::Relaxed);
            }
            q.check_base = last;
            if let Some(i) = self.blocks.iter().position(|b| b.sharers.contains(&m.qpn)) {
                self.ring_for(i, m.qpn, rec, crate::runtime::clock::now());
            }
        }
    }

    /// Forwards to block `i`'s register a doorbell of QP `qpn` up to producer index `rec` (its
    /// doorbell record's send counter) when that is past its last doorbell: recorded and its
    /// WQEs recovered like any other.
    fn ring_for(&mut self, i: usize, qpn: u32, rec: u16, tsc: u64) {
        let Some(q) = self.qps.get(&qpn) else { return };
        let d = u32::from(rec.wrapping_sub(q.tracker.last_pi()));
        if d == 0 || d > q.info.sq_cnt {
            return;
        }
        let word = DoorbellWord {
            opmod: 0,
            idx: rec,
            opcode: 0,
            qpn,
            ds: 0,
        };
        let w = u64::from_ne_bytes(word.to_bytes());
        // SAFETY: the real UAR page is mapped while it is watched (as in on_change).
        unsafe { core::ptr::write_volatile(self.blocks[i].real, w) };
        sfence();
        SHARED.fetch_add(1, Ordering::Relaxed);
        self.doorbell(w, tsc, false);
        if let Some(q) = self.qps.get_mut(&qpn) {
            q.made_up = Some(rec);
        }
    }

    fn doorbell(&mut self, v: u64, tsc: u64, bf: bool) {
        DOORBELLS.fetch_add(1, Ordering::Relaxed);
        let word = DoorbellWord::from_mem_u64(v);
        let raw = u64::from_be_bytes(v.to_ne_bytes());
        let fl = if bf { flags::INLINE } else { 0 };
        let detail = Detail {
            addr: raw,
            flags: fl,
            aux: word.idx as u32,
        };
        // The QP looked up once, in place; the fields used beside it are borrowed apart.
        let (ts, link) = (self.ts, self.link.as_deref());
        let Some(q) = self.qps.get_mut(&word.qpn) else {
            UNKNOWN_QP.fetch_add(1, Ordering::Relaxed);
            emit(ts, tsc, UNATTRIBUTED_EP, Op::GpuDoorbell, 0, detail);
            return;
        };
        // A GPU index behind the last one: an earlier ring overtaken by a later one.
        if word.kind() == DoorbellKind::Gpu {
            let last = q.tracker.last_pi();
            let back = u32::from(last.wrapping_sub(word.idx));
            if back != 0 && back < q.info.sq_cnt {
                COALESCED.fetch_add(1, Ordering::Relaxed);
                emit(ts, tsc, q.info.ep, Op::GpuDoorbell, 0, detail);
                return;
            }
        }
        let step = q.tracker.on_doorbell(&word);
        let made_up = q.made_up.take();
        if matches!(step, DoorbellStep::Duplicate { .. }) && made_up == Some(q.tracker.last_pi()) {
            // The program's own doorbell for one already made up from its record: one ring.
            return;
        }
        let new = match step {
            DoorbellStep::New(r) => r.wqebbs as u64,
            _ => 0,
        };
        emit(ts, tsc, q.info.ep, Op::GpuDoorbell, new, detail);
        match step {
            DoorbellStep::New(range) => {
                if let Some(l) = link {
                    l.range(word.qpn, range, tsc);
                }
            }
            DoorbellStep::Duplicate { .. } => {
                DUPLICATES.fetch_add(1, Ordering::Relaxed);
            }
            DoorbellStep::Overrun { wqebbs, .. } => {
                OVERRUNS.fetch_add(1, Ordering::Relaxed);
                // Those WQEs are not recovered: count them as unparsable (at least one).
                UNPARSABLE.fetch_add(
                    u64::from(wqebbs.min(q.info.sq_cnt)).max(1),
                    Ordering::Relaxed,
                );
                // Whatever is pending may be stale now; parse it while it may still be intact
                // (if the copier has room: else it parses at its batch or idle flush).
                if let Some(l) = link {
                    let _ = l.jobs.push(Job::Flush(word.qpn));
                }
            }
            DoorbellStep::Malformed { .. } => {
                UNPARSABLE.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// Records an operation of the GPU at the time its doorbell was seen (`tsc`).
#[inline]
fn emit(ts: Option<&ThreadState>, tsc: u64, ep: u32, op: Op, bytes: u64, detail: Detail) {
    if let Some(ts) = ts {
        ts.record_at(tsc, ep, op, bytes, Outcome::Ok, detail);
    }
}
