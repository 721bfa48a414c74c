//! UCX receives: a posted receive counts its buffer as *posted*; the receive itself is counted
//! when it completes, with the length UCX reports for it (received bytes are the bytes that
//! arrived, never the size of the buffer).
//!
//! Where the length comes from:
//! - tag receives (`ucp_tag_recv_nbx`, `_nb`, `_nbr`, `ucp_tag_msg_recv_nbx`, `_nb`): later, the
//!   completion callback's info. A receive without a callback (`_nbr`, a polled request) gets one
//!   of sigmatop's, which only counts: UCX completes the request exactly as before, and the
//!   program's own tests (`ucp_request_test`, `ucp_tag_recv_request_test`) see it as they would.
//!   Completed at once (the message was already there): UCX 1.16 and later write
//!   `ucp_tag_recv_info_t` (the program's `recv_info` or, when it passed none, sigmatop's own in
//!   its copy of the parameters); before 1.16 nothing reports that length, so when an immediate
//!   completion is possible (no `UCP_OP_ATTR_FLAG_NO_IMM_CMPL`) sigmatop first asks
//!   `ucp_tag_probe_nb` (without removing anything) for the message the receive will match: tag
//!   matching takes the oldest matching unexpected message, which is what the probe reports. A
//!   probed `ucp_tag_msg_recv_nbx` completed at once is counted as posted only.
//! - stream receives (`ucp_stream_recv_nbx`, `_nb`): `*length` when completed at once, else the
//!   callback's `length`, the same way.
//! - active messages: the length the AM handler is called with (`ucp_worker_set_am_recv_handler`,
//!   `ucp_worker_set_am_handler` are wrapped); for a rendezvous message that is its size as
//!   announced, its data moving when the program calls `ucp_am_recv_data_nbx`, which counts its
//!   buffer as posted.
//!
//! A completion callback is UCX's `(request, status, info or length, user_data)`: the program's
//! `user_data` goes through untouched, so sigmatop's callback finds the program's callback and the
//! endpoint in a slot of its own, one per (program callback, endpoint, op), chosen with the
//! callback itself (`SLOTS` trampolines per kind, made at compile time). When they are all taken,
//! further receives keep the program's callback and are counted as posted only
//! (`ARRIVALS_UNSEEN`). Status `UCS_OK` is a receive with its bytes; any other (cancelled,
//! truncated) a failed one.
//!
//! Here: the tag and stream receive hooks. [`slots`]: sigmatop's completion callbacks and the
//! parameter copy that carries them. [`am`]: active-message handlers and `ucp_am_recv_data_nbx`.

use core::cell::Cell;
use core::ffi::{c_int, c_uint, c_void};
use core::mem::MaybeUninit;
use core::sync::atomic::{AtomicU8, Ordering};

use sigmatop::event::{Layer, Op, UNATTRIBUTED_EP, flags};

mod am;
mod slots;

pub use slots::ARRIVALS_UNSEEN;

use am::{ucp_am_recv_data_nbx, ucp_worker_set_am_handler, ucp_worker_set_am_recv_handler};
use slots::{info_of, len_cb, tag_cb, unseen, with_callback};

use super::SONAMES;
use super::abi::{
    AmHandlerParam, OP_ATTR_FIELD_CALLBACK, OP_ATTR_FIELD_DATATYPE, OP_ATTR_FIELD_REQUEST,
    OP_ATTR_FLAG_NO_IMM_CMPL, Ptr, RequestParam, Status, TagRecvInfo, UCS_ERR_UNSUPPORTED, UCS_OK,
    UcsResult, dt_bytes, nbx_bytes, unsupported_ptr,
};
use crate::interpose::dlsym::hook_table;
use crate::interpose::hook;
use crate::runtime::dl::real_fns;
use crate::runtime::thread::{Detail, Outcome, ThreadState};

type TagRecvNbx =
    unsafe extern "C" fn(Ptr, *mut c_void, usize, u64, u64, *const RequestParam) -> Ptr;
