//! libibverbs layer (rdma-core 44 ABI, x86_64).
//!
//! Control path: the exported verbs (`ibv_get_device_list`, `ibv_open_device`, `ibv_create_qp`,
//! `ibv_modify_qp`, ...) are interposed as plain exports and handed out by the dlsym/dlvsym
//! wrappers (any symbol version). They call the real function first and then do their
//! bookkeeping; errno is preserved, so a program sees exactly what libibverbs returned.
//!
//! Data path: `ibv_post_send`, `ibv_post_recv`, `ibv_post_srq_recv`, `ibv_poll_cq` and
//! `ibv_req_notify_cq` are inline functions in `verbs.h` that jump through `ctx->ops`, a table
//! embedded by value in every `ibv_context`. Right after a context opens (`ibv_open_device`, or
//! `patch_context` from the mlx5dv layer) sigmatop keeps the provider's pointers in a per-context
//! `CtxState` and writes its wrappers into the context's own copy. `verbs_context::create_qp_ex`
//! and `create_cq_ex` (below the `ibv_context`, guarded by `sz`) are wrapped the same way, so QPs
//! and CQs made through the inline `_ex` calls are seen too. A QP created with
//! `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS` posts through the per-QP `ibv_qp_ex` `wr_*` pointers: those
//! are replaced in place, the provider's kept in a per-QP `QpxState`; WRs are collected between
//! `wr_start` and `wr_complete` and recorded when `wr_complete` succeeds.
//!
//! What is recorded (endpoint = the QP, SRQ or CQ):
//! - post_send / wr_complete: one op per WR the provider accepted: opcode → `Op::Verbs*`,
//!   bytes = sum of the SGE lengths (inline data length for `wr_set_inline_data*`), addr = remote
//!   address (RDMA and atomics), aux = low 16 bits of the rkey, flags INLINE / SIGNALED. When the
//!   provider refuses a WR (`*bad_wr`), the WRs before it are recorded normally, the refused one
//!   with `flags::ERROR` and 0 bytes, and nothing after it (the provider never read those).
//! - post_recv / post_srq_recv: one RECV / SRQ_RECV per WR, bytes = posted buffer capacity.
//! - poll_cq (full mode only; the wrapper is not even installed otherwise): one event per call
//!   that returned completions or an error, on the CQ: bytes = completions, addr = sum of their
//!   `byte_len`, aux = (bitmask of completion opcode classes << 8) | error completions (saturated
//!   at 255), `flags::ERROR` when any completion failed or the call failed.
//! - req_notify_cq (full mode only): `Op::VerbsOther`, 0 bytes, on the CQ endpoint.
//!
//! The data path is counted even when it runs inside another layer's hook (UCX over rc_verbs,
//! libfabric's verbs provider): those are different layers of the same traffic, so the verbs
//! wrappers use the thread state without the cross-layer re-entrancy guard.
//!
//! Bad input: a NULL WR list is passed through and counted in `UNTRACED` (and in the hook-failure
//! drop counter); the walk stops at NULL, at the WR the provider refused, or after `WALK_MAX` WRs
//! (the rest is counted in `UNTRACED`). Only WRs the provider itself read are ever read.
//!
//! Peer identity: a QP's peer is the pair (GID, QPN). Both sides hash the same 20 bytes with
//! FNV-1a: the 16 GID bytes followed by the QPN as u32 little-endian. A QP's RTR transition puts
//! hash(remote GID from `ah_attr.grh.dgid`, `dest_qp_num`) in its `Peer::addr_hash` and adds
//! hash(local GID at `ah_attr.grh.sgid_index` of the port, own QPN) to this process's own
//! addresses, so the peer QP's endpoint (in another process or node) resolves to this one. The
//! RTR update's text also names the local device, port, node GUID, GID and path MTU.

use core::cell::UnsafeCell;
use core::ffi::{CStr, c_char, c_int, c_uint, c_void};
use core::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::collections::HashMap;
use std::sync::Mutex;

use sigmatop::event::{EndpointDef, EndpointKind, Layer, Op, Peer, flags, fnv1a64};

use crate::dl::{Hook, RealSlot as RealFn};
use crate::thread::ThreadState;

const SONAMES: &[&CStr] = &[c"libibverbs.so.1", c"libibverbs.so"];

/// WRs walked per post call at most; the rest of a longer chain is counted in `UNTRACED`.
pub const WALK_MAX: usize = 4096;
/// SGEs summed per WR at most.
const SGE_MAX: usize = 1024;

/// Calls or WRs that went through untraced (NULL list, walk bound, unknown failure position).
pub static UNTRACED: AtomicU64 = AtomicU64::new(0);
/// Contexts or QPs whose tables sigmatop could not patch (their traffic is not seen).
pub static UNPATCHED: AtomicU64 = AtomicU64::new(0);

#[cold]
fn untraced(n: u64) {
    UNTRACED.fetch_add(n, Ordering::Relaxed);
    crate::HOOK_FAILURES.fetch_add(n, Ordering::Relaxed);
}

#[cold]
fn unpatched(what: &str) {
    UNPATCHED.fetch_add(1, Ordering::Relaxed);
    crate::HOOK_FAILURES.fetch_add(1, Ordering::Relaxed);
    crate::config::warn(format!("ibverbs: {what}: its traffic is not traced"));
}

// ---------------------------------------------------------------------------------------------
// rdma-core 44 ABI (infiniband/verbs.h). Offsets are checked against the installed header by the
// `abi_matches_verbs_h` test.
// ---------------------------------------------------------------------------------------------

#[repr(C)]
pub struct IbvSge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

#[repr(C)]
pub struct IbvSendWr {
    pub wr_id: u64,
    pub next: *mut IbvSendWr,
    pub sg_list: *mut IbvSge,
    pub num_sge: c_int,
    pub opcode: c_uint,
    pub send_flags: c_uint,
    pub imm_data: u32,
    /// `wr.rdma.remote_addr` / `wr.atomic.remote_addr` / `wr.ud.ah`.
    pub remote_addr: u64,
    /// `wr.rdma.rkey` (low 32 bits) / `wr.atomic.compare_add` / `wr.ud.remote_qpn`.
    pub w1: u64,
    /// `wr.atomic.swap`.
    pub w2: u64,
    /// `wr.atomic.rkey` (low 32 bits).
    pub w3: u64,
    pub tail: [u64; 7],
}

#[repr(C)]
pub struct IbvRecvWr {
    pub wr_id: u64,
    pub next: *mut IbvRecvWr,
    pub sg_list: *mut IbvSge,
    pub num_sge: c_int,
}

