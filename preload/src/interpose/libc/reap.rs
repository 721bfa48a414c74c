//! How a child ended, told by its parent: `waitpid`, `wait4`, `wait3`, `wait` and `waitid`
//! forward to libc and, when the child they reaped was killed by a signal or exited with a
//! non-zero status, leave one line for sigmatop (issue 25, item 8). A process that dies of a
//! signal cannot say so itself (no exit handler runs and its socket simply closes), and only its
//! parent learns the status; under `mpirun` that parent is the launcher, which runs under the
//! preload too (it inherits `LD_PRELOAD`). So a segfaulting rank shows as killed by SIGSEGV, not
//! as "exited" like the others.
//!
//! The line is `signal N` or `exit N`, written to
//! - `$SIGMATOP_FINAL_DIR/<pid>.exit` (the live `sigmatop run`, which reads and removes it), and
//! - `$SIGMATOP_RECORD/<host>/<pid>.exit` when the child recorded there (`<host>/<pid>/` exists).
//!
//! Nothing is written for a child that exited 0 (it said goodbye itself), nor when neither
//! variable is set. The hooks may run in a SIGCHLD handler, so they use only async-signal-safe
//! calls (`access`, `open`, `write`, `close`) on paths prepared in the constructor, allocate
//! nothing, and keep `errno` as libc left it. The application sees libc's result unchanged.

use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicPtr, Ordering};
use std::sync::OnceLock;

/// Directory prefixes (ending in '/'), built once in the constructor.
struct Prefixes {
    /// `$SIGMATOP_FINAL_DIR/`.
    final_dir: Option<Vec<u8>>,
    /// `$SIGMATOP_RECORD/<host>/`.
    record_host: Option<Vec<u8>>,
}

static PREFIXES: OnceLock<Prefixes> = OnceLock::new();

static REAL_WAITPID: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
static REAL_WAIT4: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
static REAL_WAITID: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());

type WaitpidFn = unsafe extern "C" fn(libc::pid_t, *mut c_int, c_int) -> libc::pid_t;
type Wait4Fn =
    unsafe extern "C" fn(libc::pid_t, *mut c_int, c_int, *mut libc::rusage) -> libc::pid_t;
type WaitidFn =
    unsafe extern "C" fn(libc::idtype_t, libc::id_t, *mut libc::siginfo_t, c_int) -> c_int;

/// Resolves the real functions and prepares the paths. Constructor only, after `config::load`.
pub fn init() {
    let libc_so: &[&core::ffi::CStr] = &[c"libc.so.6"];
    REAL_WAITPID.store(
        crate::runtime::dl::next_symbol(c"waitpid", libc_so),
        Ordering::Release,
    );
    REAL_WAIT4.store(
        crate::runtime::dl::next_symbol(c"wait4", libc_so),
        Ordering::Release,
    );
    REAL_WAITID.store(
        crate::runtime::dl::next_symbol(c"waitid", libc_so),
        Ordering::Release,
    );
    let paths = crate::runtime::config::paths();
    let with_slash = |p: &std::path::Path| {
        let mut v = p.as_os_str().as_encoded_bytes().to_vec();
        if !v.ends_with(b"/") {
            v.push(b'/');
        }
        v
    };
    let _ = PREFIXES.set(Prefixes {
        final_dir: paths.final_dir.as_deref().map(with_slash),
        record_host: paths.record.as_deref().map(|r| {
            with_slash(&r.join(sigmatop::trace::writer::sanitize(
                &crate::runtime::os::hostname(),
            )))
        }),
    });
}

/// Room for a path: longer prefixes are not written to.
const PATH_MAX: usize = 4096;

/// `prefix` + decimal `pid` + `suffix` + NUL into `buf`; the length without the NUL.
fn compose(buf: &mut [u8; PATH_MAX], prefix: &[u8], pid: u32, suffix: &[u8]) -> Option<usize> {
    let mut digits = [0u8; 10];
    let n = decimal(&mut digits, pid as u64);
    let len = prefix.len() + n + suffix.len();
    if len + 1 > buf.len() {
        return None;
    }
    buf[..prefix.len()].copy_from_slice(prefix);
    buf[prefix.len()..prefix.len() + n].copy_from_slice(&digits[..n]);
    buf[prefix.len() + n..len].copy_from_slice(suffix);
    buf[len] = 0;
    Some(len)
}

