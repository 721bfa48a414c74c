//! The libfabric 1.17 ABI (rdma/fabric.h, fi_domain.h, fi_endpoint.h, fi_rma.h, fi_tagged.h,
//! fi_eq.h, fi_cm.h) sigmatop reads and writes. Function pointers are Option<fn> so that a
//! provider's NULL slot stays representable.

use core::ffi::{c_char, c_int, c_void};

pub const FI_ENOSYS: c_int = libc::ENOSYS;
pub const FI_EAGAIN: isize = libc::EAGAIN as isize;
pub const FI_INJECT: u64 = 1 << 25;
pub const FI_ENABLE: c_int = 6;
pub const FI_CLASS_AV: usize = 11;
pub const FI_EP_MSG: u32 = 1;
pub const FI_ADDR_UNSPEC: u64 = u64::MAX;
pub const FI_CLASS_CQ: usize = 14;
/// Completion and bind flags (fabric.h).
pub const FI_TAGGED: u64 = 1 << 3;
pub const FI_RECV: u64 = 1 << 10;
/// `enum fi_cq_format` (fi_eq.h).
pub const FI_CQ_FORMAT_CONTEXT: u32 = 1;
pub const FI_CQ_FORMAT_MSG: u32 = 2;
pub const FI_CQ_FORMAT_DATA: u32 = 3;
pub const FI_CQ_FORMAT_TAGGED: u32 = 4;

/// `struct fi_cq_attr` (fi_eq.h).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct FiCqAttr {
    pub size: usize,
    pub flags: u64,
    pub format: u32,
    pub wait_obj: u32,
    pub signaling_vector: c_int,
    pub wait_cond: u32,
    pub wait_set: *mut c_void,
}

/// `struct fi_cq_msg_entry`: the prefix of the msg, data and tagged formats.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct FiCqMsgEntry {
    pub op_context: *mut c_void,
    pub flags: u64,
    pub len: usize,
}

/// The leading fields of `struct fi_cq_err_entry`.
#[repr(C)]
pub struct FiCqErrHead {
    pub op_context: *mut c_void,
    pub flags: u64,
    pub len: usize,
    pub buf: *mut c_void,
    pub data: u64,
    pub tag: u64,
    pub olen: usize,
    /// The error, a positive errno (`FI_ECANCELED`: the operation was cancelled).
    pub err: c_int,
}

/// `FI_ECANCELED` (errno's ECANCELED): a cancelled operation's error entry.
pub const FI_ECANCELED: c_int = libc::ECANCELED;
const _: () = assert!(core::mem::offset_of!(FiCqErrHead, err) == 56);

const _: () = assert!(core::mem::size_of::<FiCqAttr>() == 40);
const _: () = assert!(core::mem::size_of::<FiCqMsgEntry>() == 24);

/// Bytes of one completion entry of `format` (0: unknown).
pub fn cq_entry_size(format: u32) -> usize {
    match format {
        FI_CQ_FORMAT_CONTEXT => 8,
        FI_CQ_FORMAT_MSG => 24,
        FI_CQ_FORMAT_DATA => 40,
        FI_CQ_FORMAT_TAGGED => 48,
        _ => 0,
    }
}

/// A provider's ops table (a `size_t size` and function pointers).
///
/// # Safety
/// Implemented only for `repr(C)` tables of a `usize` and `Option<fn>`s, for which all-zero bytes
/// are valid (size 0, every slot None).
pub unsafe trait OpsTable: Copy {}

