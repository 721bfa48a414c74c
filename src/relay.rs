//! The relay protocol and the merge of relay streams. `sigmatop relay` on a remote host finds
//! that host's traced processes exactly as a local attach does (`live::LiveSource`) and streams
//! their frames on stdout; `sigmatop attach HOST...` reads one such stream per host (through ssh
//! or a `--via` command) and merges them into one `Model`. docs/WIRE.md ("Relay protocol") is the
//! format's reference.
//!
//! Every byte of a relay stream is untrusted: a stream that is not a relay, speaks another
//! version, breaks its framing or claims a process another host already serves loses its
//! connection with one message naming the host ([`Merge::push`] returns the error), and nothing it
//! sent can touch another host's processes.

mod fast;

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::agg::snapshots::{Keep, NowRates, SnapshotHistory, Totals};
use crate::agg::window::Sums;
use crate::agg::{HostLink, LinkState, Model, ProcKey};
use crate::event::DropCounters;
use crate::live::LiveSink;
use crate::wire::{self, Frame};

/// Bumped on any incompatible change to the relay stream (the hello line, `RelayFrame`, or the
/// embedded `wire::Frame`, whose version the hello names too). 2: `RelayFrame::Totals`, and
/// the relay reads `qp-every N` lines on its stdin.
pub const RELAY_PROTOCOL: u16 = 2;
/// The most ticks a relay may leave between two snapshots of a process with all its counters
/// (`--qp-every`, `qp-every N` on its stdin).
pub const MAX_QP_EVERY: u32 = 16;
/// First word of the hello line.
pub const HELLO_PREFIX: &str = "SIGMATOP-RELAY";
/// Longest hello line accepted.
pub const MAX_HELLO_LINE: usize = 512;
/// Text a remote shell may print on stdout before the hello (a start-up file that echoes):
/// skipped, up to this many bytes.
pub const MAX_PREAMBLE: usize = 8192;
/// Largest relay frame: a process frame plus its key.
pub const MAX_RELAY_FRAME: usize = wire::MAX_FRAME + 4096;
/// The relay sends a heartbeat at least this often, so a reader notices a dead link.
pub const HEARTBEAT_MS: u64 = 1000;

/// Counters a dashboard reads every tick before it asks the relays to send every QP's counters
/// less often (`qp_every_for`): 2,048 processes × 64 QPs are 262,144 counters a tick, and
/// reading and keeping one costs ~60–90 ns on a 2-core guest (BENCHMARKS.md, "Many hosts").
pub const COUNTERS_PER_TICK: usize = 32_768;

/// The `qp-every` a dashboard that follows `counters` counters (every process's newest whole
/// snapshot) asks of its relays: 1 up to `COUNTERS_PER_TICK`, then the power of two that brings
/// what a tick carries under it, at most `MAX_QP_EVERY`.
pub fn qp_every_for(counters: usize) -> u32 {
    let mut n = 1u32;
    while n < MAX_QP_EVERY && counters > COUNTERS_PER_TICK * n as usize {
        n *= 2;
    }
    n
}

/// The first line of a relay stream:
/// `SIGMATOP-RELAY relay=1 wire=1 sigmatop=0.1.0 host=node7`. Text, so that any two versions
/// of sigmatop can read each other's hello and name both versions when they differ.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RelayHello {
    /// Relay protocol version (`RELAY_PROTOCOL`).
    pub relay: u16,
    /// Live protocol version of the embedded frames (`wire::PROTOCOL_VERSION`).
    pub wire: u16,
    /// The relay's sigmatop version (Cargo's package version).
    pub version: String,
    /// The relay host's name (gethostname).
    pub host: String,
}

impl RelayHello {
    /// This sigmatop's hello for host `host`.
    pub fn ours(host: &str) -> RelayHello {
        RelayHello {
            relay: RELAY_PROTOCOL,
            wire: wire::PROTOCOL_VERSION,
            version: env!("CARGO_PKG_VERSION").to_string(),
            host: host.to_string(),
        }
    }

