//! mlx5 send WQEs parsed out of a send-queue ring snapshot, and the bounded walk over the WQEBBs
//! one doorbell covers.
//!
//! Layouts are those of reference §1 (rdma-core `providers/mlx5/mlx5dv.h`, NVSHMEM
//! `ibgda_device.cuh`). Every multi-byte field is big-endian. Segments are read modulo the ring,
//! so a WQE that spans the end of the ring parses like any other.
//!
//! Segment order per opcode (what rdma-core `qp.c` and NVSHMEM write):
//!
//! | opcode | segments after ctrl |
//! |---|---|
//! | NOP | none (NVSHMEM writes ds 2 but only the ctrl) |
//! | DUMP (NVSHMEM 0x23) | data |
//! | SEND, SEND_IMM, SEND_INVAL | [AV], data or inline |
//! | RDMA_WRITE, RDMA_WRITE_IMM, RDMA_READ | [AV], raddr, data or inline |
//! | ATOMIC_CS/FA, ATOMIC_MASKED_CS/FA | [AV], raddr, atomic (16 or 32 B, more for wide masked), data |
//! | anything else | not decoded (the ctrl segment and the size are still known) |
//!
//! `[AV]` is present on DCI and UD QPs: 16 bytes (half AV) unless `dqp_dct` has
//! `MLX5_EXTENDED_UD_AV` (0x80000000) set, then 48 bytes (`struct mlx5_wqe_av`). That is the rule
//! rdma-core's DC code and UCX (`uct_ib_mlx5_wqe_av_size`) use; NVSHMEM's `ibgda_half_av_seg_t`
//! leaves the bit clear. With a full AV, ctrl + AV fill the first WQEBB and raddr/data continue
//! in the next one, which a sequential read handles.

use serde::{Deserialize, Serialize};

pub use super::doorbell::WqeRange;
use super::{DS_BYTES, WQEBB_BYTES, be, valid_sq_cnt, wqebbs_for_ds};

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

    fn has_av(self) -> bool {
        matches!(self, Self::Dci | Self::Ud)
    }
}

/// Send opcodes (rdma-core `mlx5dv.h` `MLX5_OPCODE_*`; DUMP from NVSHMEM `ibgda_device.cuh`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Opcode {
    Nop,
    SendInval,
    RdmaWrite,
    RdmaWriteImm,
    Send,
    SendImm,
    Tso,
    RdmaRead,
    AtomicCs,
    AtomicFa,
    AtomicMaskedCs,
    AtomicMaskedFa,
    Fmr,
    LocalInval,
    ConfigCmd,
    SetPsv,
    Dump,
    Umr,
    TagMatching,
    FlowTblAccess,
    Mmo,
    Unknown(u8),
}

impl Opcode {
    pub fn from_u8(v: u8) -> Self {
        match v {
            0x00 => Self::Nop,
            0x01 => Self::SendInval,
            0x08 => Self::RdmaWrite,
            0x09 => Self::RdmaWriteImm,
            0x0a => Self::Send,
            0x0b => Self::SendImm,
            0x0e => Self::Tso,
            0x10 => Self::RdmaRead,
            0x11 => Self::AtomicCs,
            0x12 => Self::AtomicFa,
            0x14 => Self::AtomicMaskedCs,
            0x15 => Self::AtomicMaskedFa,
            0x19 => Self::Fmr,
            0x1b => Self::LocalInval,
            0x1f => Self::ConfigCmd,
            0x20 => Self::SetPsv,
            0x23 => Self::Dump,
            0x25 => Self::Umr,
            0x28 => Self::TagMatching,
            0x2c => Self::FlowTblAccess,
            0x2f => Self::Mmo,
            other => Self::Unknown(other),
        }
    }

    pub fn code(self) -> u8 {
        match self {
            Self::Nop => 0x00,
            Self::SendInval => 0x01,
            Self::RdmaWrite => 0x08,
            Self::RdmaWriteImm => 0x09,
            Self::Send => 0x0a,
            Self::SendImm => 0x0b,
            Self::Tso => 0x0e,
            Self::RdmaRead => 0x10,
            Self::AtomicCs => 0x11,
            Self::AtomicFa => 0x12,
            Self::AtomicMaskedCs => 0x14,
            Self::AtomicMaskedFa => 0x15,
            Self::Fmr => 0x19,
            Self::LocalInval => 0x1b,
            Self::ConfigCmd => 0x1f,
            Self::SetPsv => 0x20,
            Self::Dump => 0x23,
            Self::Umr => 0x25,
            Self::TagMatching => 0x28,
            Self::FlowTblAccess => 0x2c,
            Self::Mmo => 0x2f,
            Self::Unknown(v) => v,
        }
    }

