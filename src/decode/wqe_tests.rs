//! Unit tests for the WQE parser and walk, with WQEs built byte by byte in the shapes of
//! reference §1 ("WQE shapes emitted by GPU code") and rdma-core's `mlx5dv_set_ctrl_seg`.

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

#[test]
fn rc_rdma_write() {
    let mut r = Ring::new(8);
    r.put(
        2,
        &[
            &ctrl(0, 2, 0x08, 3, 0x08, 0),
            &raddr(0x7f00_1234_5000, 0x1111),
            &data(4096, 0x2222, 0x7e00_0000_0000),
        ],
    );
    let w = parse_wqe(&r.buf, 8, 2, QpType::Rc).unwrap();
    assert_eq!(w.opcode, Opcode::RdmaWrite);
    assert_eq!(w.opcode.name(), "RDMA_WRITE");
    assert_eq!(w.ctrl.wqe_index, 2);
    assert_eq!(w.ctrl.qpn, QPN);
    assert_eq!(w.ctrl.ds, 3);
    assert!(w.ctrl.signaled());
    assert_eq!(w.wqebbs, 1);
    assert_eq!(w.slot, 2);
    assert!(w.decoded);
    assert_eq!(
        w.raddr,
        Some(RaddrSeg {
            raddr: 0x7f00_1234_5000,
            rkey: 0x1111
        })
    );
    assert_eq!(w.data.sges, 1);
    assert_eq!(w.data.lkey, 0x2222);
    assert_eq!(w.data.addr, 0x7e00_0000_0000);
    assert_eq!(w.bytes(), 4096);
    assert_eq!(w.av, None);
    assert_eq!(w.atomic, None);
}

#[test]
fn rc_rdma_read_and_write_imm_two_sges() {
    let mut r = Ring::new(8);
    r.put(
        0,
        &[
            &ctrl(0, 0, 0x10, 3, 0, 0),
            &raddr(0x1000, 7),
            &data(64, 1, 0x2000),
        ],
    );
    let w = parse_wqe(&r.buf, 8, 0, QpType::Rc).unwrap();
    assert_eq!(
        (w.opcode, w.bytes(), w.raddr.unwrap().rkey),
        (Opcode::RdmaRead, 64, 7)
    );
    assert!(!w.ctrl.signaled());

    r.put(
        1,
        &[
            &ctrl(0, 1, 0x09, 4, 0x08, 0xdead_beef),
            &raddr(0x1000, 7),
            &data(100, 1, 0x2000),
            &data(28, 2, 0x3000),
        ],
    );
    let w = parse_wqe(&r.buf, 8, 1, QpType::Rc).unwrap();
    assert_eq!(w.opcode, Opcode::RdmaWriteImm);
    assert_eq!(w.ctrl.imm, 0xdead_beef);
    assert_eq!((w.data.sges, w.data.bytes, w.data.lkey), (2, 128, 1));
}

#[test]
fn rc_inline_write() {
    let mut r = Ring::new(4);
    let payload = [1u8, 2, 3, 4, 5, 6, 7, 8];
    let inl = inline(&payload);
    r.put(3, &[&ctrl(0, 3, 0x08, 3, 0x08, 0), &raddr(0xabc0, 9), &inl]);
    let w = parse_wqe(&r.buf, 4, 3, QpType::Rc).unwrap();
    assert_eq!(w.inline_bytes, Some(8));
    assert_eq!(w.data.sges, 0);
    assert_eq!(w.bytes(), 8);
    assert_eq!(w.raddr.unwrap().raddr, 0xabc0);
}

