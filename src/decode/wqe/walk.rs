//! The bounded walk over the WQEs one doorbell step covers: from the range start, each ctrl
//! index checked against the producer index, advancing by each WQE's WQEBBs.

use serde::{Deserialize, Serialize};

use super::parse::check_ring;
use super::{CtrlSeg, QpType, Wqe, WqeError, WqeRange, parse_ctrl, parse_wqe};
use crate::decode::{WQEBB_BYTES, be};

/// Why a walk stopped, or why one WQE in it was skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum WalkError {
    /// The ring or the range cannot be walked at all (bad `sq_cnt`, short snapshot, a range
    /// longer than the ring).
    Ring(WqeError),
    /// The range covers more WQEBBs than the ring has (the tracker never produces this).
    RangeTooLong { wqebbs: u32, sq_cnt: u32 },
    /// The ctrl segment's index is not the expected producer index: the slot holds a stale or
    /// foreign WQE, or the snapshot is torn. Counted as corruption; the walk stops.
    IndexMismatch { expected: u16, found: u16 },
    /// The ctrl segment has ds 0 or an absurd ds: the walk cannot advance and stops.
    BadCtrl { at: u16, error: WqeError },
    /// The WQE at `at` is longer than what is left of the range: the walk stops.
    Overshoot { at: u16, wqebbs: u16, left: u32 },
    /// CPU convention: the doorbell named the WQE at `expected`, but the walk did not end right
    /// after a WQE starting there (`found` is where the last parsed WQE started).
    LastWqeMismatch { expected: u16, found: u16 },
    /// The ctrl segment was fine (index and size) but its other segments did not parse. The walk
    /// counts it and goes on, because the size is known.
    Unparsable {
        at: u16,
        ctrl: CtrlSeg,
        error: WqeError,
    },
}

impl WalkError {
    /// Whether the walk stops at this error (all but [`WalkError::Unparsable`]).
    pub fn is_fatal(&self) -> bool {
        !matches!(self, Self::Unparsable { .. })
    }

    /// Whether this is evidence of ring corruption or lost state.
    pub fn is_corruption(&self) -> bool {
        matches!(
            self,
            Self::IndexMismatch { .. }
                | Self::BadCtrl { .. }
                | Self::Overshoot { .. }
                | Self::LastWqeMismatch { .. }
        )
    }
}

/// Iterator over the WQEs of one [`WqeRange`], one WQE at a time. It yields at most
/// `range.wqebbs <= sq_cnt` items, since every step advances at least one WQEBB, and stops after
/// the first fatal error.
pub struct WqeWalker<'a> {
    ring: &'a [u8],
    sq_cnt: u32,
    qp_type: QpType,
    cursor: u16,
    left: u32,
    last_wqe: Option<u16>,
    last_start: Option<u16>,
    done: bool,
    pending: Option<WalkError>,
}

impl<'a> WqeWalker<'a> {
    pub fn new(ring: &'a [u8], sq_cnt: u32, range: &WqeRange, qp_type: QpType) -> Self {
        let pending = match check_ring(ring, sq_cnt) {
            Err(e) => Some(WalkError::Ring(e)),
            Ok(_) if range.wqebbs > sq_cnt => Some(WalkError::RangeTooLong {
                wqebbs: range.wqebbs,
                sq_cnt,
            }),
            Ok(_) => None,
        };
        Self {
            ring,
            sq_cnt,
            qp_type,
            cursor: range.start,
            left: range.wqebbs,
            last_wqe: range.last_wqe,
            last_start: None,
            done: false,
            pending,
        }
    }

    /// The producer index the walk has reached (the range end after a complete walk).
    pub fn cursor(&self) -> u16 {
        self.cursor
    }

    /// WQEBBs of the range not walked yet.
    pub fn left(&self) -> u32 {
        self.left
    }

    fn fail(&mut self, e: WalkError) -> Option<Result<Wqe, WalkError>> {
        self.done = true;
        Some(Err(e))
    }
}

