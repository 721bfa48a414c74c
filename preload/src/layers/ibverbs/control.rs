//! The verbs control path's bookkeeping: each QP, CQ and SRQ becomes an endpoint; a QP's state
//! transitions are endpoint updates, and its RTR transition names its peer (see the module doc
//! of `ibverbs` for the (GID, QPN) hash).

use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicU64, Ordering};
use std::collections::HashMap;
use std::sync::Mutex;

use sigmatop::event::{EndpointDef, EndpointKind, LOCAL_ADDR_STATE, Layer, Peer, port_addr_text};

use super::SONAMES;
use super::abi::{
    IbvContext, IbvQp, IbvQpAttr, QP_AV, QP_DEST_QPN, QP_PATH_MTU, QP_PORT, QP_STATE, Qx, ctx_of,
};
use super::context::{RecvTarget, dev_info, forget_qp, note_qp, query_gid};

/// `IBV_QPT_UD`.
const QPT_UD: u32 = 4;
use super::qp_ex::patch_qpx;
use crate::runtime::dl::real_fns;

real_fns! { SONAMES;
    REAL_QP_TO_QP_EX: unsafe extern "C" fn(*mut IbvQp) -> Qx = c"ibv_qp_to_qp_ex";
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

/// The QP table's lock, for `fork::prepare` (a leaf).
pub(super) fn hold_for_fork(h: &mut crate::runtime::held::Held) {
    h.lock(&QPS);
}
static NEXT_CQ: AtomicU64 = AtomicU64::new(0);
static NEXT_SRQ: AtomicU64 = AtomicU64::new(0);

/// Defines a verbs endpoint of `kind` for the object `handle` and binds it.
fn define(
    handle: usize,
    kind: EndpointKind,
    label: String,
    transport: &str,
    qpn: Option<u32>,
) -> u32 {
    let id = crate::runtime::registry::define_full(EndpointDef {
        id: 0,
        layer: Layer::Ibverbs,
        kind,
        label,
        transport: transport.to_string(),
        peer: Peer::default(),
        qpn,
        gpu: None,
        created_ns: 0,
    });
    crate::runtime::registry::bind(handle, id);
    id
}

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

/// Defines the endpoint of a new QP and binds it, and gives it a queue tracker (`sig_all`: its
/// `sq_sig_all`); patches its wr_* pointers when `ex_ops`.
///
/// # Safety
/// `qp` is NULL or a QP just created.
pub(super) unsafe fn on_qp_created(qp: *mut IbvQp, ex_ops: bool, sig_all: bool) {
    if qp.is_null() {
        return;
    }
    // SAFETY: a live QP.
    let (ctx, qpn, qpt, srq) = unsafe { ((*qp).context, (*qp).qp_num, (*qp).qp_type, (*qp).srq) };
    let label = format!("qp 0x{qpn:x}");
    let id = define(
        qp as usize,
        EndpointKind::VerbsQp,
        label,
        transport(qpt),
        Some(qpn),
    );
    // Its receives complete on its SRQ's endpoint when it has one (they were posted there).
    let target = if srq.is_null() {
        RecvTarget {
            ep: id,
            srq: false,
            ud: qpt == QPT_UD,
            qp: id,
        }
    } else {
        RecvTarget {
            ep: crate::runtime::registry::lookup(srq as usize),
            srq: true,
            ud: qpt == QPT_UD,
            qp: id,
        }
    };
    note_qp(ctx, qpn, target);
    // SAFETY: a live QP.
    super::queues::on_created(id, sig_all, unsafe { (*qp).send_cq } as usize);
    crate::runtime::registry::update(id, "RESET", None);
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
    if ex_ops && let Some(to_qp_ex) = REAL_QP_TO_QP_EX.get() {
        // SAFETY: qp is live and new.
        unsafe { patch_qpx(to_qp_ex(qp), id) };
    }
}

fn gid_text(g: &[u8; 16]) -> String {
    std::net::Ipv6Addr::from(*g).to_string()
}

/// The peer of a `LOCAL_ADDR_STATE` update: a QP's own port address `own` (GID, or LID as
/// `lid_as_gid` writes it) and number, hashed as its peer hashes them.
pub fn local_addr(own: &[u8; 16], qpn: u32) -> Peer {
    Peer {
        addr_hash: qp_addr_hash(own, qpn),
        text: format!("{} qp 0x{qpn:x}", port_addr_text(own)),
        qpn: Some(qpn),
        gid: Some(*own),
    }
}

pub use sigmatop::event::{lid_as_gid, qp_addr_hash};

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
pub(super) unsafe fn on_modify(qp: *mut IbvQp, attr: *const IbvQpAttr, mask: c_int) {
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
    super::queues::on_state(ctl.id, a.qp_state);
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
            (lid_as_gid(ah.dlid), None)
        };
        let mtu = if mask & QP_PATH_MTU != 0 {
            128u32 << a.path_mtu.min(5)
        } else {
            0
        };
        // This side's port address as the peer hashes it: the local GID of a GRH path, else
        // (LID-routed: InfiniBand, no GRH) this port's LID.
        let own = lgid.or_else(|| super::context::port_lid(ctl.ctx, ctl.port).map(lid_as_gid));
        if let Some(l) = own {
            crate::runtime::registry::add_own_addr(qp_addr_hash(&l, ctl.qpn));
            crate::runtime::registry::update(
                ctl.id,
                LOCAL_ADDR_STATE,
                Some(local_addr(&l, ctl.qpn)),
            );
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
    crate::runtime::registry::update(ctl.id, state, peer);
}

/// Defines the endpoint of a new CQ (`ibv_create_cq`, `create_cq_ex`; an `ibv_cq_ex` starts with
/// the fields of `ibv_cq`).
pub(crate) fn define_cq(cq: *mut c_void) {
    if !cq.is_null() {
        define_queue(cq, EndpointKind::VerbsCq, "cq", &NEXT_CQ);
    }
}

/// Defines the endpoint of a new SRQ.
pub(super) fn define_srq(srq: *mut c_void) {
    define_queue(srq, EndpointKind::VerbsSrq, "srq", &NEXT_SRQ);
}

/// A CQ or SRQ endpoint, labelled `<what>#<n> <device>`.
fn define_queue(obj: *mut c_void, kind: EndpointKind, what: &str, next: &AtomicU64) {
    // SAFETY: a CQ or SRQ just created: its first field is the context.
    let dev = dev_info(unsafe { ctx_of(obj) });
    let n = next.fetch_add(1, Ordering::Relaxed);
    define(
        obj as usize,
        kind,
        format!("{what}#{n} {}", dev.name),
        "",
        None,
    );
}

/// Forgets a destroyed QP.
pub(super) fn on_qp_destroyed(qp: *mut IbvQp) {
    let ctl = QPS
        .lock()
        .ok()
        .and_then(|mut m| m.as_mut().and_then(|m| m.remove(&(qp as usize))));
    if let Some(c) = ctl {
        forget_qp(c.ctx as *mut IbvContext, c.qpn);
        super::queues::on_destroyed(c.id);
        crate::runtime::registry::update(c.id, "DESTROYED", None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use sigmatop::event::fnv1a64;

    #[test]
    fn qp_hash_is_gid_then_qpn() {
        let g = [0u8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1];
        let mut k = g.to_vec();
        k.extend_from_slice(&0x11u32.to_le_bytes());
        assert_eq!(qp_addr_hash(&g, 0x11), fnv1a64(&k));
        assert_ne!(qp_addr_hash(&g, 0x11), qp_addr_hash(&g, 0x12));
    }
}
