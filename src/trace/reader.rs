//! Reads record directories back: process files whole (they are small), thread event files as a
//! stream of chunks with bounded memory. Corruption or truncation stops that file at the last good
//! chunk and is reported with the file and byte offset; everything before it is kept.

use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::{Path, PathBuf};

use super::{
    CHUNK_HEADER_LEN, CHUNK_MAGIC, FILE_HEADER_LEN, FILE_MAGIC, FORMAT_VERSION, FileKind,
    MAX_CHUNK, PROCESS_FILE, ProcessRecord, codec,
};
use crate::event::{
    ClockSample, DropCounters, EndpointDef, EndpointUpdate, Event, Identity, Snapshot, TscClock,
};

/// Something in a record that could not be read, with where it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub file: PathBuf,
    pub offset: u64,
    pub what: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: at byte {}: {}",
            self.file.display(),
            self.offset,
            self.what
        )
    }
}

/// Reads and checks the 16-byte file header; returns the schema version of its payload (the
/// current one, or version 1, which is read through `event::v1`).
fn check_header(buf: &[u8], want: FileKind) -> Result<u16, String> {
    if buf.len() < FILE_HEADER_LEN {
        return Err(format!(
            "file is {} bytes, shorter than the {FILE_HEADER_LEN}-byte header",
            buf.len()
        ));
    }
    if buf[..8] != FILE_MAGIC {
        return Err("not a sigmatop record file (bad magic)".into());
    }
    let ver = u16::from_le_bytes([buf[8], buf[9]]);
    if ver != FORMAT_VERSION {
        return Err(format!(
            "record format version {ver}, this sigmatop reads version {FORMAT_VERSION}: use a matching sigmatop"
        ));
    }
    let schema = u16::from_le_bytes([buf[10], buf[11]]);
    if schema != crate::event::SCHEMA_VERSION && schema != 1 {
        return Err(format!(
            "event schema version {schema}, this sigmatop reads versions 1 to {}",
            crate::event::SCHEMA_VERSION
        ));
    }
    if buf[12] != want as u8 {
        return Err(format!(
            "file kind {} where {} was expected",
            buf[12], want as u8
        ));
    }
    Ok(schema)
}

/// Outcome of reading one chunk header + payload.
enum Next {
    Chunk(Vec<u8>),
    Eof,
    Bad(String),
}

