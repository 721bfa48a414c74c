//! The UCX `_nbx` data path, receives apart ([`super::recv`]): every operation is a trampoline
//! into [`super::op`] (the program's arguments passed to the real function unchanged; `buffer`
//! and `param` read as the UCP API defines them).

use core::ffi::{c_int, c_uint, c_void};

use sigmatop::event::{Layer, Op};

use super::abi::{Ptr, RequestParam, nbx_bytes, unsupported_ptr};
use super::{SONAMES, op};
use crate::interpose::dlsym::hook_table;
use crate::runtime::dl::real_fns;
use crate::runtime::thread::Detail;

type RmaNbx = unsafe extern "C" fn(Ptr, *const c_void, usize, u64, Ptr, *const RequestParam) -> Ptr;
type TagSendNbx = unsafe extern "C" fn(Ptr, *const c_void, usize, u64, *const RequestParam) -> Ptr;
type AmSendNbx = unsafe extern "C" fn(
    Ptr,
    c_uint,
    *const c_void,
    usize,
    *const c_void,
    usize,
    *const RequestParam,
) -> Ptr;
type StreamSendNbx = unsafe extern "C" fn(Ptr, *const c_void, usize, *const RequestParam) -> Ptr;
type AtomicOpNbx =
    unsafe extern "C" fn(Ptr, c_int, *const c_void, usize, u64, Ptr, *const RequestParam) -> Ptr;
type FlushNbx = unsafe extern "C" fn(Ptr, *const RequestParam) -> Ptr;

real_fns! { SONAMES;
    PUT_NBX: RmaNbx = c"ucp_put_nbx";
    GET_NBX: RmaNbx = c"ucp_get_nbx";
    TAG_SEND_NBX: TagSendNbx = c"ucp_tag_send_nbx";
    TAG_SEND_SYNC_NBX: TagSendNbx = c"ucp_tag_send_sync_nbx";
    AM_SEND_NBX: AmSendNbx = c"ucp_am_send_nbx";
    STREAM_SEND_NBX: StreamSendNbx = c"ucp_stream_send_nbx";
    ATOMIC_OP_NBX: AtomicOpNbx = c"ucp_atomic_op_nbx";
    EP_FLUSH_NBX: FlushNbx = c"ucp_ep_flush_nbx";
    WORKER_FLUSH_NBX: FlushNbx = c"ucp_worker_flush_nbx";
}

/// Hook of `ucp_put_nbx`.
#[unsafe(no_mangle)]
unsafe extern "C" fn ucp_put_nbx(
    ep: Ptr,
    buffer: *const c_void,
    count: usize,
    remote_addr: u64,
    rkey: Ptr,
    param: *const RequestParam,
) -> Ptr {
    let Some(real) = PUT_NBX.get() else {
        return unsupported_ptr();
    };
    op(
        ep,
        Op::UcxPut,
        Detail::at(remote_addr, 0),
        // SAFETY: the program's arguments, unchanged.
        || unsafe { real(ep, buffer, count, remote_addr, rkey, param) },
        // SAFETY: the program's valid buffer and param (UCP contract).
        |_| unsafe { nbx_bytes(param, buffer, count) },
    )
}

/// Hook of `ucp_get_nbx`.
#[unsafe(no_mangle)]
unsafe extern "C" fn ucp_get_nbx(
    ep: Ptr,
    buffer: *mut c_void,
    count: usize,
    remote_addr: u64,
    rkey: Ptr,
    param: *const RequestParam,
) -> Ptr {
    let Some(real) = GET_NBX.get() else {
        return unsupported_ptr();
    };
    op(
        ep,
        Op::UcxGet,
        Detail::at(remote_addr, 0),
        // SAFETY: the program's arguments, unchanged.
        || unsafe { real(ep, buffer, count, remote_addr, rkey, param) },
        // SAFETY: the program's valid buffer and param.
        |_| unsafe { nbx_bytes(param, buffer, count) },
    )
}

/// Hook of `ucp_tag_send_nbx`.
#[unsafe(no_mangle)]
unsafe extern "C" fn ucp_tag_send_nbx(
    ep: Ptr,
    buffer: *const c_void,
    count: usize,
    tag: u64,
    param: *const RequestParam,
) -> Ptr {
    // SAFETY: the hook's own contract, forwarded.
    unsafe {
        tag_send_nbx(
            TAG_SEND_NBX.get(),
            Op::UcxTagSend,
            ep,
            buffer,
            count,
            tag,
            param,
        )
    }
}

/// Hook of `ucp_tag_send_sync_nbx`.
#[unsafe(no_mangle)]
unsafe extern "C" fn ucp_tag_send_sync_nbx(
    ep: Ptr,
    buffer: *const c_void,
    count: usize,
    tag: u64,
    param: *const RequestParam,
) -> Ptr {
    let real = TAG_SEND_SYNC_NBX.get();
    // SAFETY: the hook's own contract, forwarded.
    unsafe { tag_send_nbx(real, Op::UcxTagSendSync, ep, buffer, count, tag, param) }
}