type TagRecvNb = unsafe extern "C" fn(Ptr, *mut c_void, usize, u64, u64, u64, Ptr) -> Ptr;
type TagRecvNbr = unsafe extern "C" fn(Ptr, *mut c_void, usize, u64, u64, u64, Ptr) -> Status;
type MsgRecvNbx = unsafe extern "C" fn(Ptr, *mut c_void, usize, Ptr, *const RequestParam) -> Ptr;
type MsgRecvNb = unsafe extern "C" fn(Ptr, *mut c_void, usize, u64, Ptr, Ptr) -> Ptr;
type StreamRecvNbx =
    unsafe extern "C" fn(Ptr, *mut c_void, usize, *mut usize, *const RequestParam) -> Ptr;
type StreamRecvNb =
    unsafe extern "C" fn(Ptr, *mut c_void, usize, u64, Ptr, *mut usize, c_uint) -> Ptr;
type AmRecvDataNbx =
    unsafe extern "C" fn(Ptr, *mut c_void, *mut c_void, usize, *const RequestParam) -> Ptr;
type SetAmRecvHandler = unsafe extern "C" fn(Ptr, *const AmHandlerParam) -> Status;
type SetAmHandler = unsafe extern "C" fn(Ptr, u16, Ptr, Ptr, u32) -> Status;
type TagProbeNb = unsafe extern "C" fn(Ptr, u64, u64, c_int, *mut TagRecvInfo) -> Ptr;
type GetVersion = unsafe extern "C" fn(*mut c_uint, *mut c_uint, *mut c_uint);

real_fns! { SONAMES;
    TAG_RECV_NBX: TagRecvNbx = c"ucp_tag_recv_nbx";
    TAG_RECV_NB: TagRecvNb = c"ucp_tag_recv_nb";
    TAG_RECV_NBR: TagRecvNbr = c"ucp_tag_recv_nbr";
    MSG_RECV_NBX: MsgRecvNbx = c"ucp_tag_msg_recv_nbx";
    MSG_RECV_NB: MsgRecvNb = c"ucp_tag_msg_recv_nb";
    STREAM_RECV_NBX: StreamRecvNbx = c"ucp_stream_recv_nbx";
    STREAM_RECV_NB: StreamRecvNb = c"ucp_stream_recv_nb";
    AM_RECV_DATA_NBX: AmRecvDataNbx = c"ucp_am_recv_data_nbx";
    SET_AM_RECV_HANDLER: SetAmRecvHandler = c"ucp_worker_set_am_recv_handler";
    SET_AM_HANDLER: SetAmHandler = c"ucp_worker_set_am_handler";
    TAG_PROBE_NB: TagProbeNb = c"ucp_tag_probe_nb";
    GET_VERSION: GetVersion = c"ucp_get_version";
}

/// Whether this UCX writes a tag receive's info when it completes at once (1.16 and later):
/// 0 not asked yet, 1 no, 2 yes.
static IMM_INFO: AtomicU8 = AtomicU8::new(0);

/// True when UCX reports an immediately completed tag receive's length (`recv_info`).
fn imm_info_reported() -> bool {
    match IMM_INFO.load(Ordering::Relaxed) {
        0 => {
            let (mut major, mut minor, mut release) = (0u32, 0u32, 0u32);
            let yes = GET_VERSION.get().is_some_and(|f| {
                // SAFETY: three writable unsigned ints (ucp.h).
                unsafe { f(&mut major, &mut minor, &mut release) };
                (major, minor) >= (1, 16)
            });
            IMM_INFO.store(if yes { 2 } else { 1 }, Ordering::Relaxed);
            yes
        }
        v => v == 2,
    }
}

