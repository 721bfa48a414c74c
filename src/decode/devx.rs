//! devx command mailboxes for QPs (CREATE_QP in/out, modify, destroy), the `mlx5dv_devx_uar`
//! struct, SQ placement in the WQ umem, and a CREATE_QP encoder for tests and the devx emulation.
//!
//! Mailboxes are arrays of big-endian dwords (PRM layout). A field at bit `b` of width `s` sits in
//! dword `b/32` at shift `32 - s - (b & 31)`; 64-bit fields are BE64 at byte `b/8` (rdma-core
//! `providers/mlx5/mlx5dv.h` `DEVX_SET`/`__devx_dw_bit_off`). Bit offsets below are those of
//! rdma-core `providers/mlx5/mlx5_ifc.h` (`struct mlx5_ifc_create_qp_in_bits`, `mlx5_ifc_qpc_bits`,
//! `mlx5_ifc_ads_bits`, `mlx5_ifc_rst2init_qp_in_bits` …), identical in NVSHMEM's and NCCL-DOCA's
//! copies; the byte/shift table of reference §3 is checked against them in the tests.

use serde::{Deserialize, Serialize};

use super::be;
use super::wqe::QpType;

/// `MLX5_CMD_OP_*` (rdma-core `mlx5_ifc.h` / Linux `include/linux/mlx5/mlx5_ifc.h` enum).
pub mod op {
    pub const CREATE_QP: u16 = 0x500;
    pub const DESTROY_QP: u16 = 0x501;
    pub const RST2INIT_QP: u16 = 0x502;
    pub const INIT2RTR_QP: u16 = 0x503;
    pub const RTR2RTS_QP: u16 = 0x504;
    pub const RTS2RTS_QP: u16 = 0x505;
    pub const SQERR2RTS_QP: u16 = 0x506;
    pub const QP_2ERR: u16 = 0x507;
    pub const QP_2RST: u16 = 0x50a;
    pub const QUERY_QP: u16 = 0x50b;
    pub const INIT2INIT_QP: u16 = 0x50e;
}

/// `MLX5_QPC_ST_*` (`mlx5_ifc.h`).
pub mod st {
    pub const RC: u8 = 0x0;
    pub const UC: u8 = 0x1;
    pub const UD: u8 = 0x2;
    pub const XRC: u8 = 0x3;
    pub const DCI: u8 = 0x5;
}

/// `qpc.rq_type` values (Linux `include/linux/mlx5/qp.h`: `MLX5_NON_ZERO_RQ` 0, `MLX5_SRQ_RQ` 1,
/// `MLX5_CRQ_RQ` 2, `MLX5_ZERO_LEN_RQ` 3, there pre-shifted by 24).
pub mod rq_type {
    pub const REGULAR: u8 = 0;
    pub const SRQ: u8 = 1;
    pub const CRQ: u8 = 2;
    pub const ZERO_LEN: u8 = 3;
}

/// `MLX5_QPC_PM_STATE_MIGRATED` (`mlx5_ifc.h`), what NVSHMEM sets.
pub const PM_STATE_MIGRATED: u8 = 0x3;

/// `sizeof(create_qp_in)` without the trailing `pas[]`: 0x880 bits.
pub const CREATE_QP_IN_BYTES: usize = 0x880 / 8;
/// `sizeof(create_qp_out)`: 0x80 bits.
pub const CREATE_QP_OUT_BYTES: usize = 0x80 / 8;
/// `sizeof(rst2init_qp_in)` and the other QPC-carrying modify commands: 0x880 bits.
pub const MODIFY_QP_IN_BYTES: usize = 0x880 / 8;
/// `sizeof(destroy_qp_in)`, `sizeof(qp_2err_in)`, `sizeof(qp_2rst_in)`: 0x80 bits.
pub const SHORT_QP_IN_BYTES: usize = 0x80 / 8;
/// `sizeof(struct mlx5dv_devx_uar)` on LP64 (reference §3).
pub const DEVX_UAR_BYTES: usize = 40;

