//! The legacy UCX data path (`_nb`, `_nbr`, `_nbi`; each reaches its `_nbx` hook through libucp's
//! PLT, where the guard makes it pass through), the blocking flushes and progress; receives are
//! in [`super::recv`]. Each hook is a trampoline into [`super::op`] or [`super::after_progress`].

use core::ffi::{c_int, c_uint, c_void};

use sigmatop::event::{Layer, Op};

use super::abi::{Ptr, Status, UCS_ERR_UNSUPPORTED, UcsResult, dt_bytes, unsupported_ptr};
use super::{SONAMES, after_progress, op};
use crate::interpose::dlsym::hook_table;
use crate::runtime::dl::real_fns;
use crate::runtime::thread::{Detail, Outcome};

type TagSendNb = unsafe extern "C" fn(Ptr, *const c_void, usize, u64, u64, Ptr) -> Ptr;
type TagSendNbr = unsafe extern "C" fn(Ptr, *const c_void, usize, u64, u64, Ptr) -> Status;
type RmaNb = unsafe extern "C" fn(Ptr, *const c_void, usize, u64, Ptr, Ptr) -> Ptr;
type RmaNbi = unsafe extern "C" fn(Ptr, *const c_void, usize, u64, Ptr) -> Status;
type AmSendNb = unsafe extern "C" fn(Ptr, u16, *const c_void, usize, u64, Ptr, c_uint) -> Ptr;
type StreamSendNb = unsafe extern "C" fn(Ptr, *const c_void, usize, u64, Ptr, c_uint) -> Ptr;
type AtomicPost = unsafe extern "C" fn(Ptr, c_int, u64, usize, u64, Ptr) -> Status;
type AtomicFetchNb =
    unsafe extern "C" fn(Ptr, c_int, u64, *mut c_void, usize, u64, Ptr, Ptr) -> Ptr;
type FlushNb = unsafe extern "C" fn(Ptr, c_uint, Ptr) -> Ptr;
type BlockingFlush = unsafe extern "C" fn(Ptr) -> Status;
type Progress = unsafe extern "C" fn(Ptr) -> c_uint;

real_fns! { SONAMES;
    TAG_SEND_NB: TagSendNb = c"ucp_tag_send_nb";
    TAG_SEND_NBR: TagSendNbr = c"ucp_tag_send_nbr";
    TAG_SEND_SYNC_NB: TagSendNb = c"ucp_tag_send_sync_nb";
    PUT_NB: RmaNb = c"ucp_put_nb";
    PUT_NBI: RmaNbi = c"ucp_put_nbi";
    GET_NB: RmaNb = c"ucp_get_nb";
    GET_NBI: RmaNbi = c"ucp_get_nbi";
    AM_SEND_NB: AmSendNb = c"ucp_am_send_nb";
    STREAM_SEND_NB: StreamSendNb = c"ucp_stream_send_nb";
    ATOMIC_POST: AtomicPost = c"ucp_atomic_post";
    ATOMIC_FETCH_NB: AtomicFetchNb = c"ucp_atomic_fetch_nb";
    EP_FLUSH_NB: FlushNb = c"ucp_ep_flush_nb";
    WORKER_FLUSH_NB: FlushNb = c"ucp_worker_flush_nb";
    EP_FLUSH: BlockingFlush = c"ucp_ep_flush";
    WORKER_FLUSH: BlockingFlush = c"ucp_worker_flush";
    WORKER_PROGRESS: Progress = c"ucp_worker_progress";
}

/// Hook of `ucp_tag_send_nb`.
#[unsafe(no_mangle)]
unsafe extern "C" fn ucp_tag_send_nb(
    ep: Ptr,
    buffer: *const c_void,
    count: usize,
    datatype: u64,
    tag: u64,
    cb: Ptr,
) -> Ptr {
    let real = TAG_SEND_NB.get();
    // SAFETY: the hook's own contract, forwarded.
    unsafe { tag_send_nb(real, Op::UcxTagSend, ep, buffer, count, datatype, tag, cb) }
}

/// Hook of `ucp_tag_send_sync_nb`.
#[unsafe(no_mangle)]
unsafe extern "C" fn ucp_tag_send_sync_nb(
    ep: Ptr,
    buffer: *const c_void,
    count: usize,
    datatype: u64,
    tag: u64,
    cb: Ptr,
) -> Ptr {
    let real = TAG_SEND_SYNC_NB.get();
    // SAFETY: the hook's own contract, forwarded.
    unsafe {
        tag_send_nb(
            real,
            Op::UcxTagSendSync,
            ep,
            buffer,
            count,
            datatype,
            tag,
            cb,
        )
    }
}

