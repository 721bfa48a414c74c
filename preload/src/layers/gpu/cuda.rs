//! CUDA driver interposition (reference §6, §8).
//!
//! cudart (static or shared) resolves `cuGetProcAddress_v2` with `dlsym(libcuda, ...)` and then
//! asks that function for `"cuGetProcAddress"` itself; every later driver lookup goes through the
//! pointer returned by that self-lookup. So sigmatop hands out its own `cuGetProcAddress[_v2]`
//! from the dlsym wrapper (interpose/dlsym.rs routes "cu*" names to the hook table) and answers
//! the self-lookup with itself. Every other lookup returns the real pointer, except the few functions the doorbell
//! hijack needs, by name *and* ABI version:
//!
//! | name | version | variant wrapped |
//! |---|---|---|
//! | cuGetProcAddress | >= 12000 / >= 11030 | `_v2` (5 args) / v1 (4 args) |
//! | cuMemHostRegister | >= 6050 / >= 4000 | `_v2` / v1 (same C signature) |
//! | cuMemHostGetDevicePointer | >= 3020 | `_v2` (64-bit CUdeviceptr) |
//! | cuMemHostUnregister | >= 4000 | the only one |
//! | cuMemGetHandleForAddressRange | >= 11070 | the only one (dma-buf fd -> device range) |
//!
//! A version at or above [`NEWEST_KNOWN_VERSION`] is wrapped only when the real pointer is the
//! exported variant sigmatop implements; otherwise it passes through and is counted.
//! `cuGetExportTable` is never touched. The same functions are also exported under their own
//! names for programs that link libcuda directly (UCX GDAKI calls `cuMemHostRegister`).
//!
//! sigmatop's own driver calls go to the real functions ([`crate::layers::gpu::driver`]), never through
//! these wrappers.

use core::ffi::{CStr, c_char, c_int, c_uint, c_void};
use core::sync::atomic::Ordering;
use std::sync::Mutex;

use sigmatop::event::Layer;

use crate::interpose::dlsym::hook_table;
use crate::interpose::hook;
use crate::layers::gpu::doorbell::stats::{UNKNOWN_VARIANTS, WRAPPED_LOOKUPS};
use crate::layers::gpu::driver::{
    CUDA_ERROR_NOT_INITIALIZED, CUDA_SUCCESS, CuResult, HOST_GET_DPTR_V2, HOST_REGISTER_V2,
    HostGetDptrFn, HostRegisterFn, SONAMES,
};
use crate::runtime::dl::{RealFn, real_fns};

const CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD: c_int = 1;

/// Driver API versions up to here have the variants in the module table above.
pub const NEWEST_KNOWN_VERSION: c_int = 14000;

type GpaV1 = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64) -> CuResult;
type GpaV2 =
    unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> CuResult;
type HostUnregisterFn = unsafe extern "C" fn(*mut c_void) -> CuResult;
type GetHandleFn = unsafe extern "C" fn(*mut c_void, u64, usize, c_int, u64) -> CuResult;

real_fns! { SONAMES;
    GPA: GpaV1 = c"cuGetProcAddress";
    GPA_V2: GpaV2 = c"cuGetProcAddress_v2";
    HOST_REGISTER: HostRegisterFn = c"cuMemHostRegister";
    HOST_UNREGISTER: HostUnregisterFn = c"cuMemHostUnregister";
    GET_HANDLE: GetHandleFn = c"cuMemGetHandleForAddressRange";
}

/// dma-buf fds handed out by `cuMemGetHandleForAddressRange`: fd -> (device pointer, size).
static DMABUF: Mutex<Vec<(c_int, u64, u64)>> = Mutex::new(Vec::new());

/// The dma-buf table's lock, for `fork::prepare` (a leaf).
pub fn hold_for_fork(h: &mut crate::runtime::held::Held) {
    h.lock(&DMABUF);
}

/// The device range behind a dma-buf fd that `cuMemGetHandleForAddressRange` returned.
pub fn dmabuf_range(fd: c_int) -> Option<(u64, u64)> {
    DMABUF
        .lock()
        .ok()?
        .iter()
        .rev()
        .find(|e| e.0 == fd)
        .map(|e| (e.1, e.2))
}

fn enabled() -> bool {
    crate::runtime::config::layer_enabled(Layer::Cuda) && !hook::inside()
}

/// Whether the pointer a lookup returned at `version` is the exported variant `variant`.
fn is_variant(p: *mut c_void, variant: &CStr) -> bool {
    crate::runtime::dl::next_symbol(variant, SONAMES) == p
}

