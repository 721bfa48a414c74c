//! Sums over cumulative op tables: a snapshot's tx/rx bytes, data operations, doorbells, refusals
//! and posted receives, per endpoint and per process, and their differences. Pure arithmetic on
//! `event` types, below the snapshot history, the model and the time windows that use it.

use std::sync::LazyLock;

use crate::event::{Dir, Op, OpCount, Snapshot};

/// Bytes per second of `bytes` over `dt_ns` (0 over an empty interval).
pub fn per_s(bytes: u64, dt_ns: u64) -> f64 {
    if dt_ns == 0 {
        0.0
    } else {
        bytes as f64 * 1e9 / dt_ns as f64
    }
}

/// (tx bytes, rx bytes, data ops, doorbells, refusals, posted receives) of a cumulative op table.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sums {
    pub tx: u64,
    pub rx: u64,
    /// Bytes of one-sided reads (also in `rx`): they move from the peer to this endpoint.
    pub rx1: u64,
    pub ops: u64,
    pub doorbells: u64,
    /// Posts the library refused (provider busy): not in `ops`.
    pub refused: u64,
    /// Receive buffers posted, and the receives that completed (`Op::is_receive`): what is
    /// posted and not completed is their difference.
    pub posted: u64,
    pub recvs: u64,
}

/// What `Sums` does with an op code (bits of `CLASS`).
const TX: u8 = 1;
const RX: u8 = 2;
/// Received bytes of a one-sided read (also `RX`).
const RX1: u8 = 4;
const RECV: u8 = 8;
const DOORBELL: u8 = 16;

/// Every op code's class, computed once from `Op`: `Sums::add` runs for every counter of every
/// snapshot (262,144 counters every 250 ms on a job of 2,048 processes × 64 QPs).
static CLASS: LazyLock<[u8; 256]> = LazyLock::new(|| {
    let mut t = [0u8; 256];
    for &o in Op::ALL {
        t[o as usize] = if o == Op::GpuDoorbell {
            DOORBELL
        } else {
            let recv = if o.is_receive() { RECV } else { 0 };
            recv | match o.dir() {
                Dir::Tx => TX,
                Dir::Rx if o.toward_peer() == Some(false) => RX | RX1,
                Dir::Rx => RX,
                Dir::None => 0,
            }
        };
    }
    t
});

impl Sums {
    pub fn add(&mut self, c: &OpCount) {
        let k = CLASS[c.op as usize];
        self.refused += c.refused;
        self.posted += c.posted;
        if k & DOORBELL != 0 {
            self.doorbells += c.ops;
        }
        if k & RECV != 0 {
            self.recvs += c.ops;
        }
        if k & TX != 0 {
            self.tx += c.bytes;
            self.ops += c.ops;
        }
        if k & RX != 0 {
            self.rx += c.bytes;
            if k & RX1 != 0 {
                self.rx1 += c.bytes;
            }
            self.ops += c.ops;
        }
    }

    pub fn sub(&mut self, c: &OpCount) {
        let k = CLASS[c.op as usize];
        self.refused = self.refused.saturating_sub(c.refused);
        self.posted = self.posted.saturating_sub(c.posted);
        if k & DOORBELL != 0 {
            self.doorbells = self.doorbells.saturating_sub(c.ops);
        }
        if k & RECV != 0 {
            self.recvs = self.recvs.saturating_sub(c.ops);
        }
        if k & TX != 0 {
            self.tx = self.tx.saturating_sub(c.bytes);
            self.ops = self.ops.saturating_sub(c.ops);
        }
        if k & RX != 0 {
            self.rx = self.rx.saturating_sub(c.bytes);
            if k & RX1 != 0 {
                self.rx1 = self.rx1.saturating_sub(c.bytes);
            }
            self.ops = self.ops.saturating_sub(c.ops);
        }
    }

    /// The sums of a whole snapshot.
    pub fn of_snapshot(s: &Snapshot) -> Sums {
        let mut out = Sums::default();
        for c in &s.counts {
            out.add(c);
        }
        out
    }