    /// The `MLX5_OPCODE_*` suffix, e.g. `"RDMA_WRITE"`; `"UNKNOWN"` for unlisted codes.
    pub fn name(self) -> &'static str {
        match self {
            Self::Nop => "NOP",
            Self::SendInval => "SEND_INVAL",
            Self::RdmaWrite => "RDMA_WRITE",
            Self::RdmaWriteImm => "RDMA_WRITE_IMM",
            Self::Send => "SEND",
            Self::SendImm => "SEND_IMM",
            Self::Tso => "TSO",
            Self::RdmaRead => "RDMA_READ",
            Self::AtomicCs => "ATOMIC_CS",
            Self::AtomicFa => "ATOMIC_FA",
            Self::AtomicMaskedCs => "ATOMIC_MASKED_CS",
            Self::AtomicMaskedFa => "ATOMIC_MASKED_FA",
            Self::Fmr => "FMR",
            Self::LocalInval => "LOCAL_INVAL",
            Self::ConfigCmd => "CONFIG_CMD",
            Self::SetPsv => "SET_PSV",
            Self::Dump => "DUMP",
            Self::Umr => "UMR",
            Self::TagMatching => "TAG_MATCHING",
            Self::FlowTblAccess => "FLOW_TBL_ACCESS",
            Self::Mmo => "MMO",
            Self::Unknown(_) => "UNKNOWN",
        }
    }

    pub fn is_atomic(self) -> bool {
        matches!(
            self,
            Self::AtomicCs | Self::AtomicFa | Self::AtomicMaskedCs | Self::AtomicMaskedFa
        )
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

/// Why a WQE could not be parsed. None of these panics or hangs; each is counted by callers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum WqeError {
    /// `sq_cnt` is not a power of two in `1..=MAX_SQ_CNT`.
    InvalidSqCnt { sq_cnt: u32 },
    /// The ring snapshot is shorter than `sq_cnt * 64` bytes.
    RingTooSmall { need: usize, have: usize },
    /// ds 0: no WQE can be this small (not even the ctrl segment fits).
    ZeroDs,
    /// ds over [`MAX_DS`], or more WQEBBs than the ring has.
    AbsurdDs { ds: u8 },
    /// A segment runs past `ds * 16` bytes.
    Truncated {
        offset: u16,
        need: u16,
        wqe_bytes: u16,
    },
    /// An inline segment's length does not fit in the WQE.
    InlineOverflow { len: u32, room: u16 },
    /// A masked atomic whose opmod names an operand wider than 32 bytes.
    UnsupportedAtomicOpmod { opmod: u8 },
}

impl core::fmt::Display for WqeError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::InvalidSqCnt { sq_cnt } => write!(f, "invalid send queue size {sq_cnt}"),
            Self::RingTooSmall { need, have } => {
                write!(f, "ring snapshot has {have} bytes, needs {need}")
            }
            Self::ZeroDs => write!(f, "WQE with ds 0"),
            Self::AbsurdDs { ds } => write!(f, "WQE with absurd ds {ds}"),
            Self::Truncated {
                offset,
                need,
                wqe_bytes,
            } => write!(
                f,
                "segment of {need} bytes at offset {offset} runs past the {wqe_bytes}-byte WQE"
            ),
            Self::InlineOverflow { len, room } => {
                write!(f, "inline length {len} does not fit in {room} bytes")
            }
            Self::UnsupportedAtomicOpmod { opmod } => {
                write!(f, "masked atomic with unsupported opmod {opmod:#x}")
            }
        }
    }
}

impl core::error::Error for WqeError {}

/// Sequential reader over one WQE, modulo the ring.
struct Reader<'a> {
    ring: &'a [u8],
    mask: usize,
    base: usize,
    pos: usize,
    limit: usize,
}

