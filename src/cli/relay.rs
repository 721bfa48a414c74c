//! `sigmatop relay`: this host's traced processes on stdout, for `sigmatop attach HOST` at the
//! other end of ssh (or of a `--via` command). The same socket discovery and ownership checks as
//! `attach` (`live::LiveSource`, feeding a `relay::RelayEncoder` instead of a model); the stream
//! is the relay protocol of docs/WIRE.md. It ends when its reader goes (a write to stdout fails).
//! It opens no listener of its own: ssh carries the authentication.

use std::io::{self, Write};
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
    enc.out
        .extend_from_slice(RelayHello::ours(&hostname()).line().as_bytes());
    let mut stdout = io::stdout().lock();
    let heartbeat = Duration::from_millis(HEARTBEAT_MS);
    let mut last_write = Instant::now();
    let mut said_stale = 0;
    loop {
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
