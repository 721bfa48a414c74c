//! `_exit` and `_Exit`: a process that ends through them runs no exit handler and no destructor,
//! so without these hooks the collector's final drain never runs and whatever it had not flushed
//! yet (up to 100 ms of events, 250 ms of counters) is lost with a cut record. Python's
//! multiprocessing ends every child of its `fork` start method with `os._exit`.
//!
//! The hook runs the same final flush as the library destructor (`lifecycle::final_flush`),
//! bounded in the same way (2 s, up to 15 s only while the collector makes progress), then calls
//! the real function. It does nothing in a process whose sigmatop state is not its own: a `vfork` child
//! (or a `clone(CLONE_VM)` child) shares its parent's memory, and `_exit` is what such a child
//! calls when its exec fails, so stopping "its" collector would stop the parent's (and its doorbell
//! poller, which forwards a GPU's doorbells: the parent would hang).
//!
//! Not hookable: `syscall(SYS_exit_group, ...)` and the raw instruction end the process in the
//! kernel without calling any library function; such a process loses its last 100 ms as under
//! SIGKILL (docs/RELIABILITY.md).

use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicPtr, Ordering};

type ExitFn = unsafe extern "C" fn(c_int) -> !;

/// The real `_exit` and `_Exit`, resolved in the constructor: the hook itself must not call the
/// dynamic linker (it may run in a vfork child or a signal handler).
static REAL_EXIT: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
static REAL_UPPER_EXIT: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());

/// Resolves the real functions. Constructor only.
pub fn init() {
    let libc_so: &[&core::ffi::CStr] = &[c"libc.so.6"];
    REAL_EXIT.store(
        crate::runtime::dl::next_symbol(c"_exit", libc_so),
        Ordering::Release,
    );
    REAL_UPPER_EXIT.store(
        crate::runtime::dl::next_symbol(c"_Exit", libc_so),
        Ordering::Release,
    );
}

/// Calls the real function, or ends the process with the system call itself when none was found.
fn forward(real: &AtomicPtr<c_void>, status: c_int) -> ! {
    let p = real.load(Ordering::Acquire);
    if !p.is_null() {
        // SAFETY: `p` is libc's `_exit` or `_Exit` (found by name in `init`), whose C signature
        // is `void (int)` and which never returns.
        unsafe { core::mem::transmute::<*mut c_void, ExitFn>(p)(status) }
    }
    crate::runtime::os::exit_group(status)
}

/// Flushes sigmatop's record and live stream, then ends the process as `_exit(2)` does.
///
/// # Safety
/// Same contract as the libc function (none).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn _exit(status: c_int) -> ! {
    crate::runtime::lifecycle::final_flush(crate::runtime::lifecycle::End::Exit);
    forward(&REAL_EXIT, status)
}

/// Flushes sigmatop's record and live stream, then ends the process as `_Exit(3)` does.
///
/// # Safety
/// Same contract as the libc function (none).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn _Exit(status: c_int) -> ! {
    crate::runtime::lifecycle::final_flush(crate::runtime::lifecycle::End::Exit);
    forward(&REAL_UPPER_EXIT, status)
}
