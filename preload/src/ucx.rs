//! UCX layer: interposes the exported UCP entry points of libucp (UCX 1.13 API).
//!
//! Data path: every `ucp_*_nbx` operation plus the legacy `_nb` / `_nbr` / `_nbi` forms and the
//! blocking flushes is counted once, on the endpoint (`ucp_ep_h`) or worker (`ucp_worker_h`) it
//! names. The legacy forms call the `_nbx` ones through libucp's PLT, i.e. through our hooks; the
//! per-thread depth guard in `trace_enter` makes the inner call pass through untraced, so each
//! application call is counted exactly once.
//!
//! Bytes per call:
//! - contiguous datatypes: count × element size (`param->datatype` when
//!   `UCP_OP_ATTR_FIELD_DATATYPE` is set, else `ucp_dt_make_contig(1)`; the legacy forms pass the
//!   datatype explicitly);
//! - `UCP_DATATYPE_IOV`: the sum of the iov lengths (walking at most `IOV_WALK_MAX` entries);
//! - generic (and strided) datatypes: `count`, the only size the call states;
//! - posted receives (`ucp_tag_recv_*`, `ucp_stream_recv_*` that do not complete at once) count the
//!   posted buffer size, which is what the program asked for; a stream receive that completes at
//!   once counts the `*length` it returned;
//! - `ucp_am_send_*` counts the payload only (not the user header), `ucp_am_recv_data_nbx` its
//!   length; atomics count the operand size.
//! - `ucp_worker_progress` (full mode only) counts one op per call, bytes = its return value (the
//!   number of completions); an event is kept only for calls that made progress, so idle polling
//!   cannot flood the ring and push data events out.
//!
//! Peer identity: UCX 1.13 packs a worker address as `[header u8 | worker uuid u64 | ...]`
//! (src/ucp/wireup/address.c, "Packed address layout"); the uuid is random per worker and is the
//! same in every address of that worker whatever transports follow. Both sides hash those 8 uuid
//! bytes with FNV-1a: `ucp_worker_get_address` / `ucp_worker_query` add it to this process's own
//! addresses, `ucp_ep_create(REMOTE_ADDRESS)` puts it in the endpoint's `Peer::addr_hash`.
//! `ucp_ep_create` gets the peer's blob without its length, so hashing a prefix of fixed size is
//! also the only safe choice (any valid address has at least these 9 bytes).

use core::ffi::{CStr, c_int, c_uint, c_void};

use sigmatop::event::{EndpointKind, Layer, Op, Peer, flags, fnv1a64};

use crate::dl::{Hook, RealFn};
use crate::thread::ThreadState;

type Ptr = *mut c_void;
/// `ucs_status_t` (a C enum).
type Status = c_int;

const UCS_ERR_UNSUPPORTED: Status = -22;
/// `UCS_ERR_LAST`: status pointers at or above `(uintptr_t)UCS_ERR_LAST` are errors.
const UCS_ERR_LAST: isize = -100;

const SONAMES: &[&CStr] = &[c"libucp.so.0", c"libucp.so"];

/// `UCS_STATUS_PTR(UCS_ERR_UNSUPPORTED)`: what a call returns when libucp is missing.
#[inline(always)]
fn unsupported_ptr() -> Ptr {
    UCS_ERR_UNSUPPORTED as isize as Ptr
}

// ucp_request_param_t::op_attr_mask bits.
const OP_ATTR_FIELD_DATATYPE: u32 = 1 << 3;

// ucp_datatype_t classes (ucp.h).
const DT_SHIFT: u32 = 3;
const DT_CLASS_MASK: u64 = (1 << DT_SHIFT) - 1;
const DT_CONTIG: u64 = 0;
const DT_IOV: u64 = 2;
/// `ucp_dt_make_contig(1)`, the default datatype.
const DT_BYTES: u64 = 1 << DT_SHIFT;
/// Longest iov list whose lengths are summed (the rest of a longer list is not counted).
const IOV_WALK_MAX: usize = 1 << 16;

// ucp_ep_params_t::field_mask bits.
const EP_PARAM_FIELD_REMOTE_ADDRESS: u64 = 1 << 0;
const EP_PARAM_FIELD_SOCK_ADDR: u64 = 1 << 4;
const EP_PARAM_FIELD_CONN_REQUEST: u64 = 1 << 6;
// ucp_worker_attr_t::field_mask bit.
const WORKER_ATTR_FIELD_ADDRESS: u64 = 1 << 1;

/// `ucp_request_param_t` (ucp.h, UCX 1.13): 72 bytes.
#[repr(C)]
pub struct RequestParam {
    op_attr_mask: u32,
    flags: u32,
    request: Ptr,
    cb: Ptr,
    datatype: u64,
    user_data: Ptr,
    reply_buffer: Ptr,
    memory_type: c_int,
    recv_info: Ptr,
    memh: Ptr,
}

/// `ucs_sock_addr_t`.
#[repr(C)]
pub struct SockAddr {
    addr: *const libc::sockaddr,
    addrlen: libc::socklen_t,
}

/// `ucp_ep_params_t` (ucp_def.h, UCX 1.13): 104 bytes.
#[repr(C)]
pub struct EpParams {
    field_mask: u64,
    address: *const u8,
    err_mode: c_int,
    err_handler: [Ptr; 2],
    user_data: Ptr,
    flags: c_uint,
    sockaddr: SockAddr,
    conn_request: Ptr,
    name: *const libc::c_char,
    local_sockaddr: SockAddr,
}

/// The leading fields of `ucp_worker_attr_t` (ucp.h, UCX 1.13) up to the address.
#[repr(C)]
pub struct WorkerAttrHead {
    field_mask: u64,
    thread_mode: c_int,
    address_flags: u32,
    address: *const u8,
    address_length: usize,
}

const _: () = assert!(core::mem::size_of::<RequestParam>() == 72);
const _: () = assert!(core::mem::size_of::<EpParams>() == 104);
const _: () = assert!(core::mem::offset_of!(EpParams, sockaddr) == 56);
const _: () = assert!(core::mem::offset_of!(WorkerAttrHead, address_length) == 24);

/// Flags for a call that returns `ucs_status_ptr_t`.
#[inline(always)]
fn ptr_flags(r: Ptr) -> u8 {
    if r.is_null() {
        flags::IMMEDIATE
    } else if r as usize >= UCS_ERR_LAST as usize {
        flags::ERROR
    } else {
        0
    }
}

/// Flags for a call that returns `ucs_status_t`.
#[inline(always)]
fn status_flags(s: Status) -> u8 {
    if s == 0 {
        flags::IMMEDIATE
    } else if s < 0 {
        flags::ERROR
    } else {
        0
    }
}

/// Bytes described by (`buffer`, `count`, `dt`).
///
/// # Safety
/// For an iov datatype `buffer` must point at `count` `ucp_dt_iov_t` (the UCP API contract).
#[inline(always)]
unsafe fn dt_bytes(dt: u64, buffer: *const c_void, count: usize) -> u64 {
    match dt & DT_CLASS_MASK {
        DT_CONTIG => (count as u64).wrapping_mul(dt >> DT_SHIFT),
        DT_IOV => {
            // SAFETY: the caller's contract (see above).
            unsafe { iov_bytes(buffer, count) }
        }
        _ => count as u64,
    }
}

