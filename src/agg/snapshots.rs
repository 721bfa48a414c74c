//! The snapshot history of one process, kept compact: a job of 2,048 processes × 64 QPs sends
//! 262,144 counters every 250 ms, and keeping each snapshot as `OpCount`s (56 bytes each) would
//! grow by 57 MB/s. The newest snapshot is kept decoded; every snapshot is one record of bytes:
//!
//! - a keyframe (the first kept, every `KEYFRAME_EVERY`-th, and whenever the list of
//!   (endpoint, op) pairs changes) holds every counter as a varint, with the change of each from
//!   the snapshot before (what the next records refer to);
//! - a delta record (same list as the record before) holds, per counter, one mode byte (a second
//!   when errors, refusals or posted receives moved) saying for each field: unchanged, changed by
//!   the same amount as last time, or changed by a varint that follows; a run of counters with
//!   the same modes and nothing to write (idle QPs, or QPs that moved as much as last time) is
//!   one mode byte and its length.
//!
//! Decoding is exact (wrapping arithmetic on u64): a snapshot read back equals the one pushed.
//! Every record also carries the snapshot's own fields (drops, events, threads, layers), and the
//! index holds what the views ask of every snapshot without decoding: its time, sequence number,
//! cumulative tx and rx bytes, and how many non-monotone steps came before it.
//!
//! What is kept: at most `HISTORY` snapshots, fewer when the model's byte budget is spent, but
//! never fewer than what the longest window needs at the newest time (see `Keep`).
//!
//! A relay at scale sends most snapshots of a process as its totals alone (`Totals`: the
//! process's sums, "now" rates and drops, computed by the relay from the whole snapshot), and its
//! whole counters every few ticks. Such a snapshot is an entry of the index without a record:
//! the per-process figures (`tx_rx`, `last_sums`, `last_now`, `monotone`) are there at every
//! entry, and the counters of an entry are those of the newest whole snapshot at or before it
//! (`full_at`), which is what `get` and `walk` give.

use std::borrow::Cow;
use std::collections::{HashSet, VecDeque};

use super::sums::{ChangeSums, EpMap, Sums};
use crate::event::{DropCounters, OpCount, Snapshot};
use crate::trace::codec::{get_varint, put_varint};

mod record;
use record::*;

/// Entries from one keyframe to the next: decoding a snapshot in the middle of the history walks
/// at most this many records, and the oldest group the byte budget drops is this long (entries
/// known by their totals alone count: a group stays ~16 s at 4 Hz whatever the relay's
/// `qp-every`).
pub const KEYFRAME_EVERY: u32 = 64;

const KEY: u8 = 0;
const DELTA: u8 = 1;
/// The kind of an entry without a record: a snapshot known by its totals alone.
const TOTALS: u8 = 2;

/// Snapshots known by their totals alone that may follow a whole one: a relay sends a process's
/// counters at least every 16 ticks; more than this in a row is refused (`push_totals`), so that
/// finding the whole snapshot behind an entry is a short walk.
pub const MAX_TOTALS_RUN: u32 = 64;

/// The figures of one snapshot without its counters: what a relay at scale sends on most ticks
/// (`relay::RelayFrame::Totals`), computed from the whole snapshot with the same arithmetic as
/// `SnapshotHistory::push`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Totals {
    pub at_ns: u64,
    pub seq: u64,
    pub drops: DropCounters,
    pub events: u64,
    pub threads: u32,
    pub layers_used: u32,
    /// The sums of the whole snapshot.
    pub sums: Sums,
    /// The step from the snapshot before kept every (endpoint, op) counter and none shrank.
    pub monotone: bool,
    /// Its "now" figures against the snapshot before (None: no earlier one, or not older).
    pub now: Option<NowRates>,
}

/// The counters of one `OpCount`, in record order.
type Vals = [u64; 6];

fn vals(c: &OpCount) -> Vals {
    [
        c.ops,
        c.bytes,
        c.errors,
        c.refused,
        c.posted,
        c.posted_bytes,
    ]
}

fn with_vals(ep: u32, op: u8, v: &Vals) -> OpCount {
    OpCount {
        ep,
        op,
        ops: v[0],
        bytes: v[1],
        errors: v[2],
        refused: v[3],
        posted: v[4],
        posted_bytes: v[5],
    }
}