/// `v` in decimal at the start of `out`; its length.
fn decimal(out: &mut [u8], mut v: u64) -> usize {
    let mut tmp = [0u8; 20];
    let mut n = 0;
    loop {
        tmp[n] = b'0' + (v % 10) as u8;
        n += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    let n = n.min(out.len());
    for i in 0..n {
        out[i] = tmp[n - 1 - i];
    }
    n
}

/// Writes `line` to the NUL-terminated `path`, a new file of this user only.
fn write_new(path: &[u8], line: &[u8]) {
    // SAFETY: `path` is NUL-terminated (`compose`); open, write and close are async-signal-safe.
    unsafe {
        let fd = libc::open(
            path.as_ptr() as *const libc::c_char,
            libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            0o600,
        );
        if fd >= 0 {
            let _ = libc::write(fd, line.as_ptr() as *const c_void, line.len());
            libc::close(fd);
        }
    }
}

/// A child `pid` ended: `signal` killed it, or it exited with `code`. Tells sigmatop when that
/// was not a plain exit 0.
fn ended(pid: libc::pid_t, signal: Option<c_int>, code: c_int) {
    if pid <= 0 || (signal.is_none() && code == 0) {
        return;
    }
    let Some(pre) = PREFIXES.get() else {
        return;
    };
    if pre.final_dir.is_none() && pre.record_host.is_none() {
        return;
    }
    // errno as libc left it, whatever the writes below do.
    // SAFETY: __errno_location returns this thread's errno.
    let errno = unsafe { *libc::__errno_location() };
    let mut line = [0u8; 32];
    let (word, v): (&[u8], c_int) = match signal {
        Some(s) => (b"signal ", s),
        None => (b"exit ", code),
    };
    line[..word.len()].copy_from_slice(word);
    let n = word.len() + decimal(&mut line[word.len()..], v.max(0) as u64);
    line[n] = b'\n';
    let line = &line[..n + 1];
    let mut path = [0u8; PATH_MAX];
    if let Some(p) = &pre.final_dir
        && let Some(len) = compose(&mut path, p, pid as u32, b".exit")
    {
        write_new(&path[..=len], line);
    }
    // Into the record only for a child that recorded there (its `<host>/<pid>/` exists).
    if let Some(p) = &pre.record_host
        && compose(&mut path, p, pid as u32, b"").is_some()
    {
        // SAFETY: NUL-terminated (`compose`); access is async-signal-safe.
        let recorded =
            unsafe { libc::access(path.as_ptr() as *const libc::c_char, libc::F_OK) } == 0;
        if recorded && let Some(len) = compose(&mut path, p, pid as u32, b".exit") {
            write_new(&path[..=len], line);
        }
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

/// A wait status as returned by waitpid: the child's end, when it ended.
fn from_status(pid: libc::pid_t, status: c_int) {
    if libc::WIFSIGNALED(status) {
        ended(pid, Some(libc::WTERMSIG(status)), 0);
    } else if libc::WIFEXITED(status) {
        ended(pid, None, libc::WEXITSTATUS(status));
    }
}

fn real<T: Copy>(p: &AtomicPtr<c_void>) -> Option<T> {
    let p = p.load(Ordering::Acquire);
    // SAFETY: T is the function pointer type of the symbol stored (the callers' types match
    // libc's prototypes), and a function pointer has the size of a data pointer here.
    (!p.is_null()).then(|| unsafe { core::mem::transmute_copy::<*mut c_void, T>(&p) })
}

/// wait4 through libc, or the system call when it was not found (a call before the constructor).
unsafe fn wait4_any(
    pid: libc::pid_t,
    status: *mut c_int,
    options: c_int,
    ru: *mut libc::rusage,
) -> libc::pid_t {
    match real::<Wait4Fn>(&REAL_WAIT4) {
        // SAFETY: libc's wait4 with the caller's arguments.
        Some(f) => unsafe { f(pid, status, options, ru) },
        // SAFETY: the system call with the caller's arguments.
        None => unsafe { libc::syscall(libc::SYS_wait4, pid, status, options, ru) as libc::pid_t },
    }
}

/// Reaps as `wait4` does; what the child's end was is noted on the way back.
unsafe fn reap(
    pid: libc::pid_t,
    status: *mut c_int,
    options: c_int,
    ru: *mut libc::rusage,
) -> libc::pid_t {
    // The status is needed even when the caller passes none.
    let mut own = 0;
    let st = if status.is_null() { &mut own } else { status };
    // SAFETY: the caller's contract; `st` is writable.
    let r = unsafe { wait4_any(pid, st, options, ru) };
    if r > 0 && options & libc::WNOWAIT == 0 {
        // SAFETY: wait4 wrote the status of the child it returned.
        from_status(r, unsafe { *st });
    }
    r
}

/// `waitpid(2)`, forwarded; see the module.
///
/// # Safety
/// As libc's waitpid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn waitpid(
    pid: libc::pid_t,
    status: *mut c_int,
    options: c_int,
) -> libc::pid_t {
    if let Some(f) = real::<WaitpidFn>(&REAL_WAITPID) {
        let mut own = 0;
        let st = if status.is_null() { &mut own } else { status };
        // SAFETY: libc's waitpid with the caller's arguments (and a status of ours when none).
        let r = unsafe { f(pid, st, options) };
        if r > 0 {
            // SAFETY: waitpid wrote the status of the child it returned.
            from_status(r, unsafe { *st });
        }
        return r;
    }
    // SAFETY: the caller's contract.
    unsafe { reap(pid, status, options, core::ptr::null_mut()) }
}

/// `wait4(2)`, forwarded; see the module.
///
/// # Safety
/// As libc's wait4.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wait4(
    pid: libc::pid_t,
    status: *mut c_int,
    options: c_int,
    ru: *mut libc::rusage,
) -> libc::pid_t {
    // SAFETY: the caller's contract.
    unsafe { reap(pid, status, options, ru) }
}

/// `wait3(2)`, forwarded as wait4(-1, ...); see the module.
///
/// # Safety
/// As libc's wait3.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wait3(
    status: *mut c_int,
    options: c_int,
    ru: *mut libc::rusage,
) -> libc::pid_t {
    // SAFETY: the caller's contract.
    unsafe { reap(-1, status, options, ru) }
}

