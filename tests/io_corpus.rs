//! Replays the fuzz regression corpus of the stream and file readers (fuzz/regressions/{wire,
//! record,theme}/) and a few thousand deterministic pseudo-random and mutated inputs through their
//! harnesses, asserting no panic and an allocation bound proportional to the input.
//!
//! The same `sigmatop::harness_io` / `sigmatop_tui::harness` functions back the cargo-fuzz targets,
//! so this is the fuzzers' safety net where no fuzzer runs (CI, stable toolchains). Seeds come
//! from the real recording in fixtures/demo-moe and from themes/*.toml;
//! `SIGMATOP_WRITE_SEEDS=1 cargo test --test io_corpus -- --ignored` rewrites them.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::path::{Path, PathBuf};

use sigmatop::event::Event;
use sigmatop::harness_io::{
    self, RECORD_BLOCK, RECORD_FIX_CRC, RECORD_PROCESS_FILE, RECORD_RAW, RECORD_THREAD_FILE,
};
use sigmatop::trace::reader::{ProcessRecording, ThreadEventReader};
use sigmatop::trace::{CHUNK_HEADER_LEN, FILE_HEADER_LEN, MAX_CHUNK};
use sigmatop::wire::{self, Frame};

// ---- allocation accounting (per thread: the test harness runs tests in parallel) ----

struct Counting;

thread_local! {
    static LIVE: Cell<usize> = const { Cell::new(0) };
    static PEAK: Cell<usize> = const { Cell::new(0) };
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn note_alloc(size: usize) {
    let _ = LIVE.try_with(|l| {
        let now = l.get().wrapping_add(size);
        l.set(now);
        let _ = PEAK.try_with(|p| p.set(p.get().max(now)));
    });
    let _ = LARGEST.try_with(|m| m.set(m.get().max(size)));
}

fn note_free(size: usize) {
    let _ = LIVE.try_with(|l| l.set(l.get().wrapping_sub(size)));
}

// SAFETY: forwards to the system allocator unchanged; the bookkeeping touches only const
// thread-locals without destructors.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note_alloc(layout.size());
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note_alloc(layout.size());
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        note_free(layout.size());
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note_free(layout.size());
        note_alloc(new_size);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Constant allowance: buffered readers (64 KiB), serde's capped preallocation of a sequence whose
/// declared length is not backed by data (1 MiB), the temp-file paths.
const ALLOC_SLACK: usize = (1 << 20) + (1 << 18);
/// Per input byte: a decoded event or frame is at most a few times larger than its encoding, and a
/// growing Vec doubles.
const ALLOC_PER_BYTE: usize = 64;

/// Runs `run` on `input` and checks that neither one allocation nor the memory held at any time
/// exceeded the bound for its length.
fn run_bounded(target: &str, run: Harness, input: &[u8]) {
    let live0 = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(live0));
    LARGEST.with(|m| m.set(0));
    run(input);
    let peak = PEAK.with(Cell::get).wrapping_sub(live0);
    let largest = LARGEST.with(Cell::get);
    let bound = ALLOC_SLACK + ALLOC_PER_BYTE * input.len();
    assert!(
        largest <= bound && peak <= bound,
        "{target}: an input of {} bytes allocated {largest} bytes at once and held {peak} \
         (bound {bound}); input starts {:02x?}",
        input.len(),
        &input[..input.len().min(32)]
    );
}

// ---- targets and corpus ----

type Harness = fn(&[u8]);

#[cfg(feature = "cli")]
const TARGETS: &[(&str, Harness)] = &[
    ("wire", harness_io::wire),
    ("record", harness_io::record),
    ("relay_merge", harness_io::relay_merge),
    ("theme", sigmatop_tui::harness::theme),
];
#[cfg(not(feature = "cli"))]
const TARGETS: &[(&str, Harness)] = &[
    ("wire", harness_io::wire),
    ("record", harness_io::record),
    ("relay_merge", harness_io::relay_merge),
];

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn regressions_dir(target: &str) -> PathBuf {
    repo().join("fuzz").join("regressions").join(target)
}

