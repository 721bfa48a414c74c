//! The programs sigmatop starts: their exit status as a shell reports it, the signals that reach
//! sigmatop while they run (passed on to them), and the terminal going away under a dashboard.
//!
//! What a signal to `sigmatop run` does (issue 25, items 1–2): SIGINT, SIGQUIT, SIGTERM and SIGHUP
//! are caught from before the program starts (they are blocked across the start, so one that
//! arrives at 0 ms waits for the handler instead of killing sigmatop and orphaning the program),
//! passed on to the program, and sigmatop goes on to reap it, print the summary and exit with its
//! status (128 + the signal). A signal ignored when sigmatop started (`nohup`, a background job)
//! stays ignored in the program, as a shell leaves it (and is still passed on: a program with a
//! handler of its own gets it).

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::Once;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering};

/// The program's name as the messages give it: the file name of the command (`ucx_perftest`,
/// not `/usr/bin/ucx_perftest`).
pub fn program_name(cmd: &[String]) -> String {
    let first = cmd.first().map(String::as_str).unwrap_or_default();
    std::path::Path::new(first)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| first.to_string())
}

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

pub use crate::event::signal_name;

/// The signals sigmatop passes on to the program it runs.
const PASSED: [libc::c_int; 4] = [libc::SIGINT, libc::SIGQUIT, libc::SIGTERM, libc::SIGHUP];

/// Who gets the signals sigmatop passes on: 0 none yet; > 0 that process; < 0 that process
/// group (kill(2)'s own convention).
static FORWARD_TO: AtomicI32 = AtomicI32::new(0);
/// The program shares sigmatop's process group: a signal the terminal sent (to the whole
/// foreground group, the program included) is not sent a second time.
static SHARED_GROUP: AtomicBool = AtomicBool::new(false);
/// A hangup (the terminal went away) or SIGTERM reached sigmatop: the dashboard ends.
static LEAVE: AtomicBool = AtomicBool::new(false);
/// The last signal passed on to the program (0: none), and how many were.
static LAST_PASSED: AtomicI32 = AtomicI32::new(0);
static PASSED_COUNT: AtomicU32 = AtomicU32::new(0);
/// The terminal hung up (seen by the hangup watch, whether or not a SIGHUP came with it).
static HUNG_UP: AtomicBool = AtomicBool::new(false);
/// A SIGHUP was passed on to the program already (the watch does not send a second one).
static HUP_PASSED: AtomicBool = AtomicBool::new(false);

/// True once SIGHUP or SIGTERM reached sigmatop, or the terminal hung up: the dashboard has no
/// terminal left (or was asked to stop) and must end instead of reading a dead terminal.
pub fn leave_requested() -> bool {
    LEAVE.load(Ordering::Relaxed)
}

/// True once the terminal hung up under the dashboard.
pub fn hung_up() -> bool {
    HUNG_UP.load(Ordering::Relaxed)
}

/// The last signal passed on to the program and how many were (None: none).
pub fn passed_on() -> Option<(i32, u32)> {
    let sig = LAST_PASSED.load(Ordering::Relaxed);
    (sig != 0).then(|| (sig, PASSED_COUNT.load(Ordering::Relaxed)))
}

/// The signals of PASSED that were ignored when sigmatop started, one bit each.
static IGNORED_AT_START: AtomicU32 = AtomicU32::new(0);

/// Signals that came before the program had started (on a thread that did not block them),
/// one bit each: passed on by [`Caught::pass_to`].
static PENDING: AtomicU32 = AtomicU32::new(0);

