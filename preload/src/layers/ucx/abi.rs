//! The UCX 1.13 ABI sigmatop reads (ucp.h, ucp_def.h): parameter structs, datatypes, status
//! values, and the bytes and outcome of a call computed from them.

use core::ffi::{c_int, c_uint, c_void};

use crate::runtime::thread::Outcome;

pub type Ptr = *mut c_void;
/// `ucs_status_t` (a C enum).
pub type Status = c_int;

pub const UCS_ERR_UNSUPPORTED: Status = -22;
/// `UCS_ERR_LAST`: status pointers at or above `(uintptr_t)UCS_ERR_LAST` are errors.
const UCS_ERR_LAST: isize = -100;

/// `UCS_STATUS_PTR(UCS_ERR_UNSUPPORTED)`: what a call returns when libucp is missing.
#[inline(always)]
pub fn unsupported_ptr() -> Ptr {
    UCS_ERR_UNSUPPORTED as isize as Ptr
}

// ucp_request_param_t::op_attr_mask bits.
pub const OP_ATTR_FIELD_REQUEST: u32 = 1 << 0;
pub const OP_ATTR_FIELD_CALLBACK: u32 = 1 << 1;
pub const OP_ATTR_FIELD_DATATYPE: u32 = 1 << 3;
pub const OP_ATTR_FIELD_RECV_INFO: u32 = 1 << 7;
pub const OP_ATTR_FLAG_NO_IMM_CMPL: u32 = 1 << 16;

/// `UCS_OK`: a completion that succeeded.
pub const UCS_OK: Status = 0;
/// `UCS_ERR_CANCELED`: a request completed by `ucp_request_cancel`.
pub const UCS_ERR_CANCELED: Status = -16;

// ucp_am_handler_param_t::field_mask bits, and the AM receive attribute of a rendezvous message.
pub const AM_HANDLER_PARAM_FIELD_CB: u64 = 1 << 2;
pub const AM_HANDLER_PARAM_FIELD_ARG: u64 = 1 << 3;

// ucp_datatype_t classes (ucp.h).
pub const DT_SHIFT: u32 = 3;
const DT_CLASS_MASK: u64 = (1 << DT_SHIFT) - 1;
const DT_CONTIG: u64 = 0;
pub const DT_IOV: u64 = 2;
/// `ucp_dt_make_contig(1)`, the default datatype.
pub const DT_BYTES: u64 = 1 << DT_SHIFT;
/// Longest iov list whose lengths are summed (the rest of a longer list is not counted).
const IOV_WALK_MAX: usize = 1 << 16;

// ucp_ep_params_t::field_mask bits.
pub const EP_PARAM_FIELD_REMOTE_ADDRESS: u64 = 1 << 0;
pub const EP_PARAM_FIELD_ERR_HANDLER: u64 = 1 << 2;
pub const EP_PARAM_FIELD_SOCK_ADDR: u64 = 1 << 4;
pub const EP_PARAM_FIELD_CONN_REQUEST: u64 = 1 << 6;
// ucp_worker_attr_t::field_mask bit.
pub const WORKER_ATTR_FIELD_ADDRESS: u64 = 1 << 1;

/// `ucp_request_param_t` (ucp.h, UCX 1.13): 72 bytes. A program sets only the fields its
/// `op_attr_mask` names; the others may hold anything, so sigmatop copies the struct as bytes and
/// reads only named fields.
#[repr(C)]
pub struct RequestParam {
    pub op_attr_mask: u32,
    pub flags: u32,
    pub request: Ptr,
    /// The completion callback (a union of the send / receive callback types).
    pub cb: Ptr,
    pub datatype: u64,
    pub user_data: Ptr,
    pub reply_buffer: Ptr,
    pub memory_type: c_int,
    /// `size_t *length` or `ucp_tag_recv_info_t *tag_info`.
    pub recv_info: Ptr,
    pub memh: Ptr,
}

/// `ucp_tag_recv_info_t`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct TagRecvInfo {
    pub sender_tag: u64,
    pub length: usize,
}

/// `ucp_am_handler_param_t` (ucp.h, UCX 1.13): 32 bytes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct AmHandlerParam {
    pub field_mask: u64,
    pub id: c_uint,
    pub flags: u32,
    pub cb: Ptr,
    pub arg: Ptr,
}

/// `ucs_sock_addr_t`.
#[repr(C)]
pub struct SockAddr {
    pub addr: *const libc::sockaddr,
    pub addrlen: libc::socklen_t,
}

/// `ucp_ep_params_t` (ucp_def.h, UCX 1.13): 104 bytes.
#[repr(C)]
pub struct EpParams {
    pub field_mask: u64,
    pub address: *const u8,
    err_mode: c_int,
    /// `ucp_err_handler_t`: the callback and its argument.
    pub err_handler: [Ptr; 2],
    user_data: Ptr,
    flags: c_uint,
    pub sockaddr: SockAddr,
    conn_request: Ptr,
    name: *const libc::c_char,
    local_sockaddr: SockAddr,
}

/// The leading fields of `ucp_worker_attr_t` (ucp.h, UCX 1.13) up to the address.
#[repr(C)]
pub struct WorkerAttrHead {
    pub field_mask: u64,
    thread_mode: c_int,
    address_flags: u32,
    pub address: *const u8,
    pub address_length: usize,
}