/// The length of the message a tag receive on `worker` for (`tag`, `mask`) would match now, if
/// one is waiting (nothing is removed).
fn probe_len(worker: Ptr, tag: u64, mask: u64) -> Option<u64> {
    let f = TAG_PROBE_NB.get()?;
    let mut info = TagRecvInfo::default();
    // SAFETY: the program's worker; `info` is writable; remove = 0 leaves the message queued.
    let msg = unsafe { f(worker, tag, mask, 0, &mut info) };
    (!msg.is_null()).then_some(info.length as u64)
}

/// The recording step of a receive post: refused (no bytes), or posted with its buffer size;
/// completed inside the call (`arrived` = the length then), also the receive itself. `seen`:
/// sigmatop's callback will see a later completion.
#[inline(always)]
#[allow(clippy::too_many_arguments)] // the post's parts
fn record_post<R: UcsResult>(
    ts: &ThreadState,
    ep: u32,
    op: Op,
    r: R,
    posted: u64,
    detail: Option<Detail>,
    seen: bool,
    arrived: impl FnOnce() -> Option<u64>,
) {
    match r.outcome() {
        Outcome::Refused => ts.record(ep, op, 0, Outcome::Refused, || detail),
        Outcome::Immediate => {
            ts.record(ep, op, posted, Outcome::Posted, || {
                detail.map(|d| Detail {
                    flags: d.flags | flags::IMMEDIATE,
                    ..d
                })
            });
            match arrived() {
                Some(n) => ts.arrived(ep, op, n, true),
                None => unseen(),
            }
        }
        _ => {
            if !seen {
                unseen();
            }
            ts.record(ep, op, posted, Outcome::Posted, || detail)
        }
    }
}

/// The body of the two nbx tag receives: the real call with sigmatop's callback (and receive
/// info) when traced. `probe` finds the length of the message an immediate completion would
/// take, for a UCX that does not report it (None: a probed message, which cannot be asked).
///
/// # Safety
/// `param` as the UCP API defines it.
#[inline(always)]
unsafe fn tag_recv_nbx(
    worker: Ptr,
    op: Op,
    param: *const RequestParam,
    detail: Option<Detail>,
    posted: impl FnOnce() -> u64,
    probe: Option<(u64, u64)>,
    real: impl FnOnce(*const RequestParam) -> Ptr,
) -> Ptr {
    let mut own = TagRecvInfo::default();
    let own: *mut TagRecvInfo = &mut own;
    let ep = Cell::new(UNATTRIBUTED_EP);
    let seen = Cell::new(false);
    // The length of an immediate completion: from the receive info, or probed before the call.
    let info_reported = Cell::new(false);
    let probed = Cell::new(None);
    hook::around_traced(
        Layer::Ucx,
        |traced| {
            if !traced {
                return real(param);
            }
            ep.set(crate::runtime::registry::lookup_compact(worker as usize));
            let imm_possible = !param.is_null()
                // SAFETY: the program's parameters (non-NULL).
                && unsafe { (*param).op_attr_mask } & OP_ATTR_FLAG_NO_IMM_CMPL == 0;
            if imm_possible {
                if imm_info_reported() {
                    info_reported.set(true);
                } else if let Some((tag, mask)) = probe {
                    probed.set(probe_len(worker, tag, mask));
                }
            }
            let info = info_reported.get().then_some(own);
            let mut copy = MaybeUninit::<RequestParam>::uninit();
            let cb = |cb| tag_cb(cb, ep.get(), op).map(|f| f as Ptr);
            // SAFETY: the program's parameters; `own` and `copy` live through the call.
            if unsafe { with_callback(param, cb, info, &mut copy) } {
                seen.set(true);
                real(copy.as_ptr())
            } else {
                real(param)
            }
        },
        |ts, r| {
            record_post(ts, ep.get(), op, r, posted(), detail, seen.get(), || {
                if info_reported.get() {
                    // SAFETY: on an immediate completion UCX wrote the info it was given.
                    Some(unsafe { (*info_of(param, own)).length } as u64)
                } else {
                    probed.get()
                }
            })
        },
    )
}