#[test]
fn rc_plain_atomics() {
    let mut r = Ring::new(8);
    // NVSHMEM 8-byte fetch-add: MLX5_OPCODE_ATOMIC_FA, ds 4: ctrl, raddr, atomic, data.
    r.put(
        0,
        &[
            &ctrl(0, 0, 0x12, 4, 0x08, 0),
            &raddr(0x9000, 5),
            &atomic(42, 0),
            &data(8, 6, 0x8000),
        ],
    );
    let w = parse_wqe(&r.buf, 8, 0, QpType::Rc).unwrap();
    assert_eq!(w.opcode, Opcode::AtomicFa);
    let a = w.atomic.unwrap();
    assert_eq!(
        (a.kind, a.arg_bytes, a.swap_add),
        (AtomicKind::FetchAdd, 8, 42)
    );
    assert_eq!(w.bytes(), 8);

    // 8-byte compare-swap.
    r.put(
        1,
        &[
            &ctrl(0, 1, 0x11, 4, 0x08, 0),
            &raddr(0x9000, 5),
            &atomic(7, 3),
            &data(8, 6, 0x8000),
        ],
    );
    let a = parse_wqe(&r.buf, 8, 1, QpType::Rc).unwrap().atomic.unwrap();
    assert_eq!(
        (a.kind, a.swap_add, a.compare),
        (AtomicKind::CompareSwap, 7, 3)
    );
}

#[test]
fn nvshmem_extended_masked_atomics() {
    let mut r = Ring::new(8);
    // 4-byte masked FA (opmod 0x08): {add_data BE32, field_boundary BE32, reserved u64}.
    let mut seg = [0u8; 16];
    seg[0..4].copy_from_slice(&5u32.to_be_bytes());
    r.put(
        0,
        &[
            &ctrl(0x08, 0, 0x15, 4, 0x08, 0),
            &raddr(0x9000, 5),
            &seg,
            &data(4, 6, 0x8000),
        ],
    );
    let w = parse_wqe(&r.buf, 8, 0, QpType::Rc).unwrap();
    assert_eq!(w.opcode, Opcode::AtomicMaskedFa);
    assert_eq!(w.ctrl.opmod, EXT_AMO_OPMOD_4_BYTE);
    let a = w.atomic.unwrap();
    assert_eq!(
        (a.kind, a.arg_bytes, a.swap_add, a.compare),
        (AtomicKind::MaskedFetchAdd, 4, 5, 0)
    );
    assert_eq!(w.bytes(), 4);

    // 4-byte masked CS: {swap, compare, swap_mask, compare_mask} BE32 each.
    let mut cs = [0u8; 16];
    cs[0..4].copy_from_slice(&0x11u32.to_be_bytes());
    cs[4..8].copy_from_slice(&0x22u32.to_be_bytes());
    cs[8..12].copy_from_slice(&u32::MAX.to_be_bytes());
    cs[12..16].copy_from_slice(&u32::MAX.to_be_bytes());
    r.put(
        1,
        &[
            &ctrl(0x08, 1, 0x14, 4, 0x08, 0),
            &raddr(0x9000, 5),
            &cs,
            &data(4, 6, 0x8000),
        ],
    );
    let a = parse_wqe(&r.buf, 8, 1, QpType::Rc).unwrap().atomic.unwrap();
    assert_eq!(a.kind, AtomicKind::MaskedCompareSwap);
    assert_eq!(
        (a.swap_add, a.compare, a.swap_add_mask, a.compare_mask),
        (0x11, 0x22, 0xffff_ffff, 0xffff_ffff)
    );

    // 8-byte masked CS (opmod 0x09): two 16-byte atomic segs, ds 5, data in the next WQEBB.
    r.put(
        2,
        &[
            &ctrl(0x09, 2, 0x14, 5, 0x08, 0),
            &raddr(0x9000, 5),
            &atomic(0xaaaa, 0),
            &atomic(u64::MAX, 0),
            &data(8, 6, 0x8000),
        ],
    );
    let w = parse_wqe(&r.buf, 8, 2, QpType::Rc).unwrap();
    assert_eq!(w.wqebbs, 2);
    let a = w.atomic.unwrap();
    assert_eq!(
        (a.arg_bytes, a.swap_add, a.swap_add_mask),
        (8, 0xaaaa, u64::MAX)
    );
    assert_eq!((w.data.bytes, w.data.addr), (8, 0x8000));

    // Unsupported width (opmod 0x0c) is an error, not a panic.
    r.put(
        4,
        &[
            &ctrl(0x0c, 4, 0x14, 4, 0, 0),
            &raddr(0, 0),
            &cs,
            &data(4, 6, 0),
        ],
    );
    assert_eq!(
        parse_wqe(&r.buf, 8, 4, QpType::Rc),
        Err(WqeError::UnsupportedAtomicOpmod { opmod: 0x0c })
    );
}