/// How many snapshots a history keeps.
#[derive(Clone, Copy, Debug)]
pub struct Keep {
    /// Never more snapshots than this.
    pub max: usize,
    /// Beyond this many bytes, the oldest snapshots go ...
    pub bytes: usize,
    /// ... except those a window of this length ending at the newest snapshot reads: the
    /// snapshot at or before its start, and every later one.
    pub floor_ns: u64,
}

/// The "now" figures of the newest snapshot against the one before it, computed once when it
/// arrives (the same arithmetic as `ProcAt` over the two snapshots).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct NowRates {
    /// Time between the two snapshots (> 0).
    pub dt_ns: u64,
    /// Sums over the endpoints, in endpoint order, of each one's bytes/s and operations/s.
    pub tx_bps: f64,
    pub rx_bps: f64,
    pub ops_per_s: f64,
}

/// The index entry of one kept snapshot.
#[derive(Clone, Debug)]
struct Meta {
    at_ns: u64,
    seq: u64,
    /// `Sums::tx` and `Sums::rx` of the whole snapshot.
    tx: u64,
    rx: u64,
    /// Steps between consecutive snapshots, up to this one, after which some (endpoint, op)
    /// counter was gone or smaller (or a pair appeared twice): over a run of monotone steps,
    /// per-process differences equal the sums of per-endpoint differences.
    breaks: u64,
    rec: Box<[u8]>,
}

/// Bytes one kept snapshot costs besides its record: the index entry and the record's
/// allocation.
const PER_SNAPSHOT: usize = std::mem::size_of::<Meta>() + 16;

/// The history of one process's cumulative snapshots, oldest first.
#[derive(Clone, Debug, Default)]
pub struct SnapshotHistory {
    meta: VecDeque<Meta>,
    /// The newest snapshot without its counters (those are in `state`): a push leaves the
    /// counters it was given, so that the next snapshot decodes into memory still warm.
    last: Option<Snapshot>,
    /// The encoder's view of `last`, compact so that a push reads little besides the new
    /// snapshot: its counters' keys, values and how much each changed since the snapshot before
    /// (wrapping; zeros after a change of the counter list), which the next delta record refers
    /// to.
    state: EncState,
    /// The buffer delta records are written in before they are boxed.
    scratch: Vec<u8>,
    /// The step to `last` kept the counter list: the snapshot before is `last` less its changes.
    same_layout: bool,
    /// `last` lists some (endpoint, op) twice.
    dup_keys: bool,
    /// Some snapshot came with an earlier time than the one before it (a broken source): the
    /// times are searched from the middle, not from where they say.
    unsorted: bool,
    /// Entries since the last keyframe was written.
    since_key: u32,
    /// `second_key`'s answer, 0 when not known (cleared when the front moves).
    key2: usize,
    /// Changes whenever the newest snapshot's list of (endpoint, op) differs from the one before.
    layout: u64,
    breaks: u64,
    /// The sums of the whole newest snapshot.
    last_sums: Sums,
    /// Its failed operations (`OpCount::errors`, not in `Sums`).
    last_errors: u64,
    /// Its "now" figures, when the history holds an earlier snapshot taken before it.
    last_now: Option<NowRates>,
    /// Bytes held: records plus `PER_SNAPSHOT` each.
    bytes: usize,
    /// Entries known by their totals alone after the newest whole snapshot.
    since_full: u32,
    /// The time and sums of the newest whole snapshot (what `state` holds): the next whole
    /// snapshot's changes are against it.
    full_at_ns: u64,
    full_sums: Sums,
}

/// Per counter of the newest snapshot, in its order.
#[derive(Clone, Debug, Default)]
struct EncState {
    /// (ep << 8 | op).
    keys: Vec<u64>,
    /// ops, bytes, and their last changes.
    main: Vec<[u64; 4]>,
    /// errors, refused, posted, posted bytes, and their last changes; empty while all are zero
    /// (they usually are, besides the posted receives of verbs QPs).
    rare: Vec<[u64; 8]>,
}

fn key_of(c: &OpCount) -> u64 {
    u64::from(c.ep) << 8 | u64::from(c.op)
}

impl EncState {
    /// The last changes of counter `k`, all fields.
    fn dels(&self, k: usize) -> Vals {
        let m = &self.main[k];
        match self.rare.get(k) {
            Some(r) => [m[2], m[3], r[4], r[5], r[6], r[7]],
            None => [m[2], m[3], 0, 0, 0, 0],
        }
    }