/// Sends `sig` to the program (its group, or the process alone); async-signal-safe.
fn pass_on(sig: libc::c_int) -> bool {
    let to = FORWARD_TO.load(Ordering::Relaxed);
    if to == 0 {
        PENDING.fetch_or(1 << sig, Ordering::Relaxed);
        return false;
    }
    // SAFETY: kill(2) is async-signal-safe; a negative pid names the process group.
    unsafe {
        libc::kill(to, sig);
    }
    LAST_PASSED.store(sig, Ordering::Relaxed);
    PASSED_COUNT.fetch_add(1, Ordering::Relaxed);
    if sig == libc::SIGHUP {
        HUP_PASSED.store(true, Ordering::Relaxed);
    }
    true
}

extern "C" fn on_signal(sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    if sig == libc::SIGHUP || sig == libc::SIGTERM {
        LEAVE.store(true, Ordering::Relaxed);
    }
    // SAFETY: the kernel passes a valid siginfo_t to an SA_SIGINFO handler (null checked anyway).
    let from_kernel = !info.is_null() && unsafe { (*info).si_code } == libc::SI_KERNEL;
    if from_kernel && SHARED_GROUP.load(Ordering::Relaxed) {
        // The terminal's Ctrl-C, Ctrl-\ or hangup: it went to the whole foreground group, and
        // the program is in it.
        return;
    }
    pass_on(sig);
}

/// The signals sigmatop catches, blocked until the program has started ([`Caught::pass_to`]).
pub struct Caught {
    blocked: libc::sigset_t,
}

/// Where the passed-on signals go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// The program leads a process group of its own (the dashboard; a run outside a terminal's
    /// foreground): the whole group gets the signal, as the terminal's foreground job would.
    Group(u32),
    /// The program shares sigmatop's group, a terminal's foreground job (headless on a
    /// terminal): the terminal's own signals reach it directly; others are sent to it.
    Process(u32),
}

/// Call before the program is started: blocks SIGINT, SIGQUIT, SIGTERM and SIGHUP and installs
/// the handler that passes them on.
pub fn catch_signals() -> Caught {
    // SAFETY: sigset_t is a plain bit set, valid zeroed and filled by sigemptyset/sigaddset; the
    // mask change affects this thread (sigmatop's main thread, the one that starts the program;
    // other threads are sigmatop's own and never receive these: they block nothing and the
    // kernel may pick them, which the handler does not mind).
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in PASSED {
            libc::sigaddset(&mut set, sig);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        for sig in PASSED {
            let mut old: libc::sigaction = std::mem::zeroed();
            libc::sigaction(sig, std::ptr::null(), &mut old);
            if old.sa_sigaction == libc::SIG_IGN {
                // Ignored when sigmatop started (nohup, a background job of a script): the
                // program ignores it too (terminate_with_sigmatop sets that in the child), and
                // sigmatop still passes it on, so that a program that installs a handler of its
                // own gets it as it would from a group-wide kill.
                IGNORED_AT_START.fetch_or(1 << sig, Ordering::Relaxed);
            }
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal
                as extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void)
                as usize;
            sa.sa_flags = libc::SA_RESTART | libc::SA_SIGINFO;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
        Caught { blocked: set }
    }
}

impl Caught {
    /// The program has started (or could not be): signals from now on go to `target`; those
    /// that arrived meanwhile are delivered now. Handlers are reset by exec, so the program
    /// starts with the default actions; the mask is not, and [`terminate_with_sigmatop`] clears it
    /// in the child (a command started after `catch_signals` needs it).
    pub fn pass_to(self, target: Option<Target>) {
        match target {
            Some(Target::Group(g)) => FORWARD_TO.store(-(g as i32), Ordering::Relaxed),
            Some(Target::Process(p)) => {
                SHARED_GROUP.store(true, Ordering::Relaxed);
                FORWARD_TO.store(p as i32, Ordering::Relaxed);
            }
            None => {}
        }
        let pending = PENDING.swap(0, Ordering::Relaxed);
        for sig in PASSED {
            if pending & (1 << sig) != 0 {
                pass_on(sig);
            }
        }
        // SAFETY: unblocks the set this thread blocked in catch_signals.
        unsafe {
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &self.blocked, std::ptr::null_mut());
        }
    }
}

