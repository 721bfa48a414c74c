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

pub fn get_varint(buf: &[u8], pos: &mut usize) -> Result<u64, CodecError> {
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

/// Running state of the encoder/decoder within one block.
#[derive(Default, Clone, Copy)]
struct Prev {
    tsc: u64,
    ep: u32,
    bytes: u64,
    addr: u64,
    aux: u16,
}

/// Encodes one block of events of a single thread (in time order) into `out`.
/// Layout: varint base_tsc, varint count, then per event:
/// header byte (op:6, EXT, SAME ep+bytes), varint Δtsc, [varint ep, varint bytes],
/// [ext byte (flags:4, addr changed, aux changed, op≥64), [op byte], [zigzag Δaddr], [varint aux]].
pub fn encode_block(events: &[RawEvent], out: &mut Vec<u8>) {
    let base = events.first().map(|e| e.tsc).unwrap_or(0);
    put_varint(out, base);
    put_varint(out, events.len() as u64);
    let mut p = Prev {
        tsc: base,
        ..Prev::default()
    };
    for e in events {
        let same = e.ep == p.ep && e.bytes == p.bytes;
        let addr_changed = e.addr != p.addr;
        let aux_changed = e.aux != p.aux;
        let big_op = e.op > H_OP_MASK;
        let ext = e.flags != 0 || addr_changed || aux_changed || big_op;
        let mut h = e.op & H_OP_MASK;
        if ext {
            h |= H_EXT;
        }
        if same {
            h |= H_SAME;
        }
        out.push(h);
        // Timestamps within a thread are monotonic; a backwards step (TSC from another core
        // on a broken system) is clamped to 0 rather than wrapping.
        put_varint(out, e.tsc.saturating_sub(p.tsc));
        if !same {
            put_varint(out, e.ep as u64);
            put_varint(out, e.bytes);
        }
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
            out.push(x);
            if big_op {
                out.push(e.op);
            }
            if addr_changed {
                put_varint(out, zigzag(e.addr.wrapping_sub(p.addr) as i64));
            }
            if aux_changed {
                put_varint(out, e.aux as u64);
            }
        }
        p = Prev {
            tsc: e.tsc.max(p.tsc),
            ep: e.ep,
            bytes: e.bytes,
            addr: e.addr,
            aux: e.aux,
        };
    }
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
    let mut p = Prev {
        tsc: base,
        ..Prev::default()
    };
    for _ in 0..count {
        let at = pos;
        let Some(&h) = buf.get(pos) else {
            return Err(CodecError::Truncated { at });
        };
        pos += 1;
        let mut op = h & H_OP_MASK;
        let tsc = p.tsc.wrapping_add(get_varint(buf, &mut pos)?);
        let (ep, bytes) = if h & H_SAME != 0 {
            (p.ep, p.bytes)
        } else {
            let ep = get_varint(buf, &mut pos)?;
            let bytes = get_varint(buf, &mut pos)?;
            (ep as u32, bytes)
        };
        let mut flags = 0u8;
        let mut addr = p.addr;
        let mut aux = p.aux;
        if h & H_EXT != 0 {
            let Some(&x) = buf.get(pos) else {
                return Err(CodecError::Truncated { at });
            };
            pos += 1;
            flags = x & X_FLAGS_MASK;
            if x & X_BIG_OP != 0 {
                let Some(&o) = buf.get(pos) else {
                    return Err(CodecError::Truncated { at });
                };
                pos += 1;
                op = o;
            }
            if x & X_ADDR != 0 {
                addr = p
                    .addr
                    .wrapping_add(unzigzag(get_varint(buf, &mut pos)?) as u64);
            }
            if x & X_AUX != 0 {
                aux = get_varint(buf, &mut pos)? as u16;
            }
        }
        out.push(Event {
            tsc,
            tid,
            ep,
            op,
            flags,
            aux,
            bytes,
            addr,
        });
        p = Prev {
            tsc,
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
