//! The reader side of the live protocol: discovers the sockets of traced processes, connects to
//! the ones this user owns, and feeds their frames into the `Model`. Non-blocking: one call to
//! `poll` reads what is there and returns.

use std::collections::{BTreeSet, HashMap};
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::agg::{Model, ProcKey};
use crate::wire::{Decoder, Frame};

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

/// Parses "<host>-<pid>.sock".
pub fn parse_socket_name(name: &str) -> Option<(String, u32)> {
    let stem = name.strip_suffix(".sock")?;
    let (host, pid) = stem.rsplit_once('-')?;
    Some((host.to_string(), pid.parse().ok()?))
}

struct Conn {
    key: Option<ProcKey>,
    stream: UnixStream,
    decoder: Decoder,
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
    seen: BTreeSet<PathBuf>,
    last_scan: Option<Instant>,
    pub scan_every: Duration,
    buf: Vec<u8>,
    /// Socket files ever seen that pass the filter (even ones that vanished before connecting).
    pub sockets_seen: usize,
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
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn connected(&self) -> usize {
        self.conns.len()
    }

    fn wanted(&self, pid: u32) -> bool {
        match &self.filter {
            ProcessFilter::All => true,
            ProcessFilter::Pids(p) => p.contains(&pid),
            ProcessFilter::DescendantsOf(root) => descends_from(pid, *root),
        }
    }

    fn scan(&mut self, model: &mut Model) {
        let Ok(rd) = std::fs::read_dir(&self.dir) else {
            return;
        };
        // SAFETY: getuid cannot fail.
        let me = unsafe { libc::getuid() };
        for e in rd.flatten() {
            let path = e.path();
            if self.seen.contains(&path) {
                continue;
            }
            let name = e.file_name().to_string_lossy().into_owned();
            let Some((_host, pid)) = parse_socket_name(&name) else {
                continue;
            };
            if !self.wanted(pid) {
                continue;
            }
            self.seen.insert(path.clone());
            self.sockets_seen += 1;
            let Ok(md) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            if !md.file_type().is_socket() {
                continue;
            }
            if md.uid() != me {
                model.messages.push(format!(
                    "{}: owned by uid {}, not you; not attaching",
                    path.display(),
                    md.uid()
                ));
                continue;
            }
            match UnixStream::connect(&path) {
                Ok(s) => {
                    if s.set_nonblocking(true).is_ok() {
                        self.conns.insert(
                            path,
                            Conn {
                                key: None,
                                stream: s,
                                decoder: Decoder::new(),
                            },
                        );
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                    // A stale socket of a process that died without cleaning up.
                }
                Err(e) => model
                    .messages
                    .push(format!("{}: cannot connect: {e}", path.display())),
            }
        }
    }

    /// Reads everything available from every connection into `model`. Returns the number of
    /// frames applied.
    pub fn poll(&mut self, model: &mut Model) -> usize {
        if self
            .last_scan
            .is_none_or(|t| t.elapsed() >= self.scan_every)
        {
            self.last_scan = Some(Instant::now());
            self.scan(model);
        }
        let mut applied = 0;
        let mut closed = Vec::new();
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
                            c.key = Some(ProcKey {
                                host: identity.host.clone(),
                                pid: identity.pid,
                            });
                        }
                        if let Some(k) = &c.key {
                            model.apply(k, f);
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
            if eof {
                if problem.is_none() && c.decoder.pending() > 0 {
                    problem = Some(format!(
                        "{}: connection closed in the middle of a frame",
                        path.display()
                    ));
                }
                if let Some(p) = &problem {
                    model.messages.push(p.clone());
                }
                if let Some(k) = &c.key {
                    model.source_closed(k, problem)
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
}
