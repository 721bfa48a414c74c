//! CUDA driver interposition (reference §6, §8).
//!
//! cudart (static or shared) resolves `cuGetProcAddress_v2` with `dlsym(libcuda, ...)` and then
//! asks that function for `"cuGetProcAddress"` itself; every later driver lookup goes through the
//! pointer returned by that self-lookup. So sigmatop hands out its own `cuGetProcAddress[_v2]`
//! from the dlsym wrapper (dl.rs routes "cu*" names to the hooks table) and answers the self-lookup
//! with itself. Every other lookup returns the real pointer, except the few functions the doorbell
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
//! sigmatop's own driver calls ([`Driver`]) always go to the real functions through pointers
//! resolved here, never through these wrappers. (The design card names cudarc for this; its
//! loader resolves symbols with `dlsym`, which this very library interposes, and sigmatop needs
//! ten entry points, so they are resolved directly — see docs in doorbell.rs.)

use core::ffi::{CStr, c_char, c_int, c_uint, c_void};
use core::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use sigmatop::event::Layer;

use crate::dl::{Hook, RealSlot as RealFn};

pub type CuResult = c_int;
pub const CUDA_SUCCESS: CuResult = 0;
pub const CUDA_ERROR_NOT_INITIALIZED: CuResult = 3;
pub const CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED: CuResult = 712;
pub const CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED: CuResult = 713;

pub const CU_MEMHOSTREGISTER_PORTABLE: c_uint = 1;
pub const CU_MEMHOSTREGISTER_DEVICEMAP: c_uint = 2;
pub const CU_MEMHOSTREGISTER_IOMEMORY: c_uint = 4;
const CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD: c_int = 1;
const CU_POINTER_ATTRIBUTE_MEMORY_TYPE: c_int = 2;
const CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: c_int = 9;
const CU_MEMORYTYPE_DEVICE: c_uint = 2;
const CU_STREAM_NON_BLOCKING: c_uint = 1;

/// Driver API versions up to here have the variants in the module table above.
pub const NEWEST_KNOWN_VERSION: c_int = 14000;

const SONAMES: &[&CStr] = &[c"libcuda.so.1", c"libcuda.so"];

static GPA: RealFn = RealFn::new(c"cuGetProcAddress", SONAMES);
static GPA_V2: RealFn = RealFn::new(c"cuGetProcAddress_v2", SONAMES);
static HOST_REGISTER: RealFn = RealFn::new(c"cuMemHostRegister", SONAMES);
static HOST_REGISTER_V2: RealFn = RealFn::new(c"cuMemHostRegister_v2", SONAMES);
static HOST_GET_DPTR_V2: RealFn = RealFn::new(c"cuMemHostGetDevicePointer_v2", SONAMES);
static HOST_UNREGISTER: RealFn = RealFn::new(c"cuMemHostUnregister", SONAMES);
static GET_HANDLE: RealFn = RealFn::new(c"cuMemGetHandleForAddressRange", SONAMES);

/// Lookups of a wrapped name at a version newer than sigmatop knows whose pointer was not the
/// variant it implements: passed through untraced.
pub static UNKNOWN_VARIANTS: AtomicU64 = AtomicU64::new(0);
/// Lookups answered with a sigmatop wrapper (diagnostics, tests).
pub static WRAPPED_LOOKUPS: AtomicU64 = AtomicU64::new(0);

type GpaV1 = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64) -> CuResult;
type GpaV2 =
    unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> CuResult;
pub type HostRegisterFn = unsafe extern "C" fn(*mut c_void, usize, c_uint) -> CuResult;
pub type HostGetDptrFn = unsafe extern "C" fn(*mut u64, *mut c_void, c_uint) -> CuResult;
pub type HostUnregisterFn = unsafe extern "C" fn(*mut c_void) -> CuResult;
type GetHandleFn = unsafe extern "C" fn(*mut c_void, u64, usize, c_int, u64) -> CuResult;

