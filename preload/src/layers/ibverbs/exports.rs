//! The exported verbs (`ibv_get_device_list`, `ibv_open_device`, `ibv_create_qp`,
//! `ibv_modify_qp`, ...), interposed as plain exports and handed out by the dlsym/dlvsym
//! wrappers (any symbol version).
//! Each calls the real function first and then does its bookkeeping through `hook::after`
//! (errno preserved, so a program sees exactly what libibverbs returned).

use core::ffi::{c_int, c_uint, c_void};

use sigmatop::event::{Layer, Op};

use super::SONAMES;
use super::abi::{IbvContext, IbvDevice, IbvQp, IbvQpAttr, IbvQpInitAttrEx};
use super::context::{REAL_QUERY_GID, REAL_QUERY_PORT, forget_ctx, record_device};
use super::control::{define_cq, define_srq, on_modify, on_qp_created, on_qp_destroyed};
use super::patch::patch_context;
use crate::interpose::dlsym::hook_table;
use crate::interpose::hook::{self, Guard};
use crate::runtime::dl::{RealFn, real_fns};
use crate::runtime::thread::{Detail, Outcome};

type Ptr = *mut c_void;
type GetCqEventFn = unsafe extern "C" fn(Ptr, *mut Ptr, *mut Ptr) -> c_int;

real_fns! { SONAMES;
    REAL_GET_DEVICE_LIST: unsafe extern "C" fn(*mut c_int) -> *mut *mut IbvDevice
        = c"ibv_get_device_list";
    REAL_OPEN_DEVICE: unsafe extern "C" fn(*mut IbvDevice) -> *mut IbvContext = c"ibv_open_device";
    REAL_CLOSE_DEVICE: unsafe extern "C" fn(*mut IbvContext) -> c_int = c"ibv_close_device";
    REAL_QUERY_DEVICE: unsafe extern "C" fn(*mut IbvContext, Ptr) -> c_int = c"ibv_query_device";
    REAL_ALLOC_PD: unsafe extern "C" fn(*mut IbvContext) -> Ptr = c"ibv_alloc_pd";
    REAL_REG_MR: unsafe extern "C" fn(Ptr, Ptr, usize, c_int) -> Ptr = c"ibv_reg_mr";
    REAL_REG_MR_IOVA2: unsafe extern "C" fn(Ptr, Ptr, usize, u64, c_uint) -> Ptr
        = c"ibv_reg_mr_iova2";
    REAL_REG_DMABUF_MR: unsafe extern "C" fn(Ptr, u64, usize, u64, c_int, c_int) -> Ptr
        = c"ibv_reg_dmabuf_mr";
    REAL_DEREG_MR: unsafe extern "C" fn(Ptr) -> c_int = c"ibv_dereg_mr";
    REAL_CREATE_CQ: unsafe extern "C" fn(*mut IbvContext, c_int, Ptr, Ptr, c_int) -> Ptr
        = c"ibv_create_cq";
    REAL_CREATE_SRQ: unsafe extern "C" fn(Ptr, Ptr) -> Ptr = c"ibv_create_srq";
    REAL_CREATE_QP: unsafe extern "C" fn(Ptr, Ptr) -> *mut IbvQp = c"ibv_create_qp";
    REAL_MODIFY_QP: unsafe extern "C" fn(*mut IbvQp, *mut IbvQpAttr, c_int) -> c_int
        = c"ibv_modify_qp";
    REAL_DESTROY_QP: unsafe extern "C" fn(*mut IbvQp) -> c_int = c"ibv_destroy_qp";
    REAL_GET_CQ_EVENT: GetCqEventFn = c"ibv_get_cq_event";
}

