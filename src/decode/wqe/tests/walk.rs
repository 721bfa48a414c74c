//! Walk tests: doorbell ranges over built rings (16-bit wrap, DCI, the CPU convention) and the
//! corrupt rings that must stop the walk without hanging.

use super::*;

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