#[test]
fn dci_half_av_write() {
    let mut r = Ring::new(8);
    r.put(
        5,
        &[
            &ctrl(0, 5, 0x08, 4, 0x08, 0),
            &half_av(0x1234_5678_9abc_def0, 0x00_0777, 0x10),
            &raddr(0x5000, 0x42),
            &data(256, 3, 0x6000),
        ],
    );
    let w = parse_wqe(&r.buf, 8, 5, QpType::Dci).unwrap();
    let av = w.av.unwrap();
    assert!(!av.full);
    assert_eq!(av.key, 0x1234_5678_9abc_def0);
    assert_eq!(av.dqp_dct, 0x777);
    assert_eq!(av.rlid, 0x10);
    assert_eq!(w.raddr.unwrap().rkey, 0x42);
    assert_eq!(w.bytes(), 256);
    // The same bytes read as RC would take the AV for raddr: QP type matters.
    let rc = parse_wqe(&r.buf, 8, 5, QpType::Rc).unwrap();
    assert_ne!(rc.raddr, w.raddr);
}

#[test]
fn dci_full_av_write_and_atomic() {
    let mut r = Ring::new(8);
    // ds 6: ctrl + AV fill WQEBB 0; raddr and data in the next WQEBB (out_wqes[1]).
    r.put(
        0,
        &[
            &ctrl(0, 0, 0x08, 6, 0x08, 0),
            &full_av(0xdc, 0x00_0888, 0x01),
            &raddr(0x5000, 0x42),
            &data(1 << 20, 3, 0x6000),
        ],
    );
    let w = parse_wqe(&r.buf, 8, 0, QpType::Dci).unwrap();
    assert_eq!(w.wqebbs, 2);
    let av = w.av.unwrap();
    assert!(av.full);
    assert_eq!(av.dqp_dct, 0x888);
    assert_eq!(av.rgid[15], 0x01);
    assert_eq!(av.rmac, [0x02, 0x11, 0x22, 0x33, 0x44, 0x55]);
    assert_eq!(av.hop_limit, 64);
    assert_eq!(w.raddr.unwrap().raddr, 0x5000);
    assert_eq!(w.bytes(), 1 << 20);

    // ds 7: full AV atomic.
    r.put(
        2,
        &[
            &ctrl(0, 2, 0x12, 7, 0x08, 0),
            &full_av(0xdc, 0x00_0888, 0x02),
            &raddr(0x5008, 0x42),
            &atomic(1, 0),
            &data(8, 3, 0x6100),
        ],
    );
    let w = parse_wqe(&r.buf, 8, 2, QpType::Dci).unwrap();
    assert_eq!(
        (w.wqebbs, w.atomic.unwrap().swap_add, w.data.addr),
        (2, 1, 0x6100)
    );

    // ds 5: half AV atomic, data in the next WQEBB.
    r.put(
        4,
        &[
            &ctrl(0, 4, 0x12, 5, 0x08, 0),
            &half_av(0xdc, 0x999, 1),
            &raddr(0x5010, 0x42),
            &atomic(2, 0),
            &data(8, 3, 0x6200),
        ],
    );
    let w = parse_wqe(&r.buf, 8, 4, QpType::Dci).unwrap();
    assert_eq!(
        (w.wqebbs, w.atomic.unwrap().swap_add, w.data.addr),
        (2, 2, 0x6200)
    );
}

