//! The reader side of the live protocol: discovers the sockets of traced processes, connects to
//! the ones this user owns, and feeds their frames into a [`LiveSink`]: the `Model` for `attach`,
//! `run` and `serve`, the relay's stdout encoder for `sigmatop relay` (one code path, so the relay
//! finds and refuses exactly what a local attach does). Non-blocking: one call to `poll` reads
//! what is there and returns.

use std::collections::{BTreeSet, HashMap};
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::agg::{Model, NotAnswering, ProcKey};
use crate::wire::{Decoder, Frame};

/// A connected socket whose process has not said hello for this long does not answer (its
/// collector accepts and says hello within a few ms): `agg::waits::SILENT_NS`.
pub const NOT_ANSWERING: Duration = Duration::from_nanos(crate::agg::waits::SILENT_NS);

/// The socket directory a traced process uses by default (the preload's rule).
pub fn default_socket_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("SIGMATOP_SOCKET_DIR").filter(|v| !v.is_empty()) {
        return PathBuf::from(d);
    }
    if let Some(x) = std::env::var_os("XDG_RUNTIME_DIR").filter(|v| !v.is_empty()) {
        return PathBuf::from(x).join("sigmatop");
    }
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    PathBuf::from(format!("/tmp/sigmatop-{uid}"))
}

/// Does a process with this pid exist (in this PID namespace)? A process of another user
/// counts (kill(2) answers EPERM for it).
pub fn process_exists(pid: u32) -> bool {
    if pid == 0 || pid > i32::MAX as u32 {
        return false;
    }
    // SAFETY: signal 0 only checks that the process exists and may be signalled.
    let r = unsafe { libc::kill(pid as i32, 0) };
    r == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// This host's name, as the preload puts it in a process's identity (gethostname).
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname writes at most that many bytes.
    let r = unsafe { libc::gethostname(buf.as_mut_ptr() as *mut libc::c_char, buf.len()) };
    if r != 0 {
        return String::new();
    }
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// This host's name as it appears in socket names (what the preload writes: the host name,
/// sanitised for a file name).
pub fn socket_host() -> String {
    crate::trace::writer::sanitize(&hostname())
}

/// Parses "<host>-<pid>.sock".
pub fn parse_socket_name(name: &str) -> Option<(String, u32)> {
    let stem = name.strip_suffix(".sock")?;
    let (host, pid) = stem.rsplit_once('-')?;
    Some((host.to_string(), pid.parse().ok()?))
}

/// Where the frames of traced processes go.
pub trait LiveSink {
    /// One frame of process `key` (its hello first).
    fn frame(&mut self, key: &ProcKey, frame: Frame);
    /// The connection of process `key` ended; `problem` says why when it was not a clean close.
    fn closed(&mut self, key: &ProcKey, problem: Option<String>);
    /// A message about a source (a refused socket, a bad frame), for a person.
    fn message(&mut self, msg: String);
    /// Process `pid` of `host` has a socket but does not answer (`Some`: connected, or its
    /// listen queue full, and no hello for `NOT_ANSWERING`), or no longer so (`None`: it
    /// answered, or it is gone). Said again while it lasts (its state may change).
    fn not_answering(&mut self, _host: &str, _pid: u32, _state: Option<NotAnswering>) {}
}

impl LiveSink for Model {
    fn frame(&mut self, key: &ProcKey, frame: Frame) {
        if !self.not_answering.is_empty() {
            self.note_not_answering(&key.host, key.pid, None);
        }
        self.apply(key, frame);
        self.seen(key, crate::agg::nccl::wall_ns());
    }

    fn not_answering(&mut self, host: &str, pid: u32, state: Option<NotAnswering>) {
        self.note_not_answering(host, pid, state);
    }

    fn closed(&mut self, key: &ProcKey, problem: Option<String>) {
        self.source_closed(key, problem);
    }

    fn message(&mut self, msg: String) {
        self.messages.push(msg);
    }
}

struct Conn {
    key: Option<ProcKey>,
    stream: UnixStream,
    decoder: Decoder,
    /// Whose socket it is (the host as the process names itself, when it is this host).
    host: String,
    pid: u32,
    /// Since the first connection attempt: its wall clock (ns) and instant.
    since_ns: u64,
    since: Instant,
    /// `LiveSink::not_answering` was said (Some) for it.
    said: bool,
}

/// A socket whose listen queue is full (a non-blocking connect would block): its process does
/// not accept. Tried again at every scan.
struct Busy {
    host: String,
    pid: u32,
    since_ns: u64,
    since: Instant,
    said: bool,
}

/// Connects to the Unix socket at `path` without blocking: a process that does not accept
/// (stopped, hung) with a full listen queue gives `WouldBlock` at once instead of a connect
/// that waits for it.
fn connect_nonblocking(path: &Path) -> io::Result<UnixStream> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::io::FromRawFd;
    let bytes = path.as_os_str().as_bytes();
    // SAFETY: sockaddr_un is plain old data; all zeros is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if bytes.len() >= addr.sun_path.len() || bytes.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "socket path too long for a Unix socket address",
        ));
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, b) in addr.sun_path.iter_mut().zip(bytes) {
        *d = *b as libc::c_char;
    }
    // SAFETY: plain socket(2) call; the descriptor is owned by the stream below or closed.
    let fd = unsafe {
        libc::socket(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh socket nothing else owns; the stream closes it when dropped.
    let stream = unsafe { UnixStream::from_raw_fd(fd) };
    let len = std::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1;
    // SAFETY: `addr` is a valid sockaddr_un of at least `len` bytes, alive for the call.
    let r = unsafe {
        libc::connect(
            fd,
            (&raw const addr).cast::<libc::sockaddr>(),
            len as libc::socklen_t,
        )
    };
    if r != 0 {
        let e = io::Error::last_os_error();
        // A non-blocking connect to a Unix socket whose listen queue is full.
        if e.raw_os_error() == Some(libc::EAGAIN) || e.raw_os_error() == Some(libc::EINPROGRESS) {
            return Err(io::Error::new(io::ErrorKind::WouldBlock, e));
        }
        return Err(e);
    }
    Ok(stream)
}

/// What /proc says of a local process that does not answer: its name, and whether it is
/// stopped (state T or t).
fn proc_state(pid: u32, since_ns: u64) -> NotAnswering {
    let exe = std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim_end().to_string())
        .unwrap_or_default();
    let stopped = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|st| {
            st.rsplit_once(')')
                .and_then(|(_, rest)| rest.trim_start().chars().next())
        })
        .is_some_and(|c| c == 'T' || c == 't');
    NotAnswering {
        since_ns,
        exe,
        stopped,
    }
}