impl Iterator for WqeWalker<'_> {
    type Item = Result<Wqe, WalkError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        if let Some(e) = self.pending.take() {
            return self.fail(e);
        }
        if self.left == 0 {
            self.done = true;
            if let Some(expected) = self.last_wqe
                && self.last_start != Some(expected)
            {
                return self.fail(WalkError::LastWqeMismatch {
                    expected,
                    found: self.last_start.unwrap_or(self.cursor),
                });
            }
            return None;
        }
        let at = self.cursor;
        let ctrl = match parse_ctrl(self.ring, self.sq_cnt, u32::from(at)) {
            Ok(c) => c,
            Err(error) => {
                // A stale slot with garbage ds is reported as the index problem when the index is
                // also wrong, since that is the more telling symptom.
                if let Some(b) = be::u32(
                    self.ring,
                    (u32::from(at) & (self.sq_cnt - 1)) as usize * WQEBB_BYTES,
                ) {
                    let found = ((b >> 8) & 0xffff) as u16;
                    if found != at {
                        return self.fail(WalkError::IndexMismatch {
                            expected: at,
                            found,
                        });
                    }
                }
                return self.fail(WalkError::BadCtrl { at, error });
            }
        };
        if ctrl.wqe_index != at {
            return self.fail(WalkError::IndexMismatch {
                expected: at,
                found: ctrl.wqe_index,
            });
        }
        let k = ctrl.wqebbs();
        if u32::from(k) > self.left {
            return self.fail(WalkError::Overshoot {
                at,
                wqebbs: k,
                left: self.left,
            });
        }
        self.cursor = at.wrapping_add(k);
        self.left -= u32::from(k);
        self.last_start = Some(at);
        if self.last_wqe == Some(at) && self.left != 0 {
            // CPU doorbell: the named WQE must be the last one of the range.
            self.pending = Some(WalkError::LastWqeMismatch {
                expected: at,
                found: at,
            });
        }
        Some(
            parse_wqe(self.ring, self.sq_cnt, u32::from(at), self.qp_type)
                .map_err(|error| WalkError::Unparsable { at, ctrl, error }),
        )
    }
}

/// Result of [`walk_new_wqes`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WalkOutcome {
    /// The WQEs parsed, in ring order.
    pub wqes: Vec<Wqe>,
    /// WQEs whose ctrl was valid but whose segments did not parse (skipped, counted).
    pub unparsable: u32,
    /// The first unparsable one, for reporting.
    pub first_unparsable: Option<WalkError>,
    /// WQEBBs walked.
    pub walked: u32,
    /// Producer index where the walk stopped (the range end when complete).
    pub cursor: u16,
    /// The fatal error that stopped the walk early, if any.
    pub error: Option<WalkError>,
}

impl WalkOutcome {
    pub fn is_complete(&self) -> bool {
        self.error.is_none()
    }

    pub fn is_corrupt(&self) -> bool {
        self.error.is_some_and(|e| e.is_corruption())
    }
}

/// Walks the WQEs a doorbell step covers, from `range.start`, checking each ctrl index against
/// the cursor and advancing by each WQE's WQEBBs. Bounded by `range.wqebbs <= sq_cnt`: it can
/// never loop forever, and it allocates at most one entry per WQEBB walked.
#[must_use]
pub fn walk_new_wqes(ring: &[u8], sq_cnt: u32, range: &WqeRange, qp_type: QpType) -> WalkOutcome {
    let mut walker = WqeWalker::new(ring, sq_cnt, range, qp_type);
    let mut out = WalkOutcome {
        wqes: Vec::new(),
        unparsable: 0,
        first_unparsable: None,
        walked: 0,
        cursor: range.start,
        error: None,
    };
    for item in walker.by_ref() {
        match item {
            Ok(w) => out.wqes.push(w),
            Err(e) if !e.is_fatal() => {
                out.unparsable += 1;
                out.first_unparsable.get_or_insert(e);
            }
            Err(e) => out.error = Some(e),
        }
    }
    out.cursor = walker.cursor();
    out.walked = range.wqebbs.saturating_sub(walker.left());
    out
}