    /// The hello line, with its newline. Whitespace in the host name (never in a real one) is
    /// replaced, so the line always parses back.
    pub fn line(&self) -> String {
        let clean = |s: &str| -> String {
            s.chars()
                .map(|c| {
                    if c.is_whitespace() || c == '=' {
                        '_'
                    } else {
                        c
                    }
                })
                .collect()
        };
        format!(
            "{HELLO_PREFIX} relay={} wire={} sigmatop={} host={}\n",
            self.relay,
            self.wire,
            clean(&self.version),
            clean(&self.host)
        )
    }

    /// Parses a hello line (without its newline). Unknown `key=value` words are ignored, so a
    /// later version may add some.
    pub fn parse(line: &str) -> Option<RelayHello> {
        let mut words = line.split_ascii_whitespace();
        if words.next() != Some(HELLO_PREFIX) {
            return None;
        }
        let mut h = RelayHello {
            relay: 0,
            wire: 0,
            version: String::new(),
            host: String::new(),
        };
        for w in words {
            let (k, v) = w.split_once('=')?;
            match k {
                "relay" => h.relay = v.parse().ok()?,
                "wire" => h.wire = v.parse().ok()?,
                "sigmatop" => h.version = v.to_string(),
                "host" => h.host = v.to_string(),
                _ => {}
            }
        }
        (h.relay != 0 && !h.host.is_empty()).then_some(h)
    }

    /// Can this sigmatop read the stream that follows? Else the line that names both versions.
    pub fn check(&self) -> Result<(), String> {
        let ours = RelayHello::ours("");
        if self.relay == ours.relay && self.wire == ours.wire {
            return Ok(());
        }
        Err(format!(
            "sigmatop {} there speaks relay protocol {} (live protocol {}), this sigmatop {} speaks relay protocol {} (live protocol {}): install the same sigmatop on every node",
            if self.version.is_empty() {
                "?"
            } else {
                &self.version
            },
            self.relay,
            self.wire,
            ours.version,
            ours.relay,
            ours.wire
        ))
    }
}

/// One message of a relay stream after the hello.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum RelayFrame {
    /// A frame of one traced process, as its socket sent it (its `Hello` first).
    Proc { key: ProcKey, frame: Frame },
    /// The connection to process `key` ended; `problem` says why when it was not clean.
    Closed {
        key: ProcKey,
        problem: Option<String>,
    },
    /// A message about a source on that host (a socket of another user, a bad frame).
    Message(String),
    /// Nothing else to say: the link is alive. `processes` is how many the relay follows.
    Heartbeat { at_ns: u64, processes: u32 },
    /// (relay 2) The totals of process `key`'s latest snapshot, when the relay sends its whole
    /// counters only every Nth snapshot (`qp-every N`): right after that snapshot's
    /// `Proc{Snapshot}` when it was sent whole, alone otherwise.
    Totals {
        key: ProcKey,
        totals: Box<ProcTotals>,
    },
    /// (relay 2) At `qp-every` N > 1, in place of `Proc{Events}`: of the process's `total`
    /// sampled events, those the dashboard keeps (`agg::model::event_kept`: doorbells and WQEs),
    /// each with its index among the `total`.
    Events {
        key: ProcKey,
        kept: Vec<(u32, crate::event::Event)>,
        total: u32,
    },
}

/// The figures of one snapshot of a process without its counters (`RelayFrame::Totals`),
/// computed by the relay from the whole snapshot exactly as the dashboard would
/// (`agg::snapshots::SnapshotHistory::push`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProcTotals {
    pub at_ns: u64,
    pub seq: u64,
    pub drops: DropCounters,
    pub events: u64,
    pub threads: u32,
    pub layers_used: u32,
    /// `Sums` of every counter: tx, rx, rx1, ops, doorbells, refused, posted, recvs.
    pub sums: [u64; 8],
    /// The step from the snapshot before kept every counter and none shrank.
    pub monotone: bool,
    /// "Now" against the snapshot before: (dt_ns, tx bytes/s, rx bytes/s, operations/s).
    pub now: Option<(u64, f64, f64, f64)>,
    /// The clock sample the process sent before this snapshot, when it was not sent alone
    /// (applied before the totals).
    pub clock: Option<crate::event::ClockSample>,
    /// Sampled events the process sent since the last frame that carried any, none of them
    /// one the dashboard keeps (counted before the clock).
    pub unsent_events: u32,
}