/// Which processes to follow.
#[derive(Clone, Debug, Default)]
pub enum ProcessFilter {
    #[default]
    All,
    /// Only these pids.
    Pids(Vec<u32>),
    /// Only processes descending from this pid (checked through /proc when first seen).
    DescendantsOf(u32),
}

pub struct LiveSource {
    dir: PathBuf,
    filter: ProcessFilter,
    conns: HashMap<PathBuf, Conn>,
    /// Sockets already handled (connected, refused or finished): never retried.
    seen: BTreeSet<(PathBuf, u64)>,
    last_scan: Option<Instant>,
    pub scan_every: Duration,
    buf: Vec<u8>,
    /// Socket files ever seen that pass the filter (even ones that vanished before connecting),
    /// stale ones left out.
    pub sockets_seen: usize,
    /// Stale sockets removed: this user's sockets, named for this host, whose process is gone
    /// and which refuse connections (a process killed before it could remove its socket).
    pub stale_removed: Vec<PathBuf>,
    /// This host's name as socket names spell it.
    host: String,
    /// Sockets whose listen queue was full at the last try.
    busy: HashMap<PathBuf, Busy>,
}

/// Is `pid` `ancestor` or one of its descendants (walking PPid in /proc)?
pub fn descends_from(pid: u32, ancestor: u32) -> bool {
    let mut cur = pid;
    for _ in 0..64 {
        if cur == ancestor {
            return true;
        }
        if cur <= 1 {
            return false;
        }
        let Ok(status) = std::fs::read_to_string(format!("/proc/{cur}/status")) else {
            return false;
        };
        let Some(ppid) = status
            .lines()
            .find_map(|l| l.strip_prefix("PPid:"))
            .and_then(|v| v.trim().parse::<u32>().ok())
        else {
            return false;
        };
        cur = ppid;
    }
    false
}

impl LiveSource {
    pub fn new(dir: PathBuf, filter: ProcessFilter) -> LiveSource {
        LiveSource {
            dir,
            filter,
            conns: HashMap::new(),
            seen: BTreeSet::new(),
            last_scan: None,
            scan_every: Duration::from_millis(200),
            buf: vec![0u8; 1 << 16],
            sockets_seen: 0,
            stale_removed: Vec::new(),
            host: socket_host(),
            busy: HashMap::new(),
        }
    }

