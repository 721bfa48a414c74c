//! UAR doorbell words (GPU synthetic vs CPU ctrl word) and the per-QP tracker that turns each
//! doorbell into the range of newly posted WQEBBs.
//!
//! A doorbell is one 8-byte store to the UAR (reference §2). Its bytes, as they sit in memory, are
//! the first 8 bytes of an mlx5 ctrl segment: `opmod_idx_opcode` (BE32) then `qpn_ds` (BE32).
//!
//! - **CPU word** (rdma-core `qp.c post_send_db`): the first 8 bytes of the *last* posted WQE's
//!   ctrl segment, so `idx` is the start of that WQE and `ds` its size.
//! - **GPU word** (NVSHMEM `ibgda_ring_db`, DOCA `doca_gpu_dev_common_prepare_db`, UCX GDAKI): a
//!   synthetic word with opcode 0 and ds 0 whose `idx` is the *next free* WQEBB.
//!
//! [`SqTracker`] keeps `last_pi` per QP and reports `[last_pi, end)`; it needs no ring memory.

use serde::{Deserialize, Serialize};

use super::{valid_sq_cnt, wqebbs_for_ds};

/// Size of a doorbell store (`mmio_write64_be`, `st.*.b64`).
pub const DOORBELL_BYTES: usize = 8;

/// Which convention a doorbell word follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DoorbellKind {
    /// Synthetic word (opcode 0, ds 0): `idx` is the next free WQEBB (NVSHMEM, DOCA, UCX GDAKI).
    Gpu,
    /// First 8 bytes of the last WQE's ctrl segment: `idx` is that WQE's first WQEBB (rdma-core).
    Cpu,
}

/// One decoded doorbell word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DoorbellWord {
    /// Bits 31:24 of `opmod_idx_opcode`. DOCA shifts a 64-bit `prod_index` left by 8, so upper
    /// producer-index bits can land here (reference §2); they are kept but never used for `idx`.
    pub opmod: u8,
    /// WQE index: `(be32(v[0..4]) >> 8) & 0xffff`.
    pub idx: u16,
    /// Bits 7:0 of `opmod_idx_opcode`.
    pub opcode: u8,
    /// QP/SQ number: `be32(v[4..8]) >> 8`.
    pub qpn: u32,
    /// Bits 7:0 of `qpn_ds`: WQE size in 16-byte units (0 in a GPU word).
    pub ds: u8,
}

/// Why a doorbell could not be decoded or a tracker not built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum DoorbellError {
    /// Fewer than 8 bytes were given.
    Short { len: usize },
    /// `sq_cnt` is not a power of two in `1..=MAX_SQ_CNT`.
    InvalidSqCnt { sq_cnt: u32 },
}

impl core::fmt::Display for DoorbellError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Short { len } => write!(f, "doorbell word needs 8 bytes, got {len}"),
            Self::InvalidSqCnt { sq_cnt } => {
                write!(
                    f,
                    "send queue size {sq_cnt} is not a power of two in 1..=32768"
                )
            }
        }
    }
}

impl core::error::Error for DoorbellError {}

impl DoorbellWord {
    /// Decodes the 8 bytes of a doorbell exactly as they are stored in memory.
    pub fn from_bytes(v: [u8; DOORBELL_BYTES]) -> Self {
        let w0 = u32::from_be_bytes([v[0], v[1], v[2], v[3]]);
        let w1 = u32::from_be_bytes([v[4], v[5], v[6], v[7]]);
        Self {
            opmod: (w0 >> 24) as u8,
            idx: ((w0 >> 8) & 0xffff) as u16,
            opcode: (w0 & 0xff) as u8,
            qpn: w1 >> 8,
            ds: (w1 & 0xff) as u8,
        }
    }

    /// Decodes the first 8 bytes of `b` (a doorbell slot, or a 64-byte BlueFlame write, whose
    /// first 8 bytes are the same ctrl word). Errors if fewer than 8 bytes are given.
    pub fn decode(b: &[u8]) -> Result<Self, DoorbellError> {
        super::be::arr::<DOORBELL_BYTES>(b, 0)
            .map(Self::from_bytes)
            .ok_or(DoorbellError::Short { len: b.len() })
    }

    /// Decodes a doorbell from the `u64` a poller loaded from the slot with a native load (the
    /// memory bytes are the value's native-endian bytes).
    pub fn from_mem_u64(v: u64) -> Self {
        Self::from_bytes(v.to_ne_bytes())
    }