/// The two legacy tag sends (same signature, different op).
///
/// # Safety
/// The contract of `ucp_tag_send_nb`.
#[inline(always)]
#[allow(clippy::too_many_arguments)] // the C signature's six arguments plus the real and the op
unsafe fn tag_send_nb(
    real: Option<TagSendNb>,
    which: Op,
    ep: Ptr,
    buffer: *const c_void,
    count: usize,
    dt: u64,
    tag: u64,
    cb: Ptr,
) -> Ptr {
    let Some(real) = real else {
        return unsupported_ptr();
    };
    op(
        ep,
        which,
        Detail::at(tag, 0),
        // SAFETY: the program's arguments, unchanged.
        || unsafe { real(ep, buffer, count, dt, tag, cb) },
        // SAFETY: the program's valid buffer of `count` elements of `dt`.
        |_| unsafe { dt_bytes(dt, buffer, count) },
    )
}

/// Hook of `ucp_tag_send_nbr`.
#[unsafe(no_mangle)]
unsafe extern "C" fn ucp_tag_send_nbr(
    ep: Ptr,
    buffer: *const c_void,
    count: usize,
    datatype: u64,
    tag: u64,
    req: Ptr,
) -> Status {
    let Some(real) = TAG_SEND_NBR.get() else {
        return UCS_ERR_UNSUPPORTED;
    };
    op(
        ep,
        Op::UcxTagSend,
        Detail::at(tag, 0),
        // SAFETY: the program's arguments, unchanged.
        || unsafe { real(ep, buffer, count, datatype, tag, req) },
        // SAFETY: the program's valid buffer of `count` elements of `datatype`.
        |_| unsafe { dt_bytes(datatype, buffer, count) },
    )
}

/// Hook of `ucp_put_nb`.
#[unsafe(no_mangle)]
unsafe extern "C" fn ucp_put_nb(
    ep: Ptr,
    buffer: *const c_void,
    length: usize,
    remote_addr: u64,
    rkey: Ptr,
    cb: Ptr,
) -> Ptr {
    let Some(real) = PUT_NB.get() else {
        return unsupported_ptr();
    };
    let call = || {
        // SAFETY: the program's arguments, unchanged.
        unsafe { real(ep, buffer, length, remote_addr, rkey, cb) }
    };
    op(ep, Op::UcxPut, Detail::at(remote_addr, 0), call, |_| {
        length as u64
    })
}

/// Hook of `ucp_put_nbi`.
#[unsafe(no_mangle)]
unsafe extern "C" fn ucp_put_nbi(
    ep: Ptr,
    buffer: *const c_void,
    length: usize,
    remote_addr: u64,
    rkey: Ptr,
) -> Status {
    let Some(real) = PUT_NBI.get() else {
        return UCS_ERR_UNSUPPORTED;
    };
    let call = || {
        // SAFETY: the program's arguments, unchanged.
        unsafe { real(ep, buffer, length, remote_addr, rkey) }
    };
    op(ep, Op::UcxPut, Detail::at(remote_addr, 0), call, |_| {
        length as u64
    })
}

/// Hook of `ucp_get_nb`.
#[unsafe(no_mangle)]
unsafe extern "C" fn ucp_get_nb(
    ep: Ptr,
    buffer: *mut c_void,
    length: usize,
    remote_addr: u64,
    rkey: Ptr,
    cb: Ptr,
) -> Ptr {
    let Some(real) = GET_NB.get() else {
        return unsupported_ptr();
    };
    let call = || {
        // SAFETY: the program's arguments, unchanged.
        unsafe { real(ep, buffer, length, remote_addr, rkey, cb) }
    };
    op(ep, Op::UcxGet, Detail::at(remote_addr, 0), call, |_| {
        length as u64
    })
}

