//! The real CUDA driver entry points sigmatop calls itself (the doorbell poller's copies and
//! syncs, the hijack's shadow-page registration, device lookups of addresses): always the
//! driver's own functions, resolved from the loaded libcuda, never the cuda.rs hooks. (The design
//! card names cudarc for this; its loader resolves symbols with `dlsym`, which this very library
//! interposes, and sigmatop needs ten entry points, so they are resolved directly.)
//!
//! A module of its own so that the doorbell code needs the driver, not the hooks: cuda.rs (the
//! hooks) uses doorbell.rs, doorbell.rs uses this, and nothing here uses either.

use core::ffi::{CStr, c_int, c_uint, c_void};
use std::sync::OnceLock;

use crate::runtime::dl::real_fns;

pub type CuResult = c_int;
pub const CUDA_SUCCESS: CuResult = 0;
pub const CUDA_ERROR_NOT_INITIALIZED: CuResult = 3;
pub const CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED: CuResult = 712;
pub const CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED: CuResult = 713;

pub const CU_MEMHOSTREGISTER_PORTABLE: c_uint = 1;
pub const CU_MEMHOSTREGISTER_DEVICEMAP: c_uint = 2;
pub const CU_MEMHOSTREGISTER_IOMEMORY: c_uint = 4;
const CU_POINTER_ATTRIBUTE_MEMORY_TYPE: c_int = 2;
const CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: c_int = 9;
const CU_MEMORYTYPE_HOST: c_uint = 1;
const CU_MEMORYTYPE_DEVICE: c_uint = 2;
const CU_STREAM_NON_BLOCKING: c_uint = 1;

pub const SONAMES: &[&CStr] = &[c"libcuda.so.1", c"libcuda.so"];

pub type HostRegisterFn = unsafe extern "C" fn(*mut c_void, usize, c_uint) -> CuResult;
pub type HostGetDptrFn = unsafe extern "C" fn(*mut u64, *mut c_void, c_uint) -> CuResult;

real_fns! { SONAMES;
    /// The real `cuMemHostRegister_v2`: the hook's slot, and the driver's registration of
    /// sigmatop's own pages (filled from the program's own lookup when it made one).
    pub HOST_REGISTER_V2: HostRegisterFn = c"cuMemHostRegister_v2";
    /// The real `cuMemHostGetDevicePointer_v2` (as above).
    pub HOST_GET_DPTR_V2: HostGetDptrFn = c"cuMemHostGetDevicePointer_v2";
}

type CtxGetFn = unsafe extern "C" fn(*mut *mut c_void) -> CuResult;
type CtxSetFn = unsafe extern "C" fn(*mut c_void) -> CuResult;
type StreamCreateFn = unsafe extern "C" fn(*mut *mut c_void, c_uint) -> CuResult;
type StreamSyncFn = unsafe extern "C" fn(*mut c_void) -> CuResult;
type MemcpyDtoHAsyncFn = unsafe extern "C" fn(*mut c_void, u64, usize, *mut c_void) -> CuResult;
type PointerGetAttributeFn = unsafe extern "C" fn(*mut c_void, c_int, u64) -> CuResult;
type CtxGetDeviceFn = unsafe extern "C" fn(*mut c_int) -> CuResult;

/// The real driver entry points sigmatop calls itself.
pub struct Driver {
    ctx_get_current: CtxGetFn,
    ctx_set_current: CtxSetFn,
    stream_create: StreamCreateFn,
    stream_sync: StreamSyncFn,
    memcpy_dtoh_async: MemcpyDtoHAsyncFn,
    pointer_get_attribute: PointerGetAttributeFn,
    /// `cuCtxGetDevice` (optional: only the GPU of host-resident queues needs it).
    ctx_get_device: Option<CtxGetDeviceFn>,
    pub host_register: HostRegisterFn,
    pub host_get_dptr: HostGetDptrFn,
}

fn libcuda_sym(name: &CStr) -> *mut c_void {
    crate::runtime::dl::loaded_symbol(name, SONAMES)
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
    let host_register = HOST_REGISTER_V2.get()?;
    let host_get_dptr = HOST_GET_DPTR_V2.get()?;
    let get_device = libcuda_sym(c"cuCtxGetDevice");
    // SAFETY: each pointer is libcuda's definition of the named function, whose C signature
    // (cuda.h) is the type it is transmuted to.
    unsafe {
        Some(Driver {
            ctx_get_current: core::mem::transmute::<*mut c_void, CtxGetFn>(ptrs[0]),
            ctx_set_current: core::mem::transmute::<*mut c_void, CtxSetFn>(ptrs[1]),
            stream_create: core::mem::transmute::<*mut c_void, StreamCreateFn>(ptrs[2]),
            stream_sync: core::mem::transmute::<*mut c_void, StreamSyncFn>(ptrs[3]),
            memcpy_dtoh_async: core::mem::transmute::<*mut c_void, MemcpyDtoHAsyncFn>(ptrs[4]),
            pointer_get_attribute: core::mem::transmute::<*mut c_void, PointerGetAttributeFn>(
                ptrs[5],
            ),
            ctx_get_device: (!get_device.is_null())
                .then(|| core::mem::transmute::<*mut c_void, CtxGetDeviceFn>(get_device)),
            host_register,
            host_get_dptr,
        })
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
    /// True when `addr` is host memory the driver knows (pinned or registered with CUDA, so a
    /// GPU can reach it), as NVSHMEM's host-resident NIC queues are.
    pub fn is_mapped_host(&self, addr: u64) -> bool {
        self.memory_type(addr) == Some(CU_MEMORYTYPE_HOST)
    }

    /// `CU_POINTER_ATTRIBUTE_MEMORY_TYPE` of `addr` (None: the driver does not know it).
    fn memory_type(&self, addr: u64) -> Option<c_uint> {
        let mut mt: c_uint = 0;
        // SAFETY: out pointer of the attribute's type (unsigned int).
        let r = unsafe {
            (self.pointer_get_attribute)(
                &mut mt as *mut c_uint as *mut c_void,
                CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                addr,
            )
        };
        (r == CUDA_SUCCESS).then_some(mt)
    }

    /// The device of the calling thread's current CUDA context.
    pub fn current_device(&self) -> Option<u32> {
        let f = self.ctx_get_device?;
        self.current_ctx()?;
        let mut dev: c_int = -1;
        // SAFETY: out pointer of the function's type (CUdevice, an int).
        let r = unsafe { f(&mut dev) };
        (r == CUDA_SUCCESS && dev >= 0).then_some(dev as u32)
    }

    /// The device ordinal owning `addr` when it is device memory, else None.
    pub fn device_of(&self, addr: u64) -> Option<u32> {
        if self.memory_type(addr) != Some(CU_MEMORYTYPE_DEVICE) {
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

/// True when `addr` is host memory registered with (or allocated by) the CUDA driver.
pub fn is_mapped_host(addr: u64) -> bool {
    addr != 0 && driver().is_some_and(|d| d.is_mapped_host(addr))
}

/// The device of the calling thread's current CUDA context (None: none, or no libcuda).
pub fn current_device() -> Option<u32> {
    driver()?.current_device()
}

/// The GPU owning `addr` when it is device memory (None: host memory, unknown, or no libcuda).
pub fn device_of(addr: u64) -> Option<u32> {
    if addr == 0 {
        return None;
    }
    driver()?.device_of(addr)
}