#[repr(C)]
pub struct IbvWc {
    pub wr_id: u64,
    pub status: c_uint,
    pub opcode: c_uint,
    pub vendor_err: u32,
    pub byte_len: u32,
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: c_uint,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

/// The leading fields of `struct ibv_qp` (the rest is never touched).
#[repr(C)]
pub struct IbvQp {
    pub context: *mut IbvContext,
    pub qp_context: *mut c_void,
    pub pd: *mut c_void,
    pub send_cq: *mut c_void,
    pub recv_cq: *mut c_void,
    pub srq: *mut c_void,
    pub handle: u32,
    pub qp_num: u32,
    pub state: c_uint,
    pub qp_type: c_uint,
}

/// `struct ibv_context`: its ops table is 32 pointers.
#[repr(C)]
pub struct IbvContext {
    pub device: *mut IbvDevice,
    pub ops: [usize; 32],
    pub cmd_fd: c_int,
    pub async_fd: c_int,
    pub num_comp_vectors: c_int,
    pub mutex: [u64; 5],
    pub abi_compat: *mut c_void,
}

/// Slots of `ibv_context_ops` sigmatop wraps (index in `IbvContext::ops`).
pub const OPS_POLL_CQ: usize = 11;
pub const OPS_REQ_NOTIFY_CQ: usize = 12;
pub const OPS_POST_SRQ_RECV: usize = 20;
pub const OPS_POST_SEND: usize = 25;
pub const OPS_POST_RECV: usize = 26;

/// `verbs_context` fields, relative to the `ibv_context` pointer (it is the last member).
const VCTX_SZ: isize = -8;
const VCTX_CREATE_QP_EX: isize = -56;
const VCTX_CREATE_CQ_EX: isize = -120;
/// `sizeof(struct verbs_context)` in rdma-core 44.
const VCTX_SIZE: usize = 648;
/// `__VERBS_ABI_IS_EXTENDED`.
const ABI_IS_EXTENDED: usize = usize::MAX;

/// The leading fields of `struct ibv_device`.
#[repr(C)]
pub struct IbvDevice {
    pub ops: [usize; 2],
    pub node_type: c_int,
    pub transport_type: c_int,
    pub name: [c_char; 64],
}

#[repr(C)]
pub struct IbvGlobalRoute {
    pub dgid: [u8; 16],
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

#[repr(C)]
pub struct IbvAhAttr {
    pub grh: IbvGlobalRoute,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

#[repr(C)]
pub struct IbvQpAttr {
    pub qp_state: c_uint,
    pub cur_qp_state: c_uint,
    pub path_mtu: c_uint,
    pub path_mig_state: c_uint,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: c_uint,
    pub cap: [u32; 5],
    pub ah_attr: IbvAhAttr,
    pub alt_ah_attr: IbvAhAttr,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
}

/// The leading fields of `struct ibv_qp_init_attr_ex`.
#[repr(C)]
pub struct IbvQpInitAttrEx {
    pub qp_context: *mut c_void,
    pub send_cq: *mut c_void,
    pub recv_cq: *mut c_void,
    pub srq: *mut c_void,
    pub cap: [u32; 5],
    pub qp_type: c_uint,
    pub sq_sig_all: c_int,
    pub comp_mask: u32,
    pub pd: *mut c_void,
    pub xrcd: *mut c_void,
    pub create_flags: u32,
    pub max_tso_header: u16,
    pub rwq_ind_tbl: *mut c_void,
    pub rx_hash_conf: [u64; 3],
    pub source_qpn: u32,
    pub send_ops_flags: u64,
}

/// `struct ibv_data_buf`.
#[repr(C)]
pub struct IbvDataBuf {
    pub addr: *mut c_void,
    pub length: usize,
}

/// `struct ibv_qp_ex` (rdma-core 44: 352 bytes; newer versions append after `wr_atomic_write`).
#[repr(C)]
pub struct IbvQpEx {
    pub qp_base: [u64; 20],
    pub comp_mask: u64,
    pub wr_id: u64,
    pub wr_flags: c_uint,
    pub fns: QpExFns,
}

type Qx = *mut IbvQpEx;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct QpExFns {
    pub wr_atomic_cmp_swp: Option<unsafe extern "C" fn(Qx, u32, u64, u64, u64)>,
    pub wr_atomic_fetch_add: Option<unsafe extern "C" fn(Qx, u32, u64, u64)>,
    pub wr_bind_mw: Option<unsafe extern "C" fn()>,
    pub wr_local_inv: Option<unsafe extern "C" fn(Qx, u32)>,
    pub wr_rdma_read: Option<unsafe extern "C" fn(Qx, u32, u64)>,
    pub wr_rdma_write: Option<unsafe extern "C" fn(Qx, u32, u64)>,
    pub wr_rdma_write_imm: Option<unsafe extern "C" fn(Qx, u32, u64, u32)>,
    pub wr_send: Option<unsafe extern "C" fn(Qx)>,
    pub wr_send_imm: Option<unsafe extern "C" fn(Qx, u32)>,
    pub wr_send_inv: Option<unsafe extern "C" fn(Qx, u32)>,
    pub wr_send_tso: Option<unsafe extern "C" fn()>,
    pub wr_set_ud_addr: Option<unsafe extern "C" fn()>,
    pub wr_set_xrc_srqn: Option<unsafe extern "C" fn()>,
    pub wr_set_inline_data: Option<unsafe extern "C" fn(Qx, *mut c_void, usize)>,
    pub wr_set_inline_data_list: Option<unsafe extern "C" fn(Qx, usize, *const IbvDataBuf)>,
    pub wr_set_sge: Option<unsafe extern "C" fn(Qx, u32, u64, u32)>,
    pub wr_set_sge_list: Option<unsafe extern "C" fn(Qx, usize, *const IbvSge)>,
    pub wr_start: Option<unsafe extern "C" fn(Qx)>,
    pub wr_complete: Option<unsafe extern "C" fn(Qx) -> c_int>,
    pub wr_abort: Option<unsafe extern "C" fn(Qx)>,
    pub wr_atomic_write: Option<unsafe extern "C" fn(Qx, u32, u64, *const c_void)>,
}

// enum ibv_wr_opcode
const WR_RDMA_WRITE: u32 = 0;
const WR_RDMA_WRITE_WITH_IMM: u32 = 1;
const WR_SEND: u32 = 2;
const WR_SEND_WITH_IMM: u32 = 3;
const WR_RDMA_READ: u32 = 4;
const WR_ATOMIC_CMP_AND_SWP: u32 = 5;
const WR_ATOMIC_FETCH_AND_ADD: u32 = 6;
const WR_SEND_WITH_INV: u32 = 9;
const WR_TSO: u32 = 10;
// enum ibv_send_flags
const SEND_SIGNALED: u32 = 1 << 1;
const SEND_INLINE: u32 = 1 << 3;
// enum ibv_qp_attr_mask
const QP_STATE: c_int = 1 << 0;
const QP_PORT: c_int = 1 << 5;
const QP_AV: c_int = 1 << 7;
const QP_PATH_MTU: c_int = 1 << 8;
const QP_DEST_QPN: c_int = 1 << 20;
// enum ibv_qp_init_attr_mask
const QP_INIT_ATTR_SEND_OPS_FLAGS: u32 = 1 << 6;

type PostSendFn = unsafe extern "C" fn(*mut IbvQp, *mut IbvSendWr, *mut *mut IbvSendWr) -> c_int;
type PostRecvFn = unsafe extern "C" fn(*mut IbvQp, *mut IbvRecvWr, *mut *mut IbvRecvWr) -> c_int;
type PostSrqRecvFn =
    unsafe extern "C" fn(*mut c_void, *mut IbvRecvWr, *mut *mut IbvRecvWr) -> c_int;
type PollCqFn = unsafe extern "C" fn(*mut c_void, c_int, *mut IbvWc) -> c_int;
type ReqNotifyFn = unsafe extern "C" fn(*mut c_void, c_int) -> c_int;
type CreateQpExFn = unsafe extern "C" fn(*mut IbvContext, *mut IbvQpInitAttrEx) -> *mut IbvQp;
type CreateCqExFn = unsafe extern "C" fn(*mut IbvContext, *mut c_void) -> *mut c_void;

/// The first field of ibv_qp, ibv_cq and ibv_srq is their context.
///
/// # Safety
/// `obj` is a live verbs object (QP, CQ or SRQ).
#[inline(always)]
unsafe fn ctx_of(obj: *mut c_void) -> *mut IbvContext {
    // SAFETY: caller's contract.
    unsafe { *(obj as *const *mut IbvContext) }
}

// ---------------------------------------------------------------------------------------------
// Per-context originals.
// ---------------------------------------------------------------------------------------------

/// The provider's functions of one context, kept when its ops were patched.
pub struct CtxState {
    ctx: AtomicUsize,
    post_send: Option<PostSendFn>,
    post_recv: Option<PostRecvFn>,
    post_srq_recv: Option<PostSrqRecvFn>,
    poll_cq: Option<PollCqFn>,
    req_notify_cq: Option<ReqNotifyFn>,
    create_qp_ex: Option<CreateQpExFn>,
    create_cq_ex: Option<CreateCqExFn>,
}

const MAX_CTX: usize = 256;
static CTXS: [AtomicPtr<CtxState>; MAX_CTX] =
    [const { AtomicPtr::new(core::ptr::null_mut()) }; MAX_CTX];
static NCTX: AtomicUsize = AtomicUsize::new(0);
static CTX_INSERT: Mutex<()> = Mutex::new(());

/// The originals of `ctx`: a scan of the few contexts a process opens (one compare for most).
#[inline(always)]
fn ctx_state(ctx: *mut IbvContext) -> Option<&'static CtxState> {
    // The first context (most programs open one) is checked without the loop.
    let p = CTXS[0].load(Ordering::Acquire);
    // SAFETY: states are leaked, never freed.
    if !p.is_null() && unsafe { (*p).ctx.load(Ordering::Relaxed) } == ctx as usize {
        return Some(unsafe { &*p });
    }
    let n = NCTX.load(Ordering::Acquire);
    for slot in CTXS.iter().take(n) {
        let p = slot.load(Ordering::Acquire);
        // SAFETY: states are leaked, never freed.
        if !p.is_null() && unsafe { (*p).ctx.load(Ordering::Relaxed) } == ctx as usize {
            return Some(unsafe { &*p });
        }
    }
    None
}

/// Publishes `st` for its context (replacing a state of an earlier context at the same address).
fn publish_ctx(st: CtxState) -> bool {
    let Ok(_g) = CTX_INSERT.lock() else {
        return false;
    };
    let ctx = st.ctx.load(Ordering::Relaxed);
    let n = NCTX.load(Ordering::Acquire);
    let mut free = None;
    for (i, slot) in CTXS.iter().enumerate().take(n) {
        let p = slot.load(Ordering::Acquire);
        // SAFETY: states are leaked, never freed.
        let c = if p.is_null() {
            0
        } else {
            unsafe { (*p).ctx.load(Ordering::Relaxed) }
        };
        if c == ctx {
            free = Some(i);
            break;
        }
        if c == 0 && free.is_none() {
            free = Some(i);
        }
    }
    let i = match free {
        Some(i) => i,
        None if n < MAX_CTX => n,
        None => return false,
    };
    let p = Box::into_raw(Box::new(st));
    CTXS[i].store(p, Ordering::Release);
    if i == n {
        NCTX.store(n + 1, Ordering::Release);
    }
    true
}

/// Device identity of an opened context (control path).
#[derive(Clone, Default)]
struct DevInfo {
    name: String,
    guid: u64,
}

static DEVS: Mutex<Option<HashMap<usize, DevInfo>>> = Mutex::new(None);

fn dev_info(ctx: *mut IbvContext) -> DevInfo {
    DEVS.lock()
        .ok()
        .and_then(|m| m.as_ref().and_then(|m| m.get(&(ctx as usize)).cloned()))
        .unwrap_or_default()
}

/// Patches the ops of a freshly opened context: the provider's post_send, post_recv,
/// post_srq_recv (and in full mode poll_cq, req_notify_cq) are kept per context and replaced by
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
    crate::guarded((), || {
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
    // SAFETY: an extended context is the last member of a verbs_context, whose `sz` precedes it.
    let sz = if extended {
        unsafe { *((ctx as *const u8).offset(VCTX_SZ) as *const usize) }
    } else {
        0
    };
    let has = |off: isize| extended && sz >= (VCTX_SIZE as isize + off) as usize;
    let vptr = |off: isize| (ctx as *mut u8).wrapping_offset(off) as *mut usize;
    // SAFETY: the vctx slot exists when `has(off)` (the verbs_get_ctx_op rule).
    let vread = |off: isize| {
        if has(off) {
            unsafe { vptr(off).read() }
        } else {
            0
        }
    };
    // SAFETY (all transmutes below): each value is NULL or the provider's function of that slot's
    // signature; Option<fn> has the NULL niche.
    let st = unsafe {
        CtxState {
            ctx: AtomicUsize::new(ctx as usize),
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
    if !publish_ctx(st) {
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
        if full && pc {
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

// ---------------------------------------------------------------------------------------------
// Data path.
// ---------------------------------------------------------------------------------------------

/// The thread state for a data-path wrapper (see the module doc: no cross-layer guard).
#[inline(always)]
fn data_enter() -> Option<&'static ThreadState> {
    crate::thread::current()
}

#[inline(always)]
fn send_op(opcode: u32) -> Op {
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
fn send_flags(f: u32) -> u8 {
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
unsafe fn sge_bytes(sg: *const IbvSge, n: c_int) -> u64 {
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

/// Records one WR the provider accepted.
///
/// # Safety
/// `p` is a WR the provider read.
#[inline(always)]
unsafe fn record_one_send(ts: &ThreadState, ep: u32, p: *const IbvSendWr) {
    // SAFETY: caller's contract; only fields the provider itself reads.
    unsafe {
        let opcode = core::ptr::addr_of!((*p).opcode).read();
        let bytes = sge_bytes(
            core::ptr::addr_of!((*p).sg_list).read(),
            core::ptr::addr_of!((*p).num_sge).read(),
        );
        if !crate::config::events_enabled() {
            ts.count(ep, send_op(opcode), bytes, false);
            return;
        }
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
        ts.record_flags(
            ep,
            send_op(opcode),
            bytes,
            addr,
            send_flags(sf),
            rkey as u16,
        );
    }
}

/// Records the WRs of a post_send chain the provider read: all of them when `r == 0`, else those
/// before `*bad` (and `*bad` itself as an error).
///
/// # Safety
/// `wr` is the chain the provider was given; `bad` is the program's bad_wr pointer (or NULL).
#[inline(never)]
unsafe fn record_send_chain(
    ts: &ThreadState,
    ep: u32,
    wr: *mut IbvSendWr,
    r: c_int,
    bad: *mut *mut IbvSendWr,
) {
    if wr.is_null() {
        untraced(1);
        return;
    }
    let stop = if r == 0 {
        core::ptr::null_mut()
    } else if bad.is_null() {
        // The failing WR is unknown: record one error, read nothing more.
        ts.record_flags(ep, Op::VerbsOther, 0, 0, flags::ERROR, 0);
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
        // SAFETY: p is a WR the provider read (before the failing one, or the whole chain).
        unsafe {
            if p == stop {
                let opcode = core::ptr::addr_of!((*p).opcode).read();
                ts.record_flags(ep, send_op(opcode), 0, 0, flags::ERROR, 0);
                return;
            }
            record_one_send(ts, ep, p);
            p = core::ptr::addr_of!((*p).next).read();
        }
        n += 1;
    }
    if r != 0 {
        // The provider failed but *bad was not in the chain: nothing more is known.
        ts.record_flags(ep, Op::VerbsOther, 0, 0, flags::ERROR, 0);
    }
}

/// As `record_send_chain` for receive WRs.
///
/// # Safety
/// As `record_send_chain`.
unsafe fn record_recv_chain(
    ts: &ThreadState,
    ep: u32,
    op: Op,
    wr: *mut IbvRecvWr,
    r: c_int,
    bad: *mut *mut IbvRecvWr,
) {
    if wr.is_null() {
        untraced(1);
        return;
    }
    let stop = if r == 0 {
        core::ptr::null_mut()
    } else if bad.is_null() {
        ts.record_flags(ep, op, 0, 0, flags::ERROR, 0);
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
            ts.record_flags(ep, op, 0, 0, flags::ERROR, 0);
            return;
        }
        // SAFETY: p is a WR the provider read.
        unsafe {
            let bytes = sge_bytes(
                core::ptr::addr_of!((*p).sg_list).read(),
                core::ptr::addr_of!((*p).num_sge).read(),
            );
            ts.record_flags(ep, op, bytes, 0, 0, 0);
            p = core::ptr::addr_of!((*p).next).read();
        }
        n += 1;
    }
    if r != 0 {
        ts.record_flags(ep, op, 0, 0, flags::ERROR, 0);
    }
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
    let Some(ts) = data_enter() else {
        // SAFETY: the program's arguments, unchanged.
        return unsafe { f(qp, wr, bad) };
    };
    // SAFETY: as above.
    let r = unsafe { f(qp, wr, bad) };
    crate::guarded((), || {
        let ep = crate::registry::lookup(qp as usize);
        // SAFETY: the chain the provider just walked: a single accepted WR is recorded inline.
        unsafe {
            if r == 0 && !wr.is_null() && core::ptr::addr_of!((*wr).next).read().is_null() {
                record_one_send(ts, ep, wr);
            } else {
                record_send_chain(ts, ep, wr, r, bad);
            }
        }
    });
    r
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
    let Some(ts) = data_enter() else {
        // SAFETY: the program's arguments, unchanged.
        return unsafe { f(qp, wr, bad) };
    };
    // SAFETY: as above.
    let r = unsafe { f(qp, wr, bad) };
    crate::guarded((), || {
        let ep = crate::registry::lookup(qp as usize);
        // SAFETY: the chain the provider just walked.
        unsafe { record_recv_chain(ts, ep, Op::VerbsRecv, wr, r, bad) }
    });
    r
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
    let Some(ts) = data_enter() else {
        // SAFETY: the program's arguments, unchanged.
        return unsafe { f(srq, wr, bad) };
    };
    // SAFETY: as above.
    let r = unsafe { f(srq, wr, bad) };
    crate::guarded((), || {
        let ep = crate::registry::lookup(srq as usize);
        // SAFETY: the chain the provider just walked.
        unsafe { record_recv_chain(ts, ep, Op::VerbsSrqRecv, wr, r, bad) }
    });
    r
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

/// The `ops.poll_cq` of patched contexts (installed in full mode only).
///
/// # Safety
/// Same contract as `ibv_poll_cq`.
pub unsafe extern "C" fn poll_cq_hook(cq: *mut c_void, n: c_int, wc: *mut IbvWc) -> c_int {
    // SAFETY: cq is live (caller).
    let Some(f) = ctx_state(unsafe { ctx_of(cq) }).and_then(|s| s.poll_cq) else {
        return -libc::ENODEV;
    };
    // SAFETY: the program's arguments, unchanged.
    let r = unsafe { f(cq, n, wc) };
    if r == 0 {
        return 0;
    }
    if let Some(ts) = data_enter() {
        crate::guarded((), || {
            let ep = crate::registry::lookup(cq as usize);
            if r < 0 || wc.is_null() {
                ts.record_flags(ep, Op::VerbsPollCq, 0, 0, flags::ERROR, 0);
                return;
            }
            let (mut bytes, mut errs, mut classes) = (0u64, 0u16, 0u16);
            for i in 0..r.min(n.max(0)) as usize {
                // SAFETY: the provider wrote `r` completions at wc.
                let w = unsafe { &*wc.add(i) };
                if w.status != 0 {
                    errs = errs.saturating_add(1);
                } else {
                    bytes += w.byte_len as u64;
                }
                classes |= wc_class(w.opcode);
            }
            let fl = if errs > 0 { flags::ERROR } else { 0 };
            let aux = (classes << 8) | errs.min(255);
            ts.record_flags(ep, Op::VerbsPollCq, r as u64, bytes, fl, aux);
        });
    }
    r
}

/// The `ops.req_notify_cq` of patched contexts (installed in full mode only).
///
/// # Safety
/// Same contract as `ibv_req_notify_cq`.
pub unsafe extern "C" fn req_notify_hook(cq: *mut c_void, solicited: c_int) -> c_int {
    // SAFETY: cq is live (caller).
    let Some(f) = ctx_state(unsafe { ctx_of(cq) }).and_then(|s| s.req_notify_cq) else {
        return libc::ENODEV;
    };
    // SAFETY: the program's arguments, unchanged.
    let r = unsafe { f(cq, solicited) };
    if let Some(ts) = data_enter() {
        crate::guarded((), || {
            let ep = crate::registry::lookup(cq as usize);
            let fl = if r != 0 { flags::ERROR } else { 0 };
            ts.record_flags(ep, Op::VerbsOther, 0, 0, fl, solicited as u16);
        });
    }
    r
}

// ---------------------------------------------------------------------------------------------
// ibv_qp_ex: per-QP wr_* pointers.
// ---------------------------------------------------------------------------------------------

/// WRs collected between wr_start and wr_complete before they are recorded.
const PENDING_MAX: usize = 32;

#[derive(Clone, Copy, Default)]
struct PendWr {
    op: u8,
    flags: u8,
    aux: u16,
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
    qpx: usize,
    ep: u32,
    orig: QpExFns,
    pending: UnsafeCell<Pending>,
}

// SAFETY: see the type's doc: `pending` is only accessed from serialised wr_* calls of one QP.
unsafe impl Sync for QpxState {}

const QPX_CAP: usize = 4096;
static QPX_KEYS: [AtomicUsize; QPX_CAP] = [const { AtomicUsize::new(0) }; QPX_CAP];
static QPX_VALS: [AtomicPtr<QpxState>; QPX_CAP] =
    [const { AtomicPtr::new(core::ptr::null_mut()) }; QPX_CAP];
static QPX_INSERT: Mutex<()> = Mutex::new(());

#[inline(always)]
fn qpx_hash(k: usize) -> usize {
    (((k >> 4) as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 52) as usize & (QPX_CAP - 1)
}

#[inline(always)]
fn qpx_state(qpx: Qx) -> Option<&'static QpxState> {
    let k = qpx as usize;
    let mut i = qpx_hash(k);
    for _ in 0..64 {
        let key = QPX_KEYS[i].load(Ordering::Acquire);
        if key == k {
            let p = QPX_VALS[i].load(Ordering::Acquire);
            // SAFETY: states are leaked, never freed.
            return if p.is_null() {
                None
            } else {
                Some(unsafe { &*p })
            };
        }
        if key == 0 {
            return None;
        }
        i = (i + 1) & (QPX_CAP - 1);
    }
    None
}

fn qpx_insert(st: QpxState) -> bool {
    let Ok(_g) = QPX_INSERT.lock() else {
        return false;
    };
    let k = st.qpx;
    let mut i = qpx_hash(k);
    for _ in 0..64 {
        let key = QPX_KEYS[i].load(Ordering::Acquire);
        if key == k || key == 0 {
            let p = Box::into_raw(Box::new(st));
            QPX_VALS[i].store(p, Ordering::Release);
            QPX_KEYS[i].store(k, Ordering::Release);
            return true;
        }
        i = (i + 1) & (QPX_CAP - 1);
    }
    false
}

/// Replaces the wr_* pointers of `qpx` with sigmatop's, keeping the provider's per QP.
///
/// # Safety
/// `qpx` is NULL or the live `ibv_qp_ex` of a QP just created, not yet used by the program.
unsafe fn patch_qpx(qpx: Qx, ep: u32) {
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
        qpx: qpx as usize,
        ep,
        orig,
        pending: UnsafeCell::new(Pending {
            n: 0,
            items: [PendWr::default(); PENDING_MAX],
        }),
    };
    if !qpx_insert(st) {
        unpatched("too many extended QPs");
        return;
    }
    // SAFETY: the QP's own function table (provider memory), not used by the program yet.
    unsafe {
        let f = &mut *core::ptr::addr_of_mut!((*qpx).fns);
        macro_rules! set {
            ($($field:ident),*) => { $( if f.$field.is_some() { f.$field = Some($field); } )* };
        }
        set!(
            wr_atomic_cmp_swp,
            wr_atomic_fetch_add,
            wr_rdma_read,
            wr_rdma_write,
            wr_rdma_write_imm,
            wr_send,
            wr_send_imm,
            wr_send_inv,
            wr_set_inline_data,
            wr_set_inline_data_list,
            wr_set_sge,
            wr_set_sge_list,
            wr_start,
            wr_complete,
            wr_abort,
            wr_atomic_write
        );
    }
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
        flush_pending(st, p, 0);
    }
    p.items[p.n] = PendWr {
        op: op as u8,
        flags: send_flags(wf),
        aux: rkey as u16,
        bytes: 0,
        addr,
    };
    p.n += 1;
}

#[cold]
fn flush_pending(st: &QpxState, p: &mut Pending, fl: u8) {
    if let Some(ts) = data_enter() {
        crate::guarded((), || {
            for w in &p.items[..p.n] {
                let op = Op::from_u8(w.op).unwrap_or(Op::VerbsOther);
                let bytes = if fl & flags::ERROR != 0 { 0 } else { w.bytes };
                ts.record_flags(st.ep, op, bytes, w.addr, w.flags | fl, w.aux);
            }
        });
    }
    p.n = 0;
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
    // SAFETY: the provider's function, the program's argument.
    let r = unsafe { f(qpx) };
    // SAFETY: serialised per QP.
    let p = unsafe { &mut *st.pending.get() };
    if p.n > 0 {
        flush_pending(st, p, if r != 0 { flags::ERROR } else { 0 });
    }
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

// ---------------------------------------------------------------------------------------------
// Control path.
// ---------------------------------------------------------------------------------------------

/// Runs `f` with errno preserved (bookkeeping after a real call must not change what the
/// program reads).
fn keep_errno<R>(f: impl FnOnce() -> R) -> R {
    // SAFETY: __errno_location returns this thread's errno slot.
    let e = unsafe { *libc::__errno_location() };
    let r = f();
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = e };
    r
}

/// Bookkeeping after a successful control call: errno kept, panics caught.
fn after(f: impl FnOnce()) {
    if crate::config::layer_enabled(Layer::Ibverbs) {
        keep_errno(|| crate::guarded((), f));
    }
}

/// Control-path state of a QP.
#[derive(Clone, Copy, Default)]
struct QpCtl {
    id: u32,
    ctx: usize,
    port: u8,
    qpn: u32,
}

static QPS: Mutex<Option<HashMap<usize, QpCtl>>> = Mutex::new(None);
static NEXT_CQ: AtomicU64 = AtomicU64::new(0);
static NEXT_SRQ: AtomicU64 = AtomicU64::new(0);

fn transport(qp_type: u32) -> &'static str {
    match qp_type {
        2 => "RC",
        3 => "UC",
        4 => "UD",
        8 => "RAW",
        9 => "XRC_SEND",
        10 => "XRC_RECV",
        0xff => "DRIVER",
        _ => "?",
    }
}

/// Defines the endpoint of a new QP and binds it; patches its wr_* pointers when `ex_ops`.
///
/// # Safety
/// `qp` is NULL or a QP just created.
unsafe fn on_qp_created(qp: *mut IbvQp, ex_ops: bool) {
    if qp.is_null() {
        return;
    }
    // SAFETY: a live QP.
    let (ctx, qpn, qpt) = unsafe { ((*qp).context, (*qp).qp_num, (*qp).qp_type) };
    let id = crate::registry::define_full(EndpointDef {
        id: 0,
        layer: Layer::Ibverbs,
        kind: EndpointKind::VerbsQp,
        label: format!("qp 0x{qpn:x}"),
        transport: transport(qpt).to_string(),
        peer: Peer::default(),
        qpn: Some(qpn),
        gpu: None,
        created_ns: 0,
    });
    crate::registry::bind(qp as usize, id);
    crate::registry::update(id, "RESET", None);
    if let Ok(mut m) = QPS.lock() {
        m.get_or_insert_with(HashMap::new).insert(
            qp as usize,
            QpCtl {
                id,
                ctx: ctx as usize,
                port: 0,
                qpn,
            },
        );
    }
    if ex_ops {
        let p = REAL_QP_TO_QP_EX.get();
        if !p.is_null() {
            // SAFETY: libibverbs' ibv_qp_to_qp_ex.
            let f: unsafe extern "C" fn(*mut IbvQp) -> Qx = unsafe { core::mem::transmute(p) };
            // SAFETY: qp is live and new.
            unsafe { patch_qpx(f(qp), id) };
        }
    }
}

fn gid_text(g: &[u8; 16]) -> String {
    std::net::Ipv6Addr::from(*g).to_string()
}

/// The 20-byte key both ends of a connection hash: GID then QPN (u32 little-endian).
pub fn qp_addr_hash(gid: &[u8; 16], qpn: u32) -> u64 {
    let mut k = [0u8; 20];
    k[..16].copy_from_slice(gid);
    k[16..].copy_from_slice(&qpn.to_le_bytes());
    fnv1a64(&k)
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

fn query_gid(ctx: usize, port: u8, index: c_int) -> Option<[u8; 16]> {
    let p = REAL_QUERY_GID.get();
    if p.is_null() {
        return None;
    }
    // SAFETY: libibverbs' ibv_query_gid.
    let f: QueryGidFn = unsafe { core::mem::transmute(p) };
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

fn state_name(s: u32) -> &'static str {
    match s {
        0 => "RESET",
        1 => "INIT",
        2 => "RTR",
        3 => "RTS",
        4 => "SQD",
        5 => "SQE",
        6 => "ERR",
        _ => "?",
    }
}

/// Bookkeeping of a successful ibv_modify_qp.
///
/// # Safety
/// `qp` is a live QP, `attr` the program's attributes for `mask`.
unsafe fn on_modify(qp: *mut IbvQp, attr: *const IbvQpAttr, mask: c_int) {
    if attr.is_null() {
        return;
    }
    let Some(mut ctl) = QPS
        .lock()
        .ok()
        .and_then(|m| m.as_ref().and_then(|m| m.get(&(qp as usize)).copied()))
    else {
        return;
    };
    // SAFETY: caller's contract.
    let a = unsafe { &*attr };
    if mask & QP_PORT != 0 {
        ctl.port = a.port_num;
    }
    if mask & QP_AV != 0 && a.ah_attr.port_num != 0 {
        ctl.port = a.ah_attr.port_num;
    }
    if let Ok(mut m) = QPS.lock()
        && let Some(e) = m.as_mut().and_then(|m| m.get_mut(&(qp as usize)))
    {
        *e = ctl;
    }
    if mask & QP_STATE == 0 {
        return;
    }
    let state = state_name(a.qp_state);
    let mut peer = None;
    if a.qp_state == 2 && mask & QP_DEST_QPN != 0 {
        let dev = dev_info(ctl.ctx as *mut IbvContext);
        let ah = &a.ah_attr;
        let (rgid, lgid) = if mask & QP_AV != 0 && ah.is_global != 0 {
            (
                ah.grh.dgid,
                query_gid(ctl.ctx, ctl.port, ah.grh.sgid_index as c_int),
            )
        } else {
            // No GRH (InfiniBand within a subnet): the LID stands in for the GID.
            let mut g = [0u8; 16];
            g[14..].copy_from_slice(&ah.dlid.to_be_bytes());
            (g, None)
        };
        let mtu = if mask & QP_PATH_MTU != 0 {
            128u32 << a.path_mtu.min(5)
        } else {
            0
        };
        if let Some(l) = lgid {
            crate::registry::add_own_addr(qp_addr_hash(&l, ctl.qpn));
        }
        let ltext = lgid.map(|g| gid_text(&g)).unwrap_or_else(|| "-".into());
        peer = Some(Peer {
            addr_hash: qp_addr_hash(&rgid, a.dest_qp_num),
            text: format!(
                "qpn 0x{:x} gid {} lid {} | local {}:{} guid {:016x} qpn 0x{:x} gid {} mtu {}",
                a.dest_qp_num,
                gid_text(&rgid),
                ah.dlid,
                dev.name,
                ctl.port,
                dev.guid,
                ctl.qpn,
                ltext,
                mtu
            ),
            qpn: Some(a.dest_qp_num),
            gid: Some(rgid),
        });
    }
    crate::registry::update(ctl.id, state, peer);
}

// ---------------------------------------------------------------------------------------------
// Exported entry points.
// ---------------------------------------------------------------------------------------------

type QueryGidFn = unsafe extern "C" fn(*mut IbvContext, u8, c_int, *mut c_void) -> c_int;

static REAL_GET_DEVICE_LIST: RealFn = RealFn::new(c"ibv_get_device_list", SONAMES);
static REAL_OPEN_DEVICE: RealFn = RealFn::new(c"ibv_open_device", SONAMES);
static REAL_CLOSE_DEVICE: RealFn = RealFn::new(c"ibv_close_device", SONAMES);
static REAL_QUERY_DEVICE: RealFn = RealFn::new(c"ibv_query_device", SONAMES);
static REAL_QUERY_PORT: RealFn = RealFn::new(c"ibv_query_port", SONAMES);
static REAL_QUERY_GID: RealFn = RealFn::new(c"ibv_query_gid", SONAMES);
static REAL_ALLOC_PD: RealFn = RealFn::new(c"ibv_alloc_pd", SONAMES);
static REAL_REG_MR: RealFn = RealFn::new(c"ibv_reg_mr", SONAMES);
static REAL_REG_MR_IOVA2: RealFn = RealFn::new(c"ibv_reg_mr_iova2", SONAMES);
static REAL_REG_DMABUF_MR: RealFn = RealFn::new(c"ibv_reg_dmabuf_mr", SONAMES);
static REAL_DEREG_MR: RealFn = RealFn::new(c"ibv_dereg_mr", SONAMES);
static REAL_CREATE_CQ: RealFn = RealFn::new(c"ibv_create_cq", SONAMES);
static REAL_CREATE_SRQ: RealFn = RealFn::new(c"ibv_create_srq", SONAMES);
static REAL_CREATE_QP: RealFn = RealFn::new(c"ibv_create_qp", SONAMES);
static REAL_MODIFY_QP: RealFn = RealFn::new(c"ibv_modify_qp", SONAMES);
static REAL_DESTROY_QP: RealFn = RealFn::new(c"ibv_destroy_qp", SONAMES);
static REAL_QP_TO_QP_EX: RealFn = RealFn::new(c"ibv_qp_to_qp_ex", SONAMES);
static REAL_GET_DEVICE_GUID: RealFn = RealFn::new(c"ibv_get_device_guid", SONAMES);
static REAL_GET_CQ_EVENT: RealFn = RealFn::new(c"ibv_get_cq_event", SONAMES);

/// Resolves `$real` as type `$t`, or returns `$fail` (with errno ENOSYS) when libibverbs is absent.
macro_rules! real {
    ($real:expr, $t:ty, $fail:expr) => {{
        let p = $real.get();
        if p.is_null() {
            // SAFETY: this thread's errno slot.
            unsafe { *libc::__errno_location() = libc::ENOSYS };
            return $fail;
        }
        // SAFETY: the symbol of this name in libibverbs has this signature.
        unsafe { core::mem::transmute::<*mut c_void, $t>(p) }
    }};
}

pub fn hooks() -> Vec<Hook> {
    macro_rules! h {
        ($name:literal, $f:expr, $real:expr) => {
            Hook {
                name: $name,
                layer: Layer::Ibverbs,
                hook: $f as *const c_void,
                real: &$real,
            }
        };
    }
    vec![
        h!(
            b"ibv_get_device_list",
            ibv_get_device_list,
            REAL_GET_DEVICE_LIST
        ),
        h!(b"ibv_open_device", ibv_open_device, REAL_OPEN_DEVICE),
        h!(b"ibv_close_device", ibv_close_device, REAL_CLOSE_DEVICE),
        h!(b"ibv_query_device", ibv_query_device, REAL_QUERY_DEVICE),
        h!(b"ibv_query_port", ibv_query_port, REAL_QUERY_PORT),
        h!(b"ibv_query_gid", ibv_query_gid, REAL_QUERY_GID),
        h!(b"ibv_alloc_pd", ibv_alloc_pd, REAL_ALLOC_PD),
        h!(b"ibv_reg_mr", ibv_reg_mr, REAL_REG_MR),
        h!(b"ibv_reg_mr_iova2", ibv_reg_mr_iova2, REAL_REG_MR_IOVA2),
        h!(b"ibv_reg_dmabuf_mr", ibv_reg_dmabuf_mr, REAL_REG_DMABUF_MR),
        h!(b"ibv_dereg_mr", ibv_dereg_mr, REAL_DEREG_MR),
        h!(b"ibv_create_cq", ibv_create_cq, REAL_CREATE_CQ),
        h!(b"ibv_create_srq", ibv_create_srq, REAL_CREATE_SRQ),
        h!(b"ibv_create_qp", ibv_create_qp, REAL_CREATE_QP),
        h!(b"ibv_modify_qp", ibv_modify_qp, REAL_MODIFY_QP),
        h!(b"ibv_destroy_qp", ibv_destroy_qp, REAL_DESTROY_QP),
        h!(b"ibv_get_cq_event", ibv_get_cq_event, REAL_GET_CQ_EVENT),
    ]
}

type GetCqEventFn = unsafe extern "C" fn(*mut c_void, *mut *mut c_void, *mut *mut c_void) -> c_int;

/// `ibv_get_cq_event`: blocks on a completion channel until a CQ has an event. Counted on the CQ
/// it returns (`get_cq_event`); with events on, recorded with the time it waited in `addr`
/// (`Op::blocks`), which the Perfetto export draws as a slice on the thread. The
/// clock is read around the call only then: it blocks anyway.
///
/// # Safety
/// Same contract as ibv_get_cq_event(3).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_get_cq_event(
    channel: *mut c_void,
    cq: *mut *mut c_void,
    cq_context: *mut *mut c_void,
) -> c_int {
    let f = real!(REAL_GET_CQ_EVENT, GetCqEventFn, -1);
    let traced = crate::config::layer_enabled(Layer::Ibverbs) && !crate::in_sigmatop();
    let t0 = if traced {
        crate::clock::blocking_start()
    } else {
        0
    };
    // SAFETY: the program's arguments, unchanged.
    let r = unsafe { f(channel, cq, cq_context) };
    if traced {
        keep_errno(|| {
            crate::guarded((), || {
                let Some(ts) = data_enter() else { return };
                let cq_ptr = if r == 0 && !cq.is_null() {
                    // SAFETY: on success the library stored the CQ through the program's pointer.
                    unsafe { *cq }
                } else {
                    core::ptr::null_mut()
                };
                let ep = crate::registry::lookup(cq_ptr as usize);
                let fl = if r != 0 { flags::ERROR } else { 0 };
                // Only a call that returned an event waited for one (a non-blocking channel
                // answers EAGAIN at once): the others carry no time. `addr` of a blocking op is
                // the time it blocked (`Op::blocks`).
                let waited = if r == 0 {
                    crate::clock::blocked_since(t0)
                } else {
                    0
                };
                ts.record_flags(ep, Op::VerbsCqEvent, 0, waited, fl, 0);
            })
        });
    }
    r
}

/// `ibv_get_device_list`: starts the collector, otherwise untouched.
///
/// # Safety
/// Same contract as ibv_get_device_list(3).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_get_device_list(num: *mut c_int) -> *mut *mut IbvDevice {
    let f = real!(
        REAL_GET_DEVICE_LIST,
        unsafe extern "C" fn(*mut c_int) -> *mut *mut IbvDevice,
        core::ptr::null_mut()
    );
    if crate::config::layer_enabled(Layer::Ibverbs) && !crate::in_sigmatop() {
        keep_errno(|| crate::guarded((), crate::collector::ensure_started));
    }
    // SAFETY: the program's argument, unchanged.
    unsafe { f(num) }
}

/// `ibv_open_device`: opens the context, then patches its ops (see `patch_context`).
///
/// # Safety
/// Same contract as ibv_open_device(3).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_open_device(dev: *mut IbvDevice) -> *mut IbvContext {
    let f = real!(
        REAL_OPEN_DEVICE,
        unsafe extern "C" fn(*mut IbvDevice) -> *mut IbvContext,
        core::ptr::null_mut()
    );
    if crate::config::layer_enabled(Layer::Ibverbs) && !crate::in_sigmatop() {
        keep_errno(|| crate::guarded((), crate::collector::ensure_started));
    }
    // SAFETY: the program's argument, unchanged.
    let ctx = unsafe { f(dev) };
    if !ctx.is_null() {
        after(|| {
            record_device(ctx, dev);
            // SAFETY: a context just opened, not yet seen by the program.
            unsafe { patch_context(ctx as *mut c_void) };
        });
    }
    ctx
}

/// Remembers the device name and node GUID of a context (control path).
fn record_device(ctx: *mut IbvContext, dev: *mut IbvDevice) {
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
        let p = REAL_GET_DEVICE_GUID.get();
        if !p.is_null() {
            // SAFETY: libibverbs' ibv_get_device_guid.
            let g: unsafe extern "C" fn(*mut IbvDevice) -> u64 = unsafe { core::mem::transmute(p) };
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
    crate::guarded((), || {
        record_device(ctx as *mut IbvContext, dev as *mut IbvDevice)
    });
}

/// `ibv_close_device`: forgets the context's state.
///
/// # Safety
/// Same contract as ibv_close_device(3).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_close_device(ctx: *mut IbvContext) -> c_int {
    let f = real!(
        REAL_CLOSE_DEVICE,
        unsafe extern "C" fn(*mut IbvContext) -> c_int,
        -1
    );
    // SAFETY: the program's argument, unchanged.
    let r = unsafe { f(ctx) };
    if r == 0 {
        after(|| {
            if let Some(s) = ctx_state(ctx) {
                s.ctx.store(0, Ordering::Release);
            }
        });
    }
    r
}

/// # Safety
/// Same contract as ibv_query_device(3).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_query_device(ctx: *mut IbvContext, attr: *mut c_void) -> c_int {
    let f = real!(
        REAL_QUERY_DEVICE,
        unsafe extern "C" fn(*mut IbvContext, *mut c_void) -> c_int,
        libc::ENOSYS
    );
    // SAFETY: the program's arguments, unchanged.
    unsafe { f(ctx, attr) }
}

/// The exported (compat) `ibv_query_port`; the `ibv_query_port` macro of verbs.h goes through
/// `verbs_context::query_port` instead.
///
/// # Safety
/// Same contract as the exported ibv_query_port.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_query_port(
    ctx: *mut IbvContext,
    port: u8,
    attr: *mut c_void,
) -> c_int {
    let f = real!(
        REAL_QUERY_PORT,
        unsafe extern "C" fn(*mut IbvContext, u8, *mut c_void) -> c_int,
        libc::ENOSYS
    );
    // SAFETY: the program's arguments, unchanged.
    unsafe { f(ctx, port, attr) }
}

/// # Safety
/// Same contract as ibv_query_gid(3).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_query_gid(
    ctx: *mut IbvContext,
    port: u8,
    index: c_int,
    gid: *mut c_void,
) -> c_int {
    let f = real!(REAL_QUERY_GID, QueryGidFn, -1);
    // SAFETY: the program's arguments, unchanged.
    unsafe { f(ctx, port, index, gid) }
}

/// # Safety
/// Same contract as ibv_alloc_pd(3).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_alloc_pd(ctx: *mut IbvContext) -> *mut c_void {
    let f = real!(
        REAL_ALLOC_PD,
        unsafe extern "C" fn(*mut IbvContext) -> *mut c_void,
        core::ptr::null_mut()
    );
    // SAFETY: the program's argument, unchanged.
    unsafe { f(ctx) }
}

/// The exported `ibv_reg_mr` (verbs.h's macro calls it or `ibv_reg_mr_iova2`).
///
/// # Safety
/// Same contract as ibv_reg_mr(3).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_reg_mr(
    pd: *mut c_void,
    addr: *mut c_void,
    len: usize,
    access: c_int,
) -> *mut c_void {
    let f = real!(
        REAL_REG_MR,
        unsafe extern "C" fn(*mut c_void, *mut c_void, usize, c_int) -> *mut c_void,
        core::ptr::null_mut()
    );
    // SAFETY: the program's arguments, unchanged.
    let mr = unsafe { f(pd, addr, len, access) };
    if !mr.is_null() {
        // SAFETY: a struct ibv_mr just returned by libibverbs.
        after(|| unsafe { crate::registry::queue_mr(mr, None, access as u32, true) });
    }
    mr
}