    pub fn plus(self, o: Sums) -> Sums {
        Sums {
            tx: self.tx + o.tx,
            rx: self.rx + o.rx,
            rx1: self.rx1 + o.rx1,
            ops: self.ops + o.ops,
            doorbells: self.doorbells + o.doorbells,
            refused: self.refused + o.refused,
            posted: self.posted + o.posted,
            recvs: self.recvs + o.recvs,
        }
    }

    /// Receive buffers posted and not yet completed (None when none was ever posted).
    pub fn outstanding(&self) -> Option<u64> {
        (self.posted > 0).then(|| self.posted.saturating_sub(self.recvs))
    }
}

/// The sums of a snapshot's counters, and the "now" rates over `dt_ns` of their changes since
/// the snapshot before (each endpoint's sums of tx bytes, rx bytes and operations as bytes/s and
/// operations/s, summed over endpoints in endpoint order: what `EpMap::now_rates` gives after
/// `EpMap::set_now`), from the changes alone, counter by counter. Valid when the snapshot before
/// listed the same counters, none larger, and they come by endpoint in ascending order: then the
/// sums are those of the snapshot before plus those of the changes.
pub struct ChangeSums {
    dt_ns: u64,
    /// The sums of every change.
    changes: Sums,
    rates: (f64, f64, f64),
    /// The current endpoint and its changes so far.
    ep: Option<u32>,
    run: Sums,
    ascending: bool,
}

impl ChangeSums {
    pub fn new(dt_ns: u64) -> ChangeSums {
        ChangeSums {
            dt_ns,
            changes: Sums::default(),
            rates: (0.0, 0.0, 0.0),
            ep: None,
            run: Sums::default(),
            ascending: true,
        }
    }

    /// Counter `c`, which grew by `change` (ops, bytes, errors, refused, posted, posted bytes).
    #[inline]
    pub fn add(&mut self, c: &OpCount, change: &[u64; 6]) {
        if self.ep != Some(c.ep) {
            if self.ep.is_some_and(|e| c.ep < e) {
                self.ascending = false;
            }
            self.flush();
            self.ep = Some(c.ep);
        }
        self.run.add(&OpCount {
            ep: c.ep,
            op: c.op,
            ops: change[0],
            bytes: change[1],
            errors: change[2],
            refused: change[3],
            posted: change[4],
            posted_bytes: change[5],
        });
    }

    fn flush(&mut self) {
        if self.ep.is_some() {
            self.rates.0 += per_s(self.run.tx, self.dt_ns);
            self.rates.1 += per_s(self.run.rx, self.dt_ns);
            self.rates.2 += per_s(self.run.ops, self.dt_ns);
            self.changes = self.changes.plus(self.run);
        }
        self.run = Sums::default();
    }

    /// (totals: `before`, the sums of the snapshot before, plus the changes; now rates), None
    /// when the counters did not come in ascending endpoint order.
    pub fn finish(mut self, before: Sums) -> Option<(Sums, (f64, f64, f64))> {
        self.flush();
        self.ascending
            .then_some((before.plus(self.changes), self.rates))
    }
}

/// Operations by code, without allocating for the usual handful of codes per endpoint.
#[derive(Clone, Debug, Default)]
pub struct OpTally {
    len: usize,
    inline: [(u8, u64); 6],
    spill: Vec<(u8, u64)>,
}