    /// The 8 bytes this word occupies in memory (inverse of [`Self::from_bytes`]).
    pub fn to_bytes(&self) -> [u8; DOORBELL_BYTES] {
        let w0 =
            (u32::from(self.opmod) << 24) | (u32::from(self.idx) << 8) | u32::from(self.opcode);
        let w1 = ((self.qpn & 0x00ff_ffff) << 8) | u32::from(self.ds);
        let a = w0.to_be_bytes();
        let b = w1.to_be_bytes();
        [a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3]]
    }

    /// A synthetic GPU word as NVSHMEM's `ibgda_ring_db` builds it:
    /// `{HTOBE32(prod_idx << 8), HTOBE32(qpn << 8)}`.
    pub fn gpu(qpn: u32, next_free: u16) -> Self {
        Self {
            opmod: 0,
            idx: next_free,
            opcode: 0,
            qpn: qpn & 0x00ff_ffff,
            ds: 0,
        }
    }

    /// GPU convention iff opcode and ds are both 0 (reference §2 step 4). A real NOP WQE has
    /// opcode 0 but ds >= 1, so it is a CPU word.
    pub fn kind(&self) -> DoorbellKind {
        if self.opcode == 0 && self.ds == 0 {
            DoorbellKind::Gpu
        } else {
            DoorbellKind::Cpu
        }
    }
}

/// `MLX5_SND_DBR` (rdma-core `mlx5dv.h`): the send counter is `dbrec[1]`, byte +4 of the DBR.
pub const DBR_SEND_OFFSET: usize = 4;

/// The send producer index in a doorbell record (8 bytes: `dbrec[MLX5_RCV_DBR]`,
/// `dbrec[MLX5_SND_DBR]`): `be32(dbr[4..8]) & 0xffff`, the next free WQEBB (rdma-core
/// `post_send_db`, NVSHMEM `ibgda_update_dbr`). What [`SqTracker::resync`] wants after an overrun.
pub fn dbr_send_pi(dbr: &[u8]) -> Option<u16> {
    super::be::u32(dbr, DBR_SEND_OFFSET).map(|v| (v & 0xffff) as u16)
}

/// A range of newly posted WQEBBs in 16-bit producer-index space, `[start, end)`, with wrap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct WqeRange {
    /// First new WQEBB (the tracker's `last_pi` before this doorbell).
    pub start: u16,
    /// One past the last new WQEBB; the tracker's `last_pi` after this doorbell.
    pub end: u16,
    /// Number of WQEBBs, `(end - start) & 0xffff`, in `1..=sq_cnt`.
    pub wqebbs: u32,
    /// CPU convention: the doorbell named this WQE (its first WQEBB); the walk must parse up to
    /// and including it, and it must end exactly at `end`. `None` for GPU words.
    pub last_wqe: Option<u16>,
}

impl WqeRange {
    /// Whether `pos` (a 16-bit producer index) lies in `[start, end)`.
    pub fn contains(&self, pos: u16) -> bool {
        u32::from(pos.wrapping_sub(self.start)) < self.wqebbs
    }
}

/// What one doorbell means for its QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DoorbellStep {
    /// New WQEBBs to fetch and walk.
    New(WqeRange),
    /// Nothing new (`n == 0`): DOCA's `submit_db` rings twice with the same value, a CPU program
    /// may re-ring, and a poller can see the same value again. Counted, never dropped silently.
    Duplicate { idx: u16 },
    /// More than `sq_cnt` WQEBBs, or an index behind `last_pi`: state was lost (missed doorbells,
    /// a reset QP). The tracker resynced `last_pi` to `to`; the caller may resync from the DBR.
    Overrun { from: u16, to: u16, wqebbs: u32 },
    /// A CPU-looking word (opcode != 0) with ds 0 cannot say where its WQE ends. Ignored.
    Malformed { idx: u16, opcode: u8 },
}

/// Per-QP counters kept by [`SqTracker`] (nothing is dropped silently).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SqCounters {
    pub doorbells: u64,
    pub gpu_words: u64,
    pub cpu_words: u64,
    pub duplicates: u64,
    pub overruns: u64,
    pub malformed: u64,
    /// WQEBBs reported as new, over all [`DoorbellStep::New`] steps.
    pub wqebbs: u64,
}

/// Pure per-QP producer-index tracker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SqTracker {
    last_pi: u16,
    sq_cnt: u32,
    counters: SqCounters,
}