/// Replaces `*pfn` (the real function the driver returned for `name` at `version`) with
/// sigmatop's wrapper where it has one for that ABI variant.
///
/// # Safety
/// `symbol` is a C string and `pfn` a valid out pointer holding the driver's answer.
unsafe fn wrap_lookup(symbol: *const c_char, pfn: *mut *mut c_void, version: c_int) {
    if symbol.is_null() || pfn.is_null() || !enabled() {
        return;
    }
    // SAFETY: checked above; the driver's own arguments.
    let (name, real) = unsafe { (CStr::from_ptr(symbol).to_bytes(), *pfn) };
    if real.is_null() || !name.starts_with(b"cu") {
        return;
    }
    let pick: Option<(&'static crate::runtime::dl::RealSlot, *const c_void, &CStr)> = match name {
        b"cuGetProcAddress" if version >= 12000 => Some((
            GPA_V2.slot(),
            cuGetProcAddress_v2 as *const c_void,
            c"cuGetProcAddress_v2",
        )),
        b"cuGetProcAddress" if version >= 11030 => Some((
            GPA.slot(),
            cuGetProcAddress as *const c_void,
            c"cuGetProcAddress",
        )),
        b"cuMemHostRegister" if version >= 6050 => Some((
            HOST_REGISTER_V2.slot(),
            cuMemHostRegister_v2 as *const c_void,
            c"cuMemHostRegister_v2",
        )),
        b"cuMemHostRegister" if version >= 4000 => Some((
            HOST_REGISTER.slot(),
            cuMemHostRegister as *const c_void,
            c"cuMemHostRegister",
        )),
        b"cuMemHostGetDevicePointer" if version >= 3020 => Some((
            HOST_GET_DPTR_V2.slot(),
            cuMemHostGetDevicePointer_v2 as *const c_void,
            c"cuMemHostGetDevicePointer_v2",
        )),
        b"cuMemHostUnregister" if version >= 4000 => Some((
            HOST_UNREGISTER.slot(),
            cuMemHostUnregister as *const c_void,
            c"cuMemHostUnregister",
        )),
        b"cuMemGetHandleForAddressRange" if version >= 11070 => Some((
            GET_HANDLE.slot(),
            cuMemGetHandleForAddressRange as *const c_void,
            c"cuMemGetHandleForAddressRange",
        )),
        _ => None,
    };
    let Some((slot, hook, variant)) = pick else {
        return;
    };
    if std::ptr::eq(real, hook) {
        return;
    }
    if version >= NEWEST_KNOWN_VERSION && !is_variant(real, variant) {
        UNKNOWN_VARIANTS.fetch_add(1, Ordering::Relaxed);
        return;
    }
    slot.set_if_unset(real);
    WRAPPED_LOOKUPS.fetch_add(1, Ordering::Relaxed);
    // SAFETY: pfn is the caller's valid out pointer.
    unsafe { *pfn = hook as *mut c_void };
}

/// Hook of `cuGetProcAddress_v2` (CUDA 12+ ABI).
#[unsafe(no_mangle)]
unsafe extern "C" fn cuGetProcAddress_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
    status: *mut c_int,
) -> CuResult {
    let Some(real) = GPA_V2.get() else {
        return CUDA_ERROR_NOT_INITIALIZED;
    };
    hook::after(
        None,
        // SAFETY: the program's arguments, unchanged.
        || unsafe { real(symbol, pfn, version, flags, status) },
        // SAFETY: the program's symbol and the pointer the driver filled.
        |r| unsafe { after_lookup(r, symbol, pfn, version) },
    )
}

/// Hook of `cuGetProcAddress` (the CUDA 11.3 four-argument ABI).
#[unsafe(no_mangle)]
unsafe extern "C" fn cuGetProcAddress(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
) -> CuResult {
    let Some(real) = GPA.get() else {
        return CUDA_ERROR_NOT_INITIALIZED;
    };
    hook::after(
        None,
        // SAFETY: the program's arguments, unchanged.
        || unsafe { real(symbol, pfn, version, flags) },
        // SAFETY: the program's symbol and the pointer the driver filled.
        |r| unsafe { after_lookup(r, symbol, pfn, version) },
    )
}

/// A successful lookup of a function sigmatop wraps answers with the wrapper.
///
/// # Safety
/// As `wrap_lookup`.
unsafe fn after_lookup(r: CuResult, symbol: *const c_char, pfn: *mut *mut c_void, version: c_int) {
    if r == CUDA_SUCCESS {
        // SAFETY: the caller's contract.
        unsafe { wrap_lookup(symbol, pfn, version) }
    }
}

