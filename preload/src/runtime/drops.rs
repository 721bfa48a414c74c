//! The drop counters that modules above the collector bump and the collector's snapshot reads
//! (`DropCounters`): kept here, at the bottom, so that the collector names no hook and no layer.
//! A leaf: it names no other module.

use core::sync::atomic::AtomicU64;

/// Hook bodies that panicked or failed (the call itself went through): `hook`.
pub static HOOK_FAILURES: AtomicU64 = AtomicU64::new(0);
/// Doorbells whose covered range merged several rings: `doorbell`.
pub static COALESCED_DOORBELLS: AtomicU64 = AtomicU64::new(0);
/// WQEs that did not parse: `doorbell`.
pub static UNPARSABLE_WQES: AtomicU64 = AtomicU64::new(0);
