//! Patching a freshly opened context's ops table: the provider's post_send, post_recv,
//! post_srq_recv, poll_cq (and in full mode req_notify_cq) are kept in its `CtxState` (context.rs)
//! and replaced by the wrappers of data.rs; `verbs_context::create_qp_ex` / `create_cq_ex` by the
//! two wrappers below, which call the provider's and then do the control path's bookkeeping.

use core::ffi::c_void;

use sigmatop::event::Layer;

use super::abi::{
    ABI_IS_EXTENDED, CreateCqExFn, CreateQpExFn, IbvContext, IbvQp, IbvQpInitAttrEx, OPS_POLL_CQ,
    OPS_POST_RECV, OPS_POST_SEND, OPS_POST_SRQ_RECV, OPS_REQ_NOTIFY_CQ, PollCqFn, PostRecvFn,
    PostSendFn, PostSrqRecvFn, QP_INIT_ATTR_SEND_OPS_FLAGS, ReqNotifyFn, VCTX_CREATE_CQ_EX,
    VCTX_CREATE_QP_EX, VCTX_SIZE, VCTX_SZ,
};
use super::context::{CtxState, ctx_state, publish_ctx};
use super::control::{define_cq, on_qp_created};
use super::data::{
    poll_cq_hook, post_recv_hook, post_send_hook, post_srq_recv_hook, req_notify_hook,
};
use super::unpatched;
use crate::runtime::ptrmap::PtrMap;

type Ptr = *mut c_void;

/// Bookkeeping of this layer after a real call: see `hook::after`.
#[inline(always)]
fn after<R: Copy>(call_real: impl FnOnce() -> R, note: impl FnOnce(R)) -> R {
    crate::interpose::hook::after(Some(Layer::Ibverbs), call_real, note)
}

/// Patches the ops of a freshly opened context: the provider's post_send, post_recv,
/// post_srq_recv, poll_cq (and in full mode req_notify_cq) are kept per context and replaced by
/// sigmatop's wrappers; `verbs_context::create_qp_ex` / `create_cq_ex` too where the context is
/// extended and large enough. Idempotent; safe on NULL. For the mlx5dv layer
/// (`mlx5dv_open_device`) as well as `ibv_open_device`.
///
/// # Safety
/// `ctx` is NULL or a live `struct ibv_context` that no other thread uses yet.
pub unsafe fn patch_context(ctx: *mut c_void) {
    let ctx = ctx as *mut IbvContext;
    if ctx.is_null() || !crate::runtime::config::layer_enabled(Layer::Ibverbs) {
        return;
    }
    crate::interpose::hook::guarded((), || {
        // SAFETY: caller's contract.
        unsafe { patch_context_inner(ctx) }
    })
}