#[cold]
unsafe fn iov_bytes(buffer: *const c_void, count: usize) -> u64 {
    if buffer.is_null() {
        return 0;
    }
    let iov = buffer as *const [usize; 2];
    let mut sum = 0u64;
    for i in 0..count.min(IOV_WALK_MAX) {
        // SAFETY: `buffer` holds `count` ucp_dt_iov_t {void *buffer; size_t length}.
        sum = sum.wrapping_add(unsafe { (*iov.add(i))[1] } as u64);
    }
    sum
}

/// The datatype of an nbx call.
///
/// # Safety
/// `param` is null or points at a valid `ucp_request_param_t`.
#[inline(always)]
unsafe fn param_dt(param: *const RequestParam) -> u64 {
    if param.is_null() {
        return DT_BYTES;
    }
    // SAFETY: valid per the caller.
    let p = unsafe { &*param };
    if p.op_attr_mask & OP_ATTR_FIELD_DATATYPE != 0 {
        p.datatype
    } else {
        DT_BYTES
    }
}

/// Bytes of an nbx call.
///
/// # Safety
/// As `param_dt` and `dt_bytes`.
#[inline(always)]
unsafe fn nbx_bytes(param: *const RequestParam, buffer: *const c_void, count: usize) -> u64 {
    // SAFETY: forwarded contract.
    unsafe { dt_bytes(param_dt(param), buffer, count) }
}

/// Records one traced call and leaves the hook. Never calls into UCX.
#[inline(always)]
fn finish(
    ts: &ThreadState,
    handle: Ptr,
    op: Op,
    fl: u8,
    addr: u64,
    aux: u16,
    bytes: impl FnOnce() -> u64,
) {
    crate::guarded((), || {
        let id = crate::registry::lookup(handle as usize);
        ts.record(id, op, bytes(), addr, fl, aux)
    });
    ts.leave();
}

macro_rules! slots {
    ($($slot:ident = $name:literal;)*) => {
        $( static $slot: RealFn = RealFn::new($name, SONAMES); )*
    };
}

slots! {
    PUT_NBX = c"ucp_put_nbx";
    GET_NBX = c"ucp_get_nbx";
    TAG_SEND_NBX = c"ucp_tag_send_nbx";
    TAG_SEND_SYNC_NBX = c"ucp_tag_send_sync_nbx";
    TAG_RECV_NBX = c"ucp_tag_recv_nbx";
    AM_SEND_NBX = c"ucp_am_send_nbx";
    AM_RECV_DATA_NBX = c"ucp_am_recv_data_nbx";
    STREAM_SEND_NBX = c"ucp_stream_send_nbx";
    STREAM_RECV_NBX = c"ucp_stream_recv_nbx";
    ATOMIC_OP_NBX = c"ucp_atomic_op_nbx";
    EP_FLUSH_NBX = c"ucp_ep_flush_nbx";
    WORKER_FLUSH_NBX = c"ucp_worker_flush_nbx";
    TAG_SEND_NB = c"ucp_tag_send_nb";
    TAG_SEND_NBR = c"ucp_tag_send_nbr";
    TAG_SEND_SYNC_NB = c"ucp_tag_send_sync_nb";
    TAG_RECV_NB = c"ucp_tag_recv_nb";
    TAG_RECV_NBR = c"ucp_tag_recv_nbr";
    PUT_NB = c"ucp_put_nb";
    PUT_NBI = c"ucp_put_nbi";
    GET_NB = c"ucp_get_nb";
    GET_NBI = c"ucp_get_nbi";
    AM_SEND_NB = c"ucp_am_send_nb";
    STREAM_SEND_NB = c"ucp_stream_send_nb";
    STREAM_RECV_NB = c"ucp_stream_recv_nb";
    ATOMIC_POST = c"ucp_atomic_post";
    ATOMIC_FETCH_NB = c"ucp_atomic_fetch_nb";
    EP_FLUSH_NB = c"ucp_ep_flush_nb";
    WORKER_FLUSH_NB = c"ucp_worker_flush_nb";
    EP_FLUSH = c"ucp_ep_flush";
    WORKER_FLUSH = c"ucp_worker_flush";
    WORKER_PROGRESS = c"ucp_worker_progress";
    INIT_VERSION = c"ucp_init_version";
    WORKER_CREATE = c"ucp_worker_create";
    WORKER_GET_ADDRESS = c"ucp_worker_get_address";
    WORKER_QUERY = c"ucp_worker_query";
    EP_CREATE = c"ucp_ep_create";
    EP_CLOSE_NB = c"ucp_ep_close_nb";
    EP_CLOSE_NBX = c"ucp_ep_close_nbx";
    EP_DESTROY = c"ucp_ep_destroy";
}

// ---------------------------------------------------------------------------------------------
// nbx data path

type RmaNbx = unsafe extern "C" fn(Ptr, *const c_void, usize, u64, Ptr, *const RequestParam) -> Ptr;

/// Hook of `ucp_put_nbx`.
///
/// # Safety
/// C ABI entry point with the contract of the real function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ucp_put_nbx(
    ep: Ptr,
    buffer: *const c_void,
    count: usize,
    remote_addr: u64,
    rkey: Ptr,
    param: *const RequestParam,
) -> Ptr {
    let real = real!(PUT_NBX, RmaNbx, unsupported_ptr());
    // SAFETY (all real calls below): the program's own arguments, passed through unchanged.
    let Some(ts) = crate::trace_enter(Layer::Ucx) else {
        return unsafe { real(ep, buffer, count, remote_addr, rkey, param) };
    };
    let r = unsafe { real(ep, buffer, count, remote_addr, rkey, param) };
    // SAFETY: param/buffer are the program's valid arguments (UCP contract).
    finish(
        ts,
        ep,
        Op::UcxPut,
        ptr_flags(r),
        remote_addr,
        0,
        || unsafe { nbx_bytes(param, buffer, count) },
    );
    r
}

/// Hook of `ucp_get_nbx`.
///
/// # Safety
/// C ABI entry point with the contract of the real function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ucp_get_nbx(
    ep: Ptr,
    buffer: *mut c_void,
    count: usize,
    remote_addr: u64,
    rkey: Ptr,
    param: *const RequestParam,
) -> Ptr {
    let real = real!(GET_NBX, RmaNbx, unsupported_ptr());
    // SAFETY (real calls): the program's arguments, unchanged.
    let Some(ts) = crate::trace_enter(Layer::Ucx) else {
        return unsafe { real(ep, buffer, count, remote_addr, rkey, param) };
    };
    let r = unsafe { real(ep, buffer, count, remote_addr, rkey, param) };
    // SAFETY: the program's valid arguments.
    finish(
        ts,
        ep,
        Op::UcxGet,
        ptr_flags(r),
        remote_addr,
        0,
        || unsafe { nbx_bytes(param, buffer, count) },
    );
    r
}

type TagSendNbx = unsafe extern "C" fn(Ptr, *const c_void, usize, u64, *const RequestParam) -> Ptr;

#[inline(always)]
unsafe fn tag_send_nbx_common(
    slot: &'static RealFn,
    op: Op,
    ep: Ptr,
    buffer: *const c_void,
    count: usize,
    tag: u64,
    param: *const RequestParam,
) -> Ptr {
    let p = slot.get();
    if p.is_null() {
        return unsupported_ptr();
    }
    // SAFETY: `slot` names ucp_tag_send_nbx or ucp_tag_send_sync_nbx, both of type TagSendNbx.
    let real = unsafe { core::mem::transmute::<*mut c_void, TagSendNbx>(p) };
    // SAFETY (real calls): the program's arguments, unchanged.
    let Some(ts) = crate::trace_enter(Layer::Ucx) else {
        return unsafe { real(ep, buffer, count, tag, param) };
    };
    let r = unsafe { real(ep, buffer, count, tag, param) };
    // SAFETY: the program's valid arguments.
    finish(ts, ep, op, ptr_flags(r), tag, 0, || unsafe {
        nbx_bytes(param, buffer, count)
    });
    r
}

