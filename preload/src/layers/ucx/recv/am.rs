//! UCX active messages: the program's AM handlers run behind sigmatop's, which count each
//! message with the length it arrived with; `ucp_am_recv_data_nbx` counts its buffer as posted.

use core::ffi::{c_uint, c_void};

use sigmatop::event::{Layer, Op};

use super::super::abi::{
    AM_HANDLER_PARAM_FIELD_ARG, AM_HANDLER_PARAM_FIELD_CB, AmHandlerParam, Ptr, RequestParam,
    Status, UCS_ERR_UNSUPPORTED, UcsResult, nbx_bytes, unsupported_ptr,
};
use super::{AM_RECV_DATA_NBX, SET_AM_HANDLER, SET_AM_RECV_HANDLER};
use crate::interpose::hook;
use crate::runtime::thread::{Detail, Outcome};

type AmRecvCb = unsafe extern "C" fn(Ptr, *const c_void, usize, *mut c_void, usize, Ptr) -> Status;
type AmLegacyCb = unsafe extern "C" fn(Ptr, *mut c_void, usize, Ptr, c_uint) -> Status;

/// Hook of `ucp_am_recv_data_nbx`: the buffer a program gives an active message's data, counted
/// as posted (the message itself was counted by its handler, with its length).
#[unsafe(no_mangle)]
pub(super) unsafe extern "C" fn ucp_am_recv_data_nbx(
    worker: Ptr,
    data_desc: *mut c_void,
    buffer: *mut c_void,
    count: usize,
    param: *const RequestParam,
) -> Ptr {
    let Some(real) = AM_RECV_DATA_NBX.get() else {
        return unsupported_ptr();
    };
    hook::around(
        hook::Guard::Outermost(Layer::Ucx),
        // SAFETY: the program's arguments, unchanged.
        || unsafe { real(worker, data_desc, buffer, count, param) },
        |ts, r| {
            let ep = crate::runtime::registry::lookup_compact(worker as usize);
            // SAFETY: the program's valid buffer and param.
            let posted = unsafe { nbx_bytes(param, buffer, count) };
            let outcome = if r.outcome() == Outcome::Refused {
                Outcome::Refused
            } else {
                Outcome::Posted
            };
            ts.record(ep, Op::UcxAmRecvData, posted, outcome, || {
                Some(Detail::NONE)
            })
        },
    )
}

/// What sigmatop's AM handler stands for: the program's handler and argument, and the worker's
/// endpoint. Leaked (a handler can run until the worker is gone; re-registrations are rare).
struct AmCtx {
    cb: usize,
    arg: Ptr,
    ep: u32,
}

/// Counts an active message that reached its handler: `length` bytes on the worker.
#[inline(always)]
fn count_am(ep: u32, length: usize) {
    if !crate::runtime::config::layer_enabled(Layer::Ucx) {
        return;
    }
    hook::guarded((), || {
        if let Some(ts) = crate::runtime::thread::current() {
            ts.arrived(ep, Op::UcxAmRecvData, length as u64, true);
        }
    });
}

/// sigmatop's `ucp_am_recv_callback_t`: counts, then calls the program's handler.
unsafe extern "C" fn am_recv_handler(
    arg: Ptr,
    header: *const c_void,
    header_length: usize,
    data: *mut c_void,
    length: usize,
    param: Ptr,
) -> Status {
    // SAFETY: `arg` is the AmCtx sigmatop registered this handler with.
    let ctx = unsafe { &*(arg as *const AmCtx) };
    count_am(ctx.ep, length);
    // SAFETY: the program's handler of this kind, with its argument and UCX's others.
    unsafe {
        core::mem::transmute::<usize, AmRecvCb>(ctx.cb)(
            ctx.arg,
            header,
            header_length,
            data,
            length,
            param,
        )
    }
}

/// sigmatop's legacy `ucp_am_callback_t`.
unsafe extern "C" fn am_legacy_handler(
    arg: Ptr,
    data: *mut c_void,
    length: usize,
    reply_ep: Ptr,
    fl: c_uint,
) -> Status {
    // SAFETY: `arg` is the AmCtx sigmatop registered this handler with.
    let ctx = unsafe { &*(arg as *const AmCtx) };
    count_am(ctx.ep, length);
    // SAFETY: the program's handler of this kind.
    unsafe {
        core::mem::transmute::<usize, AmLegacyCb>(ctx.cb)(ctx.arg, data, length, reply_ep, fl)
    }
}

/// A leaked context for a handler registration (control path).
fn am_ctx(worker: Ptr, cb: Ptr, arg: Ptr) -> Ptr {
    let ctx = Box::new(AmCtx {
        cb: cb as usize,
        arg,
        ep: crate::runtime::registry::lookup_compact(worker as usize),
    });
    Box::into_raw(ctx) as Ptr
}

/// Hook of `ucp_worker_set_am_recv_handler`: the program's handler is registered behind
/// sigmatop's, which counts every message it gets.
#[unsafe(no_mangle)]
pub(super) unsafe extern "C" fn ucp_worker_set_am_recv_handler(
    worker: Ptr,
    param: *const AmHandlerParam,
) -> Status {
    let Some(real) = SET_AM_RECV_HANDLER.get() else {
        return UCS_ERR_UNSUPPORTED;
    };
    // SAFETY: the program's parameters (NULL or valid).
    let mine = unsafe { param.as_ref() }
        .filter(|p| p.field_mask & AM_HANDLER_PARAM_FIELD_CB != 0 && !p.cb.is_null());
    hook::around_traced(
        Layer::Ucx,
        |traced| {
            let Some(p) = mine.filter(|_| traced) else {
                // SAFETY: the program's arguments, unchanged.
                return unsafe { real(worker, param) };
            };
            let arg = if p.field_mask & AM_HANDLER_PARAM_FIELD_ARG != 0 {
                p.arg
            } else {
                core::ptr::null_mut()
            };
            let Some(ctx) = hook::guarded(None, || Some(am_ctx(worker, p.cb, arg))) else {
                // SAFETY: as above.
                return unsafe { real(worker, param) };
            };
            let ours = AmHandlerParam {
                field_mask: p.field_mask | AM_HANDLER_PARAM_FIELD_ARG,
                cb: am_recv_handler as AmRecvCb as Ptr,
                arg: ctx,
                ..*p
            };
            // SAFETY: the program's worker and parameters, handler and argument sigmatop's.
            unsafe { real(worker, &ours) }
        },
        |_, _| {},
    )
}

/// Hook of the legacy `ucp_worker_set_am_handler`; as `ucp_worker_set_am_recv_handler`.
#[unsafe(no_mangle)]
pub(super) unsafe extern "C" fn ucp_worker_set_am_handler(
    worker: Ptr,
    id: u16,
    cb: Ptr,
    arg: Ptr,
    fl: u32,
) -> Status {
    let Some(real) = SET_AM_HANDLER.get() else {
        return UCS_ERR_UNSUPPORTED;
    };
    hook::around_traced(
        Layer::Ucx,
        |traced| {
            if !traced || cb.is_null() {
                // SAFETY: the program's arguments, unchanged.
                return unsafe { real(worker, id, cb, arg, fl) };
            }
            match hook::guarded(None, || Some(am_ctx(worker, cb, arg))) {
                // SAFETY: the program's worker, id and flags; handler and argument sigmatop's.
                Some(ctx) => unsafe {
                    real(worker, id, am_legacy_handler as AmLegacyCb as Ptr, ctx, fl)
                },
                // SAFETY: as above.
                None => unsafe { real(worker, id, cb, arg, fl) },
            }
        },
        |_, _| {},
    )
}
