//! The live socket of one traced process: `<socket dir>/<host>-<pid>.sock`, directory 0700 owned by
//! the user, socket 0600, peers of another uid refused (SO_PEERCRED). Non-blocking throughout: a
//! slow reader loses frames, it never slows the collector, let alone the program; what it lost is
//! counted per reader and sent to it (`Frame::Missed`) once it reads again.

use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

use sigmatop::event::{Identity, Snapshot};
use sigmatop::wire::{self, Frame};

/// Bytes queued per client before its `Events` and `Clock` frames are dropped.
const CLIENT_BUFFER: usize = 8 << 20;
/// Bytes queued per client before every frame is dropped. The other frames (snapshots,
/// endpoints, identity, goodbye) are small and what a reader needs for exact totals, so they go
/// on past `CLIENT_BUFFER`; this bounds the memory a reader that never reads can hold.
const CLIENT_BUFFER_HARD: usize = 2 * CLIENT_BUFFER;

struct Client {
    stream: UnixStream,
    out: Vec<u8>,
    sent: usize,
    /// Frames not queued for this client, and the sampled events in them (cumulative).
    dropped: u64,
    dropped_events: u64,
    /// `dropped` as last told to the client (a `Missed` frame).
    reported: u64,
}

pub struct Server {
    listener: UnixListener,
    path: PathBuf,
    clients: Vec<Client>,
    identity: Identity,
    last_snapshot: Option<Snapshot>,
    pub frames_dropped: u64,
}

/// Checks (or creates) the socket directory: a real directory, owned by us, not open to others.
pub fn check_socket_dir(dir: &Path) -> Result<(), String> {
    let uid = crate::runtime::os::uid();
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| format!("cannot create socket directory {}: {e}", dir.display()))?;
            let md = std::fs::symlink_metadata(dir)
                .map_err(|e| format!("socket directory {}: {e}", dir.display()))?;
            if md.uid() != uid {
                return Err(format!(
                    "socket directory {} is owned by uid {}, not you (uid {uid}); set SIGMATOP_SOCKET_DIR to a directory of yours",
                    dir.display(),
                    md.uid()
                ));
            }
            Ok(())
        }
        Err(e) => Err(format!("socket directory {}: {e}", dir.display())),
        Ok(md) => {
            if md.file_type().is_symlink() {
                return Err(format!(
                    "socket directory {} is a symbolic link; refusing to follow it (set SIGMATOP_SOCKET_DIR)",
                    dir.display()
                ));
            }
            if !md.is_dir() {
                return Err(format!(
                    "socket directory {} is not a directory",
                    dir.display()
                ));
            }
            if md.uid() != uid {
                return Err(format!(
                    "socket directory {} is owned by uid {}, not you (uid {uid}); set SIGMATOP_SOCKET_DIR to a directory of yours",
                    dir.display(),
                    md.uid()
                ));
            }
            if md.permissions().mode() & 0o077 != 0 {
                return Err(format!(
                    "socket directory {} is accessible to other users (mode {:o}); chmod 700 it or set SIGMATOP_SOCKET_DIR",
                    dir.display(),
                    md.permissions().mode() & 0o777
                ));
            }
            Ok(())
        }
    }
}

/// The socket file name of a process.
pub fn socket_name(host: &str, pid: u32) -> String {
    format!("{}-{pid}.sock", sigmatop::trace::writer::sanitize(host))
}