/// The process directories of the demo recording, in pid order.
fn demo_dirs() -> Vec<PathBuf> {
    let host = repo().join("fixtures/demo-moe/vm");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&host)
        .unwrap_or_else(|e| panic!("{}: {e}", host.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("process.stp").is_file())
        .collect();
    dirs.sort();
    assert_eq!(dirs.len(), 4, "fixtures/demo-moe changed");
    dirs
}

fn thread_file(dir: &Path) -> (u32, PathBuf) {
    let rec = ProcessRecording::open(dir).unwrap();
    let files = rec.thread_files();
    assert_eq!(files.len(), 1, "{}", dir.display());
    files[0].clone()
}

/// Chunk payloads of a record file (whole chunks after the header).
fn chunk_payloads(file: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut pos = FILE_HEADER_LEN;
    while pos + CHUNK_HEADER_LEN <= file.len() {
        let len = u32::from_le_bytes(file[pos + 4..pos + 8].try_into().unwrap()) as usize;
        out.push(&file[pos + CHUNK_HEADER_LEN..pos + CHUNK_HEADER_LEN + len]);
        pos += CHUNK_HEADER_LEN + len;
    }
    out
}

fn with_mode(mode: u8, body: &[u8]) -> Vec<u8> {
    let mut v = vec![mode];
    v.extend_from_slice(body);
    v
}

/// The live NCCL frame of rank 0 of the committed NCCL fixture (a real 2-rank all_reduce_perf),
/// as the preload's tracker makes it (docs/WIRE.md, version 4).
fn nccl_live() -> sigmatop::nccl::live::NcclLive {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/nccl/all_reduce_np2/rec/softhost0");
    let file = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().ends_with(".stn"))
        .unwrap();
    let d = sigmatop::nccl::format::decode(&std::fs::read(file.path()).unwrap());
    let mut t = sigmatop::nccl::live::Tracker::new();
    for r in &d.recs {
        t.push(r);
    }
    t.live()
}

/// Seeds from the real recording: its frames as a live stream would carry them, its files and
/// chunk payloads, and the built-in themes.
/// Outstanding work of two QPs, one stalled with an error completion counted, as the preload's
/// collector sends it (docs/WIRE.md, version 5).
fn queues() -> sigmatop::queue::Queues {
    use sigmatop::queue::{QueueHealth, QueueState, Queues};
    Queues {
        at_ns: 1_700_000_000_000_000_000,
        queues: vec![
            QueueState {
                ep: 3,
                sq_posted: 1_000,
                sq_completed: 872,
                rq_posted: 512,
                rq_completed: 384,
                sq_oldest_ns: 4_100_000_000,
                rq_oldest_ns: 9_800_000_000,
                sq_stalled_ns: 4_100_000_000,
                last_completion_ns: Some(4_100_000_000),
                ..Default::default()
            },
            QueueState {
                ep: 4,
                sq_posted: 50,
                sq_completed: 50,
                errors: vec![(5, 12), (12, 1)],
                health: QueueHealth::Error,
                unmatched: 1,
                ..Default::default()
            },
        ],
    }
}