impl Reader<'_> {
    fn remaining(&self) -> usize {
        self.limit.saturating_sub(self.pos)
    }

    fn fill(&mut self, out: &mut [u8]) -> Result<(), WqeError> {
        if out.len() > self.remaining() {
            return Err(WqeError::Truncated {
                offset: self.pos as u16,
                need: out.len() as u16,
                wqe_bytes: self.limit as u16,
            });
        }
        for (i, o) in out.iter_mut().enumerate() {
            let at = (self.base + self.pos + i) & self.mask;
            // The ring length was checked against the mask; `get` keeps this panic-free anyway.
            *o = self.ring.get(at).copied().unwrap_or(0);
        }
        self.pos += out.len();
        Ok(())
    }

    fn take<const N: usize>(&mut self) -> Result<[u8; N], WqeError> {
        let mut out = [0u8; N];
        self.fill(&mut out)?;
        Ok(out)
    }

    fn peek_be32(&self) -> Result<u32, WqeError> {
        let mut probe = Reader { ..*self };
        probe.take::<4>().map(u32::from_be_bytes)
    }

    fn skip(&mut self, n: usize) -> Result<(), WqeError> {
        if n > self.remaining() {
            return Err(WqeError::Truncated {
                offset: self.pos as u16,
                need: n as u16,
                wqe_bytes: self.limit as u16,
            });
        }
        self.pos += n;
        Ok(())
    }
}

fn check_ring(ring: &[u8], sq_cnt: u32) -> Result<usize, WqeError> {
    if !valid_sq_cnt(sq_cnt) {
        return Err(WqeError::InvalidSqCnt { sq_cnt });
    }
    let need = sq_cnt as usize * WQEBB_BYTES;
    if ring.len() < need {
        return Err(WqeError::RingTooSmall {
            need,
            have: ring.len(),
        });
    }
    Ok(need)
}

/// Reads the ctrl segment at ring slot `slot_index & (sq_cnt-1)` and checks its ds, without
/// decoding the other segments. This is what the walk needs to advance.
pub fn parse_ctrl(ring: &[u8], sq_cnt: u32, slot_index: u32) -> Result<CtrlSeg, WqeError> {
    let ring_bytes = check_ring(ring, sq_cnt)?;
    let slot = slot_index & (sq_cnt - 1);
    let mut r = Reader {
        ring,
        mask: ring_bytes - 1,
        base: slot as usize * WQEBB_BYTES,
        pos: 0,
        limit: CtrlSeg::BYTES,
    };
    let ctrl = CtrlSeg::from_bytes(&r.take::<16>()?);
    check_ds(&ctrl, sq_cnt)?;
    Ok(ctrl)
}

fn check_ds(ctrl: &CtrlSeg, sq_cnt: u32) -> Result<(), WqeError> {
    if ctrl.ds == 0 {
        return Err(WqeError::ZeroDs);
    }
    if ctrl.ds > MAX_DS || u32::from(ctrl.wqebbs()) > sq_cnt {
        return Err(WqeError::AbsurdDs { ds: ctrl.ds });
    }
    Ok(())
}

/// Parses the WQE whose first WQEBB is ring slot `slot_index & (sq_cnt-1)`.
///
/// `ring` is a snapshot of the whole send queue (at least `sq_cnt * 64` bytes; only that prefix
/// is used). Segments are read modulo the ring. The ctrl's `wqe_index` is returned, not checked:
/// [`walk_new_wqes`] checks it against the expected producer index.
pub fn parse_wqe(
    ring: &[u8],
    sq_cnt: u32,
    slot_index: u32,
    qp_type: QpType,
) -> Result<Wqe, WqeError> {
    let ring_bytes = check_ring(ring, sq_cnt)?;
    let slot = slot_index & (sq_cnt - 1);
    let mut r = Reader {
        ring,
        mask: ring_bytes - 1,
        base: slot as usize * WQEBB_BYTES,
        pos: 0,
        limit: CtrlSeg::BYTES,
    };
    let ctrl = CtrlSeg::from_bytes(&r.take::<16>()?);
    check_ds(&ctrl, sq_cnt)?;
    r.limit = usize::from(ctrl.ds) * DS_BYTES;

    let opcode = Opcode::from_u8(ctrl.opcode);
    let mut wqe = Wqe {
        ctrl,
        opcode,
        slot,
        wqebbs: ctrl.wqebbs(),
        decoded: true,
        av: None,
        raddr: None,
        atomic: None,
        data: DataSummary::default(),
        inline_bytes: None,
    };

    let (wire, has_raddr) = match opcode {
        Opcode::Nop => return Ok(wqe),
        Opcode::Dump => (false, false),
        Opcode::Send | Opcode::SendImm | Opcode::SendInval => (true, false),
        Opcode::RdmaWrite | Opcode::RdmaWriteImm | Opcode::RdmaRead => (true, true),
        op if op.is_atomic() => (true, true),
        _ => {
            wqe.decoded = false;
            return Ok(wqe);
        }
    };

    if wire && qp_type.has_av() {
        wqe.av = Some(read_av(&mut r)?);
    }
    if has_raddr {
        let b = r.take::<16>()?;
        wqe.raddr = Some(RaddrSeg {
            raddr: u64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]),
            rkey: u32::from_be_bytes([b[8], b[9], b[10], b[11]]),
        });
    }
    if opcode.is_atomic() {
        wqe.atomic = Some(read_atomic(&mut r, opcode, ctrl.opmod)?);
    }
    read_data(&mut r, &mut wqe)?;
    Ok(wqe)
}

