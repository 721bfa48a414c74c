//! `ibv_qp_ex`: a QP created with `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS` posts through its per-QP
//! `wr_*` pointers. Those are replaced in place, the provider's kept in a per-QP `QpxState`; WRs
//! are collected between `wr_start` and `wr_complete` and recorded when `wr_complete` returns
//! (refused, with no bytes, when it fails).

use core::cell::UnsafeCell;
use core::ffi::{c_int, c_void};

use sigmatop::event::{Op, flags};

use super::abi::{IbvDataBuf, IbvSge, QpExFns, Qx};
use super::data::{send_flags, sge_bytes};
use super::{SGE_MAX, unpatched};
use crate::interpose::hook::{self, Guard, wrap_slot};
use crate::runtime::ptrmap::PtrMap;
use crate::runtime::thread::{Detail, Outcome, ThreadState};

/// WRs collected between wr_start and wr_complete before they are recorded.
const PENDING_MAX: usize = 32;

#[derive(Clone, Copy, Default)]
struct PendWr {
    op: u8,
    flags: u8,
    aux: u32,
    bytes: u64,
    addr: u64,
}

struct Pending {
    n: usize,
    items: [PendWr; PENDING_MAX],
}

/// The provider's wr_* functions of one QP and the WRs of the batch being built. The batch is
/// touched only inside wr_* calls on that QP, which the verbs API requires the program to
/// serialise.
pub struct QpxState {
    ep: u32,
    orig: QpExFns,
    pending: UnsafeCell<Pending>,
}

// SAFETY: see the type's doc: `pending` is only accessed from serialised wr_* calls of one QP.
unsafe impl Sync for QpxState {}

/// `ibv_qp_ex` pointers → their state (leaked, never freed).
static QPXS: PtrMap<*const QpxState, 4096> = PtrMap::new();

/// The map's writers' lock, for `fork::prepare`.
pub(super) fn hold_for_fork(h: &mut crate::runtime::held::Held) {
    h.with(|| QPXS.try_lock_writers());
}

#[inline(always)]
fn qpx_state(qpx: Qx) -> Option<&'static QpxState> {
    let p = QPXS.get(qpx as usize)?;
    // SAFETY: states are leaked, never freed (and never cleared: `p` is not null).
    unsafe { p.as_ref() }
}

fn qpx_insert(qpx: Qx, st: QpxState) -> bool {
    let p = Box::into_raw(Box::new(st));
    if QPXS.insert(qpx as usize, p as *const QpxState) {
        return true;
    }
    // SAFETY: never published: ours alone.
    drop(unsafe { Box::from_raw(p) });
    false
}

/// Replaces the wr_* pointers of `qpx` with sigmatop's, keeping the provider's per QP.
///
/// # Safety
/// `qpx` is NULL or the live `ibv_qp_ex` of a QP just created, not yet used by the program.
pub(super) unsafe fn patch_qpx(qpx: Qx, ep: u32) {
    if qpx.is_null() {
        return;
    }
    // SAFETY: caller's contract.
    let orig = unsafe { core::ptr::addr_of!((*qpx).fns).read() };
    if orig.wr_start.map(|f| f as usize) == Some(wr_start as unsafe extern "C" fn(Qx) as usize) {
        return;
    }
    if orig.wr_start.is_none() || orig.wr_complete.is_none() {
        return;
    }
    let st = QpxState {
        ep,
        orig,
        pending: UnsafeCell::new(Pending {
            n: 0,
            items: [PendWr::default(); PENDING_MAX],
        }),
    };
    if !qpx_insert(qpx, st) {
        unpatched("too many extended QPs");
        return;
    }
    // SAFETY: the QP's own function table (provider memory), not used by the program yet.
    let f = unsafe { &mut *core::ptr::addr_of_mut!((*qpx).fns) };
    wrap_slot(&mut f.wr_atomic_cmp_swp, wr_atomic_cmp_swp);
    wrap_slot(&mut f.wr_atomic_fetch_add, wr_atomic_fetch_add);
    wrap_slot(&mut f.wr_rdma_read, wr_rdma_read);
    wrap_slot(&mut f.wr_rdma_write, wr_rdma_write);
    wrap_slot(&mut f.wr_rdma_write_imm, wr_rdma_write_imm);
    wrap_slot(&mut f.wr_send, wr_send);
    wrap_slot(&mut f.wr_send_imm, wr_send_imm);
    wrap_slot(&mut f.wr_send_inv, wr_send_inv);
    wrap_slot(&mut f.wr_set_inline_data, wr_set_inline_data);
    wrap_slot(&mut f.wr_set_inline_data_list, wr_set_inline_data_list);
    wrap_slot(&mut f.wr_set_sge, wr_set_sge);
    wrap_slot(&mut f.wr_set_sge_list, wr_set_sge_list);
    wrap_slot(&mut f.wr_start, wr_start);
    wrap_slot(&mut f.wr_complete, wr_complete);
    wrap_slot(&mut f.wr_abort, wr_abort);
    wrap_slot(&mut f.wr_atomic_write, wr_atomic_write);
}

