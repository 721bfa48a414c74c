//! Compact event encoding for record chunks: delta timestamps, varints, and "same as before"
//! elision, so a full-mode event costs a few bytes on disk. Every chunk decodes on its own.

use crate::event::{Event, RawEvent};

/// Errors from decoding an event block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CodecError {
    Truncated { at: usize },
    VarintTooLong { at: usize },
    CountTooLarge { count: u64, max: u64 },
}

impl core::fmt::Display for CodecError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            CodecError::Truncated { at } => {
                write!(f, "event block ends inside an event at byte {at}")
            }
            CodecError::VarintTooLong { at } => write!(f, "malformed varint at byte {at}"),
            CodecError::CountTooLarge { count, max } => {
                write!(
                    f,
                    "event block claims {count} events but can hold at most {max}"
                )
            }
        }
    }
}

pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

#[inline(always)]
pub fn get_varint(buf: &[u8], pos: &mut usize) -> Result<u64, CodecError> {
    // One byte (most of an event's varints) without the loop; the same result either way.
    if let Some(&b) = buf.get(*pos)
        && b < 0x80
    {
        *pos += 1;
        return Ok(b as u64);
    }
    get_varint_loop(buf, pos)
}

fn get_varint_loop(buf: &[u8], pos: &mut usize) -> Result<u64, CodecError> {
    let start = *pos;
    let mut v: u64 = 0;
    for shift in (0..70).step_by(7) {
        let Some(&b) = buf.get(*pos) else {
            return Err(CodecError::Truncated { at: start });
        };
        *pos += 1;
        if shift == 63 && b > 1 {
            return Err(CodecError::VarintTooLong { at: start });
        }
        v |= ((b & 0x7f) as u64) << shift;
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(CodecError::VarintTooLong { at: start })
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}
fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

const H_OP_MASK: u8 = 0x3f;
const H_EXT: u8 = 0x40;
const H_SAME: u8 = 0x80;
const X_FLAGS_MASK: u8 = 0x0f;
const X_ADDR: u8 = 0x10;
const X_AUX: u8 = 0x20;
const X_BIG_OP: u8 = 0x40;
/// The event is older than the previous one (GPU WQEs recovered after later doorbells carry their
/// doorbell's time): Δtsc counts backwards.
const X_TSC_BACK: u8 = 0x80;

/// Running state of the encoder/decoder within one block: the last values seen *for each op
/// code* (interleaved streams such as send / receive / progress each compress against their own
/// previous event), and the last timestamp overall.
#[derive(Default, Clone, Copy)]
struct Prev {
    ep: u32,
    bytes: u64,
    addr: u64,
    aux: u32,
}

struct State {
    tsc: u64,
    per_op: [Prev; 256],
}

impl State {
    fn new(base: u64) -> State {
        State {
            tsc: base,
            per_op: [Prev::default(); 256],
        }
    }
}

/// Encodes one block of events of a single thread (in time order) into `out`.
/// Layout: varint base_tsc, varint count, then per event:
/// header byte (op:6, EXT, SAME ep+bytes as the previous event of this op), varint Δtsc,
/// [ext byte (flags:4, addr changed, aux changed, op ≥ 64), [op byte]], [varint ep, varint bytes],
/// [zigzag Δaddr], [varint aux]. "Previous" values are kept per op code. `aux` is a varint of up
/// to 32 bits (schema 1 wrote at most 16: those blocks decode unchanged).
pub fn encode_block(events: &[RawEvent], out: &mut Vec<u8>) {
    let base = events.first().map(|e| e.tsc).unwrap_or(0);
    put_varint(out, base);
    put_varint(out, events.len() as u64);
    let mut st = State::new(base);
    for e in events {
        let p = st.per_op[e.op as usize];
        let same = e.ep == p.ep && e.bytes == p.bytes;
        let addr_changed = e.addr != p.addr;
        let aux_changed = e.aux != p.aux;
        let big_op = e.op > H_OP_MASK;
        let back = e.tsc < st.tsc;
        let ext = e.flags != 0 || addr_changed || aux_changed || big_op || back;
        let mut h = e.op & H_OP_MASK;
        if ext {
            h |= H_EXT;
        }
        if same {
            h |= H_SAME;
        }
        out.push(h);
        // Δtsc against the latest time so far; an older event sets X_TSC_BACK.
        put_varint(out, e.tsc.abs_diff(st.tsc));
        if ext {
            let mut x = e.flags & X_FLAGS_MASK;
            if addr_changed {
                x |= X_ADDR;
            }
            if aux_changed {
                x |= X_AUX;
            }
            if big_op {
                x |= X_BIG_OP;
            }
            if back {
                x |= X_TSC_BACK;
            }
            out.push(x);
            if big_op {
                out.push(e.op);
            }
        }
        if !same {
            put_varint(out, e.ep as u64);
            put_varint(out, e.bytes);
        }
        if addr_changed {
            put_varint(out, zigzag(e.addr.wrapping_sub(p.addr) as i64));
        }
        if aux_changed {
            put_varint(out, e.aux as u64);
        }
        st.tsc = e.tsc.max(st.tsc);
        st.per_op[e.op as usize] = Prev {
            ep: e.ep,
            bytes: e.bytes,
            addr: e.addr,
            aux: e.aux,
        };
    }
}

#[inline(always)]
fn byte_at(buf: &[u8], pos: &mut usize, at: usize) -> Result<u8, CodecError> {
    let b = *buf.get(*pos).ok_or(CodecError::Truncated { at })?;
    *pos += 1;
    Ok(b)
}

/// Decodes a block produced by `encode_block`, appending to `out`. Never panics; the number of
/// events is bounded by the block length (each event takes at least 2 bytes).
pub fn decode_block(buf: &[u8], tid: u32, out: &mut Vec<Event>) -> Result<(), CodecError> {
    let mut pos = 0usize;
    let base = get_varint(buf, &mut pos)?;
    let count = get_varint(buf, &mut pos)?;
    let max = (buf.len().saturating_sub(pos) / 2) as u64;
    if count > max {
        return Err(CodecError::CountTooLarge { count, max });
    }
    out.reserve(count as usize);
    let mut st = State::new(base);
    for _ in 0..count {
        let at = pos;
        let h = byte_at(buf, &mut pos, at)?;
        let mut op = h & H_OP_MASK;
        let dt = get_varint(buf, &mut pos)?;
        let mut x = 0u8;
        if h & H_EXT != 0 {
            x = byte_at(buf, &mut pos, at)?;
            if x & X_BIG_OP != 0 {
                op = byte_at(buf, &mut pos, at)?;
            }
        }
        let tsc = if x & X_TSC_BACK != 0 {
            st.tsc.wrapping_sub(dt)
        } else {
            st.tsc.wrapping_add(dt)
        };
        let p = st.per_op[op as usize];
        let (ep, bytes) = if h & H_SAME != 0 {
            (p.ep, p.bytes)
        } else {
            let ep = get_varint(buf, &mut pos)?;
            let bytes = get_varint(buf, &mut pos)?;
            (ep as u32, bytes)
        };
        let addr = if x & X_ADDR != 0 {
            p.addr
                .wrapping_add(unzigzag(get_varint(buf, &mut pos)?) as u64)
        } else {
            p.addr
        };
        let aux = if x & X_AUX != 0 {
            get_varint(buf, &mut pos)? as u32
        } else {
            p.aux
        };
        out.push(Event {
            tsc,
            tid,
            ep,
            op,
            flags: x & X_FLAGS_MASK,
            aux,
            bytes,
            addr,
        });
        st.tsc = st.tsc.max(tsc);
        st.per_op[op as usize] = Prev {
            ep,
            bytes,
            addr,
            aux,
        };
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(tsc: u64, ep: u32, op: u8, bytes: u64, addr: u64) -> RawEvent {
        RawEvent {
            tsc,
            bytes,
            addr,
            ep,
            op,
            flags: 0,
            aux: 0,
        }
    }

    #[test]
    fn round_trip_and_size() {
        let mut evs = Vec::new();
        for i in 0..10_000u64 {
            evs.push(ev(1_000_000 + i * 700, 3, 2, 65536, 0xdead));
        }
        evs.push(RawEvent {
            tsc: 99_000_000,
            bytes: 8,
            addr: 0x7f00_0000_1000,
            ep: 70000,
            op: 200,
            flags: 9,
            aux: 77,
        });
        // A GPU WQE's full rkey (32 bits), then a 16-bit one again.
        evs.push(RawEvent {
            tsc: 99_000_100,
            bytes: 64,
            addr: 0x7f00_0000_2000,
            ep: 3,
            op: 49,
            flags: 0,
            aux: 0xdead_beef,
        });
        evs.push(RawEvent {
            tsc: 99_000_200,
            bytes: 64,
            addr: 0x7f00_0000_2000,
            ep: 3,
            op: 49,
            flags: 0,
            aux: 0xbeef,
        });
        let mut buf = Vec::new();
        encode_block(&evs, &mut buf);
        assert!(buf.len() < evs.len() * 6, "{} bytes", buf.len());
        let mut out = Vec::new();
        decode_block(&buf, 5, &mut out).unwrap();
        assert_eq!(out.len(), evs.len());
        for (a, b) in evs.iter().zip(&out) {
            assert_eq!(Event::from_raw(a, 5), *b);
        }
    }

    #[test]
    fn interleaved_ops_compress_against_their_own_history() {
        let mut evs = Vec::new();
        for i in 0..3000u64 {
            evs.push(ev(i * 300, 1, 2, 8, 0x1000)); // send
            evs.push(ev(i * 300 + 100, 2, 4, 8, 0x1000)); // receive on another endpoint
            evs.push(ev(i * 300 + 200, 3, 12, 1, 0)); // progress
        }
        let mut buf = Vec::new();
        encode_block(&evs, &mut buf);
        assert!(
            buf.len() <= evs.len() * 3 + 32,
            "{} bytes for {} events",
            buf.len(),
            evs.len()
        );
        let mut out = Vec::new();
        decode_block(&buf, 1, &mut out).unwrap();
        assert!(
            evs.iter()
                .zip(&out)
                .all(|(a, b)| Event::from_raw(a, 1) == *b)
        );
    }

    #[test]
    fn events_older_than_their_predecessor_keep_their_time() {
        // A poller thread: doorbells at 100, 200, 300, then the WQEs of the first two, stamped
        // with their doorbells' times, recovered later in one batch.
        let evs = vec![
            ev(100, 1, 48, 1, 0),
            ev(200, 1, 48, 1, 0),
            ev(300, 1, 48, 1, 0),
            ev(100, 1, 49, 64, 0x1000),
            ev(200, 1, 49, 64, 0x2000),
            ev(350, 1, 48, 1, 0),
        ];
        let mut buf = Vec::new();
        encode_block(&evs, &mut buf);
        let mut out = Vec::new();
        decode_block(&buf, 1, &mut out).unwrap();
        let times: Vec<u64> = out.iter().map(|e| e.tsc).collect();
        assert_eq!(times, vec![100, 200, 300, 100, 200, 350]);
    }

    #[test]
    fn garbage_never_panics() {
        let mut seed = 0x1234_5678_9abc_def0u64;
        let mut out = Vec::new();
        for len in 0..300 {
            let mut buf = Vec::with_capacity(len);
            for _ in 0..len {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                buf.push(seed as u8);
            }
            out.clear();
            let _ = decode_block(&buf, 0, &mut out);
            assert!(out.len() <= len);
        }
    }
}