impl SqTracker {
    /// A tracker for a fresh QP (producer index 0) with `sq_cnt = 1 << log_sq_size` WQEBBs.
    pub fn new(sq_cnt: u32) -> Result<Self, DoorbellError> {
        Self::with_start(sq_cnt, 0)
    }

    /// A tracker that starts at `last_pi` (e.g. the DBR's send counter when tracing starts late).
    pub fn with_start(sq_cnt: u32, last_pi: u16) -> Result<Self, DoorbellError> {
        if !valid_sq_cnt(sq_cnt) {
            return Err(DoorbellError::InvalidSqCnt { sq_cnt });
        }
        Ok(Self {
            last_pi,
            sq_cnt,
            counters: SqCounters::default(),
        })
    }

    pub fn last_pi(&self) -> u16 {
        self.last_pi
    }

    pub fn sq_cnt(&self) -> u32 {
        self.sq_cnt
    }

    pub fn counters(&self) -> &SqCounters {
        &self.counters
    }

    /// Sets `last_pi`, e.g. from the DBR (`be32(dbr[4..8]) & 0xffff`) after an overrun.
    pub fn resync(&mut self, pi: u16) {
        self.last_pi = pi;
    }

    /// Accounts one doorbell and says which WQEBBs it covers.
    pub fn on_doorbell(&mut self, word: &DoorbellWord) -> DoorbellStep {
        self.counters.doorbells += 1;
        let from = self.last_pi;
        let step = match word.kind() {
            DoorbellKind::Gpu => {
                self.counters.gpu_words += 1;
                let n = u32::from(word.idx.wrapping_sub(from));
                if n == 0 {
                    DoorbellStep::Duplicate { idx: word.idx }
                } else if n > self.sq_cnt {
                    DoorbellStep::Overrun {
                        from,
                        to: word.idx,
                        wqebbs: n,
                    }
                } else {
                    DoorbellStep::New(WqeRange {
                        start: from,
                        end: word.idx,
                        wqebbs: n,
                        last_wqe: None,
                    })
                }
            }
            DoorbellKind::Cpu => {
                self.counters.cpu_words += 1;
                let k = wqebbs_for_ds(word.ds);
                if k == 0 {
                    DoorbellStep::Malformed {
                        idx: word.idx,
                        opcode: word.opcode,
                    }
                } else {
                    let end = word.idx.wrapping_add(k);
                    let n_end = u32::from(end.wrapping_sub(from));
                    let n_idx = u32::from(word.idx.wrapping_sub(from));
                    if n_end == 0 {
                        DoorbellStep::Duplicate { idx: word.idx }
                    } else if n_end > self.sq_cnt || n_idx + u32::from(k) != n_end {
                        // Too far ahead, or the named WQE starts before last_pi (stale/behind).
                        DoorbellStep::Overrun {
                            from,
                            to: end,
                            wqebbs: n_end,
                        }
                    } else {
                        DoorbellStep::New(WqeRange {
                            start: from,
                            end,
                            wqebbs: n_end,
                            last_wqe: Some(word.idx),
                        })
                    }
                }
            }
        };
        match step {
            DoorbellStep::New(r) => {
                self.counters.wqebbs += u64::from(r.wqebbs);
                self.last_pi = r.end;
            }
            DoorbellStep::Duplicate { .. } => self.counters.duplicates += 1,
            DoorbellStep::Overrun { to, .. } => {
                self.counters.overruns += 1;
                self.last_pi = to;
            }
            DoorbellStep::Malformed { .. } => self.counters.malformed += 1,
        }
        step
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// NVSHMEM `ibgda_ring_db`: `{HTOBE32(prod_idx << 8), HTOBE32(qpn << 8)}`, bytes as stored.
    fn nvshmem_word(prod_idx: u16, qpn: u32) -> [u8; 8] {
        let a = (u32::from(prod_idx) << 8).to_be_bytes();
        let b = (qpn << 8).to_be_bytes();
        [a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3]]
    }

    #[test]
    fn gpu_word_bytes() {
        // prod_idx 0x1234, qpn 0x00abcd: bytes 00 12 34 00 | 00 ab cd 00
        let v = nvshmem_word(0x1234, 0xabcd);
        assert_eq!(v, [0x00, 0x12, 0x34, 0x00, 0x00, 0xab, 0xcd, 0x00]);
        let w = DoorbellWord::from_bytes(v);
        assert_eq!(w.idx, 0x1234);
        assert_eq!(w.qpn, 0xabcd);
        assert_eq!((w.opcode, w.ds, w.opmod), (0, 0, 0));
        assert_eq!(w.kind(), DoorbellKind::Gpu);
        assert_eq!(w.to_bytes(), v);
        assert_eq!(DoorbellWord::gpu(0xabcd, 0x1234), w);
    }

