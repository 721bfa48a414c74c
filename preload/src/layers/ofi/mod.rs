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

mod abi;
mod addr;
mod cq_av;
mod data;
mod endpoint;
mod fabric;
mod table;

use core::ffi::{c_char, c_int, c_void};
use core::sync::atomic::{AtomicU64, Ordering};

use sigmatop::event::Layer;

use crate::interpose::dlsym::hook_table;
use crate::interpose::hook::{self, Guard};
use crate::runtime::dl::real_fns;
use abi::{FI_ENOSYS, FiFabricAttr, FiInfo, FidFabric};

/// The libfabric layer's lock (the address-vector books), for `fork::prepare`. Taken before the
/// registry's: `addr::av_book` runs its closure with it held.
pub fn hold_for_fork(h: &mut crate::runtime::held::Held) {
    h.lock(&addr::AV_BOOKS);
}

/// Objects whose tables sigmatop could not wrap (their calls go through untraced). Also counted
/// in `HOOK_FAILURES`, which the drop counters report.
pub static UNWRAPPED: AtomicU64 = AtomicU64::new(0);

#[cold]
fn unwrapped() {
    UNWRAPPED.fetch_add(1, Ordering::Relaxed);
    hook::failed(1);
}

type GetinfoFn = unsafe extern "C" fn(
    u32,
    *const c_char,
    *const c_char,
    u64,
    *const FiInfo,
    *mut *mut FiInfo,
) -> c_int;
type FabricFn = unsafe extern "C" fn(*mut FiFabricAttr, *mut *mut FidFabric, *mut c_void) -> c_int;

real_fns! { &[c"libfabric.so.1"];
    REAL_GETINFO: GetinfoFn = c"fi_getinfo";
    REAL_FABRIC: FabricFn = c"fi_fabric";
}

pub fn hooks() -> Vec<crate::interpose::dlsym::Hook> {
    hook_table![Layer::Libfabric;
        fi_getinfo => REAL_GETINFO,
        fi_fabric => REAL_FABRIC,
    ]
}

/// `fi_getinfo`: starts the collector (control path), otherwise untouched.
#[unsafe(no_mangle)]
unsafe extern "C" fn fi_getinfo(
    version: u32,
    node: *const c_char,
    service: *const c_char,
    flags: u64,
    hints: *const FiInfo,
    info: *mut *mut FiInfo,
) -> c_int {
    let Some(real) = REAL_GETINFO.get() else {
        return -FI_ENOSYS;
    };
    hook::start_collector(Layer::Libfabric);
    // SAFETY: the program's arguments, unchanged.
    unsafe { real(version, node, service, flags, hints, info) }
}

/// `fi_fabric`: opens the fabric, then points its ops at a copy whose `domain` is wrapped.
#[unsafe(no_mangle)]
unsafe extern "C" fn fi_fabric(
    attr: *mut FiFabricAttr,
    fabric: *mut *mut FidFabric,
    context: *mut c_void,
) -> c_int {
    let Some(real) = REAL_FABRIC.get() else {
        return -FI_ENOSYS;
    };
    hook::start_collector(Layer::Libfabric);
    // A fabric opened inside another sigmatop hook (a utility provider opening its core
    // provider) is the provider's business: it passes through and stays unwrapped.
    hook::around(
        Guard::Outermost(Layer::Libfabric),
        // SAFETY: the program's arguments, unchanged.
        || unsafe { real(attr, fabric, context) },
        |_, r| {
            if r == 0 && !fabric.is_null() {
                // SAFETY: on success *fabric is the fabric the provider just opened.
                unsafe { fabric::wrap_fabric(*fabric) }
            }
        },
    )
}
