//! Each opened context's ops table: the provider's post_send, post_recv, post_srq_recv, poll_cq
//! (and in full mode req_notify_cq) are kept per context and replaced by the wrappers of
//! data.rs; `verbs_context::create_qp_ex` / `create_cq_ex` by those of exports.rs. Also the
//! device identity (name, node GUID, GIDs) of each context.

use core::ffi::{c_int, c_void};
use std::collections::HashMap;
use std::sync::Mutex;

use sigmatop::event::Layer;

use super::abi::{
    ABI_IS_EXTENDED, CreateCqExFn, CreateQpExFn, IbvContext, IbvDevice, OPS_POLL_CQ, OPS_POST_RECV,
    OPS_POST_SEND, OPS_POST_SRQ_RECV, OPS_REQ_NOTIFY_CQ, PollCqFn, PostRecvFn, PostSendFn,
    PostSrqRecvFn, ReqNotifyFn, VCTX_CREATE_CQ_EX, VCTX_CREATE_QP_EX, VCTX_SIZE, VCTX_SZ,
};
use super::data::{
    poll_cq_hook, post_recv_hook, post_send_hook, post_srq_recv_hook, req_notify_hook,
};
use super::exports::{REAL_QUERY_GID, REAL_QUERY_PORT, create_cq_ex_hook, create_qp_ex_hook};
use super::{SONAMES, unpatched};
use crate::dl::real_fns;
use crate::ptrmap::PtrMap;

real_fns! { SONAMES;
    REAL_GET_DEVICE_GUID: unsafe extern "C" fn(*mut IbvDevice) -> u64 = c"ibv_get_device_guid";
}

/// Where the receive completions of one QP of a context are counted (a map value): the endpoint
/// (the QP's, or its SRQ's), whether that is an SRQ, whether the QP is UD (whose `byte_len`
/// includes the 40-byte GRH area ahead of the payload).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecvTarget {
    pub ep: u32,
    pub srq: bool,
    pub ud: bool,
    /// The QP's own endpoint, where its error completions count (`ep` is its SRQ's when it has
    /// one); 0 when unknown (an id past `QP_ID_LIMIT`).
    pub qp: u32,
}

/// Endpoint ids that fit the 29 bits a `RecvTarget` keeps for its QP.
const QP_ID_LIMIT: u32 = 1 << 29;

impl RecvTarget {
    fn pack(self) -> u64 {
        let qp = if self.qp < QP_ID_LIMIT { self.qp } else { 0 };
        self.ep as u64
            | (self.srq as u64) << 32
            | (self.ud as u64) << 33
            | 1 << 34
            | (qp as u64) << 35
    }
    fn unpack(v: u64) -> Option<RecvTarget> {
        (v != 0).then_some(RecvTarget {
            ep: v as u32,
            srq: v & 1 << 32 != 0,
            ud: v & 1 << 33 != 0,
            qp: (v >> 35) as u32,
        })
    }
}

/// The provider's functions of one context, kept when its ops were patched, and the QPs whose
/// receive completions its CQs report (by QPN, as work completions name them).
pub struct CtxState {
    pub post_send: Option<PostSendFn>,
    pub post_recv: Option<PostRecvFn>,
    pub post_srq_recv: Option<PostSrqRecvFn>,
    pub poll_cq: Option<PollCqFn>,
    pub req_notify_cq: Option<ReqNotifyFn>,
    pub create_qp_ex: Option<CreateQpExFn>,
    pub create_cq_ex: Option<CreateCqExFn>,
    /// QPN (as `(qpn + 1) << 3`) → packed `RecvTarget`. Most contexts have one QP or a few: the
    /// first is found without hashing.
    qpns: PtrMap<u64, 2048, true>,
}

impl CtxState {
    /// Where the receive completions of QP `qpn` are counted, if the QP was seen created.
    #[inline(always)]
    pub fn recv_target(&self, qpn: u32) -> Option<RecvTarget> {
        self.qpns
            .get(((qpn as usize) + 1) << 3)
            .and_then(RecvTarget::unpack)
    }
}

/// A QP of `ctx` was created: its receive completions count on `t`. Control path.
pub fn note_qp(ctx: *mut IbvContext, qpn: u32, t: RecvTarget) {
    if let Some(st) = ctx_state(ctx)
        && !st.qpns.insert(((qpn as usize) + 1) << 3, t.pack())
    {
        crate::config::warn(
            "ibverbs: too many QPs on one context: receive completions of further QPs count on their CQ".into(),
        );
    }
}

/// A QP of `ctx` was destroyed (its QPN may be reused).
pub fn forget_qp(ctx: *mut IbvContext, qpn: u32) {
    if let Some(st) = ctx_state(ctx) {
        st.qpns.clear(((qpn as usize) + 1) << 3);
    }
}

/// Patched contexts → their originals (states are leaked, never freed: a racing reader of a
/// closed context's slot never sees freed memory). Most programs open one context: the first is
/// found without hashing (`FRONT`).
static CTXS: PtrMap<*const CtxState, 256, true> = PtrMap::new();

/// The originals of `ctx`.
#[inline(always)]
pub fn ctx_state(ctx: *mut IbvContext) -> Option<&'static CtxState> {
    let p = CTXS.get(ctx as usize)?;
    // SAFETY: states are leaked, never freed; null is a closed context's cleared entry.
    unsafe { p.as_ref() }
}

/// Publishes `st` for `ctx` (replacing a state of an earlier context at the same address).
fn publish_ctx(ctx: *mut IbvContext, st: CtxState) -> bool {
    let p = Box::into_raw(Box::new(st));
    if CTXS.insert(ctx as usize, p as *const CtxState) {
        return true;
    }
    // SAFETY: never published: ours alone.
    drop(unsafe { Box::from_raw(p) });
    false
}

