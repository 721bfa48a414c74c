//! The verbs data path: the wrappers patched into each context's ops table (post_send,
//! post_recv, post_srq_recv, poll_cq; in full mode req_notify_cq). Each is a trampoline into
//! `hook::around` with `Guard::Nested`: counted even inside another layer's hook, since UCX over
//! rc_verbs or libfabric's verbs provider is the same traffic seen one layer down.

use core::ffi::{c_int, c_void};

use sigmatop::event::{Op, flags};

use super::abi::{
    IbvQp, IbvRecvWr, IbvSendWr, IbvSge, IbvWc, SEND_INLINE, SEND_SIGNALED, WR_ATOMIC_CMP_AND_SWP,
    WR_ATOMIC_FETCH_AND_ADD, WR_RDMA_READ, WR_RDMA_WRITE, WR_RDMA_WRITE_WITH_IMM, WR_SEND,
    WR_SEND_WITH_IMM, WR_SEND_WITH_INV, WR_TSO, ctx_of,
};
use super::context::{CtxState, ctx_state};
use super::{SGE_MAX, WALK_MAX, untraced};
use crate::interpose::hook::{self, Guard};
use crate::runtime::thread::{CallStamp, Detail, Outcome, ThreadState};

#[inline(always)]
pub fn send_op(opcode: u32) -> Op {
    match opcode {
        WR_RDMA_WRITE => Op::VerbsWrite,
        WR_RDMA_WRITE_WITH_IMM => Op::VerbsWriteImm,
        WR_SEND | WR_SEND_WITH_INV | WR_TSO => Op::VerbsSend,
        WR_SEND_WITH_IMM => Op::VerbsSendImm,
        WR_RDMA_READ => Op::VerbsRead,
        WR_ATOMIC_CMP_AND_SWP => Op::VerbsAtomicCas,
        WR_ATOMIC_FETCH_AND_ADD => Op::VerbsAtomicFa,
        _ => Op::VerbsOther,
    }
}

#[inline(always)]
pub fn send_flags(f: u32) -> u8 {
    let mut out = 0;
    if f & SEND_INLINE != 0 {
        out |= flags::INLINE;
    }
    if f & SEND_SIGNALED != 0 {
        out |= flags::SIGNALED;
    }
    out
}

/// Sum of `n` SGE lengths at `sg`.
///
/// # Safety
/// `sg` points at `n` SGEs (the provider accepted the WR, so it read them).
#[inline(always)]
pub unsafe fn sge_bytes(sg: *const IbvSge, n: c_int) -> u64 {
    if sg.is_null() || n <= 0 {
        return 0;
    }
    if n == 1 {
        // SAFETY: caller's contract.
        return unsafe { core::ptr::addr_of!((*sg).length).read() } as u64;
    }
    let mut sum = 0u64;
    for i in 0..(n as usize).min(SGE_MAX) {
        // SAFETY: caller's contract.
        sum += unsafe { core::ptr::addr_of!((*sg.add(i)).length).read() } as u64;
    }
    sum
}