/// Bit offsets in the command mailboxes (`mlx5_ifc.h`). `QPC` is where `qpc` starts in
/// `create_qp_in` and in every modify command (bit 0xC0, byte 24).
mod bit {
    pub const QPC: u32 = 0xc0;
    // command header (every *_in)
    pub const OPCODE: (u32, u32) = (0x00, 16);
    pub const UID: (u32, u32) = (0x10, 16);
    pub const OP_MOD: (u32, u32) = (0x30, 16);
    /// qpn of modify/destroy/2err/2rst in, and of create_qp_out.
    pub const QPN: (u32, u32) = (0x48, 24);
    pub const OPT_PARAM_MASK: (u32, u32) = (0x80, 32);
    /// create_qp_out / *_out
    pub const STATUS: (u32, u32) = (0x00, 8);
    pub const SYNDROME: (u32, u32) = (0x20, 32);
    // qpc (relative to QPC)
    pub const ST: (u32, u32) = (0x08, 8);
    pub const PM_STATE: (u32, u32) = (0x13, 2);
    pub const PD: (u32, u32) = (0x28, 24);
    pub const MTU: (u32, u32) = (0x40, 3);
    pub const LOG_RQ_SIZE: (u32, u32) = (0x49, 4);
    pub const LOG_RQ_STRIDE: (u32, u32) = (0x4d, 3);
    pub const NO_SQ: (u32, u32) = (0x50, 1);
    pub const LOG_SQ_SIZE: (u32, u32) = (0x51, 4);
    pub const UAR_PAGE: (u32, u32) = (0x68, 24);
    /// DOCA's `mlx5_ifc.h` names the top 2 bits of rdma-core's `reserved_at_80` `send_dbr_mode`.
    pub const SEND_DBR_MODE: (u32, u32) = (0x80, 2);
    pub const USER_INDEX: (u32, u32) = (0x88, 24);
    pub const REMOTE_QPN: (u32, u32) = (0xa8, 24);
    /// `primary_address_path` (`mlx5_ifc_ads_bits`, 0x160 bits).
    pub const ADS: u32 = 0xc0;
    pub const NEXT_SEND_PSN: (u32, u32) = (0x3c8, 24);
    pub const CQN_SND: (u32, u32) = (0x3e8, 24);
    pub const NEXT_RCV_PSN: (u32, u32) = (0x4a8, 24);
    pub const CQN_RCV: (u32, u32) = (0x4e8, 24);
    pub const DBR_ADDR_64: u32 = 0x500;
    pub const RQ_TYPE: (u32, u32) = (0x565, 3);
    pub const SRQN_RMPN_XRQN: (u32, u32) = (0x568, 24);
    pub const DBR_UMEM_VALID: (u32, u32) = (0x683, 1);
    pub const DBR_UMEM_ID: (u32, u32) = (0x720, 32);
    // create_qp_in after qpc (absolute)
    pub const WQ_UMEM_OFFSET_64: u32 = 0x800;
    pub const WQ_UMEM_ID: (u32, u32) = (0x840, 32);
    pub const WQ_UMEM_VALID: (u32, u32) = (0x860, 1);
    // ads (relative to ADS)
    pub const ADS_PKEY_INDEX: (u32, u32) = (0x10, 16);
    pub const ADS_GRH: (u32, u32) = (0x28, 1);
    pub const ADS_MLID: (u32, u32) = (0x29, 7);
    pub const ADS_RLID: (u32, u32) = (0x30, 16);
    pub const ADS_SRC_ADDR_INDEX: (u32, u32) = (0x48, 8);
    pub const ADS_HOP_LIMIT: (u32, u32) = (0x58, 8);
    pub const ADS_TCLASS: (u32, u32) = (0x64, 8);
    pub const ADS_FLOW_LABEL: (u32, u32) = (0x6c, 20);
    pub const ADS_RGID: u32 = 0x80;
    pub const ADS_SL: (u32, u32) = (0x124, 4);
    pub const ADS_VHCA_PORT_NUM: (u32, u32) = (0x128, 8);
    pub const ADS_RMAC_47_32: (u32, u32) = (0x130, 16);
    pub const ADS_RMAC_31_0: (u32, u32) = (0x140, 32);
}

/// Reads a field per the `DEVX_GET` rule; `None` if the mailbox is too short.
fn get(b: &[u8], (off, width): (u32, u32)) -> Option<u32> {
    let dw = be::u32(b, (off / 32) as usize * 4)?;
    let shift = 32 - width - (off & 31);
    let mask = if width >= 32 {
        u32::MAX
    } else {
        (1u32 << width) - 1
    };
    Some((dw >> shift) & mask)
}

