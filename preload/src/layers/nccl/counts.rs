//! Aggregate mode: NCCL is asked for its host calls only (Coll, P2p), and each is counted here,
//! per communicator and function, in fixed atomic counters: no record, no queue slot, no
//! timestamp. The live view reads them each interval; the record gets one `kind::COUNTS` record
//! per communicator and function at exit.

use core::sync::atomic::{AtomicU64, Ordering};

/// Communicators counted apart (by sigmatop's id of them); later ones are counted as lost.
pub const MAX_COMMS: usize = 64;
/// Function indices counted (`format::FUNCS`; 255 and beyond go to the last).
pub const NF: usize = 16;

pub struct CommCount {
    /// NCCL's communicator id and this process's rank in it (set at `init`).
    pub comm_id: AtomicU64,
    pub rank: AtomicU64,
    pub calls: [AtomicU64; NF],
    pub bytes: [AtomicU64; NF],
}

impl CommCount {
    const fn new() -> CommCount {
        CommCount {
            comm_id: AtomicU64::new(0),
            rank: AtomicU64::new(0),
            calls: [const { AtomicU64::new(0) }; NF],
            bytes: [const { AtomicU64::new(0) }; NF],
        }
    }
}

pub static COUNTS: [CommCount; MAX_COMMS] = [const { CommCount::new() }; MAX_COMMS];
/// Calls of communicators beyond `MAX_COMMS`.
pub static LOST: AtomicU64 = AtomicU64::new(0);

/// The counters of communicator `c` (sigmatop's id, from 1).
#[inline]
pub fn of(c: u64) -> Option<&'static CommCount> {
    (c as usize).checked_sub(1).and_then(|i| COUNTS.get(i))
}

/// Notes a communicator's identity (its `init`).
pub fn init(c: u64, comm_id: u64, rank: u64) {
    if let Some(k) = of(c) {
        k.comm_id.store(comm_id, Ordering::Relaxed);
        k.rank.store(rank, Ordering::Relaxed);
    }
}

/// One host call of function `func` moving `bytes`.
#[inline]
pub fn add(c: u64, func: u8, bytes: u64) {
    match of(c) {
        Some(k) => {
            let f = (func as usize).min(NF - 1);
            k.calls[f].fetch_add(1, Ordering::Relaxed);
            k.bytes[f].fetch_add(bytes, Ordering::Relaxed);
        }
        None => {
            LOST.fetch_add(1, Ordering::Relaxed);
        }
    }
}
