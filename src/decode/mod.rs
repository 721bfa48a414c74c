//! Pure decoders for mlx5 doorbells, WQEs and devx mailboxes.
//!
//! Everything here is a function over bytes: no I/O, no unsafe, no panics on any input and no
//! allocation sized by an untrusted length. The layouts and their sources are in
//! `shared/reference/hardware-and-hooks.md` §1–3; every constant names where it comes from.
//!
//! - [`doorbell`]: the 8-byte UAR doorbell word (GPU synthetic vs CPU ctrl word) and the per-QP
//!   [`doorbell::SqTracker`] that turns doorbells into ranges of new WQEBBs.
//! - [`wqe`]: mlx5 send WQEs read out of a ring snapshot (modulo the ring), and the bounded walk
//!   over the WQEBBs a doorbell covers.
//! - [`devx`]: devx command mailboxes (CREATE_QP in/out, modify/destroy QP), the
//!   `mlx5dv_devx_uar` struct, and an encoder for CREATE_QP used by tests and the devx emulation.

pub mod devx;
pub mod doorbell;
#[cfg(feature = "testing")]
pub mod harness;
pub mod wqe;

/// `MLX5_SEND_WQE_BB`: one send WQE basic block is 64 bytes (rdma-core `providers/mlx5/mlx5dv.h`).
pub const WQEBB_BYTES: usize = 64;
/// `MLX5_SEND_WQE_SHIFT` (rdma-core `mlx5dv.h`).
pub const WQEBB_SHIFT: u32 = 6;
/// A WQE's size is counted in 16-byte units ("DS", `qpn_ds` bits 7:0, rdma-core `mlx5dv.h`).
pub const DS_BYTES: usize = 16;
/// Largest send queue a QP can have: `qpc.log_sq_size` is a 4-bit field (`mlx5_ifc.h`), so at
/// most 2^15 WQEBBs. It also keeps every ring distance below the 16-bit index space.
pub const MAX_SQ_CNT: u32 = 1 << 15;

/// WQEBBs a WQE of `ds` 16-byte units occupies: `(ds*16 + 63) / 64` (reference §1).
#[inline]
pub const fn wqebbs_for_ds(ds: u8) -> u16 {
    ((ds as u16) * (DS_BYTES as u16)).div_ceil(WQEBB_BYTES as u16)
}

/// Whether `sq_cnt` is a usable send-queue size: a power of two in `1..=MAX_SQ_CNT`.
#[inline]
pub const fn valid_sq_cnt(sq_cnt: u32) -> bool {
    sq_cnt.is_power_of_two() && sq_cnt <= MAX_SQ_CNT
}

/// Big-endian reads at a byte offset that return `None` instead of panicking.
pub(crate) mod be {
    #[inline]
    pub fn arr<const N: usize>(b: &[u8], off: usize) -> Option<[u8; N]> {
        let end = off.checked_add(N)?;
        let s = b.get(off..end)?;
        let mut out = [0u8; N];
        out.copy_from_slice(s);
        Some(out)
    }
    #[inline]
    pub fn u16(b: &[u8], off: usize) -> Option<u16> {
        arr::<2>(b, off).map(u16::from_be_bytes)
    }
    #[inline]
    pub fn u32(b: &[u8], off: usize) -> Option<u32> {
        arr::<4>(b, off).map(u32::from_be_bytes)
    }
    #[inline]
    pub fn u64(b: &[u8], off: usize) -> Option<u64> {
        arr::<8>(b, off).map(u64::from_be_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wqebbs_rounding() {
        assert_eq!(wqebbs_for_ds(0), 0);
        assert_eq!(wqebbs_for_ds(1), 1);
        assert_eq!(wqebbs_for_ds(4), 1);
        assert_eq!(wqebbs_for_ds(5), 2);
        assert_eq!(wqebbs_for_ds(7), 2);
        assert_eq!(wqebbs_for_ds(8), 2);
        assert_eq!(wqebbs_for_ds(9), 3);
        assert_eq!(wqebbs_for_ds(255), 64);
    }

    #[test]
    fn sq_cnt_validity() {
        assert!(valid_sq_cnt(1));
        assert!(valid_sq_cnt(1 << 15));
        assert!(!valid_sq_cnt(0));
        assert!(!valid_sq_cnt(3));
        assert!(!valid_sq_cnt(1 << 16));
    }

    #[test]
    fn be_reads_are_bounded() {
        let b = [1u8, 2, 3, 4, 5, 6, 7, 8];
        assert_eq!(be::u32(&b, 0), Some(0x0102_0304));
        assert_eq!(be::u64(&b, 0), Some(0x0102_0304_0506_0708));
        assert_eq!(be::u16(&b, 7), None);
        assert_eq!(be::u64(&b, usize::MAX), None);
    }
}
