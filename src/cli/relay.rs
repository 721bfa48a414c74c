//! `sigmatop relay`: this host's traced processes on stdout, for `sigmatop attach HOST` at the
//! other end of ssh (or of a `--via` command). The same socket discovery and ownership checks as
//! `attach` (`live::LiveSource`, feeding a `relay::RelayEncoder` instead of a model); the stream
//! is the relay protocol of docs/WIRE.md. It ends when its reader goes (a write to stdout fails).
//! It opens no listener of its own: ssh carries the authentication.
//!
//! Its stdin carries the dashboard's requests, one per line: `qp-every N` (send every QP's
//! counters every Nth snapshot, the totals of each process every snapshot). Anything else is
//! ignored; an end of stdin (a dashboard that sends nothing: /dev/null) changes nothing.

use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::{CliResult, RelayArgs};
use crate::live::{LiveSource, ProcessFilter, default_socket_dir, hostname};
use crate::relay::{HEARTBEAT_MS, RelayEncoder, RelayHello};

/// How often the sockets are drained.
const POLL: Duration = Duration::from_millis(10);

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

pub fn relay(args: &RelayArgs) -> CliResult {
    let dir = args.socket_dir.clone().unwrap_or_else(default_socket_dir);
    let mut live = LiveSource::new(dir, ProcessFilter::All);
    let mut enc = RelayEncoder::default();
    enc.set_qp_every(args.qp_every);
    let mut requests = Requests::new();
    enc.out
        .extend_from_slice(RelayHello::ours(&hostname()).line().as_bytes());
    let mut stdout = io::stdout().lock();
    let heartbeat = Duration::from_millis(HEARTBEAT_MS);
    let mut last_write = Instant::now();
    let mut said_stale = 0;
    loop {
        for n in requests.poll() {
            enc.set_qp_every(n);
        }
        live.poll(&mut enc);
        for p in &live.stale_removed[said_stale..] {
            crate::live::LiveSink::message(
                &mut enc,
                format!("removed stale socket {} (its process is gone)", p.display()),
            );
        }
        said_stale = live.stale_removed.len();
        if enc.out.is_empty() && last_write.elapsed() >= heartbeat {
            enc.heartbeat(now_ns());
        }
        if !enc.out.is_empty() {
            if stdout
                .write_all(&enc.out)
                .and_then(|_| stdout.flush())
                .is_err()
            {
                // The reader is gone (ssh closed): nothing left to do.
                return Ok(0);
            }
            enc.out.clear();
            last_write = Instant::now();
        }
        std::thread::sleep(POLL);
    }
}

/// The dashboard's requests on stdin, read without blocking.
struct Requests {
    open: bool,
    line: Vec<u8>,
}

impl Requests {
    fn new() -> Requests {
        Requests {
            open: true,
            line: Vec::new(),
        }
    }

    /// Stdin has bytes (or its end) to read now. poll(2), not O_NONBLOCK: the flag would be
    /// left on a terminal shared with the shell when the relay is run by hand.
    fn readable() -> bool {
        let mut p = libc::pollfd {
            fd: io::stdin().as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, no wait.
        let r = unsafe { libc::poll(&mut p, 1, 0) };
        r > 0 && p.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0
    }

    /// The `qp-every N` values asked for since the last call, in order.
    fn poll(&mut self) -> Vec<u32> {
        let mut out = Vec::new();
        let mut buf = [0u8; 512];
        while self.open && Self::readable() {
            match io::stdin().lock().read(&mut buf) {
                Ok(0) => self.open = false,
                Ok(n) => self.line.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => break,
                Err(_) => self.open = false,
            }
        }
        while let Some(nl) = self.line.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.line.drain(..=nl).collect();
            if let Some(n) = parse_request(&String::from_utf8_lossy(&line)) {
                out.push(n);
            }
        }
        // A line without its end that is too long is no request of ours.
        if self.line.len() > 256 {
            self.line.clear();
        }
        out
    }
}

/// `qp-every N` → N (1..=16).
pub fn parse_request(line: &str) -> Option<u32> {
    let mut w = line.split_ascii_whitespace();
    if w.next()? != "qp-every" {
        return None;
    }
    let n: u32 = w.next()?.parse().ok()?;
    (1..=crate::relay::MAX_QP_EVERY).contains(&n).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::parse_request;

    #[test]
    fn requests() {
        assert_eq!(parse_request("qp-every 4\n"), Some(4));
        assert_eq!(parse_request("qp-every 1"), Some(1));
        assert_eq!(parse_request("qp-every 17"), None);
        assert_eq!(parse_request("qp-every 0"), None);
        assert_eq!(parse_request("qp-every x"), None);
        assert_eq!(parse_request("hello"), None);
    }
}