/// Hook of `ucp_tag_send_nbx`.
///
/// # Safety
/// C ABI entry point with the contract of the real function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ucp_tag_send_nbx(
    ep: Ptr,
    buffer: *const c_void,
    count: usize,
    tag: u64,
    param: *const RequestParam,
) -> Ptr {
    // SAFETY: forwarded contract.
    unsafe { tag_send_nbx_common(&TAG_SEND_NBX, Op::UcxTagSend, ep, buffer, count, tag, param) }
}

/// Hook of `ucp_tag_send_sync_nbx`.
///
/// # Safety
/// C ABI entry point with the contract of the real function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ucp_tag_send_sync_nbx(
    ep: Ptr,
    buffer: *const c_void,
    count: usize,
    tag: u64,
    param: *const RequestParam,
) -> Ptr {
    // SAFETY: forwarded contract.
    unsafe {
        tag_send_nbx_common(
            &TAG_SEND_SYNC_NBX,
            Op::UcxTagSendSync,
            ep,
            buffer,
            count,
            tag,
            param,
        )
    }
}

type TagRecvNbx =
    unsafe extern "C" fn(Ptr, *mut c_void, usize, u64, u64, *const RequestParam) -> Ptr;

/// Hook of `ucp_tag_recv_nbx` (counted on the worker; bytes = the posted buffer size).
///
/// # Safety
/// C ABI entry point with the contract of the real function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ucp_tag_recv_nbx(
    worker: Ptr,
    buffer: *mut c_void,
    count: usize,
    tag: u64,
    tag_mask: u64,
    param: *const RequestParam,
) -> Ptr {
    let real = real!(TAG_RECV_NBX, TagRecvNbx, unsupported_ptr());
    // SAFETY (real calls): the program's arguments, unchanged.
    let Some(ts) = crate::trace_enter(Layer::Ucx) else {
        return unsafe { real(worker, buffer, count, tag, tag_mask, param) };
    };
    let r = unsafe { real(worker, buffer, count, tag, tag_mask, param) };
    // SAFETY: the program's valid arguments.
    finish(
        ts,
        worker,
        Op::UcxTagRecv,
        ptr_flags(r),
        tag,
        0,
        || unsafe { nbx_bytes(param, buffer, count) },
    );
    r
}

type AmSendNbx = unsafe extern "C" fn(
    Ptr,
    c_uint,
    *const c_void,
    usize,
    *const c_void,
    usize,
    *const RequestParam,
) -> Ptr;

/// Hook of `ucp_am_send_nbx` (bytes = payload, AM id in the event's aux).
///
/// # Safety
/// C ABI entry point with the contract of the real function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ucp_am_send_nbx(
    ep: Ptr,
    id: c_uint,
    header: *const c_void,
    header_length: usize,
    buffer: *const c_void,
    count: usize,
    param: *const RequestParam,
) -> Ptr {
    let real = real!(AM_SEND_NBX, AmSendNbx, unsupported_ptr());
    // SAFETY (real calls): the program's arguments, unchanged.
    let Some(ts) = crate::trace_enter(Layer::Ucx) else {
        return unsafe { real(ep, id, header, header_length, buffer, count, param) };
    };
    let r = unsafe { real(ep, id, header, header_length, buffer, count, param) };
    // SAFETY: the program's valid arguments.
    finish(
        ts,
        ep,
        Op::UcxAmSend,
        ptr_flags(r),
        0,
        id as u16,
        || unsafe { nbx_bytes(param, buffer, count) },
    );
    r
}

type AmRecvDataNbx =
    unsafe extern "C" fn(Ptr, *mut c_void, *mut c_void, usize, *const RequestParam) -> Ptr;

/// Hook of `ucp_am_recv_data_nbx` (counted on the worker).
///
/// # Safety
/// C ABI entry point with the contract of the real function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ucp_am_recv_data_nbx(
    worker: Ptr,
    data_desc: *mut c_void,
    buffer: *mut c_void,
    count: usize,
    param: *const RequestParam,
) -> Ptr {
    let real = real!(AM_RECV_DATA_NBX, AmRecvDataNbx, unsupported_ptr());
    // SAFETY (real calls): the program's arguments, unchanged.
    let Some(ts) = crate::trace_enter(Layer::Ucx) else {
        return unsafe { real(worker, data_desc, buffer, count, param) };
    };
    let r = unsafe { real(worker, data_desc, buffer, count, param) };
    // SAFETY: the program's valid arguments.
    finish(
        ts,
        worker,
        Op::UcxAmRecvData,
        ptr_flags(r),
        0,
        0,
        || unsafe { nbx_bytes(param, buffer, count) },
    );
    r
}

type StreamSendNbx = unsafe extern "C" fn(Ptr, *const c_void, usize, *const RequestParam) -> Ptr;

/// Hook of `ucp_stream_send_nbx`.
///
/// # Safety
/// C ABI entry point with the contract of the real function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ucp_stream_send_nbx(
    ep: Ptr,
    buffer: *const c_void,
    count: usize,
    param: *const RequestParam,
) -> Ptr {
    let real = real!(STREAM_SEND_NBX, StreamSendNbx, unsupported_ptr());
    // SAFETY (real calls): the program's arguments, unchanged.
    let Some(ts) = crate::trace_enter(Layer::Ucx) else {
        return unsafe { real(ep, buffer, count, param) };
    };
    let r = unsafe { real(ep, buffer, count, param) };
    // SAFETY: the program's valid arguments.
    finish(ts, ep, Op::UcxStreamSend, ptr_flags(r), 0, 0, || unsafe {
        nbx_bytes(param, buffer, count)
    });
    r
}

type StreamRecvNbx =
    unsafe extern "C" fn(Ptr, *mut c_void, usize, *mut usize, *const RequestParam) -> Ptr;

/// Hook of `ucp_stream_recv_nbx`: bytes = `*length` when it completes at once, else the posted
/// size (element count × element size).
///
/// # Safety
/// C ABI entry point with the contract of the real function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ucp_stream_recv_nbx(
    ep: Ptr,
    buffer: *mut c_void,
    count: usize,
    length: *mut usize,
    param: *const RequestParam,
) -> Ptr {
    let real = real!(STREAM_RECV_NBX, StreamRecvNbx, unsupported_ptr());
    // SAFETY (real calls): the program's arguments, unchanged.
    let Some(ts) = crate::trace_enter(Layer::Ucx) else {
        return unsafe { real(ep, buffer, count, length, param) };
    };
    let r = unsafe { real(ep, buffer, count, length, param) };
    // SAFETY: the program's valid arguments; `length` is written by UCX on immediate completion.
    finish(ts, ep, Op::UcxStreamRecv, ptr_flags(r), 0, 0, || unsafe {
        if r.is_null() && !length.is_null() {
            *length as u64
        } else {
            nbx_bytes(param, buffer, count)
        }
    });
    r
}

type AtomicOpNbx =
    unsafe extern "C" fn(Ptr, c_int, *const c_void, usize, u64, Ptr, *const RequestParam) -> Ptr;