fn seeds() -> Vec<(&'static str, String, Vec<u8>)> {
    let mut out = Vec::new();
    for (i, dir) in demo_dirs().iter().enumerate() {
        let rec = ProcessRecording::open(dir).unwrap();
        assert!(rec.problems.is_empty(), "{:?}", rec.problems);
        let (tid, tpath) = thread_file(dir);
        let mut r = ThreadEventReader::open(&tpath, tid).unwrap();
        let events: Vec<Event> = r.next_block().unwrap().iter().take(48).copied().collect();

        // wire: [split, frames...]: the snapshots and the other records of the process, encoded
        // the way the preload streams them.
        let mut frames = vec![
            Frame::hello(rec.identity.clone()),
            Frame::Endpoints(rec.endpoints.clone()),
        ];
        if !rec.updates.is_empty() {
            frames.push(Frame::Updates(rec.updates.clone()));
        }
        frames.extend(rec.clocks.iter().take(2).map(|c| Frame::Clock(*c)));
        let snaps = &rec.snapshots;
        let picked = if i == 0 {
            snaps.iter().collect::<Vec<_>>()
        } else {
            snaps.iter().rev().take(2).collect()
        };
        frames.extend(picked.into_iter().map(|s| Frame::Snapshot(s.clone())));
        frames.push(Frame::Events(events));
        frames.push(Frame::Identity(rec.identity.clone()));
        if i == 0 {
            frames.push(Frame::Nccl(nccl_live()));
            frames.push(Frame::Queues(queues()));
        }
        frames.push(Frame::Bye {
            at_ns: rec.end.map(|e| e.0).unwrap_or(1),
        });
        let mut stream = vec![[0u8, 1, 13, 255][i]];
        for f in &frames {
            wire::encode(f, &mut stream).unwrap();
        }
        out.push(("wire", format!("seed-demo-p{i}-stream"), stream));

        // record: the files as they are, and header-less with checksums fixed by the harness (so
        // that mutations reach the payload decoders).
        let tfile = std::fs::read(&tpath).unwrap();
        let pfile = std::fs::read(dir.join("process.stp")).unwrap();
        let thread_raw = RECORD_THREAD_FILE | RECORD_RAW;
        let process_raw = RECORD_PROCESS_FILE | RECORD_RAW;
        out.push((
            "record",
            format!("seed-demo-p{i}-thread"),
            with_mode(thread_raw, &tfile),
        ));
        out.push((
            "record",
            format!("seed-demo-p{i}-process"),
            with_mode(process_raw, &pfile),
        ));
        if i == 0 {
            let thread_fix = RECORD_THREAD_FILE | RECORD_FIX_CRC;
            let process_fix = RECORD_PROCESS_FILE | RECORD_FIX_CRC;
            out.push((
                "record",
                format!("seed-demo-p{i}-thread-fixcrc"),
                with_mode(thread_fix, &tfile[FILE_HEADER_LEN..]),
            ));
            out.push((
                "record",
                format!("seed-demo-p{i}-process-fixcrc"),
                with_mode(process_fix, &pfile[FILE_HEADER_LEN..]),
            ));
            for (n, p) in chunk_payloads(&tfile).iter().enumerate().step_by(10) {
                out.push((
                    "record",
                    format!("seed-demo-p{i}-block-{n}"),
                    with_mode(RECORD_BLOCK, p),
                ));
            }
        }
    }
    out.extend(relay_seeds());
    for name in ["dark", "light", "mono"] {
        let path = repo().join("themes").join(format!("{name}.toml"));
        let text = std::fs::read(&path).unwrap();
        out.push(("theme", format!("seed-{name}"), text));
    }
    out
}

/// The relay stream of `host` serving the demo processes `dirs` (renamed to that host), as
/// `sigmatop relay` sends it (its encoder, at `qp_every`): the hello line, then each process's
/// frames (at qp-every 2 the second snapshot comes as its totals alone).
fn relay_stream(host: &str, dirs: &[PathBuf], qp_every: u32) -> Vec<u8> {
    use sigmatop::agg::ProcKey;
    use sigmatop::live::LiveSink;
    use sigmatop::relay::{RelayEncoder, RelayHello};
    let mut enc = RelayEncoder::default();
    enc.set_qp_every(qp_every);
    enc.out
        .extend_from_slice(RelayHello::ours(host).line().as_bytes());
    for dir in dirs {
        let rec = ProcessRecording::open(dir).unwrap();
        let mut identity = rec.identity.clone();
        identity.host = host.to_string();
        let key = ProcKey {
            host: host.to_string(),
            pid: identity.pid,
            start_ns: 0,
        };
        let mut frames = vec![
            Frame::hello(identity.clone()),
            Frame::Endpoints(rec.endpoints.clone()),
        ];
        frames.extend(rec.clocks.iter().take(1).map(|c| Frame::Clock(*c)));
        let mut last: Vec<_> = rec.snapshots.iter().rev().take(2).cloned().collect();
        last.reverse();
        frames.extend(last.into_iter().map(Frame::Snapshot));
        for frame in frames {
            enc.frame(&key, frame);
        }
        enc.heartbeat(1);
    }
    enc.message("a socket of uid 7, not you".into());
    enc.out
}