/// Writes a field per the `DEVX_SET` rule. Fields are compile-time constants that fit the
/// buffers they are used with; an out-of-range write is ignored rather than panicking.
fn set(b: &mut [u8], (off, width): (u32, u32), value: u32) {
    let at = (off / 32) as usize * 4;
    let Some(slot) = b.get_mut(at..at + 4) else {
        return;
    };
    let shift = 32 - width - (off & 31);
    let mask = if width >= 32 {
        u32::MAX
    } else {
        ((1u32 << width) - 1) << shift
    };
    let old = u32::from_be_bytes([slot[0], slot[1], slot[2], slot[3]]);
    let new = (old & !mask) | ((value << shift) & mask);
    slot.copy_from_slice(&new.to_be_bytes());
}

fn get64(b: &[u8], off: u32) -> Option<u64> {
    be::u64(b, (off / 8) as usize)
}

fn set64(b: &mut [u8], off: u32, value: u64) {
    let at = (off / 8) as usize;
    if let Some(slot) = b.get_mut(at..at + 8) {
        slot.copy_from_slice(&value.to_be_bytes());
    }
}

fn qpc(f: (u32, u32)) -> (u32, u32) {
    (bit::QPC + f.0, f.1)
}

fn ads(f: (u32, u32)) -> (u32, u32) {
    (bit::QPC + bit::ADS + f.0, f.1)
}

/// Why a mailbox did not decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DevxError {
    /// The buffer is shorter than the command's layout.
    Short { need: usize, have: usize },
    /// The mailbox is not the command this decoder is for.
    WrongOpcode { expected: u16, found: u16 },
}

impl core::fmt::Display for DevxError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Short { need, have } => write!(f, "mailbox has {have} bytes, needs {need}"),
            Self::WrongOpcode { expected, found } => {
                write!(f, "mailbox opcode {found:#x}, expected {expected:#x}")
            }
        }
    }
}

impl core::error::Error for DevxError {}

fn need(b: &[u8], n: usize) -> Result<(), DevxError> {
    if b.len() < n {
        Err(DevxError::Short {
            need: n,
            have: b.len(),
        })
    } else {
        Ok(())
    }
}

/// The generic command opcode: BE16 at byte 0 of every command input.
pub fn command_opcode(inbox: &[u8]) -> Result<u16, DevxError> {
    be::u16(inbox, 0).ok_or(DevxError::Short {
        need: 2,
        have: inbox.len(),
    })
}

/// CREATE_QP input: the fields sigmatop uses (reference §3 table).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CreateQpIn {
    pub uid: u16,
    /// `qpc.st`: service type ([`st`]).
    pub st: u8,
    pub pm_state: u8,
    pub pd: u32,
    pub log_rq_size: u8,
    pub log_rq_stride: u8,
    pub no_sq: bool,
    pub log_sq_size: u8,
    pub uar_page: u32,
    /// DOCA's `send_dbr_mode` (2 bits at qpc 0x80).
    pub send_dbr_mode: u8,
    pub user_index: u32,
    pub cqn_snd: u32,
    pub cqn_rcv: u32,
    /// Offset in the DBR umem when `dbr_umem_valid`, else a bus address.
    pub dbr_addr: u64,
    /// `qpc.rq_type` ([`rq_type`]).
    pub rq_type: u8,
    pub srqn: u32,
    pub dbr_umem_valid: bool,
    pub dbr_umem_id: u32,
    /// Reserved in rdma-core's ifc; NVSHMEM and DOCA name it.
    pub wq_umem_offset: u64,
    pub wq_umem_id: u32,
    pub wq_umem_valid: bool,
}

impl CreateQpIn {
    /// Decodes a CREATE_QP input mailbox (at least [`CREATE_QP_IN_BYTES`]).
    pub fn decode(b: &[u8]) -> Result<Self, DevxError> {
        need(b, CREATE_QP_IN_BYTES)?;
        let opcode = command_opcode(b)?;
        if opcode != op::CREATE_QP {
            return Err(DevxError::WrongOpcode {
                expected: op::CREATE_QP,
                found: opcode,
            });
        }
        let g = |f| get(b, f).unwrap_or(0);
        Ok(Self {
            uid: g(bit::UID) as u16,
            st: g(qpc(bit::ST)) as u8,
            pm_state: g(qpc(bit::PM_STATE)) as u8,
            pd: g(qpc(bit::PD)),
            log_rq_size: g(qpc(bit::LOG_RQ_SIZE)) as u8,
            log_rq_stride: g(qpc(bit::LOG_RQ_STRIDE)) as u8,
            no_sq: g(qpc(bit::NO_SQ)) != 0,
            log_sq_size: g(qpc(bit::LOG_SQ_SIZE)) as u8,
            uar_page: g(qpc(bit::UAR_PAGE)),
            send_dbr_mode: g(qpc(bit::SEND_DBR_MODE)) as u8,
            user_index: g(qpc(bit::USER_INDEX)),
            cqn_snd: g(qpc(bit::CQN_SND)),
            cqn_rcv: g(qpc(bit::CQN_RCV)),
            dbr_addr: get64(b, bit::QPC + bit::DBR_ADDR_64).unwrap_or(0),
            rq_type: g(qpc(bit::RQ_TYPE)) as u8,
            srqn: g(qpc(bit::SRQN_RMPN_XRQN)),
            dbr_umem_valid: g(qpc(bit::DBR_UMEM_VALID)) != 0,
            dbr_umem_id: g(qpc(bit::DBR_UMEM_ID)),
            wq_umem_offset: get64(b, bit::WQ_UMEM_OFFSET_64).unwrap_or(0),
            wq_umem_id: g(bit::WQ_UMEM_ID),
            wq_umem_valid: g(bit::WQ_UMEM_VALID) != 0,
        })
    }