fn read_av(r: &mut Reader<'_>) -> Result<AddressVector, WqeError> {
    let h = r.take::<HALF_AV_BYTES>()?;
    let dqp = u32::from_be_bytes([h[8], h[9], h[10], h[11]]);
    let mut av = AddressVector {
        full: dqp & EXTENDED_UD_AV != 0,
        key: u64::from_be_bytes([h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]]),
        dqp_dct: dqp & !EXTENDED_UD_AV,
        stat_rate_sl: h[12],
        fl_mlid: h[13],
        rlid: u16::from_be_bytes([h[14], h[15]]),
        rmac: [0; 6],
        tclass: 0,
        hop_limit: 0,
        grh_gid_fl: 0,
        rgid: [0; 16],
    };
    if av.full {
        // struct mlx5_wqe_av after the base: reserved0[4], rmac[6], tclass, hop_limit,
        // grh_gid_fl (BE32), rgid[16].
        let t = r.take::<{ FULL_AV_BYTES - HALF_AV_BYTES }>()?;
        av.rmac.copy_from_slice(&t[4..10]);
        av.tclass = t[10];
        av.hop_limit = t[11];
        av.grh_gid_fl = u32::from_be_bytes([t[12], t[13], t[14], t[15]]);
        av.rgid.copy_from_slice(&t[16..32]);
    }
    Ok(av)
}

fn read_atomic(r: &mut Reader<'_>, opcode: Opcode, opmod: u8) -> Result<AtomicSeg, WqeError> {
    let masked = matches!(opcode, Opcode::AtomicMaskedCs | Opcode::AtomicMaskedFa);
    let arg: usize = if !masked {
        8
    } else if opmod & 0x08 != 0 {
        // 0x08 | log2(arg/4): 4, 8, 16, 32 bytes.
        let l = opmod & 0x07;
        if l > 3 {
            return Err(WqeError::UnsupportedAtomicOpmod { opmod });
        }
        4usize << l
    } else {
        // Older masked atomics without the size bit operate on 8 bytes.
        8
    };
    let kind = match opcode {
        Opcode::AtomicCs => AtomicKind::CompareSwap,
        Opcode::AtomicFa => AtomicKind::FetchAdd,
        Opcode::AtomicMaskedCs => AtomicKind::MaskedCompareSwap,
        _ => AtomicKind::MaskedFetchAdd,
    };
    // Plain: 16 B. Masked FA: {add, boundary} = 2*arg. Masked CS: 4*arg. Padded to 16 B.
    let operands = match kind {
        AtomicKind::CompareSwap | AtomicKind::FetchAdd => 2,
        AtomicKind::MaskedFetchAdd => 2,
        AtomicKind::MaskedCompareSwap => 4,
    };
    let seg = (operands * arg).div_ceil(DS_BYTES) * DS_BYTES;
    let mut buf = [0u8; 128];
    let Some(dst) = buf.get_mut(..seg) else {
        return Err(WqeError::UnsupportedAtomicOpmod { opmod });
    };
    r.fill(dst)?;
    let operand = |i: usize| -> u64 {
        match arg {
            4 => be::u32(&buf, i * 4).map_or(0, u64::from),
            8 => be::u64(&buf, i * 8).unwrap_or(0),
            _ => 0,
        }
    };
    let mut a = AtomicSeg {
        kind,
        arg_bytes: arg as u8,
        swap_add: operand(0),
        compare: operand(1),
        swap_add_mask: 0,
        compare_mask: 0,
    };
    if kind == AtomicKind::MaskedCompareSwap {
        a.swap_add_mask = operand(2);
        a.compare_mask = operand(3);
    }
    Ok(a)
}

