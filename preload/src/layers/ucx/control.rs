//! The UCX control path (may lock and allocate): library init starts the collector, workers and
//! endpoints are defined with their peers, closes are noted, and this process's own worker
//! addresses join its identity.

use core::ffi::{c_int, c_uint, c_void};

use sigmatop::event::{EndpointKind, Layer, Peer, fnv1a64};

use super::SONAMES;
use super::abi::{
    EP_PARAM_FIELD_CONN_REQUEST, EP_PARAM_FIELD_REMOTE_ADDRESS, EP_PARAM_FIELD_SOCK_ADDR, EpParams,
    Ptr, RequestParam, Status, UCS_ERR_UNSUPPORTED, WORKER_ATTR_FIELD_ADDRESS, WorkerAttrHead,
    unsupported_ptr,
};
use crate::interpose::dlsym::hook_table;
use crate::interpose::hook::{self, Guard};
use crate::runtime::dl::real_fns;

type InitVersion =
    unsafe extern "C" fn(c_uint, c_uint, *const c_void, *const c_void, *mut Ptr) -> Status;
type WorkerCreate = unsafe extern "C" fn(Ptr, *const c_void, *mut Ptr) -> Status;
type WorkerGetAddress = unsafe extern "C" fn(Ptr, *mut *mut u8, *mut usize) -> Status;
type WorkerQuery = unsafe extern "C" fn(Ptr, *mut WorkerAttrHead) -> Status;
type EpCreate = unsafe extern "C" fn(Ptr, *const EpParams, *mut Ptr) -> Status;
type EpCloseNb = unsafe extern "C" fn(Ptr, c_uint) -> Ptr;
type EpCloseNbx = unsafe extern "C" fn(Ptr, *const RequestParam) -> Ptr;
type EpDestroy = unsafe extern "C" fn(Ptr);

real_fns! { SONAMES;
    INIT_VERSION: InitVersion = c"ucp_init_version";
    WORKER_CREATE: WorkerCreate = c"ucp_worker_create";
    WORKER_GET_ADDRESS: WorkerGetAddress = c"ucp_worker_get_address";
    WORKER_QUERY: WorkerQuery = c"ucp_worker_query";
    EP_CREATE: EpCreate = c"ucp_ep_create";
    EP_CLOSE_NB: EpCloseNb = c"ucp_ep_close_nb";
    EP_CLOSE_NBX: EpCloseNbx = c"ucp_ep_close_nbx";
    EP_DESTROY: EpDestroy = c"ucp_ep_destroy";
}

/// The body of a UCX control hook: the real call, then `note` with its result under the guard.
#[inline(always)]
fn control<R: Copy>(call_real: impl FnOnce() -> R, note: impl FnOnce(R)) -> R {
    hook::around(Guard::AfterCall(Layer::Ucx), call_real, |_, r| note(r))
}

/// The transport an endpoint uses, as far as the environment says.
fn transport() -> String {
    std::env::var("UCX_TLS").unwrap_or_default()
}

/// FNV-1a of the worker uuid in a packed UCX 1.13 worker address (see the module doc).
///
/// # Safety
/// `addr` points at a packed worker address (at least 9 bytes).
unsafe fn address_hash(addr: *const u8) -> u64 {
    // SAFETY: per the caller; bytes 1..9 are the uuid.
    let uuid = unsafe { core::slice::from_raw_parts(addr.add(1), 8) };
    fnv1a64(uuid)
}

/// "ip:port" of a socket address.
///
/// # Safety
/// `sa` points at `len` readable bytes.
unsafe fn sockaddr_text(sa: *const libc::sockaddr, len: libc::socklen_t) -> String {
    if sa.is_null() || (len as usize) < core::mem::size_of::<libc::sa_family_t>() {
        return String::new();
    }
    // SAFETY: at least the family is readable.
    let family = unsafe { (*sa).sa_family } as c_int;
    if family == libc::AF_INET && len as usize >= core::mem::size_of::<libc::sockaddr_in>() {
        // SAFETY: an AF_INET address of full size.
        let a = unsafe { core::ptr::read_unaligned(sa as *const libc::sockaddr_in) };
        let ip = std::net::Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
        format!("{ip}:{}", u16::from_be(a.sin_port))
    } else if family == libc::AF_INET6 && len as usize >= core::mem::size_of::<libc::sockaddr_in6>()
    {
        // SAFETY: an AF_INET6 address of full size.
        let a = unsafe { core::ptr::read_unaligned(sa as *const libc::sockaddr_in6) };
        let ip = std::net::Ipv6Addr::from(a.sin6_addr.s6_addr);
        format!("[{ip}]:{}", u16::from_be(a.sin6_port))
    } else {
        format!("family {family}")
    }
}