fn read_exact_or_eof(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

fn next_chunk(r: &mut impl Read, payload: Vec<u8>) -> Next {
    let mut hdr = [0u8; CHUNK_HEADER_LEN];
    match read_exact_or_eof(r, &mut hdr) {
        Ok(0) => return Next::Eof,
        Ok(n) if n < CHUNK_HEADER_LEN => {
            return Next::Bad(format!(
                "cut inside a chunk header ({n} of {CHUNK_HEADER_LEN} bytes)"
            ));
        }
        Ok(_) => {}
        Err(e) => return Next::Bad(format!("read error: {e}")),
    }
    let magic = u32::from_le_bytes([hdr[0], hdr[1], hdr[2], hdr[3]]);
    if magic != CHUNK_MAGIC {
        return Next::Bad("bad chunk magic (corrupt or not a chunk boundary)".into());
    }
    let len = u32::from_le_bytes([hdr[4], hdr[5], hdr[6], hdr[7]]) as usize;
    let crc = u32::from_le_bytes([hdr[8], hdr[9], hdr[10], hdr[11]]);
    if len > MAX_CHUNK {
        return Next::Bad(format!(
            "chunk length {len} exceeds the {MAX_CHUNK}-byte limit"
        ));
    }
    let mut payload = payload;
    payload.clear();
    // Grow with the bytes that actually arrive: a corrupt length in a short file must not
    // allocate up to MAX_CHUNK (found by fuzzing, tests/io_corpus.rs).
    match r.by_ref().take(len as u64).read_to_end(&mut payload) {
        Ok(n) if n < len => {
            return Next::Bad(format!("cut inside a chunk ({n} of {len} payload bytes)"));
        }
        Ok(_) => {}
        Err(e) => return Next::Bad(format!("read error: {e}")),
    }
    if crc32fast::hash(&payload) != crc {
        return Next::Bad("chunk checksum mismatch".into());
    }
    Next::Chunk(payload)
}

/// Everything in one process's record, except its events (see `ThreadEventReader`).
#[derive(Clone, Debug, Default)]
pub struct ProcessRecording {
    pub dir: PathBuf,
    pub identity: Identity,
    pub endpoints: Vec<EndpointDef>,
    pub updates: Vec<EndpointUpdate>,
    pub clocks: Vec<ClockSample>,
    pub snapshots: Vec<Snapshot>,
    /// (tid, thread name) for every thread that produced events.
    pub threads: Vec<(u32, String)>,
    /// tids whose event files were closed cleanly, with the number of events written.
    pub thread_ends: Vec<(u32, u64)>,
    /// Present when the process shut down cleanly.
    pub end: Option<(u64, DropCounters)>,
    /// Where reading stopped early.
    pub problems: Vec<Problem>,
    /// Memory regions registered and deregistered, in record order.
    pub mrs: Vec<crate::event::MemRegion>,
    /// Outstanding work per QP, one entry per interval that had any (`queue::Queues`).
    pub queues: Vec<crate::queue::Queues>,
    /// The schema version it was written with (`event::SCHEMA_VERSION` or an older one: 1 cut
    /// an event's `aux` to 16 bits and counted no refusals or posted receives).
    pub schema: u16,
    /// How it ended, as its traced parent reaped it (`<host>/<pid>.exit` beside its directory:
    /// killed by a signal or a non-zero exit; preload/src/reap.rs). The newest directory of a
    /// pid (an exec makes `<pid>.1`) gets it.
    pub reaped: Option<crate::event::ProcessEnd>,
    /// A process a traced rank of the same host forked (with or without an exec: it inherited
    /// the rank's variables): that rank. Its `identity.rank` says the same number, but it is
    /// not a second rank of it (issue 25, item 4); labels say "child of r0".
    pub child_of_rank: Option<u32>,
}

impl ProcessRecording {
    /// Reads `dir/process.stp`.
    pub fn open(dir: &Path) -> Result<ProcessRecording, Problem> {
        let path = dir.join(PROCESS_FILE);
        let problem = |offset: u64, what: String| Problem {
            file: path.clone(),
            offset,
            what,
        };
        let f = File::open(&path).map_err(|e| problem(0, format!("cannot open: {e}")))?;
        let mut r = BufReader::new(f);
        let mut hdr = [0u8; FILE_HEADER_LEN];
        let n = read_exact_or_eof(&mut r, &mut hdr).map_err(|e| problem(0, e.to_string()))?;
        let schema = check_header(&hdr[..n], FileKind::Process).map_err(|w| problem(0, w))?;
        let mut rec = ProcessRecording {
            dir: dir.to_path_buf(),
            schema,
            ..Default::default()
        };
        let mut offset = FILE_HEADER_LEN as u64;
        let mut have_identity = false;
        let mut buf = Vec::new();
        loop {
            match next_chunk(&mut r, buf) {
                Next::Eof => break,
                Next::Bad(what) => {
                    rec.problems.push(problem(offset, what));
                    break;
                }
                Next::Chunk(payload) => {
                    let len = payload.len();
                    match super::decode_record(schema, &payload) {
                        Ok(ProcessRecord::Identity(id)) => {
                            rec.identity = id;
                            have_identity = true;
                        }
                        Ok(ProcessRecord::Endpoint(d)) => rec.endpoints.push(d),
                        Ok(ProcessRecord::EndpointUpdate(u)) => rec.updates.push(u),
                        Ok(ProcessRecord::Clock(c)) => rec.clocks.push(c),
                        Ok(ProcessRecord::Snapshot(s)) => rec.snapshots.push(s),
                        Ok(ProcessRecord::ThreadStart { tid, name }) => {
                            rec.threads.push((tid, name))
                        }
                        Ok(ProcessRecord::ThreadEnd { tid, events }) => {
                            rec.thread_ends.push((tid, events))
                        }
                        Ok(ProcessRecord::End { at_ns, drops }) => rec.end = Some((at_ns, drops)),
                        Ok(ProcessRecord::MemRegion(m)) => rec.mrs.push(m),
                        Ok(ProcessRecord::Queues(q)) => rec.queues.push(q),
                        Err(e) => {
                            rec.problems
                                .push(problem(offset, format!("undecodable record chunk: {e}")));
                            break;
                        }
                    }
                    offset += (CHUNK_HEADER_LEN + len) as u64;
                    buf = payload;
                }
            }
        }
        if !have_identity {
            return Err(rec.problems.pop().unwrap_or_else(|| {
                problem(offset, "process file holds no identity record".into())
            }));
        }
        Ok(rec)
    }

    /// True when the process did not shut down cleanly (killed, crashed, still running).
    pub fn is_cut(&self) -> bool {
        self.end.is_none()
    }

    /// The last cumulative snapshot, if any.
    pub fn last_snapshot(&self) -> Option<&Snapshot> {
        self.snapshots.last()
    }

    pub fn clock(&self) -> TscClock {
        TscClock::new(self.clocks.clone())
    }

    /// Thread ids with an event file on disk.
    pub fn thread_files(&self) -> Vec<(u32, PathBuf)> {
        let mut out = Vec::new();
        if let Ok(rd) = std::fs::read_dir(&self.dir) {
            for e in rd.flatten() {
                let name = e.file_name();
                let name = name.to_string_lossy();
                if let Some(tid) = name
                    .strip_prefix("thread-")
                    .and_then(|s| s.strip_suffix(".ste"))
                    .and_then(|s| s.parse::<u32>().ok())
                {
                    out.push((tid, e.path()));
                }
            }
        }
        out.sort();
        out
    }

    /// Reads every event of this process (all threads, each in time order). For exports of big
    /// recordings use `ThreadEventReader` and merge instead.
    pub fn read_all_events(&self, problems: &mut Vec<Problem>) -> Vec<Event> {
        let mut all = Vec::new();
        for (tid, path) in self.thread_files() {
            match ThreadEventReader::open(&path, tid) {
                Ok(mut r) => {
                    while let Some(block) = r.next_block() {
                        all.extend_from_slice(block);
                    }
                    problems.extend(r.problem);
                }
                Err(p) => problems.push(p),
            }
        }
        all
    }
}

/// Streams the events of one thread file, a chunk at a time.
pub struct ThreadEventReader {
    path: PathBuf,
    tid: u32,
    r: BufReader<File>,
    offset: u64,
    buf: Vec<u8>,
    events: Vec<Event>,
    done: bool,
    /// Set when reading stopped before the end of the file.
    pub problem: Option<Problem>,
}

impl ThreadEventReader {
    pub fn open(path: &Path, tid: u32) -> Result<ThreadEventReader, Problem> {
        let problem = |what: String| Problem {
            file: path.to_path_buf(),
            offset: 0,
            what,
        };
        let f = File::open(path).map_err(|e| problem(format!("cannot open: {e}")))?;
        let mut r = BufReader::with_capacity(1 << 16, f);
        let mut hdr = [0u8; FILE_HEADER_LEN];
        let n = read_exact_or_eof(&mut r, &mut hdr).map_err(|e| problem(e.to_string()))?;
        check_header(&hdr[..n], FileKind::Thread).map_err(problem)?;
        Ok(ThreadEventReader {
            path: path.to_path_buf(),
            tid,
            r,
            offset: FILE_HEADER_LEN as u64,
            buf: Vec::new(),
            events: Vec::new(),
            done: false,
            problem: None,
        })
    }

    pub fn tid(&self) -> u32 {
        self.tid
    }

    /// The next block of events, or None at the end (or at the first bad chunk: see `problem`).
    /// Exchanges the last decoded block with `v` (whose buffer the next block reuses): the
    /// merge takes blocks without copying them.
    pub fn swap_events(&mut self, v: &mut Vec<Event>) {
        std::mem::swap(&mut self.events, v);
    }

    pub fn next_block(&mut self) -> Option<&[Event]> {
        if self.done {
            return None;
        }
        let buf = std::mem::take(&mut self.buf);
        match next_chunk(&mut self.r, buf) {
            Next::Eof => {
                self.done = true;
                None
            }
            Next::Bad(what) => {
                self.done = true;
                self.problem = Some(Problem {
                    file: self.path.clone(),
                    offset: self.offset,
                    what,
                });
                None
            }
            Next::Chunk(payload) => {
                self.events.clear();
                let res = codec::decode_block(&payload, self.tid, &mut self.events);
                let at = self.offset;
                self.offset += (CHUNK_HEADER_LEN + payload.len()) as u64;
                self.buf = payload;
                if let Err(e) = res {
                    self.done = true;
                    self.problem = Some(Problem {
                        file: self.path.clone(),
                        offset: at,
                        what: format!("undecodable event block: {e}"),
                    });
                    return None;
                }
                // A block is in push order; events stamped earlier than their predecessors (GPU
                // WQEs recovered after later doorbells, with their doorbell's time) are put back
                // in time order here, so every block a reader sees is sorted.
                if !self.events.is_sorted_by_key(|e| e.tsc) {
                    self.events.sort_by_key(|e| e.tsc);
                }
                Some(&self.events)
            }
        }
    }
}

/// Every process recording under the given roots: `DIR` (holding `<host>/<pid>/`), a host
/// directory, or a single process directory.
#[derive(Debug, Default)]
pub struct Recording {
    pub processes: Vec<ProcessRecording>,
    pub problems: Vec<Problem>,
}

impl Recording {
    /// Opens every process recording under `roots`. A process that cannot be read is listed in
    /// `problems` and the others are kept; an error when a root is missing, is no directory,
    /// holds no recording, or when not one process could be read (the first reason first).
    pub fn open(roots: &[PathBuf]) -> Result<Recording, String> {
        let mut rec = Recording::default();
        for root in roots {
            match std::fs::metadata(root) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    return Err(format!(
                        "{}: no such file or directory: pass the directory given to --record",
                        root.display()
                    ));
                }
                Err(e) => return Err(format!("{}: {e}", root.display())),
                Ok(md) if !md.is_dir() => {
                    return Err(format!(
                        "{}: not a directory: pass the directory given to --record",
                        root.display()
                    ));
                }
                Ok(_) => {}
            }
            let mut dirs = Vec::new();
            collect_process_dirs(root, 0, &mut dirs);
            if dirs.is_empty() {
                return Err(format!(
                    "{}: holds no sigmatop recording (no */*/{PROCESS_FILE})",
                    root.display()
                ));
            }
            for d in dirs {
                match ProcessRecording::open(&d) {
                    Ok(p) => {
                        rec.problems.extend(p.problems.iter().cloned());
                        rec.processes.push(p);
                    }
                    Err(p) => rec.problems.push(p),
                }
            }
        }
        if rec.processes.is_empty() {
            let n = rec.problems.len();
            let first = rec
                .problems
                .first()
                .map_or_else(|| "no process record".to_string(), |p| p.to_string());
            return Err(format!(
                "nothing could be read: {first}{}",
                if n > 1 {
                    format!(
                        " (and {} more unreadable process record{})",
                        n - 1,
                        if n == 2 { "" } else { "s" }
                    )
                } else {
                    String::new()
                }
            ));
        }
        read_reaped(&mut rec.processes);
        mark_fork_children(&mut rec.processes);
        rec.processes.sort_by(|a, b| {
            (&a.identity.host, a.identity.pid).cmp(&(&b.identity.host, b.identity.pid))
        });
        Ok(rec)
    }
}