fn read_data(r: &mut Reader<'_>, wqe: &mut Wqe) -> Result<(), WqeError> {
    // Each data segment is 16 bytes and each inline segment a multiple of 16, so this loop runs
    // at most ds times.
    while r.remaining() > 0 {
        let bc = r.peek_be32()?;
        if bc & INLINE_SEG != 0 {
            let len = bc & !INLINE_SEG;
            let room = r.remaining();
            let total = (len as usize)
                .checked_add(4 + DS_BYTES - 1)
                .map(|v| v / DS_BYTES * DS_BYTES);
            match total {
                Some(t) if t <= room => r.skip(t)?,
                _ => {
                    return Err(WqeError::InlineOverflow {
                        len,
                        room: room as u16,
                    });
                }
            }
            wqe.inline_bytes = Some(wqe.inline_bytes.unwrap_or(0).saturating_add(len));
        } else {
            let s = r.take::<16>()?;
            let d = &mut wqe.data;
            if d.sges == 0 {
                d.lkey = u32::from_be_bytes([s[4], s[5], s[6], s[7]]);
                d.addr = u64::from_be_bytes([s[8], s[9], s[10], s[11], s[12], s[13], s[14], s[15]]);
            }
            d.sges = d.sges.saturating_add(1);
            d.bytes += u64::from(bc);
        }
    }
    Ok(())
}

/// Why a walk stopped, or why one WQE in it was skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum WalkError {
    /// The ring or the range cannot be walked at all (bad `sq_cnt`, short snapshot, a range
    /// longer than the ring).
    Ring(WqeError),
    /// The range covers more WQEBBs than the ring has (the tracker never produces this).
    RangeTooLong { wqebbs: u32, sq_cnt: u32 },
    /// The ctrl segment's index is not the expected producer index: the slot holds a stale or
    /// foreign WQE, or the snapshot is torn. Counted as corruption; the walk stops.
    IndexMismatch { expected: u16, found: u16 },
    /// The ctrl segment has ds 0 or an absurd ds: the walk cannot advance and stops.
    BadCtrl { at: u16, error: WqeError },
    /// The WQE at `at` is longer than what is left of the range: the walk stops.
    Overshoot { at: u16, wqebbs: u16, left: u32 },
    /// CPU convention: the doorbell named the WQE at `expected`, but the walk did not end right
    /// after a WQE starting there (`found` is where the last parsed WQE started).
    LastWqeMismatch { expected: u16, found: u16 },
    /// The ctrl segment was fine (index and size) but its other segments did not parse. The walk
    /// counts it and goes on, because the size is known.
    Unparsable {
        at: u16,
        ctrl: CtrlSeg,
        error: WqeError,
    },
}

impl WalkError {
    /// Whether the walk stops at this error (all but [`WalkError::Unparsable`]).
    pub fn is_fatal(&self) -> bool {
        !matches!(self, Self::Unparsable { .. })
    }

    /// Whether this is evidence of ring corruption or lost state.
    pub fn is_corruption(&self) -> bool {
        matches!(
            self,
            Self::IndexMismatch { .. }
                | Self::BadCtrl { .. }
                | Self::Overshoot { .. }
                | Self::LastWqeMismatch { .. }
        )
    }
}

/// Iterator over the WQEs of one [`WqeRange`], one WQE at a time. It yields at most
/// `range.wqebbs <= sq_cnt` items, since every step advances at least one WQEBB, and stops after
/// the first fatal error.
pub struct WqeWalker<'a> {
    ring: &'a [u8],
    sq_cnt: u32,
    qp_type: QpType,
    cursor: u16,
    left: u32,
    last_wqe: Option<u16>,
    last_start: Option<u16>,
    done: bool,
    pending: Option<WalkError>,
}

impl<'a> WqeWalker<'a> {
    pub fn new(ring: &'a [u8], sq_cnt: u32, range: &WqeRange, qp_type: QpType) -> Self {
        let pending = match check_ring(ring, sq_cnt) {
            Err(e) => Some(WalkError::Ring(e)),
            Ok(_) if range.wqebbs > sq_cnt => Some(WalkError::RangeTooLong {
                wqebbs: range.wqebbs,
                sq_cnt,
            }),
            Ok(_) => None,
        };
        Self {
            ring,
            sq_cnt,
            qp_type,
            cursor: range.start,
            left: range.wqebbs,
            last_wqe: range.last_wqe,
            last_start: None,
            done: false,
            pending,
        }
    }

    /// The producer index the walk has reached (the range end after a complete walk).
    pub fn cursor(&self) -> u16 {
        self.cursor
    }

