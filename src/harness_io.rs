//! Fuzz entry points for the readers of untrusted streams and files, shared by the cargo-fuzz
//! targets in `fuzz/` (`wire`, `record`) and `tests/io_corpus.rs`: each drives one reader over
//! arbitrary bytes and asserts its invariants (architecture rule 5).
//!
//! A panic here is a bug in a reader (or in an invariant below), never an expected outcome.
//! The record file readers need files: [`record`] writes each input to a private temporary
//! directory (mode 0700, one per thread, removed when the thread ends) and reads it back.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::event::{Event, Identity, RawEvent, TscClock};
use crate::trace::reader::{ProcessRecording, ThreadEventReader};
use crate::trace::{
    CHUNK_HEADER_LEN, CHUNK_MAGIC, FILE_HEADER_LEN, FileKind, MAX_CHUNK, PROCESS_FILE,
    ProcessRecord, codec, file_header, thread_file_name,
};
use crate::wire::{self, Decoder, Frame, MAX_FRAME, WireError};

/// Smallest possible frame on the wire: the 4-byte length and a 1-byte variant tag.
const MIN_FRAME_BYTES: usize = 5;

/// What a [`Decoder`] produced from a stream: the frames, then the error that stopped it (if any).
#[derive(Debug, PartialEq)]
struct WireOutcome {
    frames: Vec<Frame>,
    error: Option<WireError>,
    /// Bytes still buffered at the end (only compared when no error stopped the stream).
    pending: usize,
}

