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

/// Writes at the front of a byte slice (the staging buffer's free part, sized beforehand).
pub(super) struct Cursor<'a> {
    pub(super) buf: &'a mut [u8],
    pub(super) n: usize,
}

impl Cursor<'_> {
    #[inline(always)]
    pub(super) fn put(&mut self, b: &[u8]) {
        self.buf[self.n..self.n + b.len()].copy_from_slice(b);
        self.n += b.len();
    }
    #[inline(always)]
    pub(super) fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.buf[self.n] = (v as u8) | 0x80;
            self.n += 1;
            v >>= 7;
        }
        self.buf[self.n] = v as u8;
        self.n += 1;
    }
}
