//! The live protocol between a traced process and `sigmatop`: length-prefixed postcard frames over
//! a Unix stream socket. The first frame is always `Hello` carrying the protocol version; readers
//! refuse other versions with a clear message. Documented in docs/WIRE.md.

use serde::{Deserialize, Serialize};

use crate::event::{ClockSample, EndpointDef, EndpointUpdate, Event, Identity, Snapshot};

/// Bumped on any incompatible change to `Frame`.
pub const PROTOCOL_VERSION: u16 = 1;
/// Frame magic in the hello, to reject a socket that is not sigmatop's.
pub const HELLO_MAGIC: [u8; 8] = *b"sigmatop";
/// Largest frame a reader accepts; a bigger length prefix means a broken or hostile peer.
pub const MAX_FRAME: usize = 16 << 20;

/// One message from a traced process.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Frame {
    Hello {
        magic: [u8; 8],
        version: u16,
        identity: Identity,
    },
    /// Endpoints defined since the last frame (all of them right after the hello).
    Endpoints(Vec<EndpointDef>),
    Updates(Vec<EndpointUpdate>),
    Clock(ClockSample),
    /// Cumulative counters, sent periodically (default every 250 ms).
    Snapshot(Snapshot),
    /// Sampled events (one in `Identity::sample`), at a bounded rate.
    Events(Vec<Event>),
    /// Identity changed (rank learnt late, own addresses added).
    Identity(Identity),
    /// The process is shutting down cleanly; a closed socket without it means it died.
    Bye {
        at_ns: u64,
    },
}

impl Frame {
    pub fn hello(identity: Identity) -> Frame {
        Frame::Hello {
            magic: HELLO_MAGIC,
            version: PROTOCOL_VERSION,
            identity,
        }
    }
}

/// Appends a framed `Frame` (4-byte little-endian length, then postcard) to `out`.
pub fn encode(frame: &Frame, out: &mut Vec<u8>) -> Result<(), postcard::Error> {
    encode_framed(frame, out)
}

/// Appends any value framed as frames are (4-byte little-endian length, then postcard): the live
/// protocol, and the relay protocol that carries its frames.
pub fn encode_framed<T: Serialize>(value: &T, out: &mut Vec<u8>) -> Result<(), postcard::Error> {
    let start = out.len();
    out.extend_from_slice(&[0u8; 4]);
    let body = postcard::to_allocvec(value)?;
    out.extend_from_slice(&body);
    let len = (out.len() - start - 4) as u32;
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
    Ok(())
}

/// Bytes received and not yet consumed, for the incremental decoders of length-prefixed streams
/// (this protocol's and the relay's).
#[derive(Default)]
pub struct StreamBuf {
    buf: Vec<u8>,
    start: usize,
}

impl StreamBuf {
    pub fn push(&mut self, bytes: &[u8]) {
        if self.start > 0 && self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        } else if self.start > (1 << 20) {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// The bytes not yet consumed.
    pub fn avail(&self) -> &[u8] {
        &self.buf[self.start..]
    }

    pub fn consume(&mut self, n: usize) {
        self.start = (self.start + n).min(self.buf.len());
    }

    /// The body of the next whole length-prefixed frame (not consumed), None when more bytes are
    /// needed, Err(length) when the prefix exceeds `max`.
    pub fn frame_body(&self, max: usize) -> Result<Option<&[u8]>, usize> {
        let avail = self.avail();
        if avail.len() < 4 {
            return Ok(None);
        }
        let len = u32::from_le_bytes([avail[0], avail[1], avail[2], avail[3]]) as usize;
        if len > max {
            return Err(len);
        }
        Ok(avail.get(4..4 + len))
    }
}

/// Why a byte stream is not a valid sigmatop stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WireError {
    TooLarge(usize),
    Malformed(String),
    NotSigmatop,
    Version { theirs: u16, ours: u16 },
    NoHello,
}

impl core::fmt::Display for WireError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            WireError::TooLarge(n) => {
                write!(f, "frame of {n} bytes exceeds the {MAX_FRAME}-byte limit")
            }
            WireError::Malformed(e) => write!(f, "undecodable frame: {e}"),
            WireError::NotSigmatop => write!(f, "peer is not a sigmatop preload (bad hello magic)"),
            WireError::Version { theirs, ours } => write!(
                f,
                "protocol version {theirs}, this sigmatop speaks {ours}: use the sigmatop that matches the preload"
            ),
            WireError::NoHello => write!(f, "first frame is not a hello"),
        }
    }
}

/// Incremental frame decoder: push bytes as they arrive, pull whole frames.
#[derive(Default)]
pub struct Decoder {
    buf: StreamBuf,
    seen_hello: bool,
}

impl Decoder {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.push(bytes);
    }

    /// Bytes buffered that do not yet form a whole frame.
    pub fn pending(&self) -> usize {
        self.buf.avail().len()
    }

    /// The next complete frame, None when more bytes are needed, or an error (after which the
    /// stream should be dropped: framing is lost).
    pub fn next_frame(&mut self) -> Result<Option<Frame>, WireError> {
        let body = match self.buf.frame_body(MAX_FRAME) {
            Ok(Some(b)) => b,
            Ok(None) => return Ok(None),
            Err(len) => return Err(WireError::TooLarge(len)),
        };
        let len = body.len();
        let frame: Frame =
            postcard::from_bytes(body).map_err(|e| WireError::Malformed(e.to_string()))?;
        self.buf.consume(4 + len);
        if !self.seen_hello {
            match &frame {
                Frame::Hello { magic, version, .. } => {
                    if *magic != HELLO_MAGIC {
                        return Err(WireError::NotSigmatop);
                    }
                    if *version != PROTOCOL_VERSION {
                        return Err(WireError::Version {
                            theirs: *version,
                            ours: PROTOCOL_VERSION,
                        });
                    }
                    self.seen_hello = true;
                }
                _ => return Err(WireError::NoHello),
            }
        }
        Ok(Some(frame))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_in_pieces() {
        let mut out = Vec::new();
        encode(&Frame::hello(Identity::default()), &mut out).unwrap();
        encode(&Frame::Bye { at_ns: 5 }, &mut out).unwrap();
        let mut d = Decoder::new();
        let mut got = Vec::new();
        for b in out.chunks(3) {
            d.push(b);
            while let Some(f) = d.next_frame().unwrap() {
                got.push(f);
            }
        }
        assert_eq!(got.len(), 2);
        assert_eq!(got[1], Frame::Bye { at_ns: 5 });
    }

    #[test]
    fn rejects_garbage_and_old_versions() {
        let mut d = Decoder::new();
        d.push(&[0xff, 0xff, 0xff, 0x7f]);
        assert!(matches!(d.next_frame(), Err(WireError::TooLarge(_))));
        let mut out = Vec::new();
        encode(
            &Frame::Hello {
                magic: HELLO_MAGIC,
                version: 0,
                identity: Identity::default(),
            },
            &mut out,
        )
        .unwrap();
        let mut d = Decoder::new();
        d.push(&out);
        assert!(matches!(d.next_frame(), Err(WireError::Version { .. })));
        let mut out = Vec::new();
        encode(&Frame::Bye { at_ns: 1 }, &mut out).unwrap();
        let mut d = Decoder::new();
        d.push(&out);
        assert_eq!(d.next_frame(), Err(WireError::NoHello));
    }
}