/// # Safety
/// Same contract as ibv_reg_mr_iova2(3).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_reg_mr_iova2(
    pd: *mut c_void,
    addr: *mut c_void,
    len: usize,
    iova: u64,
    access: c_uint,
) -> *mut c_void {
    let f = real!(
        REAL_REG_MR_IOVA2,
        unsafe extern "C" fn(*mut c_void, *mut c_void, usize, u64, c_uint) -> *mut c_void,
        core::ptr::null_mut()
    );
    // SAFETY: the program's arguments, unchanged.
    let mr = unsafe { f(pd, addr, len, iova, access) };
    if !mr.is_null() {
        // SAFETY: a struct ibv_mr just returned by libibverbs; peers address it by `iova`.
        after(|| unsafe { crate::registry::queue_mr(mr, Some(iova), access, true) });
    }
    mr
}

/// # Safety
/// Same contract as ibv_reg_dmabuf_mr(3).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_reg_dmabuf_mr(
    pd: *mut c_void,
    offset: u64,
    len: usize,
    iova: u64,
    fd: c_int,
    access: c_int,
) -> *mut c_void {
    let f = real!(
        REAL_REG_DMABUF_MR,
        unsafe extern "C" fn(*mut c_void, u64, usize, u64, c_int, c_int) -> *mut c_void,
        core::ptr::null_mut()
    );
    // SAFETY: the program's arguments, unchanged.
    let mr = unsafe { f(pd, offset, len, iova, fd, access) };
    if !mr.is_null() {
        // SAFETY: a struct ibv_mr just returned by libibverbs; peers address it by `iova`.
        after(|| unsafe { crate::registry::queue_mr(mr, Some(iova), access as u32, true) });
    }
    mr
}