    #[test]
    fn doca_prod_index_bits_in_opmod_are_masked() {
        // DOCA: (uint64)prod_index << 8 stored as BE32 of the low word: prod_index 0x1_2345
        // puts 0x01 in the opmod byte. idx must still be 0x2345.
        let w0: u32 = ((0x1_2345u64 << 8) & 0xffff_ffff) as u32;
        let mut v = [0u8; 8];
        v[..4].copy_from_slice(&w0.to_be_bytes());
        v[4..].copy_from_slice(&(0x77u32 << 8).to_be_bytes());
        let w = DoorbellWord::from_bytes(v);
        assert_eq!(w.opmod, 0x01);
        assert_eq!(w.idx, 0x2345);
        assert_eq!(w.qpn, 0x77);
        assert_eq!(w.kind(), DoorbellKind::Gpu);
    }

    #[test]
    fn cpu_word_is_ctrl_prefix() {
        // rdma-core mlx5dv_set_ctrl_seg: opmod<<24 | pi<<8 | opcode, qpn<<8 | ds.
        // RDMA_WRITE (0x08) at pi 0x0010, qpn 0x000123, ds 3.
        let v = [0x00, 0x00, 0x10, 0x08, 0x00, 0x01, 0x23, 0x03];
        let w = DoorbellWord::decode(&v).unwrap();
        assert_eq!((w.idx, w.opcode, w.qpn, w.ds), (0x10, 0x08, 0x123, 3));
        assert_eq!(w.kind(), DoorbellKind::Cpu);
        // A NOP WQE (opcode 0, ds 1) is still a CPU word.
        let nop = DoorbellWord::from_bytes([0, 0, 0x10, 0x00, 0, 0x01, 0x23, 0x01]);
        assert_eq!(nop.kind(), DoorbellKind::Cpu);
    }

    #[test]
    fn decode_short_and_native_load() {
        assert_eq!(
            DoorbellWord::decode(&[1, 2, 3]),
            Err(DoorbellError::Short { len: 3 })
        );
        let v = nvshmem_word(7, 9);
        let loaded = u64::from_ne_bytes(v);
        assert_eq!(
            DoorbellWord::from_mem_u64(loaded),
            DoorbellWord::from_bytes(v)
        );
        // A 64-byte BlueFlame write decodes from its first 8 bytes.
        let mut bf = [0xeeu8; 64];
        bf[..8].copy_from_slice(&v);
        assert_eq!(DoorbellWord::decode(&bf).unwrap().idx, 7);
    }

    #[test]
    fn dbr_send_counter() {
        // htobe32(cur_post & 0xffff) at +4; the receive counter at +0 is ignored.
        let dbr = [0, 0, 0, 9, 0x00, 0x00, 0x12, 0x34];
        assert_eq!(dbr_send_pi(&dbr), Some(0x1234));
        assert_eq!(dbr_send_pi(&dbr[..7]), None);
    }

    #[test]
    fn tracker_rejects_bad_sq_cnt() {
        assert!(SqTracker::new(0).is_err());
        assert!(SqTracker::new(48).is_err());
        assert!(SqTracker::new(1 << 16).is_err());
        assert!(SqTracker::new(1 << 15).is_ok());
    }

    #[test]
    fn gpu_ranges_and_doca_double_ring() {
        let mut t = SqTracker::new(64).unwrap();
        let w = DoorbellWord::from_bytes(nvshmem_word(5, 1));
        assert_eq!(
            t.on_doorbell(&w),
            DoorbellStep::New(WqeRange {
                start: 0,
                end: 5,
                wqebbs: 5,
                last_wqe: None
            })
        );
        // DOCA submit_db: DB, DBR, DB with the same value.
        assert_eq!(t.on_doorbell(&w), DoorbellStep::Duplicate { idx: 5 });
        assert_eq!(t.last_pi(), 5);
        let c = t.counters();
        assert_eq!(
            (c.doorbells, c.duplicates, c.wqebbs, c.gpu_words),
            (2, 1, 5, 2)
        );
    }