#[repr(C)]
pub struct Fid {
    pub fclass: usize,
    pub context: *mut c_void,
    pub ops: *mut FiOps,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct FiOps {
    pub size: usize,
    pub close: Option<unsafe extern "C" fn(*mut Fid) -> c_int>,
    pub bind: Option<unsafe extern "C" fn(*mut Fid, *mut Fid, u64) -> c_int>,
    pub control: Option<unsafe extern "C" fn(*mut Fid, c_int, *mut c_void) -> c_int>,
    pub ops_open: Option<
        unsafe extern "C" fn(*mut Fid, *const c_char, u64, *mut *mut c_void, *mut c_void) -> c_int,
    >,
    pub tostr: Option<unsafe extern "C" fn(*const Fid, *mut c_char, usize) -> c_int>,
    pub ops_set: Option<
        unsafe extern "C" fn(*mut Fid, *const c_char, u64, *mut c_void, *mut c_void) -> c_int,
    >,
}

#[repr(C)]
pub struct FiFabricAttr {
    pub fabric: *mut FidFabric,
    pub name: *mut c_char,
    pub prov_name: *mut c_char,
    pub prov_version: u32,
    pub api_version: u32,
}

#[repr(C)]
pub struct FiEpAttr {
    pub ep_type: u32,
}

#[repr(C)]
pub struct FiInfo {
    pub next: *mut FiInfo,
    pub caps: u64,
    pub mode: u64,
    pub addr_format: u32,
    pub src_addrlen: usize,
    pub dest_addrlen: usize,
    pub src_addr: *mut c_void,
    pub dest_addr: *mut c_void,
    pub handle: *mut Fid,
    pub tx_attr: *mut c_void,
    pub rx_attr: *mut c_void,
    pub ep_attr: *mut FiEpAttr,
    pub domain_attr: *mut c_void,
    pub fabric_attr: *mut FiFabricAttr,
    pub nic: *mut c_void,
}

#[repr(C)]
pub struct FidFabric {
    pub fid: Fid,
    pub ops: *mut FiOpsFabric,
    pub api_version: u32,
}

pub type PassiveEpFn =
    unsafe extern "C" fn(*mut FidFabric, *mut FiInfo, *mut *mut FidPep, *mut c_void) -> c_int;
pub type DomainFn =
    unsafe extern "C" fn(*mut FidFabric, *mut FiInfo, *mut *mut FidDomain, *mut c_void) -> c_int;
pub type Domain2Fn = unsafe extern "C" fn(
    *mut FidFabric,
    *mut FiInfo,
    *mut *mut FidDomain,
    u64,
    *mut c_void,
) -> c_int;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct FiOpsFabric {
    pub size: usize,
    pub domain: Option<DomainFn>,
    pub passive_ep: Option<PassiveEpFn>,
    pub eq_open: Option<
        unsafe extern "C" fn(*mut FidFabric, *mut c_void, *mut *mut c_void, *mut c_void) -> c_int,
    >,
    pub wait_open:
        Option<unsafe extern "C" fn(*mut FidFabric, *mut c_void, *mut *mut c_void) -> c_int>,
    pub trywait: Option<unsafe extern "C" fn(*mut FidFabric, *mut *mut Fid, c_int) -> c_int>,
    pub domain2: Option<Domain2Fn>,
}

#[repr(C)]
pub struct FidDomain {
    pub fid: Fid,
    pub ops: *mut FiOpsDomain,
    pub mr: *mut c_void,
}

pub type AvOpenFn =
    unsafe extern "C" fn(*mut FidDomain, *mut c_void, *mut *mut FidAv, *mut c_void) -> c_int;
pub type CqOpenFn =
    unsafe extern "C" fn(*mut FidDomain, *mut c_void, *mut *mut FidCq, *mut c_void) -> c_int;
pub type EndpointFn =
    unsafe extern "C" fn(*mut FidDomain, *mut FiInfo, *mut *mut FidEp, *mut c_void) -> c_int;
pub type Endpoint2Fn =
    unsafe extern "C" fn(*mut FidDomain, *mut FiInfo, *mut *mut FidEp, u64, *mut c_void) -> c_int;
pub type AnyFn = unsafe extern "C" fn();

#[repr(C)]
#[derive(Clone, Copy)]
pub struct FiOpsDomain {
    pub size: usize,
    pub av_open: Option<AvOpenFn>,
    pub cq_open: Option<CqOpenFn>,
    pub endpoint: Option<EndpointFn>,
    pub scalable_ep: Option<AnyFn>,
    pub cntr_open: Option<AnyFn>,
    pub poll_open: Option<AnyFn>,
    pub stx_ctx: Option<AnyFn>,
    pub srx_ctx: Option<AnyFn>,
    pub query_atomic: Option<AnyFn>,
    pub query_collective: Option<AnyFn>,
    pub endpoint2: Option<Endpoint2Fn>,
}

#[repr(C)]
pub struct FidEp {
    pub fid: Fid,
    pub ops: *mut c_void,
    pub cm: *mut FiOpsCm,
    pub msg: *mut FiOpsMsg,
    pub rma: *mut FiOpsRma,
    pub tagged: *mut FiOpsTagged,
    pub atomic: *mut c_void,
    pub collective: *mut c_void,
}

#[repr(C)]
pub struct FidPep {
    pub fid: Fid,
    pub ops: *mut c_void,
    pub cm: *mut FiOpsCm,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct FiOpsCm {
    pub size: usize,
    pub setname: Option<AnyFn>,
    pub getname: Option<unsafe extern "C" fn(*mut Fid, *mut c_void, *mut usize) -> c_int>,
    pub getpeer: Option<AnyFn>,
    pub connect:
        Option<unsafe extern "C" fn(*mut FidEp, *const c_void, *const c_void, usize) -> c_int>,
    pub listen: Option<AnyFn>,
    pub accept: Option<unsafe extern "C" fn(*mut FidEp, *const c_void, usize) -> c_int>,
    pub reject: Option<AnyFn>,
    pub shutdown: Option<AnyFn>,
    pub join: Option<AnyFn>,
}

#[repr(C)]
pub struct IoVec {
    pub base: *mut c_void,
    pub len: usize,
}

#[repr(C)]
pub struct FiMsg {
    pub msg_iov: *const IoVec,
    pub desc: *mut *mut c_void,
    pub iov_count: usize,
    pub addr: u64,
    pub context: *mut c_void,
    pub data: u64,
}

#[repr(C)]
pub struct FiRmaIov {
    pub addr: u64,
    pub len: usize,
    pub key: u64,
}

#[repr(C)]
pub struct FiMsgRma {
    pub msg_iov: *const IoVec,
    pub desc: *mut *mut c_void,
    pub iov_count: usize,
    pub addr: u64,
    pub rma_iov: *const FiRmaIov,
    pub rma_iov_count: usize,
    pub context: *mut c_void,
    pub data: u64,
}

#[repr(C)]
pub struct FiMsgTagged {
    pub msg_iov: *const IoVec,
    pub desc: *mut *mut c_void,
    pub iov_count: usize,
    pub addr: u64,
    pub tag: u64,
    pub ignore: u64,
    pub context: *mut c_void,
    pub data: u64,
}

pub type Ep = *mut FidEp;
pub type Buf = *const c_void;
pub type Desc = *mut c_void;
pub type Descs = *mut *mut c_void;
pub type Ctx = *mut c_void;
pub type Iov = *const IoVec;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct FiOpsMsg {
    pub size: usize,
    pub recv: Option<unsafe extern "C" fn(Ep, *mut c_void, usize, Desc, u64, Ctx) -> isize>,
    pub recvv: Option<unsafe extern "C" fn(Ep, Iov, Descs, usize, u64, Ctx) -> isize>,
    pub recvmsg: Option<unsafe extern "C" fn(Ep, *const FiMsg, u64) -> isize>,
    pub send: Option<unsafe extern "C" fn(Ep, Buf, usize, Desc, u64, Ctx) -> isize>,
    pub sendv: Option<unsafe extern "C" fn(Ep, Iov, Descs, usize, u64, Ctx) -> isize>,
    pub sendmsg: Option<unsafe extern "C" fn(Ep, *const FiMsg, u64) -> isize>,
    pub inject: Option<unsafe extern "C" fn(Ep, Buf, usize, u64) -> isize>,
    pub senddata: Option<unsafe extern "C" fn(Ep, Buf, usize, Desc, u64, u64, Ctx) -> isize>,
    pub injectdata: Option<unsafe extern "C" fn(Ep, Buf, usize, u64, u64) -> isize>,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct FiOpsRma {
    pub size: usize,
    pub read:
        Option<unsafe extern "C" fn(Ep, *mut c_void, usize, Desc, u64, u64, u64, Ctx) -> isize>,
    pub readv: Option<unsafe extern "C" fn(Ep, Iov, Descs, usize, u64, u64, u64, Ctx) -> isize>,
    pub readmsg: Option<unsafe extern "C" fn(Ep, *const FiMsgRma, u64) -> isize>,
    pub write: Option<unsafe extern "C" fn(Ep, Buf, usize, Desc, u64, u64, u64, Ctx) -> isize>,
    pub writev: Option<unsafe extern "C" fn(Ep, Iov, Descs, usize, u64, u64, u64, Ctx) -> isize>,
    pub writemsg: Option<unsafe extern "C" fn(Ep, *const FiMsgRma, u64) -> isize>,
    pub inject: Option<unsafe extern "C" fn(Ep, Buf, usize, u64, u64, u64) -> isize>,
    pub writedata:
        Option<unsafe extern "C" fn(Ep, Buf, usize, Desc, u64, u64, u64, u64, Ctx) -> isize>,
    pub injectdata: Option<unsafe extern "C" fn(Ep, Buf, usize, u64, u64, u64, u64) -> isize>,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct FiOpsTagged {
    pub size: usize,
    pub recv:
        Option<unsafe extern "C" fn(Ep, *mut c_void, usize, Desc, u64, u64, u64, Ctx) -> isize>,
    pub recvv: Option<unsafe extern "C" fn(Ep, Iov, Descs, usize, u64, u64, u64, Ctx) -> isize>,
    pub recvmsg: Option<unsafe extern "C" fn(Ep, *const FiMsgTagged, u64) -> isize>,
    pub send: Option<unsafe extern "C" fn(Ep, Buf, usize, Desc, u64, u64, Ctx) -> isize>,
    pub sendv: Option<unsafe extern "C" fn(Ep, Iov, Descs, usize, u64, u64, Ctx) -> isize>,
    pub sendmsg: Option<unsafe extern "C" fn(Ep, *const FiMsgTagged, u64) -> isize>,
    pub inject: Option<unsafe extern "C" fn(Ep, Buf, usize, u64, u64) -> isize>,
    pub senddata: Option<unsafe extern "C" fn(Ep, Buf, usize, Desc, u64, u64, u64, Ctx) -> isize>,
    pub injectdata: Option<unsafe extern "C" fn(Ep, Buf, usize, u64, u64, u64) -> isize>,
}

#[repr(C)]
pub struct FidCq {
    pub fid: Fid,
    pub ops: *mut FiOpsCq,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct FiOpsCq {
    pub size: usize,
    pub read: Option<unsafe extern "C" fn(*mut FidCq, *mut c_void, usize) -> isize>,
    pub readfrom: Option<unsafe extern "C" fn(*mut FidCq, *mut c_void, usize, *mut u64) -> isize>,
    pub readerr: Option<unsafe extern "C" fn(*mut FidCq, *mut FiCqErrHead, u64) -> isize>,
    pub sread:
        Option<unsafe extern "C" fn(*mut FidCq, *mut c_void, usize, *const c_void, c_int) -> isize>,
    pub sreadfrom: Option<
        unsafe extern "C" fn(
            *mut FidCq,
            *mut c_void,
            usize,
            *mut u64,
            *const c_void,
            c_int,
        ) -> isize,
    >,
    pub signal: Option<AnyFn>,
    pub strerror: Option<AnyFn>,
}

#[repr(C)]
pub struct FidAv {
    pub fid: Fid,
    pub ops: *mut FiOpsAv,
}

pub type AvLookupFn = unsafe extern "C" fn(*mut FidAv, u64, *mut c_void, *mut usize) -> c_int;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct FiOpsAv {
    pub size: usize,
    pub insert:
        Option<unsafe extern "C" fn(*mut FidAv, *const c_void, usize, *mut u64, u64, Ctx) -> c_int>,
    pub insertsvc: Option<
        unsafe extern "C" fn(*mut FidAv, *const c_char, *const c_char, *mut u64, u64, Ctx) -> c_int,
    >,
    pub insertsym: Option<AnyFn>,
    pub remove: Option<AnyFn>,
    pub lookup: Option<AvLookupFn>,
    pub straddr: Option<AnyFn>,
    pub av_set: Option<AnyFn>,
}

// SAFETY: a usize and Option<fn>s (see `OpsTable`).
unsafe impl OpsTable for FiOps {}
// SAFETY: a usize and Option<fn>s (see `OpsTable`).
unsafe impl OpsTable for FiOpsFabric {}
// SAFETY: a usize and Option<fn>s (see `OpsTable`).
unsafe impl OpsTable for FiOpsDomain {}
// SAFETY: a usize and Option<fn>s (see `OpsTable`).
unsafe impl OpsTable for FiOpsCm {}
// SAFETY: a usize and Option<fn>s (see `OpsTable`).
unsafe impl OpsTable for FiOpsMsg {}
// SAFETY: a usize and Option<fn>s (see `OpsTable`).
unsafe impl OpsTable for FiOpsRma {}
// SAFETY: a usize and Option<fn>s (see `OpsTable`).
unsafe impl OpsTable for FiOpsTagged {}
// SAFETY: a usize and Option<fn>s (see `OpsTable`).
unsafe impl OpsTable for FiOpsCq {}
// SAFETY: a usize and Option<fn>s (see `OpsTable`).
unsafe impl OpsTable for FiOpsAv {}
