//! The rdma-core 44 ABI (infiniband/verbs.h) sigmatop reads and patches. Offsets are checked
//! against the installed header by the `abi_matches_verbs_h` test.

use core::ffi::{c_char, c_int, c_uint, c_void};

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
pub const VCTX_SZ: isize = -8;
pub const VCTX_CREATE_QP_EX: isize = -56;
pub const VCTX_CREATE_CQ_EX: isize = -120;
/// `sizeof(struct verbs_context)` in rdma-core 44.
pub const VCTX_SIZE: usize = 648;
/// `__VERBS_ABI_IS_EXTENDED`.
pub const ABI_IS_EXTENDED: usize = usize::MAX;

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

pub type Qx = *mut IbvQpEx;

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
pub const WR_RDMA_WRITE: u32 = 0;
pub const WR_RDMA_WRITE_WITH_IMM: u32 = 1;
pub const WR_SEND: u32 = 2;
pub const WR_SEND_WITH_IMM: u32 = 3;
pub const WR_RDMA_READ: u32 = 4;
pub const WR_ATOMIC_CMP_AND_SWP: u32 = 5;
pub const WR_ATOMIC_FETCH_AND_ADD: u32 = 6;
pub const WR_SEND_WITH_INV: u32 = 9;
pub const WR_TSO: u32 = 10;
// enum ibv_send_flags
pub const SEND_SIGNALED: u32 = 1 << 1;
pub const SEND_INLINE: u32 = 1 << 3;
// enum ibv_qp_attr_mask
pub const QP_STATE: c_int = 1 << 0;
pub const QP_PORT: c_int = 1 << 5;
pub const QP_AV: c_int = 1 << 7;
pub const QP_PATH_MTU: c_int = 1 << 8;
pub const QP_DEST_QPN: c_int = 1 << 20;
// enum ibv_qp_init_attr_mask
pub const QP_INIT_ATTR_SEND_OPS_FLAGS: u32 = 1 << 6;

pub type PostSendFn =
    unsafe extern "C" fn(*mut IbvQp, *mut IbvSendWr, *mut *mut IbvSendWr) -> c_int;
pub type PostRecvFn =
    unsafe extern "C" fn(*mut IbvQp, *mut IbvRecvWr, *mut *mut IbvRecvWr) -> c_int;
pub type PostSrqRecvFn =
    unsafe extern "C" fn(*mut c_void, *mut IbvRecvWr, *mut *mut IbvRecvWr) -> c_int;
pub type PollCqFn = unsafe extern "C" fn(*mut c_void, c_int, *mut IbvWc) -> c_int;
pub type ReqNotifyFn = unsafe extern "C" fn(*mut c_void, c_int) -> c_int;
pub type CreateQpExFn = unsafe extern "C" fn(*mut IbvContext, *mut IbvQpInitAttrEx) -> *mut IbvQp;
pub type CreateCqExFn = unsafe extern "C" fn(*mut IbvContext, *mut c_void) -> *mut c_void;

/// The first field of ibv_qp, ibv_cq and ibv_srq is their context.
///
/// # Safety
/// `obj` is a live verbs object (QP, CQ or SRQ).
#[inline(always)]
pub unsafe fn ctx_of(obj: *mut c_void) -> *mut IbvContext {
    // SAFETY: caller's contract.
    unsafe { *(obj as *const *mut IbvContext) }
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
}