unsafe fn patch_context_inner(ctx: *mut IbvContext) {
    let full = crate::runtime::config::full();
    // SAFETY: ctx is live (caller); ops is embedded in it.
    let ops = unsafe { core::ptr::addr_of_mut!((*ctx).ops) as *mut usize };
    // SAFETY: indices are below 32.
    let slot = |i: usize| unsafe { ops.add(i).read() };
    let ours: [(usize, usize); 5] = [
        (OPS_POST_SEND, post_send_hook as PostSendFn as usize),
        (OPS_POST_RECV, post_recv_hook as PostRecvFn as usize),
        (
            OPS_POST_SRQ_RECV,
            post_srq_recv_hook as PostSrqRecvFn as usize,
        ),
        (OPS_POLL_CQ, poll_cq_hook as PollCqFn as usize),
        (OPS_REQ_NOTIFY_CQ, req_notify_hook as ReqNotifyFn as usize),
    ];
    // Already patched (a second call for the same context): keep the first originals.
    if ours.iter().any(|&(i, f)| slot(i) == f) {
        return;
    }
    // SAFETY: abi_compat is a plain field of the context.
    let extended = unsafe { (*ctx).abi_compat } as usize == ABI_IS_EXTENDED;
    let sz = if extended {
        // SAFETY: an extended context is the last member of a verbs_context, whose `sz` precedes
        // it.
        unsafe { *((ctx as *const u8).offset(VCTX_SZ) as *const usize) }
    } else {
        0
    };
    let has = |off: isize| extended && sz >= (VCTX_SIZE as isize + off) as usize;
    let vptr = |off: isize| (ctx as *mut u8).wrapping_offset(off) as *mut usize;
    let vread = |off: isize| {
        if has(off) {
            // SAFETY: the vctx slot exists when `has(off)` (the verbs_get_ctx_op rule).
            unsafe { vptr(off).read() }
        } else {
            0
        }
    };
    // SAFETY: (all transmutes below) each value is NULL or the provider's function of that
    // slot's signature; Option<fn> has the NULL niche.
    let st = unsafe {
        CtxState {
            post_send: core::mem::transmute::<usize, Option<PostSendFn>>(slot(OPS_POST_SEND)),
            post_recv: core::mem::transmute::<usize, Option<PostRecvFn>>(slot(OPS_POST_RECV)),
            post_srq_recv: core::mem::transmute::<usize, Option<PostSrqRecvFn>>(slot(
                OPS_POST_SRQ_RECV,
            )),
            poll_cq: core::mem::transmute::<usize, Option<PollCqFn>>(slot(OPS_POLL_CQ)),
            req_notify_cq: core::mem::transmute::<usize, Option<ReqNotifyFn>>(slot(
                OPS_REQ_NOTIFY_CQ,
            )),
            create_qp_ex: core::mem::transmute::<usize, Option<CreateQpExFn>>(vread(
                VCTX_CREATE_QP_EX,
            )),
            create_cq_ex: core::mem::transmute::<usize, Option<CreateCqExFn>>(vread(
                VCTX_CREATE_CQ_EX,
            )),
            qpns: PtrMap::new(),
        }
    };
    let (ps, pr, psr, pc, rn, cq, cc) = (
        st.post_send.is_some(),
        st.post_recv.is_some(),
        st.post_srq_recv.is_some(),
        st.poll_cq.is_some(),
        st.req_notify_cq.is_some(),
        st.create_qp_ex.is_some(),
        st.create_cq_ex.is_some(),
    );
    if !publish_ctx(ctx, st) {
        unpatched("too many open contexts");
        return;
    }
    // SAFETY: writes the context's own ops copy (and its verbs_context slots), which the program
    // does not use before ibv_open_device returned it.
    unsafe {
        if ps {
            ops.add(OPS_POST_SEND).write_volatile(ours[0].1);
        }
        if pr {
            ops.add(OPS_POST_RECV).write_volatile(ours[1].1);
        }
        if psr {
            ops.add(OPS_POST_SRQ_RECV).write_volatile(ours[2].1);
        }
        if pc {
            // Every mode: receive completions are where received bytes come from.
            ops.add(OPS_POLL_CQ).write_volatile(ours[3].1);
        }
        if full && rn {
            ops.add(OPS_REQ_NOTIFY_CQ).write_volatile(ours[4].1);
        }
        if cq {
            vptr(VCTX_CREATE_QP_EX).write_volatile(create_qp_ex_hook as CreateQpExFn as usize);
        }
        if cc {
            vptr(VCTX_CREATE_CQ_EX).write_volatile(create_cq_ex_hook as CreateCqExFn as usize);
        }
    }
}

/// `verbs_context::create_cq_ex` of patched contexts (verbs.h's inline ibv_create_cq_ex).
pub(super) unsafe extern "C" fn create_cq_ex_hook(ctx: *mut IbvContext, attr: Ptr) -> Ptr {
    let Some(f) = ctx_state(ctx).and_then(|s| s.create_cq_ex) else {
        crate::runtime::os::set_errno(libc::EOPNOTSUPP);
        return core::ptr::null_mut();
    };
    // SAFETY: the program's arguments, unchanged.
    after(
        || unsafe { f(ctx, attr) },
        |cq| {
            define_cq(cq);
            // Polled with ibv_start_poll / ibv_next_poll, which sigmatop does not see.
            super::queues::note_cq_ex(cq as usize);
        },
    )
}

/// `verbs_context::create_qp_ex` of patched contexts (verbs.h's inline ibv_create_qp_ex).
pub(super) unsafe extern "C" fn create_qp_ex_hook(
    ctx: *mut IbvContext,
    attr: *mut IbvQpInitAttrEx,
) -> *mut IbvQp {
    let Some(f) = ctx_state(ctx).and_then(|s| s.create_qp_ex) else {
        crate::runtime::os::set_errno(libc::EOPNOTSUPP);
        return core::ptr::null_mut();
    };
    after(
        // SAFETY: the program's arguments, unchanged.
        || unsafe { f(ctx, attr) },
        |qp| {
            // SAFETY: the program's attributes (read after the provider did); NULL or a new QP.
            unsafe {
                let ex = !attr.is_null()
                    && (*attr).comp_mask & QP_INIT_ATTR_SEND_OPS_FLAGS != 0
                    && (*attr).send_ops_flags != 0;
                let sig_all = !attr.is_null() && (*attr).sq_sig_all != 0;
                on_qp_created(qp, ex, sig_all);
            }
        },
    )
}