    /// The counters, as the snapshot listed them.
    fn counts(&self) -> Vec<OpCount> {
        (0..self.keys.len()).map(|k| self.count(k)).collect()
    }

    fn count(&self, k: usize) -> OpCount {
        let (key, m) = (self.keys[k], &self.main[k]);
        let r = self.rare.get(k).copied().unwrap_or_default();
        OpCount {
            ep: (key >> 8) as u32,
            op: key as u8,
            ops: m[0],
            bytes: m[1],
            errors: r[0],
            refused: r[1],
            posted: r[2],
            posted_bytes: r[3],
        }
    }

    /// The counters of the snapshot before, when the last step kept the list: each less its
    /// last change.
    fn counts_before(&self) -> Vec<OpCount> {
        (0..self.keys.len())
            .map(|k| {
                let v = vals(&self.count(k));
                let d = self.dels(k);
                let c = self.count(k);
                with_vals(
                    c.ep,
                    c.op,
                    &std::array::from_fn(|f| v[f].wrapping_sub(d[f])),
                )
            })
            .collect()
    }

    /// Starts over from `counts` (a new list of counters): no changes known.
    fn reset(&mut self, counts: &[OpCount]) {
        self.keys.clear();
        self.keys.extend(counts.iter().map(key_of));
        self.main.clear();
        self.main
            .extend(counts.iter().map(|c| [c.ops, c.bytes, 0, 0]));
        self.rare.clear();
        if counts.iter().any(has_rare) {
            self.rare.extend(
                counts
                    .iter()
                    .map(|c| [c.errors, c.refused, c.posted, c.posted_bytes, 0, 0, 0, 0]),
            );
        }
    }
}

fn has_rare(c: &OpCount) -> bool {
    c.errors | c.refused | c.posted | c.posted_bytes != 0
}

/// Some (endpoint, op) is listed twice.
fn has_dup_keys(counts: &[OpCount]) -> bool {
    let mut seen = HashSet::with_capacity(counts.len());
    counts.iter().any(|c| !seen.insert((c.ep, c.op)))
}

/// Every counter of `old` is in `new` (one each), none smaller in a field that `Sums` reads.
fn grew_from(old: &[OpCount], new: &[OpCount]) -> bool {
    let by_key: std::collections::HashMap<(u32, u8), &OpCount> =
        new.iter().map(|c| ((c.ep, c.op), c)).collect();
    old.iter().all(|o| {
        by_key
            .get(&(o.ep, o.op))
            .is_some_and(|n| not_smaller(&vals(o), &vals(n)))
    })
}

/// `new` ≥ `old` in ops, bytes, refused and posted (what `Sums` reads).
fn not_smaller(old: &Vals, new: &Vals) -> bool {
    new[0] >= old[0] && new[1] >= old[1] && new[3] >= old[3] && new[4] >= old[4]
}

impl SnapshotHistory {
    pub fn len(&self) -> usize {
        self.meta.len()
    }

    /// KEY, DELTA or TOTALS: the kind of entry `j`.
    fn kind(&self, j: usize) -> u8 {
        self.meta[j].rec.first().copied().unwrap_or(TOTALS)
    }

    /// Index of the newest whole snapshot (one with its counters) at or before entry `i`: the
    /// counters entry `i` is read with. None when `i` is out of range or no whole snapshot is
    /// kept at or before it.
    pub fn full_at(&self, i: usize) -> Option<usize> {
        if i >= self.meta.len() {
            return None;
        }
        (0..=i).rev().find(|&j| !self.meta[j].rec.is_empty())
    }

    /// Entry `i` has its counters (it is not known by its totals alone).
    pub fn is_full(&self, i: usize) -> bool {
        self.meta.get(i).is_some_and(|m| !m.rec.is_empty())
    }

    /// The newest whole snapshot's index.
    fn newest_full(&self) -> Option<usize> {
        (self.meta.len() > self.since_full as usize)
            .then(|| self.meta.len() - 1 - self.since_full as usize)
    }

    /// The totals of the newest snapshot (what a relay sends in place of the snapshot).
    pub fn totals(&self) -> Option<Totals> {
        let h = self.last.as_ref()?;
        let n = self.meta.len();
        Some(Totals {
            at_ns: h.at_ns,
            seq: h.seq,
            drops: h.drops,
            events: h.events,
            threads: h.threads,
            layers_used: h.layers_used,
            sums: self.last_sums,
            monotone: n < 2 || self.monotone(n - 2, n - 1),
            now: self.last_now(),
        })
    }

