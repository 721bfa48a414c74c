//! The user's own NCCL profiler plugin, chained behind sigmatop's: NCCL loads one profiler
//! plugin (`NCCL_PROFILER_PLUGIN`), so `sigmatop run` points it at sigmatop and passes the
//! user's in `SIGMATOP_NCCL_PROFILER_PLUGIN`. sigmatop loads it as NCCL would (a path, or a name
//! NCCL would open as `libnccl-profiler-NAME.so`), looks up its `ncclProfiler_v5`, and forwards
//! every call of the interface to it: `init` (its activation mask merged with sigmatop's),
//! `startEvent` (the events of the types it asked for, their parent handles translated to its
//! own), `stopEvent`, `recordEventState`, `finalize`, returning its non-success results as NCCL
//! would have had them. Its event handles are kept beside sigmatop's ids in a fixed table (no
//! lock, no allocation on NCCL's threads), indexed by sigmatop's id: a handle still live when
//! 2^20 newer events took its slot is lost to it (counted).

use core::ffi::{c_char, c_int, c_void};
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};

use super::ProfilerV5;

/// The chained plugin's table, once loaded.
static INNER: AtomicPtr<ProfilerV5> = AtomicPtr::new(core::ptr::null_mut());
static TRIED: AtomicBool = AtomicBool::new(false);
/// Handles of the chained plugin whose slot a newer event took before their stop.
pub static LOST: AtomicU64 = AtomicU64::new(0);

/// Slots of the handle table (a power of two): 16 MiB of address space, touched as used.
const SLOTS: u64 = 1 << 20;

#[repr(C)]
struct Slot {
    id: AtomicU64,
    h: AtomicPtr<c_void>,
}

static TABLE: AtomicPtr<Slot> = AtomicPtr::new(core::ptr::null_mut());

/// The environment variable naming the user's plugin.
pub const ENV: &str = "SIGMATOP_NCCL_PROFILER_PLUGIN";

/// The chained plugin, when one is loaded.
#[inline]
pub fn inner() -> Option<&'static ProfilerV5> {
    let p = INNER.load(Ordering::Acquire);
    // SAFETY: set once to a table that lives as long as its library, which is never closed.
    (!p.is_null()).then(|| unsafe { &*p })
}

/// Loads the user's plugin named by [`ENV`] (control path: NCCL's first `init`). Returns the
/// line to print: that it chained, or why not (sigmatop's own attribution goes on).
pub fn load() -> Option<String> {
    if TRIED.swap(true, Ordering::AcqRel) {
        return None;
    }
    let name = std::env::var(ENV).ok().filter(|v| !v.is_empty())?;
    if name.eq_ignore_ascii_case("none") {
        return None;
    }
    let mut tries: Vec<String> = Vec::new();
    if name.contains('/') {
        tries.push(name.clone());
    } else {
        tries.push(format!("libnccl-profiler-{name}.so"));
        tries.push(name.clone());
    }
    let mut lib = core::ptr::null_mut();
    let mut why = String::new();
    for t in &tries {
        let Ok(c) = std::ffi::CString::new(t.as_str()) else {
            continue;
        };
        // SAFETY: a NUL-terminated path; dlopen's own errors come back as null.
        lib = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if !lib.is_null() {
            break;
        }
        // SAFETY: dlerror returns null or a C string valid until the next dl call.
        let e = unsafe { libc::dlerror() };
        if !e.is_null() {
            // SAFETY: as above.
            why = unsafe { core::ffi::CStr::from_ptr(e) }
                .to_string_lossy()
                .into_owned();
        }
    }
    if lib.is_null() {
        return Some(format!(
            "sigmatop: cannot load your NCCL profiler plugin {name} ({why}): it is not chained; sigmatop's own NCCL attribution goes on"
        ));
    }
    // SAFETY: the real dlsym on the handle just opened, with a NUL-terminated name.
    let sym = unsafe { crate::runtime::dl::real_dlsym(lib, c"ncclProfiler_v5".as_ptr()) };
    if sym.is_null() {
        return Some(format!(
            "sigmatop: your NCCL profiler plugin {name} has no ncclProfiler_v5 (sigmatop chains profiler interface v5, NCCL 2.28): it is not chained; sigmatop's own NCCL attribution goes on"
        ));
    }
    if core::ptr::eq(sym as *const ProfilerV5, &super::ncclProfiler_v5) {
        return Some(format!(
            "sigmatop: {ENV}={name} is sigmatop itself: nothing to chain"
        ));
    }
    let Some(t) =
        crate::runtime::os::map_zeroed(SLOTS as usize * core::mem::size_of::<Slot>(), false)
    else {
        return Some(format!(
            "sigmatop: no memory to keep the handles of your NCCL profiler plugin {name}: it is not chained"
        ));
    };
    TABLE.store(t as *mut Slot, Ordering::Release);
    INNER.store(sym as *mut ProfilerV5, Ordering::Release);
    // SAFETY: the table NCCL's interface defines; its name is a C string or null.
    let pname = unsafe {
        let n = (*(sym as *const ProfilerV5)).name;
        if n.is_null() {
            String::from("?")
        } else {
            core::ffi::CStr::from_ptr(n).to_string_lossy().into_owned()
        }
    };
    Some(format!(
        "sigmatop: NCCL profiler plugin chained: {pname} ({name}) gets every event it asks for beside sigmatop's"
    ))
}