#[test]
fn ud_send_and_local_ops() {
    let mut r = Ring::new(8);
    r.put(
        0,
        &[
            &ctrl(0, 0, 0x0a, 5, 0x08, 0),
            &full_av(0x1_1111, 0x42, 9),
            &data(512, 1, 0x10),
        ],
    );
    let w = parse_wqe(&r.buf, 8, 0, QpType::Ud).unwrap();
    assert_eq!(
        (w.opcode, w.bytes(), w.av.unwrap().dqp_dct),
        (Opcode::Send, 512, 0x42)
    );
    assert_eq!(w.raddr, None);

    // NVSHMEM NOP: ds 2 but only the ctrl is written; the rest is garbage and not read.
    r.put(2, &[&ctrl(0, 2, 0x00, 2, 0x08, 0)]);
    let w = parse_wqe(&r.buf, 8, 2, QpType::Dci).unwrap();
    assert_eq!((w.opcode, w.bytes(), w.decoded), (Opcode::Nop, 0, true));

    // NVSHMEM DUMP (0x23): ctrl + data, no AV even on a DCI.
    r.put(3, &[&ctrl(0, 3, 0x23, 2, 0x08, 0), &data(1, 4, 0x99)]);
    let w = parse_wqe(&r.buf, 8, 3, QpType::Dci).unwrap();
    assert_eq!((w.opcode.name(), w.bytes(), w.data.addr), ("DUMP", 1, 0x99));
    assert_eq!(w.av, None);

    // UMR: size known, segments not decoded.
    r.put(4, &[&ctrl(0, 4, 0x25, 8, 0, 0)]);
    let w = parse_wqe(&r.buf, 8, 4, QpType::Rc).unwrap();
    assert_eq!((w.opcode, w.decoded, w.wqebbs), (Opcode::Umr, false, 2));
}

#[test]
fn wqe_spanning_the_ring_end() {
    // sq_cnt 4: a 2-WQEBB DCI write at slot 3 continues at slot 0.
    let mut r = Ring::new(4);
    r.put(
        3,
        &[
            &ctrl(0, 3, 0x08, 6, 0x08, 0),
            &full_av(0xdc, 0x123, 7),
            &raddr(0xfeed_0000, 0x77),
            &data(12345, 8, 0xbeef),
        ],
    );
    // The raddr really is at the start of the ring.
    assert_eq!(&r.buf[0..8], &0xfeed_0000u64.to_be_bytes());
    let w = parse_wqe(&r.buf, 4, 3, QpType::Dci).unwrap();
    assert_eq!(w.raddr.unwrap().raddr, 0xfeed_0000);
    assert_eq!(w.bytes(), 12345);
    // Slot index is taken modulo the ring: 7 & 3 == 3.
    assert_eq!(parse_wqe(&r.buf, 4, 7, QpType::Dci), Ok(w));

    // An inline payload that wraps.
    let mut r = Ring::new(2);
    let payload = [0xabu8; 40];
    let inl = inline(&payload);
    r.put(1, &[&ctrl(0, 1, 0x08, 5, 0, 0), &raddr(1, 2), &inl]);
    let w = parse_wqe(&r.buf, 2, 1, QpType::Rc).unwrap();
    assert_eq!((w.inline_bytes, w.wqebbs), (Some(40), 2));
}

