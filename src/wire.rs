//! The live protocol between a traced process and `sigmatop`: length-prefixed postcard frames over
//! a Unix stream socket. The first frame is always `Hello` carrying the protocol version; readers
//! refuse other versions with a clear message. Documented in docs/WIRE.md.

use serde::{Deserialize, Serialize};

use crate::event::{ClockSample, EndpointDef, EndpointUpdate, Event, Identity, Snapshot};

/// Bumped on any incompatible change to `Frame`. 2: snapshots carry refusals, posted receives
/// and the layers used (`event::SCHEMA_VERSION` 2). 3: `Missed`, what a slow reader was not
/// sent. 4: `Nccl`, the NCCL plugin's collectives. Streams of versions 1 to 3 are still read (2
/// is 3 without `Missed`, 3 is 4 without `Nccl`). 5: `Queues`, outstanding work per QP (4 is 5
/// without it). 6: `NcclCalls`, the NCCL calls as the user made them (5 is 6 without it).
pub const PROTOCOL_VERSION: u16 = 6;
/// The oldest live protocol version a reader accepts.
pub const OLDEST_READ: u16 = 1;
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
    /// What this reader was not sent because it read too slowly (its queue in the traced process
    /// was full), cumulative since it connected: `frames` frames, of which `events` sampled
    /// events were in `Events` frames. Sent before the next frame that is queued for it.
    Missed {
        frames: u64,
        events: u64,
    },
    /// (version 4) The NCCL plugin's collectives per communicator, cumulative
    /// (`nccl::live::NcclLive`), every interval while NCCL profiles the process.
    Nccl(crate::nccl::live::NcclLive),
    /// (version 5) Outstanding work per verbs QP and SRQ (`queue::Queues`), every interval after
    /// the snapshot, once the process posted on one.
    Queues(crate::queue::Queues),
    /// (version 5) Where the NCCL plugin's communicators wait (`nccl::live::NcclWaits`): their
    /// point-to-point calls and the proxy operations of each one's oldest open call, every
    /// interval after `Nccl`.
    NcclWaits(crate::nccl::live::NcclWaits),
    /// (version 6) The NCCL plugin's calls as the user made them (AlltoAll, Gather, Scatter,
    /// Group: made of point-to-point parts), by message size, and the kernels' GPU starts
    /// (`nccl::live::NcclCalls`), every interval after `NcclWaits`.
    NcclCalls(crate::nccl::live::NcclCalls),
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

/// `Frame` as protocol version 1 sent it (its snapshots had fewer counters): the same variants
/// in the same order; the hello is the same in both.
#[derive(Deserialize)]
enum FrameV1 {
    Hello {
        magic: [u8; 8],
        version: u16,
        identity: Identity,
    },
    Endpoints(Vec<EndpointDef>),
    Updates(Vec<EndpointUpdate>),
    Clock(ClockSample),
    Snapshot(crate::event::v1::Snapshot),
    Events(Vec<Event>),
    Identity(Identity),
    Bye {
        at_ns: u64,
    },
}