/// Hook of `ucp_init_version` (`ucp_init` is an inline wrapper of it): starts the collector.
#[unsafe(no_mangle)]
unsafe extern "C" fn ucp_init_version(
    major: c_uint,
    minor: c_uint,
    params: *const c_void,
    config: *const c_void,
    context_p: *mut Ptr,
) -> Status {
    let Some(real) = INIT_VERSION.get() else {
        return UCS_ERR_UNSUPPORTED;
    };
    control(
        // SAFETY: the program's arguments, unchanged.
        || unsafe { real(major, minor, params, config, context_p) },
        |_| crate::runtime::collector::ensure_started(),
    )
}

/// Hook of `ucp_worker_create`: defines the worker (receives and worker flushes are counted on it).
#[unsafe(no_mangle)]
unsafe extern "C" fn ucp_worker_create(
    context: Ptr,
    params: *const c_void,
    worker_p: *mut Ptr,
) -> Status {
    let Some(real) = WORKER_CREATE.get() else {
        return UCS_ERR_UNSUPPORTED;
    };
    control(
        // SAFETY: the program's arguments, unchanged.
        || unsafe { real(context, params, worker_p) },
        |r| {
            if r != 0 || worker_p.is_null() {
                return;
            }
            crate::runtime::collector::ensure_started();
            // SAFETY: on success UCX stored the new worker in *worker_p.
            let worker = unsafe { *worker_p };
            let id = crate::runtime::registry::define(
                Layer::Ucx,
                EndpointKind::UcpWorker,
                format!("worker@{:#x}", worker as usize),
                transport(),
                Peer::default(),
            );
            crate::runtime::registry::bind(worker as usize, id);
        },
    )
}

/// Hook of `ucp_worker_get_address`: the address is one of this process's own.
#[unsafe(no_mangle)]
unsafe extern "C" fn ucp_worker_get_address(
    worker: Ptr,
    address_p: *mut *mut u8,
    length_p: *mut usize,
) -> Status {
    let Some(real) = WORKER_GET_ADDRESS.get() else {
        return UCS_ERR_UNSUPPORTED;
    };
    control(
        // SAFETY: the program's arguments, unchanged.
        || unsafe { real(worker, address_p, length_p) },
        |r| {
            if r != 0 || address_p.is_null() || length_p.is_null() {
                return;
            }
            // SAFETY: on success UCX stored the address and its length.
            let (addr, len) = unsafe { (*address_p, *length_p) };
            if !addr.is_null() && len >= 9 {
                // SAFETY: a packed worker address of `len` >= 9 bytes.
                crate::runtime::registry::add_own_addr(unsafe { address_hash(addr) });
            }
        },
    )
}

/// Hook of `ucp_worker_query`: an address asked for is one of this process's own.
#[unsafe(no_mangle)]
unsafe extern "C" fn ucp_worker_query(worker: Ptr, attr: *mut WorkerAttrHead) -> Status {
    let Some(real) = WORKER_QUERY.get() else {
        return UCS_ERR_UNSUPPORTED;
    };
    control(
        // SAFETY: the program's arguments, unchanged.
        || unsafe { real(worker, attr) },
        |r| {
            if r != 0 || attr.is_null() {
                return;
            }
            // SAFETY: `attr` is the program's valid ucp_worker_attr_t, filled in by UCX.
            let a = unsafe { &*attr };
            if a.field_mask & WORKER_ATTR_FIELD_ADDRESS != 0
                && !a.address.is_null()
                && a.address_length >= 9
            {
                // SAFETY: a packed worker address of address_length >= 9 bytes.
                crate::runtime::registry::add_own_addr(unsafe { address_hash(a.address) });
            }
        },
    )
}