#[test]
fn parse_errors() {
    let r = Ring::new(4);
    assert_eq!(
        parse_wqe(&r.buf[..100], 4, 0, QpType::Rc),
        Err(WqeError::RingTooSmall {
            need: 256,
            have: 100
        })
    );
    assert_eq!(
        parse_wqe(&r.buf, 3, 0, QpType::Rc),
        Err(WqeError::InvalidSqCnt { sq_cnt: 3 })
    );
    let mut r = Ring::new(4);
    r.put(0, &[&ctrl(0, 0, 0x08, 0, 0, 0)]);
    assert_eq!(parse_wqe(&r.buf, 4, 0, QpType::Rc), Err(WqeError::ZeroDs));
    r.put(0, &[&ctrl(0, 0, 0x08, 64, 0, 0)]);
    assert_eq!(
        parse_wqe(&r.buf, 4, 0, QpType::Rc),
        Err(WqeError::AbsurdDs { ds: 64 })
    );
    // ds 20 = 5 WQEBBs > sq_cnt 4.
    r.put(0, &[&ctrl(0, 0, 0x08, 20, 0, 0)]);
    assert_eq!(
        parse_wqe(&r.buf, 4, 0, QpType::Rc),
        Err(WqeError::AbsurdDs { ds: 20 })
    );
    // ds 2 for an RDMA write: the data segment is missing (the raddr fills the WQE).
    r.put(0, &[&ctrl(0, 0, 0x08, 2, 0, 0), &raddr(0, 0)]);
    assert_eq!(parse_wqe(&r.buf, 4, 0, QpType::Rc).unwrap().bytes(), 0);
    // ds 1 for an RDMA write: raddr does not fit.
    r.put(0, &[&ctrl(0, 0, 0x08, 1, 0, 0)]);
    assert!(matches!(
        parse_wqe(&r.buf, 4, 0, QpType::Rc),
        Err(WqeError::Truncated { .. })
    ));
    // An inline length past the WQE.
    r.put(
        0,
        &[
            &ctrl(0, 0, 0x08, 3, 0, 0),
            &raddr(0, 0),
            &0x8000_0100u32.to_be_bytes(),
        ],
    );
    assert_eq!(
        parse_wqe(&r.buf, 4, 0, QpType::Rc),
        Err(WqeError::InlineOverflow {
            len: 0x100,
            room: 16
        })
    );
    // Largest inline length: no overflow in the arithmetic.
    r.put(
        0,
        &[
            &ctrl(0, 0, 0x08, 3, 0, 0),
            &raddr(0, 0),
            &u32::MAX.to_be_bytes(),
        ],
    );
    assert!(matches!(
        parse_wqe(&r.buf, 4, 0, QpType::Rc),
        Err(WqeError::InlineOverflow { .. })
    ));
}

fn gpu_range(start: u16, end: u16) -> WqeRange {
    WqeRange {
        start,
        end,
        wqebbs: u32::from(end.wrapping_sub(start)),
        last_wqe: None,
    }
}

#[test]
fn walk_gpu_batch_with_16bit_wrap() {
    // sq_cnt 8; WQEs at 0xfffe (1 WQEBB), 0xffff (2 WQEBBs: slots 7 and 0), 0x0001 (1 WQEBB).
    let mut r = Ring::new(8);
    r.put(
        0xfffe,
        &[
            &ctrl(0, 0xfffe, 0x08, 3, 0, 0),
            &raddr(0x100, 1),
            &data(10, 2, 3),
        ],
    );
    // An RC write with four SGEs: ds 6, two WQEBBs.
    r.put(
        0xffff,
        &[
            &ctrl(0, 0xffff, 0x08, 6, 0, 0),
            &raddr(0x200, 1),
            &data(5, 2, 3),
            &data(5, 2, 3),
            &data(5, 2, 3),
            &data(5, 2, 3),
        ],
    );
    r.put(
        0x0001,
        &[
            &ctrl(0, 0x0001, 0x10, 3, 0x08, 0),
            &raddr(0x300, 1),
            &data(30, 2, 3),
        ],
    );

    let mut t = SqTracker::with_start(8, 0xfffe).unwrap();
    let DoorbellStep::New(range) = t.on_doorbell(&DoorbellWord::gpu(QPN, 0x0002)) else {
        panic!("expected new WQEBBs")
    };
    assert_eq!(range.wqebbs, 4);
    let out = walk_new_wqes(&r.buf, 8, &range, QpType::Rc);
    assert!(out.is_complete(), "{:?}", out.error);
    assert_eq!(out.wqes.len(), 3);
    assert_eq!(out.wqes[0].ctrl.wqe_index, 0xfffe);
    assert_eq!(out.wqes[1].ctrl.wqe_index, 0xffff);
    assert_eq!(
        (
            out.wqes[1].wqebbs,
            out.wqes[1].data.sges,
            out.wqes[1].bytes()
        ),
        (2, 4, 20)
    );
    assert_eq!(out.wqes[2].ctrl.wqe_index, 0x0001);
    assert_eq!(out.wqes[2].opcode, Opcode::RdmaRead);
    assert_eq!(out.wqes[2].bytes(), 30);
    assert_eq!((out.walked, out.cursor), (4, 0x0002));
}