pub fn hooks() -> Vec<crate::interpose::dlsym::Hook> {
    hook_table![Layer::Ibverbs;
        ibv_get_device_list => REAL_GET_DEVICE_LIST,
        ibv_open_device => REAL_OPEN_DEVICE,
        ibv_close_device => REAL_CLOSE_DEVICE,
        ibv_query_device => REAL_QUERY_DEVICE,
        ibv_query_port => REAL_QUERY_PORT,
        ibv_query_gid => REAL_QUERY_GID,
        ibv_alloc_pd => REAL_ALLOC_PD,
        ibv_reg_mr => REAL_REG_MR,
        ibv_reg_mr_iova2 => REAL_REG_MR_IOVA2,
        ibv_reg_dmabuf_mr => REAL_REG_DMABUF_MR,
        ibv_dereg_mr => REAL_DEREG_MR,
        ibv_create_cq => REAL_CREATE_CQ,
        ibv_create_srq => REAL_CREATE_SRQ,
        ibv_create_qp => REAL_CREATE_QP,
        ibv_modify_qp => REAL_MODIFY_QP,
        ibv_destroy_qp => REAL_DESTROY_QP,
        ibv_get_cq_event => REAL_GET_CQ_EVENT,
    ]
}

/// The real function, or None with errno ENOSYS: without libibverbs the hook fails as a missing
/// symbol would.
fn real<F: Copy>(slot: &RealFn<F>) -> Option<F> {
    let f = slot.get();
    if f.is_none() {
        crate::runtime::os::set_errno(libc::ENOSYS);
    }
    f
}

/// Bookkeeping of this layer after a real call: see `hook::after`.
#[inline(always)]
fn after<R: Copy>(call_real: impl FnOnce() -> R, note: impl FnOnce(R)) -> R {
    hook::after(Some(Layer::Ibverbs), call_real, note)
}

/// `ibv_get_cq_event`: blocks on a completion channel until a CQ has an event. Counted on the CQ
/// it returns (`get_cq_event`); with events on, recorded with the time it waited in `addr`
/// (`Op::blocks`), which the Perfetto export draws as a slice on the thread. The clock is read
/// around the call only then: it blocks anyway.
#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_get_cq_event(channel: Ptr, cq: *mut Ptr, cq_context: *mut Ptr) -> c_int {
    let Some(f) = real(&REAL_GET_CQ_EVENT) else {
        return -1;
    };
    let t0 = crate::runtime::clock::blocking_start();
    hook::around(
        Guard::AfterCall(Layer::Ibverbs),
        // SAFETY: the program's arguments, unchanged.
        || unsafe { f(channel, cq, cq_context) },
        |ts, r| {
            crate::runtime::os::keep_errno(|| {
                let cq_ptr = if r == 0 && !cq.is_null() {
                    // SAFETY: on success the library stored the CQ through the program's pointer.
                    unsafe { *cq }
                } else {
                    core::ptr::null_mut()
                };
                let ep = crate::runtime::registry::lookup(cq_ptr as usize);
                // Only a call that returned an event waited for one (a non-blocking channel
                // answers EAGAIN at once): the others carry no time. `addr` of a blocking op is
                // the time it blocked (`Op::blocks`).
                let (outcome, waited) = if r == 0 {
                    (Outcome::Ok, crate::runtime::clock::blocked_since(t0))
                } else {
                    (Outcome::Failed, 0)
                };
                ts.record(ep, Op::VerbsCqEvent, 0, outcome, || {
                    Some(Detail::at(waited, 0))
                });
            })
        },
    )
}

/// `ibv_get_device_list`: starts the collector, otherwise untouched.
#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_get_device_list(num: *mut c_int) -> *mut *mut IbvDevice {
    let Some(f) = real(&REAL_GET_DEVICE_LIST) else {
        return core::ptr::null_mut();
    };
    hook::start_collector(Layer::Ibverbs);
    // SAFETY: the program's argument, unchanged.
    unsafe { f(num) }
}