/// Records one WR the provider accepted: its bytes always, its remote address, rkey and flags
/// only when the event is kept.
///
/// # Safety
/// `p` is a WR the provider read.
#[inline(always)]
unsafe fn record_one_send(
    ts: &ThreadState,
    ep: u32,
    p: *const IbvSendWr,
    stamp: Option<&CallStamp>,
) {
    // SAFETY: caller's contract; only fields the provider itself reads.
    let (op, bytes) = unsafe {
        let op = send_op(core::ptr::addr_of!((*p).opcode).read());
        let sg = core::ptr::addr_of!((*p).sg_list).read();
        (op, sge_bytes(sg, core::ptr::addr_of!((*p).num_sge).read()))
    };
    if let Some(t) = super::queues::track(ep) {
        // SAFETY: as above.
        let sf = unsafe { core::ptr::addr_of!((*p).send_flags).read() };
        t.posted(sf & SEND_SIGNALED != 0);
    }
    let detail = || {
        // SAFETY: as above. (The opcode is read again here, so that only the op lives through
        // aggregate mode's path.)
        unsafe {
            let opcode = core::ptr::addr_of!((*p).opcode).read();
            let sf = core::ptr::addr_of!((*p).send_flags).read();
            let (addr, rkey) = match opcode {
                WR_RDMA_WRITE | WR_RDMA_WRITE_WITH_IMM | WR_RDMA_READ => (
                    core::ptr::addr_of!((*p).remote_addr).read(),
                    core::ptr::addr_of!((*p).w1).read() as u32,
                ),
                WR_ATOMIC_CMP_AND_SWP | WR_ATOMIC_FETCH_AND_ADD => (
                    core::ptr::addr_of!((*p).remote_addr).read(),
                    core::ptr::addr_of!((*p).w3).read() as u32,
                ),
                _ => (0, 0),
            };
            Some(Detail {
                addr,
                flags: send_flags(sf),
                aux: rkey,
            })
        }
    };
    match stamp {
        Some(stamp) => ts.record_in_call(stamp, ep, op, bytes, Outcome::Ok, detail),
        None => ts.record(ep, op, bytes, Outcome::Ok, detail),
    }
}

/// A list of work requests linked by `next` (send or receive WRs).
trait WrList {
    /// # Safety
    /// `p` is a WR the provider read.
    unsafe fn next(p: *const Self) -> *mut Self;
}

impl WrList for IbvSendWr {
    unsafe fn next(p: *const Self) -> *mut Self {
        // SAFETY: the caller's contract.
        unsafe { core::ptr::addr_of!((*p).next).read() }
    }
}

impl WrList for IbvRecvWr {
    unsafe fn next(p: *const Self) -> *mut Self {
        // SAFETY: the caller's contract.
        unsafe { core::ptr::addr_of!((*p).next).read() }
    }
}

/// Walks the WR chain of a post call as far as the provider read it: `accepted` for each WR it
/// took (all when `r == 0`, else those before `*bad`), then `refused` once with the WR it refused,
/// or None when the failure's position is unknown. Only WRs the provider read are read: the walk
/// stops at NULL, at the refused WR, or after `WALK_MAX` WRs (the rest counted in `UNTRACED`).
///
/// # Safety
/// `wr` is the chain the provider was given; `bad` is the program's bad_wr pointer (or NULL).
#[inline(always)]
unsafe fn walk_chain<W: WrList>(
    wr: *mut W,
    r: c_int,
    bad: *mut *mut W,
    mut accepted: impl FnMut(*const W),
    refused: impl FnOnce(Option<*const W>),
) {
    if wr.is_null() {
        untraced(1);
        return;
    }
    let stop = if r == 0 {
        core::ptr::null_mut()
    } else if bad.is_null() {
        // The refused WR is unknown: one refusal, nothing more is read.
        refused(None);
        untraced(1);
        return;
    } else {
        // SAFETY: the program's bad_wr slot, written by the provider on failure.
        unsafe { *bad }
    };
    let mut p = wr;
    let mut n = 0usize;
    while !p.is_null() {
        if n == WALK_MAX {
            untraced(1);
            return;
        }
        if p == stop {
            refused(Some(p));
            return;
        }
        accepted(p);
        // SAFETY: p is a WR the provider read (before the refused one, or the whole chain).
        p = unsafe { W::next(p) };
        n += 1;
    }
    if r != 0 {
        // The provider failed but *bad was not in the chain: nothing more is known.
        refused(None);
    }
}