    /// Encodes the mailbox exactly per `DEVX_SET`; fields wider than their PRM width are
    /// truncated to it. Unnamed bits are zero.
    pub fn encode(&self) -> [u8; CREATE_QP_IN_BYTES] {
        let mut b = [0u8; CREATE_QP_IN_BYTES];
        set(&mut b, bit::OPCODE, u32::from(op::CREATE_QP));
        set(&mut b, bit::UID, u32::from(self.uid));
        set(&mut b, qpc(bit::ST), u32::from(self.st));
        set(&mut b, qpc(bit::PM_STATE), u32::from(self.pm_state));
        set(&mut b, qpc(bit::PD), self.pd);
        set(&mut b, qpc(bit::LOG_RQ_SIZE), u32::from(self.log_rq_size));
        set(
            &mut b,
            qpc(bit::LOG_RQ_STRIDE),
            u32::from(self.log_rq_stride),
        );
        set(&mut b, qpc(bit::NO_SQ), u32::from(self.no_sq));
        set(&mut b, qpc(bit::LOG_SQ_SIZE), u32::from(self.log_sq_size));
        set(&mut b, qpc(bit::UAR_PAGE), self.uar_page);
        set(
            &mut b,
            qpc(bit::SEND_DBR_MODE),
            u32::from(self.send_dbr_mode),
        );
        set(&mut b, qpc(bit::USER_INDEX), self.user_index);
        set(&mut b, qpc(bit::CQN_SND), self.cqn_snd);
        set(&mut b, qpc(bit::CQN_RCV), self.cqn_rcv);
        set64(&mut b, bit::QPC + bit::DBR_ADDR_64, self.dbr_addr);
        set(&mut b, qpc(bit::RQ_TYPE), u32::from(self.rq_type));
        set(&mut b, qpc(bit::SRQN_RMPN_XRQN), self.srqn);
        set(
            &mut b,
            qpc(bit::DBR_UMEM_VALID),
            u32::from(self.dbr_umem_valid),
        );
        set(&mut b, qpc(bit::DBR_UMEM_ID), self.dbr_umem_id);
        set64(&mut b, bit::WQ_UMEM_OFFSET_64, self.wq_umem_offset);
        set(&mut b, bit::WQ_UMEM_ID, self.wq_umem_id);
        set(&mut b, bit::WQ_UMEM_VALID, u32::from(self.wq_umem_valid));
        b
    }

    /// The QP type for WQE parsing, from `st`.
    pub fn qp_type(&self) -> Option<QpType> {
        QpType::from_qpc_st(self.st)
    }

    /// Send-queue WQEBBs, `1 << log_sq_size`; 0 when `no_sq`.
    pub fn sq_cnt(&self) -> u32 {
        if self.no_sq {
            0
        } else {
            1u32 << (self.log_sq_size & 0xf)
        }
    }

    /// Bytes of the RQ in front of the SQ in the WQ buffer:
    /// `(1 << log_rq_size) << (log_rq_stride + 4)` for a regular RQ, 0 for SRQ or zero-size RQ
    /// (reference §3; DOCA `m_sq_buf = m_wq_buf + (rq_size << log_rcv_wqe_size)`).
    pub fn rq_bytes(&self) -> u64 {
        if self.rq_type == rq_type::REGULAR {
            (1u64 << (self.log_rq_size & 0xf)) << ((self.log_rq_stride & 0x7) + 4)
        } else {
            0
        }
    }