/// xorshift64: the split sizes of one input, deterministic.
fn xorshift(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

/// Pushes `stream` into a fresh decoder, in one piece (`split == None`) or in pieces of
/// `1..=split+1` bytes, pulling every frame after each push until `None` or an error.
fn run_decoder(stream: &[u8], split: Option<u8>) -> WireOutcome {
    let mut d = Decoder::new();
    let mut frames = Vec::new();
    let mut rng = 0x9e37_79b9_7f4a_7c15 ^ u64::from(split.unwrap_or(0));
    let (mut pushed, mut consumed) = (0usize, 0usize);
    let mut rest = stream;
    while !rest.is_empty() {
        let n = match split {
            None => rest.len(),
            Some(s) => (1 + (xorshift(&mut rng) % (u64::from(s) + 1)) as usize).min(rest.len()),
        };
        d.push(&rest[..n]);
        rest = &rest[n..];
        pushed += n;
        loop {
            match d.next_frame() {
                Ok(Some(f)) => {
                    frames.push(f);
                    consumed = pushed - d.pending();
                }
                Ok(None) => break,
                Err(e) => {
                    return WireOutcome {
                        frames,
                        error: Some(e),
                        pending: d.pending(),
                    };
                }
            }
        }
        // Only bytes that were pushed are buffered, and a frame is only taken once all of its
        // bytes arrived (the allocation bound itself is checked by tests/io_corpus.rs).
        assert!(d.pending() <= pushed);
        assert!(frames.len() * MIN_FRAME_BYTES <= consumed);
    }
    WireOutcome {
        frames,
        error: None,
        pending: d.pending(),
    }
}

/// Input: `[split, stream...]`. Decodes the stream in one piece and in pseudo-random pieces of
/// at most `split+1` bytes: both give the same frames and the same error; every frame that
/// decodes re-encodes within [`MAX_FRAME`] and decodes back to itself.
pub fn wire(data: &[u8]) {
    let (split, stream) = match data.split_first() {
        Some((s, rest)) => (*s, rest),
        None => (0, data),
    };
    let whole = run_decoder(stream, None);
    let pieces = run_decoder(stream, Some(split));
    assert_eq!(
        whole.frames, pieces.frames,
        "frames depend on how bytes arrive"
    );
    assert_eq!(
        whole.error, pieces.error,
        "error depends on how bytes arrive"
    );
    if whole.error.is_none() {
        assert_eq!(whole.pending, pieces.pending);
    }
    assert!(whole.frames.len() * MIN_FRAME_BYTES <= stream.len());
    if let Some(WireError::TooLarge(n)) = whole.error {
        assert!(n > MAX_FRAME);
    }

    // Round trip: a valid hello, then the frame, through a fresh decoder.
    let mut hello = Vec::new();
    let encoded_hello = wire::encode(&Frame::hello(Identity::default()), &mut hello);
    assert!(encoded_hello.is_ok());
    for f in &whole.frames {
        let mut buf = hello.clone();
        let encoded = wire::encode(f, &mut buf);
        assert!(
            encoded.is_ok(),
            "a decoded frame does not encode: {encoded:?}"
        );
        assert!(buf.len() - hello.len() - 4 <= MAX_FRAME);
        let mut d = Decoder::new();
        d.push(&buf);
        assert!(matches!(d.next_frame(), Ok(Some(Frame::Hello { .. }))));
        assert_eq!(d.next_frame().as_ref().map(Option::as_ref), Ok(Some(f)));
        assert_eq!(d.pending(), 0);
    }
}

/// `record` input mode byte: which reader (bits 0-1), the file as given (no header prepended),
/// checksums fixed up so that the payload decoders are reached.
pub const RECORD_BLOCK: u8 = 0;
pub const RECORD_THREAD_FILE: u8 = 1;
pub const RECORD_PROCESS_FILE: u8 = 2;
pub const RECORD_RAW: u8 = 4;
pub const RECORD_FIX_CRC: u8 = 8;

/// The thread id given to the readers.
const TID: u32 = 7;

/// Input: `[mode, body...]` (see the `RECORD_*` bits). Mode 0 (and 3) decodes `body` as one
/// event block ([`codec::decode_block`]); 1 and 2 read it as a thread event file or a process
/// file (a valid header prepended unless `RECORD_RAW`) through the real file readers and compare
/// what they return with a reference walk over the same bytes.
pub fn record(data: &[u8]) {
    let (mode, body) = match data.split_first() {
        Some((m, rest)) => (*m, rest),
        None => (0, data),
    };
    match mode & 3 {
        RECORD_THREAD_FILE => thread_file(&file_bytes(body, mode, FileKind::Thread)),
        RECORD_PROCESS_FILE => process_file(&file_bytes(body, mode, FileKind::Process)),
        _ => block(body),
    }
}

/// The record file for `body` under `mode`.
pub fn file_bytes(body: &[u8], mode: u8, kind: FileKind) -> Vec<u8> {
    let mut f = if mode & RECORD_RAW != 0 {
        Vec::with_capacity(body.len())
    } else {
        file_header(kind).to_vec()
    };
    f.extend_from_slice(body);
    if mode & RECORD_FIX_CRC != 0 {
        fix_crcs(&mut f);
    }
    f
}

/// Rewrites the checksum of every whole chunk after the header (magic not checked).
fn fix_crcs(f: &mut [u8]) {
    let mut pos = FILE_HEADER_LEN;
    while let Some(hdr) = f.get(pos..pos + CHUNK_HEADER_LEN) {
        let len = u32::from_le_bytes([hdr[4], hdr[5], hdr[6], hdr[7]]) as usize;
        let start = pos + CHUNK_HEADER_LEN;
        let Some(payload) = f.get(start..start + len) else {
            break;
        };
        let crc = crc32fast::hash(payload);
        f[pos + 8..pos + 12].copy_from_slice(&crc.to_le_bytes());
        pos = start + len;
    }
}

fn to_raw(e: &Event) -> RawEvent {
    RawEvent {
        tsc: e.tsc,
        bytes: e.bytes,
        addr: e.addr,
        ep: e.ep,
        op: e.op,
        flags: e.flags,
        aux: e.aux,
    }
}

/// One event block: output bounded by the input, and re-encoding what decoded gives it back.
fn block(buf: &[u8]) {
    let mut out = Vec::new();
    let res = codec::decode_block(buf, TID, &mut out);
    // Each event takes at least 2 bytes; the decoder never promises more than that.
    assert!(out.len() <= buf.len() / 2);
    assert!(out.capacity() <= buf.len() / 2 + 4);
    if res.is_err() {
        return;
    }
    assert!(out.iter().all(|e| e.tid == TID && e.flags <= 0x0f));
    let raw: Vec<RawEvent> = out.iter().map(to_raw).collect();
    let mut again = Vec::new();
    codec::encode_block(&raw, &mut again);
    let mut back = Vec::new();
    assert_eq!(codec::decode_block(&again, TID, &mut back), Ok(()));
    // Exact, in push order, older events included (they carry a backwards Δtsc).
    assert_eq!(back, out, "event block does not round-trip");
}

/// Where and why a reference walk over a record file stopped.
#[derive(Debug, PartialEq)]
enum Stop {
    /// The header is bad (the reader refuses the file at offset 0).
    Header,
    /// Clean end of file after the last chunk.
    Eof,
    /// The chunk at this offset is bad or undecodable.
    At(u64),
}

/// The schema version a file header names (0 when the file is too short to have one).
fn schema_of(file: &[u8]) -> u16 {
    file.get(10..12)
        .map_or(0, |b| u16::from_le_bytes([b[0], b[1]]))
}

/// Reference chunk walk: calls `each` on every valid chunk payload (with its offset) until it
/// returns false; reports where it stopped. Mirrors docs/FORMAT.md, not the reader's code.
fn walk_chunks(file: &[u8], kind: FileKind, mut each: impl FnMut(u64, &[u8]) -> bool) -> Stop {
    // Magic, format version and kind must match, the schema be one this sigmatop reads (1 or
    // the current one); the reserved bytes 13..16 are not checked.
    let want = file_header(kind);
    if file.len() < FILE_HEADER_LEN
        || file[..10] != want[..10]
        || file[12] != want[12]
        || !matches!(schema_of(file), 1 | crate::event::SCHEMA_VERSION)
    {
        return Stop::Header;
    }
    let mut pos = FILE_HEADER_LEN;
    loop {
        let rest = &file[pos..];
        if rest.is_empty() {
            return Stop::Eof;
        }
        let at = pos as u64;
        let Some(h) = rest.get(..CHUNK_HEADER_LEN) else {
            return Stop::At(at);
        };
        let word = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
        let len = word(4) as usize;
        if word(0) != CHUNK_MAGIC || len > MAX_CHUNK {
            return Stop::At(at);
        }
        let Some(payload) = rest.get(CHUNK_HEADER_LEN..CHUNK_HEADER_LEN + len) else {
            return Stop::At(at);
        };
        if crc32fast::hash(payload) != word(8) || !each(at, payload) {
            return Stop::At(at);
        }
        pos += CHUNK_HEADER_LEN + len;
    }
}

thread_local! {
    static SCRATCH: RefCell<Option<Scratch>> = const { RefCell::new(None) };
}

static SCRATCH_SEQ: AtomicU64 = AtomicU64::new(0);

/// A private directory for the files of one thread's inputs; removed when the thread exits.
struct Scratch {
    root: PathBuf,
}

impl Scratch {
    fn create() -> Scratch {
        let base = std::env::temp_dir();
        for _ in 0..1000 {
            let seq = SCRATCH_SEQ.fetch_add(1, Ordering::Relaxed);
            let root = base.join(format!("sigmatop-fuzz-{}-{seq}", std::process::id()));
            // Not recursive: fails if the name exists, so the directory is ours and 0700.
            if private_dir(&root).is_ok() {
                for sub in ["thread", "process"] {
                    let made = private_dir(&root.join(sub));
                    assert!(made.is_ok(), "{}: {made:?}", root.display());
                }
                return Scratch { root };
            }
        }
        panic!("no private temporary directory under {}", base.display());
    }
}

/// Creates `path` (not its parents) with mode 0700; fails if it exists.
fn private_dir(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new().mode(0o700).create(path)
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// Writes `bytes` to `<scratch>/<sub>/<name>` and runs `f` on the directory.
fn with_file<R>(sub: &str, name: &str, bytes: &[u8], f: impl FnOnce(&Path) -> R) -> R {
    let dir = SCRATCH.with(|s| {
        s.borrow_mut()
            .get_or_insert_with(Scratch::create)
            .root
            .join(sub)
    });
    let written = std::fs::write(dir.join(name), bytes);
    assert!(written.is_ok(), "{}: {written:?}", dir.display());
    f(&dir)
}

/// A thread event file through [`ThreadEventReader`], against the reference walk.
fn thread_file(file: &[u8]) {
    // Reference: the events of each chunk, and where reading stops.
    let mut want: Vec<Vec<Event>> = Vec::new();
    let stop = walk_chunks(file, FileKind::Thread, |_, payload| {
        let mut evs = Vec::new();
        let ok = codec::decode_block(payload, TID, &mut evs).is_ok();
        if ok {
            // Readers see every block in time order (docs/FORMAT.md), ties in push order.
            evs.sort_by_key(|e| e.tsc);
            want.push(evs);
        }
        ok
    });
    let name = thread_file_name(TID);
    with_file("thread", &name, file, |dir| {
        let path = dir.join(&name);
        let mut r = match ThreadEventReader::open(&path, TID) {
            Ok(r) => r,
            Err(p) => {
                assert_eq!(stop, Stop::Header, "reader refused the file: {p}");
                assert_eq!(p.offset, 0);
                return;
            }
        };
        assert_ne!(stop, Stop::Header, "reader accepted a bad header");
        assert_eq!(r.tid(), TID);
        let mut got: Vec<Vec<Event>> = Vec::new();
        while let Some(b) = r.next_block() {
            // Each block is one chunk: at least a chunk header per block, 2 bytes per event.
            assert!(got.len() * CHUNK_HEADER_LEN < file.len());
            got.push(b.to_vec());
        }
        assert!(r.next_block().is_none(), "reader resumed after its end");
        let total: usize = got.iter().map(Vec::len).sum();
        assert!(total <= file.len() / 2);
        assert_eq!(got, want, "reader and reference disagree on the events");
        match (&stop, &r.problem) {
            (Stop::Eof, None) => {}
            (Stop::At(at), Some(p)) => {
                assert_eq!(p.offset, *at, "{p}");
                assert!(p.offset < file.len() as u64);
                assert!(!p.what.is_empty() && !p.what.contains('\n'));
            }
            (s, p) => panic!("reference stopped at {s:?}, reader reported {p:?}"),
        }
    });
}

/// What the reference walk of a process file saw.
#[derive(Default, Debug, PartialEq)]
struct ProcessCounts {
    identity: Option<Identity>,
    endpoints: usize,
    updates: usize,
    clocks: usize,
    snapshots: usize,
    threads: usize,
    thread_ends: usize,
    end: bool,
}

/// A process file through [`ProcessRecording::open`], against the reference walk; every record
/// that decodes round-trips through postcard.
fn process_file(file: &[u8]) {
    let mut want = ProcessCounts::default();
    // A schema-1 file's records are read as schema 1 wrote them (`trace::ProcessRecordV1`).
    let schema = schema_of(file);
    let stop = walk_chunks(file, FileKind::Process, |_, payload| {
        let Ok(rec) = crate::trace::decode_record(schema, payload) else {
            return false;
        };
        let again = postcard::to_allocvec(&rec);
        assert!(again.is_ok(), "a decoded record does not encode");
        let back = again.map(|b| postcard::from_bytes::<ProcessRecord>(&b).ok());
        assert_eq!(
            back.ok().flatten().as_ref(),
            Some(&rec),
            "record round trip"
        );
        match rec {
            ProcessRecord::Identity(id) => want.identity = Some(id),
            ProcessRecord::Endpoint(_) => want.endpoints += 1,
            ProcessRecord::EndpointUpdate(_) => want.updates += 1,
            ProcessRecord::Clock(_) => want.clocks += 1,
            ProcessRecord::Snapshot(_) => want.snapshots += 1,
            ProcessRecord::ThreadStart { .. } => want.threads += 1,
            ProcessRecord::ThreadEnd { .. } => want.thread_ends += 1,
            ProcessRecord::End { .. } => want.end = true,
            ProcessRecord::MemRegion(_) | ProcessRecord::Queues(_) => {}
        }
        true
    });
    with_file("process", PROCESS_FILE, file, |dir| {
        let rec = match ProcessRecording::open(dir) {
            Ok(rec) => rec,
            Err(p) => {
                assert!(p.offset <= file.len() as u64, "{p}");
                assert!(!p.what.contains('\n'), "{p}");
                match stop {
                    Stop::Header => assert_eq!(p.offset, 0, "{p}"),
                    // No identity record: the problem that stopped reading, or the end.
                    Stop::At(at) => assert_eq!(p.offset, at, "{p}"),
                    Stop::Eof => assert_eq!(p.offset, file.len() as u64, "{p}"),
                }
                assert!(stop == Stop::Header || want.identity.is_none(), "{p}");
                return;
            }
        };
        assert_ne!(stop, Stop::Header, "reader accepted a bad header");
        let got = ProcessCounts {
            identity: Some(rec.identity.clone()),
            endpoints: rec.endpoints.len(),
            updates: rec.updates.len(),
            clocks: rec.clocks.len(),
            snapshots: rec.snapshots.len(),
            threads: rec.threads.len(),
            thread_ends: rec.thread_ends.len(),
            end: rec.end.is_some(),
        };
        assert_eq!(got, want, "reader and reference disagree");
        assert_eq!(rec.is_cut(), !want.end);
        match (&stop, rec.problems.as_slice()) {
            (Stop::Eof, []) => {}
            (Stop::At(at), [p]) => {
                assert_eq!(p.offset, *at, "{p}");
                assert!(p.offset < file.len() as u64, "{p}");
                assert!(!p.what.is_empty() && !p.what.contains('\n'), "{p}");
            }
            (s, p) => panic!("reference stopped at {s:?}, reader reported {p:?}"),
        }
        // The clock built from whatever was recorded converts any value without panicking.
        let clock: TscClock = rec.clock();
        let _ = clock.ticks_per_ns();
        for c in rec.clocks.iter().take(4) {
            let _ = (clock.to_mono_ns(c.tsc), clock.to_real_ns(c.tsc ^ 1));
        }
        let _ = (clock.to_mono_ns(0), clock.to_mono_ns(u64::MAX));
        let _ = rec.last_snapshot();
    });
}

/// Fuzz entry point: several relay streams (`sigmatop attach HOST...`) merged into one model,
/// their bytes interleaved as the input says. Input: `[hosts-1 (mod 4)]`, then pieces
/// `[host (mod hosts), length, bytes...]`.
///
/// Invariants: nothing panics; a host whose stream is refused is pushed no more (as `attach`
/// does); and every host that was never refused left exactly the processes it would have left
/// alone: the same keys, identities, endpoint and snapshot counts and end states, as if its whole
/// stream had been pushed at once into a fresh merge. A host's garbage cannot touch another's.
#[cfg(feature = "analysis")]
pub fn relay_merge(data: &[u8]) {
    use crate::agg::{Model, ProcKey};
    use crate::relay::Merge;

    let Some((&n, mut rest)) = data.split_first() else {
        return;
    };
    let hosts = usize::from(n % 4) + 1;
    let names: Vec<String> = (0..hosts).map(|h| format!("h{h}")).collect();
    let mut streams: Vec<Vec<u8>> = vec![Vec::new(); hosts];
    let mut refused = vec![false; hosts];
    let mut model = Model::new();
    let mut merge = Merge::new(&names, &mut model);
    for h in 0..hosts {
        merge.connecting(h, &mut model);
    }
    while rest.len() >= 2 {
        let h = usize::from(rest[0]) % hosts;
        let len = usize::from(rest[1]).min(rest.len() - 2);
        let piece = &rest[2..2 + len];
        rest = &rest[2 + len..];
        if refused[h] {
            continue;
        }
        streams[h].extend_from_slice(piece);
        if let Err(e) = merge.push(h, piece, &mut model) {
            let e = e.reason;
            assert!(!e.is_empty() && !e.contains('\n'), "one line: {e:?}");
            merge.lost(h, &e, &mut model);
            refused[h] = true;
        }
    }
    type Digest = Vec<(ProcKey, String, u32, usize, usize, bool, bool)>;
    let digest = |m: &Model, keys: &dyn Fn(&ProcKey) -> bool| -> Digest {
        m.processes
            .iter()
            .filter(|(k, _)| keys(k))
            .map(|(k, p)| {
                (
                    k.clone(),
                    p.identity.host.clone(),
                    p.identity.pid,
                    p.endpoints.len(),
                    p.history.len(),
                    p.exited,
                    p.said_bye,
                )
            })
            .collect()
    };
    for h in (0..hosts).filter(|h| !refused[*h]) {
        let mut alone = Model::new();
        let mut m = Merge::new(&names[h..=h], &mut alone);
        m.connecting(0, &mut alone);
        let pushed = m.push(0, &streams[h], &mut alone);
        assert!(
            pushed.is_ok(),
            "host {h} was accepted in pieces but refused whole: {pushed:?}"
        );
        let mine = digest(&alone, &|_| true);
        let in_merge = digest(&model, &|k| alone.processes.contains_key(k));
        assert_eq!(mine, in_merge, "host {h}'s processes depend on the others");
        assert_eq!(alone.links[0].host, model.links[h].host);
    }
}
