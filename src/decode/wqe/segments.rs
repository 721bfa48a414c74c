//! The mlx5 send WQE segment layouts (reference §1, rdma-core `mlx5dv.h`): ctrl, address vector,
//! remote address, atomic and data segments, their constants, and the parsed [`Wqe`].

use serde::{Deserialize, Serialize};

use super::Opcode;
use crate::decode::wqebbs_for_ds;

/// Largest valid DS: the hardware DS field is 6 bits (Linux `mlx5/core/en/txrx.h`: "16 * 4 == 64
/// does not fit in the 6-bit DS field of Ctrl Segment"); `MLX5_SEND_WQE_MAX_WQEBBS` is 16.
pub const MAX_DS: u8 = 63;

/// `MLX5_INLINE_SEG` (rdma-core `mlx5dv.h`): set in an inline segment's byte_count.
pub const INLINE_SEG: u32 = 0x8000_0000;
/// `MLX5_EXTENDED_UD_AV` (rdma-core `mlx5dv.h`): set in `dqp_dct` when the AV is the full 48 B.
pub const EXTENDED_UD_AV: u32 = 0x8000_0000;
/// Size of `struct mlx5_wqe_av` (rdma-core `mlx5dv.h`, checked by compiling; reference §1).
pub const FULL_AV_BYTES: usize = 48;
/// Size of the base AV (NVSHMEM `ibgda_half_av_seg_t`: dc_key, dqp_dct, stat_rate_sl, fl_mlid, rlid).
pub const HALF_AV_BYTES: usize = 16;
/// NVSHMEM extended-atomic opmods (`ibgda_device.cuh` `IBGDA_4_BYTE_EXT_AMO_OPMOD` = 0x08000000,
/// `IBGDA_8_BYTE_EXT_AMO_OPMOD` = 0x09000000): the opmod byte is `0x08 | log2(bytes/4)`.
pub const EXT_AMO_OPMOD_4_BYTE: u8 = 0x08;
pub const EXT_AMO_OPMOD_8_BYTE: u8 = 0x09;

/// `fm_ce_se` bits (rdma-core `mlx5dv.h`).
pub const CTRL_CQ_UPDATE: u8 = 0x08;
pub const CTRL_SOLICITED: u8 = 0x02;

/// QP transport as far as WQE layout is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum QpType {
    /// RC (and UC, which has the same send WQE layout): no address vector.
    Rc,
    /// DC initiator: an address vector after the ctrl segment.
    Dci,
    /// UD: a datagram segment (address vector) after the ctrl segment.
    Ud,
}

impl QpType {
    /// From CREATE_QP `qpc.st` (`mlx5_ifc.h` `MLX5_QPC_ST_*`: RC 0x0, UC 0x1, UD 0x2, DCI 0x5).
    /// Other service types (XRC, raw, QP0/1, UMR) have layouts this parser does not cover.
    pub fn from_qpc_st(st: u8) -> Option<Self> {
        match st {
            0x0 | 0x1 => Some(Self::Rc),
            0x2 => Some(Self::Ud),
            0x5 => Some(Self::Dci),
            _ => None,
        }
    }

    /// Whether WQEs on this QP carry an address vector after the ctrl segment.
    pub(super) fn has_av(self) -> bool {
        matches!(self, Self::Dci | Self::Ud)
    }
}

/// `struct mlx5_wqe_ctrl_seg` (16 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CtrlSeg {
    /// `opmod_idx_opcode` bits 31:24.
    pub opmod: u8,
    /// `opmod_idx_opcode` bits 23:8: the first WQEBB of this WQE (wraps at 0xffff).
    pub wqe_index: u16,
    /// `opmod_idx_opcode` bits 7:0.
    pub opcode: u8,
    /// `qpn_ds` bits 31:8.
    pub qpn: u32,
    /// `qpn_ds` bits 7:0: size in 16-byte units over all segments.
    pub ds: u8,
    pub signature: u8,
    pub dci_stream_channel_id: u16,
    pub fm_ce_se: u8,
    /// Immediate data, invalidate key or UMR mkey (raw big-endian value).
    pub imm: u32,
}

impl CtrlSeg {
    pub const BYTES: usize = 16;

