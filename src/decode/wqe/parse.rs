//! One send WQE parsed out of a ring snapshot: the ctrl segment, then the segments its opcode
//! has, read sequentially modulo the ring.
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

use super::{
    AddressVector, AtomicKind, AtomicSeg, CtrlSeg, DataSummary, EXTENDED_UD_AV, FULL_AV_BYTES,
    HALF_AV_BYTES, INLINE_SEG, MAX_DS, Opcode, QpType, RaddrSeg, Wqe,
};
use crate::decode::{DS_BYTES, WQEBB_BYTES, be, valid_sq_cnt};

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

    /// The error for a segment of `need` bytes that runs past the WQE.
    fn truncated(&self, need: usize) -> WqeError {
        WqeError::Truncated {
            offset: self.pos as u16,
            need: need as u16,
            wqe_bytes: self.limit as u16,
        }
    }

    fn fill(&mut self, out: &mut [u8]) -> Result<(), WqeError> {
        if out.len() > self.remaining() {
            return Err(self.truncated(out.len()));
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
            return Err(self.truncated(n));
        }
        self.pos += n;
        Ok(())
    }
}

pub(super) fn check_ring(ring: &[u8], sq_cnt: u32) -> Result<usize, WqeError> {
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
    read_ctrl(ring, sq_cnt, slot_index).map(|(_, ctrl, _)| ctrl)
}

/// Checks the ring, reads the ctrl segment at ring slot `slot_index & (sq_cnt-1)` and checks its
/// ds. Returns the reader (just after the ctrl segment), the ctrl segment and the slot.
fn read_ctrl(
    ring: &[u8],
    sq_cnt: u32,
    slot_index: u32,
) -> Result<(Reader<'_>, CtrlSeg, u32), WqeError> {
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
    Ok((r, ctrl, slot))
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
/// [`walk_new_wqes`](super::walk_new_wqes) checks it against the expected producer index.
pub fn parse_wqe(
    ring: &[u8],
    sq_cnt: u32,
    slot_index: u32,
    qp_type: QpType,
) -> Result<Wqe, WqeError> {
    let (mut r, ctrl, slot) = read_ctrl(ring, sq_cnt, slot_index)?;
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