impl OpTally {
    pub fn add(&mut self, op: u8, n: u64) {
        if let Some(x) = self.inline[..self.len].iter_mut().find(|(o, _)| *o == op) {
            x.1 += n;
        } else if let Some(x) = self.spill.iter_mut().find(|(o, _)| *o == op) {
            x.1 += n;
        } else if self.len < self.inline.len() {
            self.inline[self.len] = (op, n);
            self.len += 1;
        } else {
            self.spill.push((op, n));
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = (u8, u64)> + '_ {
        self.inline[..self.len]
            .iter()
            .chain(self.spill.iter())
            .copied()
    }

    pub fn count(&self) -> usize {
        self.len + self.spill.len()
    }
}

/// One endpoint's sums at the view time: since the start, over the window, between the last two
/// snapshots; and its operations by code since the start.
#[derive(Clone, Debug, Default)]
pub struct EpSums {
    pub tot: Sums,
    pub win: Sums,
    pub now: Sums,
    pub ops: OpTally,
    /// Operations that failed since the start (`OpCount::errors`; not in `Sums`, which the
    /// relay protocol carries as it is).
    pub errors: u64,
}

/// Endpoint → sums, kept sorted by endpoint id in a vector: snapshots list their counts grouped by
/// endpoint, so nearly every insert is an append or a hit on the last entry.
#[derive(Clone, Debug, Default)]
pub struct EpMap(Vec<(u32, EpSums)>);

impl EpMap {
    pub(super) fn pos(&self, ep: u32) -> Result<usize, usize> {
        match self.0.last() {
            Some((last, _)) if *last == ep => Ok(self.0.len() - 1),
            Some((last, _)) if *last < ep => Err(self.0.len()),
            _ => self.0.binary_search_by_key(&ep, |e| e.0),
        }
    }

    pub(super) fn entry(&mut self, ep: u32) -> &mut EpSums {
        let i = match self.pos(ep) {
            Ok(i) => i,
            Err(i) => {
                self.0.insert(i, (ep, EpSums::default()));
                i
            }
        };
        &mut self.0[i].1
    }

    pub fn get(&self, ep: u32) -> Option<&EpSums> {
        self.pos(ep).ok().map(|i| &self.0[i].1)
    }

    pub(super) fn get_mut(&mut self, ep: u32) -> Option<&mut EpSums> {
        self.pos(ep).ok().map(|i| &mut self.0[i].1)
    }

    pub(super) fn values_mut(&mut self) -> impl Iterator<Item = &mut EpSums> {
        self.0.iter_mut().map(|e| &mut e.1)
    }

    pub fn iter(&self) -> impl Iterator<Item = (u32, &EpSums)> {
        self.0.iter().map(|e| (e.0, &e.1))
    }

    /// The endpoints of snapshot `s1` with their totals since the start (and their operations
    /// by code when `ops`).
    pub fn of_snapshot(s1: &Snapshot, ops: bool) -> EpMap {
        let mut eps = EpMap(Vec::with_capacity(s1.counts.len() / 2 + 1));
        for c in &s1.counts {
            let e = eps.entry(c.ep);
            e.tot.add(c);
            e.errors += c.errors;
            if ops && c.ops > 0 {
                e.ops.add(c.op, c.ops);
            }
        }
        eps
    }

    /// Each endpoint's `now`: its total less what snapshot `s0` counted for it.
    pub fn set_now(&mut self, s0: &[OpCount]) {
        for e in self.values_mut() {
            e.now = e.tot;
        }
        for c in s0 {
            if let Some(e) = self.get_mut(c.ep) {
                e.now.sub(c);
            }
        }
    }

    /// Sums over the endpoints, in endpoint order, of each one's tx bytes/s, rx bytes/s and
    /// operations/s of `now` over `dt_ns` (what the process's "now" rates are).
    pub fn now_rates(&self, dt_ns: u64) -> (f64, f64, f64) {
        self.0
            .iter()
            .fold((0.0, 0.0, 0.0), |(tx, rx, ops), (_, e)| {
                (
                    tx + per_s(e.now.tx, dt_ns),
                    rx + per_s(e.now.rx, dt_ns),
                    ops + per_s(e.now.ops, dt_ns),
                )
            })
    }

    /// The sums of every endpoint.
    pub fn totals(&self) -> Sums {
        self.0
            .iter()
            .map(|(_, e)| e.tot)
            .fold(Sums::default(), Sums::plus)
    }
}