impl From<&Totals> for ProcTotals {
    fn from(t: &Totals) -> ProcTotals {
        let s = &t.sums;
        ProcTotals {
            at_ns: t.at_ns,
            seq: t.seq,
            drops: t.drops,
            events: t.events,
            threads: t.threads,
            layers_used: t.layers_used,
            sums: [
                s.tx,
                s.rx,
                s.rx1,
                s.ops,
                s.doorbells,
                s.refused,
                s.posted,
                s.recvs,
            ],
            monotone: t.monotone,
            now: t.now.map(|n| (n.dt_ns, n.tx_bps, n.rx_bps, n.ops_per_s)),
            clock: None,
            unsent_events: 0,
        }
    }
}

impl ProcTotals {
    /// The model's form. Rates that are not finite numbers (never from a relay of ours) are
    /// read as zero.
    pub fn to_totals(&self) -> Totals {
        let s = &self.sums;
        let f = |x: f64| if x.is_finite() { x } else { 0.0 };
        Totals {
            at_ns: self.at_ns,
            seq: self.seq,
            drops: self.drops,
            events: self.events,
            threads: self.threads,
            layers_used: self.layers_used,
            sums: Sums {
                tx: s[0],
                rx: s[1],
                rx1: s[2],
                ops: s[3],
                doorbells: s[4],
                refused: s[5],
                posted: s[6],
                recvs: s[7],
            },
            monotone: self.monotone,
            now: self.now.map(|(dt_ns, tx, rx, ops)| NowRates {
                dt_ns,
                tx_bps: f(tx),
                rx_bps: f(rx),
                ops_per_s: f(ops),
            }),
        }
    }
}

/// Appends a framed `RelayFrame` (4-byte little-endian length, then postcard) to `out`.
pub fn encode(frame: &RelayFrame, out: &mut Vec<u8>) -> Result<(), postcard::Error> {
    wire::encode_framed(frame, out)
}

/// The relay's side: a `LiveSink` that encodes what the sockets give into the relay stream.
/// The relay writes `out` to stdout and clears it.
///
/// With `qp_every` N > 1 (the dashboard follows many QPs and said so), each process's snapshot
/// goes whole (every counter) only every Nth time, phase-shifted across the processes so that
/// each tick carries 1/N of them, and whole whenever its list of counters changes; every
/// snapshot is followed by its `Totals`, which the relay computes from the whole snapshot with
/// the dashboard's own arithmetic (a two-snapshot `SnapshotHistory` per process).
pub struct RelayEncoder {
    pub out: Vec<u8>,
    /// Processes whose connection is open.
    pub open: usize,
    qp_every: u32,
    procs: HashMap<ProcKey, Reduced>,
    /// The phase the next process gets.
    next_phase: u32,
}

impl Default for RelayEncoder {
    fn default() -> Self {
        RelayEncoder {
            out: Vec::new(),
            open: 0,
            qp_every: 1,
            procs: HashMap::new(),
            next_phase: 0,
        }
    }
}

/// One process's state at a relay that sends its counters every Nth snapshot.
struct Reduced {
    /// Its last two snapshots (their totals, "now" and monotony are read from here).
    hist: SnapshotHistory,
    /// Snapshots seen, and this process's offset among the N ticks.
    seen: u64,
    phase: u32,
    /// The clock sample that came before the next snapshot: it travels in that snapshot's
    /// `Totals`.
    clock: Option<crate::event::ClockSample>,
    /// Sampled events counted, not sent, none kept by the dashboard: they travel as a count in
    /// the next frame that carries events or totals.
    skipped: u32,
}

