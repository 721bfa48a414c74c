//! Unit tests for the devx mailbox decoders, with mailboxes built byte by byte from the reference
//! §3 table (byte offset, shift, mask) rather than through the encoder.

use super::*;

/// OR `value << shift` into the BE32 at byte `at`, as the reference table states it.
fn put(b: &mut [u8], at: usize, shift: u32, value: u32) {
    let old = u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
    b[at..at + 4].copy_from_slice(&(old | (value << shift)).to_be_bytes());
}

/// An NVSHMEM-style DCI CREATE_QP, laid out from the reference table only.
fn nvshmem_dci_mailbox() -> Vec<u8> {
    let mut b = vec![0u8; CREATE_QP_IN_BYTES];
    b[0] = 0x05; // opcode BE16 0x0500
    b[1] = 0x00;
    put(&mut b, 24, 16, 0x5); // st = DCI
    put(&mut b, 24, 11, 0x3); // pm_state = MIGRATED (qpc bit 0x13, 2 bits)
    put(&mut b, 28, 0, 0x00_1234); // pd
    put(&mut b, 32, 19, 0); // log_rq_size = 0
    put(&mut b, 32, 11, 10); // log_sq_size = 10 (1024 WQEBBs)
    put(&mut b, 36, 0, 0x00_0abc); // uar_page
    put(&mut b, 40, 0, 0x00_0007); // user_index
    put(&mut b, 148, 0, 0x00_0101); // cqn_snd
    put(&mut b, 180, 0, 0x00_0202); // cqn_rcv
    b[184..192].copy_from_slice(&0x40u64.to_be_bytes()); // dbr_addr = dbr offset 0x40
    put(&mut b, 196, 24, 1); // rq_type = SRQ
    put(&mut b, 232, 28, 1); // dbr_umem_valid
    b[252..256].copy_from_slice(&0x77u32.to_be_bytes()); // dbr_umem_id
    b[256..264].copy_from_slice(&0x1_0000u64.to_be_bytes()); // wq_umem_offset
    b[264..268].copy_from_slice(&0x88u32.to_be_bytes()); // wq_umem_id
    put(&mut b, 268, 31, 1); // wq_umem_valid
    b
}

#[test]
fn create_qp_from_reference_table() {
    let b = nvshmem_dci_mailbox();
    assert_eq!(command_opcode(&b), Ok(op::CREATE_QP));
    let q = CreateQpIn::decode(&b).unwrap();
    assert_eq!(q.st, st::DCI);
    assert_eq!(q.qp_type(), Some(QpType::Dci));
    assert_eq!(q.pm_state, PM_STATE_MIGRATED);
    assert_eq!(q.pd, 0x1234);
    assert_eq!(q.log_rq_size, 0);
    assert_eq!(q.log_sq_size, 10);
    assert_eq!(q.sq_cnt(), 1024);
    assert!(!q.no_sq);
    assert_eq!(q.uar_page, 0xabc);
    assert_eq!(q.user_index, 7);
    assert_eq!(q.cqn_snd, 0x101);
    assert_eq!(q.cqn_rcv, 0x202);
    assert_eq!(q.dbr_addr, 0x40);
    assert_eq!(q.rq_type, rq_type::SRQ);
    assert!(q.dbr_umem_valid);
    assert_eq!(q.dbr_umem_id, 0x77);
    assert_eq!(q.wq_umem_offset, 0x1_0000);
    assert_eq!(q.wq_umem_id, 0x88);
    assert!(q.wq_umem_valid);
    // SRQ: no RQ in front of the SQ.
    assert_eq!(q.rq_bytes(), 0);
    assert_eq!(q.sq_offset_in_umem(), 0x1_0000);
    assert_eq!(q.sq_bytes(), 1024 * 64);
    // The encoder produces the same bytes.
    assert_eq!(q.encode().as_slice(), b.as_slice());
}

#[test]
fn create_qp_regular_rq_bytes_and_no_sq() {
    let mut b = vec![0u8; CREATE_QP_IN_BYTES];
    b[0] = 0x05;
    put(&mut b, 32, 19, 4); // log_rq_size = 4 (16 WQEs)
    put(&mut b, 32, 16, 2); // log_rq_stride = 2 (64-byte RQ WQEs)
    put(&mut b, 32, 15, 1); // no_sq
    put(&mut b, 32, 11, 6);
    b[256..264].copy_from_slice(&0x100u64.to_be_bytes());
    let q = CreateQpIn::decode(&b).unwrap();
    assert_eq!((q.log_rq_size, q.log_rq_stride, q.no_sq), (4, 2, true));
    assert_eq!(q.rq_type, rq_type::REGULAR);
    // (1<<4) << (2+4) = 1024
    assert_eq!(q.rq_bytes(), 1024);
    assert_eq!(q.sq_offset_in_umem(), 0x100 + 1024);
    assert_eq!(q.sq_cnt(), 0);
    assert_eq!(q.qp_type(), Some(QpType::Rc));
    assert_eq!(q.encode().as_slice(), b.as_slice());
    // Zero-length RQ: no RQ bytes either.
    put(&mut b, 196, 24, 3);
    assert_eq!(CreateQpIn::decode(&b).unwrap().rq_bytes(), 0);
}