/// Hook of `ucp_tag_recv_nbx` (counted on the worker).
#[unsafe(no_mangle)]
unsafe extern "C" fn ucp_tag_recv_nbx(
    worker: Ptr,
    buffer: *mut c_void,
    count: usize,
    tag: u64,
    tag_mask: u64,
    param: *const RequestParam,
) -> Ptr {
    let Some(real) = TAG_RECV_NBX.get() else {
        return unsupported_ptr();
    };
    // SAFETY: the program's arguments; the real call gets them, or sigmatop's copy of `param`.
    unsafe {
        tag_recv_nbx(
            worker,
            Op::UcxTagRecv,
            param,
            Some(Detail::at(tag, 0)),
            || nbx_bytes(param, buffer, count),
            Some((tag, tag_mask)),
            |p| real(worker, buffer, count, tag, tag_mask, p),
        )
    }
}

/// Hook of `ucp_tag_msg_recv_nbx` (a probed message; counted on the worker; no event, since the
/// message's tag is not known here).
#[unsafe(no_mangle)]
unsafe extern "C" fn ucp_tag_msg_recv_nbx(
    worker: Ptr,
    buffer: *mut c_void,
    count: usize,
    message: Ptr,
    param: *const RequestParam,
) -> Ptr {
    let Some(real) = MSG_RECV_NBX.get() else {
        return unsupported_ptr();
    };
    // SAFETY: as ucp_tag_recv_nbx.
    unsafe {
        tag_recv_nbx(
            worker,
            Op::UcxTagRecv,
            param,
            None,
            || nbx_bytes(param, buffer, count),
            None,
            |p| real(worker, buffer, count, message, p),
        )
    }
}

/// The body of the legacy receives that take the program's callback: it is swapped for
/// sigmatop's; `arrived` reads the length of a receive that completed at once (a stream receive;
/// a tag receive never does: `UCP_OP_ATTR_FLAG_NO_IMM_CMPL`).
#[inline(always)]
#[allow(clippy::too_many_arguments)] // the call's parts, each a closure of the hook
fn with_legacy_cb<R: UcsResult>(
    handle: Ptr,
    op: Op,
    cb: Ptr,
    detail: Option<Detail>,
    posted: impl FnOnce() -> u64,
    ours: impl FnOnce(usize, u32) -> Option<Ptr>,
    real: impl FnOnce(Ptr) -> R,
    arrived: impl FnOnce() -> Option<u64>,
) -> R {
    let ep = Cell::new(UNATTRIBUTED_EP);
    let seen = Cell::new(false);
    hook::around_traced(
        Layer::Ucx,
        |traced| {
            if !traced || cb.is_null() {
                return real(cb);
            }
            ep.set(crate::runtime::registry::lookup_compact(handle as usize));
            match ours(cb as usize, ep.get()) {
                Some(f) => {
                    seen.set(true);
                    real(f)
                }
                None => real(cb),
            }
        },
        |ts, r| record_post(ts, ep.get(), op, r, posted(), detail, seen.get(), arrived),
    )
}

/// Hook of `ucp_tag_recv_nb`.
#[unsafe(no_mangle)]
unsafe extern "C" fn ucp_tag_recv_nb(
    worker: Ptr,
    buffer: *mut c_void,
    count: usize,
    datatype: u64,
    tag: u64,
    tag_mask: u64,
    cb: Ptr,
) -> Ptr {
    let Some(real) = TAG_RECV_NB.get() else {
        return unsupported_ptr();
    };
    with_legacy_cb(
        worker,
        Op::UcxTagRecv,
        cb,
        Some(Detail::at(tag, 0)),
        // SAFETY: the program's valid buffer of `count` elements of `datatype`.
        || unsafe { dt_bytes(datatype, buffer, count) },
        |cb, ep| tag_cb(cb, ep, Op::UcxTagRecv).map(|f| f as Ptr),
        // SAFETY: the program's arguments, its callback swapped for sigmatop's.
        |cb| unsafe { real(worker, buffer, count, datatype, tag, tag_mask, cb) },
        || None,
    )
}