    /// Appends a snapshot known by its totals alone (its counters are those of the newest whole
    /// snapshot, for `get` and `walk`). Refused (false) when no whole snapshot is kept yet or
    /// `MAX_TOTALS_RUN` came in a row.
    pub fn push_totals(&mut self, t: &Totals, keep: Keep) -> bool {
        if self.newest_full().is_none() || self.since_full >= MAX_TOTALS_RUN {
            return false;
        }
        if self.last.as_ref().is_some_and(|l| t.at_ns < l.at_ns) {
            self.unsorted = true;
        }
        if !t.monotone {
            self.breaks += 1;
        }
        self.last_sums = t.sums;
        self.last_now = t.now;
        self.bytes += PER_SNAPSHOT;
        self.meta.push_back(Meta {
            at_ns: t.at_ns,
            seq: t.seq,
            tx: t.sums.tx,
            rx: t.sums.rx,
            breaks: self.breaks,
            rec: Box::default(),
        });
        self.last = Some(Snapshot {
            at_ns: t.at_ns,
            seq: t.seq,
            counts: Vec::new(),
            drops: t.drops,
            events: t.events,
            threads: t.threads,
            layers_used: t.layers_used,
        });
        self.since_full += 1;
        self.since_key = self.since_key.saturating_add(1);
        self.trim(keep);
        true
    }

    /// The totals a relay sent with the whole snapshot just pushed (the same time and
    /// sequence number): its "now" is against the snapshot right before (known by its totals
    /// alone here), not against the whole one before. False when `t` is not of the newest
    /// snapshot or that one is not whole.
    pub fn companion(&mut self, t: &Totals) -> bool {
        let n = self.meta.len();
        if self.since_full != 0
            || !self
                .last
                .as_ref()
                .is_some_and(|l| l.at_ns == t.at_ns && l.seq == t.seq)
        {
            return false;
        }
        self.last_now = t.now;
        // Whether the step from the entry before kept every counter: the relay saw it; the
        // push compared with the whole snapshot before, which may be several steps back.
        if n >= 2 && self.monotone(n - 2, n - 1) != t.monotone {
            if t.monotone {
                self.breaks -= 1;
            } else {
                self.breaks += 1;
            }
            if let Some(m) = self.meta.back_mut() {
                m.breaks = self.breaks;
            }
        }
        true
    }

    /// Counters of the newest whole snapshot.
    pub fn last_counters(&self) -> usize {
        self.state.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.meta.is_empty()
    }