/// Records the WRs of a post_send chain: each accepted one, and the refused one (no bytes) as
/// its opcode's op, or `VerbsOther` where it is unknown.
///
/// # Safety
/// As `walk_chain`.
#[inline(never)]
unsafe fn record_send_chain(
    ts: &ThreadState,
    ep: u32,
    wr: *mut IbvSendWr,
    r: c_int,
    bad: *mut *mut IbvSendWr,
) {
    // The WRs of one post share its one clock read.
    let stamp = CallStamp::default();
    let refused = |p: Option<*const IbvSendWr>| {
        // SAFETY: the refused WR, which the provider read.
        let op = p.map_or(Op::VerbsOther, |p| unsafe {
            send_op(core::ptr::addr_of!((*p).opcode).read())
        });
        ts.record_in_call(&stamp, ep, op, 0, Outcome::Refused, || Some(Detail::NONE));
    };
    let accepted = |p| {
        // SAFETY: a WR the provider read.
        unsafe { record_one_send(ts, ep, p, Some(&stamp)) }
    };
    // SAFETY: the caller's contract; each accepted WR was read by the provider.
    unsafe { walk_chain(wr, r, bad, accepted, refused) }
}

/// Records the WRs of a post_recv or post_srq_recv chain as `op`: each one a posted receive
/// buffer of its capacity (the receive is counted when its work completion is polled).
///
/// # Safety
/// As `walk_chain`.
unsafe fn record_recv_chain(
    ts: &ThreadState,
    ep: u32,
    op: Op,
    wr: *mut IbvRecvWr,
    r: c_int,
    bad: *mut *mut IbvRecvWr,
) {
    // The WRs of one post share its one clock read.
    let stamp = CallStamp::default();
    let accepted = |p: *const IbvRecvWr| {
        // SAFETY: a WR the provider read.
        let bytes = unsafe {
            sge_bytes(
                core::ptr::addr_of!((*p).sg_list).read(),
                core::ptr::addr_of!((*p).num_sge).read(),
            )
        };
        ts.record_in_call(&stamp, ep, op, bytes, Outcome::Posted, || {
            Some(Detail::NONE)
        });
    };
    let refused = |_| ts.record_in_call(&stamp, ep, op, 0, Outcome::Refused, || Some(Detail::NONE));
    // SAFETY: the caller's contract.
    unsafe { walk_chain(wr, r, bad, accepted, refused) }
}

/// The `ops.post_send` of patched contexts.
///
/// # Safety
/// Same contract as `ibv_post_send`; `qp` belongs to a patched context.
pub unsafe extern "C" fn post_send_hook(
    qp: *mut IbvQp,
    wr: *mut IbvSendWr,
    bad: *mut *mut IbvSendWr,
) -> c_int {
    // SAFETY: qp is live (caller).
    let Some(f) = ctx_state(unsafe { (*qp).context }).and_then(|s| s.post_send) else {
        return libc::ENODEV;
    };
    hook::around(
        Guard::Nested,
        // SAFETY: the program's arguments, unchanged.
        || unsafe { f(qp, wr, bad) },
        |ts, r| {
            let ep = crate::runtime::registry::lookup(qp as usize);
            ts.note_post(ep);
            // SAFETY: the chain the provider just walked: a single accepted WR is recorded
            // inline.
            unsafe {
                if r == 0 && !wr.is_null() && IbvSendWr::next(wr).is_null() {
                    record_one_send(ts, ep, wr, None);
                } else {
                    record_send_chain(ts, ep, wr, r, bad);
                }
            }
        },
    )
}

/// The `ops.post_recv` of patched contexts.
///
/// # Safety
/// Same contract as `ibv_post_recv`.
pub unsafe extern "C" fn post_recv_hook(
    qp: *mut IbvQp,
    wr: *mut IbvRecvWr,
    bad: *mut *mut IbvRecvWr,
) -> c_int {
    // SAFETY: qp is live (caller).
    let Some(f) = ctx_state(unsafe { (*qp).context }).and_then(|s| s.post_recv) else {
        return libc::ENODEV;
    };
    hook::around(
        Guard::Nested,
        // SAFETY: the program's arguments, unchanged.
        || unsafe { f(qp, wr, bad) },
        |ts, r| {
            let ep = crate::runtime::registry::lookup(qp as usize);
            ts.note_post(ep);
            // SAFETY: the chain the provider just walked.
            unsafe { record_recv_chain(ts, ep, Op::VerbsRecv, wr, r, bad) }
        },
    )
}