/// Hook of `ucp_tag_msg_recv_nb` (no event: see `ucp_tag_msg_recv_nbx`).
#[unsafe(no_mangle)]
unsafe extern "C" fn ucp_tag_msg_recv_nb(
    worker: Ptr,
    buffer: *mut c_void,
    count: usize,
    datatype: u64,
    message: Ptr,
    cb: Ptr,
) -> Ptr {
    let Some(real) = MSG_RECV_NB.get() else {
        return unsupported_ptr();
    };
    with_legacy_cb(
        worker,
        Op::UcxTagRecv,
        cb,
        None,
        // SAFETY: the program's valid buffer of `count` elements of `datatype`.
        || unsafe { dt_bytes(datatype, buffer, count) },
        |cb, ep| tag_cb(cb, ep, Op::UcxTagRecv).map(|f| f as Ptr),
        // SAFETY: the program's arguments, its callback swapped for sigmatop's.
        |cb| unsafe { real(worker, buffer, count, datatype, message, cb) },
        || None,
    )
}

/// Hook of `ucp_tag_recv_nbr`: the program's request, no callback. Traced, it is made as UCX
/// makes it (`ucp_tag_recv_nbx` with the request, the datatype and `NO_IMM_CMPL`) plus
/// sigmatop's counting callback.
#[unsafe(no_mangle)]
unsafe extern "C" fn ucp_tag_recv_nbr(
    worker: Ptr,
    buffer: *mut c_void,
    count: usize,
    datatype: u64,
    tag: u64,
    tag_mask: u64,
    req: Ptr,
) -> Status {
    let Some(real) = TAG_RECV_NBR.get() else {
        return UCS_ERR_UNSUPPORTED;
    };
    let nbx = TAG_RECV_NBX.get();
    let ep = Cell::new(UNATTRIBUTED_EP);
    let seen = Cell::new(false);
    hook::around_traced(
        Layer::Ucx,
        |traced| {
            let plain = || {
                // SAFETY: the program's arguments, unchanged.
                unsafe { real(worker, buffer, count, datatype, tag, tag_mask, req) }
            };
            let Some(nbx) = nbx.filter(|_| traced) else {
                return plain();
            };
            ep.set(crate::runtime::registry::lookup_compact(worker as usize));
            let Some(cb) = tag_cb(0, ep.get(), Op::UcxTagRecv) else {
                return plain();
            };
            seen.set(true);
            let p = RequestParam {
                op_attr_mask: OP_ATTR_FIELD_DATATYPE
                    | OP_ATTR_FIELD_REQUEST
                    | OP_ATTR_FLAG_NO_IMM_CMPL
                    | OP_ATTR_FIELD_CALLBACK,
                flags: 0,
                request: req,
                cb: cb as Ptr,
                datatype,
                user_data: core::ptr::null_mut(),
                reply_buffer: core::ptr::null_mut(),
                memory_type: 0,
                recv_info: core::ptr::null_mut(),
                memh: core::ptr::null_mut(),
            };
            // SAFETY: the program's arguments and request, in the parameters `_nbr` builds.
            let r = unsafe { nbx(worker, buffer, count, tag, tag_mask, &p) };
            if r.outcome() == Outcome::Refused {
                r as isize as Status
            } else {
                UCS_OK
            }
        },
        |ts, r| {
            // SAFETY: the program's valid buffer of `count` elements of `datatype`.
            let posted = unsafe { dt_bytes(datatype, buffer, count) };
            // `_nbr` completes into the request (never at once: UCS_OK means posted here).
            let r = if r == UCS_OK { 1 } else { r };
            let detail = Some(Detail::at(tag, 0));
            record_post(
                ts,
                ep.get(),
                Op::UcxTagRecv,
                r,
                posted,
                detail,
                seen.get(),
                || None,
            )
        },
    )
}