#[inline]
fn slot(id: u64) -> Option<&'static Slot> {
    let t = TABLE.load(Ordering::Acquire);
    // SAFETY: the table maps SLOTS slots for the life of the process (never unmapped).
    (!t.is_null()).then(|| unsafe { &*t.add(((id >> 4) & (SLOTS - 1)) as usize) })
}

/// Keeps the chained plugin's handle `h` of sigmatop's event `id`.
#[inline]
pub fn put(id: u64, h: *mut c_void) {
    if let Some(s) = slot(id) {
        if s.id.swap(id, Ordering::AcqRel) != 0 {
            LOST.fetch_add(1, Ordering::Relaxed);
        }
        s.h.store(h, Ordering::Release);
    }
}

/// The chained plugin's handle of event `id` (null: none, or lost).
#[inline]
pub fn get(id: u64) -> *mut c_void {
    match slot(id) {
        Some(s) if id != 0 && s.id.load(Ordering::Acquire) == id => s.h.load(Ordering::Acquire),
        _ => core::ptr::null_mut(),
    }
}

/// The chained plugin's handle of event `id`, forgotten (its stop).
#[inline]
pub fn take(id: u64) -> *mut c_void {
    match slot(id) {
        Some(s) if id != 0 && s.id.load(Ordering::Acquire) == id => {
            let h = s.h.swap(core::ptr::null_mut(), Ordering::AcqRel);
            s.id.store(0, Ordering::Release);
            h
        }
        _ => core::ptr::null_mut(),
    }
}

/// One communicator's context as NCCL holds it: sigmatop's id of it, and the chained plugin's
/// context and activation mask for it.
#[repr(C)]
pub struct Ctx {
    pub c: u64,
    pub inner: *mut c_void,
    pub inner_mask: c_int,
}

/// The chained plugin's `init` for one communicator: its context and mask (0 when it failed,
/// said in one line).
///
/// # Safety
/// NCCL's arguments, passed on unchanged.
#[allow(clippy::too_many_arguments)]
pub unsafe fn init(
    t: &ProfilerV5,
    comm_id: u64,
    name: *const c_char,
    nnodes: c_int,
    nranks: c_int,
    rank: c_int,
    log: *mut c_void,
) -> (*mut c_void, c_int) {
    let mut ctx = core::ptr::null_mut();
    let mut mask: c_int = 0;
    // SAFETY: the chained plugin's init with NCCL's own arguments and our out-pointers.
    let r = unsafe {
        (t.init)(
            &mut ctx, comm_id, &mut mask, name, nnodes, nranks, rank, log,
        )
    };
    if r != 0 {
        static SAID: AtomicBool = AtomicBool::new(false);
        if !SAID.swap(true, Ordering::Relaxed) {
            eprintln!(
                "sigmatop: your NCCL profiler plugin's init failed (error {r}): it gets no events of this communicator; sigmatop's own NCCL attribution goes on"
            );
        }
        return (core::ptr::null_mut(), 0);
    }
    (ctx, mask)
}
