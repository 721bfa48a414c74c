//! Endpoints the process created (control path, under a lock) and the lock-free map from a
//! library's handle (ucp_ep_h, qp pointer...) to sigmatop's endpoint id (hot path, reads only).

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

use sigmatop::event::{
    EndpointDef, EndpointKind, EndpointUpdate, Layer, MemRegion, Peer, UNATTRIBUTED_EP,
};

use crate::runtime::ptrmap::PtrMap;

/// Handles (ucp_ep_h, qp pointer...) → endpoint id.
static MAP: PtrMap<u32, { 1 << 15 }> = PtrMap::new();

static NEXT_ID: AtomicU32 = AtomicU32::new(1);
static DEFS: Mutex<Vec<EndpointDef>> = Mutex::new(Vec::new());
static UPDATES: Mutex<Vec<EndpointUpdate>> = Mutex::new(Vec::new());
static OWN_ADDRS: Mutex<Vec<u64>> = Mutex::new(Vec::new());
/// Bumped whenever the identity (own addresses) changes, so the collector re-announces it.
pub static IDENTITY_GEN: AtomicU64 = AtomicU64::new(0);
/// Operations on handles sigmatop never saw created.
pub static UNATTRIBUTED: AtomicU64 = AtomicU64::new(0);

/// The endpoint id of `handle`, or `UNATTRIBUTED_EP` (counted in `UNATTRIBUTED` when the handle
/// was never bound; handles are never unbound). Lock-free, a few loads.
#[inline(always)]
pub fn lookup(handle: usize) -> u32 {
    match MAP.get(handle) {
        Some(id) => id,
        None => lookup_miss(),
    }
}

/// As [`lookup`] for hooks whose bookkeeping must stay small to be inlined (UCX's; see
/// `PtrMap::get_compact`): the probe past the home slot is a call.
#[inline(always)]
pub fn lookup_compact(handle: usize) -> u32 {
    match MAP.get_compact(handle) {
        Some(id) => id,
        None => lookup_miss(),
    }
}

#[cold]
fn lookup_miss() -> u32 {
    UNATTRIBUTED.fetch_add(1, Ordering::Relaxed);
    UNATTRIBUTED_EP
}

/// Maps `handle` to `id` (replacing an earlier mapping of a reused handle). Control path.
pub fn bind(handle: usize, id: u32) {
    if handle != 0 && !MAP.insert(handle, id) {
        crate::runtime::config::warn(
            "endpoint map is full: traffic of further endpoints is unattributed".into(),
        );
    }
}

/// The registry's locks, for `fork::prepare`. Each is a leaf (nothing else is taken while one is
/// held: `bind` warns about a full map after releasing the map's lock).
pub fn hold_for_fork(h: &mut crate::runtime::held::Held) {
    h.lock(&DEFS);
    h.lock(&UPDATES);
    h.lock(&OWN_ADDRS);
    h.lock(&MRS);
    h.with(|| MAP.try_lock_writers());
}

/// Defines a new endpoint and returns its id.
pub fn define(
    layer: Layer,
    kind: EndpointKind,
    label: String,
    transport: String,
    peer: Peer,
) -> u32 {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    crate::runtime::config::note_used(layer);
    let def = EndpointDef {
        id,
        layer,
        kind,
        label,
        transport,
        peer,
        qpn: None,
        gpu: None,
        created_ns: crate::runtime::clock::real_ns(),
    };
    if let Ok(mut d) = DEFS.lock() {
        d.push(def);
    }
    id
}

/// Defines an endpoint from a full definition (its id is assigned here).
pub fn define_full(mut def: EndpointDef) -> u32 {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    crate::runtime::config::note_used(def.layer);
    def.id = id;
    def.created_ns = crate::runtime::clock::real_ns();
    if let Ok(mut d) = DEFS.lock() {
        d.push(def);
    }
    id
}

/// Records a state change of an endpoint.
pub fn update(id: u32, state: &str, peer: Option<Peer>) {
    if let Ok(mut u) = UPDATES.lock() {
        u.push(EndpointUpdate {
            id,
            state: state.to_string(),
            peer,
            at_ns: crate::runtime::clock::real_ns(),
        });
    }
}

/// Adds one of this process's own addresses (hash of the blob a peer will connect with).
pub fn add_own_addr(hash: u64) {
    if let Ok(mut a) = OWN_ADDRS.lock()
        && !a.contains(&hash)
    {
        a.push(hash);
        IDENTITY_GEN.fetch_add(1, Ordering::Release);
    }
}

pub fn own_addrs() -> Vec<u64> {
    OWN_ADDRS.lock().map(|a| a.clone()).unwrap_or_default()
}

/// Definitions from index `from` on (collector: what it has not sent/recorded yet).
pub fn defs_since(from: usize) -> Vec<EndpointDef> {
    DEFS.lock()
        .map(|d| d.get(from..).map(|s| s.to_vec()).unwrap_or_default())
        .unwrap_or_default()
}

pub fn all_defs() -> Vec<EndpointDef> {
    defs_since(0)
}

pub fn updates_since(from: usize) -> Vec<EndpointUpdate> {
    UPDATES
        .lock()
        .map(|d| d.get(from..).map(|s| s.to_vec()).unwrap_or_default())
        .unwrap_or_default()
}

pub fn all_updates() -> Vec<EndpointUpdate> {
    updates_since(0)
}

static MRS: Mutex<Vec<MemRegion>> = Mutex::new(Vec::new());

/// Reads `struct ibv_mr` (rdma-core ≥ v17 layout, unchanged to v50+: context, pd, addr, length,
/// handle, lkey, rkey) and queues a memory-region record for the collector: a registration
/// (`registered`, `iova` = the address peers use when it is not `addr`) or a deregistration.
///
/// # Safety
/// `mr` is null or a live `struct ibv_mr` returned by libibverbs.
pub unsafe fn queue_mr(
    mr: *const core::ffi::c_void,
    iova: Option<u64>,
    access: u32,
    registered: bool,
) {
    if mr.is_null() {
        return;
    }
    let b = mr.cast::<u8>();
    // SAFETY: the caller's contract; offsets of `addr`, `length`, `lkey`, `rkey`.
    let (addr, len, lkey, rkey) = unsafe {
        (
            b.add(16).cast::<u64>().read_unaligned(),
            b.add(24).cast::<u64>().read_unaligned(),
            b.add(36).cast::<u32>().read_unaligned(),
            b.add(40).cast::<u32>().read_unaligned(),
        )
    };
    if let Ok(mut m) = MRS.lock() {
        m.push(MemRegion {
            addr: iova.unwrap_or(addr),
            len,
            lkey,
            rkey,
            access,
            registered,
            at_ns: crate::runtime::clock::real_ns(),
        });
    }
}

/// Memory-region records queued since the last call (the collector records them once).
pub fn take_mrs() -> Vec<MemRegion> {
    MRS.lock()
        .map(|mut d| std::mem::take(&mut *d))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn bind_and_lookup() {
        for i in 1..2000usize {
            bind(i * 64, i as u32);
        }
        for i in 1..2000usize {
            assert_eq!(lookup(i * 64), i as u32);
        }
        bind(64, 777);
        assert_eq!(lookup(64), 777);
        assert_eq!(lookup(12345 * 64 + 8), UNATTRIBUTED_EP);
    }
}
