//! libfabric layer. libfabric exports only a few functions (`fi_getinfo`, `fi_fabric`, ...): every
//! data-path call (`fi_send`, `fi_write`, `fi_cq_read`, ...) is an inline function in the headers
//! that jumps through a function table of the object. So sigmatop hooks the exported `fi_fabric`
//! and walks down the object tree the program opens, replacing each object's table pointer with a
//! per-object heap copy whose slots are sigmatop's wrappers:
//!
//! ```text
//! fi_fabric ─> fabric->ops (copy: domain, domain2)
//!   domain  ─> domain->ops (copy: endpoint, endpoint2, cq_open, av_open)
//!     endpoint ─> ep->msg, ep->rma, ep->tagged (data path), ep->cm (getname, connect, accept),
//!                 ep->fid.ops (close, bind, control: FI_ENABLE re-checks the tables)
//!     cq       ─> cq->ops (read, readfrom; full mode only), cq->fid.ops (close)
//!     av       ─> av->ops (insert, insertsvc), av->fid.ops (close)
//! ```
//!
//! A provider's tables are shared globals and are never written. Each copy sits in a
//! `Wrapped<T>` with the endpoint's sigmatop id and the provider's table right after it, so a data
//! path wrapper finds both from `ep->msg` (one load) without any lookup. A table is copied only
//! when its `size` says it is no bigger than the table sigmatop knows (libfabric 1.17 headers);
//! only slots the provider filled are wrapped. Anything unexpected (null table, bigger table,
//! failed allocation) leaves the object untouched: its calls go through untraced.
//!
//! Fabrics opened while a sigmatop hook runs (utility providers such as ofi_rxm opening their core
//! "tcp" fabric inside the program's `fi_fabric`) are not wrapped: only what the program itself
//! calls is counted, once.
//!
//! Event fields: `bytes` = payload (`len`, or the sum of the iov lengths, `count` entries);
//! `addr` = remote RMA address (rma), tag (tagged), the destination / source `fi_addr` (msg);
//! `aux` = the `fi_addr` the call names, saturated at 0xffff (0xffff also for FI_ADDR_UNSPEC),
//! so rma and tagged operations on RDM endpoints still map to a peer. Endpoint updates with state
//! "av" map `fi_addr n` (text "fi_addr n") to the hash of the address inserted in the AV, which is
//! the `own_addr_hashes` entry of the process that owns that address. A call that returns an error
//! (-FI_EAGAIN...) is counted with `flags::ERROR` and 0 bytes. Completion polling (full mode) is
//! recorded only when it returns completions (bytes = how many) or a real error: an empty poll
//! (-FI_EAGAIN) is not an event, or a busy-polling program would fill the ring with nothing.

use core::ffi::{c_char, c_int, c_void};
use core::mem::{offset_of, size_of};
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

use sigmatop::event::{EndpointKind, Layer, Op, Peer, flags, fnv1a64};

use crate::dl::{Hook, RealSlot as RealFn};

const FI_ENOSYS: c_int = libc::ENOSYS;
const FI_EAGAIN: isize = libc::EAGAIN as isize;
const FI_INJECT: u64 = 1 << 25;
const FI_ENABLE: c_int = 6;
const FI_CLASS_AV: usize = 11;
const FI_EP_MSG: u32 = 1;
const FI_ADDR_UNSPEC: u64 = u64::MAX;

const FI_SOCKADDR: u32 = 1;
const FI_SOCKADDR_IN: u32 = 2;
const FI_SOCKADDR_IN6: u32 = 3;
const FI_ADDR_STR: u32 = 9;

/// Largest address sigmatop reads (getname / av lookup buffers, string addresses).
const ADDR_MAX: usize = 256;

/// Objects whose tables sigmatop could not wrap (their calls go through untraced). Also counted
/// in `HOOK_FAILURES`, which the drop counters report.
pub static UNWRAPPED: AtomicU64 = AtomicU64::new(0);

#[cold]
fn unwrapped() {
    UNWRAPPED.fetch_add(1, Ordering::Relaxed);
    crate::HOOK_FAILURES.fetch_add(1, Ordering::Relaxed);
}

// ---------------------------------------------------------------------------------------------
// libfabric 1.17 ABI (rdma/fabric.h, fi_domain.h, fi_endpoint.h, fi_rma.h, fi_tagged.h, fi_eq.h,
// fi_cm.h). Function pointers are Option<fn> so that a provider's NULL slot stays representable.
// ---------------------------------------------------------------------------------------------