#[test]
fn walk_dci_batch_and_doca_double_ring() {
    let mut r = Ring::new(16);
    r.put(
        0,
        &[
            &ctrl(0, 0, 0x08, 4, 0, 0),
            &half_av(1, 2, 3),
            &raddr(0x10, 1),
            &data(1, 1, 1),
        ],
    );
    r.put(
        1,
        &[
            &ctrl(0, 1, 0x08, 6, 0, 0),
            &full_av(1, 2, 3),
            &raddr(0x20, 1),
            &data(2, 1, 1),
        ],
    );
    r.put(
        3,
        &[
            &ctrl(0, 3, 0x12, 5, 8, 0),
            &half_av(1, 2, 3),
            &raddr(0x30, 1),
            &atomic(1, 0),
            &data(8, 1, 1),
        ],
    );
    let mut t = SqTracker::new(16).unwrap();
    let db = DoorbellWord::gpu(QPN, 5);
    let DoorbellStep::New(range) = t.on_doorbell(&db) else {
        panic!()
    };
    let out = walk_new_wqes(&r.buf, 16, &range, QpType::Dci);
    assert!(out.is_complete());
    let raddrs: Vec<u64> = out.wqes.iter().map(|w| w.raddr.unwrap().raddr).collect();
    assert_eq!(raddrs, [0x10, 0x20, 0x30]);
    // DOCA rings the same value again: nothing to walk.
    assert_eq!(t.on_doorbell(&db), DoorbellStep::Duplicate { idx: 5 });
}

#[test]
fn walk_cpu_convention() {
    let mut r = Ring::new(8);
    r.put(
        0,
        &[&ctrl(0, 0, 0x08, 3, 0, 0), &raddr(1, 1), &data(100, 1, 1)],
    );
    r.put(1, &[&ctrl(0, 1, 0x0a, 2, 0x08, 0), &data(200, 1, 1)]);
    // rdma-core rings with the first 8 bytes of the last WQE's ctrl.
    let mut word = [0u8; 8];
    word.copy_from_slice(&r.buf[64..72]);
    let mut t = SqTracker::new(8).unwrap();
    let DoorbellStep::New(range) = t.on_doorbell(&DoorbellWord::from_bytes(word)) else {
        panic!()
    };
    assert_eq!((range.start, range.end, range.last_wqe), (0, 2, Some(1)));
    let out = walk_new_wqes(&r.buf, 8, &range, QpType::Rc);
    assert!(out.is_complete(), "{:?}", out.error);
    assert_eq!(out.wqes.iter().map(Wqe::bytes).sum::<u64>(), 300);

    // If the WQE the doorbell names turns out smaller in the ring than in the word, the walk
    // must not silently go on past it.
    let bad = WqeRange {
        start: 0,
        end: 3,
        wqebbs: 3,
        last_wqe: Some(1),
    };
    let out = walk_new_wqes(&r.buf, 8, &bad, QpType::Rc);
    assert!(matches!(out.error, Some(WalkError::LastWqeMismatch { .. })));
    assert!(out.is_corrupt());
}

