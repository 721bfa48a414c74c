//! A minimal protobuf encoder: varints, fixed64, length-delimited fields and nested messages
//! written in place (the length prefix is patched after the body). Enough for Perfetto's
//! `TracePacket`s; field numbers are in `perfetto/fields.rs`.

/// Wire types.
pub const VARINT: u32 = 0;
pub const FIXED64: u32 = 1;
pub const LEN: u32 = 2;

#[inline]
pub fn varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

#[inline]
pub fn varint_len(mut v: u64) -> usize {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

#[inline]
pub fn key(buf: &mut Vec<u8>, field: u32, wire: u32) {
    varint(buf, ((field as u64) << 3) | wire as u64);
}

#[inline]
pub fn uint(buf: &mut Vec<u8>, field: u32, v: u64) {
    key(buf, field, VARINT);
    varint(buf, v);
}

/// int64 (two's complement as a 10-byte varint when negative, as protobuf does).
#[inline]
pub fn int(buf: &mut Vec<u8>, field: u32, v: i64) {
    key(buf, field, VARINT);
    varint(buf, v as u64);
}

#[inline]
pub fn fixed64(buf: &mut Vec<u8>, field: u32, v: u64) {
    key(buf, field, FIXED64);
    buf.extend_from_slice(&v.to_le_bytes());
}

#[inline]
pub fn bytes(buf: &mut Vec<u8>, field: u32, b: &[u8]) {
    key(buf, field, LEN);
    varint(buf, b.len() as u64);
    buf.extend_from_slice(b);
}

#[inline]
pub fn string(buf: &mut Vec<u8>, field: u32, s: &str) {
    bytes(buf, field, s.as_bytes());
}

/// Starts a nested message: writes the key and a one-byte length placeholder. Returns the
/// position to hand to `end`.
#[inline]
pub fn begin(buf: &mut Vec<u8>, field: u32) -> usize {
    key(buf, field, LEN);
    buf.push(0);
    buf.len()
}

/// Ends a nested message started at `start`: patches its length, moving the body when the
/// length needs more than one byte.
#[inline]
pub fn end(buf: &mut Vec<u8>, start: usize) {
    let len = buf.len() - start;
    if len < 0x80 {
        buf[start - 1] = len as u8;
        return;
    }
    let n = varint_len(len as u64);
    let mut pre = Vec::with_capacity(n);
    varint(&mut pre, len as u64);
    // Replace the placeholder byte with the full varint.
    buf.splice(start - 1..start, pre);
}

/// Reads a varint (for tests and the reader-side checks).
pub fn read_varint(b: &[u8], pos: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *b.get(*pos)?;
        *pos += 1;
        v |= ((byte & 0x7f) as u64) << shift;
        if byte < 0x80 {
            return Some(v);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_like_protobuf() {
        let mut b = Vec::new();
        uint(&mut b, 1, 150);
        assert_eq!(b, [0x08, 0x96, 0x01]);
        b.clear();
        string(&mut b, 2, "testing");
        assert_eq!(b, [0x12, 0x07, b't', b'e', b's', b't', b'i', b'n', b'g']);
        b.clear();
        fixed64(&mut b, 47, 1);
        assert_eq!(&b[..2], &[0xF9, 0x02]);
        b.clear();
        uint(&mut b, 58, 1);
        assert_eq!(b, [0xD0, 0x03, 0x01]);
        b.clear();
        int(&mut b, 4, -1);
        assert_eq!(b.len(), 11);
    }

    #[test]
    fn nested_lengths_patch() {
        for body in [0usize, 1, 127, 128, 300, 20000] {
            let mut b = vec![0xAA];
            let s = begin(&mut b, 3);
            b.extend(std::iter::repeat_n(7u8, body));
            end(&mut b, s);
            let mut pos = 2;
            assert_eq!(b[1], 0x1A);
            assert_eq!(read_varint(&b, &mut pos), Some(body as u64));
            assert_eq!(b.len() - pos, body);
        }
    }
}
