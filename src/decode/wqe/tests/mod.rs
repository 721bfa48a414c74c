//! Unit tests for the WQE parser and walk, with WQEs built byte by byte in the shapes of
//! reference §1 ("WQE shapes emitted by GPU code") and rdma-core's `mlx5dv_set_ctrl_seg`.
//!
//! - `parse`: each WQE shape through `parse_wqe`, the parse errors, the opcode table.
//! - `walk`: doorbell ranges walked through `walk_new_wqes`, including corrupt rings.

mod parse;
mod walk;

use super::*;
use crate::decode::doorbell::{DoorbellStep, DoorbellWord, SqTracker};

const QPN: u32 = 0x00_0abc;

/// `mlx5dv_set_ctrl_seg`: `opmod<<24 | pi<<8 | opcode`, `qpn<<8 | ds`, signature 0,
/// dci_stream_channel_id 0, fm_ce_se, imm.
fn ctrl(opmod: u8, idx: u16, opcode: u8, ds: u8, fm_ce_se: u8, imm: u32) -> [u8; 16] {
    let mut c = [0u8; 16];
    c[0] = opmod;
    c[1] = (idx >> 8) as u8;
    c[2] = idx as u8;
    c[3] = opcode;
    c[4] = (QPN >> 16) as u8;
    c[5] = (QPN >> 8) as u8;
    c[6] = QPN as u8;
    c[7] = ds;
    c[11] = fm_ce_se;
    c[12..16].copy_from_slice(&imm.to_be_bytes());
    c
}

fn raddr(addr: u64, rkey: u32) -> [u8; 16] {
    let mut s = [0u8; 16];
    s[0..8].copy_from_slice(&addr.to_be_bytes());
    s[8..12].copy_from_slice(&rkey.to_be_bytes());
    s
}

fn data(bytes: u32, lkey: u32, addr: u64) -> [u8; 16] {
    let mut s = [0u8; 16];
    s[0..4].copy_from_slice(&bytes.to_be_bytes());
    s[4..8].copy_from_slice(&lkey.to_be_bytes());
    s[8..16].copy_from_slice(&addr.to_be_bytes());
    s
}

/// NVSHMEM inline: `HTOBE32(bytes | MLX5_INLINE_SEG)` then the data, padded to 16.
fn inline(payload: &[u8]) -> Vec<u8> {
    let mut s = ((payload.len() as u32) | 0x8000_0000)
        .to_be_bytes()
        .to_vec();
    s.extend_from_slice(payload);
    while !s.len().is_multiple_of(16) {
        s.push(0xcc);
    }
    s
}

fn atomic(swap_add: u64, compare: u64) -> [u8; 16] {
    let mut s = [0u8; 16];
    s[0..8].copy_from_slice(&swap_add.to_be_bytes());
    s[8..16].copy_from_slice(&compare.to_be_bytes());
    s
}

/// NVSHMEM `ibgda_half_av_seg_t`: dc_key, dqp_dct (ext bit clear), stat_rate_sl, fl_mlid, rlid.
fn half_av(dc_key: u64, dct: u32, rlid: u16) -> [u8; 16] {
    let mut s = [0u8; 16];
    s[0..8].copy_from_slice(&dc_key.to_be_bytes());
    s[8..12].copy_from_slice(&dct.to_be_bytes());
    s[12] = 0x01;
    s[14..16].copy_from_slice(&rlid.to_be_bytes());
    s
}

/// `struct mlx5_wqe_av` with `MLX5_EXTENDED_UD_AV` set.
fn full_av(dc_key: u64, dct: u32, gid_last: u8) -> [u8; 48] {
    let mut s = [0u8; 48];
    s[0..8].copy_from_slice(&dc_key.to_be_bytes());
    s[8..12].copy_from_slice(&(dct | 0x8000_0000).to_be_bytes());
    s[14..16].copy_from_slice(&0xffffu16.to_be_bytes());
    s[20..26].copy_from_slice(&[0x02, 0x11, 0x22, 0x33, 0x44, 0x55]);
    s[26] = 0x0a; // tclass
    s[27] = 64; // hop_limit
    s[28..32].copy_from_slice(&0x4000_0000u32.to_be_bytes());
    s[32..48].copy_from_slice(&[0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, gid_last]);
    s
}

/// A ring of `sq_cnt` WQEBBs filled with a poison byte; writes wrap modulo the ring.
struct Ring {
    buf: Vec<u8>,
}

impl Ring {
    fn new(sq_cnt: u32) -> Self {
        Self {
            buf: vec![0x5a; sq_cnt as usize * 64],
        }
    }

    /// Writes `segs` back to back starting at WQEBB index `idx` (masked), wrapping at the end.
    fn put(&mut self, idx: u16, segs: &[&[u8]]) {
        let n = self.buf.len();
        let mut at = (usize::from(idx) * 64) % n;
        for s in segs {
            for &b in *s {
                self.buf[at] = b;
                at = (at + 1) % n;
            }
        }
    }
}