#[test]
fn create_qp_errors() {
    let b = nvshmem_dci_mailbox();
    assert_eq!(
        CreateQpIn::decode(&b[..100]),
        Err(DevxError::Short {
            need: CREATE_QP_IN_BYTES,
            have: 100
        })
    );
    let mut w = b.clone();
    w[1] = 0x01;
    assert_eq!(
        CreateQpIn::decode(&w),
        Err(DevxError::WrongOpcode {
            expected: 0x500,
            found: 0x501
        })
    );
    assert!(command_opcode(&[5]).is_err());
}

#[test]
fn create_qp_roundtrip_all_fields_max() {
    let q = CreateQpIn {
        uid: 0xffff,
        st: 0xff,
        pm_state: 3,
        pd: 0xff_ffff,
        log_rq_size: 0xf,
        log_rq_stride: 7,
        no_sq: true,
        log_sq_size: 0xf,
        uar_page: 0xff_ffff,
        send_dbr_mode: 3,
        user_index: 0xff_ffff,
        cqn_snd: 0xff_ffff,
        cqn_rcv: 0xff_fffe,
        dbr_addr: u64::MAX - 1,
        rq_type: 7,
        srqn: 0xab_cdef,
        dbr_umem_valid: true,
        dbr_umem_id: u32::MAX,
        wq_umem_offset: u64::MAX,
        wq_umem_id: 0xdead_beef,
        wq_umem_valid: true,
    };
    assert_eq!(CreateQpIn::decode(&q.encode()), Ok(q));
    // Fields never spill into each other: each one alone round-trips with the others zero.
    let one = CreateQpIn {
        log_rq_stride: 7,
        ..Default::default()
    };
    let d = CreateQpIn::decode(&one.encode()).unwrap();
    assert_eq!((d.log_rq_size, d.no_sq, d.log_rq_stride), (0, false, 7));
}

#[test]
fn devx_set_rule() {
    // A field at bit b, width s sits in dword b/32 at shift 32-s-(b&31).
    let mut b = [0u8; 8];
    set(&mut b, (0x2d, 3), 0b101); // dword 1, shift 32-3-13 = 16
    assert_eq!(u32::from_be_bytes([b[4], b[5], b[6], b[7]]), 0b101 << 16);
    assert_eq!(get(&b, (0x2d, 3)), Some(0b101));
    // Out-of-range writes are ignored, reads are None.
    set(&mut b, (0x100, 8), 0xff);
    assert_eq!(get(&b, (0x100, 8)), None);
}

#[test]
fn create_qp_out_qpn() {
    let mut b = [0u8; 16];
    b[0] = 0; // status
    put(&mut b, 8, 0, 0x00_0123);
    b[8] = 0xaa; // reserved byte above the 24-bit qpn is masked off
    let o = CreateQpOut::decode(&b).unwrap();
    assert_eq!(o.qpn, 0x123);
    assert_eq!(o.status, 0);
    let enc = CreateQpOut {
        status: 0,
        syndrome: 0,
        qpn: 0x123,
    }
    .encode();
    assert_eq!(&enc[8..12], &[0, 0, 0x01, 0x23]);
    assert!(CreateQpOut::decode(&b[..11]).is_err());
}

#[test]
fn modify_and_destroy_qpn_at_dw8() {
    for (opcode, t) in [
        (0x502u16, QpTransition::Rst2Init),
        (0x503, QpTransition::Init2Rtr),
        (0x504, QpTransition::Rtr2Rts),
        (0x505, QpTransition::Rts2Rts),
        (0x507, QpTransition::ToErr),
        (0x50a, QpTransition::ToRst),
    ] {
        let mut b = vec![0u8; MODIFY_QP_IN_BYTES];
        b[0..2].copy_from_slice(&opcode.to_be_bytes());
        put(&mut b, 8, 0, 0x00_4567);
        put(&mut b, 12, 0, 0x1f); // opt_param_mask
        let m = ModifyQpIn::decode(&b).unwrap();
        assert_eq!(m.transition, t);
        assert_eq!(m.qpn, 0x4567);
        assert_eq!(m.path.is_some(), t.has_qpc());
        assert_eq!(decode_command(&b), Ok(QpCommand::Modify(m)));
    }
    assert_eq!(QpTransition::Init2Rtr.target_state(), QpState::Rtr);
    assert_eq!(QpTransition::ToRst.target_state(), QpState::Reset);

    let mut d = [0u8; 16];
    d[0..2].copy_from_slice(&0x501u16.to_be_bytes());
    put(&mut d, 8, 0, 0x00_0099);
    assert_eq!(
        decode_command(&d),
        Ok(QpCommand::Destroy(DestroyQpIn { qpn: 0x99 }))
    );
    assert_eq!(DestroyQpIn { qpn: 0x99 }.encode(), d);
    // A 2ERR is only 16 bytes long.
    let mut e = [0u8; 16];
    e[0..2].copy_from_slice(&0x507u16.to_be_bytes());
    put(&mut e, 8, 0, 5);
    let m = ModifyQpIn::decode(&e).unwrap();
    assert_eq!(
        (m.transition, m.qpn, m.path),
        (QpTransition::ToErr, 5, None)
    );
}