/// # Safety
/// Same contract as ibv_dereg_mr(3).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_dereg_mr(mr: *mut c_void) -> c_int {
    let f = real!(
        REAL_DEREG_MR,
        unsafe extern "C" fn(*mut c_void) -> c_int,
        libc::ENOSYS
    );
    // The fields are read before the region is freed; recorded only when the call succeeds.
    let mut fields = [0u8; 44];
    if !mr.is_null() {
        // SAFETY: the program passes a live struct ibv_mr (44 bytes: rdma-core layout).
        after(|| unsafe {
            core::ptr::copy_nonoverlapping(mr.cast::<u8>(), fields.as_mut_ptr(), 44)
        });
    }
    // SAFETY: the program's argument, unchanged.
    let r = unsafe { f(mr) };
    if r == 0 && fields != [0u8; 44] {
        // SAFETY: a copy of the freed struct ibv_mr.
        after(|| unsafe { crate::registry::queue_mr(fields.as_ptr().cast(), None, 0, false) });
    }
    r
}

pub(crate) fn define_cq(cq: *mut c_void) {
    if cq.is_null() {
        return;
    }
    // SAFETY: a CQ just created: its first field is the context.
    let dev = dev_info(unsafe { ctx_of(cq) });
    let n = NEXT_CQ.fetch_add(1, Ordering::Relaxed);
    let id = crate::registry::define_full(EndpointDef {
        id: 0,
        layer: Layer::Ibverbs,
        kind: EndpointKind::VerbsCq,
        label: format!("cq#{n} {}", dev.name),
        transport: String::new(),
        peer: Peer::default(),
        qpn: None,
        gpu: None,
        created_ns: 0,
    });
    crate::registry::bind(cq as usize, id);
}