/// relay_merge: `[hosts-1, (host, len, bytes)...]`: two hosts' streams cut in pieces and
/// interleaved (and a third host that sends a banner line first).
fn relay_seeds() -> Vec<(&'static str, String, Vec<u8>)> {
    let dirs = demo_dirs();
    let mut banner = b"Welcome to nc\n".to_vec();
    banner.extend(relay_stream("nc", &dirs[3..4], 1));
    let streams = [
        relay_stream("na", &dirs[0..2], 1),
        relay_stream("nb", &dirs[2..3], 2),
        banner,
    ];
    let mut out = Vec::new();
    for (name, hosts, piece) in [("two-hosts", 2usize, 200usize), ("three-hosts", 3, 97)] {
        let mut input = vec![(hosts - 1) as u8];
        let mut pos = vec![0usize; hosts];
        let mut h = 0;
        while (0..hosts).any(|k| pos[k] < streams[k].len()) {
            let s = &streams[h];
            if pos[h] < s.len() {
                let n = piece.min(s.len() - pos[h]);
                input.push(h as u8);
                input.push(n as u8);
                input.extend_from_slice(&s[pos[h]..pos[h] + n]);
                pos[h] += n;
            }
            h = (h + 1) % hosts;
        }
        out.push(("relay_merge", format!("seed-demo-{name}"), input));
    }
    out
}

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }

    fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next() as u8).collect()
    }

    /// Flips, overwrites, truncates, extends or splices a valid input; byte 0 (the mode or split
    /// byte) is left alone half of the time so most mutants keep their meaning.
    fn mutate(&mut self, mut v: Vec<u8>) -> Vec<u8> {
        let from = usize::from(self.below(2) == 0 && v.len() > 1);
        for _ in 0..=self.below(4) {
            let span = (v.len() - from.min(v.len())) as u64;
            match self.below(6) {
                0 if span > 0 => {
                    let i = from + self.below(span) as usize;
                    v[i] ^= 1 << self.below(8);
                }
                1 if span > 0 => {
                    let i = from + self.below(span) as usize;
                    v[i] = [0, 0xff, 0x80, 0x7f, 1][self.below(5) as usize];
                }
                2 => {
                    let keep = self.below(v.len() as u64 + 1) as usize;
                    v.truncate(keep.max(from));
                }
                3 => {
                    let len = self.below(64) as usize;
                    let extra = self.bytes(len);
                    v.extend_from_slice(&extra);
                }
                4 if span >= 4 => {
                    // A 32-bit length field somewhere gets a large value.
                    let i = from + self.below(span - 3) as usize;
                    let big = [u32::MAX, MAX_CHUNK as u32 + 1, 16 << 20, 1 << 30];
                    let b = big[self.below(4) as usize].to_le_bytes();
                    v[i..i + 4].copy_from_slice(&b);
                }
                _ => {}
            }
        }
        v
    }
}

#[test]
fn regression_corpus_replays_within_bounds() {
    for (target, run) in TARGETS {
        let dir = regressions_dir(target);
        let entries = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e} (the corpus is committed)", dir.display()));
        let mut n = 0;
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_file() {
                let bytes = std::fs::read(&path).unwrap();
                let name = format!("{target} {}", path.display());
                run_bounded(&name, *run, &bytes);
                n += 1;
            }
        }
        assert!(n > 0, "{}: empty corpus", dir.display());
    }
}

#[test]
fn seeds_are_committed() {
    for (target, name, bytes) in seeds() {
        let path = regressions_dir(target).join(format!("{name}.bin"));
        let on_disk = std::fs::read(&path).unwrap_or_default();
        assert!(
            on_disk == bytes,
            "{} is stale: SIGMATOP_WRITE_SEEDS=1 cargo test --test io_corpus -- --ignored",
            path.display()
        );
    }
}

#[test]
#[ignore = "writes fuzz/regressions/*/seed-*.bin; run with SIGMATOP_WRITE_SEEDS=1"]
fn write_seeds() {
    if std::env::var_os("SIGMATOP_WRITE_SEEDS").is_none() {
        return;
    }
    for (target, name, bytes) in seeds() {
        let dir = regressions_dir(target);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("{name}.bin")), bytes).unwrap();
    }
}