const _: () = assert!(core::mem::size_of::<RequestParam>() == 72);
const _: () = assert!(core::mem::offset_of!(RequestParam, recv_info) == 56);
const _: () = assert!(core::mem::size_of::<AmHandlerParam>() == 32);
const _: () = assert!(core::mem::size_of::<EpParams>() == 104);
const _: () = assert!(core::mem::offset_of!(EpParams, sockaddr) == 56);
// The field ends `ep_error::FIELD_END` copies up to (UCX 1.13's ucp_ep_params_t).
const _: () = assert!(core::mem::offset_of!(EpParams, err_mode) == 16);
const _: () = assert!(core::mem::offset_of!(EpParams, err_handler) == 24);
const _: () = assert!(core::mem::offset_of!(EpParams, user_data) == 40);
const _: () = assert!(core::mem::offset_of!(EpParams, flags) == 48);
const _: () = assert!(core::mem::offset_of!(EpParams, conn_request) == 72);
const _: () = assert!(core::mem::offset_of!(EpParams, name) == 80);
const _: () = assert!(core::mem::offset_of!(EpParams, local_sockaddr) == 88);
const _: () = assert!(core::mem::offset_of!(WorkerAttrHead, address_length) == 24);

/// What a UCP call's result says about the operation.
pub trait UcsResult: Copy {
    fn outcome(self) -> Outcome;
}

impl UcsResult for Ptr {
    /// `ucs_status_ptr_t`: NULL completed at once, an error pointer refused, else a request.
    #[inline(always)]
    fn outcome(self) -> Outcome {
        if self.is_null() {
            Outcome::Immediate
        } else if self as usize >= UCS_ERR_LAST as usize {
            Outcome::Refused
        } else {
            Outcome::Ok
        }
    }
}

impl UcsResult for Status {
    /// `ucs_status_t`: UCS_OK completed at once, negative refused, UCS_INPROGRESS posted.
    #[inline(always)]
    fn outcome(self) -> Outcome {
        if self == 0 {
            Outcome::Immediate
        } else if self < 0 {
            Outcome::Refused
        } else {
            Outcome::Ok
        }
    }
}

/// Bytes described by (`buffer`, `count`, `dt`).
///
/// # Safety
/// For an iov datatype `buffer` must point at `count` `ucp_dt_iov_t` (the UCP API contract).
#[inline(always)]
pub unsafe fn dt_bytes(dt: u64, buffer: *const c_void, count: usize) -> u64 {
    match dt & DT_CLASS_MASK {
        DT_CONTIG => (count as u64).wrapping_mul(dt >> DT_SHIFT),
        DT_IOV => {
            // SAFETY: the caller's contract (see above).
            unsafe { iov_bytes(buffer, count) }
        }
        _ => count as u64,
    }
}

/// # Safety
/// `buffer` is null or holds `count` `ucp_dt_iov_t`.
#[cold]
unsafe fn iov_bytes(buffer: *const c_void, count: usize) -> u64 {
    if buffer.is_null() {
        return 0;
    }
    let iov = buffer as *const [usize; 2];
    let mut sum = 0u64;
    for i in 0..count.min(IOV_WALK_MAX) {
        // SAFETY: `buffer` holds `count` ucp_dt_iov_t {void *buffer; size_t length}.
        sum = sum.wrapping_add(unsafe { (*iov.add(i))[1] } as u64);
    }
    sum
}

/// The datatype of an nbx call.
///
/// # Safety
/// `param` is null or points at a valid `ucp_request_param_t`.
#[inline(always)]
unsafe fn param_dt(param: *const RequestParam) -> u64 {
    if param.is_null() {
        return DT_BYTES;
    }
    // SAFETY: valid per the caller.
    let p = unsafe { &*param };
    if p.op_attr_mask & OP_ATTR_FIELD_DATATYPE != 0 {
        p.datatype
    } else {
        DT_BYTES
    }
}

/// Bytes of an nbx call.
///
/// # Safety
/// As `param_dt` and `dt_bytes`.
#[inline(always)]
pub unsafe fn nbx_bytes(param: *const RequestParam, buffer: *const c_void, count: usize) -> u64 {
    // SAFETY: forwarded contract.
    unsafe { dt_bytes(param_dt(param), buffer, count) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datatype_bytes() {
        // SAFETY: contiguous and generic datatypes never read the buffer.
        unsafe {
            assert_eq!(dt_bytes(DT_BYTES, core::ptr::null(), 4096), 4096);
            assert_eq!(dt_bytes(8 << DT_SHIFT, core::ptr::null(), 3), 24);
            assert_eq!(dt_bytes(0x1000 | 7, core::ptr::null(), 5), 5);
        }
        let iov: [[usize; 2]; 3] = [[0, 10], [0, 20], [0, 12]];
        // SAFETY: three valid iov entries.
        let sum = unsafe { dt_bytes(DT_IOV, iov.as_ptr() as *const c_void, 3) };
        assert_eq!(sum, 42);
    }

    #[test]
    fn outcomes() {
        assert_eq!(
            core::ptr::null_mut::<c_void>().outcome(),
            Outcome::Immediate
        );
        assert_eq!(unsupported_ptr().outcome(), Outcome::Refused);
        assert_eq!((0x1000 as Ptr).outcome(), Outcome::Ok);
        assert_eq!((1 as Status).outcome(), Outcome::Ok);
        assert_eq!((-3 as Status).outcome(), Outcome::Refused);
        assert_eq!((0 as Status).outcome(), Outcome::Immediate);
    }
}