/// # Safety
/// Same contract as ibv_create_cq(3).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_create_cq(
    ctx: *mut IbvContext,
    cqe: c_int,
    user: *mut c_void,
    channel: *mut c_void,
    vector: c_int,
) -> *mut c_void {
    let f = real!(
        REAL_CREATE_CQ,
        unsafe extern "C" fn(
            *mut IbvContext,
            c_int,
            *mut c_void,
            *mut c_void,
            c_int,
        ) -> *mut c_void,
        core::ptr::null_mut()
    );
    // SAFETY: the program's arguments, unchanged.
    let cq = unsafe { f(ctx, cqe, user, channel, vector) };
    if !cq.is_null() {
        after(|| define_cq(cq));
    }
    cq
}

/// `verbs_context::create_cq_ex` of patched contexts (verbs.h's inline ibv_create_cq_ex).
unsafe extern "C" fn create_cq_ex_hook(ctx: *mut IbvContext, attr: *mut c_void) -> *mut c_void {
    let Some(f) = ctx_state(ctx).and_then(|s| s.create_cq_ex) else {
        // SAFETY: this thread's errno slot.
        unsafe { *libc::__errno_location() = libc::EOPNOTSUPP };
        return core::ptr::null_mut();
    };
    // SAFETY: the program's arguments, unchanged.
    let cq = unsafe { f(ctx, attr) };
    if !cq.is_null() {
        // ibv_cq_ex starts with the fields of ibv_cq (ibv_cq_ex_to_cq is a cast).
        after(|| define_cq(cq));
    }
    cq
}