    /// Removes `path` when it is a stale socket: named for this host, owned by this user, its
    /// process gone, and nothing listening on it. Each condition keeps a live socket safe: a
    /// process of another host or PID namespace sharing the directory still accepts the
    /// connection. True when it was removed.
    fn remove_if_stale(&mut self, path: &Path, host: &str, pid: u32, refused: bool) -> bool {
        if host != self.host || process_exists(pid) {
            return false;
        }
        let Ok(md) = std::fs::symlink_metadata(path) else {
            return false;
        };
        // SAFETY: getuid cannot fail.
        let me = unsafe { libc::getuid() };
        if !md.file_type().is_socket() || md.uid() != me {
            return false;
        }
        let refused = refused
            || matches!(UnixStream::connect(path), Err(e) if e.kind() == io::ErrorKind::ConnectionRefused);
        if refused && std::fs::remove_file(path).is_ok() {
            self.stale_removed.push(path.to_path_buf());
            return true;
        }
        false
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn connected(&self) -> usize {
        self.conns.len()
    }

    /// Sockets connected (or with a full listen queue) whose process has not said hello yet,
    /// for less than `NOT_ANSWERING`: a one-shot reader waits for them before it prints.
    pub fn pending(&self) -> usize {
        self.conns
            .values()
            .filter(|c| c.key.is_none() && c.since.elapsed() < NOT_ANSWERING)
            .count()
            + self
                .busy
                .values()
                .filter(|b| b.since.elapsed() < NOT_ANSWERING)
                .count()
    }

    fn wanted(&self, pid: u32) -> bool {
        match &self.filter {
            ProcessFilter::All => true,
            ProcessFilter::Pids(p) => p.contains(&pid),
            ProcessFilter::DescendantsOf(root) => descends_from(pid, *root),
        }
    }

    fn scan<S: LiveSink + ?Sized>(&mut self, sink: &mut S) {
        let Ok(rd) = std::fs::read_dir(&self.dir) else {
            return;
        };
        // SAFETY: getuid cannot fail.
        let me = unsafe { libc::getuid() };
        for e in rd.flatten() {
            let path = e.path();
            let Ok(md) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            // A socket is known by its path and inode: a program that execs keeps its pid, and
            // its new image's collector makes a new socket at the same path.
            let id = (path.clone(), md.ino());
            if self.seen.contains(&id) {
                continue;
            }
            let name = e.file_name().to_string_lossy().into_owned();
            let Some((host, pid)) = parse_socket_name(&name) else {
                continue;
            };
            if !self.wanted(pid) {
                // Not followed, but a stale socket of this user is cleaned up all the same; a
                // live one is not looked at again.
                if !self.remove_if_stale(&path, &host, pid, false) && !process_exists(pid) {
                    self.seen.insert(id);
                }
                continue;
            }
            self.seen.insert(id.clone());
            if !self.busy.contains_key(&path) {
                self.sockets_seen += 1;
            }
            if !md.file_type().is_socket() {
                continue;
            }
            if md.uid() != me {
                sink.message(format!(
                    "{}: owned by uid {}, not you; not attaching",
                    path.display(),
                    md.uid()
                ));
                continue;
            }
            let local = if host == self.host {
                hostname()
            } else {
                host.clone()
            };
            match connect_nonblocking(&path) {
                Ok(s) => {
                    let busy = self.busy.remove(&path);
                    let (since_ns, since, said) = busy.map_or_else(
                        || (crate::agg::nccl::wall_ns(), Instant::now(), false),
                        |b| (b.since_ns, b.since, b.said),
                    );
                    self.conns.insert(
                        path,
                        Conn {
                            key: None,
                            stream: s,
                            decoder: Decoder::new(),
                            host: local,
                            pid,
                            since_ns,
                            since,
                            said,
                        },
                    );
                }
                // Its listen queue is full: the process does not accept (stopped, hung).
                // Tried again at the next scan; said as not answering meanwhile.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.seen.remove(&id);
                    self.busy.entry(path).or_insert_with(|| Busy {
                        host: local,
                        pid,
                        since_ns: crate::agg::nccl::wall_ns(),
                        since: Instant::now(),
                        said: false,
                    });
                }
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                    // A stale socket of a process that died without cleaning up (removed), or
                    // one whose process is still setting up (counted: it will be back).
                    if self.remove_if_stale(&path, &host, pid, true) {
                        self.sockets_seen -= 1;
                    }
                }
                // Removed between the listing and the connect: its process ended and cleaned
                // up (its final state, if any, comes another way).
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => sink.message(format!("{}: cannot connect: {e}", path.display())),
            }
        }
    }

    /// Reads everything available from every connection into `sink`. Returns the number of
    /// frames passed on.
    pub fn poll<S: LiveSink + ?Sized>(&mut self, sink: &mut S) -> usize {
        let scanned = self
            .last_scan
            .is_none_or(|t| t.elapsed() >= self.scan_every);
        if scanned {
            self.last_scan = Some(Instant::now());
            self.scan(sink);
        }
        let mut applied = 0;
        let mut closed = Vec::new();
        // Sockets whose listen queue stays full: not answering; gone once the file or the
        // process is.
        let mut gone = Vec::new();
        for (path, b) in self.busy.iter_mut() {
            if !path.exists() || !process_exists(b.pid) {
                if b.said {
                    sink.not_answering(&b.host, b.pid, None);
                }
                gone.push(path.clone());
            } else if b.since.elapsed() >= NOT_ANSWERING && (!b.said || scanned) {
                b.said = true;
                sink.not_answering(&b.host, b.pid, Some(proc_state(b.pid, b.since_ns)));
            }
        }
        for p in gone {
            self.busy.remove(&p);
        }
        for (path, c) in self.conns.iter_mut() {
            let mut problem = None;
            let mut eof = false;
            loop {
                match c.stream.read(&mut self.buf) {
                    Ok(0) => {
                        eof = true;
                        break;
                    }
                    Ok(n) => c.decoder.push(&self.buf[..n]),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    // Reset before a byte came: the process ended with this connection still
                    // in its listen queue, never accepted. Nothing was lost on this
                    // connection; its final state, if any, comes another way.
                    Err(e)
                        if e.kind() == io::ErrorKind::ConnectionReset
                            && c.key.is_none()
                            && c.decoder.pending() == 0 =>
                    {
                        eof = true;
                        break;
                    }
                    Err(e) => {
                        problem = Some(format!("{}: read error: {e}", path.display()));
                        eof = true;
                        break;
                    }
                }
            }
            loop {
                match c.decoder.next_frame() {
                    Ok(Some(f)) => {
                        if let Frame::Hello { identity, .. } = &f {
                            c.key = Some(ProcKey::of(identity));
                            if c.said {
                                c.said = false;
                                sink.not_answering(&c.host, c.pid, None);
                            }
                        }
                        if let Some(k) = &c.key {
                            sink.frame(k, f);
                            applied += 1;
                        }
                    }
                    Ok(None) => break,
                    Err(e) => {
                        problem = Some(format!("{}: {e}; disconnected", path.display()));
                        eof = true;
                        break;
                    }
                }
            }
            // Connected, and no hello: its process does not answer (stopped, hung). Said
            // again at each scan while it lasts (whether it is stopped may change).
            if !eof && c.key.is_none() && c.since.elapsed() >= NOT_ANSWERING && (!c.said || scanned)
            {
                c.said = true;
                sink.not_answering(&c.host, c.pid, Some(proc_state(c.pid, c.since_ns)));
            }
            if eof {
                if c.said && c.key.is_none() {
                    sink.not_answering(&c.host, c.pid, None);
                }
                if problem.is_none() && c.decoder.pending() > 0 {
                    problem = Some(format!(
                        "{}: connection closed in the middle of a frame",
                        path.display()
                    ));
                }
                if let Some(p) = &problem {
                    sink.message(p.clone());
                }
                if let Some(k) = &c.key {
                    sink.closed(k, problem)
                }
                closed.push(path.clone());
            }
        }
        for p in closed {
            self.conns.remove(&p);
        }
        applied
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn socket_names() {
        assert_eq!(
            parse_socket_name("node-1-42.sock"),
            Some(("node-1".into(), 42))
        );
        assert_eq!(parse_socket_name("x.sock"), None);
        assert_eq!(parse_socket_name("a-b.sock"), None);
    }

    /// A pid that is certainly gone: a child that has exited and been reaped.
    fn dead_pid() -> u32 {
        let mut c = std::process::Command::new("true")
            .spawn()
            .expect("spawn true");
        let pid = c.id();
        c.wait().expect("wait");
        assert!(!process_exists(pid));
        pid
    }

    #[test]
    fn stale_sockets_are_removed_and_live_ones_kept() {
        let dir = std::env::temp_dir().join(format!("sigmatop-stale-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let host = socket_host();
        let dead = dead_pid();
        let me = std::process::id();
        // A socket file nobody listens on: what a killed process leaves.
        let leave = |name: String| {
            let p = dir.join(name);
            drop(std::os::unix::net::UnixListener::bind(&p).expect("bind"));
            p
        };
        let stale = leave(format!("{host}-{dead}.sock"));
        // Not removed: its process exists (it may be setting up), another host's, a live one.
        let ours = leave(format!("{host}-{me}.sock"));
        let other_host = leave(format!("elsewhere{host}-{dead}.sock"));
        let live_path = dir.join(format!("{host}-{}.sock", dead_pid()));
        let _listener = std::os::unix::net::UnixListener::bind(&live_path).expect("bind");
        // Removed also by an attach that follows other processes only (`attach PID`).
        let mut src = LiveSource::new(dir.clone(), ProcessFilter::Pids(vec![me]));
        src.poll(&mut Model::new());
        assert_eq!(src.stale_removed, vec![stale.clone()]);
        assert!(!stale.exists(), "the stale socket is gone");
        // A second attach following everything finds nothing more to remove.
        let mut src = LiveSource::new(dir.clone(), ProcessFilter::All);
        src.poll(&mut Model::new());
        assert!(src.stale_removed.is_empty());
        for p in [&ours, &other_host, &live_path] {
            assert!(p.exists(), "{} kept", p.display());
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Polls `src` into `model` until `cond` holds, or panics after 10 s.
    fn poll_until(
        src: &mut LiveSource,
        model: &mut Model,
        what: &str,
        cond: impl Fn(&Model) -> bool,
    ) {
        let start = Instant::now();
        while !cond(model) {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "{what}: {:?}",
                model.not_answering
            );
            src.poll(model);
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A process whose collector never accepts (stopped, hung): its socket connects (or its
    /// listen queue is full) and no hello comes. It is listed as not answering after
    /// `NOT_ANSWERING`, never waited on (a full queue does not block the connect), and no longer
    /// once it is gone.
    #[test]
    fn a_socket_that_never_says_hello_is_not_answering() {
        use std::os::unix::io::AsRawFd;
        let dir = std::env::temp_dir().join(format!("sigmatop-noanswer-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let me = std::process::id();
        let path = dir.join(format!("{}-{me}.sock", socket_host()));
        let listener = std::os::unix::net::UnixListener::bind(&path).expect("bind");
        // Room for one connection in its listen queue, taken by another reader: a blocking
        // connect would now wait for an accept that never comes.
        // SAFETY: listen(2) on a socket this test owns.
        assert_eq!(unsafe { libc::listen(listener.as_raw_fd(), 0) }, 0);
        let first = UnixStream::connect(&path).expect("the queue's one place");
        let mut src = LiveSource::new(dir.clone(), ProcessFilter::Pids(vec![me]));
        let mut model = Model::new();
        let start = Instant::now();
        src.poll(&mut model);
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "the connect did not block"
        );
        assert!(model.not_answering.is_empty(), "not before NOT_ANSWERING");
        assert_eq!(src.pending(), 1);
        let key = (hostname(), me);
        poll_until(&mut src, &mut model, "a full queue is not answering", |m| {
            m.not_answering.contains_key(&key)
        });
        let n = &model.not_answering[&key];
        assert!(!n.stopped, "this process runs");
        assert!(!n.exe.is_empty(), "its name from /proc");
        // Gone: its socket with it.
        drop(first);
        drop(listener);
        let _ = std::fs::remove_file(&path);
        poll_until(&mut src, &mut model, "gone", |m| m.not_answering.is_empty());
        // A queue with room: the connect succeeds, and the hello does not come.
        let listener = std::os::unix::net::UnixListener::bind(&path).expect("bind again");
        poll_until(&mut src, &mut model, "connected, no hello", |m| {
            m.not_answering.contains_key(&key)
        });
        assert_eq!(src.connected(), 1);
        drop(listener);
        poll_until(&mut src, &mut model, "closed", |m| {
            m.not_answering.is_empty()
        });
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A process that ends with the view's connection still in its listen queue (it never
    /// accepted it) resets it before a byte came: an end, not a problem to show.
    #[test]
    fn a_connection_never_accepted_ends_quietly() {
        let dir = std::env::temp_dir().join(format!("sigmatop-unaccepted-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let me = std::process::id();
        let path = dir.join(format!("{}-{me}.sock", socket_host()));
        let listener = std::os::unix::net::UnixListener::bind(&path).expect("bind");
        let mut src = LiveSource::new(dir.clone(), ProcessFilter::Pids(vec![me]));
        let mut model = Model::new();
        src.poll(&mut model);
        assert_eq!(src.connected(), 1, "connected, not yet accepted");
        drop(listener);
        src.poll(&mut model);
        assert_eq!(src.connected(), 0);
        assert_eq!(model.messages, Vec::<String>::new());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