/// The two tag sends of the nbx API (same signature, different op).
///
/// # Safety
/// The contract of `ucp_tag_send_nbx`.
#[inline(always)]
unsafe fn tag_send_nbx(
    real: Option<TagSendNbx>,
    which: Op,
    ep: Ptr,
    buffer: *const c_void,
    count: usize,
    tag: u64,
    param: *const RequestParam,
) -> Ptr {
    let Some(real) = real else {
        return unsupported_ptr();
    };
    op(
        ep,
        which,
        Detail::at(tag, 0),
        // SAFETY: the program's arguments, unchanged.
        || unsafe { real(ep, buffer, count, tag, param) },
        // SAFETY: the program's valid buffer and param.
        |_| unsafe { nbx_bytes(param, buffer, count) },
    )
}

/// Hook of `ucp_am_send_nbx` (bytes = payload, AM id in the event's aux).
#[unsafe(no_mangle)]
unsafe extern "C" fn ucp_am_send_nbx(
    ep: Ptr,
    id: c_uint,
    header: *const c_void,
    header_length: usize,
    buffer: *const c_void,
    count: usize,
    param: *const RequestParam,
) -> Ptr {
    let Some(real) = AM_SEND_NBX.get() else {
        return unsupported_ptr();
    };
    op(
        ep,
        Op::UcxAmSend,
        Detail::at(0, id),
        // SAFETY: the program's arguments, unchanged.
        || unsafe { real(ep, id, header, header_length, buffer, count, param) },
        // SAFETY: the program's valid buffer and param.
        |_| unsafe { nbx_bytes(param, buffer, count) },
    )
}

/// Hook of `ucp_stream_send_nbx`.
#[unsafe(no_mangle)]
unsafe extern "C" fn ucp_stream_send_nbx(
    ep: Ptr,
    buffer: *const c_void,
    count: usize,
    param: *const RequestParam,
) -> Ptr {
    let Some(real) = STREAM_SEND_NBX.get() else {
        return unsupported_ptr();
    };
    op(
        ep,
        Op::UcxStreamSend,
        Detail::NONE,
        // SAFETY: the program's arguments, unchanged.
        || unsafe { real(ep, buffer, count, param) },
        // SAFETY: the program's valid buffer and param.
        |_| unsafe { nbx_bytes(param, buffer, count) },
    )
}

/// Hook of `ucp_atomic_op_nbx` (bytes = operand size, opcode in aux).
#[unsafe(no_mangle)]
unsafe extern "C" fn ucp_atomic_op_nbx(
    ep: Ptr,
    opcode: c_int,
    buffer: *const c_void,
    count: usize,
    remote_addr: u64,
    rkey: Ptr,
    param: *const RequestParam,
) -> Ptr {
    let Some(real) = ATOMIC_OP_NBX.get() else {
        return unsupported_ptr();
    };
    op(
        ep,
        Op::UcxAtomic,
        Detail::at(remote_addr, opcode as u32),
        // SAFETY: the program's arguments, unchanged.
        || unsafe { real(ep, opcode, buffer, count, remote_addr, rkey, param) },
        // SAFETY: the program's valid buffer and param (atomics take contig(4) / contig(8)).
        |_| unsafe { nbx_bytes(param, buffer, count) },
    )
}

/// Hook of `ucp_ep_flush_nbx`.
#[unsafe(no_mangle)]
unsafe extern "C" fn ucp_ep_flush_nbx(ep: Ptr, param: *const RequestParam) -> Ptr {
    let Some(real) = EP_FLUSH_NBX.get() else {
        return unsupported_ptr();
    };
    // SAFETY: the program's arguments, unchanged.
    op(
        ep,
        Op::UcxEpFlush,
        Detail::NONE,
        || unsafe { real(ep, param) },
        |_| 0,
    )
}

/// Hook of `ucp_worker_flush_nbx`.
#[unsafe(no_mangle)]
unsafe extern "C" fn ucp_worker_flush_nbx(worker: Ptr, param: *const RequestParam) -> Ptr {
    let Some(real) = WORKER_FLUSH_NBX.get() else {
        return unsupported_ptr();
    };
    let call = || {
        // SAFETY: the program's arguments, unchanged.
        unsafe { real(worker, param) }
    };
    op(worker, Op::UcxWorkerFlush, Detail::NONE, call, |_| 0)
}

pub(super) fn hooks() -> Vec<crate::interpose::dlsym::Hook> {
    hook_table![Layer::Ucx;
        ucp_put_nbx => PUT_NBX,
        ucp_get_nbx => GET_NBX,
        ucp_tag_send_nbx => TAG_SEND_NBX,
        ucp_tag_send_sync_nbx => TAG_SEND_SYNC_NBX,
        ucp_am_send_nbx => AM_SEND_NBX,
        ucp_stream_send_nbx => STREAM_SEND_NBX,
        ucp_atomic_op_nbx => ATOMIC_OP_NBX,
        ucp_ep_flush_nbx => EP_FLUSH_NBX,
        ucp_worker_flush_nbx => WORKER_FLUSH_NBX,
    ]
}