/// dma-buf fds handed out by `cuMemGetHandleForAddressRange`: fd -> (device pointer, size).
static DMABUF: Mutex<Vec<(c_int, u64, u64)>> = Mutex::new(Vec::new());

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
    crate::config::layer_enabled(Layer::Cuda) && !crate::in_sigmatop()
}

/// Whether the pointer a lookup returned at `version` is the exported variant `variant`.
fn is_variant(p: *mut c_void, variant: &CStr) -> bool {
    crate::dl::next_symbol(variant, SONAMES) == p
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
    let pick: Option<(&'static RealFn, *const c_void, &CStr)> = match name {
        b"cuGetProcAddress" if version >= 12000 => Some((
            &GPA_V2,
            cuGetProcAddress_v2 as *const c_void,
            c"cuGetProcAddress_v2",
        )),
        b"cuGetProcAddress" if version >= 11030 => {
            Some((&GPA, cuGetProcAddress as *const c_void, c"cuGetProcAddress"))
        }
        b"cuMemHostRegister" if version >= 6050 => Some((
            &HOST_REGISTER_V2,
            cuMemHostRegister_v2 as *const c_void,
            c"cuMemHostRegister_v2",
        )),
        b"cuMemHostRegister" if version >= 4000 => Some((
            &HOST_REGISTER,
            cuMemHostRegister as *const c_void,
            c"cuMemHostRegister",
        )),
        b"cuMemHostGetDevicePointer" if version >= 3020 => Some((
            &HOST_GET_DPTR_V2,
            cuMemHostGetDevicePointer_v2 as *const c_void,
            c"cuMemHostGetDevicePointer_v2",
        )),
        b"cuMemHostUnregister" if version >= 4000 => Some((
            &HOST_UNREGISTER,
            cuMemHostUnregister as *const c_void,
            c"cuMemHostUnregister",
        )),
        b"cuMemGetHandleForAddressRange" if version >= 11070 => Some((
            &GET_HANDLE,
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
///
/// # Safety
/// C ABI entry point with the contract of the real function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetProcAddress_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
    status: *mut c_int,
) -> CuResult {
    let p = GPA_V2.get();
    if p.is_null() {
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    // SAFETY: the real cuGetProcAddress_v2, with the caller's arguments unchanged.
    let r = unsafe {
        core::mem::transmute::<*mut c_void, GpaV2>(p)(symbol, pfn, version, flags, status)
    };
    if r == CUDA_SUCCESS {
        // SAFETY: the driver filled *pfn; symbol is the caller's C string.
        crate::guarded((), || unsafe { wrap_lookup(symbol, pfn, version) });
    }
    r
}

/// Hook of `cuGetProcAddress` (the CUDA 11.3 four-argument ABI).
///
/// # Safety
/// C ABI entry point with the contract of the real function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuGetProcAddress(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
) -> CuResult {
    let p = GPA.get();
    if p.is_null() {
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    // SAFETY: the real cuGetProcAddress, with the caller's arguments unchanged.
    let r = unsafe { core::mem::transmute::<*mut c_void, GpaV1>(p)(symbol, pfn, version, flags) };
    if r == CUDA_SUCCESS {
        // SAFETY: as in cuGetProcAddress_v2.
        crate::guarded((), || unsafe { wrap_lookup(symbol, pfn, version) });
    }
    r
}

fn host_register(slot: &RealFn, p: *mut c_void, size: usize, flags: c_uint) -> CuResult {
    let real = slot.get();
    if real.is_null() {
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    // SAFETY: real is the driver's cuMemHostRegister[_v2], whose C signature is HostRegisterFn.
    let real = unsafe { core::mem::transmute::<*mut c_void, HostRegisterFn>(real) };
    if enabled()
        && crate::doorbell::maybe_uar(p as u64, size as u64)
        && let Some(r) = crate::guarded(None, || {
            crate::doorbell::on_host_register(p, size, flags, real)
        })
    {
        return r;
    }
    // SAFETY: the program's arguments, unchanged.
    unsafe { real(p, size, flags) }
}

/// Hook of `cuMemHostRegister_v2`: a range inside a devx UAR gets a shadow page (doorbell.rs).
///
/// # Safety
/// C ABI entry point with the contract of the real function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemHostRegister_v2(
    p: *mut c_void,
    size: usize,
    flags: c_uint,
) -> CuResult {
    host_register(&HOST_REGISTER_V2, p, size, flags)
}

/// Hook of `cuMemHostRegister` (v1; same C signature as `_v2`).
///
/// # Safety
/// C ABI entry point with the contract of the real function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemHostRegister(p: *mut c_void, size: usize, flags: c_uint) -> CuResult {
    host_register(&HOST_REGISTER, p, size, flags)
}

/// Hook of `cuMemHostGetDevicePointer_v2`: a hijacked UAR address maps to the shadow page.
///
/// # Safety
/// C ABI entry point with the contract of the real function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemHostGetDevicePointer_v2(
    pdptr: *mut u64,
    p: *mut c_void,
    flags: c_uint,
) -> CuResult {
    let real = HOST_GET_DPTR_V2.get();
    if real.is_null() {
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    if !pdptr.is_null()
        && crate::doorbell::maybe_uar(p as u64, 1)
        && let Some(d) = crate::guarded(None, || crate::doorbell::shadow_device_pointer(p as u64))
    {
        // SAFETY: pdptr is the caller's non-null out pointer.
        unsafe { *pdptr = d };
        return CUDA_SUCCESS;
    }
    // SAFETY: the driver's function with the program's arguments.
    unsafe { core::mem::transmute::<*mut c_void, HostGetDptrFn>(real)(pdptr, p, flags) }
}

/// Hook of `cuMemHostUnregister`: ends a hijack (DOCA's probe registers and unregisters at once).
///
/// # Safety
/// C ABI entry point with the contract of the real function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemHostUnregister(p: *mut c_void) -> CuResult {
    let real = HOST_UNREGISTER.get();
    if real.is_null() {
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    if crate::doorbell::maybe_uar(p as u64, 1)
        && crate::guarded(false, || crate::doorbell::on_host_unregister(p as u64))
    {
        return CUDA_SUCCESS;
    }
    // SAFETY: the driver's function with the program's argument.
    unsafe { core::mem::transmute::<*mut c_void, HostUnregisterFn>(real)(p) }
}

/// Hook of `cuMemGetHandleForAddressRange`: remembers dma-buf fd -> device range, so that
/// `mlx5dv_devx_umem_reg_ex` on that fd can be resolved to GPU memory.
///
/// # Safety
/// C ABI entry point with the contract of the real function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cuMemGetHandleForAddressRange(
    handle: *mut c_void,
    dptr: u64,
    size: usize,
    handle_type: c_int,
    flags: u64,
) -> CuResult {
    let real = GET_HANDLE.get();
    if real.is_null() {
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    // SAFETY: the driver's function with the program's arguments.
    let r = unsafe {
        core::mem::transmute::<*mut c_void, GetHandleFn>(real)(
            handle,
            dptr,
            size,
            handle_type,
            flags,
        )
    };
    if r == CUDA_SUCCESS && handle_type == CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD && !handle.is_null()
    {
        crate::guarded((), || {
            // SAFETY: for DMA_BUF_FD the driver stored an int fd at `handle`.
            let fd = unsafe { *(handle as *const c_int) };
            if let Ok(mut m) = DMABUF.lock() {
                m.retain(|e| e.0 != fd);
                m.push((fd, dptr, size as u64));
            }
        });
    }
    r
}

/// Hooks the dlsym wrapper hands out for libcuda lookups.
pub fn hooks() -> Vec<Hook> {
    macro_rules! h {
        ($($f:ident => $slot:ident),* $(,)?) => {
            vec![$(Hook {
                name: stringify!($f).as_bytes(),
                layer: Layer::Cuda,
                hook: $f as *const c_void,
                real: &$slot,
            }),*]
        };
    }
    h![
        cuGetProcAddress => GPA,
        cuGetProcAddress_v2 => GPA_V2,
        cuMemHostRegister => HOST_REGISTER,
        cuMemHostRegister_v2 => HOST_REGISTER_V2,
        cuMemHostGetDevicePointer_v2 => HOST_GET_DPTR_V2,
        cuMemHostUnregister => HOST_UNREGISTER,
        cuMemGetHandleForAddressRange => GET_HANDLE,
    ]
}

// ---------------------------------------------------------------------------------------------
// sigmatop's own driver calls: always the real functions.

type CtxGetFn = unsafe extern "C" fn(*mut *mut c_void) -> CuResult;
type CtxSetFn = unsafe extern "C" fn(*mut c_void) -> CuResult;
type StreamCreateFn = unsafe extern "C" fn(*mut *mut c_void, c_uint) -> CuResult;
type StreamSyncFn = unsafe extern "C" fn(*mut c_void) -> CuResult;
type MemcpyDtoHAsyncFn = unsafe extern "C" fn(*mut c_void, u64, usize, *mut c_void) -> CuResult;
type PointerGetAttributeFn = unsafe extern "C" fn(*mut c_void, c_int, u64) -> CuResult;

/// The real driver entry points sigmatop calls itself.
pub struct Driver {
    ctx_get_current: CtxGetFn,
    ctx_set_current: CtxSetFn,
    stream_create: StreamCreateFn,
    stream_sync: StreamSyncFn,
    memcpy_dtoh_async: MemcpyDtoHAsyncFn,
    pointer_get_attribute: PointerGetAttributeFn,
    pub host_register: HostRegisterFn,
    pub host_get_dptr: HostGetDptrFn,
}

fn libcuda_sym(name: &CStr) -> *mut c_void {
    for so in SONAMES {
        // SAFETY: RTLD_NOLOAD never loads anything; it returns a handle to a loaded libcuda.
        let h = unsafe { libc::dlopen(so.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
        if !h.is_null() {
            // SAFETY: h is a live handle; real_dlsym bypasses sigmatop's own wrapper.
            let p = unsafe { crate::dl::real_dlsym(h, name.as_ptr()) };
            // SAFETY: balances dlopen; libcuda stays loaded by the program's own reference.
            unsafe { libc::dlclose(h) };
            if !p.is_null() {
                return p;
            }
        }
    }
    core::ptr::null_mut()
}

static DRIVER: OnceLock<Driver> = OnceLock::new();

/// The real driver, when libcuda is loaded in this process (retried until it is).
pub fn driver() -> Option<&'static Driver> {
    if let Some(d) = DRIVER.get() {
        return Some(d);
    }
    let d = resolve_driver()?;
    Some(DRIVER.get_or_init(|| d))
}

fn resolve_driver() -> Option<Driver> {
    {
        {
            let get = |slot: &RealFn, name: &CStr| {
                let p = slot.get();
                if p.is_null() { libcuda_sym(name) } else { p }
            };
            let names: [&CStr; 6] = [
                c"cuCtxGetCurrent",
                c"cuCtxSetCurrent",
                c"cuStreamCreate",
                c"cuStreamSynchronize",
                c"cuMemcpyDtoHAsync_v2",
                c"cuPointerGetAttribute",
            ];
            let mut ptrs = [core::ptr::null_mut::<c_void>(); 6];
            for (p, n) in ptrs.iter_mut().zip(names) {
                *p = libcuda_sym(n);
                if p.is_null() {
                    return None;
                }
            }
            let reg = get(&HOST_REGISTER_V2, c"cuMemHostRegister_v2");
            let dptr = get(&HOST_GET_DPTR_V2, c"cuMemHostGetDevicePointer_v2");
            if reg.is_null() || dptr.is_null() {
                return None;
            }
            // SAFETY: each pointer is libcuda's definition of the named function, whose C
            // signature (cuda.h) is the type it is transmuted to.
            unsafe {
                Some(Driver {
                    ctx_get_current: core::mem::transmute::<*mut c_void, CtxGetFn>(ptrs[0]),
                    ctx_set_current: core::mem::transmute::<*mut c_void, CtxSetFn>(ptrs[1]),
                    stream_create: core::mem::transmute::<*mut c_void, StreamCreateFn>(ptrs[2]),
                    stream_sync: core::mem::transmute::<*mut c_void, StreamSyncFn>(ptrs[3]),
                    memcpy_dtoh_async: core::mem::transmute::<*mut c_void, MemcpyDtoHAsyncFn>(
                        ptrs[4],
                    ),
                    pointer_get_attribute: core::mem::transmute::<*mut c_void, PointerGetAttributeFn>(
                        ptrs[5],
                    ),
                    host_register: core::mem::transmute::<*mut c_void, HostRegisterFn>(reg),
                    host_get_dptr: core::mem::transmute::<*mut c_void, HostGetDptrFn>(dptr),
                })
            }
        }
    }
}

/// A CUDA context handle, movable to the poller thread.
#[derive(Clone, Copy, Debug)]
pub struct Ctx(pub *mut c_void);
// SAFETY: a CUcontext is a process-wide handle usable from any thread.
unsafe impl Send for Ctx {}
// SAFETY: as above.
unsafe impl Sync for Ctx {}

/// A CUDA stream owned by sigmatop.
#[derive(Clone, Copy, Debug)]
pub struct Stream(pub *mut c_void);
// SAFETY: a CUstream is a process-wide handle usable from any thread.
unsafe impl Send for Stream {}

impl Driver {
    pub fn current_ctx(&self) -> Option<Ctx> {
        let mut c = core::ptr::null_mut();
        // SAFETY: valid out pointer.
        let r = unsafe { (self.ctx_get_current)(&mut c) };
        (r == CUDA_SUCCESS && !c.is_null()).then_some(Ctx(c))
    }
    pub fn set_ctx(&self, c: Ctx) -> bool {
        // SAFETY: a context handle the driver gave us.
        unsafe { (self.ctx_set_current)(c.0) == CUDA_SUCCESS }
    }
    /// A non-blocking stream (no implicit sync with the legacy default stream).
    pub fn stream(&self) -> Option<Stream> {
        let mut s = core::ptr::null_mut();
        // SAFETY: valid out pointer.
        let r = unsafe { (self.stream_create)(&mut s, CU_STREAM_NON_BLOCKING) };
        (r == CUDA_SUCCESS).then_some(Stream(s))
    }
    pub fn sync(&self, s: Stream) -> bool {
        // SAFETY: a stream this module created.
        unsafe { (self.stream_sync)(s.0) == CUDA_SUCCESS }
    }
    /// Enqueues a device-to-host copy.
    ///
    /// # Safety
    /// `dst` must stay valid (and pinned for a true async copy) until the stream is synced.
    pub unsafe fn dtoh_async(&self, dst: *mut u8, src: u64, len: usize, s: Stream) -> bool {
        // SAFETY: caller's contract.
        unsafe { (self.memcpy_dtoh_async)(dst as *mut c_void, src, len, s.0) == CUDA_SUCCESS }
    }
    /// The device ordinal owning `addr` when it is device memory, else None.
    pub fn device_of(&self, addr: u64) -> Option<u32> {
        let mut mt: c_uint = 0;
        // SAFETY: out pointer of the attribute's type (unsigned int).
        let r = unsafe {
            (self.pointer_get_attribute)(
                &mut mt as *mut c_uint as *mut c_void,
                CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                addr,
            )
        };
        if r != CUDA_SUCCESS || mt != CU_MEMORYTYPE_DEVICE {
            return None;
        }
        let mut dev: c_int = 0;
        // SAFETY: out pointer of the attribute's type (int).
        let r = unsafe {
            (self.pointer_get_attribute)(
                &mut dev as *mut c_int as *mut c_void,
                CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                addr,
            )
        };
        Some(if r == CUDA_SUCCESS { dev as u32 } else { 0 })
    }
}

/// The GPU owning `addr` when it is device memory (None: host memory, unknown, or no libcuda).
pub fn device_of(addr: u64) -> Option<u32> {
    if addr == 0 {
        return None;
    }
    driver()?.device_of(addr)
}