/// What the relay keeps per process: the last two snapshots ("now" and monotony read them).
/// Dropping the older one rewrites the newer as a keyframe when it is a delta (a few µs for
/// 128 counters); the relay's memory stays ~10 KB a process whatever the counters do.
const TWO: Keep = Keep {
    max: 2,
    bytes: usize::MAX,
    floor_ns: 0,
};

impl RelayEncoder {
    /// Sends every process's counters every `n`th snapshot (1: every snapshot, as a relay of
    /// protocol 1 did). Clamped to 1..=`MAX_QP_EVERY`.
    pub fn set_qp_every(&mut self, n: u32) {
        let n = n.clamp(1, MAX_QP_EVERY);
        if n == 1 {
            // What waits (clock samples, counts of events) goes now, in the stream of N = 1.
            let keys: Vec<ProcKey> = self.procs.keys().cloned().collect();
            for k in &keys {
                self.flush(k);
            }
            self.procs.clear();
        }
        self.qp_every = n;
    }

    pub fn qp_every(&self) -> u32 {
        self.qp_every
    }

    /// The state of process `key` at `qp_every` > 1 (made at its first frame: its phase is
    /// its order of arrival).
    fn reduced(&mut self, key: &ProcKey) -> &mut Reduced {
        if !self.procs.contains_key(key) {
            let phase = self.next_phase;
            self.next_phase = self.next_phase.wrapping_add(1);
            self.procs.insert(
                key.clone(),
                Reduced {
                    hist: SnapshotHistory::default(),
                    seen: 0,
                    phase,
                    clock: None,
                    skipped: 0,
                },
            );
        }
        self.procs.get_mut(key).expect("inserted above")
    }

    /// Sends what waits for process `key` (its clock sample, its count of events not sent),
    /// before a frame of another kind.
    fn flush(&mut self, key: &ProcKey) {
        let Some(r) = self.procs.get_mut(key) else {
            return;
        };
        let (clock, skipped) = (r.clock.take(), std::mem::take(&mut r.skipped));
        if skipped > 0 {
            self.put(&RelayFrame::Events {
                key: key.clone(),
                kept: Vec::new(),
                total: skipped,
            });
        }
        if let Some(c) = clock {
            self.put(&RelayFrame::Proc {
                key: key.clone(),
                frame: Frame::Clock(c),
            });
        }
    }

    /// A frame of process `key` at `qp_every` > 1.
    fn reduced_frame(&mut self, key: &ProcKey, frame: Frame) {
        match frame {
            Frame::Snapshot(s) => self.reduced_snapshot(key, s),
            Frame::Clock(c) => {
                if self.reduced(key).clock.is_some() {
                    self.flush(key);
                }
                self.reduced(key).clock = Some(c);
            }
            Frame::Events(evs) => {
                // At scale only the events a view reads travel; the others are counted.
                let total = evs.len() as u32;
                let kept: Vec<(u32, crate::event::Event)> = evs
                    .into_iter()
                    .enumerate()
                    .filter(|(_, e)| crate::agg::model::event_kept(e))
                    .map(|(i, e)| (i as u32, e))
                    .collect();
                let r = self.reduced(key);
                if kept.is_empty()
                    && let Some(n) = r.skipped.checked_add(total)
                {
                    r.skipped = n;
                    return;
                }
                // The events counted before these go with them, first.
                let before = std::mem::take(&mut r.skipped);
                let clock = r.clock.take();
                if let Some(c) = clock {
                    self.put(&RelayFrame::Proc {
                        key: key.clone(),
                        frame: Frame::Clock(c),
                    });
                }
                match before.checked_add(total) {
                    Some(all) => self.put(&RelayFrame::Events {
                        key: key.clone(),
                        kept: kept.into_iter().map(|(i, e)| (i + before, e)).collect(),
                        total: all,
                    }),
                    None => {
                        self.put(&RelayFrame::Events {
                            key: key.clone(),
                            kept: Vec::new(),
                            total: before,
                        });
                        self.put(&RelayFrame::Events {
                            key: key.clone(),
                            kept,
                            total,
                        });
                    }
                }
            }
            frame => {
                self.flush(key);
                self.put(&RelayFrame::Proc {
                    key: key.clone(),
                    frame,
                });
            }
        }
    }

