//! Where the encoders write: the staged output (large writes, first error kept) and a cursor
//! over a byte slice sized beforehand, with varint lengths.

use std::io::{self, Write};

/// Output is written in pieces of about this size.
const STAGED_BYTES: usize = 256 << 10;

/// The output: packets are gathered in `buf[..len]` and handed to `out` in large writes; the
/// first write error is kept and everything after it dropped.
pub(super) struct Stage<W: Write> {
    pub(super) out: W,
    pub(super) buf: Box<[u8]>,
    pub(super) len: usize,
    pub(super) error: Option<io::Error>,
}

impl<W: Write> Stage<W> {
    pub(super) fn new(out: W) -> Self {
        Stage {
            out,
            buf: vec![0; STAGED_BYTES].into_boxed_slice(),
            len: 0,
            error: None,
        }
    }

    pub(super) fn flush(&mut self) {
        if self.error.is_none()
            && self.len > 0
            && let Err(e) = self.out.write_all(&self.buf[..self.len])
        {
            self.error = Some(e);
        }
        self.len = 0;
    }

    /// Copies bytes in; a piece of 16 KiB or more goes straight to the output.
    pub(super) fn put(&mut self, mut b: &[u8]) {
        if b.len() >= 16 << 10 {
            self.flush();
            if self.error.is_none()
                && let Err(e) = self.out.write_all(b)
            {
                self.error = Some(e);
            }
            return;
        }
        while !b.is_empty() {
            if self.len == self.buf.len() {
                self.flush();
            }
            let n = b.len().min(self.buf.len() - self.len);
            self.buf[self.len..self.len + n].copy_from_slice(&b[..n]);
            self.len += n;
            b = &b[n..];
        }
    }
}

/// Bytes of a varint, by the value's leading zeros.
const VLEN: [u8; 65] = {
    let mut t = [0u8; 65];
    let mut lz = 0;
    while lz <= 64 {
        let bits = 64 - lz;
        t[lz] = if bits == 0 { 1 } else { bits.div_ceil(7) as u8 };
        lz += 1;
    }
    t
};

#[inline(always)]
pub(super) fn vlen(v: u64) -> usize {
    VLEN[v.leading_zeros() as usize] as usize
}

/// The most one encoder writes through a `Cursor` (a plain instant is at most ~370 bytes,
/// `encode::write_plain`), a power of two; and the room a cursor's buffer has: 8 bytes more.
pub(super) const CURSOR_MAX: usize = 512;
pub(super) const CURSOR_ROOM: usize = CURSOR_MAX + 8;
const MASK: usize = CURSOR_MAX - 1;

/// Writes at the front of a buffer of `CURSOR_ROOM` bytes (a window chunk's or the staging
/// buffer's free part, or a buffer on the stack). The `wide` writers store 8 bytes at a time and
/// move on by fewer: they need 8 bytes of room past what they write (scratch that later writes
/// cover). Positions are taken modulo `CURSOR_MAX`, which an encoder never reaches (it checks
/// its end), so that no store needs a bounds check: every index is below `CURSOR_ROOM` by type.
pub(super) struct Cursor<'a> {
    pub(super) buf: &'a mut [u8; CURSOR_ROOM],
    pub(super) n: usize,
}

impl<'a> Cursor<'a> {
    /// A cursor at the front of `dst` (at least `CURSOR_ROOM` long).
    #[inline(always)]
    pub(super) fn at_front(dst: &'a mut [u8]) -> Cursor<'a> {
        let buf: &mut [u8; CURSOR_ROOM] = (&mut dst[..CURSOR_ROOM])
            .try_into()
            .expect("a cursor's room");
        Cursor { buf, n: 0 }
    }
}

/// The continuation bits of an 8-byte varint group.
const CONT: u64 = 0x8080_8080_8080_8080;

/// The low 56 bits of `v` in 7-bit groups, one per byte (little endian), high bits clear: a
/// varint's payload bits in three steps (28, 14, then 7 bits apart).
#[inline(always)]
fn spread7(v: u64) -> u64 {
    let x = v & ((1 << 56) - 1);
    let x = (x & 0x0fff_ffff) | ((x & 0x00ff_ffff_f000_0000) << 4);
    let x = (x & 0x0000_3fff_0000_3fff) | ((x & 0x0fff_c000_0fff_c000) << 2);
    (x & 0x007f_007f_007f_007f) | ((x & 0x3f80_3f80_3f80_3f80) << 1)
}

impl Cursor<'_> {
    #[inline(always)]
    pub(super) fn put(&mut self, b: &[u8]) {
        self.buf[self.n..self.n + b.len()].copy_from_slice(b);
        self.n += b.len();
    }
    /// A varint, written byte by byte (exactly its own bytes: safe in the middle of a packet).
    #[inline(always)]
    pub(super) fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.buf[self.n & MASK] = (v as u8) | 0x80;
            self.n += 1;
            v >>= 7;
        }
        self.buf[self.n & MASK] = v as u8;
        self.n += 1;
    }
    /// The first `len` (≤ 8) little-endian bytes of `x`, storing all 8.
    #[inline(always)]
    pub(super) fn wide(&mut self, x: u64, len: usize) {
        let i = self.n & MASK;
        self.buf[i..i + 8].copy_from_slice(&x.to_le_bytes());
        self.n += len;
    }
    /// A varint of `len` = `vlen(v)` bytes, stored 8 bytes at a time (see `Cursor`).
    #[inline(always)]
    pub(super) fn varint_wide_len(&mut self, v: u64, len: usize) {
        if len == 1 {
            self.buf[self.n & MASK] = v as u8;
            self.n += 1;
        } else if len <= 8 {
            self.wide(spread7(v) | (CONT & ((1u64 << (8 * (len - 1))) - 1)), len);
        } else {
            self.wide(spread7(v) | CONT, 8);
            // The top 8 bits: one byte below 128, else two.
            let hi = v >> 56;
            let i = self.n & MASK;
            self.buf[i] = hi as u8 | if len == 10 { 0x80 } else { 0 };
            self.buf[i + 1] = 1;
            self.n += len - 8;
        }
    }
    /// A varint, stored 8 bytes at a time (see `Cursor`).
    #[inline(always)]
    pub(super) fn varint_wide(&mut self, v: u64) {
        self.varint_wide_len(v, vlen(v));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The wide varint writes the same bytes as the byte-by-byte one, for every length.
    #[test]
    fn wide_varints_are_varints() {
        let mut vals = vec![0u64, 1, 0x7f, 0x80, 0x3fff, 0x4000, u64::MAX, u64::MAX >> 1];
        for b in 0..64 {
            vals.extend([
                1u64 << b,
                (1u64 << b) - 1,
                (1u64 << b) + 1,
                (1u64 << b) | 0x5555,
            ]);
        }
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            vals.push(x >> (x % 64));
        }
        for v in vals {
            let (mut a, mut b) = ([0xeeu8; CURSOR_ROOM], [0xeeu8; CURSOR_ROOM]);
            let mut ca = Cursor { buf: &mut a, n: 3 };
            ca.varint(v);
            let na = ca.n;
            let mut cb = Cursor { buf: &mut b, n: 3 };
            cb.varint_wide(v);
            assert_eq!(cb.n, na, "{v:#x}: length");
            assert_eq!(a[..na], b[..na], "{v:#x}");
            assert_eq!(na - 3, vlen(v), "{v:#x}: vlen");
        }
    }
}
