//! Fuzz entry points shared by the cargo-fuzz targets in `fuzz/` and `tests/decode_corpus.rs`:
//! each drives one decoder family over arbitrary bytes and asserts its invariants.
//!
//! A panic here is a bug in a decoder (or in an invariant below), never an expected outcome.

use super::devx::{
    CreateQpIn, CreateQpOut, DevxUar, ModifyQpIn, QUERY_QP_IN_BYTES, QpCommand, decode_command,
    decode_query_qp, encode_query_qp,
};
use super::doorbell::{DoorbellStep, DoorbellWord, SqTracker};
use super::wqe::{QpType, WalkError, WqeRange, parse_ctrl, parse_wqe, walk_new_wqes};
use super::{MAX_SQ_CNT, WQEBB_BYTES, be};

/// Input: `[log_sq_size, pi_hi, pi_lo, word0[8], word1[8], ...]`. Feeds every 8-byte word to a
/// tracker and checks that ranges stay within the ring and the counters add up.
pub fn doorbell(data: &[u8]) {
    let log = data.first().copied().unwrap_or(0) & 0x0f;
    let start = be::u16(data, 1).unwrap_or(0);
    let sq_cnt = 1u32 << log;
    let Ok(mut t) = SqTracker::with_start(sq_cnt, start) else {
        panic!("sq_cnt {sq_cnt} must be accepted");
    };
    let words = data.get(3..).unwrap_or(&[]);
    let (mut new, mut dup, mut over, mut bad) = (0u64, 0u64, 0u64, 0u64);
    for chunk in words.chunks(8) {
        let Ok(w) = DoorbellWord::decode(chunk) else {
            assert!(chunk.len() < 8);
            continue;
        };
        // Every bit of the word is represented: bytes round-trip exactly.
        assert_eq!(w.to_bytes().as_slice(), chunk);
        let before = t.last_pi();
        match t.on_doorbell(&w) {
            DoorbellStep::New(r) => {
                new += 1;
                assert_eq!(r.start, before);
                assert!(r.wqebbs >= 1 && r.wqebbs <= sq_cnt);
                assert_eq!(u32::from(r.end.wrapping_sub(r.start)), r.wqebbs);
                assert_eq!(t.last_pi(), r.end);
                if let Some(l) = r.last_wqe {
                    assert!(r.contains(l));
                }
            }
            DoorbellStep::Duplicate { .. } => {
                dup += 1;
                assert_eq!(t.last_pi(), before);
            }
            DoorbellStep::Overrun { from, to, .. } => {
                over += 1;
                assert_eq!(from, before);
                assert_eq!(t.last_pi(), to);
            }
            DoorbellStep::Malformed { .. } => {
                bad += 1;
                assert_eq!(t.last_pi(), before);
            }
        }
    }
    let c = t.counters();
    assert_eq!(c.doorbells, new + dup + over + bad);
    assert_eq!(c.gpu_words + c.cpu_words, c.doorbells);
    assert_eq!((c.duplicates, c.overruns, c.malformed), (dup, over, bad));
}