impl From<FrameV1> for Frame {
    fn from(f: FrameV1) -> Frame {
        match f {
            FrameV1::Hello {
                magic,
                version,
                identity,
            } => Frame::Hello {
                magic,
                version,
                identity,
            },
            FrameV1::Endpoints(d) => Frame::Endpoints(d),
            FrameV1::Updates(u) => Frame::Updates(u),
            FrameV1::Clock(c) => Frame::Clock(c),
            FrameV1::Snapshot(s) => Frame::Snapshot(s.into()),
            FrameV1::Events(e) => Frame::Events(e),
            FrameV1::Identity(i) => Frame::Identity(i),
            FrameV1::Bye { at_ns } => Frame::Bye { at_ns },
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
    /// The protocol version the hello announced (frames after it are decoded as that version).
    version: u16,
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
        let frame: Frame = if self.seen_hello && self.version == 1 {
            postcard::from_bytes::<FrameV1>(body).map(Into::into)
        } else {
            postcard::from_bytes(body)
        }
        .map_err(|e| WireError::Malformed(e.to_string()))?;
        self.buf.consume(4 + len);
        if !self.seen_hello {
            match &frame {
                Frame::Hello { magic, version, .. } => {
                    if *magic != HELLO_MAGIC {
                        return Err(WireError::NotSigmatop);
                    }
                    if !(OLDEST_READ..=PROTOCOL_VERSION).contains(version) {
                        return Err(WireError::Version {
                            theirs: *version,
                            ours: PROTOCOL_VERSION,
                        });
                    }
                    self.version = *version;
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

    /// A version-2 stream (no `Missed` frames) reads as it was; `Missed`, the last variant, keeps
    /// the indices of the others, and round-trips.
    #[test]
    fn reads_a_version_2_stream_and_missed_round_trips() {
        let mut out = Vec::new();
        encode(
            &Frame::Hello {
                magic: HELLO_MAGIC,
                version: 2,
                identity: Identity::default(),
            },
            &mut out,
        )
        .unwrap();
        encode(&Frame::Bye { at_ns: 9 }, &mut out).unwrap();
        // The Bye of version 2 is variant 7, as in version 3.
        assert_eq!(out[out.len() - 2], 7);
        encode(
            &Frame::Missed {
                frames: 38,
                events: 77_824,
            },
            &mut out,
        )
        .unwrap();
        let mut d = Decoder::new();
        d.push(&out);
        let mut got = Vec::new();
        while let Some(f) = d.next_frame().unwrap() {
            got.push(f);
        }
        assert_eq!(got.len(), 3);
        assert_eq!(got[1], Frame::Bye { at_ns: 9 });
        assert_eq!(
            got[2],
            Frame::Missed {
                frames: 38,
                events: 77_824
            }
        );
    }

    /// A version-1 stream (as a preload of schema 1 sent it: its snapshot counts had five
    /// fields) reads back with nothing refused or posted.
    #[test]
    fn reads_a_version_1_stream() {
        #[derive(Serialize)]
        struct OpCountV1 {
            ep: u32,
            op: u8,
            ops: u64,
            bytes: u64,
            errors: u64,
        }
        #[derive(Serialize)]
        struct SnapshotV1 {
            at_ns: u64,
            seq: u64,
            counts: Vec<OpCountV1>,
            drops: crate::event::DropCounters,
            events: u64,
            threads: u32,
        }
        #[derive(Serialize)]
        enum V1 {
            Hello {
                magic: [u8; 8],
                version: u16,
                identity: Identity,
            },
            _Endpoints,
            _Updates,
            _Clock,
            Snapshot(SnapshotV1),
            Events(Vec<Event>),
        }
        let mut out = Vec::new();
        for f in [
            V1::Hello {
                magic: HELLO_MAGIC,
                version: 1,
                identity: Identity::default(),
            },
            V1::Snapshot(SnapshotV1 {
                at_ns: 7,
                seq: 3,
                counts: vec![OpCountV1 {
                    ep: 2,
                    op: 4,
                    ops: 10,
                    bytes: 640,
                    errors: 1,
                }],
                drops: Default::default(),
                events: 11,
                threads: 1,
            }),
            V1::Events(vec![Event {
                aux: 0xbeef,
                ..Default::default()
            }]),
        ] {
            let body = postcard::to_allocvec(&f).unwrap();
            out.extend_from_slice(&(body.len() as u32).to_le_bytes());
            out.extend_from_slice(&body);
        }
        let mut d = Decoder::new();
        d.push(&out);
        assert!(matches!(
            d.next_frame(),
            Ok(Some(Frame::Hello { version: 1, .. }))
        ));
        let Ok(Some(Frame::Snapshot(s))) = d.next_frame() else {
            panic!("a version-1 snapshot");
        };
        assert_eq!((s.at_ns, s.seq, s.events, s.layers_used), (7, 3, 11, 0));
        assert_eq!(
            s.counts,
            vec![crate::event::OpCount {
                ep: 2,
                op: 4,
                ops: 10,
                bytes: 640,
                errors: 1,
                ..Default::default()
            }]
        );
        let Ok(Some(Frame::Events(e))) = d.next_frame() else {
            panic!("version-1 events");
        };
        assert_eq!(e[0].aux, 0xbeef);
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