/// Hook of `ucp_atomic_op_nbx` (bytes = operand size, opcode in aux).
///
/// # Safety
/// C ABI entry point with the contract of the real function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ucp_atomic_op_nbx(
    ep: Ptr,
    opcode: c_int,
    buffer: *const c_void,
    count: usize,
    remote_addr: u64,
    rkey: Ptr,
    param: *const RequestParam,
) -> Ptr {
    let real = real!(ATOMIC_OP_NBX, AtomicOpNbx, unsupported_ptr());
    // SAFETY (real calls): the program's arguments, unchanged.
    let Some(ts) = crate::trace_enter(Layer::Ucx) else {
        return unsafe { real(ep, opcode, buffer, count, remote_addr, rkey, param) };
    };
    let r = unsafe { real(ep, opcode, buffer, count, remote_addr, rkey, param) };
    // SAFETY: the program's valid arguments (atomics take contig(4) / contig(8) only).
    finish(
        ts,
        ep,
        Op::UcxAtomic,
        ptr_flags(r),
        remote_addr,
        opcode as u16,
        || unsafe { nbx_bytes(param, buffer, count) },
    );
    r
}

type FlushNbx = unsafe extern "C" fn(Ptr, *const RequestParam) -> Ptr;

/// Hook of `ucp_ep_flush_nbx`.
///
/// # Safety
/// C ABI entry point with the contract of the real function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ucp_ep_flush_nbx(ep: Ptr, param: *const RequestParam) -> Ptr {
    let real = real!(EP_FLUSH_NBX, FlushNbx, unsupported_ptr());
    // SAFETY (real calls): the program's arguments, unchanged.
    let Some(ts) = crate::trace_enter(Layer::Ucx) else {
        return unsafe { real(ep, param) };
    };
    let r = unsafe { real(ep, param) };
    finish(ts, ep, Op::UcxEpFlush, ptr_flags(r), 0, 0, || 0);
    r
}

/// Hook of `ucp_worker_flush_nbx`.
///
/// # Safety
/// C ABI entry point with the contract of the real function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ucp_worker_flush_nbx(worker: Ptr, param: *const RequestParam) -> Ptr {
    let real = real!(WORKER_FLUSH_NBX, FlushNbx, unsupported_ptr());
    // SAFETY (real calls): the program's arguments, unchanged.
    let Some(ts) = crate::trace_enter(Layer::Ucx) else {
        return unsafe { real(worker, param) };
    };
    let r = unsafe { real(worker, param) };
    finish(ts, worker, Op::UcxWorkerFlush, ptr_flags(r), 0, 0, || 0);
    r
}

// ---------------------------------------------------------------------------------------------
// legacy data path (each reaches the nbx hook above through libucp's PLT; the depth guard makes
// that inner call pass through)

type TagSendNb = unsafe extern "C" fn(Ptr, *const c_void, usize, u64, u64, Ptr) -> Ptr;
type TagSendNbr = unsafe extern "C" fn(Ptr, *const c_void, usize, u64, u64, Ptr) -> Status;

#[inline(always)]
#[allow(clippy::too_many_arguments)] // the C signature's six arguments plus the slot and op
unsafe fn tag_send_nb_common(
    slot: &'static RealFn,
    op: Op,
    ep: Ptr,
    buffer: *const c_void,
    count: usize,
    dt: u64,
    tag: u64,
    cb: Ptr,
) -> Ptr {
    let p = slot.get();
    if p.is_null() {
        return unsupported_ptr();
    }
    // SAFETY: `slot` names ucp_tag_send_nb or ucp_tag_send_sync_nb, both of type TagSendNb.
    let real = unsafe { core::mem::transmute::<*mut c_void, TagSendNb>(p) };
    // SAFETY (real calls): the program's arguments, unchanged.
    let Some(ts) = crate::trace_enter(Layer::Ucx) else {
        return unsafe { real(ep, buffer, count, dt, tag, cb) };
    };
    let r = unsafe { real(ep, buffer, count, dt, tag, cb) };
    // SAFETY: the program's valid arguments.
    finish(ts, ep, op, ptr_flags(r), tag, 0, || unsafe {
        dt_bytes(dt, buffer, count)
    });
    r
}

/// Hook of `ucp_tag_send_nb`.
///
/// # Safety
/// C ABI entry point with the contract of the real function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ucp_tag_send_nb(
    ep: Ptr,
    buffer: *const c_void,
    count: usize,
    datatype: u64,
    tag: u64,
    cb: Ptr,
) -> Ptr {
    // SAFETY: forwarded contract.
    unsafe {
        tag_send_nb_common(
            &TAG_SEND_NB,
            Op::UcxTagSend,
            ep,
            buffer,
            count,
            datatype,
            tag,
            cb,
        )
    }
}

/// Hook of `ucp_tag_send_sync_nb`.
///
/// # Safety
/// C ABI entry point with the contract of the real function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ucp_tag_send_sync_nb(
    ep: Ptr,
    buffer: *const c_void,
    count: usize,
    datatype: u64,
    tag: u64,
    cb: Ptr,
) -> Ptr {
    // SAFETY: forwarded contract.
    unsafe {
        tag_send_nb_common(
            &TAG_SEND_SYNC_NB,
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

/// Hook of `ucp_tag_send_nbr`.
///
/// # Safety
/// C ABI entry point with the contract of the real function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ucp_tag_send_nbr(
    ep: Ptr,
    buffer: *const c_void,
    count: usize,
    datatype: u64,
    tag: u64,
    req: Ptr,
) -> Status {
    let real = real!(TAG_SEND_NBR, TagSendNbr, UCS_ERR_UNSUPPORTED);
    // SAFETY (real calls): the program's arguments, unchanged.
    let Some(ts) = crate::trace_enter(Layer::Ucx) else {
        return unsafe { real(ep, buffer, count, datatype, tag, req) };
    };
    let r = unsafe { real(ep, buffer, count, datatype, tag, req) };
    // SAFETY: the program's valid arguments.
    finish(ts, ep, Op::UcxTagSend, status_flags(r), tag, 0, || unsafe {
        dt_bytes(datatype, buffer, count)
    });
    r
}

type TagRecvNb = unsafe extern "C" fn(Ptr, *mut c_void, usize, u64, u64, u64, Ptr) -> Ptr;
type TagRecvNbr = unsafe extern "C" fn(Ptr, *mut c_void, usize, u64, u64, u64, Ptr) -> Status;

/// Hook of `ucp_tag_recv_nb`.
///
/// # Safety
/// C ABI entry point with the contract of the real function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ucp_tag_recv_nb(
    worker: Ptr,
    buffer: *mut c_void,
    count: usize,
    datatype: u64,
    tag: u64,
    tag_mask: u64,
    cb: Ptr,
) -> Ptr {
    let real = real!(TAG_RECV_NB, TagRecvNb, unsupported_ptr());
    // SAFETY (real calls): the program's arguments, unchanged.
    let Some(ts) = crate::trace_enter(Layer::Ucx) else {
        return unsafe { real(worker, buffer, count, datatype, tag, tag_mask, cb) };
    };
    let r = unsafe { real(worker, buffer, count, datatype, tag, tag_mask, cb) };
    // SAFETY: the program's valid arguments.
    finish(
        ts,
        worker,
        Op::UcxTagRecv,
        ptr_flags(r),
        tag,
        0,
        || unsafe { dt_bytes(datatype, buffer, count) },
    );
    r
}

/// Hook of `ucp_tag_recv_nbr`.
///
/// # Safety
/// C ABI entry point with the contract of the real function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ucp_tag_recv_nbr(
    worker: Ptr,
    buffer: *mut c_void,
    count: usize,
    datatype: u64,
    tag: u64,
    tag_mask: u64,
    req: Ptr,
) -> Status {
    let real = real!(TAG_RECV_NBR, TagRecvNbr, UCS_ERR_UNSUPPORTED);
    // SAFETY (real calls): the program's arguments, unchanged.
    let Some(ts) = crate::trace_enter(Layer::Ucx) else {
        return unsafe { real(worker, buffer, count, datatype, tag, tag_mask, req) };
    };
    let r = unsafe { real(worker, buffer, count, datatype, tag, tag_mask, req) };
    // SAFETY: the program's valid arguments.
    finish(
        ts,
        worker,
        Op::UcxTagRecv,
        status_flags(r),
        tag,
        0,
        || unsafe { dt_bytes(datatype, buffer, count) },
    );
    r
}

