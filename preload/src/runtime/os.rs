//! The raw OS calls the preload makes for itself (memory, ids, errno, clocks, thread hooks,
//! socket options), each behind a safe function, so the rest of the preload holds no `libc::`
//! call. The dynamic linker's own calls stay in dl.rs, which is that fence for symbols.

use core::ffi::{c_int, c_void};
use core::ptr::null_mut;
use core::sync::atomic::{AtomicU64, Ordering};
use std::os::unix::io::RawFd;

/// A fresh zero-filled private mapping of `len` bytes (`populate`: touched now, so no page fault
/// later), or None.
pub fn map_zeroed(len: usize, populate: bool) -> Option<*mut u8> {
    let extra = if populate { libc::MAP_POPULATE } else { 0 };
    // SAFETY: an anonymous private mapping at an address of the kernel's choice touches no
    // existing memory; MAP_FAILED is checked.
    let p = unsafe {
        libc::mmap(
            null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | extra,
            -1,
            0,
        )
    };
    (p != libc::MAP_FAILED).then_some(p as *mut u8)
}

/// Returns a mapping from [`map_zeroed`] to the kernel.
///
/// # Safety
/// `p` and `len` are a mapping from `map_zeroed` that nothing reads or writes any more.
pub unsafe fn unmap(p: *mut u8, len: usize) {
    // SAFETY: the caller's contract.
    unsafe { libc::munmap(p as *mut c_void, len) };
}

/// The system page size (read once).
pub fn page_size() -> u64 {
    static PS: AtomicU64 = AtomicU64::new(0);
    let p = PS.load(Ordering::Relaxed);
    if p != 0 {
        return p;
    }
    // SAFETY: sysconf has no preconditions.
    let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let v = if v > 0 { v as u64 } else { 4096 };
    PS.store(v, Ordering::Relaxed);
    v
}

/// This thread's errno.
pub fn errno() -> c_int {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() }
}

/// Sets this thread's errno.
pub fn set_errno(e: c_int) {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

/// Runs `f` with errno preserved: bookkeeping after a real call must not change what the program
/// reads.
pub fn keep_errno<R>(f: impl FnOnce() -> R) -> R {
    let e = errno();
    let r = f();
    set_errno(e);
    r
}

pub fn uid() -> u32 {
    // SAFETY: getuid cannot fail.
    unsafe { libc::getuid() }
}

pub fn pid() -> u32 {
    // SAFETY: getpid cannot fail.
    unsafe { libc::getpid() as u32 }
}

pub fn ppid() -> u32 {
    // SAFETY: getppid cannot fail.
    unsafe { libc::getppid() as u32 }
}

/// The kernel's id of the calling thread.
pub fn tid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

/// The calling thread's name (pthread_getname_np: at most 15 bytes and a NUL).
pub fn thread_name() -> [u8; 16] {
    let mut name = [0u8; 16];
    // SAFETY: a buffer of the 16 bytes pthread_getname_np requires, for the calling thread.
    unsafe {
        libc::pthread_getname_np(
            libc::pthread_self(),
            name.as_mut_ptr() as *mut libc::c_char,
            16,
        )
    };
    name
}

/// This host's name.
pub fn hostname() -> String {
    let mut host = [0u8; 256];
    // SAFETY: a buffer and its length.
    unsafe { libc::gethostname(host.as_mut_ptr() as *mut libc::c_char, host.len()) };
    let end = host.iter().position(|&b| b == 0).unwrap_or(host.len());
    String::from_utf8_lossy(&host[..end]).into_owned()
}

/// Nanoseconds of CLOCK_MONOTONIC (vDSO: no syscall).
#[inline]
pub fn mono_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// Nanoseconds of CLOCK_REALTIME since the epoch.
pub fn real_ns() -> u64 {
    clock_ns(libc::CLOCK_REALTIME)
}

#[inline]
fn clock_ns(id: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and out pointer.
    unsafe { libc::clock_gettime(id, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Pins the calling thread to `cpu` (best effort).
pub fn pin_to_cpu(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t with one bit set, applied to the calling thread (pid 0).
    unsafe {
        let mut set: libc::cpu_set_t = core::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, core::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// A pthread key whose destructor `dtor` runs with the value the exiting thread set (None when
/// the key cannot be made).
pub fn thread_exit_key(dtor: unsafe extern "C" fn(*mut c_void)) -> Option<u32> {
    let mut key: libc::pthread_key_t = 0;
    // SAFETY: a valid out pointer and destructor.
    (unsafe { libc::pthread_key_create(&mut key, Some(dtor)) } == 0).then_some(key)
}

/// Sets the calling thread's value of a key from [`thread_exit_key`].
pub fn set_thread_exit_value(key: u32, value: usize) {
    // SAFETY: `key` came from pthread_key_create; the value is only handed to our destructor.
    unsafe { libc::pthread_setspecific(key, value as *const c_void) };
}

/// Runs `prepare` before every fork (in the forking thread), `parent` after it in the parent and
/// `child` after it in the child.
pub fn at_fork(prepare: extern "C" fn(), parent: extern "C" fn(), child: extern "C" fn()) {
    // SAFETY: registers plain functions as the three handlers.
    unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
}

/// Runs `child` in the child process after every fork.
pub fn at_fork_child(child: extern "C" fn()) {
    // SAFETY: registers a plain function as the child handler.
    unsafe { libc::pthread_atfork(None, None, Some(child)) };
}

/// The uid of the process at the other end of a Unix socket (SO_PEERCRED).
pub fn peer_uid(fd: RawFd) -> Option<u32> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = core::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: a valid fd, an out buffer of the option's type and its length.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            &mut cred as *mut libc::ucred as *mut c_void,
            &mut len,
        )
    };
    (r == 0).then_some(cred.uid)
}

/// Asks the kernel to buffer up to `bytes` for a socket's writes (SO_SNDBUF; best effort).
pub fn set_send_buffer(fd: RawFd, bytes: c_int) {
    // SAFETY: a valid fd, an option value of the option's type and its length.
    unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_SNDBUF,
            &bytes as *const c_int as *const c_void,
            core::mem::size_of::<c_int>() as libc::socklen_t,
        )
    };
}

/// The raw process id from the kernel (a system call, never a cached value: in a vfork child it
/// is the child's, while everything in memory is the parent's).
pub fn kernel_pid() -> u32 {
    // SAFETY: getpid has no preconditions.
    unsafe { libc::syscall(libc::SYS_getpid) as u32 }
}

/// Ends the whole process with `status`, as `_exit` does, without any library call.
pub fn exit_group(status: c_int) -> ! {
    loop {
        // SAFETY: exit_group takes a status and does not return.
        unsafe { libc::syscall(libc::SYS_exit_group, status) };
    }
}