#[test]
fn init2rtr_path_fields() {
    // INIT2RTR with a RoCE path, laid out from mlx5_ifc.h byte positions:
    // qpc@24; mtu dw@32>>29; remote_qpn dw@44; ads@48: rlid dw@52 low 16, grh dw@52 bit 23,
    // src_addr_index dw@56>>16, hop_limit dw@56 low 8, rgid 64..80, vhca_port_num dw@84>>16,
    // rmac_47_32 dw@84 low 16, rmac_31_0 dw@88; next_rcv_psn dw@172.
    let mut b = vec![0u8; MODIFY_QP_IN_BYTES];
    b[0..2].copy_from_slice(&0x503u16.to_be_bytes());
    put(&mut b, 8, 0, 0x11);
    put(&mut b, 32, 29, 5); // 4096
    put(&mut b, 44, 0, 0x00_2222);
    put(&mut b, 52, 23, 1);
    put(&mut b, 52, 0, 0x3333);
    put(&mut b, 56, 16, 3);
    put(&mut b, 56, 0, 64);
    let gid: [u8; 16] = core::array::from_fn(|i| 0xf0 | i as u8);
    b[64..80].copy_from_slice(&gid);
    put(&mut b, 84, 16, 1);
    put(&mut b, 84, 0, 0x0102);
    put(&mut b, 88, 0, 0x0304_0506);
    put(&mut b, 172, 0, 0xab_cdef);
    let m = ModifyQpIn::decode(&b).unwrap();
    let p = m.path.unwrap();
    assert_eq!(p.mtu, 5);
    assert_eq!(p.remote_qpn, 0x2222);
    assert!(p.grh);
    assert_eq!(p.rlid, 0x3333);
    assert_eq!(p.src_addr_index, 3);
    assert_eq!(p.hop_limit, 64);
    assert_eq!(p.rgid, gid);
    assert_eq!(p.port, 1);
    assert_eq!(p.rmac, [1, 2, 3, 4, 5, 6]);
    assert_eq!(p.next_rcv_psn, 0xab_cdef);
    assert_eq!(m.encode().as_slice(), b.as_slice());
}

#[test]
fn other_commands_pass_through() {
    let mut b = [0u8; 8];
    b[0..2].copy_from_slice(&0x100u16.to_be_bytes()); // QUERY_HCA_CAP
    b[6..8].copy_from_slice(&1u16.to_be_bytes());
    assert_eq!(
        decode_command(&b),
        Ok(QpCommand::Other {
            opcode: 0x100,
            op_mod: 1
        })
    );
    assert!(decode_command(&[]).is_err());
    // A truncated CREATE_QP is an error, not a panic.
    assert!(decode_command(&[0x05, 0x00, 0, 0]).is_err());
}

#[test]
fn devx_uar_struct() {
    let mut b = [0u8; 40];
    b[0..8].copy_from_slice(&0x7f00_0000_0800u64.to_ne_bytes());
    b[8..16].copy_from_slice(&0x7f00_0000_0000u64.to_ne_bytes());
    b[16..20].copy_from_slice(&0x1a2bu32.to_ne_bytes());
    b[20..24].copy_from_slice(&[0xee; 4]); // padding is ignored
    b[24..32].copy_from_slice(&0x1000u64.to_ne_bytes());
    b[32..40].copy_from_slice(&0u64.to_ne_bytes());
    let u = DevxUar::from_ne_bytes(&b).unwrap();
    assert_eq!(u.reg_addr, 0x7f00_0000_0800);
    assert_eq!(u.page_id, 0x1a2b);
    assert_eq!(u.mmap_off, 0x1000);
    assert_eq!(u.reg_offset(), 0x800);
    let mut back = u.to_ne_bytes();
    back[20..24].copy_from_slice(&[0xee; 4]);
    assert_eq!(back, b);
    assert!(DevxUar::from_ne_bytes(&b[..39]).is_err());
}

#[test]
fn query_qp_answers_decode_to_their_state() {
    for st in [
        QpcState::Rts,
        QpcState::Error,
        QpcState::SqError,
        QpcState::Reset,
    ] {
        let (i, o) = encode_query_qp(0x1234, st);
        assert_eq!(decode_query_qp(&i, &o), Ok(Some((0x1234, st))));
    }
    let (i, mut o) = encode_query_qp(0x10, QpcState::Error);
    // A refused query says nothing of the QP.
    o[0] = 0x03;
    assert_eq!(decode_query_qp(&i, &o), Ok(None));
    assert!(decode_query_qp(&i, &o[..8]).is_err());
    let (mut i, o) = encode_query_qp(0x10, QpcState::Rts);
    i[0] = 0x05;
    i[1] = 0x00;
    assert!(matches!(
        decode_query_qp(&i, &o),
        Err(DevxError::WrongOpcode { .. })
    ));
    assert!(QpcState::Error.failed() && QpcState::SqError.failed() && !QpcState::Rts.failed());
}