    /// A snapshot of process `key` at `qp_every` > 1.
    fn reduced_snapshot(&mut self, key: &ProcKey, s: crate::event::Snapshot) {
        let n = u64::from(self.qp_every);
        let r = self.reduced(key);
        // The whole snapshot is what the dashboard needs to read the next one's counters:
        // the first one, one with another list of counters, and every Nth.
        let whole = r.seen == 0
            || (r.seen + u64::from(r.phase)).is_multiple_of(n)
            || !r.hist.last_keys().eq(s.counts.iter().map(|c| (c.ep, c.op)));
        r.seen += 1;
        let sent = whole.then(|| s.clone());
        r.hist.push(s, TWO);
        let Some(t) = r.hist.totals() else {
            return;
        };
        let mut totals = ProcTotals::from(&t);
        totals.unsent_events = std::mem::take(&mut r.skipped);
        if let Some(s) = sent {
            // Its clock sample first, alone, as the process sent it.
            if let Some(c) = r.clock.take() {
                self.put(&RelayFrame::Proc {
                    key: key.clone(),
                    frame: Frame::Clock(c),
                });
            }
            self.put(&RelayFrame::Proc {
                key: key.clone(),
                frame: Frame::Snapshot(s),
            });
        } else {
            totals.clock = r.clock.take();
        }
        self.put(&RelayFrame::Totals {
            key: key.clone(),
            totals: Box::new(totals),
        });
    }

    fn put(&mut self, f: &RelayFrame) {
        // A frame that cannot be encoded (never happens for these types) is left out rather
        // than breaking the stream's framing.
        let mark = self.out.len();
        if encode(f, &mut self.out).is_err() {
            self.out.truncate(mark);
        }
    }

    pub fn heartbeat(&mut self, at_ns: u64) {
        self.put(&RelayFrame::Heartbeat {
            at_ns,
            processes: self.open as u32,
        });
    }
}

impl LiveSink for RelayEncoder {
    fn frame(&mut self, key: &ProcKey, frame: Frame) {
        if matches!(frame, Frame::Hello { .. }) {
            self.open += 1;
            // A process (seen again): what waited goes first, and its next snapshot whole.
            self.flush(key);
            self.procs.remove(key);
        }
        if self.qp_every > 1 {
            return self.reduced_frame(key, frame);
        }
        self.put(&RelayFrame::Proc {
            key: key.clone(),
            frame,
        });
    }

    fn closed(&mut self, key: &ProcKey, problem: Option<String>) {
        self.open = self.open.saturating_sub(1);
        self.flush(key);
        self.procs.remove(key);
        self.put(&RelayFrame::Closed {
            key: key.clone(),
            problem,
        });
    }

    fn message(&mut self, msg: String) {
        self.put(&RelayFrame::Message(msg));
    }
}

/// What a relay stream yields.
#[derive(Clone, Debug, PartialEq)]
pub enum RelayItem {
    Hello(RelayHello),
    Frame(RelayFrame),
}

/// Incremental decoder of one relay stream: the hello line (after at most `MAX_PREAMBLE` bytes
/// of text), then frames. After an error the stream is lost: drop the decoder. Whether the
/// hello's versions are this sigmatop's is the reader's question (`RelayHello::check`): the
/// frames after a hello of another version are not decodable.
#[derive(Default)]
pub struct RelayDecoder {
    buf: wire::StreamBuf,
    hello: bool,
    preamble: usize,
}