/// A registration of a range in a devx UAR page is answered by the doorbell hijack (which
/// registers a shadow page instead); any other goes through.
fn host_register(
    slot: &RealFn<HostRegisterFn>,
    p: *mut c_void,
    size: usize,
    flags: c_uint,
) -> CuResult {
    let Some(real) = slot.get() else {
        return CUDA_ERROR_NOT_INITIALIZED;
    };
    if enabled()
        && crate::layers::gpu::doorbell::maybe_uar(p as u64, size as u64)
        && let Some(r) = hook::guarded(None, || {
            crate::layers::gpu::doorbell::on_host_register(p, size, flags, real)
        })
    {
        crate::runtime::config::note_used(Layer::Cuda);
        hook::guarded((), crate::runtime::collector::ensure_started);
        return r;
    }
    // SAFETY: the program's arguments, unchanged.
    unsafe { real(p, size, flags) }
}

/// Hook of `cuMemHostRegister_v2`: a range inside a devx UAR gets a shadow page (doorbell.rs).
#[unsafe(no_mangle)]
unsafe extern "C" fn cuMemHostRegister_v2(p: *mut c_void, size: usize, flags: c_uint) -> CuResult {
    host_register(&HOST_REGISTER_V2, p, size, flags)
}

/// Hook of `cuMemHostRegister` (v1; same C signature as `_v2`).
#[unsafe(no_mangle)]
unsafe extern "C" fn cuMemHostRegister(p: *mut c_void, size: usize, flags: c_uint) -> CuResult {
    host_register(&HOST_REGISTER, p, size, flags)
}

/// Hook of `cuMemHostGetDevicePointer_v2`: a hijacked UAR address maps to the shadow page.
#[unsafe(no_mangle)]
unsafe extern "C" fn cuMemHostGetDevicePointer_v2(
    pdptr: *mut u64,
    p: *mut c_void,
    flags: c_uint,
) -> CuResult {
    let Some(real): Option<HostGetDptrFn> = HOST_GET_DPTR_V2.get() else {
        return CUDA_ERROR_NOT_INITIALIZED;
    };
    if !pdptr.is_null()
        && crate::layers::gpu::doorbell::maybe_uar(p as u64, 1)
        && let Some(d) = hook::guarded(None, || {
            crate::layers::gpu::doorbell::shadow_device_pointer(p as u64)
        })
    {
        // SAFETY: pdptr is the caller's non-null out pointer.
        unsafe { *pdptr = d };
        return CUDA_SUCCESS;
    }
    // SAFETY: the driver's function with the program's arguments.
    unsafe { real(pdptr, p, flags) }
}

/// Hook of `cuMemHostUnregister`: ends a hijack (DOCA's probe registers and unregisters at once).
#[unsafe(no_mangle)]
unsafe extern "C" fn cuMemHostUnregister(p: *mut c_void) -> CuResult {
    let Some(real) = HOST_UNREGISTER.get() else {
        return CUDA_ERROR_NOT_INITIALIZED;
    };
    if crate::layers::gpu::doorbell::maybe_uar(p as u64, 1)
        && hook::guarded(false, || {
            crate::layers::gpu::doorbell::on_host_unregister(p as u64)
        })
    {
        return CUDA_SUCCESS;
    }
    // SAFETY: the driver's function with the program's argument.
    unsafe { real(p) }
}

/// Hook of `cuMemGetHandleForAddressRange`: remembers dma-buf fd -> device range, so that
/// `mlx5dv_devx_umem_reg_ex` on that fd can be resolved to GPU memory.
#[unsafe(no_mangle)]
unsafe extern "C" fn cuMemGetHandleForAddressRange(
    handle: *mut c_void,
    dptr: u64,
    size: usize,
    handle_type: c_int,
    flags: u64,
) -> CuResult {
    let Some(real) = GET_HANDLE.get() else {
        return CUDA_ERROR_NOT_INITIALIZED;
    };
    hook::after(
        None,
        // SAFETY: the driver's function with the program's arguments.
        || unsafe { real(handle, dptr, size, handle_type, flags) },
        |r| {
            let dmabuf = handle_type == CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD;
            if r == CUDA_SUCCESS && dmabuf && !handle.is_null() {
                // SAFETY: for DMA_BUF_FD the driver stored an int fd at `handle`.
                let fd = unsafe { *(handle as *const c_int) };
                if let Ok(mut m) = DMABUF.lock() {
                    m.retain(|e| e.0 != fd);
                    m.push((fd, dptr, size as u64));
                }
            }
        },
    )
}

/// Hooks the dlsym wrapper hands out for libcuda lookups.
pub fn hooks() -> Vec<crate::interpose::dlsym::Hook> {
    hook_table![Layer::Cuda;
        cuGetProcAddress => GPA,
        cuGetProcAddress_v2 => GPA_V2,
        cuMemHostRegister => HOST_REGISTER,
        cuMemHostRegister_v2 => HOST_REGISTER_V2,
        cuMemHostGetDevicePointer_v2 => HOST_GET_DPTR_V2,
        cuMemHostUnregister => HOST_UNREGISTER,
        cuMemGetHandleForAddressRange => GET_HANDLE,
    ]
}