/// Adds one WR to the QP's batch (recording the batch at once when it is full: the provider
/// most likely posts it).
#[inline(always)]
fn push_wr(st: &QpxState, qpx: Qx, op: Op, addr: u64, rkey: u32) {
    // SAFETY: qpx is live; wr_flags is set by the program before the opcode call.
    let wf = unsafe { core::ptr::addr_of!((*qpx).wr_flags).read() };
    // SAFETY: serialised per QP (QpxState doc).
    let p = unsafe { &mut *st.pending.get() };
    if p.n == PENDING_MAX {
        flush_pending(st, p);
    }
    p.items[p.n] = PendWr {
        op: op as u8,
        flags: send_flags(wf),
        aux: rkey,
        bytes: 0,
        addr,
    };
    p.n += 1;
}

/// Records a full batch before the next WR is added (the provider most likely posts it) and
/// empties it.
#[cold]
fn flush_pending(st: &QpxState, p: &mut Pending) {
    if let Some(ts) = crate::runtime::thread::current() {
        hook::guarded((), || record_batch(ts, st, p, Outcome::Ok));
    }
    p.n = 0;
}

/// Records the WRs of a batch: as posted, or (`Refused`: wr_complete failed) with no bytes.
fn record_batch(ts: &ThreadState, st: &QpxState, p: &Pending, outcome: Outcome) {
    ts.note_post(st.ep);
    let track = super::queues::track(st.ep).filter(|_| outcome != Outcome::Refused);
    for w in &p.items[..p.n] {
        if let Some(t) = track {
            t.posted(w.flags & flags::SIGNALED != 0);
        }
        let op = Op::from_u8(w.op).unwrap_or(Op::VerbsOther);
        let bytes = if outcome == Outcome::Refused {
            0
        } else {
            w.bytes
        };
        let detail = Detail {
            addr: w.addr,
            flags: w.flags,
            aux: w.aux,
        };
        ts.record(st.ep, op, bytes, outcome, || Some(detail));
    }
}

#[inline(always)]
fn add_bytes(st: &QpxState, n: u64, inline: bool) {
    // SAFETY: serialised per QP.
    let p = unsafe { &mut *st.pending.get() };
    if p.n > 0 {
        let w = &mut p.items[p.n - 1];
        w.bytes += n;
        if inline {
            w.flags |= flags::INLINE;
        }
    }
}

macro_rules! qpx_or_return {
    ($qpx:expr) => {
        match qpx_state($qpx) {
            Some(s) => s,
            None => return,
        }
    };
}

unsafe extern "C" fn wr_start(qpx: Qx) {
    let st = qpx_or_return!(qpx);
    // SAFETY: serialised per QP.
    unsafe { (*st.pending.get()).n = 0 };
    if let Some(f) = st.orig.wr_start {
        // SAFETY: the provider's function, the program's argument.
        unsafe { f(qpx) }
    }
}

unsafe extern "C" fn wr_complete(qpx: Qx) -> c_int {
    let Some(st) = qpx_state(qpx) else {
        return libc::ENODEV;
    };
    let Some(f) = st.orig.wr_complete else {
        return libc::ENODEV;
    };
    let r = hook::around(
        Guard::Nested,
        // SAFETY: the provider's function, the program's argument.
        || unsafe { f(qpx) },
        |ts, r| {
            // SAFETY: serialised per QP.
            let p = unsafe { &*st.pending.get() };
            let outcome = if r != 0 {
                Outcome::Refused
            } else {
                Outcome::Ok
            };
            record_batch(ts, st, p, outcome);
        },
    );
    // SAFETY: serialised per QP.
    unsafe { (*st.pending.get()).n = 0 };
    r
}

unsafe extern "C" fn wr_abort(qpx: Qx) {
    let st = qpx_or_return!(qpx);
    // SAFETY: serialised per QP.
    unsafe { (*st.pending.get()).n = 0 };
    if let Some(f) = st.orig.wr_abort {
        // SAFETY: the provider's function, the program's argument.
        unsafe { f(qpx) }
    }
}

unsafe extern "C" fn wr_send(qpx: Qx) {
    let st = qpx_or_return!(qpx);
    push_wr(st, qpx, Op::VerbsSend, 0, 0);
    // SAFETY: installed only where the provider's slot was set.
    unsafe { st.orig.wr_send.unwrap_unchecked()(qpx) }
}

unsafe extern "C" fn wr_send_imm(qpx: Qx, imm: u32) {
    let st = qpx_or_return!(qpx);
    push_wr(st, qpx, Op::VerbsSendImm, 0, 0);
    // SAFETY: installed only where the provider's slot was set.
    unsafe { st.orig.wr_send_imm.unwrap_unchecked()(qpx, imm) }
}