/// # Safety
/// Same contract as ibv_create_srq(3).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_create_srq(pd: *mut c_void, attr: *mut c_void) -> *mut c_void {
    let f = real!(
        REAL_CREATE_SRQ,
        unsafe extern "C" fn(*mut c_void, *mut c_void) -> *mut c_void,
        core::ptr::null_mut()
    );
    // SAFETY: the program's arguments, unchanged.
    let srq = unsafe { f(pd, attr) };
    if !srq.is_null() {
        after(|| {
            // SAFETY: a SRQ just created: its first field is the context.
            let dev = dev_info(unsafe { ctx_of(srq) });
            let n = NEXT_SRQ.fetch_add(1, Ordering::Relaxed);
            let id = crate::registry::define_full(EndpointDef {
                id: 0,
                layer: Layer::Ibverbs,
                kind: EndpointKind::VerbsSrq,
                label: format!("srq#{n} {}", dev.name),
                transport: String::new(),
                peer: Peer::default(),
                qpn: None,
                gpu: None,
                created_ns: 0,
            });
            crate::registry::bind(srq as usize, id);
        });
    }
    srq
}

/// # Safety
/// Same contract as ibv_create_qp(3).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_create_qp(pd: *mut c_void, attr: *mut c_void) -> *mut IbvQp {
    let f = real!(
        REAL_CREATE_QP,
        unsafe extern "C" fn(*mut c_void, *mut c_void) -> *mut IbvQp,
        core::ptr::null_mut()
    );
    // SAFETY: the program's arguments, unchanged.
    let qp = unsafe { f(pd, attr) };
    if !qp.is_null() {
        // SAFETY: a QP just created.
        after(|| unsafe { on_qp_created(qp, false) });
    }
    qp
}