/// Processes whose parent is a recorded process of the same host and the same rank: that
/// rank's children (the rule of `agg::Model`'s live view).
fn mark_fork_children(procs: &mut [ProcessRecording]) {
    let ranks: HashMap<(&str, u32), u32> = procs
        .iter()
        .filter_map(|p| {
            p.identity
                .rank
                .map(|r| ((p.identity.host.as_str(), p.identity.pid), r))
        })
        .collect();
    let children: Vec<usize> = procs
        .iter()
        .enumerate()
        .filter(|(_, p)| {
            let id = &p.identity;
            id.rank.is_some()
                && id.ppid != id.pid
                && ranks.get(&(id.host.as_str(), id.ppid)) == id.rank.as_ref()
        })
        .map(|(i, _)| i)
        .collect();
    for i in children {
        procs[i].child_of_rank = procs[i].identity.rank;
    }
}

/// (pid, generation) of a process directory named `<pid>` or `<pid>.<n>`.
fn pid_generation(dir: &Path) -> Option<(u32, u32)> {
    let name = dir.file_name()?.to_str()?;
    match name.split_once('.') {
        Some((p, g)) => Some((p.parse().ok()?, g.parse().ok()?)),
        None => Some((name.parse().ok()?, 0)),
    }
}

/// The `<pid>.exit` files beside the process directories, each applied to the newest directory
/// of its pid. A file that is not a small regular file holding one status line is ignored.
fn read_reaped(procs: &mut [ProcessRecording]) {
    let newest: HashMap<(PathBuf, u32), u32> = procs.iter().fold(HashMap::new(), |mut m, p| {
        if let (Some(parent), Some((pid, g))) = (p.dir.parent(), pid_generation(&p.dir)) {
            let e = m.entry((parent.to_path_buf(), pid)).or_insert(g);
            *e = (*e).max(g);
        }
        m
    });
    for p in procs.iter_mut() {
        let (Some(parent), Some((pid, g))) = (p.dir.parent(), pid_generation(&p.dir)) else {
            continue;
        };
        if newest.get(&(parent.to_path_buf(), pid)) != Some(&g) {
            continue;
        }
        let path = parent.join(format!("{pid}.exit"));
        let small_file =
            std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_file() && m.len() <= 64);
        if small_file && let Ok(text) = std::fs::read_to_string(&path) {
            p.reaped = crate::event::ProcessEnd::parse(&text);
        }
    }
}