/// The context is closed: its calls are no longer ours to wrap.
pub fn forget_ctx(ctx: *mut IbvContext) {
    CTXS.clear(ctx as usize);
}

/// Device identity of an opened context (control path).
#[derive(Clone, Default)]
pub struct DevInfo {
    pub name: String,
    pub guid: u64,
}

static DEVS: Mutex<Option<HashMap<usize, DevInfo>>> = Mutex::new(None);

/// The device table's, the context map's and every context's QP-number map's locks, for
/// `fork::prepare` (leaves).
pub(super) fn hold_for_fork(h: &mut crate::fork::Held) {
    h.lock(&DEVS);
    h.with(|| CTXS.try_lock_writers());
    for st in CTXS.values() {
        // SAFETY: context states are leaked, never freed.
        if let Some(st) = unsafe { st.as_ref() } {
            h.with(|| st.qpns.try_lock_writers());
        }
    }
}

pub fn dev_info(ctx: *mut IbvContext) -> DevInfo {
    DEVS.lock()
        .ok()
        .and_then(|m| m.as_ref().and_then(|m| m.get(&(ctx as usize)).cloned()))
        .unwrap_or_default()
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
    if ctx.is_null() || !crate::config::layer_enabled(Layer::Ibverbs) {
        return;
    }
    crate::hook::guarded((), || {
        // SAFETY: caller's contract.
        unsafe { patch_context_inner(ctx) }
    })
}

unsafe fn patch_context_inner(ctx: *mut IbvContext) {
    let full = crate::config::full();
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

/// The GID at `index` of `port` of a device context this layer saw opened (ibv_open_device or
/// mlx5dv_open_device on a real device); None for any other pointer, which is never
/// dereferenced (an emulated devx context is no ibv_context).
pub fn device_gid(ctx: usize, port: u8, index: u8) -> Option<[u8; 16]> {
    let known = DEVS
        .lock()
        .ok()
        .is_some_and(|m| m.as_ref().is_some_and(|m| m.contains_key(&ctx)));
    if !known {
        return None;
    }
    query_gid(ctx, port, index as c_int)
}

/// The LID of `port` of a device context this layer saw opened (None: another pointer, never
/// dereferenced, or LID 0, as on RoCE).
pub fn device_lid(ctx: usize, port: u8) -> Option<u16> {
    let known = DEVS
        .lock()
        .ok()
        .is_some_and(|m| m.as_ref().is_some_and(|m| m.contains_key(&ctx)));
    if !known {
        return None;
    }
    port_lid(ctx, port)
}

/// The LID of `port` of a context, read with the real exported `ibv_query_port`, which fills
/// the older `struct _compat_ibv_port_attr` (lid: the u16 at offset 34); None when it fails or
/// the LID is 0 (RoCE).
pub fn port_lid(ctx: usize, port: u8) -> Option<u16> {
    let f = REAL_QUERY_PORT.get()?;
    // Larger than the compat struct (48 bytes) and than today's (56): the library fills its own.
    let mut a = [0u64; 16];
    // SAFETY: a live context and a zeroed, aligned 128-byte output.
    let r = unsafe {
        f(
            ctx as *mut IbvContext,
            port.max(1),
            a.as_mut_ptr() as *mut c_void,
        )
    };
    if r != 0 {
        return None;
    }
    // SAFETY: 128 bytes of plain integers; read two of them as bytes.
    let b = unsafe { core::slice::from_raw_parts(a.as_ptr() as *const u8, 128) };
    let lid = u16::from_ne_bytes([b[34], b[35]]);
    (lid != 0).then_some(lid)
}

/// The GID at `index` of `port` of a context, read with the real ibv_query_gid.
pub fn query_gid(ctx: usize, port: u8, index: c_int) -> Option<[u8; 16]> {
    let f = REAL_QUERY_GID.get()?;
    let mut g = [0u8; 16];
    // SAFETY: a live context and a 16-byte output.
    let r = unsafe {
        f(
            ctx as *mut IbvContext,
            port,
            index,
            g.as_mut_ptr() as *mut c_void,
        )
    };
    (r == 0).then_some(g)
}

/// Remembers the device name and node GUID of a context (control path).
pub fn record_device(ctx: *mut IbvContext, dev: *mut IbvDevice) {
    let mut info = DevInfo::default();
    if !dev.is_null() {
        // SAFETY: a live ibv_device: name is a NUL-terminated array of 64.
        let name = unsafe { &(*dev).name };
        let bytes: Vec<u8> = name
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        info.name = String::from_utf8_lossy(&bytes).into_owned();
        if let Some(g) = REAL_GET_DEVICE_GUID.get() {
            // SAFETY: a live device.
            info.guid = u64::from_be(unsafe { g(dev) });
        }
    }
    if let Ok(mut m) = DEVS.lock() {
        m.get_or_insert_with(HashMap::new)
            .insert(ctx as usize, info);
    }
}

/// Public for the mlx5dv layer: records the device of a context it opened.
pub fn note_device(ctx: *mut c_void, dev: *mut c_void) {
    crate::hook::guarded((), || {
        record_device(ctx as *mut IbvContext, dev as *mut IbvDevice)
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_gid_reads_only_contexts_it_saw_opened() {
        // An emulated devx context (or any pointer) is never passed to ibv_query_gid.
        let fake = [0u8; 64];
        assert_eq!(device_gid(fake.as_ptr() as usize, 1, 0), None);
        assert_eq!(device_gid(0, 1, 0), None);
    }
}