    /// SQ bytes, `sq_cnt * 64`.
    pub fn sq_bytes(&self) -> u64 {
        u64::from(self.sq_cnt()) * super::WQEBB_BYTES as u64
    }

    /// Offset of the SQ inside the WQ umem: `wq_umem_offset + rq_bytes` (saturating).
    /// The SQ's address is the umem's registered address plus this.
    pub fn sq_offset_in_umem(&self) -> u64 {
        self.wq_umem_offset.saturating_add(self.rq_bytes())
    }
}

/// CREATE_QP output (and the common `status`/`syndrome` of every `*_out`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CreateQpOut {
    pub status: u8,
    pub syndrome: u32,
    /// `create_qp_out.qpn`: dw@8 & 0xffffff.
    pub qpn: u32,
}

impl CreateQpOut {
    pub fn decode(b: &[u8]) -> Result<Self, DevxError> {
        need(b, 12)?;
        Ok(Self {
            status: get(b, bit::STATUS).unwrap_or(0) as u8,
            syndrome: get(b, bit::SYNDROME).unwrap_or(0),
            qpn: get(b, bit::QPN).unwrap_or(0),
        })
    }

    pub fn encode(&self) -> [u8; CREATE_QP_OUT_BYTES] {
        let mut b = [0u8; CREATE_QP_OUT_BYTES];
        set(&mut b, bit::STATUS, u32::from(self.status));
        set(&mut b, bit::SYNDROME, self.syndrome);
        set(&mut b, bit::QPN, self.qpn);
        b
    }
}

/// QP state-transition commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum QpTransition {
    Rst2Init,
    Init2Init,
    Init2Rtr,
    Rtr2Rts,
    Rts2Rts,
    SqErr2Rts,
    ToErr,
    ToRst,
}

/// QP states a transition leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum QpState {
    Reset,
    Init,
    Rtr,
    Rts,
    Err,
}

impl QpTransition {
    pub fn from_opcode(opcode: u16) -> Option<Self> {
        Some(match opcode {
            op::RST2INIT_QP => Self::Rst2Init,
            op::INIT2INIT_QP => Self::Init2Init,
            op::INIT2RTR_QP => Self::Init2Rtr,
            op::RTR2RTS_QP => Self::Rtr2Rts,
            op::RTS2RTS_QP => Self::Rts2Rts,
            op::SQERR2RTS_QP => Self::SqErr2Rts,
            op::QP_2ERR => Self::ToErr,
            op::QP_2RST => Self::ToRst,
            _ => return None,
        })
    }

    pub fn opcode(self) -> u16 {
        match self {
            Self::Rst2Init => op::RST2INIT_QP,
            Self::Init2Init => op::INIT2INIT_QP,
            Self::Init2Rtr => op::INIT2RTR_QP,
            Self::Rtr2Rts => op::RTR2RTS_QP,
            Self::Rts2Rts => op::RTS2RTS_QP,
            Self::SqErr2Rts => op::SQERR2RTS_QP,
            Self::ToErr => op::QP_2ERR,
            Self::ToRst => op::QP_2RST,
        }
    }

    pub fn target_state(self) -> QpState {
        match self {
            Self::Rst2Init | Self::Init2Init => QpState::Init,
            Self::Init2Rtr => QpState::Rtr,
            Self::Rtr2Rts | Self::Rts2Rts | Self::SqErr2Rts => QpState::Rts,
            Self::ToErr => QpState::Err,
            Self::ToRst => QpState::Reset,
        }
    }

    /// Whether the command carries a `qpc` (all but 2ERR and 2RST).
    pub fn has_qpc(self) -> bool {
        !matches!(self, Self::ToErr | Self::ToRst)
    }
}

/// The path fields of a modify command's `qpc` (what INIT2RTR sets for a connected QP).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct QpcPath {
    /// Path MTU code (1=256 … 5=4096).
    pub mtu: u8,
    pub remote_qpn: u32,
    pub next_send_psn: u32,
    pub next_rcv_psn: u32,
    pub pkey_index: u16,
    pub grh: bool,
    pub mlid: u8,
    pub rlid: u16,
    pub src_addr_index: u8,
    pub hop_limit: u8,
    pub tclass: u8,
    pub flow_label: u32,
    pub rgid: [u8; 16],
    pub sl: u8,
    /// Port of the path (`vhca_port_num`).
    pub port: u8,
    pub rmac: [u8; 6],
}