    /// WQEBBs of the range not walked yet.
    pub fn left(&self) -> u32 {
        self.left
    }

    fn fail(&mut self, e: WalkError) -> Option<Result<Wqe, WalkError>> {
        self.done = true;
        Some(Err(e))
    }
}

impl Iterator for WqeWalker<'_> {
    type Item = Result<Wqe, WalkError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        if let Some(e) = self.pending.take() {
            return self.fail(e);
        }
        if self.left == 0 {
            self.done = true;
            if let Some(expected) = self.last_wqe
                && self.last_start != Some(expected)
            {
                return self.fail(WalkError::LastWqeMismatch {
                    expected,
                    found: self.last_start.unwrap_or(self.cursor),
                });
            }
            return None;
        }
        let at = self.cursor;
        let ctrl = match parse_ctrl(self.ring, self.sq_cnt, u32::from(at)) {
            Ok(c) => c,
            Err(error) => {
                // A stale slot with garbage ds is reported as the index problem when the index is
                // also wrong, since that is the more telling symptom.
                if let Some(b) = be::u32(
                    self.ring,
                    (u32::from(at) & (self.sq_cnt - 1)) as usize * WQEBB_BYTES,
                ) {
                    let found = ((b >> 8) & 0xffff) as u16;
                    if found != at {
                        return self.fail(WalkError::IndexMismatch {
                            expected: at,
                            found,
                        });
                    }
                }
                return self.fail(WalkError::BadCtrl { at, error });
            }
        };
        if ctrl.wqe_index != at {
            return self.fail(WalkError::IndexMismatch {
                expected: at,
                found: ctrl.wqe_index,
            });
        }
        let k = ctrl.wqebbs();
        if u32::from(k) > self.left {
            return self.fail(WalkError::Overshoot {
                at,
                wqebbs: k,
                left: self.left,
            });
        }
        self.cursor = at.wrapping_add(k);
        self.left -= u32::from(k);
        self.last_start = Some(at);
        if self.last_wqe == Some(at) && self.left != 0 {
            // CPU doorbell: the named WQE must be the last one of the range.
            self.pending = Some(WalkError::LastWqeMismatch {
                expected: at,
                found: at,
            });
        }
        Some(
            parse_wqe(self.ring, self.sq_cnt, u32::from(at), self.qp_type)
                .map_err(|error| WalkError::Unparsable { at, ctrl, error }),
        )
    }
}

/// Result of [`walk_new_wqes`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WalkOutcome {
    /// The WQEs parsed, in ring order.
    pub wqes: Vec<Wqe>,
    /// WQEs whose ctrl was valid but whose segments did not parse (skipped, counted).
    pub unparsable: u32,
    /// The first unparsable one, for reporting.
    pub first_unparsable: Option<WalkError>,
    /// WQEBBs walked.
    pub walked: u32,
    /// Producer index where the walk stopped (the range end when complete).
    pub cursor: u16,
    /// The fatal error that stopped the walk early, if any.
    pub error: Option<WalkError>,
}

impl WalkOutcome {
    pub fn is_complete(&self) -> bool {
        self.error.is_none()
    }

    pub fn is_corrupt(&self) -> bool {
        self.error.is_some_and(|e| e.is_corruption())
    }
}

/// Walks the WQEs a doorbell step covers, from `range.start`, checking each ctrl index against
/// the cursor and advancing by each WQE's WQEBBs. Bounded by `range.wqebbs <= sq_cnt`: it can
/// never loop forever, and it allocates at most one entry per WQEBB walked.
#[must_use]
pub fn walk_new_wqes(ring: &[u8], sq_cnt: u32, range: &WqeRange, qp_type: QpType) -> WalkOutcome {
    let mut walker = WqeWalker::new(ring, sq_cnt, range, qp_type);
    let mut out = WalkOutcome {
        wqes: Vec::new(),
        unparsable: 0,
        first_unparsable: None,
        walked: 0,
        cursor: range.start,
        error: None,
    };
    for item in walker.by_ref() {
        match item {
            Ok(w) => out.wqes.push(w),
            Err(e) if !e.is_fatal() => {
                out.unparsable += 1;
                out.first_unparsable.get_or_insert(e);
            }
            Err(e) => out.error = Some(e),
        }
    }
    out.cursor = walker.cursor();
    out.walked = range.wqebbs.saturating_sub(walker.left());
    out
}

#[cfg(test)]
#[path = "wqe_tests.rs"]
mod tests;