#[test]
fn walk_stops_on_corrupt_ctrl_index() {
    let mut r = Ring::new(8);
    r.put(
        0,
        &[&ctrl(0, 0, 0x08, 3, 0, 0), &raddr(1, 1), &data(1, 1, 1)],
    );
    // Slot 1 still holds the WQE from the previous lap (index 0xfff9 = 1 - 8).
    r.put(
        1,
        &[
            &ctrl(0, 0xfff9, 0x08, 3, 0, 0),
            &raddr(1, 1),
            &data(1, 1, 1),
        ],
    );
    let out = walk_new_wqes(&r.buf, 8, &gpu_range(0, 3), QpType::Rc);
    assert_eq!(out.wqes.len(), 1);
    assert_eq!(
        out.error,
        Some(WalkError::IndexMismatch {
            expected: 1,
            found: 0xfff9
        })
    );
    assert!(out.is_corrupt());
    assert_eq!((out.walked, out.cursor), (1, 1));
}

#[test]
fn walk_bad_ds_and_overshoot_never_hang() {
    let mut r = Ring::new(4);
    r.put(0, &[&ctrl(0, 0, 0x08, 0, 0, 0)]);
    let out = walk_new_wqes(&r.buf, 4, &gpu_range(0, 4), QpType::Rc);
    assert_eq!(
        out.error,
        Some(WalkError::BadCtrl {
            at: 0,
            error: WqeError::ZeroDs
        })
    );
    // A 2-WQEBB WQE where the doorbell covered only one.
    r.put(0, &[&ctrl(0, 0, 0x08, 6, 0, 0)]);
    let out = walk_new_wqes(&r.buf, 4, &gpu_range(0, 1), QpType::Rc);
    assert_eq!(
        out.error,
        Some(WalkError::Overshoot {
            at: 0,
            wqebbs: 2,
            left: 1
        })
    );
    // A range longer than the ring.
    let out = walk_new_wqes(&r.buf, 4, &gpu_range(0, 5), QpType::Rc);
    assert_eq!(
        out.error,
        Some(WalkError::RangeTooLong {
            wqebbs: 5,
            sq_cnt: 4
        })
    );
    // A poisoned ring.
    let r = Ring::new(4);
    let out = walk_new_wqes(&r.buf, 4, &gpu_range(0, 4), QpType::Rc);
    assert!(out.is_corrupt());
}

#[test]
fn walk_skips_unparsable_but_continues() {
    let mut r = Ring::new(8);
    // WQE 0: valid ctrl, inline length beyond the WQE.
    r.put(
        0,
        &[
            &ctrl(0, 0, 0x08, 3, 0, 0),
            &raddr(0, 0),
            &0x8000_00ffu32.to_be_bytes(),
        ],
    );
    r.put(
        1,
        &[&ctrl(0, 1, 0x08, 3, 0, 0), &raddr(0, 0), &data(5, 0, 0)],
    );
    let out = walk_new_wqes(&r.buf, 8, &gpu_range(0, 2), QpType::Rc);
    assert!(out.is_complete());
    assert_eq!((out.unparsable, out.wqes.len()), (1, 1));
    assert!(matches!(
        out.first_unparsable,
        Some(WalkError::Unparsable {
            at: 0,
            error: WqeError::InlineOverflow { .. },
            ..
        })
    ));
}

#[test]
fn opcode_table_roundtrip() {
    for v in 0..=255u8 {
        assert_eq!(Opcode::from_u8(v).code(), v);
    }
    assert_eq!(Opcode::from_u8(0x15).name(), "ATOMIC_MASKED_FA");
    assert_eq!(Opcode::from_u8(0x23), Opcode::Dump);
    assert_eq!(Opcode::from_u8(0x42), Opcode::Unknown(0x42));
    assert_eq!(QpType::from_qpc_st(5), Some(QpType::Dci));
    assert_eq!(QpType::from_qpc_st(3), None);
}