/// The `ops.post_srq_recv` of patched contexts.
///
/// # Safety
/// Same contract as `ibv_post_srq_recv`.
pub unsafe extern "C" fn post_srq_recv_hook(
    srq: *mut c_void,
    wr: *mut IbvRecvWr,
    bad: *mut *mut IbvRecvWr,
) -> c_int {
    // SAFETY: srq is live (caller).
    let Some(f) = ctx_state(unsafe { ctx_of(srq) }).and_then(|s| s.post_srq_recv) else {
        return libc::ENODEV;
    };
    hook::around(
        Guard::Nested,
        // SAFETY: the program's arguments, unchanged.
        || unsafe { f(srq, wr, bad) },
        |ts, r| {
            let ep = crate::runtime::registry::lookup(srq as usize);
            // SAFETY: the chain the provider just walked.
            unsafe { record_recv_chain(ts, ep, Op::VerbsSrqRecv, wr, r, bad) }
        },
    )
}

/// Completion opcode class bit for the poll_cq summary (`aux` high byte).
#[inline(always)]
fn wc_class(opcode: u32) -> u16 {
    match opcode {
        0 => 1,     // SEND
        1 => 2,     // RDMA_WRITE
        2 => 4,     // RDMA_READ
        3..=5 => 8, // atomics, BIND_MW
        128 => 16,  // RECV
        129 => 32,  // RECV_RDMA_WITH_IMM
        _ => 64,
    }
}

/// The `ops.poll_cq` of patched contexts, in every mode: each successful receive completion
/// (opcode RECV or RECV_RDMA_WITH_IMM) is a receive of its QP (or the QP's SRQ), with the
/// `byte_len` that arrived (minus the 40-byte GRH area on UD QPs); a QP sigmatop did not see
/// created counts on the CQ. A failed completion's opcode is undefined (verbs.h), so it cannot be
/// told a receive: it is not counted as one. An empty poll returns at once. In full mode each
/// call that returned completions or an error is also one op on the CQ: bytes = completions,
/// addr = the sum of their `byte_len`, aux = (completion classes << 8) | error completions.
///
/// # Safety
/// Same contract as `ibv_poll_cq`.
pub unsafe extern "C" fn poll_cq_hook(cq: *mut c_void, n: c_int, wc: *mut IbvWc) -> c_int {
    // SAFETY: cq is live (caller).
    let Some(st) = ctx_state(unsafe { ctx_of(cq) }) else {
        return -libc::ENODEV;
    };
    let Some(f) = st.poll_cq else {
        return -libc::ENODEV;
    };
    // SAFETY: the program's arguments, unchanged.
    let r = unsafe { f(cq, n, wc) };
    if r == 0 {
        return r;
    }
    if let Some(ts) = crate::runtime::thread::current() {
        hook::guarded((), || {
            // SAFETY: the provider wrote `r` completions at `wc` (when r > 0).
            unsafe { record_poll(ts, st, cq, r, n, wc) }
        });
    }
    r
}