impl RelayDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.push(bytes);
    }

    /// Bytes buffered that do not yet form a whole item.
    pub fn pending(&self) -> usize {
        self.buf.avail().len()
    }

    /// The next item, None when more bytes are needed, or why the stream is not a relay stream.
    pub fn next_item(&mut self) -> Result<Option<RelayItem>, String> {
        while !self.hello {
            let avail = self.buf.avail();
            let Some(nl) = avail.iter().position(|b| *b == b'\n') else {
                if avail.len() > MAX_HELLO_LINE || self.preamble + avail.len() > MAX_PREAMBLE {
                    return Err(not_relay(avail));
                }
                return Ok(None);
            };
            let line = String::from_utf8_lossy(&avail[..nl]).into_owned();
            let line = line.trim_end_matches('\r');
            self.buf.consume(nl + 1);
            if let Some(h) = RelayHello::parse(line) {
                self.hello = true;
                return Ok(Some(RelayItem::Hello(h)));
            }
            // Text before the hello (a start-up file that prints): skipped, within bounds; a
            // line that is not text means this is no relay at all.
            self.preamble += nl + 1;
            if self.preamble > MAX_PREAMBLE || line.starts_with(HELLO_PREFIX) || !is_text(line) {
                return Err(not_relay(line.as_bytes()));
            }
        }
        match frame_at(self.buf.avail())? {
            Some((frame, used)) => {
                self.buf.consume(used);
                Ok(Some(RelayItem::Frame(frame)))
            }
            None => Ok(None),
        }
    }

    /// Past the hello with nothing buffered: the frames of the next bytes can be read where
    /// they lie (`frame_at`), and only an unfinished one pushed.
    fn idle(&self) -> bool {
        self.hello && self.buf.avail().is_empty()
    }
}

/// The whole frame at the start of `bytes` and the bytes it takes, None when more are needed.
fn frame_at(bytes: &[u8]) -> Result<Option<(RelayFrame, usize)>, String> {
    let Some(head) = bytes.get(..4) else {
        return Ok(None);
    };
    let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
    if len > MAX_RELAY_FRAME {
        return Err(format!(
            "relay frame of {len} bytes exceeds the {MAX_RELAY_FRAME}-byte limit"
        ));
    }
    let Some(body) = bytes.get(4..4 + len) else {
        return Ok(None);
    };
    let frame: RelayFrame = match fast::decode(body) {
        Some(f) => f,
        None => postcard::from_bytes(body).map_err(|e| format!("undecodable relay frame: {e}"))?,
    };
    Ok(Some((frame, 4 + len)))
}

fn is_text(s: &str) -> bool {
    !s.contains('\u{fffd}') && s.chars().all(|c| !c.is_control() || c == '\t')
}

/// "not a sigmatop relay (it said: ...)": what a remote shell or program printed instead.
fn not_relay(first: &[u8]) -> String {
    let text: String = String::from_utf8_lossy(&first[..first.len().min(80)])
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    format!("not a sigmatop relay (its output began: {:?})", text.trim())
}

/// Why a host's stream was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// One line, for the user.
    pub reason: String,
    /// Retrying cannot help (the relay speaks another version).
    pub permanent: bool,
}

impl From<String> for Refusal {
    /// A refusal's text often quotes what the remote host sent (its host names, its problems):
    /// control characters in it are escaped, so the reason stays one line.
    fn from(reason: String) -> Refusal {
        Refusal {
            reason: one_line(&reason),
            permanent: false,
        }
    }
}

