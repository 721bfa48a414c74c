//! Every counter of the GPU path: the doorbell poller's, the hijack's and the CUDA layer's
//! lookups. Two are drop counters (`crate::runtime::drops`, read by the collector's snapshot); all are
//! read by tests through the stats line (`SIGMATOP_GPU_STATS`).

use core::sync::atomic::{AtomicU64, Ordering};

/// The two that are drop counters live with the runtime's (the collector reads them there).
pub use crate::runtime::drops::{COALESCED_DOORBELLS as COALESCED, UNPARSABLE_WQES as UNPARSABLE};
pub static DOORBELLS: AtomicU64 = AtomicU64::new(0);
pub static BLUEFLAME: AtomicU64 = AtomicU64::new(0);
pub static OTHER_STORES: AtomicU64 = AtomicU64::new(0);
pub static DUPLICATES: AtomicU64 = AtomicU64::new(0);
pub static OVERRUNS: AtomicU64 = AtomicU64::new(0);
pub static UNKNOWN_QP: AtomicU64 = AtomicU64::new(0);
pub static WQES: AtomicU64 = AtomicU64::new(0);
pub static COPIES: AtomicU64 = AtomicU64::new(0);
pub static SYNCS: AtomicU64 = AtomicU64::new(0);
pub static COPY_FAILED: AtomicU64 = AtomicU64::new(0);
pub static HIJACKS: AtomicU64 = AtomicU64::new(0);
pub static HIJACK_FAILED: AtomicU64 = AtomicU64::new(0);
/// Lookups of a wrapped CUDA name at a version newer than sigmatop knows whose pointer was not the
/// variant it implements: passed through untraced (cuda.rs).
pub static UNKNOWN_VARIANTS: AtomicU64 = AtomicU64::new(0);
/// CUDA lookups answered with a sigmatop wrapper (cuda.rs).
pub static WRAPPED_LOOKUPS: AtomicU64 = AtomicU64::new(0);
/// Doorbells forwarded for a QP whose own was overwritten on a register it shares with another
/// QP (its doorbell record had moved past what its doorbells said): poller.rs.
pub static SHARED: AtomicU64 = AtomicU64::new(0);
/// Send-queue slots (WQEBBs) the program had already reused when sigmatop's copy read them (the
/// ctrl index found there is not the one the doorbell's range expects, or a later doorbell
/// posted the WQE that takes the slot), so they are not recovered (copier.rs). Counted in
/// `unparsable` too.
pub static OVERWRITTEN: AtomicU64 = AtomicU64::new(0);
/// Of those, slots whose first ctrl word changed between the copy and a second read of it (a
/// copy torn by the program rewriting the slot): treated as reused (copier.rs).
pub static TORN: AtomicU64 = AtomicU64::new(0);
/// WQEBBs of ranges the poller could not hand to the copier (it was `copier::JOBS` jobs behind)
/// or that named a QP the copier does not know: not recovered, counted in `unparsable` too.
pub static DROPPED: AtomicU64 = AtomicU64::new(0);
/// Reads of a doorbell record in GPU memory the copier made for a shared register (copier.rs).
pub static CHECKS: AtomicU64 = AtomicU64::new(0);

/// One line of every counter (SIGMATOP_GPU_STATS, tests).
pub fn stats_line() -> String {
    let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
    format!(
        "sigmatop-gpu: hijacks={} hijack_failed={} doorbells={} blueflame={} other_stores={} duplicates={} coalesced={} overruns={} unknown_qp={} wqes={} unparsable={} copies={} syncs={} copy_failed={} wrapped_lookups={} unknown_variants={} shared_register={} overwritten_slots={} torn_slots={} dropped_wqebbs={} record_reads={}",
        l(&HIJACKS),
        l(&HIJACK_FAILED),
        l(&DOORBELLS),
        l(&BLUEFLAME),
        l(&OTHER_STORES),
        l(&DUPLICATES),
        l(&COALESCED),
        l(&OVERRUNS),
        l(&UNKNOWN_QP),
        l(&WQES),
        l(&UNPARSABLE),
        l(&COPIES),
        l(&SYNCS),
        l(&COPY_FAILED),
        l(&WRAPPED_LOOKUPS),
        l(&UNKNOWN_VARIANTS),
        l(&SHARED),
        l(&OVERWRITTEN),
        l(&TORN),
        l(&DROPPED),
        l(&CHECKS),
    )
}
