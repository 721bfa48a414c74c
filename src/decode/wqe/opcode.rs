//! The mlx5 send opcodes (rdma-core `mlx5dv.h` `MLX5_OPCODE_*`, DUMP from NVSHMEM): a table
//! from code to variant to name.

use serde::{Deserialize, Serialize};

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