/// Hook of `ucp_get_nbi`.
#[unsafe(no_mangle)]
unsafe extern "C" fn ucp_get_nbi(
    ep: Ptr,
    buffer: *mut c_void,
    length: usize,
    remote_addr: u64,
    rkey: Ptr,
) -> Status {
    let Some(real) = GET_NBI.get() else {
        return UCS_ERR_UNSUPPORTED;
    };
    let call = || {
        // SAFETY: the program's arguments, unchanged.
        unsafe { real(ep, buffer, length, remote_addr, rkey) }
    };
    op(ep, Op::UcxGet, Detail::at(remote_addr, 0), call, |_| {
        length as u64
    })
}

/// Hook of `ucp_am_send_nb`.
#[unsafe(no_mangle)]
unsafe extern "C" fn ucp_am_send_nb(
    ep: Ptr,
    id: u16,
    buffer: *const c_void,
    count: usize,
    datatype: u64,
    cb: Ptr,
    fl: c_uint,
) -> Ptr {
    let Some(real) = AM_SEND_NB.get() else {
        return unsupported_ptr();
    };
    op(
        ep,
        Op::UcxAmSend,
        Detail::at(0, id as u32),
        // SAFETY: the program's arguments, unchanged.
        || unsafe { real(ep, id, buffer, count, datatype, cb, fl) },
        // SAFETY: the program's valid buffer of `count` elements of `datatype`.
        |_| unsafe { dt_bytes(datatype, buffer, count) },
    )
}

/// Hook of `ucp_stream_send_nb`.
#[unsafe(no_mangle)]
unsafe extern "C" fn ucp_stream_send_nb(
    ep: Ptr,
    buffer: *const c_void,
    count: usize,
    datatype: u64,
    cb: Ptr,
    fl: c_uint,
) -> Ptr {
    let Some(real) = STREAM_SEND_NB.get() else {
        return unsupported_ptr();
    };
    op(
        ep,
        Op::UcxStreamSend,
        Detail::NONE,
        // SAFETY: the program's arguments, unchanged.
        || unsafe { real(ep, buffer, count, datatype, cb, fl) },
        // SAFETY: the program's valid buffer of `count` elements of `datatype`.
        |_| unsafe { dt_bytes(datatype, buffer, count) },
    )
}

/// Hook of `ucp_atomic_post`.
#[unsafe(no_mangle)]
unsafe extern "C" fn ucp_atomic_post(
    ep: Ptr,
    opcode: c_int,
    value: u64,
    op_size: usize,
    remote_addr: u64,
    rkey: Ptr,
) -> Status {
    let Some(real) = ATOMIC_POST.get() else {
        return UCS_ERR_UNSUPPORTED;
    };
    let call = || {
        // SAFETY: the program's arguments, unchanged.
        unsafe { real(ep, opcode, value, op_size, remote_addr, rkey) }
    };
    let detail = Detail::at(remote_addr, opcode as u32);
    op(ep, Op::UcxAtomic, detail, call, |_| op_size as u64)
}

/// Hook of `ucp_atomic_fetch_nb`.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)] // the C signature
unsafe extern "C" fn ucp_atomic_fetch_nb(
    ep: Ptr,
    opcode: c_int,
    value: u64,
    result: *mut c_void,
    op_size: usize,
    remote_addr: u64,
    rkey: Ptr,
    cb: Ptr,
) -> Ptr {
    let Some(real) = ATOMIC_FETCH_NB.get() else {
        return unsupported_ptr();
    };
    let call = || {
        // SAFETY: the program's arguments, unchanged.
        unsafe { real(ep, opcode, value, result, op_size, remote_addr, rkey, cb) }
    };
    let detail = Detail::at(remote_addr, opcode as u32);
    op(ep, Op::UcxAtomic, detail, call, |_| op_size as u64)
}

/// Hook of `ucp_ep_flush_nb`.
#[unsafe(no_mangle)]
unsafe extern "C" fn ucp_ep_flush_nb(ep: Ptr, fl: c_uint, cb: Ptr) -> Ptr {
    let Some(real) = EP_FLUSH_NB.get() else {
        return unsupported_ptr();
    };
    // SAFETY: the program's arguments, unchanged.
    op(
        ep,
        Op::UcxEpFlush,
        Detail::NONE,
        || unsafe { real(ep, fl, cb) },
        |_| 0,
    )
}

/// Hook of `ucp_worker_flush_nb`.
#[unsafe(no_mangle)]
unsafe extern "C" fn ucp_worker_flush_nb(worker: Ptr, fl: c_uint, cb: Ptr) -> Ptr {
    let Some(real) = WORKER_FLUSH_NB.get() else {
        return unsupported_ptr();
    };
    let call = || {
        // SAFETY: the program's arguments, unchanged.
        unsafe { real(worker, fl, cb) }
    };
    op(worker, Op::UcxWorkerFlush, Detail::NONE, call, |_| 0)
}

