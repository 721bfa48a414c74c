//! The programs sigmatop starts: their exit status as a shell reports it, and the signals
//! sigmatop leaves to them while it waits.

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

/// The exit code a shell would report for `status` (128 + the signal when it was killed).
pub fn exit_code(status: ExitStatus) -> i32 {
    match (status.code(), status.signal()) {
        (Some(c), _) => c,
        (None, Some(sig)) => 128 + sig,
        _ => 1,
    }
}

/// "status 3", "signal 9".
pub fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("status {c}"),
        (None, Some(sig)) => format!("signal {sig}"),
        _ => "unknown status".into(),
    }
}

/// Ignores SIGINT/SIGQUIT in sigmatop while the child runs (the terminal delivers them to the
/// child too), so sigmatop outlives the program and can still report on it.
pub fn ignore_interrupts() {
    // SAFETY: installing SIG_IGN is always valid.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGQUIT, libc::SIG_IGN);
    }
}
