//! The final state a process leaves for the `sigmatop run` that started it: a live view only sees
//! a process while it runs, and a program that lives less than the view's scan (100 ms) ends
//! before the view connects. So when `sigmatop run` asks for it (`SIGMATOP_FINAL_DIR`, its private
//! directory), the collector's last act writes what a reader would have received, in the live
//! protocol's frames: hello, endpoints, endpoint updates, a clock sample, the final snapshot and
//! the goodbye, into `<dir>/<host>-<pid>-<start_ns>.final` (written under a temporary name and
//! renamed, so a reader never sees half a file). The program is never delayed: one small file,
//! written by the collector thread during the final flush it runs anyway.
//!
//! The directory must already exist, be a real directory owned by this user and closed to others
//! (`sigmatop run` creates it 0700); otherwise nothing is written: a run that is gone has nobody
//! to read it, and this process must not create directories for nobody.
//!
//! A process that traced nothing (no collector ever started: a switched-off layer installs no
//! hooks) leaves instead the list of the objects it had loaded, `<dir>/<pid>.libs`, so that
//! `sigmatop run` can say which library of a switched-off layer it used, however short it lived
//! (src/cli/diagnose.rs; its look at /proc/PID/maps every 100 ms misses a program that ends
//! between two looks).

use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use sigmatop::event::{ClockSample, Identity, Snapshot};
use sigmatop::wire::{self, Frame};

/// Writes the final state of this process into `dir` (best effort: a failure is silent, since
/// the live view and the record are unaffected and the program must not hear of it).
pub fn write(
    dir: &Path,
    identity: &Identity,
    clock: ClockSample,
    snapshot: &Snapshot,
    queues: Option<sigmatop::queue::Queues>,
) {
    if !private_dir(dir) {
        return;
    }
    let mut out = Vec::with_capacity(4096);
    let mut frames = vec![Frame::hello(identity.clone())];
    let defs = crate::runtime::registry::all_defs();
    if !defs.is_empty() {
        frames.push(Frame::Endpoints(defs));
    }
    let ups = crate::runtime::registry::all_updates();
    if !ups.is_empty() {
        frames.push(Frame::Updates(ups));
    }
    frames.push(Frame::Clock(clock));
    frames.push(Frame::Snapshot(snapshot.clone()));
    if let Some(q) = queues {
        frames.push(Frame::Queues(q));
    }
    frames.push(Frame::Bye {
        at_ns: crate::runtime::clock::real_ns(),
    });
    for f in &frames {
        if wire::encode(f, &mut out).is_err() {
            return;
        }
    }
    let name = format!(
        "{}-{}-{}.final",
        sigmatop::trace::writer::sanitize(&identity.host),
        identity.pid,
        identity.start_ns
    );
    put(dir, &name, &out);
}

/// At exit of a process whose collector never started (the caller checks: runtime::lifecycle),
/// under a `sigmatop run` that asked for final states: the objects it had loaded (best effort,
/// silent on failure).
pub fn write_loaded_objects() {
    let Some(dir) = &crate::runtime::config::paths().final_dir else {
        return;
    };
    if !private_dir(dir) {
        return;
    }
    let mut out = Vec::with_capacity(4096);
    crate::runtime::dl::loaded_objects(&mut out);
    put(
        dir,
        &format!("{}.libs", crate::runtime::os::kernel_pid()),
        &out,
    );
}

/// `dir` is a real directory of this user's, closed to others.
fn private_dir(dir: &Path) -> bool {
    std::fs::symlink_metadata(dir).is_ok_and(|md| {
        md.is_dir() && md.uid() == crate::runtime::os::uid() && md.permissions().mode() & 0o077 == 0
    })
}

/// Writes `bytes` as `dir/name`, under a temporary name first so a reader never sees half a file.
fn put(dir: &Path, name: &str, bytes: &[u8]) {
    let tmp = dir.join(format!(".{name}.tmp"));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&tmp)
        .and_then(|mut f| f.write_all(bytes));
    if written.is_err() || std::fs::rename(&tmp, dir.join(name)).is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}