/// Hook of `ucp_stream_recv_nbx`: posted; the length when it completes at once (`*length`) or
/// through the callback.
#[unsafe(no_mangle)]
unsafe extern "C" fn ucp_stream_recv_nbx(
    ep: Ptr,
    buffer: *mut c_void,
    count: usize,
    length: *mut usize,
    param: *const RequestParam,
) -> Ptr {
    let Some(real) = STREAM_RECV_NBX.get() else {
        return unsupported_ptr();
    };
    let id = Cell::new(UNATTRIBUTED_EP);
    let seen = Cell::new(false);
    hook::around_traced(
        Layer::Ucx,
        |traced| {
            // SAFETY: the program's arguments (or sigmatop's copy of `param`).
            let call = |p| unsafe { real(ep, buffer, count, length, p) };
            if !traced {
                return call(param);
            }
            id.set(crate::runtime::registry::lookup_compact(ep as usize));
            let op = Op::UcxStreamRecv;
            let mut copy = MaybeUninit::<RequestParam>::uninit();
            let cb = |cb| len_cb(cb, id.get(), op).map(|f| f as Ptr);
            // SAFETY: the program's parameters; `copy` lives through the call.
            if unsafe { with_callback(param, cb, None, &mut copy) } {
                seen.set(true);
                call(copy.as_ptr())
            } else {
                call(param)
            }
        },
        |ts, r| {
            // SAFETY: the program's valid buffer and param.
            let posted = unsafe { nbx_bytes(param, buffer, count) };
            let detail = Some(Detail::NONE);
            record_post(
                ts,
                id.get(),
                Op::UcxStreamRecv,
                r,
                posted,
                detail,
                seen.get(),
                || {
                    // SAFETY: UCX wrote `*length` when it completed at once.
                    (!length.is_null()).then(|| unsafe { *length } as u64)
                },
            )
        },
    )
}

/// Hook of `ucp_stream_recv_nb`: as `ucp_stream_recv_nbx`, the callback given directly.
#[unsafe(no_mangle)]
unsafe extern "C" fn ucp_stream_recv_nb(
    ep: Ptr,
    buffer: *mut c_void,
    count: usize,
    datatype: u64,
    cb: Ptr,
    length: *mut usize,
    fl: c_uint,
) -> Ptr {
    let Some(real) = STREAM_RECV_NB.get() else {
        return unsupported_ptr();
    };
    with_legacy_cb(
        ep,
        Op::UcxStreamRecv,
        cb,
        Some(Detail::NONE),
        // SAFETY: the program's valid buffer of `count` elements of `datatype`.
        || unsafe { dt_bytes(datatype, buffer, count) },
        |cb, id| len_cb(cb, id, Op::UcxStreamRecv).map(|f| f as Ptr),
        // SAFETY: the program's arguments, its callback swapped for sigmatop's.
        |cb| unsafe { real(ep, buffer, count, datatype, cb, length, fl) },
        // SAFETY: UCX wrote `*length` when it completed at once.
        || (!length.is_null()).then(|| unsafe { *length } as u64),
    )
}

pub(super) fn hooks() -> Vec<crate::interpose::dlsym::Hook> {
    hook_table![Layer::Ucx;
        ucp_tag_recv_nbx => TAG_RECV_NBX,
        ucp_tag_recv_nb => TAG_RECV_NB,
        ucp_tag_recv_nbr => TAG_RECV_NBR,
        ucp_tag_msg_recv_nbx => MSG_RECV_NBX,
        ucp_tag_msg_recv_nb => MSG_RECV_NB,
        ucp_stream_recv_nbx => STREAM_RECV_NBX,
        ucp_stream_recv_nb => STREAM_RECV_NB,
        ucp_am_recv_data_nbx => AM_RECV_DATA_NBX,
        ucp_worker_set_am_recv_handler => SET_AM_RECV_HANDLER,
        ucp_worker_set_am_handler => SET_AM_HANDLER,
    ]
}
