//! The programs sigmatop starts: their exit status as a shell reports it, and the signals
//! sigmatop leaves to them while it waits.

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

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

/// The process group that signals sent to sigmatop are passed on to (0: none).
static FORWARD_TO: AtomicI32 = AtomicI32::new(0);
/// A hangup (the terminal went away) or SIGTERM reached sigmatop: the dashboard ends.
static LEAVE: AtomicBool = AtomicBool::new(false);

/// True once SIGHUP or SIGTERM reached sigmatop while it forwards signals: the dashboard has no
/// terminal left (or was asked to stop) and must end instead of reading a dead terminal.
pub fn leave_requested() -> bool {
    LEAVE.load(Ordering::Relaxed)
}

extern "C" fn forward_signal(sig: libc::c_int) {
    if sig == libc::SIGHUP || sig == libc::SIGTERM {
        LEAVE.store(true, Ordering::Relaxed);
    }
    let group = FORWARD_TO.load(Ordering::Relaxed);
    if group > 0 {
        // SAFETY: kill(2) is async-signal-safe; a negative pid names the process group.
        unsafe {
            libc::kill(-group, sig);
        }
    }
}

/// Passes SIGINT, SIGQUIT, SIGTERM and SIGHUP that reach sigmatop on to the process group
/// `group` (a program `sigmatop run` started in a group of its own), as the terminal would have
/// delivered them to a program in the foreground group; sigmatop itself keeps running to report
/// on the program. Call after the program has started: handlers are reset by exec, but a
/// program started while they are installed would not inherit them anyway.
pub fn forward_signals_to(group: u32) {
    FORWARD_TO.store(group as i32, Ordering::Relaxed);
    for sig in [libc::SIGINT, libc::SIGQUIT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: a zeroed sigaction with a valid handler, an empty mask and SA_RESTART; the
        // handler only loads an atomic and calls kill(2).
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = forward_signal as extern "C" fn(libc::c_int) as usize;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// Sends SIGINT to the process group `group`: what a shell's Ctrl-C does to a foreground job.
pub fn interrupt_group(group: u32) -> Result<(), String> {
    // SAFETY: kill(2) with a negative pid signals the process group; no memory is involved.
    let r = unsafe { libc::kill(-(group as i32), libc::SIGINT) };
    if r == 0 {
        Ok(())
    } else {
        Err(format!(
            "cannot send SIGINT to process group {group}: {}",
            std::io::Error::last_os_error()
        ))
    }
}