/// Hook of `ucp_ep_create`: defines the endpoint with its peer (worker address hash or socket
/// address).
#[unsafe(no_mangle)]
unsafe extern "C" fn ucp_ep_create(worker: Ptr, params: *const EpParams, ep_p: *mut Ptr) -> Status {
    let Some(real) = EP_CREATE.get() else {
        return UCS_ERR_UNSUPPORTED;
    };
    // The program's error handler behind a trampoline of sigmatop's (super::ep_error).
    let wrapped = if params.is_null() || !crate::runtime::config::layer_enabled(Layer::Ucx) {
        None
    } else {
        // SAFETY: the program's valid ucp_ep_params_t.
        unsafe { super::ep_error::wrap(params) }
    };
    let given = wrapped.as_ref().map_or(params, |c| c as *const EpParams);
    control(
        // SAFETY: the program's arguments, or a copy of its parameters that differs only in the
        // error handler.
        || unsafe { real(worker, given, ep_p) },
        |r| {
            if r != 0 || ep_p.is_null() || params.is_null() {
                return;
            }
            crate::runtime::collector::ensure_started();
            // SAFETY: on success UCX stored the new endpoint; `params` is the program's valid
            // ucp_ep_params_t, whose fields are read only where field_mask says they are set.
            let (ep, p) = unsafe { (*ep_p, &*params) };
            let mut peer = Peer::default();
            if p.field_mask & EP_PARAM_FIELD_REMOTE_ADDRESS != 0 && !p.address.is_null() {
                // SAFETY: a packed worker address (the peer's), at least 9 bytes.
                peer.addr_hash = unsafe { address_hash(p.address) };
            }
            if p.field_mask & EP_PARAM_FIELD_SOCK_ADDR != 0 {
                // SAFETY: the socket address and its length as the program gave them.
                peer.text = unsafe { sockaddr_text(p.sockaddr.addr, p.sockaddr.addrlen) };
            } else if p.field_mask & EP_PARAM_FIELD_CONN_REQUEST != 0 {
                peer.text = "conn_request".into();
            }
            let id = crate::runtime::registry::define(
                Layer::Ucx,
                EndpointKind::UcpEp,
                format!("ep@{:#x}", ep as usize),
                transport(),
                peer,
            );
            crate::runtime::registry::bind(ep as usize, id);
        },
    )
}

/// The body of the close hooks: the endpoint is marked closed before the real call (the handle
/// may be freed, and reused, once it returns), inside the guard, which the real call runs in too.
#[inline(always)]
fn close<R: Copy>(ep: Ptr, call_real: impl FnOnce() -> R) -> R {
    let Some(ts) = hook::enter(Layer::Ucx) else {
        return call_real();
    };
    hook::guarded((), || {
        let id = crate::runtime::registry::lookup(ep as usize);
        if id != sigmatop::event::UNATTRIBUTED_EP {
            crate::runtime::registry::update(id, "closed", None);
        }
    });
    let r = call_real();
    ts.leave();
    r
}

/// Hook of `ucp_ep_close_nb`.
#[unsafe(no_mangle)]
unsafe extern "C" fn ucp_ep_close_nb(ep: Ptr, mode: c_uint) -> Ptr {
    let Some(real) = EP_CLOSE_NB.get() else {
        return unsupported_ptr();
    };
    // SAFETY: the program's arguments, unchanged.
    close(ep, || unsafe { real(ep, mode) })
}

/// Hook of `ucp_ep_close_nbx`.
#[unsafe(no_mangle)]
unsafe extern "C" fn ucp_ep_close_nbx(ep: Ptr, param: *const RequestParam) -> Ptr {
    let Some(real) = EP_CLOSE_NBX.get() else {
        return unsupported_ptr();
    };
    // SAFETY: the program's arguments, unchanged.
    close(ep, || unsafe { real(ep, param) })
}

/// Hook of `ucp_ep_destroy`.
#[unsafe(no_mangle)]
unsafe extern "C" fn ucp_ep_destroy(ep: Ptr) {
    let Some(real) = EP_DESTROY.get() else {
        return;
    };
    // SAFETY: the program's argument, unchanged.
    close(ep, || unsafe { real(ep) })
}

pub(super) fn hooks() -> Vec<crate::interpose::dlsym::Hook> {
    hook_table![Layer::Ucx;
        ucp_init_version => INIT_VERSION,
        ucp_worker_create => WORKER_CREATE,
        ucp_worker_get_address => WORKER_GET_ADDRESS,
        ucp_worker_query => WORKER_QUERY,
        ucp_ep_create => EP_CREATE,
        ucp_ep_close_nb => EP_CLOSE_NB,
        ucp_ep_close_nbx => EP_CLOSE_NBX,
        ucp_ep_destroy => EP_DESTROY,
    ]
}