type RmaNb = unsafe extern "C" fn(Ptr, *const c_void, usize, u64, Ptr, Ptr) -> Ptr;
type RmaNbi = unsafe extern "C" fn(Ptr, *const c_void, usize, u64, Ptr) -> Status;

/// Hook of `ucp_put_nb`.
///
/// # Safety
/// C ABI entry point with the contract of the real function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ucp_put_nb(
    ep: Ptr,
    buffer: *const c_void,
    length: usize,
    remote_addr: u64,
    rkey: Ptr,
    cb: Ptr,
) -> Ptr {
    let real = real!(PUT_NB, RmaNb, unsupported_ptr());
    // SAFETY (real calls): the program's arguments, unchanged.
    let Some(ts) = crate::trace_enter(Layer::Ucx) else {
        return unsafe { real(ep, buffer, length, remote_addr, rkey, cb) };
    };
    let r = unsafe { real(ep, buffer, length, remote_addr, rkey, cb) };
    finish(ts, ep, Op::UcxPut, ptr_flags(r), remote_addr, 0, || {
        length as u64
    });
    r
}

/// Hook of `ucp_put_nbi`.
///
/// # Safety
/// C ABI entry point with the contract of the real function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ucp_put_nbi(
    ep: Ptr,
    buffer: *const c_void,
    length: usize,
    remote_addr: u64,
    rkey: Ptr,
) -> Status {
    let real = real!(PUT_NBI, RmaNbi, UCS_ERR_UNSUPPORTED);
    // SAFETY (real calls): the program's arguments, unchanged.
    let Some(ts) = crate::trace_enter(Layer::Ucx) else {
        return unsafe { real(ep, buffer, length, remote_addr, rkey) };
    };
    let r = unsafe { real(ep, buffer, length, remote_addr, rkey) };
    finish(ts, ep, Op::UcxPut, status_flags(r), remote_addr, 0, || {
        length as u64
    });
    r
}

/// Hook of `ucp_get_nb`.
///
/// # Safety
/// C ABI entry point with the contract of the real function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ucp_get_nb(
    ep: Ptr,
    buffer: *mut c_void,
    length: usize,
    remote_addr: u64,
    rkey: Ptr,
    cb: Ptr,
) -> Ptr {
    let real = real!(GET_NB, RmaNb, unsupported_ptr());
    // SAFETY (real calls): the program's arguments, unchanged.
    let Some(ts) = crate::trace_enter(Layer::Ucx) else {
        return unsafe { real(ep, buffer, length, remote_addr, rkey, cb) };
    };
    let r = unsafe { real(ep, buffer, length, remote_addr, rkey, cb) };
    finish(ts, ep, Op::UcxGet, ptr_flags(r), remote_addr, 0, || {
        length as u64
    });
    r
}

/// Hook of `ucp_get_nbi`.
///
/// # Safety
/// C ABI entry point with the contract of the real function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ucp_get_nbi(
    ep: Ptr,
    buffer: *mut c_void,
    length: usize,
    remote_addr: u64,
    rkey: Ptr,
) -> Status {
    let real = real!(GET_NBI, RmaNbi, UCS_ERR_UNSUPPORTED);
    // SAFETY (real calls): the program's arguments, unchanged.
    let Some(ts) = crate::trace_enter(Layer::Ucx) else {
        return unsafe { real(ep, buffer, length, remote_addr, rkey) };
    };
    let r = unsafe { real(ep, buffer, length, remote_addr, rkey) };
    finish(ts, ep, Op::UcxGet, status_flags(r), remote_addr, 0, || {
        length as u64
    });
    r
}

type AmSendNb = unsafe extern "C" fn(Ptr, u16, *const c_void, usize, u64, Ptr, c_uint) -> Ptr;

/// Hook of `ucp_am_send_nb`.
///
/// # Safety
/// C ABI entry point with the contract of the real function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ucp_am_send_nb(
    ep: Ptr,
    id: u16,
    buffer: *const c_void,
    count: usize,
    datatype: u64,
    cb: Ptr,
    fl: c_uint,
) -> Ptr {
    let real = real!(AM_SEND_NB, AmSendNb, unsupported_ptr());
    // SAFETY (real calls): the program's arguments, unchanged.
    let Some(ts) = crate::trace_enter(Layer::Ucx) else {
        return unsafe { real(ep, id, buffer, count, datatype, cb, fl) };
    };
    let r = unsafe { real(ep, id, buffer, count, datatype, cb, fl) };
    // SAFETY: the program's valid arguments.
    finish(ts, ep, Op::UcxAmSend, ptr_flags(r), 0, id, || unsafe {
        dt_bytes(datatype, buffer, count)
    });
    r
}

type StreamSendNb = unsafe extern "C" fn(Ptr, *const c_void, usize, u64, Ptr, c_uint) -> Ptr;

/// Hook of `ucp_stream_send_nb`.
///
/// # Safety
/// C ABI entry point with the contract of the real function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ucp_stream_send_nb(
    ep: Ptr,
    buffer: *const c_void,
    count: usize,
    datatype: u64,
    cb: Ptr,
    fl: c_uint,
) -> Ptr {
    let real = real!(STREAM_SEND_NB, StreamSendNb, unsupported_ptr());
    // SAFETY (real calls): the program's arguments, unchanged.
    let Some(ts) = crate::trace_enter(Layer::Ucx) else {
        return unsafe { real(ep, buffer, count, datatype, cb, fl) };
    };
    let r = unsafe { real(ep, buffer, count, datatype, cb, fl) };
    // SAFETY: the program's valid arguments.
    finish(ts, ep, Op::UcxStreamSend, ptr_flags(r), 0, 0, || unsafe {
        dt_bytes(datatype, buffer, count)
    });
    r
}

type StreamRecvNb =
    unsafe extern "C" fn(Ptr, *mut c_void, usize, u64, Ptr, *mut usize, c_uint) -> Ptr;

/// Hook of `ucp_stream_recv_nb`: bytes as `ucp_stream_recv_nbx`.
///
/// # Safety
/// C ABI entry point with the contract of the real function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ucp_stream_recv_nb(
    ep: Ptr,
    buffer: *mut c_void,
    count: usize,
    datatype: u64,
    cb: Ptr,
    length: *mut usize,
    fl: c_uint,
) -> Ptr {
    let real = real!(STREAM_RECV_NB, StreamRecvNb, unsupported_ptr());
    // SAFETY (real calls): the program's arguments, unchanged.
    let Some(ts) = crate::trace_enter(Layer::Ucx) else {
        return unsafe { real(ep, buffer, count, datatype, cb, length, fl) };
    };
    let r = unsafe { real(ep, buffer, count, datatype, cb, length, fl) };
    // SAFETY: the program's valid arguments; `length` is written on immediate completion.
    finish(ts, ep, Op::UcxStreamRecv, ptr_flags(r), 0, 0, || unsafe {
        if r.is_null() && !length.is_null() {
            *length as u64
        } else {
            dt_bytes(datatype, buffer, count)
        }
    });
    r
}