fn collect_process_dirs(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) {
    if dir.join(PROCESS_FILE).is_file() {
        out.push(dir.to_path_buf());
        return;
    }
    if depth >= 2 {
        return;
    }
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let mut subs: Vec<PathBuf> = rd
        .flatten()
        .filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
        .map(|e| e.path())
        .collect();
    subs.sort();
    for s in subs {
        collect_process_dirs(&s, depth + 1, out);
    }
}

#[cfg(test)]
mod tests {
    use super::super::writer::ProcessWriter;
    use super::*;
    use crate::event::RawEvent;

    fn tmpdir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("sigmatop-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    /// A process killed right after its record began still left a file that names it: the
    /// identity goes in with the header (issue 37: a Ctrl-C 5 ms into a run left a header alone).
    #[test]
    fn the_identity_is_there_as_soon_as_the_file_is() {
        let root = tmpdir("first");
        let id = Identity {
            host: "node1".into(),
            pid: 7,
            ..Default::default()
        };
        let w = ProcessWriter::create_with_first(
            &root,
            "node1",
            7,
            Some(&ProcessRecord::Identity(id.clone())),
        )
        .unwrap();
        let rec = ProcessRecording::open(w.dir()).expect("readable at once");
        assert_eq!(rec.identity, id);
        assert!(rec.problems.is_empty(), "{:?}", rec.problems);
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn write_read_and_truncate() {
        let root = tmpdir("rw");
        let mut w = ProcessWriter::create(&root, "node/0", 42).unwrap();
        let id = Identity {
            host: "node/0".into(),
            pid: 42,
            ..Default::default()
        };
        w.write_record(&ProcessRecord::Identity(id.clone()))
            .unwrap();
        let evs: Vec<RawEvent> = (0..100)
            .map(|i| RawEvent {
                tsc: i * 10,
                bytes: 8,
                ep: 1,
                op: 2,
                ..Default::default()
            })
            .collect();
        w.write_events(7, &evs).unwrap();
        w.write_events(7, &evs).unwrap();
        let dir = w.dir().to_path_buf();
        drop(w);
        let rec = Recording::open(std::slice::from_ref(&root)).unwrap();
        assert_eq!(rec.processes.len(), 1);
        let p = &rec.processes[0];
        assert_eq!(p.identity, id);
        assert!(p.is_cut());
        let mut probs = Vec::new();
        assert_eq!(p.read_all_events(&mut probs).len(), 200);
        assert!(probs.is_empty());

        // Cut the thread file in the middle of its second chunk.
        let tf = dir.join("thread-7.ste");
        let len = std::fs::metadata(&tf).unwrap().len();
        let f = std::fs::OpenOptions::new().write(true).open(&tf).unwrap();
        f.set_len(len - 5).unwrap();
        let mut probs = Vec::new();
        assert_eq!(p.read_all_events(&mut probs).len(), 100);
        assert_eq!(probs.len(), 1);
        assert!(
            probs[0].to_string().contains("cut inside a chunk"),
            "{}",
            probs[0]
        );
        let _ = std::fs::remove_dir_all(&root);
    }
}