// ---------------------------------------------------------------------------------------------
// blocking calls and progress: the real call runs outside the guard

/// Hook of the blocking `ucp_ep_flush` (counted as an ep flush, with the time it blocked).
#[unsafe(no_mangle)]
unsafe extern "C" fn ucp_ep_flush(ep: Ptr) -> Status {
    let Some(real) = EP_FLUSH.get() else {
        return UCS_ERR_UNSUPPORTED;
    };
    // SAFETY: the program's argument, unchanged.
    blocking_flush(ep, Op::UcxEpFlush, || unsafe { real(ep) })
}

/// Hook of the blocking `ucp_worker_flush` (counted as a worker flush); see `ucp_ep_flush`.
#[unsafe(no_mangle)]
unsafe extern "C" fn ucp_worker_flush(worker: Ptr) -> Status {
    let Some(real) = WORKER_FLUSH.get() else {
        return UCS_ERR_UNSUPPORTED;
    };
    // SAFETY: the program's argument, unchanged.
    blocking_flush(worker, Op::UcxWorkerFlush, || unsafe { real(worker) })
}

/// A blocking flush: `addr` of a blocking op is the time it blocked (`Op::blocks`).
#[inline(always)]
fn blocking_flush(handle: Ptr, which: Op, call_real: impl FnOnce() -> Status) -> Status {
    let t0 = crate::runtime::clock::blocking_start();
    after_progress(handle, which, call_real, |r| {
        let blocked = crate::runtime::clock::blocked_since(t0);
        (0, r.outcome(), Some(Detail::at(blocked, 0)))
    })
}

/// Hook of `ucp_worker_progress`: traced in full mode only. Otherwise it is a tail call: the
/// program polls this in a loop (20+ calls per message in a ping-pong), so the untraced path
/// must not pay for the traced one's frame.
#[unsafe(no_mangle)]
unsafe extern "C" fn ucp_worker_progress(worker: Ptr) -> c_uint {
    let Some(real) = WORKER_PROGRESS.get() else {
        return 0;
    };
    if crate::runtime::config::full() {
        // SAFETY: the program's argument, unchanged.
        return unsafe { progress_traced(real, worker) };
    }
    // SAFETY: the program's argument, unchanged.
    unsafe { real(worker) }
}

/// Full mode's `ucp_worker_progress`: one operation per call, an event for calls that made
/// progress. Out of line: with the traced body inlined, the compiler made one call of `real`
/// for both paths and gave the untraced one the traced one's frame (7 pushes, 22 instructions
/// per poll instead of a jump).
///
/// # Safety
/// `real` is libucp's `ucp_worker_progress`; `worker` the program's argument.
#[inline(never)]
unsafe fn progress_traced(real: Progress, worker: Ptr) -> c_uint {
    after_progress(
        worker,
        Op::UcxProgress,
        // SAFETY: the caller's contract.
        || unsafe { real(worker) },
        |r| (r as u64, Outcome::Ok, (r != 0).then_some(Detail::NONE)),
    )
}

pub(super) fn hooks() -> Vec<crate::interpose::dlsym::Hook> {
    hook_table![Layer::Ucx;
        ucp_tag_send_nb => TAG_SEND_NB,
        ucp_tag_send_nbr => TAG_SEND_NBR,
        ucp_tag_send_sync_nb => TAG_SEND_SYNC_NB,
        ucp_put_nb => PUT_NB,
        ucp_put_nbi => PUT_NBI,
        ucp_get_nb => GET_NB,
        ucp_get_nbi => GET_NBI,
        ucp_am_send_nb => AM_SEND_NB,
        ucp_stream_send_nb => STREAM_SEND_NB,
        ucp_atomic_post => ATOMIC_POST,
        ucp_atomic_fetch_nb => ATOMIC_FETCH_NB,
        ucp_ep_flush_nb => EP_FLUSH_NB,
        ucp_worker_flush_nb => WORKER_FLUSH_NB,
        ucp_ep_flush => EP_FLUSH,
        ucp_worker_flush => WORKER_FLUSH,
        ucp_worker_progress => WORKER_PROGRESS,
    ]
}
