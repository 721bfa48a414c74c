//! libibverbs layer (rdma-core 44 ABI, x86_64), its files in floors that only look down:
//! [`abi`] the structs it reads, [`context`] each context's state, [`data`] the data-path
//! wrappers, [`qp_ex`] the per-QP `wr_*` pointers, [`control`] QP / CQ / SRQ bookkeeping,
//! [`patch`] the ops-table patching and the `create_*_ex` wrappers, [`exports`] the exported verbs.
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
//!   address (RDMA and atomics), aux = the rkey, flags INLINE / SIGNALED. When the provider
//!   refuses a WR (`*bad_wr`), the WRs before it are recorded normally, the refused one as a
//!   refusal (counted apart from operations; its event has `flags::ERROR` and 0 bytes), and
//!   nothing after it (the provider never read those).
//! - post_recv / post_srq_recv: one RECV / SRQ_RECV per WR posted (its buffer capacity counted
//!   as posted, on the QP or SRQ); the receive itself is counted when poll_cq returns its work
//!   completion, with the completion's `byte_len` (what arrived; a UD QP's 40-byte GRH area
//!   removed), on the QP, or on its SRQ when it has one (where the WR was posted).
//! - poll_cq (every mode): the receive completions above; in full mode also one event per call
//!   that returned completions or an error, on the CQ: bytes = completions, addr = sum of their
//!   `byte_len`, aux = (bitmask of completion opcode classes << 8) | error completions (saturated
//!   at 255), `flags::ERROR` when any completion failed or the call failed.
//!   Not seen: extended CQs polled with `ibv_start_poll` / `ibv_next_poll` (their receives stay
//!   posted), failed receive completions (their opcode is undefined).
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

mod abi;
mod context;
mod control;
mod data;
mod exports;
mod patch;
mod qp_ex;
mod queues;

use core::ffi::CStr;
use core::sync::atomic::{AtomicU64, Ordering};

pub use context::{device_gid, device_lid, note_device};
#[cfg(feature = "bench")]
pub(crate) use control::define_cq;
pub use control::{lid_as_gid, local_addr, qp_addr_hash};
pub use exports::hooks;
pub use patch::patch_context;
pub use queues::{collect as queues, reset_after_fork as queues_after_fork, tick as queues_tick};

const SONAMES: &[&CStr] = &[c"libibverbs.so.1", c"libibverbs.so"];

/// The benchmark's fake QP `id` of `ctx`, QP number `qpn`, as `ibv_create_qp` leaves a real one:
/// its completions found by number, its send queue followed.
#[cfg(feature = "bench")]
pub(crate) fn bench_qp(ctx: *mut core::ffi::c_void, qpn: u32, id: u32) {
    context::note_qp(
        ctx as *mut abi::IbvContext,
        qpn,
        context::RecvTarget {
            ep: id,
            srq: false,
            ud: false,
            qp: id,
        },
    );
    queues::on_created(id, false, 0);
}

/// The verbs layer's locks, for `fork::prepare`.
pub fn hold_for_fork(h: &mut crate::runtime::held::Held) {
    control::hold_for_fork(h);
    context::hold_for_fork(h);
    qp_ex::hold_for_fork(h);
    queues::hold_for_fork(h);
}

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
    crate::interpose::hook::failed(n);
}

#[cold]
fn unpatched(what: &str) {
    UNPATCHED.fetch_add(1, Ordering::Relaxed);
    crate::interpose::hook::failed(1);
    crate::runtime::config::warn(format!("ibverbs: {what}: its traffic is not traced"));
}