/// `wait(2)`, forwarded as wait4(-1, ..., 0, NULL); see the module.
///
/// # Safety
/// As libc's wait.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wait(status: *mut c_int) -> libc::pid_t {
    // SAFETY: the caller's contract.
    unsafe { reap(-1, status, 0, core::ptr::null_mut()) }
}

/// `waitid(2)`, forwarded; a child that ended (CLD_EXITED, CLD_KILLED, CLD_DUMPED, without
/// WNOWAIT) is noted.
///
/// # Safety
/// As libc's waitid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn waitid(
    idtype: libc::idtype_t,
    id: libc::id_t,
    info: *mut libc::siginfo_t,
    options: c_int,
) -> c_int {
    let r = match real::<WaitidFn>(&REAL_WAITID) {
        // SAFETY: libc's waitid with the caller's arguments.
        Some(f) => unsafe { f(idtype, id, info, options) },
        // SAFETY: the system call with the caller's arguments (no rusage).
        None => unsafe {
            libc::syscall(libc::SYS_waitid, idtype, id, info, options, 0usize) as c_int
        },
    };
    if r == 0 && !info.is_null() && options & libc::WNOWAIT == 0 {
        // SAFETY: waitid filled `info` (si_pid 0 when WNOHANG found no child).
        let (code, pid, status) =
            unsafe { ((*info).si_code, (*info).si_pid(), (*info).si_status()) };
        match code {
            libc::CLD_EXITED => ended(pid, None, status),
            libc::CLD_KILLED | libc::CLD_DUMPED => ended(pid, Some(status), 0),
            _ => {}
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_lines_are_composed_without_allocation() {
        let mut buf = [0u8; PATH_MAX];
        let n = compose(&mut buf, b"/run/x/", 4021, b".exit").unwrap();
        assert_eq!(&buf[..=n], b"/run/x/4021.exit\0");
        let long = vec![b'a'; PATH_MAX];
        assert!(compose(&mut buf, &long, 1, b"").is_none());
        let mut d = [0u8; 10];
        let n = decimal(&mut d, 0);
        assert_eq!(&d[..n], b"0");
        let n = decimal(&mut d, 4_294_967_295);
        assert_eq!(&d[..n], b"4294967295");
    }
}