    /// The newest whole snapshot (its counters rebuilt: for reports and scrapes, not every
    /// frame). It is the newest snapshot unless later ones came as totals alone.
    pub fn last(&self) -> Option<Cow<'_, Snapshot>> {
        let head = self.last.as_ref()?;
        if self.since_full == 0 {
            return Some(Cow::Owned(Snapshot {
                counts: self.state.counts(),
                ..head.clone()
            }));
        }
        let f = self.newest_full()?;
        let mut pos = 1;
        let h = Head::get(&self.meta[f].rec, &mut pos)?;
        Some(Cow::Owned(self.snapshot(f, self.state.counts(), h)))
    }

    /// The newest snapshot without its counters (`counts` is empty): its time, drops, events,
    /// threads and layers.
    pub fn last_head(&self) -> Option<&Snapshot> {
        self.last.as_ref()
    }

    /// (endpoint, op) of each counter of the newest snapshot, in its order.
    pub fn last_keys(&self) -> impl Iterator<Item = (u32, u8)> + '_ {
        self.state.keys.iter().map(|k| ((k >> 8) as u32, *k as u8))
    }

    /// Sums of the whole newest snapshot.
    pub fn last_sums(&self) -> Sums {
        self.last_sums
    }

    /// Failed operations in the newest whole snapshot (since the process started).
    pub fn last_errors(&self) -> u64 {
        self.last_errors
    }

    /// The newest snapshot's "now" figures against the one before it (None when the history
    /// holds no earlier snapshot, or the one before is not older).
    pub fn last_now(&self) -> Option<NowRates> {
        if self.meta.len() >= 2 {
            self.last_now
        } else {
            None
        }
    }

    /// Time of snapshot `i`.
    pub fn at_ns(&self, i: usize) -> u64 {
        self.meta[i].at_ns
    }

    /// Sequence number of snapshot `i`.
    pub fn seq(&self, i: usize) -> u64 {
        self.meta[i].seq
    }

    /// (`Sums::tx`, `Sums::rx`) of the whole snapshot `i`.
    pub fn tx_rx(&self, i: usize) -> (u64, u64) {
        (self.meta[i].tx, self.meta[i].rx)
    }

    /// Every step from snapshot `from` to snapshot `to` (`from` ≤ `to`) kept each (endpoint, op)
    /// counter and grew it or left it: the per-process differences of `tx_rx` equal the sums of
    /// each endpoint's differences.
    pub fn monotone(&self, from: usize, to: usize) -> bool {
        self.meta[from].breaks == self.meta[to].breaks
    }

    /// Number of snapshots at or before `t`.
    pub fn partition_point(&self, t: u64) -> usize {
        let n = self.meta.len();
        if self.unsorted || n < 8 {
            return self.meta.partition_point(|m| m.at_ns <= t);
        }
        let (first, last) = (self.meta[0].at_ns, self.meta[n - 1].at_ns);
        if t >= last {
            return n;
        }
        if t < first {
            return 0;
        }
        // Snapshots come at a steady period: start where the times say (the views ask for the
        // newest snapshot and one a window back, for thousands of processes), and walk.
        let at = |i: usize| self.meta[i].at_ns;
        let guess = (u128::from(t - first) * (n as u128 - 1) / u128::from(last - first)) as usize;
        let mut i = guess.min(n - 1);
        for _ in 0..8 {
            if at(i) <= t {
                // at(n - 1) > t: i + 1 exists.
                if at(i + 1) > t {
                    return i + 1;
                }
                i += 1;
            } else {
                if i == 0 || at(i - 1) <= t {
                    return i;
                }
                i -= 1;
            }
        }
        self.meta.partition_point(|m| m.at_ns <= t)
    }

    /// Times of snapshots `range`, oldest first.
    pub fn times(&self, range: std::ops::Range<usize>) -> impl Iterator<Item = u64> + '_ {
        self.meta.range(range).map(|m| m.at_ns)
    }

    /// A number that changes whenever the newest snapshot lists other (endpoint, op) pairs
    /// than the one before it.
    pub fn layout_generation(&self) -> u64 {
        self.layout
    }

    /// Bytes this history holds (records and index).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Snapshot `i`, decoded; for an entry known by its totals alone, the whole snapshot at or
    /// before it (`full_at`: its own time and sequence number).
    pub fn get(&self, i: usize) -> Option<Cow<'_, Snapshot>> {
        let i = self.full_at(i)?;
        let nf = self.newest_full()?;
        if i == nf {
            return self.last();
        }
        if self.same_layout && nf > 0 && self.full_at(nf - 1) == Some(i) {
            // The whole one before the newest whole one: the newest less its last changes.
            let mut pos = 1;
            let head = Head::get(&self.meta[i].rec, &mut pos)?;
            let counts = self.state.counts_before();
            return Some(Cow::Owned(self.snapshot(i, counts, head)));
        }
        let (st, head) = self.decode(i)?;
        Some(Cow::Owned(self.snapshot(i, st.counts, head)))
    }

    /// Walks snapshots `from..=to` in order, decoding each once: `f(i, counts)` (an entry known
    /// by its totals alone gets the counters of the whole snapshot before it).
    pub fn walk(&self, from: usize, to: usize, mut f: impl FnMut(usize, &[OpCount])) {
        let to = to.min(self.meta.len().saturating_sub(1));
        if from > to || self.meta.is_empty() {
            return;
        }
        let Some(k) = (0..=from).rev().find(|&j| self.kind(j) == KEY) else {
            return;
        };
        let Some((mut st, _)) = decode_key(&self.meta[k].rec) else {
            return;
        };
        for j in k..=to {
            if j > k {
                let rec = &self.meta[j].rec;
                let ok = match self.kind(j) {
                    KEY => decode_key(rec).map(|(s, _)| st = s).is_some(),
                    DELTA => apply_delta(rec, &mut st).is_some(),
                    _ => true,
                };
                if !ok {
                    debug_assert!(false, "a record this history wrote does not decode");
                    return;
                }
            }
            if j >= from {
                f(j, &st.counts);
            }
        }
    }

    fn snapshot(&self, i: usize, counts: Vec<OpCount>, head: Head) -> Snapshot {
        Snapshot {
            at_ns: self.meta[i].at_ns,
            seq: self.meta[i].seq,
            counts,
            drops: head.drops,
            events: head.events,
            threads: head.threads,
            layers_used: head.layers_used,
        }
    }

    /// The counters at position `i` (a whole snapshot), from the keyframe at or before it.
    fn decode(&self, i: usize) -> Option<(State, Head)> {
        let k = (0..=i).rev().find(|&j| self.kind(j) == KEY)?;
        let (mut st, mut head) = decode_key(&self.meta[k].rec)?;
        for j in k + 1..=i {
            let rec = &self.meta[j].rec;
            match self.kind(j) {
                KEY => (st, head) = decode_key(rec)?,
                DELTA => head = apply_delta(rec, &mut st)?,
                _ => {}
            }
        }
        Some((st, head))
    }

    /// Appends the newest snapshot; drops the oldest as `keep` says.
    pub fn push(&mut self, s: Snapshot, keep: Keep) {
        let head = Head::of(&s);
        let has_full = self.newest_full().is_some();
        let st = &mut self.state;
        let same = self.last.is_some()
            && st.keys.len() == s.counts.len()
            && st.keys.iter().zip(&s.counts).all(|(k, c)| *k == key_of(c));
        // Deltas refer to the newest whole snapshot (`state`), which must still be kept. A history
        // of at most two (the relay's) writes keyframes only: there every push drops the oldest,
        // and a delta behind it would be decoded and written again as a keyframe (one encoding
        // instead of a delta, a decoding and an encoding; 80 % of the relay's time went there).
        let delta = same && has_full && self.since_key + 1 < KEYFRAME_EVERY && keep.max > 2;
        // Changes, sums and "now" are against the newest whole snapshot (the one before, unless
        // snapshots known by their totals alone came in between).
        let later = self.last.is_some() && s.at_ns > self.full_at_ns;
        if self.last.as_ref().is_some_and(|l| s.at_ns < l.at_ns) {
            self.unsorted = true;
        }
        let dt = if self.last.is_some() {
            s.at_ns.saturating_sub(self.full_at_ns)
        } else {
            0
        };
        let mut writer = DeltaWriter { run: (0, 0) };
        if delta {
            self.scratch.clear();
            self.scratch.push(DELTA);
            head.put(&mut self.scratch);
            put_varint(&mut self.scratch, s.counts.len() as u64);
        }
        // The process's sums and "now" rates, by endpoint runs, on the way.
        let mut sums = ChangeSums::new(dt);
        // The counters before, when the list changed (read before the state starts over).
        let mut before: Option<Vec<OpCount>> = None;
        let monotone = if same {
            if st.rare.is_empty() && s.counts.iter().any(has_rare) {
                st.rare = vec![[0; 8]; s.counts.len()];
            }
            // The changes since the snapshot before replace the last ones in place, written into
            // the delta record on the way (each one's mode refers to the change before it).
            let mut grew = !self.dup_keys;
            let rare = !st.rare.is_empty();
            for (k, c) in s.counts.iter().enumerate() {
                let m = &mut st.main[k];
                grew &= c.ops >= m[0] && c.bytes >= m[1];
                let mut d = [
                    c.ops.wrapping_sub(m[0]),
                    c.bytes.wrapping_sub(m[1]),
                    0,
                    0,
                    0,
                    0,
                ];
                let mut prev = [m[2], m[3], 0, 0, 0, 0];
                *m = [c.ops, c.bytes, d[0], d[1]];
                if let Some(r) = st.rare.get_mut(k) {
                    grew &= c.refused >= r[1] && c.posted >= r[2];
                    let now = [c.errors, c.refused, c.posted, c.posted_bytes];
                    for f in 0..4 {
                        d[2 + f] = now[f].wrapping_sub(r[f]);
                        prev[2 + f] = r[4 + f];
                        r[f] = now[f];
                        r[4 + f] = d[2 + f];
                    }
                }
                if delta {
                    writer.count(&mut self.scratch, &d, &prev, rare);
                }
                // Past a counter that shrank the sums are not used (its change wrapped).
                if grew {
                    sums.add(c, &d);
                }
            }
            grew
        } else {
            let dup = has_dup_keys(&s.counts);
            let old = st.counts();
            let grew =
                self.last.is_none() || (!self.dup_keys && !dup && grew_from(&old, &s.counts));
            self.dup_keys = dup;
            st.reset(&s.counts);
            before = Some(old);
            grew
        };
        if !monotone && self.last.is_some() {
            self.breaks += 1;
        }
        if !same {
            self.layout += 1;
        }
        let rec = if delta {
            writer.finish(&mut self.scratch);
            self.since_key += 1;
            Box::from(&self.scratch[..])
        } else {
            self.since_key = 0;
            let dels: Vec<Vals> = (0..s.counts.len()).map(|k| st.dels(k)).collect();
            encode_key(&head, &s.counts, &dels)
        };
        // Counters that only grew, in the same list: each endpoint's change is the sum of its
        // counters' changes (what `set_now` computes), when they come by endpoint in ascending
        // order, as the preload lists them.
        let quick = (later && same && monotone)
            .then(|| sums.finish(self.full_sums))
            .flatten();
        let (sums, now) = match quick {
            Some(q) => q,
            None => {
                let mut eps = EpMap::of_snapshot(&s, false);
                let sums = eps.totals();
                let now = if later {
                    // The counters before: kept above when the list changed, else the new ones
                    // less their changes.
                    let before = before.unwrap_or_else(|| st.counts_before());
                    eps.set_now(&before);
                    eps.now_rates(dt)
                } else {
                    (0.0, 0.0, 0.0)
                };
                (sums, now)
            }
        };
        self.last_sums = sums;
        self.last_errors = s.counts.iter().map(|c| c.errors).sum();
        self.full_sums = sums;
        self.full_at_ns = s.at_ns;
        self.since_full = 0;
        self.last_now = later.then_some(NowRates {
            dt_ns: dt,
            tx_bps: now.0,
            rx_bps: now.1,
            ops_per_s: now.2,
        });
        self.bytes += rec.len() + PER_SNAPSHOT;
        self.meta.push_back(Meta {
            at_ns: s.at_ns,
            seq: s.seq,
            tx: self.last_sums.tx,
            rx: self.last_sums.rx,
            breaks: self.breaks,
            rec,
        });
        self.last = Some(Snapshot {
            counts: Vec::new(),
            ..s
        });
        self.same_layout = same;
        self.trim(keep);
    }

    fn trim(&mut self, keep: Keep) {
        while self.meta.len() > keep.max.max(1) {
            self.pop_front();
        }
        // Over the budget, whole groups go, from the oldest keyframe to the next one: nothing is
        // re-encoded. The history then holds from the floor to a group (16 s at 4 Hz) more.
        let newest = self.meta.back().map_or(0, |m| m.at_ns);
        while self.bytes > keep.bytes {
            let Some(k) = self.second_key() else {
                break;
            };
            if self.meta[k].at_ns.saturating_add(keep.floor_ns) > newest {
                break;
            }
            for m in self.meta.drain(..k) {
                self.bytes -= m.rec.len() + PER_SNAPSHOT;
            }
            self.key2 = 0;
        }
    }

    /// The first keyframe after the oldest entry (where the oldest group ends). Remembered:
    /// over the budget every push asks, and keyframes only come at the back.
    fn second_key(&mut self) -> Option<usize> {
        if self.key2 == 0 || self.key2 >= self.meta.len() || self.kind(self.key2) != KEY {
            self.key2 = (1..self.meta.len())
                .find(|&j| self.kind(j) == KEY)
                .unwrap_or(0);
        }
        (self.key2 != 0).then_some(self.key2)
    }

    /// Drops the oldest snapshot; the next whole one becomes a keyframe so that the history
    /// still decodes from its start.
    fn pop_front(&mut self) {
        let next = (1..self.meta.len()).find(|&j| self.kind(j) != TOTALS);
        if self.kind(0) != TOTALS
            && let Some(j) = next
            && self.kind(j) == DELTA
        {
            match self.decode(j) {
                Some((st, head)) => {
                    let rec = encode_key(&head, &st.counts, &st.dels);
                    self.bytes = self.bytes + rec.len() - self.meta[j].rec.len();
                    self.meta[j].rec = rec;
                }
                None => debug_assert!(false, "a record this history wrote does not decode"),
            }
        }
        if let Some(m) = self.meta.pop_front() {
            self.bytes -= m.rec.len() + PER_SNAPSHOT;
        }
        self.key2 = 0;
    }
}

#[cfg(test)]
mod tests;