    #[test]
    fn gpu_16bit_wrap() {
        let mut t = SqTracker::with_start(256, 0xfff0).unwrap();
        let step = t.on_doorbell(&DoorbellWord::gpu(1, 0x0010));
        let DoorbellStep::New(r) = step else {
            panic!("expected New, got {step:?}")
        };
        assert_eq!((r.start, r.end, r.wqebbs), (0xfff0, 0x0010, 0x20));
        assert!(r.contains(0xffff) && r.contains(0) && r.contains(0x000f));
        assert!(!r.contains(0x0010) && !r.contains(0xffef));
        assert_eq!(t.last_pi(), 0x0010);
    }

    #[test]
    fn gpu_full_ring_is_ok_and_overrun_resyncs() {
        let mut t = SqTracker::new(16).unwrap();
        assert!(matches!(
            t.on_doorbell(&DoorbellWord::gpu(1, 16)),
            DoorbellStep::New(WqeRange { wqebbs: 16, .. })
        ));
        assert_eq!(
            t.on_doorbell(&DoorbellWord::gpu(1, 33)),
            DoorbellStep::Overrun {
                from: 16,
                to: 33,
                wqebbs: 17
            }
        );
        assert_eq!(t.last_pi(), 33);
        // An index behind last_pi looks like a huge n: overrun, resync.
        assert!(matches!(
            t.on_doorbell(&DoorbellWord::gpu(1, 30)),
            DoorbellStep::Overrun { .. }
        ));
        assert_eq!(t.counters().overruns, 2);
        t.resync(100);
        assert_eq!(t.last_pi(), 100);
    }

    #[test]
    fn cpu_convention_includes_last_wqe() {
        let mut t = SqTracker::new(64).unwrap();
        // Three WQEs posted: ds 3 at 0, ds 6 (2 WQEBBs) at 1, ds 3 at 3; doorbell = ctrl of the
        // last (idx 3, ds 3).
        let w = DoorbellWord::from_bytes([0, 0, 0x03, 0x08, 0, 0, 0x42, 0x03]);
        assert_eq!(
            t.on_doorbell(&w),
            DoorbellStep::New(WqeRange {
                start: 0,
                end: 4,
                wqebbs: 4,
                last_wqe: Some(3)
            })
        );
        assert_eq!(t.last_pi(), 4);
        // Re-ringing the same word is a duplicate.
        assert_eq!(t.on_doorbell(&w), DoorbellStep::Duplicate { idx: 3 });
        // A 2-WQEBB WQE at 4 (ds 5).
        let w2 = DoorbellWord::from_bytes([0, 0, 0x04, 0x12, 0, 0, 0x42, 0x05]);
        assert!(matches!(
            t.on_doorbell(&w2),
            DoorbellStep::New(WqeRange {
                start: 4,
                end: 6,
                wqebbs: 2,
                last_wqe: Some(4)
            })
        ));
        assert_eq!(t.counters().cpu_words, 3);
    }

    #[test]
    fn cpu_stale_word_overlapping_last_pi_is_overrun() {
        let mut t = SqTracker::with_start(64, 10).unwrap();
        // WQE at 9 with 2 WQEBBs ends at 11 but starts before last_pi.
        let w = DoorbellWord::from_bytes([0, 0, 0x09, 0x08, 0, 0, 0x01, 0x05]);
        assert!(matches!(t.on_doorbell(&w), DoorbellStep::Overrun { .. }));
    }

    #[test]
    fn cpu_word_with_zero_ds_is_malformed() {
        let mut t = SqTracker::new(64).unwrap();
        let w = DoorbellWord::from_bytes([0, 0, 0x09, 0x08, 0, 0, 0x01, 0x00]);
        assert_eq!(
            t.on_doorbell(&w),
            DoorbellStep::Malformed { idx: 9, opcode: 8 }
        );
        assert_eq!(t.last_pi(), 0);
        assert_eq!(t.counters().malformed, 1);
    }

    #[test]
    fn cpu_wrap() {
        let mut t = SqTracker::with_start(1024, 0xfffe).unwrap();
        // WQE at 0xffff with ds 8 (2 WQEBBs) ends at 0x0001.
        let w = DoorbellWord::from_bytes([0, 0xff, 0xff, 0x08, 0, 0, 0x01, 0x08]);
        assert_eq!(
            t.on_doorbell(&w),
            DoorbellStep::New(WqeRange {
                start: 0xfffe,
                end: 0x0001,
                wqebbs: 3,
                last_wqe: Some(0xffff)
            })
        );
    }
}