impl Server {
    pub fn bind(dir: &Path, identity: &Identity) -> Result<Server, String> {
        if crate::runtime::config::fault() == crate::runtime::config::Fault::Socket {
            return Err("cannot listen: injected socket fault (SIGMATOP_TEST_FAULT=socket)".into());
        }
        check_socket_dir(dir)?;
        let path = dir.join(socket_name(&identity.host, identity.pid));
        if path.as_os_str().len() >= 108 {
            return Err(format!(
                "socket path {} is longer than a Unix socket allows; set SIGMATOP_SOCKET_DIR to a shorter directory",
                path.display()
            ));
        }
        // A stale socket of an earlier process with our pid: remove it, but only a socket of ours.
        if let Ok(md) = std::fs::symlink_metadata(&path)
            && md.file_type().is_socket()
            && md.uid() == crate::runtime::os::uid()
        {
            let _ = std::fs::remove_file(&path);
        }
        let listener = UnixListener::bind(&path)
            .map_err(|e| format!("cannot listen on {}: {e}", path.display()))?;
        let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600));
        listener
            .set_nonblocking(true)
            .map_err(|e| format!("socket {}: {e}", path.display()))?;
        Ok(Server {
            listener,
            path,
            clients: Vec::new(),
            identity: identity.clone(),
            last_snapshot: None,
            frames_dropped: 0,
        })
    }

    pub fn set_identity(&mut self, id: Identity) {
        self.identity = id;
    }

    pub fn set_last_snapshot(&mut self, s: Snapshot) {
        self.last_snapshot = Some(s);
    }

    /// Queues `frame` for `c`, or drops and counts it when `c` reads too slowly. A frame queued
    /// after drops is preceded by a `Missed` frame with the counts, so the reader learns what
    /// it lost as soon as anything reaches it again.
    fn queue(c: &mut Client, frame: &Frame) -> bool {
        let queued = c.out.len() - c.sent;
        let limit = match frame {
            Frame::Events(_) | Frame::Clock(_) => CLIENT_BUFFER,
            _ => CLIENT_BUFFER_HARD,
        };
        if queued > limit {
            c.dropped += 1;
            if let Frame::Events(e) = frame {
                c.dropped_events += e.len() as u64;
            }
            return false;
        }
        if c.sent > 0 && c.sent == c.out.len() {
            c.out.clear();
            c.sent = 0;
        }
        if c.dropped != c.reported {
            let missed = Frame::Missed {
                frames: c.dropped,
                events: c.dropped_events,
            };
            if wire::encode(&missed, &mut c.out).is_ok() {
                c.reported = c.dropped;
            }
        }
        wire::encode(frame, &mut c.out).is_ok()
    }

    /// Queues a frame for every client.
    pub fn broadcast(&mut self, frame: &Frame) {
        for c in &mut self.clients {
            if !Self::queue(c, frame) {
                self.frames_dropped += 1;
            }
        }
    }

    /// Accepts new clients and writes what it can without blocking.
    pub fn poll(&mut self) {
        loop {
            match self.listener.accept() {
                Ok((stream, _)) => {
                    if crate::runtime::os::peer_uid(stream.as_raw_fd())
                        != Some(crate::runtime::os::uid())
                    {
                        continue; // dropped: closes the connection
                    }
                    if stream.set_nonblocking(true).is_err() {
                        continue;
                    }
                    // A reader that is briefly descheduled (a dashboard on a busy node) should not
                    // cost frames: let the kernel hold ~4 MiB for it.
                    crate::runtime::os::set_send_buffer(stream.as_raw_fd(), 4 << 20);
                    let mut c = Client {
                        stream,
                        out: Vec::with_capacity(1 << 16),
                        sent: 0,
                        dropped: 0,
                        dropped_events: 0,
                        reported: 0,
                    };
                    Self::queue(&mut c, &Frame::hello(self.identity.clone()));
                    let defs = crate::runtime::registry::all_defs();
                    if !defs.is_empty() {
                        Self::queue(&mut c, &Frame::Endpoints(defs));
                    }
                    let ups = crate::runtime::registry::all_updates();
                    if !ups.is_empty() {
                        Self::queue(&mut c, &Frame::Updates(ups));
                    }
                    if let Some(s) = &self.last_snapshot {
                        Self::queue(&mut c, &Frame::Snapshot(s.clone()));
                    }
                    self.clients.push(c);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
        self.clients.retain_mut(|c| {
            while c.sent < c.out.len() {
                match c.stream.write(&c.out[c.sent..]) {
                    Ok(0) => return false,
                    Ok(n) => c.sent += n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => return false, // reader went away
                }
            }
            true
        });
    }

    /// Last flush, then removes the socket file. The wait is bounded: 200 ms without a reader
    /// taking anything (a stopped or gone reader costs the exiting program no more), and 2 s in
    /// all while readers keep reading (one that is busy on a loaded machine still gets the final
    /// snapshot and the goodbye queued behind its backlog).
    pub fn finish(&mut self) {
        use std::time::{Duration, Instant};
        let start = Instant::now();
        let mut last_progress = start;
        let pending =
            |s: &Server| -> usize { s.clients.iter().map(|c| c.out.len() - c.sent).sum() };
        let mut left = pending(self);
        while left > 0
            && last_progress.elapsed() < Duration::from_millis(200)
            && start.elapsed() < Duration::from_secs(2)
        {
            self.poll();
            let now = pending(self);
            if now < left {
                last_progress = Instant::now();
            }
            left = now;
            std::thread::sleep(Duration::from_millis(2));
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
