//! Process-image changes: before any `exec*` replaces the program, the collector flushes and ends
//! the record cleanly (otherwise the kernel would discard the last 100 ms of events and counters);
//! if the exec fails, tracing resumes. The exec'd image loads the preload again and traces itself.

use core::ffi::{c_char, c_int, c_void};
use core::sync::atomic::{AtomicPtr, Ordering};

use crate::runtime::dl::{RealSlot, real_fns};

const LIBC: &[&core::ffi::CStr] = &[c"libc.so.6"];

type Argv = *const *const c_char;

real_fns! { LIBC;
    EXECVE: unsafe extern "C" fn(*const c_char, Argv, Argv) -> c_int = c"execve";
    EXECV: unsafe extern "C" fn(*const c_char, Argv) -> c_int = c"execv";
    EXECVP: unsafe extern "C" fn(*const c_char, Argv) -> c_int = c"execvp";
    EXECVPE: unsafe extern "C" fn(*const c_char, Argv, Argv) -> c_int = c"execvpe";
    FEXECVE: unsafe extern "C" fn(c_int, Argv, Argv) -> c_int = c"fexecve";
}

// The variadic exec functions are forwarded by tail jump from an assembly trampoline, so their
// arguments (registers and stack) reach the real function untouched.
static REAL_EXECL: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
static REAL_EXECLP: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
static REAL_EXECLE: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
static EXECL: RealSlot = RealSlot::new(c"execl", LIBC);
static EXECLP: RealSlot = RealSlot::new(c"execlp", LIBC);
static EXECLE: RealSlot = RealSlot::new(c"execle", LIBC);

/// Flushes and closes the record before the image is replaced; resolves the variadic forwards.
extern "C" fn before_exec() {
    let _ = std::panic::catch_unwind(|| {
        REAL_EXECL.store(EXECL.get(), Ordering::Release);
        REAL_EXECLP.store(EXECLP.get(), Ordering::Release);
        REAL_EXECLE.store(EXECLE.get(), Ordering::Release);
        crate::runtime::collector::before_exec();
    });
}

/// The exec returned: it failed, this image goes on, and so does tracing.
fn after_failed_exec() {
    let _ = std::panic::catch_unwind(crate::runtime::collector::after_failed_exec);
}

fn enosys() -> c_int {
    crate::runtime::os::set_errno(libc::ENOSYS);
    -1
}

macro_rules! exec_hook {
    ($name:ident, $real:ident, ($($a:ident: $t:ty),*)) => {
        /// Flushes sigmatop's record, then runs the real function.
        ///
        /// # Safety
        /// Same contract as the libc function.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($a: $t),*) -> c_int {
            let Some(real) = $real.get() else {
                return enosys();
            };
            before_exec();
            // SAFETY: libc's function; the program's arguments, unchanged.
            let r = unsafe { real($($a),*) };
            after_failed_exec();
            r
        }
    };
}

exec_hook!(execve, EXECVE, (path: *const c_char, argv: Argv, envp: Argv));
exec_hook!(execv, EXECV, (path: *const c_char, argv: Argv));
exec_hook!(execvp, EXECVP, (file: *const c_char, argv: Argv));
exec_hook!(execvpe, EXECVPE, (file: *const c_char, argv: Argv, envp: Argv));
exec_hook!(fexecve, FEXECVE, (fd: c_int, argv: Argv, envp: Argv));

macro_rules! variadic_exec {
    ($name:ident, $real:ident) => {
        /// Variadic exec: saves the argument registers, flushes sigmatop's record, restores them
        /// and jumps to the real function (stack arguments were never moved). If the real function
        /// is missing the jump target is null: fail with -1 as a missing symbol would.
        ///
        /// # Safety
        /// Same contract as the libc function.
        #[unsafe(naked)]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name() {
            core::arch::naked_asm!(
                "push rdi",
                "push rsi",
                "push rdx",
                "push rcx",
                "push r8",
                "push r9",
                "push rax",
                "call {before}",
                "pop rax",
                "pop r9",
                "pop r8",
                "pop rcx",
                "pop rdx",
                "pop rsi",
                "pop rdi",
                "mov r11, qword ptr [rip + {real}]",
                "test r11, r11",
                "jz 2f",
                "jmp r11",
                "2:",
                "mov eax, -1",
                "ret",
                before = sym before_exec,
                real = sym $real,
            )
        }
    };
}

variadic_exec!(execl, REAL_EXECL);
variadic_exec!(execlp, REAL_EXECLP);
variadic_exec!(execle, REAL_EXECLE);
