//! The exported `dlsym` and `dlvsym`: they hand out sigmatop's hooks to programs that resolve
//! RDMA libraries with dlopen + dlsym (and fill the hooks' real-function slots with what the
//! program's own lookup found). The hook table is the layers' (`hook_table!`), installed by lib.rs.
//!
//! May use: the hook idiom (crate::interpose::hook), symbol lookup (crate::runtime::dl), config; never a layer.

use core::ffi::{CStr, c_char, c_void};
use std::sync::OnceLock;

use crate::runtime::dl::{REAL_DLSYM, REAL_DLVSYM, RealSlot, real_dlsym, real_dlvsym};

/// The dlsym wrappers' entries for hooks `hook_fn => SLOT` of `layer`: each hook is handed out
/// for lookups of the symbol of its own name, and the lookup's answer fills `SLOT`.
macro_rules! hook_table {
    ($layer:expr; $($f:ident => $slot:expr),* $(,)?) => {
        vec![$(crate::interpose::dlsym::Hook {
            name: stringify!($f).as_bytes(),
            layer: $layer,
            hook: $f as *const core::ffi::c_void,
            real: $slot.slot(),
        }),*]
    };
}
pub(crate) use hook_table;

/// Hooks the dlsym wrappers may hand out: (symbol name, our hook, the real-function slot to fill
/// with what the program's lookup found). Filled by each layer module.
pub struct Hook {
    pub name: &'static [u8],
    pub layer: sigmatop::event::Layer,
    pub hook: *const c_void,
    pub real: &'static RealSlot,
}
// SAFETY: `hook` is a function address, immutable and valid for the whole process.
unsafe impl Sync for Hook {}
// SAFETY: as above.
unsafe impl Send for Hook {}

/// Every hook the wrappers may hand out, installed once by the composition root (lib.rs) in the
/// constructor, before the program can have threads. Before that (and in a library whose
/// constructor failed) every lookup passes through.
static TABLE: OnceLock<Vec<Hook>> = OnceLock::new();

/// Installs the hook table. Constructor only; a second call changes nothing.
pub fn install(hooks: Vec<Hook>) {
    let _ = TABLE.set(hooks);
}

fn lookup_hook(name: &[u8]) -> Option<&'static Hook> {
    TABLE
        .get()?
        .iter()
        .find(|h| h.name == name && crate::runtime::config::layer_enabled(h.layer))
}

/// Shared body of the dlsym/dlvsym wrappers: if the program looks up a function sigmatop hooks,
/// return the hook (and remember the real one the lookup found).
fn redirect(name: *const c_char, found: *mut c_void) -> *mut c_void {
    if found.is_null() || name.is_null() || crate::interpose::hook::inside() {
        return found;
    }
    // SAFETY: the caller's name is a NUL-terminated C string (dlsym's contract).
    let n = unsafe { CStr::from_ptr(name) }.to_bytes();
    // Cheap prefix filter: everything we hook starts with one of these.
    if !(n.starts_with(b"ucp_")
        || n.starts_with(b"fi_")
        || n.starts_with(b"ibv_")
        || n.starts_with(b"mlx5dv_")
        || n.starts_with(b"cu"))
    {
        return found;
    }
    match lookup_hook(n) {
        Some(h) => {
            // A lookup of our own export (RTLD_DEFAULT finds the preload first) is not the real one.
            if !std::ptr::eq(found, h.hook) {
                h.real.set(found);
            }
            h.hook as *mut c_void
        }
        None => found,
    }
}

/// Exported `dlsym`. Lookups relative to the caller (RTLD_NEXT) jump straight to libc's dlsym so
/// that it sees the program's return address, not ours; every other lookup goes through
/// `dlsym_impl`, which may hand out a hook.
///
/// # Safety
/// Same contract as dlsym(3).
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    core::arch::naked_asm!(
        "cmp rdi, -1",
        "jne {imp}",
        "mov rax, qword ptr [rip + {real}]",
        "test rax, rax",
        "jz {imp}",
        "jmp rax",
        imp = sym dlsym_impl,
        real = sym REAL_DLSYM,
    )
}

/// Exported `dlvsym`: as `dlsym`, comparing names only (any symbol version).
///
/// # Safety
/// Same contract as dlvsym(3).
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dlvsym(
    handle: *mut c_void,
    name: *const c_char,
    version: *const c_char,
) -> *mut c_void {
    core::arch::naked_asm!(
        "cmp rdi, -1",
        "jne {imp}",
        "mov rax, qword ptr [rip + {real}]",
        "test rax, rax",
        "jz {imp}",
        "jmp rax",
        imp = sym dlvsym_impl,
        real = sym REAL_DLVSYM,
    )
}

extern "C" fn dlsym_impl(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    // SAFETY: the program's dlsym arguments, passed on unchanged.
    let found = unsafe { real_dlsym(handle, name) };
    crate::interpose::hook::guarded(found, || redirect(name, found))
}

extern "C" fn dlvsym_impl(
    handle: *mut c_void,
    name: *const c_char,
    version: *const c_char,
) -> *mut c_void {
    // SAFETY: the program's dlvsym arguments, passed on unchanged.
    let found = unsafe { real_dlvsym(handle, name, version) };
    crate::interpose::hook::guarded(found, || redirect(name, found))
}
