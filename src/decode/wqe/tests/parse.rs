//! Parser tests: every WQE shape of reference §1 through `parse_wqe`, its errors, and the opcode
//! table.

use super::*;

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