/// `ibv_open_device`: opens the context, then patches its ops (see `patch_context`).
#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_open_device(dev: *mut IbvDevice) -> *mut IbvContext {
    let Some(f) = real(&REAL_OPEN_DEVICE) else {
        return core::ptr::null_mut();
    };
    hook::start_collector(Layer::Ibverbs);
    after(
        // SAFETY: the program's argument, unchanged.
        || unsafe { f(dev) },
        |ctx| {
            if !ctx.is_null() {
                record_device(ctx, dev);
                // SAFETY: a context just opened, not yet seen by the program.
                unsafe { patch_context(ctx as *mut c_void) };
            }
        },
    )
}

/// `ibv_close_device`: forgets the context's state.
#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_close_device(ctx: *mut IbvContext) -> c_int {
    let Some(f) = real(&REAL_CLOSE_DEVICE) else {
        return -1;
    };
    after(
        // SAFETY: the program's argument, unchanged.
        || unsafe { f(ctx) },
        |r| {
            if r == 0 {
                forget_ctx(ctx);
            }
        },
    )
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_query_device(ctx: *mut IbvContext, attr: Ptr) -> c_int {
    let Some(f) = real(&REAL_QUERY_DEVICE) else {
        return libc::ENOSYS;
    };
    // SAFETY: the program's arguments, unchanged.
    unsafe { f(ctx, attr) }
}