type AtomicPost = unsafe extern "C" fn(Ptr, c_int, u64, usize, u64, Ptr) -> Status;

/// Hook of `ucp_atomic_post`.
///
/// # Safety
/// C ABI entry point with the contract of the real function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ucp_atomic_post(
    ep: Ptr,
    opcode: c_int,
    value: u64,
    op_size: usize,
    remote_addr: u64,
    rkey: Ptr,
) -> Status {
    let real = real!(ATOMIC_POST, AtomicPost, UCS_ERR_UNSUPPORTED);
    // SAFETY (real calls): the program's arguments, unchanged.
    let Some(ts) = crate::trace_enter(Layer::Ucx) else {
        return unsafe { real(ep, opcode, value, op_size, remote_addr, rkey) };
    };
    let r = unsafe { real(ep, opcode, value, op_size, remote_addr, rkey) };
    finish(
        ts,
        ep,
        Op::UcxAtomic,
        status_flags(r),
        remote_addr,
        opcode as u16,
        || op_size as u64,
    );
    r
}

type AtomicFetchNb =
    unsafe extern "C" fn(Ptr, c_int, u64, *mut c_void, usize, u64, Ptr, Ptr) -> Ptr;

/// Hook of `ucp_atomic_fetch_nb`.
///
/// # Safety
/// C ABI entry point with the contract of the real function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ucp_atomic_fetch_nb(
    ep: Ptr,
    opcode: c_int,
    value: u64,
    result: *mut c_void,
    op_size: usize,
    remote_addr: u64,
    rkey: Ptr,
    cb: Ptr,
) -> Ptr {
    let real = real!(ATOMIC_FETCH_NB, AtomicFetchNb, unsupported_ptr());
    // SAFETY (real calls): the program's arguments, unchanged.
    let Some(ts) = crate::trace_enter(Layer::Ucx) else {
        return unsafe { real(ep, opcode, value, result, op_size, remote_addr, rkey, cb) };
    };
    let r = unsafe { real(ep, opcode, value, result, op_size, remote_addr, rkey, cb) };
    finish(
        ts,
        ep,
        Op::UcxAtomic,
        ptr_flags(r),
        remote_addr,
        opcode as u16,
        || op_size as u64,
    );
    r
}

type FlushNb = unsafe extern "C" fn(Ptr, c_uint, Ptr) -> Ptr;

/// Hook of `ucp_ep_flush_nb`.
///
/// # Safety
/// C ABI entry point with the contract of the real function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ucp_ep_flush_nb(ep: Ptr, fl: c_uint, cb: Ptr) -> Ptr {
    let real = real!(EP_FLUSH_NB, FlushNb, unsupported_ptr());
    // SAFETY (real calls): the program's arguments, unchanged.
    let Some(ts) = crate::trace_enter(Layer::Ucx) else {
        return unsafe { real(ep, fl, cb) };
    };
    let r = unsafe { real(ep, fl, cb) };
    finish(ts, ep, Op::UcxEpFlush, ptr_flags(r), 0, 0, || 0);
    r
}

/// Hook of `ucp_worker_flush_nb`.
///
/// # Safety
/// C ABI entry point with the contract of the real function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ucp_worker_flush_nb(worker: Ptr, fl: c_uint, cb: Ptr) -> Ptr {
    let real = real!(WORKER_FLUSH_NB, FlushNb, unsupported_ptr());
    // SAFETY (real calls): the program's arguments, unchanged.
    let Some(ts) = crate::trace_enter(Layer::Ucx) else {
        return unsafe { real(worker, fl, cb) };
    };
    let r = unsafe { real(worker, fl, cb) };
    finish(ts, worker, Op::UcxWorkerFlush, ptr_flags(r), 0, 0, || 0);
    r
}

type BlockingFlush = unsafe extern "C" fn(Ptr) -> Status;

/// Records a call that was made outside the depth guard (blocking calls that run the progress
/// engine, whose callbacks may issue traced operations of the program's own).
#[inline(always)]
fn record_after(handle: Ptr, op: Op, fl: u8, bytes: u64, event: bool) {
    record_after_addr(handle, op, fl, bytes, 0, event)
}

#[inline(always)]
fn record_after_addr(handle: Ptr, op: Op, fl: u8, bytes: u64, addr: u64, event: bool) {
    if let Some(ts) = crate::trace_enter(Layer::Ucx) {
        crate::guarded((), || {
            let id = crate::registry::lookup(handle as usize);
            if event {
                ts.record(id, op, bytes, addr, fl, 0)
            } else {
                ts.count(id, op, bytes, false)
            }
        });
        ts.leave();
    }
}

/// Records a blocking call that started at `t0` (from `clock::blocking_start`) with its
/// duration.
#[inline(always)]
fn record_blocking(handle: Ptr, op: Op, fl: u8, t0: u64) {
    // `addr` of a blocking op is the time it blocked (`Op::blocks`).
    record_after_addr(handle, op, fl, 0, crate::clock::blocked_since(t0), true);
}

/// Hook of the blocking `ucp_ep_flush` (counted as an ep flush). The real call runs outside the
/// depth guard: it progresses the worker, and callbacks run there may issue the program's own
/// operations, which must be traced.
///
/// # Safety
/// C ABI entry point with the contract of the real function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ucp_ep_flush(ep: Ptr) -> Status {
    let real = real!(EP_FLUSH, BlockingFlush, UCS_ERR_UNSUPPORTED);
    if crate::in_sigmatop() {
        // SAFETY: the program's argument, unchanged.
        return unsafe { real(ep) };
    }
    let t0 = crate::clock::blocking_start();
    // SAFETY: the program's argument, unchanged.
    let r = unsafe { real(ep) };
    record_blocking(ep, Op::UcxEpFlush, status_flags(r), t0);
    r
}

/// Hook of the blocking `ucp_worker_flush` (counted as a worker flush); see `ucp_ep_flush`.
///
/// # Safety
/// C ABI entry point with the contract of the real function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ucp_worker_flush(worker: Ptr) -> Status {
    let real = real!(WORKER_FLUSH, BlockingFlush, UCS_ERR_UNSUPPORTED);
    if crate::in_sigmatop() {
        // SAFETY: the program's argument, unchanged.
        return unsafe { real(worker) };
    }
    let t0 = crate::clock::blocking_start();
    // SAFETY: the program's argument, unchanged.
    let r = unsafe { real(worker) };
    record_blocking(worker, Op::UcxWorkerFlush, status_flags(r), t0);
    r
}

type Progress = unsafe extern "C" fn(Ptr) -> c_uint;

/// Hook of `ucp_worker_progress`: traced in full mode only (one branch otherwise). Runs outside
/// the depth guard, as callbacks run inside it may issue the program's own operations.
///
/// # Safety
/// C ABI entry point with the contract of the real function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ucp_worker_progress(worker: Ptr) -> c_uint {
    let real = real!(WORKER_PROGRESS, Progress, 0);
    if !crate::config::full() {
        // SAFETY: the program's argument, unchanged.
        return unsafe { real(worker) };
    }
    let nested = crate::in_sigmatop();
    // SAFETY: the program's argument, unchanged.
    let r = unsafe { real(worker) };
    if !nested {
        record_after(worker, Op::UcxProgress, 0, r as u64, r != 0);
    }
    r
}