/// Input: `[log_sq_size, qp_type, start_hi, start_lo, n_hi, n_lo, flags, ring...]`. Parses every
/// slot of the ring and walks `[start, start+n)`, checking that the walk is bounded and
/// consistent.
pub fn wqe(data: &[u8]) {
    let hdr = |i: usize| data.get(i).copied().unwrap_or(0);
    // Rings of up to 2^6 WQEBBs (4 KiB) keep inputs small; the code paths do not depend on size.
    let log = hdr(0) % 7;
    let sq_cnt = 1u32 << log;
    let qp_type = match hdr(1) % 3 {
        0 => QpType::Rc,
        1 => QpType::Dci,
        _ => QpType::Ud,
    };
    let start = u16::from_be_bytes([hdr(2), hdr(3)]);
    let n = u32::from(u16::from_be_bytes([hdr(4), hdr(5)]));
    let flags = hdr(6);
    let body = data.get(7..).unwrap_or(&[]);
    let ring_bytes = sq_cnt as usize * WQEBB_BYTES;
    // Flag bit 0: use the bytes as they are (possibly too short); else pad to the ring size.
    let mut padded = [0u8; 64 * WQEBB_BYTES];
    let ring: &[u8] = if flags & 1 != 0 {
        body
    } else {
        let m = body.len().min(ring_bytes);
        padded[..m].copy_from_slice(&body[..m]);
        &padded[..ring_bytes]
    };

    for slot in 0..sq_cnt {
        let ctrl = parse_ctrl(ring, sq_cnt, slot);
        match parse_wqe(ring, sq_cnt, slot, qp_type) {
            Ok(w) => {
                assert!(w.wqebbs >= 1 && u32::from(w.wqebbs) <= sq_cnt);
                assert_eq!(w.slot, slot);
                assert_eq!(ctrl, Ok(w.ctrl));
            }
            Err(_) => {
                // The ctrl may still be fine (segments failed) or not; both are allowed.
            }
        }
    }

    let n = if flags & 2 != 0 { n } else { n % (sq_cnt + 1) };
    let end = start.wrapping_add(n as u16);
    let last_wqe = if flags & 4 != 0 {
        Some(end.wrapping_sub(u16::from(hdr(7) % 4) + 1))
    } else {
        None
    };
    let range = WqeRange {
        start,
        end,
        wqebbs: n,
        last_wqe,
    };
    let out = walk_new_wqes(ring, sq_cnt, &range, qp_type);
    assert!(out.walked <= n);
    // Every WQE, parsed or skipped, consumed at least one WQEBB of the range.
    assert!(out.wqes.len() as u32 + out.unparsable <= out.walked);
    assert_eq!(u32::from(out.cursor.wrapping_sub(start)), out.walked);
    let mut prev: Option<u32> = None;
    for w in &out.wqes {
        // In the range, in ring order.
        let off = u32::from(w.ctrl.wqe_index.wrapping_sub(start));
        assert!(off < n);
        assert!(prev.is_none_or(|p| p < off));
        prev = Some(off);
    }
    if out.error.is_none() && n <= sq_cnt && ring.len() >= ring_bytes {
        assert_eq!(out.walked, n);
        assert_eq!(out.cursor, end);
    }
    if let Some(e) = out.error {
        assert!(e.is_fatal());
    }
    if let Some(e) = out.first_unparsable {
        assert!(matches!(e, WalkError::Unparsable { .. }));
    }
}

/// Input: any bytes as a devx command input (and as an output / a `mlx5dv_devx_uar`). Checks that
/// decoding is total and that encode(decode(x)) decodes to the same value.
pub fn devx_mailbox(data: &[u8]) {
    match decode_command(data) {
        Ok(QpCommand::Create(q)) => {
            assert_eq!(CreateQpIn::decode(&q.encode()), Ok(q));
            let _ = (q.sq_cnt(), q.sq_bytes(), q.sq_offset_in_umem(), q.qp_type());
            assert!(q.sq_cnt() <= MAX_SQ_CNT);
        }
        Ok(QpCommand::Modify(m)) => {
            if m.path.is_some() || !m.transition.has_qpc() {
                assert_eq!(ModifyQpIn::decode(&m.encode()), Ok(m));
            }
        }
        Ok(QpCommand::Destroy(d)) => {
            assert_eq!(decode_command(&d.encode()), Ok(QpCommand::Destroy(d)));
        }
        Ok(QpCommand::Other { .. }) | Err(_) => {}
    }
    let _ = CreateQpIn::decode(data);
    let _ = ModifyQpIn::decode(data);
    if let Ok(o) = CreateQpOut::decode(data) {
        assert_eq!(CreateQpOut::decode(&o.encode()), Ok(o));
    }
    // A QUERY_QP and its answer: the input is the data's first 16 bytes, the answer the rest.
    if data.len() >= QUERY_QP_IN_BYTES {
        let (i, o) = data.split_at(QUERY_QP_IN_BYTES);
        if let Ok(Some((qpn, st))) = decode_query_qp(i, o) {
            let (i2, o2) = encode_query_qp(qpn, st);
            assert_eq!(decode_query_qp(&i2, &o2), Ok(Some((qpn & 0xff_ffff, st))));
        }
    }
    if let Ok(u) = DevxUar::from_ne_bytes(data) {
        assert_eq!(DevxUar::from_ne_bytes(&u.to_ne_bytes()), Ok(u));
        let _ = u.reg_offset();
    }
}