unsafe extern "C" fn wr_send_inv(qpx: Qx, rkey: u32) {
    let st = qpx_or_return!(qpx);
    push_wr(st, qpx, Op::VerbsSend, 0, 0);
    // SAFETY: installed only where the provider's slot was set.
    unsafe { st.orig.wr_send_inv.unwrap_unchecked()(qpx, rkey) }
}

unsafe extern "C" fn wr_rdma_write(qpx: Qx, rkey: u32, raddr: u64) {
    let st = qpx_or_return!(qpx);
    push_wr(st, qpx, Op::VerbsWrite, raddr, rkey);
    // SAFETY: installed only where the provider's slot was set.
    unsafe { st.orig.wr_rdma_write.unwrap_unchecked()(qpx, rkey, raddr) }
}

unsafe extern "C" fn wr_rdma_write_imm(qpx: Qx, rkey: u32, raddr: u64, imm: u32) {
    let st = qpx_or_return!(qpx);
    push_wr(st, qpx, Op::VerbsWriteImm, raddr, rkey);
    // SAFETY: installed only where the provider's slot was set.
    unsafe { st.orig.wr_rdma_write_imm.unwrap_unchecked()(qpx, rkey, raddr, imm) }
}

unsafe extern "C" fn wr_rdma_read(qpx: Qx, rkey: u32, raddr: u64) {
    let st = qpx_or_return!(qpx);
    push_wr(st, qpx, Op::VerbsRead, raddr, rkey);
    // SAFETY: installed only where the provider's slot was set.
    unsafe { st.orig.wr_rdma_read.unwrap_unchecked()(qpx, rkey, raddr) }
}

unsafe extern "C" fn wr_atomic_cmp_swp(qpx: Qx, rkey: u32, raddr: u64, cmp: u64, swap: u64) {
    let st = qpx_or_return!(qpx);
    push_wr(st, qpx, Op::VerbsAtomicCas, raddr, rkey);
    // SAFETY: installed only where the provider's slot was set.
    unsafe { st.orig.wr_atomic_cmp_swp.unwrap_unchecked()(qpx, rkey, raddr, cmp, swap) }
}

unsafe extern "C" fn wr_atomic_fetch_add(qpx: Qx, rkey: u32, raddr: u64, add: u64) {
    let st = qpx_or_return!(qpx);
    push_wr(st, qpx, Op::VerbsAtomicFa, raddr, rkey);
    // SAFETY: installed only where the provider's slot was set.
    unsafe { st.orig.wr_atomic_fetch_add.unwrap_unchecked()(qpx, rkey, raddr, add) }
}

unsafe extern "C" fn wr_atomic_write(qpx: Qx, rkey: u32, raddr: u64, data: *const c_void) {
    let st = qpx_or_return!(qpx);
    push_wr(st, qpx, Op::VerbsOther, raddr, rkey);
    add_bytes(st, 8, false);
    // SAFETY: installed only where the provider's slot was set.
    unsafe { st.orig.wr_atomic_write.unwrap_unchecked()(qpx, rkey, raddr, data) }
}

unsafe extern "C" fn wr_set_sge(qpx: Qx, lkey: u32, addr: u64, len: u32) {
    let st = qpx_or_return!(qpx);
    add_bytes(st, len as u64, false);
    // SAFETY: installed only where the provider's slot was set.
    unsafe { st.orig.wr_set_sge.unwrap_unchecked()(qpx, lkey, addr, len) }
}

unsafe extern "C" fn wr_set_sge_list(qpx: Qx, n: usize, list: *const IbvSge) {
    let st = qpx_or_return!(qpx);
    // SAFETY: installed only where the provider's slot was set.
    unsafe { st.orig.wr_set_sge_list.unwrap_unchecked()(qpx, n, list) };
    // The provider read the n SGEs; sum them afterwards.
    // SAFETY: list holds n SGEs (API contract).
    let b = unsafe { sge_bytes(list, n.min(SGE_MAX) as c_int) };
    add_bytes(st, b, false);
}

unsafe extern "C" fn wr_set_inline_data(qpx: Qx, addr: *mut c_void, len: usize) {
    let st = qpx_or_return!(qpx);
    add_bytes(st, len as u64, true);
    // SAFETY: installed only where the provider's slot was set.
    unsafe { st.orig.wr_set_inline_data.unwrap_unchecked()(qpx, addr, len) }
}

unsafe extern "C" fn wr_set_inline_data_list(qpx: Qx, n: usize, list: *const IbvDataBuf) {
    let st = qpx_or_return!(qpx);
    // SAFETY: installed only where the provider's slot was set.
    unsafe { st.orig.wr_set_inline_data_list.unwrap_unchecked()(qpx, n, list) };
    let mut b = 0u64;
    if !list.is_null() {
        for i in 0..n.min(SGE_MAX) {
            // SAFETY: list holds n buffers (API contract), which the provider just read.
            b += unsafe { core::ptr::addr_of!((*list.add(i)).length).read() } as u64;
        }
    }
    add_bytes(st, b, true);
}