/// The exported (compat) `ibv_query_port`; the `ibv_query_port` macro of verbs.h goes through
/// `verbs_context::query_port` instead.
#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_query_port(ctx: *mut IbvContext, port: u8, attr: Ptr) -> c_int {
    let Some(f) = real(&REAL_QUERY_PORT) else {
        return libc::ENOSYS;
    };
    // SAFETY: the program's arguments, unchanged.
    unsafe { f(ctx, port, attr) }
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_query_gid(
    ctx: *mut IbvContext,
    port: u8,
    index: c_int,
    gid: Ptr,
) -> c_int {
    let Some(f) = real(&REAL_QUERY_GID) else {
        return -1;
    };
    // SAFETY: the program's arguments, unchanged.
    unsafe { f(ctx, port, index, gid) }
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_alloc_pd(ctx: *mut IbvContext) -> Ptr {
    let Some(f) = real(&REAL_ALLOC_PD) else {
        return core::ptr::null_mut();
    };
    // SAFETY: the program's argument, unchanged.
    unsafe { f(ctx) }
}

/// A registered memory region joins the record (`iova`: the address peers use when it is not
/// the region's own).
fn registered(mr: Ptr, iova: Option<u64>, access: u32) {
    if !mr.is_null() {
        // SAFETY: a struct ibv_mr just returned by libibverbs.
        unsafe { crate::runtime::registry::queue_mr(mr, iova, access, true) };
    }
}

/// The exported `ibv_reg_mr` (verbs.h's macro calls it or `ibv_reg_mr_iova2`).
#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_reg_mr(pd: Ptr, addr: Ptr, len: usize, access: c_int) -> Ptr {
    let Some(f) = real(&REAL_REG_MR) else {
        return core::ptr::null_mut();
    };
    after(
        // SAFETY: the program's arguments, unchanged.
        || unsafe { f(pd, addr, len, access) },
        |mr| registered(mr, None, access as u32),
    )
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_reg_mr_iova2(
    pd: Ptr,
    addr: Ptr,
    len: usize,
    iova: u64,
    access: c_uint,
) -> Ptr {
    let Some(f) = real(&REAL_REG_MR_IOVA2) else {
        return core::ptr::null_mut();
    };
    after(
        // SAFETY: the program's arguments, unchanged.
        || unsafe { f(pd, addr, len, iova, access) },
        |mr| registered(mr, Some(iova), access),
    )
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_reg_dmabuf_mr(
    pd: Ptr,
    offset: u64,
    len: usize,
    iova: u64,
    fd: c_int,
    access: c_int,
) -> Ptr {
    let Some(f) = real(&REAL_REG_DMABUF_MR) else {
        return core::ptr::null_mut();
    };
    after(
        // SAFETY: the program's arguments, unchanged.
        || unsafe { f(pd, offset, len, iova, fd, access) },
        |mr| registered(mr, Some(iova), access as u32),
    )
}

/// `ibv_dereg_mr`: the region's fields are read before it is freed, and recorded only when the
/// call succeeds.
#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_dereg_mr(mr: Ptr) -> c_int {
    let Some(f) = real(&REAL_DEREG_MR) else {
        return libc::ENOSYS;
    };
    let mut fields = [0u8; 44];
    if !mr.is_null() && crate::runtime::config::layer_enabled(Layer::Ibverbs) {
        // SAFETY: the program passes a live struct ibv_mr (44 bytes: rdma-core layout).
        unsafe { core::ptr::copy_nonoverlapping(mr.cast::<u8>(), fields.as_mut_ptr(), 44) };
    }
    after(
        // SAFETY: the program's argument, unchanged.
        || unsafe { f(mr) },
        |r| {
            if r == 0 && fields != [0u8; 44] {
                // SAFETY: a copy of the freed struct ibv_mr.
                unsafe {
                    crate::runtime::registry::queue_mr(fields.as_ptr().cast(), None, 0, false)
                }
            }
        },
    )
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_create_cq(
    ctx: *mut IbvContext,
    cqe: c_int,
    user: Ptr,
    channel: Ptr,
    vector: c_int,
) -> Ptr {
    let Some(f) = real(&REAL_CREATE_CQ) else {
        return core::ptr::null_mut();
    };
    // SAFETY: the program's arguments, unchanged.
    after(|| unsafe { f(ctx, cqe, user, channel, vector) }, define_cq)
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_create_srq(pd: Ptr, attr: Ptr) -> Ptr {
    let Some(f) = real(&REAL_CREATE_SRQ) else {
        return core::ptr::null_mut();
    };
    after(
        // SAFETY: the program's arguments, unchanged.
        || unsafe { f(pd, attr) },
        |srq| {
            if !srq.is_null() {
                define_srq(srq)
            }
        },
    )
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_create_qp(pd: Ptr, attr: Ptr) -> *mut IbvQp {
    let Some(f) = real(&REAL_CREATE_QP) else {
        return core::ptr::null_mut();
    };
    after(
        // SAFETY: the program's arguments, unchanged.
        || unsafe { f(pd, attr) },
        // SAFETY: NULL or a QP just created; `attr` is the program's `ibv_qp_init_attr`, whose
        // `sq_sig_all` sits where `ibv_qp_init_attr_ex` has it (the _ex struct extends it).
        |qp| unsafe {
            let sig_all = !attr.is_null() && (*(attr as *const IbvQpInitAttrEx)).sq_sig_all != 0;
            on_qp_created(qp, false, sig_all)
        },
    )
}

/// `ibv_modify_qp`: records INIT / RTR (with the peer QPN and GID) / RTS / ERR transitions.
#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_modify_qp(qp: *mut IbvQp, attr: *mut IbvQpAttr, mask: c_int) -> c_int {
    let Some(f) = real(&REAL_MODIFY_QP) else {
        return libc::ENOSYS;
    };
    after(
        // SAFETY: the program's arguments, unchanged.
        || unsafe { f(qp, attr, mask) },
        |r| {
            if r == 0 {
                // SAFETY: a live QP and the attributes the provider accepted.
                unsafe { on_modify(qp, attr, mask) }
            }
        },
    )
}

#[unsafe(no_mangle)]
unsafe extern "C" fn ibv_destroy_qp(qp: *mut IbvQp) -> c_int {
    let Some(f) = real(&REAL_DESTROY_QP) else {
        return libc::ENOSYS;
    };
    after(
        // SAFETY: the program's argument, unchanged.
        || unsafe { f(qp) },
        |r| {
            if r == 0 {
                on_qp_destroyed(qp)
            }
        },
    )
}