// ---------------------------------------------------------------------------------------------
// control path (may lock and allocate)

/// The transport an endpoint uses, as far as the environment says.
fn transport() -> String {
    std::env::var("UCX_TLS").unwrap_or_default()
}

/// FNV-1a of the worker uuid in a packed UCX 1.13 worker address (see the module doc).
///
/// # Safety
/// `addr` points at a packed worker address (at least 9 bytes).
unsafe fn address_hash(addr: *const u8) -> u64 {
    // SAFETY: per the caller; bytes 1..9 are the uuid.
    let uuid = unsafe { core::slice::from_raw_parts(addr.add(1), 8) };
    fnv1a64(uuid)
}

/// "ip:port" of a socket address.
///
/// # Safety
/// `sa` points at `len` readable bytes.
unsafe fn sockaddr_text(sa: *const libc::sockaddr, len: libc::socklen_t) -> String {
    if sa.is_null() || (len as usize) < core::mem::size_of::<libc::sa_family_t>() {
        return String::new();
    }
    // SAFETY: at least the family is readable.
    let family = unsafe { (*sa).sa_family } as c_int;
    if family == libc::AF_INET && len as usize >= core::mem::size_of::<libc::sockaddr_in>() {
        // SAFETY: an AF_INET address of full size.
        let a = unsafe { core::ptr::read_unaligned(sa as *const libc::sockaddr_in) };
        let ip = std::net::Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
        format!("{ip}:{}", u16::from_be(a.sin_port))
    } else if family == libc::AF_INET6 && len as usize >= core::mem::size_of::<libc::sockaddr_in6>()
    {
        // SAFETY: an AF_INET6 address of full size.
        let a = unsafe { core::ptr::read_unaligned(sa as *const libc::sockaddr_in6) };
        let ip = std::net::Ipv6Addr::from(a.sin6_addr.s6_addr);
        format!("[{ip}]:{}", u16::from_be(a.sin6_port))
    } else {
        format!("family {family}")
    }
}

type InitVersion =
    unsafe extern "C" fn(c_uint, c_uint, *const c_void, *const c_void, *mut Ptr) -> Status;

/// Hook of `ucp_init_version` (`ucp_init` is an inline wrapper of it): starts the collector.
///
/// # Safety
/// C ABI entry point with the contract of the real function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ucp_init_version(
    major: c_uint,
    minor: c_uint,
    params: *const c_void,
    config: *const c_void,
    context_p: *mut Ptr,
) -> Status {
    let real = real!(INIT_VERSION, InitVersion, UCS_ERR_UNSUPPORTED);
    // SAFETY: the program's arguments, unchanged.
    let r = unsafe { real(major, minor, params, config, context_p) };
    if let Some(ts) = crate::trace_enter(Layer::Ucx) {
        crate::guarded((), crate::collector::ensure_started);
        ts.leave();
    }
    r
}

type WorkerCreate = unsafe extern "C" fn(Ptr, *const c_void, *mut Ptr) -> Status;

/// Hook of `ucp_worker_create`: defines the worker (receives and worker flushes are counted on it).
///
/// # Safety
/// C ABI entry point with the contract of the real function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ucp_worker_create(
    context: Ptr,
    params: *const c_void,
    worker_p: *mut Ptr,
) -> Status {
    let real = real!(WORKER_CREATE, WorkerCreate, UCS_ERR_UNSUPPORTED);
    // SAFETY: the program's arguments, unchanged.
    let r = unsafe { real(context, params, worker_p) };
    if r != 0 || worker_p.is_null() {
        return r;
    }
    if let Some(ts) = crate::trace_enter(Layer::Ucx) {
        crate::guarded((), || {
            crate::collector::ensure_started();
            // SAFETY: on success UCX stored the new worker in *worker_p.
            let worker = unsafe { *worker_p };
            let id = crate::registry::define(
                Layer::Ucx,
                EndpointKind::UcpWorker,
                format!("worker@{:#x}", worker as usize),
                transport(),
                Peer::default(),
            );
            crate::registry::bind(worker as usize, id);
        });
        ts.leave();
    }
    r
}

type WorkerGetAddress = unsafe extern "C" fn(Ptr, *mut *mut u8, *mut usize) -> Status;

/// Hook of `ucp_worker_get_address`: the address is one of this process's own.
///
/// # Safety
/// C ABI entry point with the contract of the real function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ucp_worker_get_address(
    worker: Ptr,
    address_p: *mut *mut u8,
    length_p: *mut usize,
) -> Status {
    let real = real!(WORKER_GET_ADDRESS, WorkerGetAddress, UCS_ERR_UNSUPPORTED);
    // SAFETY: the program's arguments, unchanged.
    let r = unsafe { real(worker, address_p, length_p) };
    if r != 0 || address_p.is_null() || length_p.is_null() {
        return r;
    }
    if let Some(ts) = crate::trace_enter(Layer::Ucx) {
        crate::guarded((), || {
            // SAFETY: on success UCX stored the address and its length.
            let (addr, len) = unsafe { (*address_p, *length_p) };
            if !addr.is_null() && len >= 9 {
                // SAFETY: a packed worker address of `len` >= 9 bytes.
                crate::registry::add_own_addr(unsafe { address_hash(addr) });
            }
        });
        ts.leave();
    }
    r
}

type WorkerQuery = unsafe extern "C" fn(Ptr, *mut WorkerAttrHead) -> Status;

/// Hook of `ucp_worker_query`: an address asked for is one of this process's own.
///
/// # Safety
/// C ABI entry point with the contract of the real function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ucp_worker_query(worker: Ptr, attr: *mut WorkerAttrHead) -> Status {
    let real = real!(WORKER_QUERY, WorkerQuery, UCS_ERR_UNSUPPORTED);
    // SAFETY: the program's arguments, unchanged.
    let r = unsafe { real(worker, attr) };
    if r != 0 || attr.is_null() {
        return r;
    }
    if let Some(ts) = crate::trace_enter(Layer::Ucx) {
        crate::guarded((), || {
            // SAFETY: `attr` is the program's valid ucp_worker_attr_t, filled in by UCX.
            let a = unsafe { &*attr };
            if a.field_mask & WORKER_ATTR_FIELD_ADDRESS != 0
                && !a.address.is_null()
                && a.address_length >= 9
            {
                // SAFETY: a packed worker address of address_length >= 9 bytes.
                crate::registry::add_own_addr(unsafe { address_hash(a.address) });
            }
        });
        ts.leave();
    }
    r
}

type EpCreate = unsafe extern "C" fn(Ptr, *const EpParams, *mut Ptr) -> Status;