/// A QP modify command: RST2INIT … 2RST. `qpn` is dw@8 & 0xffffff in all of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ModifyQpIn {
    pub transition: QpTransition,
    pub qpn: u32,
    pub opt_param_mask: u32,
    /// Present for QPC-carrying commands whose mailbox holds the whole qpc.
    pub path: Option<QpcPath>,
}

impl ModifyQpIn {
    pub fn decode(b: &[u8]) -> Result<Self, DevxError> {
        need(b, SHORT_QP_IN_BYTES)?;
        let opcode = command_opcode(b)?;
        let Some(transition) = QpTransition::from_opcode(opcode) else {
            return Err(DevxError::WrongOpcode {
                expected: op::RST2INIT_QP,
                found: opcode,
            });
        };
        let g = |f| get(b, f).unwrap_or(0);
        let path = if transition.has_qpc() && b.len() >= MODIFY_QP_IN_BYTES {
            let rgid_at = ((bit::QPC + bit::ADS + bit::ADS_RGID) / 8) as usize;
            let mac_hi = g(ads(bit::ADS_RMAC_47_32)).to_be_bytes();
            let mac_lo = g(ads(bit::ADS_RMAC_31_0)).to_be_bytes();
            Some(QpcPath {
                mtu: g(qpc(bit::MTU)) as u8,
                remote_qpn: g(qpc(bit::REMOTE_QPN)),
                next_send_psn: g(qpc(bit::NEXT_SEND_PSN)),
                next_rcv_psn: g(qpc(bit::NEXT_RCV_PSN)),
                pkey_index: g(ads(bit::ADS_PKEY_INDEX)) as u16,
                grh: g(ads(bit::ADS_GRH)) != 0,
                mlid: g(ads(bit::ADS_MLID)) as u8,
                rlid: g(ads(bit::ADS_RLID)) as u16,
                src_addr_index: g(ads(bit::ADS_SRC_ADDR_INDEX)) as u8,
                hop_limit: g(ads(bit::ADS_HOP_LIMIT)) as u8,
                tclass: g(ads(bit::ADS_TCLASS)) as u8,
                flow_label: g(ads(bit::ADS_FLOW_LABEL)),
                rgid: be::arr::<16>(b, rgid_at).unwrap_or([0; 16]),
                sl: g(ads(bit::ADS_SL)) as u8,
                port: g(ads(bit::ADS_VHCA_PORT_NUM)) as u8,
                rmac: [
                    mac_hi[2], mac_hi[3], mac_lo[0], mac_lo[1], mac_lo[2], mac_lo[3],
                ],
            })
        } else {
            None
        };
        Ok(Self {
            transition,
            qpn: g(bit::QPN),
            opt_param_mask: if transition.has_qpc() {
                g(bit::OPT_PARAM_MASK)
            } else {
                0
            },
            path,
        })
    }

    /// Encodes the command (272 bytes; a 2ERR/2RST only uses the first 16).
    pub fn encode(&self) -> [u8; MODIFY_QP_IN_BYTES] {
        let mut b = [0u8; MODIFY_QP_IN_BYTES];
        set(&mut b, bit::OPCODE, u32::from(self.transition.opcode()));
        set(&mut b, bit::QPN, self.qpn);
        if self.transition.has_qpc() {
            set(&mut b, bit::OPT_PARAM_MASK, self.opt_param_mask);
        }
        if let (true, Some(p)) = (self.transition.has_qpc(), self.path) {
            set(&mut b, qpc(bit::MTU), u32::from(p.mtu));
            set(&mut b, qpc(bit::REMOTE_QPN), p.remote_qpn);
            set(&mut b, qpc(bit::NEXT_SEND_PSN), p.next_send_psn);
            set(&mut b, qpc(bit::NEXT_RCV_PSN), p.next_rcv_psn);
            set(&mut b, ads(bit::ADS_PKEY_INDEX), u32::from(p.pkey_index));
            set(&mut b, ads(bit::ADS_GRH), u32::from(p.grh));
            set(&mut b, ads(bit::ADS_MLID), u32::from(p.mlid));
            set(&mut b, ads(bit::ADS_RLID), u32::from(p.rlid));
            set(
                &mut b,
                ads(bit::ADS_SRC_ADDR_INDEX),
                u32::from(p.src_addr_index),
            );
            set(&mut b, ads(bit::ADS_HOP_LIMIT), u32::from(p.hop_limit));
            set(&mut b, ads(bit::ADS_TCLASS), u32::from(p.tclass));
            set(&mut b, ads(bit::ADS_FLOW_LABEL), p.flow_label);
            let at = ((bit::QPC + bit::ADS + bit::ADS_RGID) / 8) as usize;
            if let Some(dst) = b.get_mut(at..at + 16) {
                dst.copy_from_slice(&p.rgid);
            }
            set(&mut b, ads(bit::ADS_SL), u32::from(p.sl));
            set(&mut b, ads(bit::ADS_VHCA_PORT_NUM), u32::from(p.port));
            let m = p.rmac;
            set(
                &mut b,
                ads(bit::ADS_RMAC_47_32),
                u32::from(u16::from_be_bytes([m[0], m[1]])),
            );
            set(
                &mut b,
                ads(bit::ADS_RMAC_31_0),
                u32::from_be_bytes([m[2], m[3], m[4], m[5]]),
            );
        }
        b
    }
}

