//! The libfabric object tree above the endpoints: the fabric's ops (domain, domain2,
//! passive_ep), passive endpoints (getname: the address a server hands to its clients), and the
//! domain's ops (endpoint, endpoint2, cq_open, av_open), each wrapped in a per-object copy.

use core::ffi::{c_int, c_void};

use sigmatop::event::Layer;

use super::abi::{
    FI_ENOSYS, FiCqAttr, FiInfo, FiOpsCm, FiOpsDomain, FiOpsFabric, Fid, FidAv, FidCq, FidDomain,
    FidEp, FidFabric, FidPep,
};
use super::addr::{AddrInfo, addr_info, getname};
use super::cq_av::{provider_format, wrap_av, wrap_cq};
use super::endpoint::wrap_ep;
use super::table::{Wrapped, copy_table, try_box, wrap_slot, zeroed_wrapped};
use crate::interpose::hook::{self, Guard};

#[repr(C)]
struct FabricState {
    ops: Wrapped<FiOpsFabric>,
}

#[repr(C)]
struct DomainState {
    ops: Wrapped<FiOpsDomain>,
    info: AddrInfo,
}

/// # Safety
/// `fab` is NULL or a live fid_fabric.
pub(super) unsafe fn wrap_fabric(fab: *mut FidFabric) {
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
    wrap_slot(&mut t.domain, fabric_domain);
    wrap_slot(&mut t.domain2, fabric_domain2);
    wrap_slot(&mut t.passive_ep, fabric_passive_ep);
    if let Some(p) = try_box(st) {
        // SAFETY: fab is live; the copy lives as long as the process (fabrics are few; it is
        // never freed so that a thread still reading fab->ops can never touch freed memory).
        unsafe { (*fab).ops = p as *mut FiOpsFabric };
    }
}

/// The body of every open wrapper: the program's open `call` inside the guard (so that what the
/// provider opens inside it stays unwrapped) and, when it succeeded, `wrap` of what it opened.
#[inline]
fn control(call: impl FnOnce() -> c_int, wrap: impl FnOnce()) -> c_int {
    hook::around(Guard::Outermost(Layer::Libfabric), call, |_, r| {
        if r == 0 {
            wrap()
        }
    })
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
    // SAFETY: installed only in a PepState (cm first) that the pep's cm points at; it lives for
    // the process.
    let st = unsafe { &*((*(fid as *mut FidPep)).cm as *const PepState) };
    // SAFETY: the provider's table the copy was made from.
    let Some(f) = (unsafe { (*st.cm.orig).getname }) else {
        return -FI_ENOSYS;
    };
    // SAFETY: the program's arguments for the provider's getname of this pep.
    unsafe { getname(f, fid, addr, addrlen, st.addr_format) }
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
    wrap_slot(&mut t.endpoint, domain_endpoint);
    wrap_slot(&mut t.endpoint2, domain_endpoint2);
    wrap_slot(&mut t.cq_open, domain_cq_open);
    wrap_slot(&mut t.av_open, domain_av_open);
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
    // SAFETY: the provider's table the copy was made from.
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
    // SAFETY: the provider's table the copy was made from.
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

/// `cq_open`: a queue of `FI_CQ_FORMAT_CONTEXT` entries is opened as `FI_CQ_FORMAT_MSG` (its
/// entries carry the received length; the wrappers give the program its own format back), the
/// program's attributes otherwise unchanged (what the provider writes back into them is copied
/// back, the format excepted). If the provider refuses that format, or the queue cannot be
/// wrapped, it is opened exactly as the program asked.
unsafe extern "C" fn domain_cq_open(
    dom: *mut FidDomain,
    attr: *mut c_void,
    cq: *mut *mut FidCq,
    context: *mut c_void,
) -> c_int {
    // SAFETY: as domain_endpoint.
    let st = unsafe { domain_state(dom) };
    // SAFETY: the provider's table the copy was made from.
    let Some(f) = (unsafe { (*st.ops.orig).cq_open }) else {
        return -FI_ENOSYS;
    };
    let attr = attr as *mut FiCqAttr;
    // SAFETY: the program's attributes (NULL or valid).
    let app_format = unsafe { attr.as_ref() }.map_or(0, |a| a.format);
    let plain = || {
        // SAFETY: the program's arguments, unchanged.
        let r = unsafe { f(dom, attr as *mut c_void, cq, context) };
        if r == 0 {
            // SAFETY: on success *cq is the new completion queue.
            hook::guarded((), || unsafe {
                wrap_cq(*cq, &st.info, app_format, app_format);
            });
        }
        r
    };
    let prov_format = provider_format(app_format);
    if prov_format == app_format {
        return hook::around_traced(
            Layer::Libfabric,
            |traced| {
                if traced {
                    plain()
                } else {
                    // SAFETY: the program's arguments, unchanged.
                    unsafe { f(dom, attr as *mut c_void, cq, context) }
                }
            },
            |_, _| {},
        );
    }
    hook::around_traced(
        Layer::Libfabric,
        |traced| {
            if !traced {
                // SAFETY: the program's arguments, unchanged.
                return unsafe { f(dom, attr as *mut c_void, cq, context) };
            }
            // SAFETY: attr is non-NULL (its format was read).
            let mut ours = unsafe { *attr };
            ours.format = prov_format;
            // SAFETY: the program's domain, cq slot and context; attributes with the msg format.
            let r = unsafe { f(dom, &mut ours as *mut FiCqAttr as *mut c_void, cq, context) };
            if r != 0 {
                return plain();
            }
            // SAFETY: on success *cq is the new completion queue.
            let wrapped = hook::guarded(false, || unsafe {
                wrap_cq(*cq, &st.info, app_format, prov_format)
            });
            if !wrapped {
                // The program could not read msg entries through its own calls: open it again as
                // it asked.
                // SAFETY: the queue just opened, never handed to the program.
                unsafe { close_fid(*cq as *mut Fid) };
                return plain();
            }
            // SAFETY: the program's attributes: what the provider wrote, the format kept.
            unsafe {
                *attr = FiCqAttr {
                    format: app_format,
                    ..ours
                }
            };
            r
        },
        |_, _| {},
    )
}

/// Closes an object sigmatop opened and did not hand out, with the provider's own close.
///
/// # Safety
/// `fid` is a live object whose fid ops are still the provider's.
unsafe fn close_fid(fid: *mut Fid) {
    // SAFETY: the caller's contract.
    unsafe {
        if let Some(close) = (*(*fid).ops).close {
            close(fid);
        }
    }
}

unsafe extern "C" fn domain_av_open(
    dom: *mut FidDomain,
    attr: *mut c_void,
    av: *mut *mut FidAv,
    context: *mut c_void,
) -> c_int {
    // SAFETY: as domain_endpoint.
    let st = unsafe { domain_state(dom) };
    // SAFETY: the provider's table the copy was made from.
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