    pub fn from_bytes(b: &[u8; 16]) -> Self {
        let w0 = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        let w1 = u32::from_be_bytes([b[4], b[5], b[6], b[7]]);
        Self {
            opmod: (w0 >> 24) as u8,
            wqe_index: ((w0 >> 8) & 0xffff) as u16,
            opcode: (w0 & 0xff) as u8,
            qpn: w1 >> 8,
            ds: (w1 & 0xff) as u8,
            signature: b[8],
            dci_stream_channel_id: u16::from_be_bytes([b[9], b[10]]),
            fm_ce_se: b[11],
            imm: u32::from_be_bytes([b[12], b[13], b[14], b[15]]),
        }
    }

    /// WQEBBs this WQE occupies, `(ds*16 + 63) / 64`.
    pub fn wqebbs(&self) -> u16 {
        wqebbs_for_ds(self.ds)
    }

    /// A CQE is requested (`MLX5_WQE_CTRL_CQ_UPDATE`).
    pub fn signaled(&self) -> bool {
        self.fm_ce_se & CTRL_CQ_UPDATE != 0
    }

    pub fn solicited(&self) -> bool {
        self.fm_ce_se & CTRL_SOLICITED != 0
    }

    /// Fence mode, bits 7:5 of `fm_ce_se` (1 initiator small fence, 2 fence, 3 strong ordering,
    /// 4 fence + initiator small fence, in NVSHMEM's naming).
    pub fn fence_mode(&self) -> u8 {
        self.fm_ce_se >> 5
    }
}

/// DC/UD address vector (`struct mlx5_wqe_av`); a half AV fills only the first 16 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AddressVector {
    /// Full 48-byte AV (`MLX5_EXTENDED_UD_AV` set) vs 16-byte half AV.
    pub full: bool,
    /// DC access key (DCI) or `{qkey, reserved}` (UD), as a BE64.
    pub key: u64,
    /// Destination QP / DCT number (the extended bit removed).
    pub dqp_dct: u32,
    pub stat_rate_sl: u8,
    pub fl_mlid: u8,
    pub rlid: u16,
    /// Remote MAC (RoCE); zero in a half AV.
    pub rmac: [u8; 6],
    pub tclass: u8,
    pub hop_limit: u8,
    pub grh_gid_fl: u32,
    /// Remote GID; zero in a half AV.
    pub rgid: [u8; 16],
}

/// `struct mlx5_wqe_raddr_seg`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RaddrSeg {
    pub raddr: u64,
    pub rkey: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum AtomicKind {
    CompareSwap,
    FetchAdd,
    MaskedCompareSwap,
    MaskedFetchAdd,
}

/// Atomic operands. Plain CS/FA: `mlx5_wqe_atomic_seg {swap_add, compare}` on 8 bytes. Masked
/// (incl. NVSHMEM's extended atomics, opmod 0x08 = 4 B, 0x09 = 8 B): FA is `{add, field_boundary}`
/// (`compare` holds the boundary), CS is `{swap, compare, swap_mask, compare_mask}`. 4-byte
/// operands are zero-extended; operands wider than 8 bytes are not decoded (0), only sized.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AtomicSeg {
    pub kind: AtomicKind,
    /// Operand width in bytes: 8 for plain atomics, `4 << (opmod & 7)` for masked ones.
    pub arg_bytes: u8,
    pub swap_add: u64,
    pub compare: u64,
    pub swap_add_mask: u64,
    pub compare_mask: u64,
}

/// Sum over the data segments (`struct mlx5_wqe_data_seg`), with the first one's key and address.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DataSummary {
    /// Number of data segments (scatter/gather entries).
    pub sges: u16,
    /// Sum of their `byte_count`.
    pub bytes: u64,
    /// `lkey` of the first segment.
    pub lkey: u32,
    /// `addr` of the first segment.
    pub addr: u64,
}

/// One parsed send WQE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Wqe {
    pub ctrl: CtrlSeg,
    pub opcode: Opcode,
    /// Ring slot of the first WQEBB (`index & (sq_cnt - 1)`).
    pub slot: u32,
    pub wqebbs: u16,
    /// False when the opcode's segments are not decoded (UMR, TSO, unknown…); the ctrl segment
    /// and the size are still valid.
    pub decoded: bool,
    pub av: Option<AddressVector>,
    pub raddr: Option<RaddrSeg>,
    pub atomic: Option<AtomicSeg>,
    pub data: DataSummary,
    /// Inline payload length (`byte_count & 0x7fffffff`, summed if several inline segments).
    pub inline_bytes: Option<u32>,
}

impl Wqe {
    /// Payload bytes: the sum of the data segments' byte counts plus any inline length.
    pub fn bytes(&self) -> u64 {
        self.data.bytes + u64::from(self.inline_bytes.unwrap_or(0))
    }
}