/// DESTROY_QP input: `qpn` at dw@8 & 0xffffff (`mlx5_ifc_destroy_qp_in_bits`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DestroyQpIn {
    pub qpn: u32,
}

impl DestroyQpIn {
    pub fn decode(b: &[u8]) -> Result<Self, DevxError> {
        need(b, SHORT_QP_IN_BYTES)?;
        let opcode = command_opcode(b)?;
        if opcode != op::DESTROY_QP {
            return Err(DevxError::WrongOpcode {
                expected: op::DESTROY_QP,
                found: opcode,
            });
        }
        Ok(Self {
            qpn: get(b, bit::QPN).unwrap_or(0),
        })
    }

    pub fn encode(&self) -> [u8; SHORT_QP_IN_BYTES] {
        let mut b = [0u8; SHORT_QP_IN_BYTES];
        set(&mut b, bit::OPCODE, u32::from(op::DESTROY_QP));
        set(&mut b, bit::QPN, self.qpn);
        b
    }
}

/// Any devx command input, classified by opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum QpCommand {
    Create(CreateQpIn),
    Modify(ModifyQpIn),
    Destroy(DestroyQpIn),
    /// A command sigmatop does not decode (passes through untouched).
    Other {
        opcode: u16,
        op_mod: u16,
    },
}

/// Decodes a devx command input (`mlx5dv_devx_obj_create`/`_modify`/`_destroy`/`_general_cmd`).
pub fn decode_command(inbox: &[u8]) -> Result<QpCommand, DevxError> {
    let opcode = command_opcode(inbox)?;
    Ok(match opcode {
        op::CREATE_QP => QpCommand::Create(CreateQpIn::decode(inbox)?),
        op::DESTROY_QP => QpCommand::Destroy(DestroyQpIn::decode(inbox)?),
        o if QpTransition::from_opcode(o).is_some() => {
            QpCommand::Modify(ModifyQpIn::decode(inbox)?)
        }
        _ => QpCommand::Other {
            opcode,
            op_mod: get(inbox, bit::OP_MOD).unwrap_or(0) as u16,
        },
    })
}

/// `qpc.state` (4 bits at the top of the QP context), in the PRM's encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum QpcState {
    Reset,
    Init,
    Rtr,
    Rts,
    /// Send queue error: the send queue stopped on a failed WQE.
    SqError,
    SqDrain,
    Error,
    Suspended,
    /// A value the PRM does not name.
    Other(u8),
}

impl QpcState {
    pub fn from_prm(v: u8) -> QpcState {
        match v {
            0x0 => Self::Reset,
            0x1 => Self::Init,
            0x2 => Self::Rtr,
            0x3 => Self::Rts,
            0x4 => Self::SqError,
            0x5 => Self::SqDrain,
            0x6 => Self::Error,
            0x9 => Self::Suspended,
            o => Self::Other(o),
        }
    }

    pub fn prm(self) -> u8 {
        match self {
            Self::Reset => 0x0,
            Self::Init => 0x1,
            Self::Rtr => 0x2,
            Self::Rts => 0x3,
            Self::SqError => 0x4,
            Self::SqDrain => 0x5,
            Self::Error => 0x6,
            Self::Suspended => 0x9,
            Self::Other(o) => o & 0xf,
        }
    }

    /// As sigmatop names QP states (the names of the modify commands' target states).
    pub fn name(self) -> &'static str {
        match self {
            Self::Reset => "RESET",
            Self::Init => "INIT",
            Self::Rtr => "RTR",
            Self::Rts => "RTS",
            Self::SqError => "SQE",
            Self::SqDrain => "SQD",
            Self::Error => "ERR",
            Self::Suspended => "SUSPENDED",
            Self::Other(_) => "unknown",
        }
    }

    /// The QP no longer executes its send queue: ERR or SQE.
    pub fn failed(self) -> bool {
        matches!(self, Self::Error | Self::SqError)
    }
}