#[test]
fn random_inputs_stay_within_bounds() {
    let mut rng = Rng(0x5167_4d41_544f_5022);
    for (target, run) in TARGETS {
        for _ in 0..2000 {
            let len = match rng.below(4) {
                0 => rng.below(16),
                1 => rng.below(300),
                _ => rng.below(4200),
            } as usize;
            let mut input = rng.bytes(len);
            if *target == "theme" && rng.below(2) == 0 {
                // Mostly-text inputs get past the TOML lexer.
                let alphabet = b"[]=\"', \n#.abcdefghijklmnopqrstuvwxyz_0123456789{}";
                for b in &mut input {
                    *b = alphabet[usize::from(*b) % alphabet.len()];
                }
            }
            run_bounded(target, *run, &input);
        }
    }
}

#[test]
fn mutated_seeds_stay_within_bounds() {
    let mut rng = Rng(0x0ddb_a11c_afe0_0002);
    let seeds: Vec<_> = seeds()
        .into_iter()
        .filter(|s| TARGETS.iter().any(|t| t.0 == s.0))
        .collect();
    for _ in 0..3000 {
        let (target, _, bytes) = &seeds[rng.below(seeds.len() as u64) as usize];
        let input = rng.mutate(bytes.clone());
        let run = TARGETS.iter().find(|t| t.0 == *target).unwrap().1;
        run_bounded(target, run, &input);
    }
}

/// The seeds exercise what they are meant to: whole recordings read back without a problem and
/// every frame of the streams decodes.
#[test]
fn seeds_read_back_whole() {
    for (target, name, bytes) in seeds() {
        match target {
            "wire" => {
                let mut d = wire::Decoder::new();
                d.push(&bytes[1..]);
                let mut n = 0;
                while let Some(_f) = d.next_frame().unwrap() {
                    n += 1;
                }
                assert!(n >= 7 && d.pending() == 0, "{name}: {n} frames");
            }
            "relay_merge" => {
                // Every host accepted, every process there: feed the pieces as the harness does.
                let hosts = usize::from(bytes[0] % 4) + 1;
                let names: Vec<String> = (0..hosts).map(|h| format!("h{h}")).collect();
                let mut m = sigmatop::agg::Model::new();
                let mut merge = sigmatop::relay::Merge::new(&names, &mut m);
                let mut rest = &bytes[1..];
                while rest.len() >= 2 {
                    let (h, len) = (usize::from(rest[0]), usize::from(rest[1]));
                    merge.push(h, &rest[2..2 + len], &mut m).unwrap();
                    rest = &rest[2 + len..];
                }
                assert_eq!(m.processes.len(), if hosts == 2 { 3 } else { 4 }, "{name}");
                assert!(m.processes.values().all(|p| p.history.len() == 2), "{name}");
                assert_eq!(m.messages.len(), hosts, "{name}: {:?}", m.messages);
            }
            "record" if bytes[0] & 3 != RECORD_BLOCK => {
                let kind = if bytes[0] & 3 == RECORD_THREAD_FILE {
                    sigmatop::trace::FileKind::Thread
                } else {
                    sigmatop::trace::FileKind::Process
                };
                let file = harness_io::file_bytes(&bytes[1..], bytes[0], kind);
                assert!(file.starts_with(b"SIGMATOP"), "{name}");
                let payloads = chunk_payloads(&file);
                assert!(payloads.len() >= 60, "{name}");
            }
            "record" => {
                let mut evs = Vec::new();
                sigmatop::trace::codec::decode_block(&bytes[1..], 7, &mut evs).unwrap();
                assert!(!evs.is_empty(), "{name}");
            }
            _ => {}
        }
    }
}

/// A chunk header that declares a huge payload must not make the reader allocate it: the reader
/// reports the cut chunk at its offset with memory bounded by the file.
#[test]
fn huge_declared_chunk_is_not_allocated() {
    for len in [MAX_CHUNK as u32, 1 << 20, 16 << 20] {
        let mut body = b"STCK".to_vec();
        body.extend_from_slice(&len.to_le_bytes());
        body.extend_from_slice(&[0; 4]);
        body.extend_from_slice(&[1, 2, 3]);
        for mode in [RECORD_THREAD_FILE, RECORD_PROCESS_FILE] {
            run_bounded("record", harness_io::record, &with_mode(mode, &body));
        }
    }
}