/// `verbs_context::create_qp_ex` of patched contexts (verbs.h's inline ibv_create_qp_ex).
unsafe extern "C" fn create_qp_ex_hook(
    ctx: *mut IbvContext,
    attr: *mut IbvQpInitAttrEx,
) -> *mut IbvQp {
    let Some(f) = ctx_state(ctx).and_then(|s| s.create_qp_ex) else {
        // SAFETY: this thread's errno slot.
        unsafe { *libc::__errno_location() = libc::EOPNOTSUPP };
        return core::ptr::null_mut();
    };
    // SAFETY: the program's arguments, unchanged.
    let qp = unsafe { f(ctx, attr) };
    if !qp.is_null() {
        after(|| {
            // SAFETY: the program's attributes (read after the provider did), a new QP.
            unsafe {
                let ex = !attr.is_null()
                    && (*attr).comp_mask & QP_INIT_ATTR_SEND_OPS_FLAGS != 0
                    && (*attr).send_ops_flags != 0;
                on_qp_created(qp, ex);
            }
        });
    }
    qp
}

/// `ibv_modify_qp`: records INIT / RTR (with the peer QPN and GID) / RTS / ERR transitions.
///
/// # Safety
/// Same contract as ibv_modify_qp(3).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_modify_qp(qp: *mut IbvQp, attr: *mut IbvQpAttr, mask: c_int) -> c_int {
    let f = real!(
        REAL_MODIFY_QP,
        unsafe extern "C" fn(*mut IbvQp, *mut IbvQpAttr, c_int) -> c_int,
        libc::ENOSYS
    );
    // SAFETY: the program's arguments, unchanged.
    let r = unsafe { f(qp, attr, mask) };
    if r == 0 {
        // SAFETY: a live QP and the attributes the provider accepted.
        after(|| unsafe { on_modify(qp, attr, mask) });
    }
    r
}