/// `sizeof(query_qp_in)`: 0x80 bits (opcode, uid, op_mod, qpn).
pub const QUERY_QP_IN_BYTES: usize = 0x80 / 8;
/// The least of `query_qp_out` that holds `qpc.state`: the header and the QP context's first
/// dword (the QPC starts at bit 0xC0, as in the commands).
pub const QUERY_QP_OUT_MIN_BYTES: usize = (bit::QPC / 8) as usize + 4;

/// A QUERY_QP a program made (`mlx5dv_devx_obj_query`) and the device's answer: the QP number it
/// named and the state the device said. Err when the input is not a QUERY_QP, a mailbox is too
/// short, or the answer's status is not 0 (the device refused: nothing was said of the QP).
pub fn decode_query_qp(inbox: &[u8], outbox: &[u8]) -> Result<Option<(u32, QpcState)>, DevxError> {
    need(inbox, QUERY_QP_IN_BYTES)?;
    let opcode = command_opcode(inbox)?;
    if opcode != op::QUERY_QP {
        return Err(DevxError::WrongOpcode {
            expected: op::QUERY_QP,
            found: opcode,
        });
    }
    need(outbox, QUERY_QP_OUT_MIN_BYTES)?;
    if get(outbox, bit::STATUS) != Some(0) {
        return Ok(None);
    }
    let qpn = get(inbox, bit::QPN).unwrap_or(0);
    let state = get(outbox, qpc((0x00, 4))).unwrap_or(0) as u8;
    Ok(Some((qpn, QpcState::from_prm(state))))
}

/// A QUERY_QP input naming `qpn`, and an answer saying `state` (tests, the fuzz round trip).
pub fn encode_query_qp(
    qpn: u32,
    state: QpcState,
) -> ([u8; QUERY_QP_IN_BYTES], [u8; QUERY_QP_OUT_MIN_BYTES]) {
    let mut i = [0u8; QUERY_QP_IN_BYTES];
    set(&mut i, bit::OPCODE, u32::from(op::QUERY_QP));
    set(&mut i, bit::QPN, qpn);
    let mut o = [0u8; QUERY_QP_OUT_MIN_BYTES];
    set(&mut o, qpc((0x00, 4)), u32::from(state.prm()));
    (i, o)
}

/// `struct mlx5dv_devx_uar` as it sits in this process's memory (LP64, native endian):
/// `reg_addr@0, base_addr@8, page_id@16 (u32), mmap_off@24, comp_mask@32` (rdma-core `mlx5dv.h`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DevxUar {
    /// Doorbell register: base + 0x800… (not page-aligned).
    pub reg_addr: u64,
    pub base_addr: u64,
    /// What CREATE_QP's `qpc.uar_page` refers to.
    pub page_id: u32,
    pub mmap_off: u64,
    pub comp_mask: u64,
}

impl DevxUar {
    pub fn from_ne_bytes(b: &[u8]) -> Result<Self, DevxError> {
        need(b, DEVX_UAR_BYTES)?;
        let u64_at = |o| be::arr::<8>(b, o).map_or(0, u64::from_ne_bytes);
        Ok(Self {
            reg_addr: u64_at(0),
            base_addr: u64_at(8),
            page_id: be::arr::<4>(b, 16).map_or(0, u32::from_ne_bytes),
            mmap_off: u64_at(24),
            comp_mask: u64_at(32),
        })
    }

    pub fn to_ne_bytes(&self) -> [u8; DEVX_UAR_BYTES] {
        let mut b = [0u8; DEVX_UAR_BYTES];
        b[0..8].copy_from_slice(&self.reg_addr.to_ne_bytes());
        b[8..16].copy_from_slice(&self.base_addr.to_ne_bytes());
        b[16..20].copy_from_slice(&self.page_id.to_ne_bytes());
        b[24..32].copy_from_slice(&self.mmap_off.to_ne_bytes());
        b[32..40].copy_from_slice(&self.comp_mask.to_ne_bytes());
        b
    }

    /// Offset of the doorbell register inside its UAR page (`reg_addr - base_addr`).
    pub fn reg_offset(&self) -> u64 {
        self.reg_addr.wrapping_sub(self.base_addr)
    }
}

#[cfg(test)]
#[path = "devx_tests.rs"]
mod tests;