#[repr(C)]
pub struct Fid {
    fclass: usize,
    context: *mut c_void,
    ops: *mut FiOps,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct FiOps {
    size: usize,
    close: Option<unsafe extern "C" fn(*mut Fid) -> c_int>,
    bind: Option<unsafe extern "C" fn(*mut Fid, *mut Fid, u64) -> c_int>,
    control: Option<unsafe extern "C" fn(*mut Fid, c_int, *mut c_void) -> c_int>,
    ops_open: Option<
        unsafe extern "C" fn(*mut Fid, *const c_char, u64, *mut *mut c_void, *mut c_void) -> c_int,
    >,
    tostr: Option<unsafe extern "C" fn(*const Fid, *mut c_char, usize) -> c_int>,
    ops_set: Option<
        unsafe extern "C" fn(*mut Fid, *const c_char, u64, *mut c_void, *mut c_void) -> c_int,
    >,
}

#[repr(C)]
pub struct FiFabricAttr {
    fabric: *mut FidFabric,
    name: *mut c_char,
    prov_name: *mut c_char,
    prov_version: u32,
    api_version: u32,
}

#[repr(C)]
pub struct FiEpAttr {
    ep_type: u32,
}

#[repr(C)]
pub struct FiInfo {
    next: *mut FiInfo,
    caps: u64,
    mode: u64,
    addr_format: u32,
    src_addrlen: usize,
    dest_addrlen: usize,
    src_addr: *mut c_void,
    dest_addr: *mut c_void,
    handle: *mut Fid,
    tx_attr: *mut c_void,
    rx_attr: *mut c_void,
    ep_attr: *mut FiEpAttr,
    domain_attr: *mut c_void,
    fabric_attr: *mut FiFabricAttr,
    nic: *mut c_void,
}

#[repr(C)]
pub struct FidFabric {
    fid: Fid,
    ops: *mut FiOpsFabric,
    api_version: u32,
}

type PassiveEpFn =
    unsafe extern "C" fn(*mut FidFabric, *mut FiInfo, *mut *mut FidPep, *mut c_void) -> c_int;
type DomainFn =
    unsafe extern "C" fn(*mut FidFabric, *mut FiInfo, *mut *mut FidDomain, *mut c_void) -> c_int;
type Domain2Fn = unsafe extern "C" fn(
    *mut FidFabric,
    *mut FiInfo,
    *mut *mut FidDomain,
    u64,
    *mut c_void,
) -> c_int;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct FiOpsFabric {
    size: usize,
    domain: Option<DomainFn>,
    passive_ep: Option<PassiveEpFn>,
    eq_open: Option<
        unsafe extern "C" fn(*mut FidFabric, *mut c_void, *mut *mut c_void, *mut c_void) -> c_int,
    >,
    wait_open: Option<unsafe extern "C" fn(*mut FidFabric, *mut c_void, *mut *mut c_void) -> c_int>,
    trywait: Option<unsafe extern "C" fn(*mut FidFabric, *mut *mut Fid, c_int) -> c_int>,
    domain2: Option<Domain2Fn>,
}

#[repr(C)]
pub struct FidDomain {
    fid: Fid,
    ops: *mut FiOpsDomain,
    mr: *mut c_void,
}

type AvOpenFn =
    unsafe extern "C" fn(*mut FidDomain, *mut c_void, *mut *mut FidAv, *mut c_void) -> c_int;
type CqOpenFn =
    unsafe extern "C" fn(*mut FidDomain, *mut c_void, *mut *mut FidCq, *mut c_void) -> c_int;
type EndpointFn =
    unsafe extern "C" fn(*mut FidDomain, *mut FiInfo, *mut *mut FidEp, *mut c_void) -> c_int;
type Endpoint2Fn =
    unsafe extern "C" fn(*mut FidDomain, *mut FiInfo, *mut *mut FidEp, u64, *mut c_void) -> c_int;
type AnyFn = unsafe extern "C" fn();

#[repr(C)]
#[derive(Clone, Copy)]
pub struct FiOpsDomain {
    size: usize,
    av_open: Option<AvOpenFn>,
    cq_open: Option<CqOpenFn>,
    endpoint: Option<EndpointFn>,
    scalable_ep: Option<AnyFn>,
    cntr_open: Option<AnyFn>,
    poll_open: Option<AnyFn>,
    stx_ctx: Option<AnyFn>,
    srx_ctx: Option<AnyFn>,
    query_atomic: Option<AnyFn>,
    query_collective: Option<AnyFn>,
    endpoint2: Option<Endpoint2Fn>,
}

#[repr(C)]
pub struct FidEp {
    fid: Fid,
    ops: *mut c_void,
    cm: *mut FiOpsCm,
    msg: *mut FiOpsMsg,
    rma: *mut FiOpsRma,
    tagged: *mut FiOpsTagged,
    atomic: *mut c_void,
    collective: *mut c_void,
}

#[repr(C)]
pub struct FidPep {
    fid: Fid,
    ops: *mut c_void,
    cm: *mut FiOpsCm,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct FiOpsCm {
    size: usize,
    setname: Option<AnyFn>,
    getname: Option<unsafe extern "C" fn(*mut Fid, *mut c_void, *mut usize) -> c_int>,
    getpeer: Option<AnyFn>,
    connect: Option<unsafe extern "C" fn(*mut FidEp, *const c_void, *const c_void, usize) -> c_int>,
    listen: Option<AnyFn>,
    accept: Option<unsafe extern "C" fn(*mut FidEp, *const c_void, usize) -> c_int>,
    reject: Option<AnyFn>,
    shutdown: Option<AnyFn>,
    join: Option<AnyFn>,
}

#[repr(C)]
pub struct IoVec {
    base: *mut c_void,
    len: usize,
}

#[repr(C)]
pub struct FiMsg {
    msg_iov: *const IoVec,
    desc: *mut *mut c_void,
    iov_count: usize,
    addr: u64,
    context: *mut c_void,
    data: u64,
}

#[repr(C)]
pub struct FiRmaIov {
    addr: u64,
    len: usize,
    key: u64,
}

#[repr(C)]
pub struct FiMsgRma {
    msg_iov: *const IoVec,
    desc: *mut *mut c_void,
    iov_count: usize,
    addr: u64,
    rma_iov: *const FiRmaIov,
    rma_iov_count: usize,
    context: *mut c_void,
    data: u64,
}

#[repr(C)]
pub struct FiMsgTagged {
    msg_iov: *const IoVec,
    desc: *mut *mut c_void,
    iov_count: usize,
    addr: u64,
    tag: u64,
    ignore: u64,
    context: *mut c_void,
    data: u64,
}

type Ep = *mut FidEp;
type Buf = *const c_void;
type Desc = *mut c_void;
type Descs = *mut *mut c_void;
type Ctx = *mut c_void;
type Iov = *const IoVec;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct FiOpsMsg {
    size: usize,
    recv: Option<unsafe extern "C" fn(Ep, *mut c_void, usize, Desc, u64, Ctx) -> isize>,
    recvv: Option<unsafe extern "C" fn(Ep, Iov, Descs, usize, u64, Ctx) -> isize>,
    recvmsg: Option<unsafe extern "C" fn(Ep, *const FiMsg, u64) -> isize>,
    send: Option<unsafe extern "C" fn(Ep, Buf, usize, Desc, u64, Ctx) -> isize>,
    sendv: Option<unsafe extern "C" fn(Ep, Iov, Descs, usize, u64, Ctx) -> isize>,
    sendmsg: Option<unsafe extern "C" fn(Ep, *const FiMsg, u64) -> isize>,
    inject: Option<unsafe extern "C" fn(Ep, Buf, usize, u64) -> isize>,
    senddata: Option<unsafe extern "C" fn(Ep, Buf, usize, Desc, u64, u64, Ctx) -> isize>,
    injectdata: Option<unsafe extern "C" fn(Ep, Buf, usize, u64, u64) -> isize>,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct FiOpsRma {
    size: usize,
    read: Option<unsafe extern "C" fn(Ep, *mut c_void, usize, Desc, u64, u64, u64, Ctx) -> isize>,
    readv: Option<unsafe extern "C" fn(Ep, Iov, Descs, usize, u64, u64, u64, Ctx) -> isize>,
    readmsg: Option<unsafe extern "C" fn(Ep, *const FiMsgRma, u64) -> isize>,
    write: Option<unsafe extern "C" fn(Ep, Buf, usize, Desc, u64, u64, u64, Ctx) -> isize>,
    writev: Option<unsafe extern "C" fn(Ep, Iov, Descs, usize, u64, u64, u64, Ctx) -> isize>,
    writemsg: Option<unsafe extern "C" fn(Ep, *const FiMsgRma, u64) -> isize>,
    inject: Option<unsafe extern "C" fn(Ep, Buf, usize, u64, u64, u64) -> isize>,
    writedata: Option<unsafe extern "C" fn(Ep, Buf, usize, Desc, u64, u64, u64, u64, Ctx) -> isize>,
    injectdata: Option<unsafe extern "C" fn(Ep, Buf, usize, u64, u64, u64, u64) -> isize>,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct FiOpsTagged {
    size: usize,
    recv: Option<unsafe extern "C" fn(Ep, *mut c_void, usize, Desc, u64, u64, u64, Ctx) -> isize>,
    recvv: Option<unsafe extern "C" fn(Ep, Iov, Descs, usize, u64, u64, u64, Ctx) -> isize>,
    recvmsg: Option<unsafe extern "C" fn(Ep, *const FiMsgTagged, u64) -> isize>,
    send: Option<unsafe extern "C" fn(Ep, Buf, usize, Desc, u64, u64, Ctx) -> isize>,
    sendv: Option<unsafe extern "C" fn(Ep, Iov, Descs, usize, u64, u64, Ctx) -> isize>,
    sendmsg: Option<unsafe extern "C" fn(Ep, *const FiMsgTagged, u64) -> isize>,
    inject: Option<unsafe extern "C" fn(Ep, Buf, usize, u64, u64) -> isize>,
    senddata: Option<unsafe extern "C" fn(Ep, Buf, usize, Desc, u64, u64, u64, Ctx) -> isize>,
    injectdata: Option<unsafe extern "C" fn(Ep, Buf, usize, u64, u64, u64) -> isize>,
}

#[repr(C)]
pub struct FidCq {
    fid: Fid,
    ops: *mut FiOpsCq,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct FiOpsCq {
    size: usize,
    read: Option<unsafe extern "C" fn(*mut FidCq, *mut c_void, usize) -> isize>,
    readfrom: Option<unsafe extern "C" fn(*mut FidCq, *mut c_void, usize, *mut u64) -> isize>,
    readerr: Option<AnyFn>,
    sread: Option<AnyFn>,
    sreadfrom: Option<AnyFn>,
    signal: Option<AnyFn>,
    strerror: Option<AnyFn>,
}

#[repr(C)]
pub struct FidAv {
    fid: Fid,
    ops: *mut FiOpsAv,
}

type AvLookupFn = unsafe extern "C" fn(*mut FidAv, u64, *mut c_void, *mut usize) -> c_int;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct FiOpsAv {
    size: usize,
    insert:
        Option<unsafe extern "C" fn(*mut FidAv, *const c_void, usize, *mut u64, u64, Ctx) -> c_int>,
    insertsvc: Option<
        unsafe extern "C" fn(*mut FidAv, *const c_char, *const c_char, *mut u64, u64, Ctx) -> c_int,
    >,
    insertsym: Option<AnyFn>,
    remove: Option<AnyFn>,
    lookup: Option<AvLookupFn>,
    straddr: Option<AnyFn>,
    av_set: Option<AnyFn>,
}

// ---------------------------------------------------------------------------------------------
// Per-object copies.
// ---------------------------------------------------------------------------------------------

/// A copy of a provider table, the id of the object it belongs to, and the provider's table.
/// The object's table pointer points at `table` (offset 0), so a wrapper reaches `id` and `orig`
/// from the pointer it already has.
#[repr(C)]
pub struct Wrapped<T> {
    table: T,
    id: u32,
    orig: *const T,
}

/// Copies the provider table `orig` into `w` when its `size` fits; slots past `size` stay NULL.
/// Returns false (nothing copied) for a NULL or larger-than-known table.
///
/// # Safety
/// `orig` is NULL or a provider table starting with its `size_t size`.
unsafe fn copy_table<T>(w: &mut Wrapped<T>, orig: *const T, id: u32) -> bool {
    if orig.is_null() {
        return false;
    }
    // SAFETY: every libfabric ops table begins with `size_t size` (caller's contract).
    let size = unsafe { *(orig as *const usize) };
    if size < size_of::<usize>() || size > size_of::<T>() {
        unwrapped();
        crate::config::warn(format!(
            "a libfabric provider table is {size} bytes, sigmatop knows {}: that object is not traced",
            size_of::<T>()
        ));
        return false;
    }
    // SAFETY: `size` bytes are readable at orig (the provider's own size) and fit in w.table.
    unsafe {
        core::ptr::copy_nonoverlapping(orig as *const u8, &mut w.table as *mut T as *mut u8, size)
    };
    w.id = id;
    w.orig = orig;
    true
}

/// Allocates `v` on the heap; None when memory is exhausted (the caller passes through).
fn try_box<T>(v: T) -> Option<*mut T> {
    let layout = std::alloc::Layout::new::<T>();
    // SAFETY: T is never zero-sized here (every state holds tables).
    let p = unsafe { std::alloc::alloc(layout) } as *mut T;
    if p.is_null() {
        unwrapped();
        return None;
    }
    // SAFETY: p is a fresh allocation for one T.
    unsafe { p.write(v) };
    Some(p)
}

/// Frees what `try_box` allocated.
///
/// # Safety
/// `p` came from `try_box::<T>` and is no longer reachable from any libfabric object.
unsafe fn free_box<T>(p: *mut T) {
    // SAFETY: caller's contract.
    unsafe {
        core::ptr::drop_in_place(p);
        std::alloc::dealloc(p as *mut u8, std::alloc::Layout::new::<T>());
    }
}

fn zeroed_wrapped<T>() -> Wrapped<T> {
    // SAFETY: only instantiated with the ops tables above: a usize and Option<fn>s, for which
    // all-zero bytes are valid (size 0, every slot None).
    Wrapped {
        table: unsafe { core::mem::zeroed() },
        id: 0,
        orig: core::ptr::null(),
    }
}

/// What sigmatop knows about an opened domain: the provider and its address format.
#[derive(Clone, Default)]
struct AddrInfo {
    prov: String,
    addr_format: u32,
    addrlen: usize,
}

#[repr(C)]
struct FabricState {
    ops: Wrapped<FiOpsFabric>,
}

#[repr(C)]
struct DomainState {
    ops: Wrapped<FiOpsDomain>,
    info: AddrInfo,
}

#[repr(C)]
struct EpState {
    fid_ops: Wrapped<FiOps>,
    cm: Wrapped<FiOpsCm>,
    msg: Wrapped<FiOpsMsg>,
    rma: Wrapped<FiOpsRma>,
    tagged: Wrapped<FiOpsTagged>,
    id: u32,
    info: AddrInfo,
}

#[repr(C)]
struct CqState {
    fid_ops: Wrapped<FiOps>,
    ops: Wrapped<FiOpsCq>,
}

#[repr(C)]
struct AvState {
    fid_ops: Wrapped<FiOps>,
    ops: Wrapped<FiOpsAv>,
    info: AddrInfo,
    /// fi_addr of the next insert when the program passes no fi_addr array (FI_AV_TABLE).
    next_index: AtomicU64,
}

/// AV bookkeeping (control path): which endpoints are bound to which AV and what was inserted,
/// so each endpoint gets an "av" update per (fi_addr → peer address).
#[derive(Default)]
struct AvBook {
    av: usize,
    eps: Vec<u32>,
    addrs: Vec<(u64, u64)>,
}

static AV_BOOKS: Mutex<Vec<AvBook>> = Mutex::new(Vec::new());
static NEXT_CQ: AtomicU32 = AtomicU32::new(0);
static NEXT_EP: AtomicU32 = AtomicU32::new(0);

fn announce(ep: u32, fi_addr: u64, hash: u64) {
    crate::registry::update(
        ep,
        "av",
        Some(Peer {
            addr_hash: hash,
            text: format!("fi_addr {fi_addr}"),
            ..Default::default()
        }),
    );
}

fn av_book<R>(av: usize, f: impl FnOnce(&mut AvBook) -> R) -> Option<R> {
    let mut books = AV_BOOKS.lock().ok()?;
    let i = match books.iter().position(|b| b.av == av) {
        Some(i) => i,
        None => {
            books.push(AvBook {
                av,
                ..Default::default()
            });
            books.len() - 1
        }
    };
    Some(f(&mut books[i]))
}

// ---------------------------------------------------------------------------------------------
// Addresses.
// ---------------------------------------------------------------------------------------------

/// The identifying bytes of an address blob, and a printable form. Socket addresses keep family,
/// port and IP only (padding and flow info vary between copies); string addresses stop at NUL.
fn canon(format: u32, b: &[u8]) -> (Vec<u8>, String) {
    let family = if b.len() >= 2 {
        u16::from_ne_bytes([b[0], b[1]]) as i32
    } else {
        -1
    };
    let sockaddr = matches!(format, FI_SOCKADDR | FI_SOCKADDR_IN | FI_SOCKADDR_IN6)
        || (format == 0 && (family == libc::AF_INET || family == libc::AF_INET6));
    if sockaddr && family == libc::AF_INET && b.len() >= 8 {
        let port = u16::from_be_bytes([b[2], b[3]]);
        let ip = std::net::Ipv4Addr::new(b[4], b[5], b[6], b[7]);
        return (b[..8].to_vec(), format!("{ip}:{port}"));
    }
    if sockaddr && family == libc::AF_INET6 && b.len() >= 24 {
        let port = u16::from_be_bytes([b[2], b[3]]);
        let mut ip = [0u8; 16];
        ip.copy_from_slice(&b[8..24]);
        let mut key = b[..4].to_vec();
        key.extend_from_slice(&ip);
        return (key, format!("[{}]:{port}", std::net::Ipv6Addr::from(ip)));
    }
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    let looks_str =
        format == 0 && end > 0 && end < b.len() && b[..end].iter().all(u8::is_ascii_graphic);
    if format == FI_ADDR_STR || looks_str {
        let s = String::from_utf8_lossy(&b[..end]).into_owned();
        return (b[..end].to_vec(), s);
    }
    let hex: String = b.iter().take(16).map(|x| format!("{x:02x}")).collect();
    (b.to_vec(), hex)
}

/// Reads an address of `format` at `p` whose length the caller may not know (`len` 0).
///
/// # Safety
/// `p` is NULL or points at an address of `format` (at least `len` bytes when `len` > 0).
unsafe fn read_addr(format: u32, p: *const c_void, len: usize) -> Option<Vec<u8>> {
    if p.is_null() {
        return None;
    }
    let n = match format {
        FI_SOCKADDR_IN => 16,
        FI_SOCKADDR_IN6 => 28,
        FI_SOCKADDR => {
            // SAFETY: a struct sockaddr starts with its 2-byte family.
            let fam = unsafe { *(p as *const u16) } as i32;
            if fam == libc::AF_INET6 { 28 } else { 16 }
        }
        FI_ADDR_STR => {
            let max = if len > 0 { len.min(ADDR_MAX) } else { ADDR_MAX };
            let mut n = 0;
            // SAFETY: reads stop at the terminating NUL, which lies within the address.
            while n < max && unsafe { *(p as *const u8).add(n) } != 0 {
                n += 1;
            }
            n
        }
        _ => len.min(ADDR_MAX),
    };
    if n == 0 {
        return None;
    }
    let n = if len > 0 && format != FI_ADDR_STR {
        n.min(len)
    } else {
        n
    };
    // SAFETY: n bytes of the address are readable (its format's size, or the given length).
    Some(unsafe { core::slice::from_raw_parts(p as *const u8, n) }.to_vec())
}

fn peer_of(format: u32, bytes: &[u8]) -> Peer {
    let (key, text) = canon(format, bytes);
    Peer {
        addr_hash: fnv1a64(&key),
        text,
        ..Default::default()
    }
}

/// # Safety
/// `info` is NULL or a valid fi_info.
unsafe fn addr_info(info: *const FiInfo, fallback: Option<&AddrInfo>) -> AddrInfo {
    let mut a = fallback.cloned().unwrap_or_default();
    if info.is_null() {
        return a;
    }
    // SAFETY: a valid fi_info (caller) whose fabric_attr and prov_name are NULL or valid.
    unsafe {
        let i = &*info;
        if i.addr_format != 0 {
            a.addr_format = i.addr_format;
        }
        let len = if i.src_addrlen != 0 {
            i.src_addrlen
        } else {
            i.dest_addrlen
        };
        if len != 0 {
            a.addrlen = len;
        }
        if !i.fabric_attr.is_null() && !(*i.fabric_attr).prov_name.is_null() {
            a.prov = core::ffi::CStr::from_ptr((*i.fabric_attr).prov_name)
                .to_string_lossy()
                .into_owned();
        }
    }
    a
}

// ---------------------------------------------------------------------------------------------
// Exported entry points.
// ---------------------------------------------------------------------------------------------

static REAL_GETINFO: RealFn = RealFn::new(c"fi_getinfo", &[c"libfabric.so.1"]);
static REAL_FABRIC: RealFn = RealFn::new(c"fi_fabric", &[c"libfabric.so.1"]);

type GetinfoFn = unsafe extern "C" fn(
    u32,
    *const c_char,
    *const c_char,
    u64,
    *const FiInfo,
    *mut *mut FiInfo,
) -> c_int;
type FabricFn = unsafe extern "C" fn(*mut FiFabricAttr, *mut *mut FidFabric, *mut c_void) -> c_int;

pub fn hooks() -> Vec<Hook> {
    vec![
        Hook {
            name: b"fi_getinfo",
            layer: Layer::Libfabric,
            hook: fi_getinfo as *const c_void,
            real: &REAL_GETINFO,
        },
        Hook {
            name: b"fi_fabric",
            layer: Layer::Libfabric,
            hook: fi_fabric as *const c_void,
            real: &REAL_FABRIC,
        },
    ]
}

/// `fi_getinfo`: starts the collector (control path), otherwise untouched.
///
/// # Safety
/// Same contract as fi_getinfo(3).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fi_getinfo(
    version: u32,
    node: *const c_char,
    service: *const c_char,
    flags: u64,
    hints: *const FiInfo,
    info: *mut *mut FiInfo,
) -> c_int {
    let real = REAL_GETINFO.get();
    if real.is_null() {
        return -FI_ENOSYS;
    }
    // SAFETY: real is libfabric's fi_getinfo, which has this signature.
    let f: GetinfoFn = unsafe { core::mem::transmute(real) };
    if crate::config::layer_enabled(Layer::Libfabric) && !crate::in_sigmatop() {
        crate::guarded((), crate::collector::ensure_started);
    }
    // SAFETY: the program's arguments, unchanged.
    unsafe { f(version, node, service, flags, hints, info) }
}

/// `fi_fabric`: opens the fabric, then points its ops at a copy whose `domain` is wrapped.
///
/// # Safety
/// Same contract as fi_fabric(3).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fi_fabric(
    attr: *mut FiFabricAttr,
    fabric: *mut *mut FidFabric,
    context: *mut c_void,
) -> c_int {
    let real = REAL_FABRIC.get();
    if real.is_null() {
        return -FI_ENOSYS;
    }
    // SAFETY: real is libfabric's fi_fabric, which has this signature.
    let f: FabricFn = unsafe { core::mem::transmute(real) };
    if crate::config::layer_enabled(Layer::Libfabric) && !crate::in_sigmatop() {
        crate::guarded((), crate::collector::ensure_started);
    }
    // A fabric opened inside another sigmatop hook (a utility provider opening its core
    // provider) is the provider's business: trace_enter returns None and it stays unwrapped.
    let Some(ts) = crate::trace_enter(Layer::Libfabric) else {
        // SAFETY: the program's arguments, unchanged.
        return unsafe { f(attr, fabric, context) };
    };
    // SAFETY: as above.
    let r = unsafe { f(attr, fabric, context) };
    if r == 0 && !fabric.is_null() {
        // SAFETY: on success *fabric is the opened fabric.
        let fab = unsafe { *fabric };
        crate::guarded((), || {
            // SAFETY: fab is a live fabric just opened by the provider.
            unsafe { wrap_fabric(fab) }
        });
    }
    ts.leave();
    r
}

/// # Safety
/// `fab` is NULL or a live fid_fabric.
unsafe fn wrap_fabric(fab: *mut FidFabric) {
    if fab.is_null() {
        return;
    }
    let mut st = FabricState {
        ops: zeroed_wrapped(),
    };
    // SAFETY: fab is live; its ops is NULL or the provider's fi_ops_fabric.
    if !unsafe { copy_table(&mut st.ops, (*fab).ops, 0) } {
        return;
    }
    let t = &mut st.ops.table;
    if t.domain.is_some() {
        t.domain = Some(fabric_domain);
    }
    if t.domain2.is_some() {
        t.domain2 = Some(fabric_domain2);
    }
    if t.passive_ep.is_some() {
        t.passive_ep = Some(fabric_passive_ep);
    }
    if let Some(p) = try_box(st) {
        // SAFETY: fab is live; the copy lives as long as the process (fabrics are few; it is
        // never freed so that a thread still reading fab->ops can never touch freed memory).
        unsafe { (*fab).ops = p as *mut FiOpsFabric };
    }
}

/// Runs a control-path open `call` of the program (depth held, so that what the provider opens
/// inside it stays unwrapped) and, when it succeeded, `after`.
#[inline]
fn control(call: impl FnOnce() -> c_int, after: impl FnOnce()) -> c_int {
    let Some(ts) = crate::trace_enter(Layer::Libfabric) else {
        return call();
    };
    let r = call();
    if r == 0 {
        crate::guarded((), after);
    }
    ts.leave();
    r
}

unsafe extern "C" fn fabric_domain(
    fabric: *mut FidFabric,
    info: *mut FiInfo,
    dom: *mut *mut FidDomain,
    context: *mut c_void,
) -> c_int {
    // SAFETY: installed only in a FabricState that fabric->ops points at; orig.domain is set.
    let f = unsafe { (*(*((*fabric).ops as *const FabricState)).ops.orig).domain };
    let Some(f) = f else { return -FI_ENOSYS };
    control(
        // SAFETY: the program's arguments, unchanged.
        || unsafe { f(fabric, info, dom, context) },
        // SAFETY: on success *dom is the opened domain; info is the program's.
        || unsafe { wrap_domain(*dom, info) },
    )
}

unsafe extern "C" fn fabric_domain2(
    fabric: *mut FidFabric,
    info: *mut FiInfo,
    dom: *mut *mut FidDomain,
    flags: u64,
    context: *mut c_void,
) -> c_int {
    // SAFETY: as fabric_domain.
    let f = unsafe { (*(*((*fabric).ops as *const FabricState)).ops.orig).domain2 };
    let Some(f) = f else { return -FI_ENOSYS };
    control(
        // SAFETY: the program's arguments, unchanged.
        || unsafe { f(fabric, info, dom, flags, context) },
        // SAFETY: as fabric_domain.
        || unsafe { wrap_domain(*dom, info) },
    )
}

unsafe extern "C" fn fabric_passive_ep(
    fabric: *mut FidFabric,
    info: *mut FiInfo,
    pep: *mut *mut FidPep,
    context: *mut c_void,
) -> c_int {
    // SAFETY: as fabric_domain.
    let f = unsafe { (*(*((*fabric).ops as *const FabricState)).ops.orig).passive_ep };
    let Some(f) = f else { return -FI_ENOSYS };
    control(
        // SAFETY: the program's arguments, unchanged.
        || unsafe { f(fabric, info, pep, context) },
        // SAFETY: on success *pep is the new passive endpoint; info is the program's.
        || unsafe { wrap_pep(*pep, info) },
    )
}

/// A passive endpoint's cm copy: only `getname` is wrapped, so that the address a server hands
/// to its clients (what their connected endpoints name as peer) joins the identity.
#[repr(C)]
struct PepState {
    cm: Wrapped<FiOpsCm>,
    addr_format: u32,
}

/// # Safety
/// `pep` is NULL or a live fid_pep; `info` NULL or valid.
unsafe fn wrap_pep(pep: *mut FidPep, info: *const FiInfo) {
    if pep.is_null() {
        return;
    }
    let mut st = PepState {
        cm: zeroed_wrapped(),
        // SAFETY: info is NULL or valid (caller).
        addr_format: unsafe { addr_info(info, None) }.addr_format,
    };
    // SAFETY: pep is live; its cm is NULL or the provider's table.
    if !unsafe { copy_table(&mut st.cm, (*pep).cm, 0) } || st.cm.table.getname.is_none() {
        return;
    }
    st.cm.table.getname = Some(pep_getname);
    if let Some(p) = try_box(st) {
        // SAFETY: pep is live. The copy is kept for the life of the process (a server opens one
        // or a few passive endpoints; a racing reader of pep->cm never sees freed memory).
        unsafe { (*pep).cm = p as *mut FiOpsCm };
    }
}

unsafe extern "C" fn pep_getname(fid: *mut Fid, addr: *mut c_void, addrlen: *mut usize) -> c_int {
    // SAFETY: installed only in a PepState (cm first) that the pep's cm points at.
    let st = unsafe { (*(fid as *mut FidPep)).cm as *const PepState };
    // SAFETY: st lives for the process.
    let Some(f) = (unsafe { (*(*st).cm.orig).getname }) else {
        return -FI_ENOSYS;
    };
    // SAFETY: the program's arguments, unchanged.
    let r = unsafe { f(fid, addr, addrlen) };
    if r == 0 && !addr.is_null() && !addrlen.is_null() {
        crate::guarded((), || {
            // SAFETY: on success the provider wrote *addrlen bytes at addr.
            unsafe {
                let b = core::slice::from_raw_parts(addr as *const u8, (*addrlen).min(ADDR_MAX));
                let (key, _) = canon((*st).addr_format, b);
                crate::registry::add_own_addr(fnv1a64(&key));
            }
        });
    }
    r
}

/// # Safety
/// `dom` is NULL or a live fid_domain; `info` NULL or valid.
unsafe fn wrap_domain(dom: *mut FidDomain, info: *const FiInfo) {
    if dom.is_null() {
        return;
    }
    let mut st = DomainState {
        ops: zeroed_wrapped(),
        // SAFETY: info is NULL or valid (caller).
        info: unsafe { addr_info(info, None) },
    };
    // SAFETY: dom is live; its ops is NULL or the provider's fi_ops_domain.
    if !unsafe { copy_table(&mut st.ops, (*dom).ops, 0) } {
        return;
    }
    let t = &mut st.ops.table;
    if t.endpoint.is_some() {
        t.endpoint = Some(domain_endpoint);
    }
    if t.endpoint2.is_some() {
        t.endpoint2 = Some(domain_endpoint2);
    }
    if t.cq_open.is_some() && crate::config::full() {
        t.cq_open = Some(domain_cq_open);
    }
    if t.av_open.is_some() {
        t.av_open = Some(domain_av_open);
    }
    if let Some(p) = try_box(st) {
        // SAFETY: dom is live. Domain copies are never freed (few, and a racing reader of
        // dom->ops must never see freed memory).
        unsafe { (*dom).ops = p as *mut FiOpsDomain };
    }
}

/// # Safety
/// `dom` has a DomainState as its ops (it is only called from domain wrappers).
unsafe fn domain_state<'a>(dom: *mut FidDomain) -> &'a DomainState {
    // SAFETY: caller's contract.
    unsafe { &*((*dom).ops as *const DomainState) }
}

unsafe extern "C" fn domain_endpoint(
    dom: *mut FidDomain,
    info: *mut FiInfo,
    ep: *mut *mut FidEp,
    context: *mut c_void,
) -> c_int {
    // SAFETY: installed only in a DomainState that dom->ops points at.
    let st = unsafe { domain_state(dom) };
    let Some(f) = (unsafe { (*st.ops.orig).endpoint }) else {
        return -FI_ENOSYS;
    };
    control(
        // SAFETY: the program's arguments, unchanged.
        || unsafe { f(dom, info, ep, context) },
        // SAFETY: on success *ep is the new endpoint.
        || unsafe { wrap_ep(*ep, info, &st.info) },
    )
}

unsafe extern "C" fn domain_endpoint2(
    dom: *mut FidDomain,
    info: *mut FiInfo,
    ep: *mut *mut FidEp,
    flags: u64,
    context: *mut c_void,
) -> c_int {
    // SAFETY: as domain_endpoint.
    let st = unsafe { domain_state(dom) };
    let Some(f) = (unsafe { (*st.ops.orig).endpoint2 }) else {
        return -FI_ENOSYS;
    };
    control(
        // SAFETY: the program's arguments, unchanged.
        || unsafe { f(dom, info, ep, flags, context) },
        // SAFETY: on success *ep is the new endpoint.
        || unsafe { wrap_ep(*ep, info, &st.info) },
    )
}

unsafe extern "C" fn domain_cq_open(
    dom: *mut FidDomain,
    attr: *mut c_void,
    cq: *mut *mut FidCq,
    context: *mut c_void,
) -> c_int {
    // SAFETY: as domain_endpoint.
    let st = unsafe { domain_state(dom) };
    let Some(f) = (unsafe { (*st.ops.orig).cq_open }) else {
        return -FI_ENOSYS;
    };
    control(
        // SAFETY: the program's arguments, unchanged.
        || unsafe { f(dom, attr, cq, context) },
        // SAFETY: on success *cq is the new completion queue.
        || unsafe { wrap_cq(*cq, &st.info) },
    )
}

unsafe extern "C" fn domain_av_open(
    dom: *mut FidDomain,
    attr: *mut c_void,
    av: *mut *mut FidAv,
    context: *mut c_void,
) -> c_int {
    // SAFETY: as domain_endpoint.
    let st = unsafe { domain_state(dom) };
    let Some(f) = (unsafe { (*st.ops.orig).av_open }) else {
        return -FI_ENOSYS;
    };
    control(
        // SAFETY: the program's arguments, unchanged.
        || unsafe { f(dom, attr, av, context) },
        // SAFETY: on success *av is the new address vector.
        || unsafe { wrap_av(*av, &st.info) },
    )
}

// ---------------------------------------------------------------------------------------------
// Endpoints.
// ---------------------------------------------------------------------------------------------

/// # Safety
/// `ep` is NULL or a live fid_ep; `info` NULL or valid.
unsafe fn wrap_ep(ep: *mut FidEp, info: *const FiInfo, dom: &AddrInfo) {
    if ep.is_null() {
        return;
    }
    // SAFETY: info is NULL or valid (caller).
    let ai = unsafe { addr_info(info, Some(dom)) };
    let mut peer = Peer::default();
    // SAFETY: info NULL or valid; its ep_attr and dest_addr NULL or valid.
    unsafe {
        if !info.is_null() {
            let i = &*info;
            let is_msg = !i.ep_attr.is_null() && (*i.ep_attr).ep_type == FI_EP_MSG;
            if is_msg && let Some(b) = read_addr(ai.addr_format, i.dest_addr, i.dest_addrlen) {
                peer = peer_of(ai.addr_format, &b);
            }
        }
    }
    let n = NEXT_EP.fetch_add(1, Ordering::Relaxed);
    let id = crate::registry::define(
        Layer::Libfabric,
        EndpointKind::FiEp,
        format!("ep#{n}"),
        ai.prov.clone(),
        peer,
    );
    let Some(p) = try_box(EpState {
        fid_ops: zeroed_wrapped(),
        cm: zeroed_wrapped(),
        msg: zeroed_wrapped(),
        rma: zeroed_wrapped(),
        tagged: zeroed_wrapped(),
        id,
        info: ai,
    }) else {
        return;
    };
    // SAFETY: p is ours until installed; ep is live.
    unsafe {
        let st = &mut *p;
        if copy_table(&mut st.fid_ops, (*ep).fid.ops, id) {
            let t = &mut st.fid_ops.table;
            if t.close.is_some() {
                t.close = Some(ep_close);
            }
            if t.bind.is_some() {
                t.bind = Some(ep_bind);
            }
            if t.control.is_some() {
                t.control = Some(ep_control);
            }
        }
        if copy_table(&mut st.cm, (*ep).cm, id) {
            let t = &mut st.cm.table;
            if t.getname.is_some() {
                t.getname = Some(cm_getname);
            }
            if t.connect.is_some() {
                t.connect = Some(cm_connect);
            }
            if t.accept.is_some() {
                t.accept = Some(cm_accept);
            }
        }
        install_data_tables(ep, st);
        if !st.fid_ops.orig.is_null() {
            (*ep).fid.ops = &mut st.fid_ops.table;
        } else {
            // Without a close hook the copy can never be freed: it is kept (a few hundred bytes).
        }
        if !st.cm.orig.is_null() {
            (*ep).cm = &mut st.cm.table;
        }
    }
    // SAFETY: ep is live and now wrapped; p is its state.
    unsafe { note_own_name(ep, &*p) };
}

/// Points ep->msg / rma / tagged at the state's copies (again, after a provider swapped tables).
///
/// # Safety
/// `ep` is live and `st` is its state.
unsafe fn install_data_tables(ep: *mut FidEp, st: &mut EpState) {
    let id = st.id;
    // SAFETY: ep is live; each table pointer is NULL, the provider's, or already our copy.
    unsafe {
        if !core::ptr::eq((*ep).msg, &st.msg.table) && copy_table(&mut st.msg, (*ep).msg, id) {
            let t = &mut st.msg.table;
            macro_rules! set {
                ($($f:ident => $w:ident),*) => { $( if t.$f.is_some() { t.$f = Some($w); } )* };
            }
            set!(recv => msg_recv, recvv => msg_recvv, recvmsg => msg_recvmsg, send => msg_send,
                 sendv => msg_sendv, sendmsg => msg_sendmsg, inject => msg_inject,
                 senddata => msg_senddata, injectdata => msg_injectdata);
            (*ep).msg = &mut st.msg.table;
        }
        if !core::ptr::eq((*ep).rma, &st.rma.table) && copy_table(&mut st.rma, (*ep).rma, id) {
            let t = &mut st.rma.table;
            macro_rules! set {
                ($($f:ident => $w:ident),*) => { $( if t.$f.is_some() { t.$f = Some($w); } )* };
            }
            set!(read => rma_read, readv => rma_readv, readmsg => rma_readmsg, write => rma_write,
                 writev => rma_writev, writemsg => rma_writemsg, inject => rma_inject,
                 writedata => rma_writedata, injectdata => rma_injectdata);
            (*ep).rma = &mut st.rma.table;
        }
        if !core::ptr::eq((*ep).tagged, &st.tagged.table)
            && copy_table(&mut st.tagged, (*ep).tagged, id)
        {
            let t = &mut st.tagged.table;
            macro_rules! set {
                ($($f:ident => $w:ident),*) => { $( if t.$f.is_some() { t.$f = Some($w); } )* };
            }
            set!(recv => tag_recv, recvv => tag_recvv, recvmsg => tag_recvmsg, send => tag_send,
                 sendv => tag_sendv, sendmsg => tag_sendmsg, inject => tag_inject,
                 senddata => tag_senddata, injectdata => tag_injectdata);
            (*ep).tagged = &mut st.tagged.table;
        }
    }
}

/// The state of a wrapped endpoint, from its fid (whose ops point at `EpState::fid_ops`).
///
/// # Safety
/// `fid` is an endpoint wrapped by `wrap_ep` (only its own wrappers call this).
unsafe fn ep_state(fid: *mut Fid) -> *mut EpState {
    // SAFETY: fid_ops is the first field of the repr(C) EpState.
    unsafe { (*fid).ops as *mut EpState }
}

/// The state of an endpoint from its cm table (`ep->cm` points at `EpState::cm`).
///
/// # Safety
/// `ep`'s cm is our copy.
unsafe fn ep_state_from_cm(ep: *mut FidEp) -> *mut EpState {
    // SAFETY: cm is a field of EpState at a fixed offset.
    unsafe { ((*ep).cm as *mut u8).sub(offset_of!(EpState, cm)) as *mut EpState }
}

/// Asks the provider for the endpoint's own address and adds its hash to the identity.
///
/// # Safety
/// `ep` is live and `st` is its state.
unsafe fn note_own_name(ep: *mut FidEp, st: &EpState) {
    let getname = if st.cm.orig.is_null() {
        // SAFETY: ep is live; its cm is NULL or the provider's table (not ours: orig is NULL).
        unsafe {
            let cm = (*ep).cm;
            if cm.is_null() { None } else { (*cm).getname }
        }
    } else {
        // SAFETY: orig is the provider's cm table.
        unsafe { (*st.cm.orig).getname }
    };
    let Some(g) = getname else { return };
    let mut buf = [0u8; ADDR_MAX];
    let mut len = ADDR_MAX;
    // SAFETY: provider getname with a buffer of `len` bytes.
    let r = unsafe { g(&mut (*ep).fid, buf.as_mut_ptr() as *mut c_void, &mut len) };
    if r == 0 && len > 0 {
        let (key, _) = canon(st.info.addr_format, &buf[..len.min(ADDR_MAX)]);
        crate::registry::add_own_addr(fnv1a64(&key));
    }
}

/// Points every table pointer of `ep` that is one of `st`'s copies back at the provider's own
/// table (the data tables only, or all of them with `all`). A provider's close and enable paths
/// see their own pointers: verbs allocates each endpoint's `msg` table and `free`s
/// `ep->msg` when the endpoint closes (libfabric 1.17 `vrb_close_free_ep`), and writes through
/// `ep->msg` when it enables an XRC endpoint with a shared receive context.
///
/// # Safety
/// `ep` is live and `st` is its state.
unsafe fn restore_provider_tables(ep: *mut FidEp, st: *mut EpState, all: bool) {
    // SAFETY: ep and st are live (caller); each orig is the provider's table it replaced.
    unsafe {
        let st = &mut *st;
        if core::ptr::eq((*ep).msg, &st.msg.table) {
            (*ep).msg = st.msg.orig as *mut FiOpsMsg;
        }
        if core::ptr::eq((*ep).rma, &st.rma.table) {
            (*ep).rma = st.rma.orig as *mut FiOpsRma;
        }
        if core::ptr::eq((*ep).tagged, &st.tagged.table) {
            (*ep).tagged = st.tagged.orig as *mut FiOpsTagged;
        }
        if all {
            if core::ptr::eq((*ep).cm, &st.cm.table) {
                (*ep).cm = st.cm.orig as *mut FiOpsCm;
            }
            if core::ptr::eq((*ep).fid.ops, &st.fid_ops.table) {
                (*ep).fid.ops = st.fid_ops.orig as *mut FiOps;
            }
        }
    }
}

/// Undoes `restore_provider_tables(ep, st, true)` after a provider call that failed (the endpoint
/// stays open and traced). The data tables are copied afresh from what the provider has now.
///
/// # Safety
/// `ep` is live and `st` is its state.
unsafe fn reinstall_tables(ep: *mut FidEp, st: *mut EpState) {
    // SAFETY: ep and st are live (caller).
    unsafe {
        let st = &mut *st;
        if !st.cm.orig.is_null() && core::ptr::eq((*ep).cm, st.cm.orig) {
            (*ep).cm = &mut st.cm.table;
        }
        if core::ptr::eq((*ep).fid.ops, st.fid_ops.orig) {
            (*ep).fid.ops = &mut st.fid_ops.table;
        }
        install_data_tables(ep, st);
    }
}

unsafe extern "C" fn ep_close(fid: *mut Fid) -> c_int {
    // SAFETY: installed only in the fid_ops copy of an EpState.
    let st = unsafe { ep_state(fid) };
    // SAFETY: st is live until freed below.
    let Some(f) = (unsafe { (*(*st).fid_ops.orig).close }) else {
        return -FI_ENOSYS;
    };
    let ep = fid as *mut FidEp;
    // The provider closes (and may free) what the endpoint points at: give it its own tables.
    // SAFETY: the endpoint (fid at offset 0) and st are live.
    unsafe { restore_provider_tables(ep, st, true) };
    // SAFETY: the program's argument, unchanged.
    let r = unsafe { f(fid) };
    if r == 0 {
        crate::guarded((), || {
            // SAFETY: the endpoint is closed: nothing of the provider points at st any more.
            let id = unsafe { (*st).id };
            crate::registry::update(id, "closed", None);
            if let Ok(mut books) = AV_BOOKS.lock() {
                for b in books.iter_mut() {
                    b.eps.retain(|&e| e != id);
                }
            }
        });
        // SAFETY: as above; the program may not use a closed endpoint. Freed outside `guarded`
        // so that a panic there can never leave it half-done (free_box does not panic).
        unsafe { free_box(st) };
    } else {
        // SAFETY: the close failed: the endpoint is still live.
        unsafe { reinstall_tables(ep, st) };
    }
    r
}

unsafe extern "C" fn ep_bind(fid: *mut Fid, bfid: *mut Fid, flags: u64) -> c_int {
    // SAFETY: installed only in the fid_ops copy of an EpState.
    let st = unsafe { ep_state(fid) };
    // SAFETY: st is live while the endpoint is.
    let Some(f) = (unsafe { (*(*st).fid_ops.orig).bind }) else {
        return -FI_ENOSYS;
    };
    // SAFETY: the program's arguments, unchanged.
    let r = unsafe { f(fid, bfid, flags) };
    if r == 0 && !bfid.is_null() {
        crate::guarded((), || {
            // SAFETY: bfid is a live fid the provider accepted.
            if unsafe { (*bfid).fclass } == FI_CLASS_AV {
                // SAFETY: st is live.
                let id = unsafe { (*st).id };
                let addrs = av_book(bfid as usize, |b| {
                    if !b.eps.contains(&id) {
                        b.eps.push(id);
                    }
                    b.addrs.clone()
                })
                .unwrap_or_default();
                for (a, h) in addrs {
                    announce(id, a, h);
                }
            }
        });
    }
    r
}

unsafe extern "C" fn ep_control(fid: *mut Fid, command: c_int, arg: *mut c_void) -> c_int {
    // SAFETY: installed only in the fid_ops copy of an EpState.
    let st = unsafe { ep_state(fid) };
    // SAFETY: st is live while the endpoint is.
    let Some(f) = (unsafe { (*(*st).fid_ops.orig).control }) else {
        return -FI_ENOSYS;
    };
    let ep = fid as *mut FidEp;
    if command == FI_ENABLE {
        // A provider may pick or rewrite its data tables when it enables the endpoint (verbs
        // writes through ep->msg for XRC): let it see its own, then copy what it left.
        // SAFETY: the endpoint (fid at offset 0) and st are live.
        unsafe { restore_provider_tables(ep, st, false) };
    }
    // SAFETY: the program's arguments, unchanged.
    let r = unsafe { f(fid, command, arg) };
    if command == FI_ENABLE {
        // SAFETY: the endpoint is live (enabled or not); the copies come from its tables now.
        unsafe { install_data_tables(ep, &mut *st) };
        if r == 0 {
            // SAFETY: as above.
            crate::guarded((), || unsafe { note_own_name(ep, &*st) });
        }
    }
    r
}

unsafe extern "C" fn cm_getname(fid: *mut Fid, addr: *mut c_void, addrlen: *mut usize) -> c_int {
    let ep = fid as *mut FidEp;
    // SAFETY: installed only in the cm copy of an EpState; ep->cm points at it.
    let st = unsafe { ep_state_from_cm(ep) };
    // SAFETY: st is live.
    let Some(f) = (unsafe { (*(*st).cm.orig).getname }) else {
        return -FI_ENOSYS;
    };
    // SAFETY: the program's arguments, unchanged.
    let r = unsafe { f(fid, addr, addrlen) };
    if r == 0 && !addr.is_null() && !addrlen.is_null() {
        crate::guarded((), || {
            // SAFETY: on success the provider wrote *addrlen bytes (at most the buffer's size,
            // which the program passed in *addrlen) at addr.
            unsafe {
                let n = (*addrlen).min(ADDR_MAX);
                let b = core::slice::from_raw_parts(addr as *const u8, n);
                let (key, _) = canon((*st).info.addr_format, b);
                crate::registry::add_own_addr(fnv1a64(&key));
            }
        });
    }
    r
}

unsafe extern "C" fn cm_connect(
    ep: *mut FidEp,
    addr: *const c_void,
    param: *const c_void,
    paramlen: usize,
) -> c_int {
    // SAFETY: installed only in the cm copy of an EpState.
    let st = unsafe { ep_state_from_cm(ep) };
    // SAFETY: st is live.
    let Some(f) = (unsafe { (*(*st).cm.orig).connect }) else {
        return -FI_ENOSYS;
    };
    // SAFETY: the program's arguments, unchanged.
    let r = unsafe { f(ep, addr, param, paramlen) };
    if r == 0 {
        crate::guarded((), || {
            // SAFETY: addr is the peer address of the endpoint's format; st and ep are live.
            unsafe {
                let fmt = (*st).info.addr_format;
                if let Some(b) = read_addr(fmt, addr, (*st).info.addrlen) {
                    crate::registry::update((*st).id, "connect", Some(peer_of(fmt, &b)));
                }
                note_own_name(ep, &*st);
            }
        });
    }
    r
}

unsafe extern "C" fn cm_accept(ep: *mut FidEp, param: *const c_void, paramlen: usize) -> c_int {
    // SAFETY: installed only in the cm copy of an EpState.
    let st = unsafe { ep_state_from_cm(ep) };
    // SAFETY: st is live.
    let Some(f) = (unsafe { (*(*st).cm.orig).accept }) else {
        return -FI_ENOSYS;
    };
    // SAFETY: the program's arguments, unchanged.
    let r = unsafe { f(ep, param, paramlen) };
    if r == 0 {
        // SAFETY: ep and its state are live.
        crate::guarded((), || unsafe { note_own_name(ep, &*st) });
    }
    r
}

// ---------------------------------------------------------------------------------------------
// Data path.
// ---------------------------------------------------------------------------------------------

#[inline(always)]
fn aux_addr(a: u64) -> u16 {
    if a >= 0xffff { 0xffff } else { a as u16 }
}

/// Sum of `count` iov lengths.
///
/// # Safety
/// `iov` is NULL or points at `count` iovecs (the program passed it to the provider).
#[inline(always)]
unsafe fn iov_bytes(iov: *const IoVec, count: usize) -> u64 {
    if iov.is_null() {
        return 0;
    }
    let mut n = 0u64;
    for i in 0..count {
        // SAFETY: i < count (caller).
        n = n.wrapping_add(unsafe { (*iov.add(i)).len } as u64);
    }
    n
}

/// One data-path wrapper: finds the endpoint's copy from `ep->$field`, calls the provider, then
/// records `(bytes, addr, aux, flags)` computed by `$info` from the call's arguments.
macro_rules! data_op {
    ($name:ident, $field:ident, $T:ty, $slot:ident, $op:expr,
     ($($a:ident : $t:ty),*), $info:expr) => {
        unsafe extern "C" fn $name(ep: Ep, $($a: $t),*) -> isize {
            // SAFETY: this wrapper is installed only in the Wrapped copy `ep->$field` points at,
            // whose `orig` is the provider's table with this slot set.
            let w = unsafe { (*ep).$field as *const Wrapped<$T> };
            // SAFETY: as above.
            let Some(f) = (unsafe { (*(*w).orig).$slot }) else {
                return -(FI_ENOSYS as isize);
            };
            let Some(ts) = crate::trace_enter(Layer::Libfabric) else {
                // SAFETY: the provider's function with the program's arguments.
                return unsafe { f(ep, $($a),*) };
            };
            // SAFETY: as above.
            let r = unsafe { f(ep, $($a),*) };
            crate::guarded((), || {
                // SAFETY: `w` lives as long as the endpoint; the arguments are the program's
                // and still valid (iovs and msg structs are read, never written).
                #[allow(unused_unsafe)]
                let (bytes, addr, aux, fl): (u64, u64, u16, u8) = unsafe { $info };
                // SAFETY: as above.
                let id = unsafe { (*w).id };
                if r < 0 {
                    ts.record_flags(id, $op, 0, addr, fl | flags::ERROR, aux);
                } else {
                    ts.record_flags(id, $op, bytes, addr, fl, aux);
                }
            });
            ts.leave();
            r
        }
    };
}

const INL: u8 = flags::INLINE;

fn inj(f: u64) -> u8 {
    if f & FI_INJECT != 0 { INL } else { 0 }
}

data_op!(msg_recv, msg, FiOpsMsg, recv, Op::OfiRecv,
    (buf: *mut c_void, len: usize, desc: Desc, src: u64, ctx: Ctx),
    { let _ = (buf, desc, ctx); (len as u64, src, aux_addr(src), 0) });
data_op!(msg_recvv, msg, FiOpsMsg, recvv, Op::OfiRecv,
    (iov: Iov, desc: Descs, count: usize, src: u64, ctx: Ctx),
    { let _ = (desc, ctx); (iov_bytes(iov, count), src, aux_addr(src), 0) });
data_op!(msg_recvmsg, msg, FiOpsMsg, recvmsg, Op::OfiRecv,
    (msg: *const FiMsg, fl: u64),
    { let _ = fl; let m = &*msg; (iov_bytes(m.msg_iov, m.iov_count), m.addr, aux_addr(m.addr), 0) });
data_op!(msg_send, msg, FiOpsMsg, send, Op::OfiSend,
    (buf: Buf, len: usize, desc: Desc, dest: u64, ctx: Ctx),
    { let _ = (buf, desc, ctx); (len as u64, dest, aux_addr(dest), 0) });
data_op!(msg_sendv, msg, FiOpsMsg, sendv, Op::OfiSend,
    (iov: Iov, desc: Descs, count: usize, dest: u64, ctx: Ctx),
    { let _ = (desc, ctx); (iov_bytes(iov, count), dest, aux_addr(dest), 0) });
data_op!(msg_sendmsg, msg, FiOpsMsg, sendmsg, Op::OfiSend,
    (msg: *const FiMsg, fl: u64),
    { let m = &*msg; (iov_bytes(m.msg_iov, m.iov_count), m.addr, aux_addr(m.addr), inj(fl)) });
data_op!(msg_inject, msg, FiOpsMsg, inject, Op::OfiSend,
    (buf: Buf, len: usize, dest: u64),
    { let _ = buf; (len as u64, dest, aux_addr(dest), INL) });
data_op!(msg_senddata, msg, FiOpsMsg, senddata, Op::OfiSend,
    (buf: Buf, len: usize, desc: Desc, data: u64, dest: u64, ctx: Ctx),
    { let _ = (buf, desc, data, ctx); (len as u64, dest, aux_addr(dest), 0) });
data_op!(msg_injectdata, msg, FiOpsMsg, injectdata, Op::OfiSend,
    (buf: Buf, len: usize, data: u64, dest: u64),
    { let _ = (buf, data); (len as u64, dest, aux_addr(dest), INL) });

/// First remote address of an RMA message.
///
/// # Safety
/// `m` is a valid fi_msg_rma.
unsafe fn rma_addr(m: &FiMsgRma) -> u64 {
    if m.rma_iov.is_null() || m.rma_iov_count == 0 {
        0
    } else {
        // SAFETY: at least one rma_iov (count checked).
        unsafe { (*m.rma_iov).addr }
    }
}

data_op!(rma_read, rma, FiOpsRma, read, Op::OfiRead,
    (buf: *mut c_void, len: usize, desc: Desc, src: u64, raddr: u64, key: u64, ctx: Ctx),
    { let _ = (buf, desc, key, ctx); (len as u64, raddr, aux_addr(src), 0) });
data_op!(rma_readv, rma, FiOpsRma, readv, Op::OfiRead,
    (iov: Iov, desc: Descs, count: usize, src: u64, raddr: u64, key: u64, ctx: Ctx),
    { let _ = (desc, key, ctx); (iov_bytes(iov, count), raddr, aux_addr(src), 0) });
data_op!(rma_readmsg, rma, FiOpsRma, readmsg, Op::OfiRead,
    (msg: *const FiMsgRma, fl: u64),
    { let m = &*msg; (iov_bytes(m.msg_iov, m.iov_count), rma_addr(m), aux_addr(m.addr), inj(fl)) });
data_op!(rma_write, rma, FiOpsRma, write, Op::OfiWrite,
    (buf: Buf, len: usize, desc: Desc, dest: u64, raddr: u64, key: u64, ctx: Ctx),
    { let _ = (buf, desc, key, ctx); (len as u64, raddr, aux_addr(dest), 0) });
data_op!(rma_writev, rma, FiOpsRma, writev, Op::OfiWrite,
    (iov: Iov, desc: Descs, count: usize, dest: u64, raddr: u64, key: u64, ctx: Ctx),
    { let _ = (desc, key, ctx); (iov_bytes(iov, count), raddr, aux_addr(dest), 0) });
data_op!(rma_writemsg, rma, FiOpsRma, writemsg, Op::OfiWrite,
    (msg: *const FiMsgRma, fl: u64),
    { let m = &*msg; (iov_bytes(m.msg_iov, m.iov_count), rma_addr(m), aux_addr(m.addr), inj(fl)) });
data_op!(rma_inject, rma, FiOpsRma, inject, Op::OfiWrite,
    (buf: Buf, len: usize, dest: u64, raddr: u64, key: u64),
    { let _ = (buf, key); (len as u64, raddr, aux_addr(dest), INL) });
data_op!(rma_writedata, rma, FiOpsRma, writedata, Op::OfiWrite,
    (buf: Buf, len: usize, desc: Desc, data: u64, dest: u64, raddr: u64, key: u64, ctx: Ctx),
    { let _ = (buf, desc, data, key, ctx); (len as u64, raddr, aux_addr(dest), 0) });
data_op!(rma_injectdata, rma, FiOpsRma, injectdata, Op::OfiWrite,
    (buf: Buf, len: usize, data: u64, dest: u64, raddr: u64, key: u64),
    { let _ = (buf, data, key); (len as u64, raddr, aux_addr(dest), INL) });

data_op!(tag_recv, tagged, FiOpsTagged, recv, Op::OfiTRecv,
    (buf: *mut c_void, len: usize, desc: Desc, src: u64, tag: u64, ignore: u64, ctx: Ctx),
    { let _ = (buf, desc, ignore, ctx); (len as u64, tag, aux_addr(src), 0) });
data_op!(tag_recvv, tagged, FiOpsTagged, recvv, Op::OfiTRecv,
    (iov: Iov, desc: Descs, count: usize, src: u64, tag: u64, ignore: u64, ctx: Ctx),
    { let _ = (desc, ignore, ctx); (iov_bytes(iov, count), tag, aux_addr(src), 0) });
data_op!(tag_recvmsg, tagged, FiOpsTagged, recvmsg, Op::OfiTRecv,
    (msg: *const FiMsgTagged, fl: u64),
    { let _ = fl; let m = &*msg; (iov_bytes(m.msg_iov, m.iov_count), m.tag, aux_addr(m.addr), 0) });
data_op!(tag_send, tagged, FiOpsTagged, send, Op::OfiTSend,
    (buf: Buf, len: usize, desc: Desc, dest: u64, tag: u64, ctx: Ctx),
    { let _ = (buf, desc, ctx); (len as u64, tag, aux_addr(dest), 0) });
data_op!(tag_sendv, tagged, FiOpsTagged, sendv, Op::OfiTSend,
    (iov: Iov, desc: Descs, count: usize, dest: u64, tag: u64, ctx: Ctx),
    { let _ = (desc, ctx); (iov_bytes(iov, count), tag, aux_addr(dest), 0) });
data_op!(tag_sendmsg, tagged, FiOpsTagged, sendmsg, Op::OfiTSend,
    (msg: *const FiMsgTagged, fl: u64),
    { let m = &*msg; (iov_bytes(m.msg_iov, m.iov_count), m.tag, aux_addr(m.addr), inj(fl)) });
data_op!(tag_inject, tagged, FiOpsTagged, inject, Op::OfiTSend,
    (buf: Buf, len: usize, dest: u64, tag: u64),
    { let _ = buf; (len as u64, tag, aux_addr(dest), INL) });
data_op!(tag_senddata, tagged, FiOpsTagged, senddata, Op::OfiTSend,
    (buf: Buf, len: usize, desc: Desc, data: u64, dest: u64, tag: u64, ctx: Ctx),
    { let _ = (buf, desc, data, ctx); (len as u64, tag, aux_addr(dest), 0) });
data_op!(tag_injectdata, tagged, FiOpsTagged, injectdata, Op::OfiTSend,
    (buf: Buf, len: usize, data: u64, dest: u64, tag: u64),
    { let _ = (buf, data); (len as u64, tag, aux_addr(dest), INL) });

// ---------------------------------------------------------------------------------------------
// Completion queues (full mode) and address vectors.
// ---------------------------------------------------------------------------------------------

/// # Safety
/// `cq` is NULL or a live fid_cq.
unsafe fn wrap_cq(cq: *mut FidCq, dom: &AddrInfo) {
    if cq.is_null() {
        return;
    }
    let n = NEXT_CQ.fetch_add(1, Ordering::Relaxed);
    let id = crate::registry::define(
        Layer::Libfabric,
        EndpointKind::FiCq,
        format!("cq#{n}"),
        dom.prov.clone(),
        Peer::default(),
    );
    let Some(p) = try_box(CqState {
        fid_ops: zeroed_wrapped(),
        ops: zeroed_wrapped(),
    }) else {
        return;
    };
    // SAFETY: p is ours until installed; cq is live.
    unsafe {
        let st = &mut *p;
        if !copy_table(&mut st.fid_ops, (*cq).fid.ops, id) || st.fid_ops.table.close.is_none() {
            // Without a close hook the copy could not be freed; leave the cq untraced.
            free_box(p);
            return;
        }
        st.fid_ops.table.close = Some(cq_close);
        if copy_table(&mut st.ops, (*cq).ops, id) {
            if st.ops.table.read.is_some() {
                st.ops.table.read = Some(cq_read);
            }
            if st.ops.table.readfrom.is_some() {
                st.ops.table.readfrom = Some(cq_readfrom);
            }
            (*cq).ops = &mut st.ops.table;
        }
        (*cq).fid.ops = &mut st.fid_ops.table;
    }
}

unsafe extern "C" fn cq_close(fid: *mut Fid) -> c_int {
    // SAFETY: installed only in CqState::fid_ops (its first field), which fid->ops points at.
    let st = unsafe { (*fid).ops as *mut CqState };
    // SAFETY: st is live until freed below.
    let Some(f) = (unsafe { (*(*st).fid_ops.orig).close }) else {
        return -FI_ENOSYS;
    };
    let cq = fid as *mut FidCq;
    // The provider closes (and may free) what the cq points at: give it its own tables.
    // SAFETY: the cq (fid at offset 0) and st are live.
    unsafe {
        if core::ptr::eq((*cq).ops, &(*st).ops.table) {
            (*cq).ops = (*st).ops.orig as *mut FiOpsCq;
        }
        (*fid).ops = (*st).fid_ops.orig as *mut FiOps;
    }
    // SAFETY: the program's argument.
    let r = unsafe { f(fid) };
    if r == 0 {
        // SAFETY: the cq is closed; nothing points at st any more.
        unsafe { free_box(st) };
    } else {
        // SAFETY: the close failed: the cq is still live; put the copies back.
        unsafe {
            if !(*st).ops.orig.is_null() && core::ptr::eq((*cq).ops, (*st).ops.orig) {
                (*cq).ops = &mut (*st).ops.table;
            }
            (*fid).ops = &mut (*st).fid_ops.table;
        }
    }
    r
}

#[inline(always)]
fn cq_record(ts: &crate::thread::ThreadState, id: u32, r: isize) {
    if r > 0 {
        ts.record_flags(id, Op::OfiCqRead, r as u64, 0, 0, 0);
    } else if r < 0 && r != -FI_EAGAIN {
        ts.record_flags(id, Op::OfiCqRead, 0, 0, flags::ERROR, 0);
    }
}

unsafe extern "C" fn cq_read(cq: *mut FidCq, buf: *mut c_void, count: usize) -> isize {
    // SAFETY: installed only in the Wrapped copy cq->ops points at.
    let w = unsafe { (*cq).ops as *const Wrapped<FiOpsCq> };
    // SAFETY: as above.
    let Some(f) = (unsafe { (*(*w).orig).read }) else {
        return -(FI_ENOSYS as isize);
    };
    let Some(ts) = crate::trace_enter(Layer::Libfabric) else {
        // SAFETY: the provider's function with the program's arguments.
        return unsafe { f(cq, buf, count) };
    };
    // SAFETY: as above.
    let r = unsafe { f(cq, buf, count) };
    // SAFETY: w lives as long as the cq.
    let id = unsafe { (*w).id };
    crate::guarded((), || cq_record(ts, id, r));
    ts.leave();
    r
}

unsafe extern "C" fn cq_readfrom(
    cq: *mut FidCq,
    buf: *mut c_void,
    count: usize,
    src: *mut u64,
) -> isize {
    // SAFETY: installed only in the Wrapped copy cq->ops points at.
    let w = unsafe { (*cq).ops as *const Wrapped<FiOpsCq> };
    // SAFETY: as above.
    let Some(f) = (unsafe { (*(*w).orig).readfrom }) else {
        return -(FI_ENOSYS as isize);
    };
    let Some(ts) = crate::trace_enter(Layer::Libfabric) else {
        // SAFETY: the provider's function with the program's arguments.
        return unsafe { f(cq, buf, count, src) };
    };
    // SAFETY: as above.
    let r = unsafe { f(cq, buf, count, src) };
    // SAFETY: w lives as long as the cq.
    let id = unsafe { (*w).id };
    crate::guarded((), || cq_record(ts, id, r));
    ts.leave();
    r
}

/// # Safety
/// `av` is NULL or a live fid_av.
unsafe fn wrap_av(av: *mut FidAv, dom: &AddrInfo) {
    if av.is_null() {
        return;
    }
    let Some(p) = try_box(AvState {
        fid_ops: zeroed_wrapped(),
        ops: zeroed_wrapped(),
        info: dom.clone(),
        next_index: AtomicU64::new(0),
    }) else {
        return;
    };
    // SAFETY: p is ours until installed; av is live.
    unsafe {
        let st = &mut *p;
        if !copy_table(&mut st.fid_ops, (*av).fid.ops, 0) || st.fid_ops.table.close.is_none() {
            free_box(p);
            return;
        }
        st.fid_ops.table.close = Some(av_close);
        if !copy_table(&mut st.ops, (*av).ops, 0) {
            free_box(p);
            return;
        }
        if st.ops.table.insert.is_some() {
            st.ops.table.insert = Some(av_insert);
        }
        if st.ops.table.insertsvc.is_some() {
            st.ops.table.insertsvc = Some(av_insertsvc);
        }
        (*av).ops = &mut st.ops.table;
        (*av).fid.ops = &mut st.fid_ops.table;
    }
}

/// The AvState of a wrapped AV from its ops pointer.
///
/// # Safety
/// `av->ops` is our copy.
unsafe fn av_state(av: *mut FidAv) -> *mut AvState {
    // SAFETY: ops is a field of AvState at a fixed offset.
    unsafe { ((*av).ops as *mut u8).sub(offset_of!(AvState, ops)) as *mut AvState }
}

unsafe extern "C" fn av_close(fid: *mut Fid) -> c_int {
    // SAFETY: installed only in AvState::fid_ops (its first field).
    let st = unsafe { (*fid).ops as *mut AvState };
    // SAFETY: st is live until freed below.
    let Some(f) = (unsafe { (*(*st).fid_ops.orig).close }) else {
        return -FI_ENOSYS;
    };
    let av = fid as *mut FidAv;
    // The provider closes (and may free) what the av points at: give it its own tables.
    // SAFETY: the av (fid at offset 0) and st are live.
    unsafe {
        if core::ptr::eq((*av).ops, &(*st).ops.table) {
            (*av).ops = (*st).ops.orig as *mut FiOpsAv;
        }
        (*fid).ops = (*st).fid_ops.orig as *mut FiOps;
    }
    // SAFETY: the program's argument.
    let r = unsafe { f(fid) };
    if r == 0 {
        crate::guarded((), || {
            if let Ok(mut books) = AV_BOOKS.lock() {
                books.retain(|b| b.av != fid as usize);
            }
        });
        // SAFETY: the av is closed; nothing points at st any more.
        unsafe { free_box(st) };
    } else {
        // SAFETY: the close failed: the av is still live; put the copies back.
        unsafe {
            if core::ptr::eq((*av).ops, (*st).ops.orig) {
                (*av).ops = &mut (*st).ops.table;
            }
            (*fid).ops = &mut (*st).fid_ops.table;
        }
    }
    r
}

/// Records the addresses behind `fi_addrs` (read back with the provider's lookup) and announces
/// them to every endpoint bound to the AV.
///
/// # Safety
/// `av` is a live wrapped AV.
unsafe fn note_inserted(av: *mut FidAv, fi_addrs: &[u64]) {
    // SAFETY: av is wrapped (caller).
    let st = unsafe { &*av_state(av) };
    // SAFETY: orig is the provider's av table.
    let Some(lookup) = (unsafe { (*st.ops.orig).lookup }) else {
        return;
    };
    let mut found = Vec::new();
    for &a in fi_addrs {
        if a == FI_ADDR_UNSPEC {
            continue;
        }
        let mut buf = [0u8; ADDR_MAX];
        let mut len = ADDR_MAX;
        // SAFETY: provider lookup into a buffer of `len` bytes.
        let r = unsafe { lookup(av, a, buf.as_mut_ptr() as *mut c_void, &mut len) };
        if r == 0 && len > 0 {
            let (key, _) = canon(st.info.addr_format, &buf[..len.min(ADDR_MAX)]);
            found.push((a, fnv1a64(&key)));
        }
    }
    let eps = av_book(av as usize, |b| {
        b.addrs.extend_from_slice(&found);
        b.eps.clone()
    })
    .unwrap_or_default();
    for e in eps {
        for &(a, h) in &found {
            announce(e, a, h);
        }
    }
}

unsafe extern "C" fn av_insert(
    av: *mut FidAv,
    addr: *const c_void,
    count: usize,
    fi_addr: *mut u64,
    fl: u64,
    ctx: Ctx,
) -> c_int {
    // SAFETY: installed only in AvState::ops, which av->ops points at.
    let st = unsafe { av_state(av) };
    // SAFETY: st is live while the av is.
    let Some(f) = (unsafe { (*(*st).ops.orig).insert }) else {
        return -FI_ENOSYS;
    };
    let Some(ts) = crate::trace_enter(Layer::Libfabric) else {
        // SAFETY: the program's arguments, unchanged.
        return unsafe { f(av, addr, count, fi_addr, fl, ctx) };
    };
    // SAFETY: as above.
    let r = unsafe { f(av, addr, count, fi_addr, fl, ctx) };
    if r > 0 {
        crate::guarded((), || {
            // SAFETY: st is live; fi_addr is NULL or the program's array of `count` entries,
            // filled by the provider (FI_ADDR_NOTAVAIL where an insert failed).
            unsafe {
                let first = (*st).next_index.fetch_add(count as u64, Ordering::Relaxed);
                let addrs: Vec<u64> = if fi_addr.is_null() {
                    (first..first + count as u64).collect()
                } else {
                    core::slice::from_raw_parts(fi_addr, count).to_vec()
                };
                note_inserted(av, &addrs);
            }
        });
    }
    ts.leave();
    r
}

unsafe extern "C" fn av_insertsvc(
    av: *mut FidAv,
    node: *const c_char,
    service: *const c_char,
    fi_addr: *mut u64,
    fl: u64,
    ctx: Ctx,
) -> c_int {
    // SAFETY: installed only in AvState::ops, which av->ops points at.
    let st = unsafe { av_state(av) };
    // SAFETY: st is live while the av is.
    let Some(f) = (unsafe { (*(*st).ops.orig).insertsvc }) else {
        return -FI_ENOSYS;
    };
    let Some(ts) = crate::trace_enter(Layer::Libfabric) else {
        // SAFETY: the program's arguments, unchanged.
        return unsafe { f(av, node, service, fi_addr, fl, ctx) };
    };
    // SAFETY: as above.
    let r = unsafe { f(av, node, service, fi_addr, fl, ctx) };
    if r > 0 {
        crate::guarded((), || {
            // SAFETY: st is live; fi_addr is NULL or the program's one entry.
            unsafe {
                let first = (*st).next_index.fetch_add(1, Ordering::Relaxed);
                let a = if fi_addr.is_null() { first } else { *fi_addr };
                note_inserted(av, &[a]);
            }
        });
    }
    ts.leave();
    r
}