/// # Safety
/// Same contract as ibv_destroy_qp(3).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_destroy_qp(qp: *mut IbvQp) -> c_int {
    let f = real!(
        REAL_DESTROY_QP,
        unsafe extern "C" fn(*mut IbvQp) -> c_int,
        libc::ENOSYS
    );
    // SAFETY: the program's argument, unchanged.
    let r = unsafe { f(qp) };
    if r == 0 {
        after(|| {
            let ctl = QPS
                .lock()
                .ok()
                .and_then(|mut m| m.as_mut().and_then(|m| m.remove(&(qp as usize))));
            if let Some(c) = ctl {
                crate::registry::update(c.id, "DESTROYED", None);
            }
        });
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::{offset_of, size_of};

    /// Compiles a C program against the installed infiniband/verbs.h and compares its offsets
    /// with the structs above, so an ABI change of rdma-core is caught.
    #[test]
    fn abi_matches_verbs_h() {
        if !std::path::Path::new("/usr/include/infiniband/verbs.h").is_file() {
            panic!(
                "/usr/include/infiniband/verbs.h is missing: install libibverbs-dev (scripts/test.sh does)"
            );
        }
        let dir = std::env::temp_dir().join(format!("sigmatop-abi-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let src = dir.join("off.c");
        let checks: &[(&str, usize)] = &[
            (
                "offsetof(struct ibv_context, ops)",
                offset_of!(IbvContext, ops),
            ),
            (
                "offsetof(struct ibv_context, ops.poll_cq)",
                8 + 8 * OPS_POLL_CQ,
            ),
            (
                "offsetof(struct ibv_context, ops.req_notify_cq)",
                8 + 8 * OPS_REQ_NOTIFY_CQ,
            ),
            (
                "offsetof(struct ibv_context, ops.post_srq_recv)",
                8 + 8 * OPS_POST_SRQ_RECV,
            ),
            (
                "offsetof(struct ibv_context, ops.post_send)",
                8 + 8 * OPS_POST_SEND,
            ),
            (
                "offsetof(struct ibv_context, ops.post_recv)",
                8 + 8 * OPS_POST_RECV,
            ),
            ("sizeof(struct ibv_context_ops)", 32 * 8),
            (
                "offsetof(struct ibv_context, abi_compat)",
                offset_of!(IbvContext, abi_compat),
            ),
            ("sizeof(struct verbs_context)", VCTX_SIZE),
            (
                "offsetof(struct verbs_context, context) - offsetof(struct verbs_context, sz)",
                (-VCTX_SZ) as usize,
            ),
            (
                "offsetof(struct verbs_context, context) - offsetof(struct verbs_context, create_qp_ex)",
                (-VCTX_CREATE_QP_EX) as usize,
            ),
            (
                "offsetof(struct verbs_context, context) - offsetof(struct verbs_context, create_cq_ex)",
                (-VCTX_CREATE_CQ_EX) as usize,
            ),
            (
                "offsetof(struct ibv_device, name)",
                offset_of!(IbvDevice, name),
            ),
            ("sizeof(struct ibv_sge)", size_of::<IbvSge>()),
            ("sizeof(struct ibv_send_wr)", size_of::<IbvSendWr>()),
            (
                "offsetof(struct ibv_send_wr, next)",
                offset_of!(IbvSendWr, next),
            ),
            (
                "offsetof(struct ibv_send_wr, sg_list)",
                offset_of!(IbvSendWr, sg_list),
            ),
            (
                "offsetof(struct ibv_send_wr, num_sge)",
                offset_of!(IbvSendWr, num_sge),
            ),
            (
                "offsetof(struct ibv_send_wr, opcode)",
                offset_of!(IbvSendWr, opcode),
            ),
            (
                "offsetof(struct ibv_send_wr, send_flags)",
                offset_of!(IbvSendWr, send_flags),
            ),
            (
                "offsetof(struct ibv_send_wr, wr.rdma.remote_addr)",
                offset_of!(IbvSendWr, remote_addr),
            ),
            (
                "offsetof(struct ibv_send_wr, wr.rdma.rkey)",
                offset_of!(IbvSendWr, w1),
            ),
            (
                "offsetof(struct ibv_send_wr, wr.atomic.remote_addr)",
                offset_of!(IbvSendWr, remote_addr),
            ),
            (
                "offsetof(struct ibv_send_wr, wr.atomic.rkey)",
                offset_of!(IbvSendWr, w3),
            ),
            (
                "offsetof(struct ibv_recv_wr, next)",
                offset_of!(IbvRecvWr, next),
            ),
            (
                "offsetof(struct ibv_recv_wr, sg_list)",
                offset_of!(IbvRecvWr, sg_list),
            ),
            (
                "offsetof(struct ibv_recv_wr, num_sge)",
                offset_of!(IbvRecvWr, num_sge),
            ),
            ("sizeof(struct ibv_recv_wr)", size_of::<IbvRecvWr>()),
            ("sizeof(struct ibv_wc)", size_of::<IbvWc>()),
            ("offsetof(struct ibv_wc, status)", offset_of!(IbvWc, status)),
            ("offsetof(struct ibv_wc, opcode)", offset_of!(IbvWc, opcode)),
            (
                "offsetof(struct ibv_wc, byte_len)",
                offset_of!(IbvWc, byte_len),
            ),
            (
                "offsetof(struct ibv_qp, context)",
                offset_of!(IbvQp, context),
            ),
            ("offsetof(struct ibv_qp, srq)", offset_of!(IbvQp, srq)),
            ("offsetof(struct ibv_qp, qp_num)", offset_of!(IbvQp, qp_num)),
            (
                "offsetof(struct ibv_qp, qp_type)",
                offset_of!(IbvQp, qp_type),
            ),
            ("offsetof(struct ibv_cq, context)", 0),
            ("offsetof(struct ibv_srq, context)", 0),
            (
                "offsetof(struct ibv_qp_attr, qp_state)",
                offset_of!(IbvQpAttr, qp_state),
            ),
            (
                "offsetof(struct ibv_qp_attr, path_mtu)",
                offset_of!(IbvQpAttr, path_mtu),
            ),
            (
                "offsetof(struct ibv_qp_attr, dest_qp_num)",
                offset_of!(IbvQpAttr, dest_qp_num),
            ),
            (
                "offsetof(struct ibv_qp_attr, ah_attr.grh.dgid)",
                offset_of!(IbvQpAttr, ah_attr),
            ),
            (
                "offsetof(struct ibv_qp_attr, ah_attr.grh.sgid_index)",
                offset_of!(IbvQpAttr, ah_attr)
                    + offset_of!(IbvAhAttr, grh)
                    + offset_of!(IbvGlobalRoute, sgid_index),
            ),
            (
                "offsetof(struct ibv_qp_attr, ah_attr.dlid)",
                offset_of!(IbvQpAttr, ah_attr) + offset_of!(IbvAhAttr, dlid),
            ),
            (
                "offsetof(struct ibv_qp_attr, ah_attr.is_global)",
                offset_of!(IbvQpAttr, ah_attr) + offset_of!(IbvAhAttr, is_global),
            ),
            (
                "offsetof(struct ibv_qp_attr, ah_attr.port_num)",
                offset_of!(IbvQpAttr, ah_attr) + offset_of!(IbvAhAttr, port_num),
            ),
            (
                "offsetof(struct ibv_qp_attr, port_num)",
                offset_of!(IbvQpAttr, port_num),
            ),
            (
                "offsetof(struct ibv_qp_init_attr_ex, qp_type)",
                offset_of!(IbvQpInitAttrEx, qp_type),
            ),
            (
                "offsetof(struct ibv_qp_init_attr_ex, comp_mask)",
                offset_of!(IbvQpInitAttrEx, comp_mask),
            ),
            (
                "offsetof(struct ibv_qp_init_attr_ex, send_ops_flags)",
                offset_of!(IbvQpInitAttrEx, send_ops_flags),
            ),
            (
                "offsetof(struct ibv_qp_ex, comp_mask)",
                offset_of!(IbvQpEx, comp_mask),
            ),
            (
                "offsetof(struct ibv_qp_ex, wr_id)",
                offset_of!(IbvQpEx, wr_id),
            ),
            (
                "offsetof(struct ibv_qp_ex, wr_flags)",
                offset_of!(IbvQpEx, wr_flags),
            ),
            (
                "offsetof(struct ibv_qp_ex, wr_atomic_cmp_swp)",
                offset_of!(IbvQpEx, fns) + offset_of!(QpExFns, wr_atomic_cmp_swp),
            ),
            (
                "offsetof(struct ibv_qp_ex, wr_rdma_read)",
                offset_of!(IbvQpEx, fns) + offset_of!(QpExFns, wr_rdma_read),
            ),
            (
                "offsetof(struct ibv_qp_ex, wr_rdma_write)",
                offset_of!(IbvQpEx, fns) + offset_of!(QpExFns, wr_rdma_write),
            ),
            (
                "offsetof(struct ibv_qp_ex, wr_send)",
                offset_of!(IbvQpEx, fns) + offset_of!(QpExFns, wr_send),
            ),
            (
                "offsetof(struct ibv_qp_ex, wr_send_inv)",
                offset_of!(IbvQpEx, fns) + offset_of!(QpExFns, wr_send_inv),
            ),
            (
                "offsetof(struct ibv_qp_ex, wr_set_inline_data)",
                offset_of!(IbvQpEx, fns) + offset_of!(QpExFns, wr_set_inline_data),
            ),
            (
                "offsetof(struct ibv_qp_ex, wr_set_sge)",
                offset_of!(IbvQpEx, fns) + offset_of!(QpExFns, wr_set_sge),
            ),
            (
                "offsetof(struct ibv_qp_ex, wr_set_sge_list)",
                offset_of!(IbvQpEx, fns) + offset_of!(QpExFns, wr_set_sge_list),
            ),
            (
                "offsetof(struct ibv_qp_ex, wr_start)",
                offset_of!(IbvQpEx, fns) + offset_of!(QpExFns, wr_start),
            ),
            (
                "offsetof(struct ibv_qp_ex, wr_complete)",
                offset_of!(IbvQpEx, fns) + offset_of!(QpExFns, wr_complete),
            ),
            (
                "offsetof(struct ibv_qp_ex, wr_abort)",
                offset_of!(IbvQpEx, fns) + offset_of!(QpExFns, wr_abort),
            ),
            (
                "offsetof(struct ibv_qp_ex, wr_atomic_write)",
                offset_of!(IbvQpEx, fns) + offset_of!(QpExFns, wr_atomic_write),
            ),
            ("sizeof(struct ibv_qp_ex)", size_of::<IbvQpEx>()),
            (
                "offsetof(struct ibv_data_buf, length)",
                offset_of!(IbvDataBuf, length),
            ),
            (
                "IBV_QP_INIT_ATTR_SEND_OPS_FLAGS",
                QP_INIT_ATTR_SEND_OPS_FLAGS as usize,
            ),
            ("IBV_WR_RDMA_READ", WR_RDMA_READ as usize),
            (
                "IBV_WR_ATOMIC_FETCH_AND_ADD",
                WR_ATOMIC_FETCH_AND_ADD as usize,
            ),
            ("IBV_WR_SEND_WITH_INV", WR_SEND_WITH_INV as usize),
            ("IBV_SEND_INLINE", SEND_INLINE as usize),
            ("IBV_SEND_SIGNALED", SEND_SIGNALED as usize),
            ("IBV_QP_DEST_QPN", QP_DEST_QPN as usize),
            ("IBV_QP_AV", QP_AV as usize),
            ("IBV_QP_PORT", QP_PORT as usize),
            ("IBV_QP_PATH_MTU", QP_PATH_MTU as usize),
            ("IBV_WC_RECV", 128),
        ];
        let mut c = String::from(
            "#include <stdio.h>\n#include <stddef.h>\n#include <infiniband/verbs.h>\nint main(void){\n",
        );
        for (expr, _) in checks {
            c.push_str(&format!("printf(\"%zu\\n\", (size_t)({expr}));\n"));
        }
        c.push_str("return 0;}\n");
        std::fs::write(&src, c).expect("write off.c");
        let exe = dir.join("off");
        let out = std::process::Command::new("gcc")
            .arg(&src)
            .arg("-o")
            .arg(&exe)
            .output()
            .expect("gcc (install it: scripts/test.sh does)");
        assert!(
            out.status.success(),
            "gcc: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let run = std::process::Command::new(&exe).output().expect("run off");
        let text = String::from_utf8_lossy(&run.stdout).into_owned();
        let got: Vec<usize> = text
            .lines()
            .map(|l| l.trim().parse().expect("number"))
            .collect();
        assert_eq!(got.len(), checks.len());
        let bad: Vec<String> = checks
            .iter()
            .zip(&got)
            .filter(|((_, want), got)| *want != **got)
            .map(|((e, want), got)| format!("{e}: verbs.h says {got}, sigmatop assumes {want}"))
            .collect();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(bad.is_empty(), "rdma-core ABI changed:\n{}", bad.join("\n"));
    }

    #[test]
    fn qp_hash_is_gid_then_qpn() {
        let g = [0u8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1];
        let mut k = g.to_vec();
        k.extend_from_slice(&0x11u32.to_le_bytes());
        assert_eq!(qp_addr_hash(&g, 0x11), fnv1a64(&k));
        assert_ne!(qp_addr_hash(&g, 0x11), qp_addr_hash(&g, 0x12));
    }

    #[test]
    fn device_gid_reads_only_contexts_it_saw_opened() {
        // An emulated devx context (or any pointer) is never passed to ibv_query_gid.
        let fake = [0u8; 64];
        assert_eq!(device_gid(fake.as_ptr() as usize, 1, 0), None);
        assert_eq!(device_gid(0, 1, 0), None);
    }
}