/// The recording step of a poll that returned `r` (non-zero).
///
/// # Safety
/// When `r > 0`, `wc` holds `r` completions the provider wrote.
#[inline(never)]
unsafe fn record_poll(
    ts: &ThreadState,
    st: &CtxState,
    cq: *mut c_void,
    r: c_int,
    n: c_int,
    wc: *mut IbvWc,
) {
    let full = crate::runtime::config::full();
    if r < 0 || wc.is_null() {
        if full {
            let ep = crate::runtime::registry::lookup(cq as usize);
            ts.record(ep, Op::VerbsPollCq, 0, Outcome::Failed, || {
                Some(Detail::NONE)
            });
        }
        return;
    }
    // SAFETY: the provider wrote `r` completions at wc.
    let wcs = unsafe { core::slice::from_raw_parts(wc, r.min(n.max(0)) as usize) };
    if !full {
        // Counters only: receives and errors (the poll's own summary is full mode's).
        for w in wcs {
            count_completion(ts, st, cq, w);
        }
        return;
    }
    let (mut bytes, mut errs, mut classes) = (0u64, 0u16, 0u16);
    for w in wcs {
        count_completion(ts, st, cq, w);
        if w.status != 0 {
            errs = errs.saturating_add(1);
        } else {
            bytes += w.byte_len as u64;
        }
        classes |= wc_class(w.opcode);
    }
    let ep = crate::runtime::registry::lookup(cq as usize);
    let aux = (classes << 8) | errs.min(255);
    // The errors themselves were counted on their QPs: the poll is one operation (not a failed
    // one, which would count them twice) whose event says how many it returned, in `aux`, and
    // carries the error flag.
    let error = if errs > 0 { flags::ERROR } else { 0 };
    ts.record(ep, Op::VerbsPollCq, r as u64, Outcome::Ok, || {
        Some(Detail {
            flags: error,
            ..Detail::at(bytes, aux as u32)
        })
    });
}

/// Counts what one completion says in every mode: a successful receive (opcode RECV or
/// RECV_RDMA_WITH_IMM) as a receive of its QP (or the QP's SRQ) with the bytes that arrived, an
/// error other than a flush as one error on its QP.
#[inline(always)]
fn count_completion(ts: &ThreadState, st: &CtxState, cq: *mut c_void, w: &IbvWc) {
    if w.status != 0 {
        failed_completion(ts, st, cq, w.qp_num, w.status);
        return;
    }
    if w.opcode < WC_RECV {
        // A send-queue completion: it retires its QP's work up to the signaled request.
        match st.recv_target(w.qp_num) {
            Some(t) => {
                if let Some(t) = super::queues::track(t.qp) {
                    t.completed();
                }
            }
            // A QP sigmatop never saw created: counted on its CQ, never guessed.
            None => unknown_send_completion(ts, cq),
        }
        return;
    }
    if !is_receive(w.opcode, w.wc_flags) {
        return;
    }
    let (ep, op, len) = match st.recv_target(w.qp_num) {
        Some(t) => (
            t.ep,
            if t.srq {
                Op::VerbsSrqRecv
            } else {
                Op::VerbsRecv
            },
            if t.ud {
                (w.byte_len as u64).saturating_sub(UD_GRH)
            } else {
                w.byte_len as u64
            },
        ),
        None => (cq_endpoint(cq), Op::VerbsRecv, w.byte_len as u64),
    };
    ts.arrived(ep, op, len, true);
}

/// An error completion: counted by status on its QP's queue tracker, and when it is not a flush,
/// one error on its QP, under `OTHER` (an error completion's opcode is not defined). A flush
/// (`IBV_WC_WR_FLUSH_ERR`) is not an error of its own: it follows a QP's move to the error state
/// (an earlier error, or a program tearing the QP down) and reports WRs that were never executed.
/// Out of line: error completions are rare.
#[cold]
#[inline(never)]
fn failed_completion(ts: &ThreadState, st: &CtxState, cq: *mut c_void, qpn: u32, status: u32) {
    let target = st.recv_target(qpn).filter(|t| t.qp != 0);
    if let Some(t) = target.and_then(|t| super::queues::track(t.qp)) {
        t.failed(status);
    }
    if status == WC_WR_FLUSH_ERR {
        return;
    }
    let ep = match target {
        Some(t) => t.qp,
        None => cq_endpoint(cq),
    };
    ts.failed(ep, Op::VerbsOther);
}

/// A send completion naming a QP sigmatop did not see created: one `send_done` on its CQ. Out of
/// line: a program's QPs are seen created unless they predate the preload.
#[cold]
#[inline(never)]
fn unknown_send_completion(ts: &ThreadState, cq: *mut c_void) {
    ts.count(cq_endpoint(cq), Op::VerbsSendDone, 0, Outcome::Ok);
}

