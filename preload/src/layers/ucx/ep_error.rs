//! Endpoint failures: UCX tells a program that an endpoint failed (its peer is gone, a timeout)
//! through the error handler the program gave `ucp_ep_create`. sigmatop gives UCX a trampoline of
//! its own in that handler's place (one per distinct program handler, `SLOTS` of them), which marks
//! the endpoint `failed: <UCX's words>`, counts one error on it (`Op::UcxEpError`) and calls the
//! program's handler with the same arguments. The argument UCX passes (the handler's `arg`, or the
//! endpoint's `user_data`) is not touched: the endpoint is found by its handle. Control path only.

use core::ffi::{CStr, c_char};
use core::sync::atomic::{AtomicUsize, Ordering};

use sigmatop::event::{Layer, Op, UNATTRIBUTED_EP};

use super::abi::{EP_PARAM_FIELD_ERR_HANDLER, EpParams, Ptr, Status};
use crate::interpose::hook;

type ErrHandler = unsafe extern "C" fn(Ptr, Ptr, Status);
type StatusString = unsafe extern "C" fn(Status) -> *const c_char;

/// Distinct program handlers wrapped; a program with more keeps its further ones unwrapped.
const SLOTS: usize = 8;
static PROGRAM: [AtomicUsize; SLOTS] = [const { AtomicUsize::new(0) }; SLOTS];

/// Where each field of `ucp_ep_params_t` (UCX 1.13) ends, by its `field_mask` bit: a copy takes
/// the program's struct up to the end of the last field it set, never past it.
const FIELD_END: [usize; 9] = [16, 20, 40, 48, 72, 52, 80, 88, 104];

/// sigmatop's handler of slot `I`: notes the failure, then calls the program's.
unsafe extern "C" fn trampoline<const I: usize>(arg: Ptr, ep: Ptr, status: Status) {
    note(ep, status);
    let f = PROGRAM[I].load(Ordering::Acquire);
    if f != 0 {
        // SAFETY: `f` is the program's `ucp_err_handler_cb_t`, stored by `slot_of`.
        unsafe { core::mem::transmute::<usize, ErrHandler>(f)(arg, ep, status) }
    }
}

static TRAMPOLINES: [ErrHandler; SLOTS] = trampolines!(trampoline as ErrHandler; 0 1 2 3 4 5 6 7);

/// The endpoint `ep` failed with `status`: its state says so, and one error is counted on it.
fn note(ep: Ptr, status: Status) {
    if !crate::runtime::config::layer_enabled(Layer::Ucx) {
        return;
    }
    hook::guarded((), || {
        let id = crate::runtime::registry::lookup(ep as usize);
        if id == UNATTRIBUTED_EP {
            return;
        }
        crate::runtime::registry::update(id, &format!("failed: {}", status_text(status)), None);
        if let Some(ts) = crate::runtime::thread::current() {
            ts.failed(id, Op::UcxEpError);
        }
    });
}

/// UCX's own words for `status` (`ucs_status_string`).
fn status_text(status: Status) -> String {
    let f = crate::runtime::dl::loaded_symbol(c"ucs_status_string", &[c"libucs.so.0"]);
    if !f.is_null() {
        // SAFETY: libucs's `const char *ucs_status_string(ucs_status_t)`, which returns a static
        // string.
        let s = unsafe { core::mem::transmute::<*mut core::ffi::c_void, StatusString>(f)(status) };
        if !s.is_null() {
            // SAFETY: a NUL-terminated static string of libucs.
            return unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned();
        }
    }
    format!("UCX status {status}")
}

/// The slot holding handler `cb`, taking a free one for a new handler.
fn slot_of(cb: usize) -> Option<usize> {
    for (i, s) in PROGRAM.iter().enumerate() {
        match s.compare_exchange(0, cb, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return Some(i),
            Err(v) if v == cb => return Some(i),
            Err(_) => {}
        }
    }
    None
}

/// The parameters to give UCX in place of the program's `params`: a copy whose error handler is a
/// trampoline. None (the program's are used as they are) when it set no handler, set a field
/// this layout does not know (a newer UCX's), or every slot holds another handler.
///
/// # Safety
/// `params` is the program's valid `ucp_ep_params_t`: its fields are read only where
/// `field_mask` says they are set.
pub unsafe fn wrap(params: *const EpParams) -> Option<EpParams> {
    // SAFETY: field_mask is the struct's first field, always present.
    let mask = unsafe { (*params).field_mask };
    if mask & EP_PARAM_FIELD_ERR_HANDLER == 0 || mask >> FIELD_END.len() != 0 {
        return None;
    }
    // SAFETY: the program set the handler (its bit is in field_mask).
    let cb = unsafe { (*params).err_handler[0] } as usize;
    if cb == 0 || TRAMPOLINES.iter().any(|t| *t as usize == cb) {
        return None;
    }
    let end = (0..FIELD_END.len())
        .filter(|b| mask & 1 << b != 0)
        .map(|b| FIELD_END[b])
        .max()?;
    let slot = slot_of(cb)?;
    // SAFETY: an all-zero ucp_ep_params_t is valid (null pointers, zero numbers).
    let mut copy: EpParams = unsafe { core::mem::zeroed() };
    // SAFETY: the program's struct holds at least the fields it set, which end at `end` ≤ 104
    // bytes (the size of `copy`); the two do not overlap.
    unsafe {
        core::ptr::copy_nonoverlapping(
            params as *const u8,
            &mut copy as *mut EpParams as *mut u8,
            end,
        );
    }
    copy.err_handler[0] = TRAMPOLINES[slot] as Ptr;
    Some(copy)
}