/// `s` with its control characters (a newline a remote host put in a name) escaped: one line.
pub fn one_line(s: &str) -> String {
    if !s.chars().any(char::is_control) {
        return s.to_string();
    }
    s.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// One host's stream as the merge sees it.
#[derive(Default)]
struct HostStream {
    decoder: RelayDecoder,
    hello: Option<RelayHello>,
}

/// The merge of several relay streams into one model. Host `i` is `model.links[i]`; its
/// processes are the keys it introduced with a process hello, and no other host may send frames
/// for them.
#[derive(Default)]
pub struct Merge {
    streams: Vec<HostStream>,
    /// Which host serves each remote process.
    owner: Owners,
}

/// Which host serves each remote process, with the last answer at hand: a process's frames come
/// in a row (clock, snapshot, events), thousands every 250 ms on a large job.
#[derive(Default)]
struct Owners {
    map: HashMap<ProcKey, usize>,
    last: Option<(ProcKey, usize)>,
}

impl Owners {
    fn get(&mut self, key: &ProcKey) -> Option<usize> {
        if let Some((k, o)) = &self.last
            && k == key
        {
            return Some(*o);
        }
        let o = self.map.get(key).copied()?;
        // Reuses the last key's host string: no allocation per process per tick.
        match &mut self.last {
            Some((k, last)) => {
                // Every field named: a new one must be copied here too.
                let ProcKey {
                    host,
                    pid,
                    start_ns,
                } = key;
                k.host.clone_from(host);
                k.pid = *pid;
                k.start_ns = *start_ns;
                *last = o;
            }
            None => self.last = Some((key.clone(), o)),
        }
        Some(o)
    }

    fn insert(&mut self, key: ProcKey, host: usize) {
        self.last = None;
        self.map.insert(key, host);
    }

    fn iter(&self) -> impl Iterator<Item = (&ProcKey, &usize)> {
        self.map.iter()
    }
}

impl Merge {
    /// One link per destination, all connecting; `model.links` is replaced.
    pub fn new(destinations: &[String], model: &mut Model) -> Merge {
        model.links = destinations
            .iter()
            .map(|d| HostLink {
                destination: d.clone(),
                ..Default::default()
            })
            .collect();
        Merge {
            streams: destinations.iter().map(|_| HostStream::default()).collect(),
            owner: Owners::default(),
        }
    }

    /// Host `i` starts a new connection: a fresh stream, state connecting.
    pub fn connecting(&mut self, i: usize, model: &mut Model) {
        if let (Some(s), Some(l)) = (self.streams.get_mut(i), model.links.get_mut(i)) {
            *s = HostStream::default();
            l.state = LinkState::Connecting;
            l.attempts += 1;
        }
    }

    /// Bytes from host `i`'s transport. Returns the number of frames applied, or why the stream
    /// is refused (the caller ends the transport and calls [`Merge::lost`]).
    pub fn push(&mut self, i: usize, bytes: &[u8], model: &mut Model) -> Result<usize, Refusal> {
        let Some(s) = self.streams.get_mut(i) else {
            return Ok(0);
        };
        let mut applied = 0;
        let mut bytes = bytes;
        if s.decoder.idle() {
            // The usual case: whole frames read where they lie, not copied into the buffer.
            while let Some((frame, used)) = frame_at(bytes)? {
                bytes = &bytes[used..];
                apply(i, &mut self.owner, frame, model)?;
                applied += 1;
            }
        }
        s.decoder.push(bytes);
        loop {
            let item = match s.decoder.next_item() {
                Ok(Some(item)) => item,
                Ok(None) => return Ok(applied),
                Err(e) => return Err(e.into()),
            };
            match item {
                RelayItem::Hello(h) => {
                    h.check().map_err(|reason| Refusal {
                        reason: one_line(&reason),
                        permanent: true,
                    })?;
                    if let Some(l) = model.links.get_mut(i) {
                        l.host = Some(h.host.clone());
                        l.version = Some(h.version.clone());
                        l.state = LinkState::Up;
                    }
                    s.hello = Some(h);
                }
                RelayItem::Frame(f) => {
                    apply(i, &mut self.owner, f, model)?;
                    applied += 1;
                }
            }
        }
    }

    /// Host `i`'s link ended for `reason`: its state says so, and its processes are marked
    /// ended with the reason (they may well run on: nothing is known of them any more).
    pub fn lost(&mut self, i: usize, reason: &str, model: &mut Model) {
        if let Some(l) = model.links.get_mut(i) {
            l.state = LinkState::Lost(reason.to_string());
        }
        let name = model
            .links
            .get(i)
            .map(|l| l.name().to_string())
            .unwrap_or_default();
        for (k, _) in self.owner.iter().filter(|(_, o)| **o == i) {
            if let Some(p) = model.processes.get_mut(k)
                && !p.exited
            {
                p.exited = true;
                p.problem = Some(format!("{name} lost: {reason}"));
            }
        }
    }
}

/// Applies one frame of host `i`, refusing what no honest relay sends.
fn apply(i: usize, owner: &mut Owners, f: RelayFrame, model: &mut Model) -> Result<(), String> {
    // Which host serves the process: looked up once per frame (a large job sends thousands
    // of frames every 250 ms).
    let claim = |owned: Option<usize>, key: &ProcKey, model: &Model| match owned {
        Some(o) if o != i => Err(format!(
            "sent frames of process {} on {}, which {} already serves (the same host named twice?)",
            key.pid,
            key.host,
            model
                .links
                .get(o)
                .map_or("another host", |l| l.destination.as_str())
        )),
        _ => Ok(()),
    };
    match f {
        RelayFrame::Proc { key, frame } => {
            let owned = owner.get(&key);
            claim(owned, &key, model)?;
            match &frame {
                Frame::Hello {
                    magic,
                    version,
                    identity,
                } => {
                    // The relay decoded the process's frames and re-encoded them in its own
                    // layout (the `wire` of its hello): any version its decoder reads is fine.
                    if *magic != wire::HELLO_MAGIC
                        || !(wire::OLDEST_READ..=wire::PROTOCOL_VERSION).contains(version)
                    {
                        return Err(format!(
                            "process {} speaks live protocol {version}, this sigmatop {}",
                            key.pid,
                            wire::PROTOCOL_VERSION
                        ));
                    }
                    if identity.host != key.host || identity.pid != key.pid {
                        return Err(format!(
                            "process {} on {} says hello as {} on {}",
                            key.pid, key.host, identity.pid, identity.host
                        ));
                    }
                    owner.insert(key.clone(), i);
                    // A process seen again (the link came back): it is followed anew.
                    let p = model.process_mut(&key);
                    p.exited = false;
                    p.said_bye = false;
                    p.problem = None;
                }
                _ if owned.is_none() => {
                    return Err(format!(
                        "sent a frame of process {} on {} before its hello",
                        key.pid, key.host
                    ));
                }
                Frame::Identity(id) if id.host != key.host || id.pid != key.pid => {
                    return Err(format!(
                        "process {} on {} changed its identity to {} on {}",
                        key.pid, key.host, id.pid, id.host
                    ));
                }
                _ => {}
            }
            model.apply(&key, frame);
            // Silence is judged by arrival on this side's clock (`agg::waits`).
            model.seen(&key, crate::agg::nccl::wall_ns());
        }
        RelayFrame::Closed { key, problem } => {
            let owned = owner.get(&key);
            claim(owned, &key, model)?;
            if owned.is_some() {
                if let Some(p) = &problem {
                    model.messages.push(one_line(&format!("{}: {p}", key.host)));
                }
                model.source_closed(&key, problem);
            }
        }
        RelayFrame::Message(m) => {
            let name = model
                .links
                .get(i)
                .map(|l| l.name().to_string())
                .unwrap_or_default();
            model.messages.push(one_line(&format!("{name}: {m}")));
        }
        RelayFrame::Heartbeat { .. } => {}
        RelayFrame::Events { key, kept, total } => {
            let owned = owner.get(&key);
            claim(owned, &key, model)?;
            if owned.is_none() {
                return Err(format!(
                    "sent events of process {} on {} before its hello",
                    key.pid, key.host
                ));
            }
            model.apply_events(&key, kept, total);
        }
        RelayFrame::Totals { key, totals } => {
            let owned = owner.get(&key);
            claim(owned, &key, model)?;
            if owned.is_none() {
                return Err(format!(
                    "sent totals of process {} on {} before its hello",
                    key.pid, key.host
                ));
            }
            // In the order the process sent them: events, its clock sample, the snapshot.
            if !model.apply_totals_with(
                &key,
                totals.unsent_events,
                totals.clock,
                &totals.to_totals(),
            ) {
                return Err(format!(
                    "sent totals of process {} on {} without a snapshot of its counters before them (or more than {} in a row)",
                    key.pid,
                    key.host,
                    crate::agg::snapshots::MAX_TOTALS_RUN
                ));
            }
            model.seen(&key, crate::agg::nccl::wall_ns());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