/// Hook of `ucp_ep_create`: defines the endpoint with its peer (worker address hash or socket
/// address).
///
/// # Safety
/// C ABI entry point with the contract of the real function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ucp_ep_create(
    worker: Ptr,
    params: *const EpParams,
    ep_p: *mut Ptr,
) -> Status {
    let real = real!(EP_CREATE, EpCreate, UCS_ERR_UNSUPPORTED);
    // SAFETY: the program's arguments, unchanged.
    let r = unsafe { real(worker, params, ep_p) };
    if r != 0 || ep_p.is_null() || params.is_null() {
        return r;
    }
    if let Some(ts) = crate::trace_enter(Layer::Ucx) {
        crate::guarded((), || {
            crate::collector::ensure_started();
            // SAFETY: on success UCX stored the new endpoint; `params` is the program's valid
            // ucp_ep_params_t, whose fields are read only where field_mask says they are set.
            let (ep, p) = unsafe { (*ep_p, &*params) };
            let mut peer = Peer::default();
            if p.field_mask & EP_PARAM_FIELD_REMOTE_ADDRESS != 0 && !p.address.is_null() {
                // SAFETY: a packed worker address (the peer's), at least 9 bytes.
                peer.addr_hash = unsafe { address_hash(p.address) };
            }
            if p.field_mask & EP_PARAM_FIELD_SOCK_ADDR != 0 {
                // SAFETY: the socket address and its length as the program gave them.
                peer.text = unsafe { sockaddr_text(p.sockaddr.addr, p.sockaddr.addrlen) };
            } else if p.field_mask & EP_PARAM_FIELD_CONN_REQUEST != 0 {
                peer.text = "conn_request".into();
            }
            let id = crate::registry::define(
                Layer::Ucx,
                EndpointKind::UcpEp,
                format!("ep@{:#x}", ep as usize),
                transport(),
                peer,
            );
            crate::registry::bind(ep as usize, id);
        });
        ts.leave();
    }
    r
}

/// Marks the endpoint behind `ep` closed (control path, inside the depth guard).
fn closed(ep: Ptr) {
    crate::guarded((), || {
        let id = crate::registry::lookup(ep as usize);
        if id != sigmatop::event::UNATTRIBUTED_EP {
            crate::registry::update(id, "closed", None);
        }
    });
}

type EpCloseNb = unsafe extern "C" fn(Ptr, c_uint) -> Ptr;

/// Hook of `ucp_ep_close_nb`.
///
/// # Safety
/// C ABI entry point with the contract of the real function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ucp_ep_close_nb(ep: Ptr, mode: c_uint) -> Ptr {
    let real = real!(EP_CLOSE_NB, EpCloseNb, unsupported_ptr());
    // SAFETY (real calls): the program's arguments, unchanged.
    let Some(ts) = crate::trace_enter(Layer::Ucx) else {
        return unsafe { real(ep, mode) };
    };
    // Before the call: the handle may be freed (and reused) once it returns.
    closed(ep);
    let r = unsafe { real(ep, mode) };
    ts.leave();
    r
}

type EpCloseNbx = unsafe extern "C" fn(Ptr, *const RequestParam) -> Ptr;

/// Hook of `ucp_ep_close_nbx`.
///
/// # Safety
/// C ABI entry point with the contract of the real function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ucp_ep_close_nbx(ep: Ptr, param: *const RequestParam) -> Ptr {
    let real = real!(EP_CLOSE_NBX, EpCloseNbx, unsupported_ptr());
    // SAFETY (real calls): the program's arguments, unchanged.
    let Some(ts) = crate::trace_enter(Layer::Ucx) else {
        return unsafe { real(ep, param) };
    };
    closed(ep);
    let r = unsafe { real(ep, param) };
    ts.leave();
    r
}

type EpDestroy = unsafe extern "C" fn(Ptr);

/// Hook of `ucp_ep_destroy`.
///
/// # Safety
/// C ABI entry point with the contract of the real function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ucp_ep_destroy(ep: Ptr) {
    let real = real!(EP_DESTROY, EpDestroy);
    // SAFETY (real calls): the program's argument, unchanged.
    let Some(ts) = crate::trace_enter(Layer::Ucx) else {
        return unsafe { real(ep) };
    };
    closed(ep);
    unsafe { real(ep) };
    ts.leave();
}

/// Every UCX hook, for the dlsym wrappers.
pub fn hooks() -> Vec<Hook> {
    macro_rules! h {
        ($($f:ident => $slot:ident),* $(,)?) => {
            vec![$(Hook {
                name: stringify!($f).as_bytes(),
                layer: Layer::Ucx,
                hook: $f as *const c_void,
                real: &$slot,
            }),*]
        };
    }
    h![
        ucp_put_nbx => PUT_NBX,
        ucp_get_nbx => GET_NBX,
        ucp_tag_send_nbx => TAG_SEND_NBX,
        ucp_tag_send_sync_nbx => TAG_SEND_SYNC_NBX,
        ucp_tag_recv_nbx => TAG_RECV_NBX,
        ucp_am_send_nbx => AM_SEND_NBX,
        ucp_am_recv_data_nbx => AM_RECV_DATA_NBX,
        ucp_stream_send_nbx => STREAM_SEND_NBX,
        ucp_stream_recv_nbx => STREAM_RECV_NBX,
        ucp_atomic_op_nbx => ATOMIC_OP_NBX,
        ucp_ep_flush_nbx => EP_FLUSH_NBX,
        ucp_worker_flush_nbx => WORKER_FLUSH_NBX,
        ucp_tag_send_nb => TAG_SEND_NB,
        ucp_tag_send_nbr => TAG_SEND_NBR,
        ucp_tag_send_sync_nb => TAG_SEND_SYNC_NB,
        ucp_tag_recv_nb => TAG_RECV_NB,
        ucp_tag_recv_nbr => TAG_RECV_NBR,
        ucp_put_nb => PUT_NB,
        ucp_put_nbi => PUT_NBI,
        ucp_get_nb => GET_NB,
        ucp_get_nbi => GET_NBI,
        ucp_am_send_nb => AM_SEND_NB,
        ucp_stream_send_nb => STREAM_SEND_NB,
        ucp_stream_recv_nb => STREAM_RECV_NB,
        ucp_atomic_post => ATOMIC_POST,
        ucp_atomic_fetch_nb => ATOMIC_FETCH_NB,
        ucp_ep_flush_nb => EP_FLUSH_NB,
        ucp_worker_flush_nb => WORKER_FLUSH_NB,
        ucp_ep_flush => EP_FLUSH,
        ucp_worker_flush => WORKER_FLUSH,
        ucp_worker_progress => WORKER_PROGRESS,
        ucp_init_version => INIT_VERSION,
        ucp_worker_create => WORKER_CREATE,
        ucp_worker_get_address => WORKER_GET_ADDRESS,
        ucp_worker_query => WORKER_QUERY,
        ucp_ep_create => EP_CREATE,
        ucp_ep_close_nb => EP_CLOSE_NB,
        ucp_ep_close_nbx => EP_CLOSE_NBX,
        ucp_ep_destroy => EP_DESTROY,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datatype_bytes() {
        // SAFETY: contiguous and generic datatypes never read the buffer.
        unsafe {
            assert_eq!(dt_bytes(DT_BYTES, core::ptr::null(), 4096), 4096);
            assert_eq!(dt_bytes(8 << DT_SHIFT, core::ptr::null(), 3), 24);
            assert_eq!(dt_bytes(0x1000 | 7, core::ptr::null(), 5), 5);
        }
        let iov: [[usize; 2]; 3] = [[0, 10], [0, 20], [0, 12]];
        // SAFETY: three valid iov entries.
        assert_eq!(
            unsafe { dt_bytes(DT_IOV, iov.as_ptr() as *const c_void, 3) },
            42
        );
        assert_eq!(ptr_flags(core::ptr::null_mut()), flags::IMMEDIATE);
        assert_eq!(ptr_flags(unsupported_ptr()), flags::ERROR);
        assert_eq!(ptr_flags(0x1000 as Ptr), 0);
        assert_eq!(status_flags(1), 0);
        assert_eq!(status_flags(-3), flags::ERROR);
    }

    #[test]
    fn every_hook_is_listed_once() {
        let hs = hooks();
        assert_eq!(hs.len(), 39);
        let mut names: Vec<_> = hs.iter().map(|h| h.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), hs.len());
    }
}