/// Makes the program get SIGTERM should sigmatop die without passing a signal on (SIGKILL, a
/// crash): the program is not left running with nobody to report on it. SIGTERM, not SIGHUP:
/// UCX catches SIGHUP (UCX_DEBUG_SIGNO) and a UCX program runs on after it.
pub fn terminate_with_sigmatop(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: getpid before the fork; the closure runs in the child between fork and exec and
    // calls only async-signal-safe functions (sigprocmask, signal, prctl, getppid, kill) on a local
    // sigset_t, and allocates nothing.
    let parent = unsafe { libc::getpid() };
    unsafe {
        cmd.pre_exec(move || {
            // The program starts with no signal blocked: sigmatop blocked the ones it passes on
            // across the start (catch_signals), and the mask survives fork and exec.
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::pthread_sigmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
            // What was ignored when sigmatop started stays ignored in the program, as a shell
            // leaves it (sigmatop's own handler would be reset to the default by exec).
            let ignored = IGNORED_AT_START.load(Ordering::Relaxed);
            for sig in PASSED {
                if ignored & (1 << sig) != 0 {
                    libc::signal(sig, libc::SIG_IGN);
                }
            }
            libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGTERM as libc::c_ulong,
                0,
                0,
                0,
            );
            // sigmatop died before the prctl: the death signal would never come.
            if libc::getppid() != parent {
                libc::kill(libc::getpid(), libc::SIGTERM);
            }
            Ok(())
        });
    }
}

/// True when sigmatop's stdin is a terminal whose foreground process group is sigmatop's own:
/// a program started in that group gets the terminal's Ctrl-C, Ctrl-Z and hangup as it would
/// from a shell.
pub fn in_terminal_foreground() -> bool {
    // SAFETY: isatty/tcgetpgrp/getpgrp take no memory.
    unsafe { libc::isatty(0) == 1 && libc::tcgetpgrp(0) == libc::getpgrp() }
}

/// Watches the terminal on stdin for a hangup (an ssh drop, `tmux kill-window`), once per
/// process, on a thread that sleeps in poll(2) until it happens. Then: the dashboard is told to
/// leave; stdin becomes an empty non-blocking pipe, so that a read of the dead terminal under way
/// in crossterm (which retries a read that returns nothing, forever: issue 25's 7,612 reads a
/// second) ends; and the program gets the SIGHUP the terminal would have sent a foreground
/// program, unless sigmatop already passed one on.
pub fn watch_hangup() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: isatty takes no memory.
        if unsafe { libc::isatty(0) } != 1 {
            return;
        }
        let _ = std::thread::Builder::new()
            .name("sigmatop-hangup".into())
            .spawn(|| {
                let mut pfd = libc::pollfd {
                    fd: 0,
                    events: 0,
                    revents: 0,
                };
                loop {
                    // SAFETY: one valid pollfd; events 0 asks for POLLHUP/POLLERR/POLLNVAL only.
                    let r = unsafe { libc::poll(&mut pfd, 1, -1) };
                    if r > 0 {
                        break;
                    }
                    if r < 0
                        && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted
                    {
                        return;
                    }
                }
                HUNG_UP.store(true, Ordering::Relaxed);
                LEAVE.store(true, Ordering::Relaxed);
                let mut fds = [0 as libc::c_int; 2];
                // SAFETY: pipe2 fills two fds; dup2 replaces fd 0 atomically (a reader of fd 0
                // sees the terminal or the pipe, never a closed fd). The write end stays open so
                // that the pipe reads as "nothing yet" (EAGAIN), not end of file.
                unsafe {
                    if libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) == 0 {
                        libc::dup2(fds[0], 0);
                    }
                }
                if !HUP_PASSED.load(Ordering::Relaxed) {
                    pass_on(libc::SIGHUP);
                }
            });
    });
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
