//! What is kept of one recorded operation until it is written: its track, peer, flows and, for
//! doorbells and WQEs, their details.

use crate::correlate::doorbell::DoorbellInfo;
use crate::correlate::merge::Merged;

/// One operation instant as it will be written.
#[derive(Default)]
pub(super) struct Item {
    pub(super) m: Merged,
    pub(super) track: u64,
    pub(super) peer: Option<u32>,
    /// The process owning the memory region a one-sided operation targets.
    pub(super) target: Option<u32>,
    pub(super) flow_out: u64,
    /// Flows ending here: the first two inline, more (rare) in `flow_more`.
    pub(super) flow_in: [u64; 2],
    pub(super) flow_more: Vec<u64>,
    /// Doorbell / WQE / one-sided details (rare enough to box).
    pub(super) extra: Option<Box<Extra>>,
}

/// What a doorbell or a WQE instant carries besides the common annotations.
#[derive(Default)]
pub(super) struct Extra {
    pub(super) db: Option<DoorbellInfo>,
    pub(super) wqes: u32,
    pub(super) wqe_bytes: u64,
    /// WQEs per opcode (`Op` as u8, count), in order of first appearance.
    pub(super) ops: Vec<(u8, u32)>,
    pub(super) first_raddr: u64,
    pub(super) first_rkey: u32,
    /// This WQE's doorbell index and position.
    pub(super) wqe_of: Option<(u16, u32)>,
}

impl Item {
    pub(super) fn end_flow(&mut self, f: u64) {
        match self.flow_in.iter_mut().find(|x| **x == 0) {
            Some(slot) => *slot = f,
            None => self.flow_more.push(f),
        }
    }
}

/// Instants the plain encoder takes: no doorbell / WQE details, and a bounded number of flows.
pub(super) fn plain(it: &Item) -> bool {
    it.extra.is_none() && it.flow_more.len() <= 16
}

/// The tid an instant is annotated with (None: its process has a single thread file).
#[inline(always)]
pub(super) fn tid_of(thread_tid: &[Option<u32>], it: &Item) -> Option<u32> {
    thread_tid
        .get(it.m.thread as usize)
        .copied()
        .unwrap_or(Some(it.m.ev.tid))
}