/// The endpoint of a CQ whose completion names a QP sigmatop did not see created: out of line,
/// so that the compiler does not hoist the CQ's lookup out of `record_poll`'s loop onto every
/// poll.
#[cold]
#[inline(never)]
fn cq_endpoint(cq: *mut c_void) -> u32 {
    crate::runtime::registry::lookup(cq as usize)
}

/// `IBV_WC_WR_FLUSH_ERR`: a work request flushed by a QP in the error state.
const WC_WR_FLUSH_ERR: u32 = 5;
/// `IBV_WC_RECV` and `IBV_WC_RECV_RDMA_WITH_IMM`: bytes arrived in a posted receive.
const WC_RECV: u32 = 1 << 7;
const WC_RECV_RDMA_WITH_IMM: u32 = WC_RECV + 1;
/// `IBV_WC_TM_RECV`: a tagged message matched a posted tag; it carries data only with
/// `IBV_WC_TM_DATA_VALID` (the match alone is reported first, without it).
const WC_TM_RECV: u32 = WC_RECV + 5;
/// `IBV_WC_TM_NO_TAG`: a message that matched no tag, landed in an SRQ receive.
const WC_TM_NO_TAG: u32 = WC_RECV + 6;
/// `IBV_WC_TM_DATA_VALID` in `wc_flags`.
const WC_TM_DATA_VALID: u32 = 1 << 6;

/// Whether a successful completion is bytes that arrived in a receive. Bit 7 of the opcode is
/// set on every receive-side opcode, but TM_ADD / TM_DEL / TM_SYNC (tag-list operations on an
/// SRQ: no data), a TM_RECV without DATA_VALID (the match, before its data) and DRIVER1..3 are
/// not receives.
#[inline(always)]
fn is_receive(opcode: u32, wc_flags: u32) -> bool {
    match opcode {
        WC_RECV | WC_RECV_RDMA_WITH_IMM | WC_TM_NO_TAG => true,
        WC_TM_RECV => wc_flags & WC_TM_DATA_VALID != 0,
        _ => false,
    }
}
/// The GRH area a UD receive buffer starts with (counted in `byte_len`).
const UD_GRH: u64 = 40;

/// The `ops.req_notify_cq` of patched contexts (installed in full mode only).
///
/// # Safety
/// Same contract as `ibv_req_notify_cq`.
pub unsafe extern "C" fn req_notify_hook(cq: *mut c_void, solicited: c_int) -> c_int {
    // SAFETY: cq is live (caller).
    let Some(f) = ctx_state(unsafe { ctx_of(cq) }).and_then(|s| s.req_notify_cq) else {
        return libc::ENODEV;
    };
    hook::around(
        Guard::Nested,
        // SAFETY: the program's arguments, unchanged.
        || unsafe { f(cq, solicited) },
        |ts, r| {
            let ep = crate::runtime::registry::lookup(cq as usize);
            let outcome = if r != 0 { Outcome::Failed } else { Outcome::Ok };
            ts.record(ep, Op::VerbsOther, 0, outcome, || {
                Some(Detail::at(0, solicited as u32))
            });
        },
    )
}

#[cfg(test)]
mod tm_tests {
    use super::*;

    /// The opcodes of rdma-core 44's `enum ibv_wc_opcode` from 128 on (verbs.h).
    #[test]
    fn only_data_arrivals_are_receives() {
        let (add, del, sync, tm_recv, no_tag) = (130, 131, 132, 133, 134);
        assert!(is_receive(128, 0));
        assert!(is_receive(129, 0));
        assert!(is_receive(no_tag, 0));
        assert!(is_receive(tm_recv, 1 << 6), "TM_RECV with DATA_VALID");
        assert!(
            !is_receive(tm_recv, 1 << 5),
            "TM_RECV with MATCH only: no data yet"
        );
        for op in [add, del, sync, 135, 136, 137] {
            assert!(!is_receive(op, 1 << 6), "opcode {op} is no receive");
        }
        for op in 0..=9 {
            assert!(!is_receive(op, 0), "send-side opcode {op}");
        }
        assert_eq!(wc_class(130), 64);
    }
}
