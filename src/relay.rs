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
        self.last = Some((key.clone(), o));
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
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Identity;

    fn ident(host: &str, pid: u32) -> Identity {
        Identity {
            host: host.into(),
            pid,
            ..Default::default()
        }
    }

    fn stream(host: &str, frames: &[RelayFrame]) -> Vec<u8> {
        let mut out = RelayHello::ours(host).line().into_bytes();
        for f in frames {
            encode(f, &mut out).unwrap();
        }
        out
    }

    fn key(host: &str, pid: u32) -> ProcKey {
        ProcKey {
            host: host.into(),
            pid,
            start_ns: 0,
        }
    }

    #[test]
    fn hello_lines_round_trip_and_name_both_versions() {
        let h = RelayHello::ours("node7");
        let line = h.line();
        let want = format!(
            "SIGMATOP-RELAY relay=2 wire={} sigmatop=",
            wire::PROTOCOL_VERSION
        );
        assert!(line.starts_with(&want), "{line}");
        assert_eq!(RelayHello::parse(line.trim_end()), Some(h));
        let other =
            RelayHello::parse("SIGMATOP-RELAY relay=9 wire=4 sigmatop=7.0.0 host=n future=1")
                .expect("parses with an unknown word");
        let e = other.check().unwrap_err();
        assert!(
            e.contains("sigmatop 7.0.0 there speaks relay protocol 9"),
            "{e}"
        );
        assert!(
            e.contains(&format!("this sigmatop {}", env!("CARGO_PKG_VERSION"))),
            "{e}"
        );
        assert_eq!(RelayHello::parse("SIGMATOP-RELAY host=x"), None);
        assert_eq!(RelayHello::parse("hello"), None);
    }

    #[test]
    fn two_hosts_merge_and_garbage_loses_only_its_host() {
        let mut m = Model::new();
        let mut merge = Merge::new(&["a".into(), "b".into()], &mut m);
        merge.connecting(0, &mut m);
        merge.connecting(1, &mut m);
        let a = stream(
            "na",
            &[RelayFrame::Proc {
                key: key("na", 1),
                frame: Frame::hello(ident("na", 1)),
            }],
        );
        // A banner line before the hello is skipped.
        let mut b = b"Welcome to nb\n".to_vec();
        b.extend(stream(
            "nb",
            &[
                RelayFrame::Proc {
                    key: key("nb", 1),
                    frame: Frame::hello(ident("nb", 1)),
                },
                RelayFrame::Heartbeat {
                    at_ns: 1,
                    processes: 1,
                },
            ],
        ));
        assert_eq!(merge.push(0, &a, &mut m), Ok(1));
        for piece in b.chunks(3) {
            merge.push(1, piece, &mut m).unwrap();
        }
        assert_eq!(m.processes.len(), 2);
        assert_eq!(m.links[1].host.as_deref(), Some("nb"));
        assert_eq!(m.links[1].state, LinkState::Up);
        // Host a claims b's process: refused, b's process untouched.
        let mut bad = Vec::new();
        encode(
            &RelayFrame::Proc {
                key: key("nb", 1),
                frame: Frame::Bye { at_ns: 3 },
            },
            &mut bad,
        )
        .unwrap();
        let e = merge.push(0, &bad, &mut m).unwrap_err().reason;
        assert!(e.contains("which b already serves"), "{e}");
        merge.lost(0, &e, &mut m);
        assert!(!m.processes[&key("nb", 1)].exited);
        assert!(m.processes[&key("na", 1)].exited);
        assert!(matches!(m.links[0].state, LinkState::Lost(_)));
        // Garbage framing.
        let e = merge
            .push(1, &[0xff, 0xff, 0xff, 0xff], &mut m)
            .unwrap_err();
        assert!(e.reason.contains("exceeds") && !e.permanent, "{e:?}");
        // Not a relay at all.
        let mut m2 = Model::new();
        let mut merge2 = Merge::new(&["x".into()], &mut m2);
        let e = merge2.push(0, b"\x00\x01binary\n", &mut m2).unwrap_err();
        assert!(e.reason.starts_with("not a sigmatop relay"), "{e:?}");
        // Another version: refused for good.
        let mut m3 = Model::new();
        let mut merge3 = Merge::new(&["y".into()], &mut m3);
        let e = merge3
            .push(
                0,
                b"SIGMATOP-RELAY relay=2 wire=1 sigmatop=0.2.0 host=y\n",
                &mut m3,
            )
            .unwrap_err();
        assert!(
            e.permanent && e.reason.contains("sigmatop 0.2.0 there"),
            "{e:?}"
        );
        // A relay of the protocol before (1: no totals frames, no requests on stdin): the one
        // line names both sigmatop versions and both relay protocols.
        let mut m4 = Model::new();
        let mut merge4 = Merge::new(&["z".into()], &mut m4);
        let old = format!(
            "SIGMATOP-RELAY relay=1 wire={} sigmatop=0.1.0-old host=z\n",
            wire::PROTOCOL_VERSION
        );
        let e = merge4.push(0, old.as_bytes(), &mut m4).unwrap_err();
        assert!(e.permanent, "{e:?}");
        assert!(
            e.reason.starts_with(&format!(
                "sigmatop 0.1.0-old there speaks relay protocol 1 (live protocol {w}), this sigmatop {} speaks relay protocol 2 (live protocol {w})",
                env!("CARGO_PKG_VERSION"),
                w = wire::PROTOCOL_VERSION
            )),
            "{e:?}"
        );
    }

    #[test]
    fn frames_before_a_process_hello_are_refused() {
        let mut m = Model::new();
        let mut merge = Merge::new(&["a".into()], &mut m);
        let s = stream(
            "na",
            &[RelayFrame::Proc {
                key: key("na", 5),
                frame: Frame::Bye { at_ns: 1 },
            }],
        );
        let e = merge.push(0, &s, &mut m).unwrap_err().reason;
        assert!(e.contains("before its hello"), "{e}");
        assert!(m.processes.is_empty());
    }

    /// Snapshot `tick` of process `p` (of 4) of host "na": 8 QPs, each a write and a receive
    /// counter moving a different amount every tick; process 1's QP 3 write counter goes back
    /// at tick 9 (a counter reset: a step that is not monotone), process 2 gains a QP at tick
    /// 6 (another list of counters), and process 3 sends no receive at tick 0 (its first list).
    fn snap(p: u32, tick: u64) -> crate::event::Snapshot {
        use crate::event::{Op, OpCount};
        let qps = if p == 2 && tick >= 6 { 9 } else { 8 };
        let mut counts = Vec::new();
        for q in 1..=qps {
            let k = u64::from(p * 16 + q);
            let mut w = (tick + 1) * k * 1000 + tick * tick * 7 * k;
            if p == 1 && q == 3 && tick >= 9 {
                w /= 3;
            }
            counts.push(OpCount {
                ep: q,
                op: Op::VerbsWrite as u8,
                ops: (tick + 1) * k,
                bytes: w,
                ..Default::default()
            });
            if !(p == 3 && tick == 0) {
                counts.push(OpCount {
                    ep: q,
                    op: Op::VerbsRecv as u8,
                    ops: tick * k,
                    bytes: tick * k * 512 + tick % 3,
                    ..Default::default()
                });
            }
        }
        crate::event::Snapshot {
            at_ns: 1_000_000_000 + tick * 250_000_000,
            seq: tick,
            counts,
            events: tick * 3,
            threads: 2,
            ..Default::default()
        }
    }

    /// Sampled events of process `p` at `tick`: 150 of them (so that 16 ticks pass the 2,000
    /// the dashboard keeps), a verbs write, except every 7th (process 0: every event from
    /// tick 3 on), a doorbell; process 3 sends none at tick 5, and no doorbell from tick 10 on.
    fn events(p: u32, tick: u64) -> Vec<crate::event::Event> {
        use crate::event::{Event, Op};
        let n = if p == 3 && tick == 5 { 0 } else { 150 };
        (0..n)
            .map(|i| Event {
                tsc: tick * 1000 + i,
                ep: 1 + (i % 8) as u32,
                op: if (i % 7 == 3 && !(p == 3 && tick >= 10)) || (p == 0 && tick >= 3) {
                    Op::GpuDoorbell as u8
                } else {
                    Op::VerbsWrite as u8
                },
                bytes: i,
                ..Default::default()
            })
            .collect()
    }

    /// What one relay sends for 4 processes × `ticks` snapshots at `qp_every`, per tick.
    fn relay_ticks(qp_every: u32, ticks: u64) -> Vec<Vec<u8>> {
        let mut enc = RelayEncoder::default();
        enc.set_qp_every(qp_every);
        enc.out
            .extend_from_slice(RelayHello::ours("na").line().as_bytes());
        for p in 0..4 {
            let mut id = ident("na", p);
            id.start_ns = 900_000_000;
            enc.frame(&key("na", p), Frame::hello(id));
            let eps = (1..=9)
                .map(|q| crate::event::EndpointDef {
                    id: q,
                    layer: crate::event::Layer::Ibverbs,
                    kind: crate::event::EndpointKind::VerbsQp,
                    label: format!("qp {q}"),
                    transport: "RC".into(),
                    peer: Default::default(),
                    qpn: Some(0x100 + q),
                    gpu: None,
                    created_ns: 900_000_000,
                })
                .collect();
            enc.frame(&key("na", p), Frame::Endpoints(eps));
        }
        let mut out = vec![std::mem::take(&mut enc.out)];
        for tick in 0..ticks {
            for p in 0..4 {
                let at = snap(p, tick).at_ns;
                enc.frame(
                    &key("na", p),
                    Frame::Clock(crate::event::ClockSample {
                        tsc: tick * 1000,
                        mono_ns: at - 5,
                        real_ns: at - 5 + u64::from(p),
                    }),
                );
                enc.frame(&key("na", p), Frame::Snapshot(snap(p, tick)));
                enc.frame(&key("na", p), Frame::Events(events(p, tick)));
            }
            out.push(std::mem::take(&mut enc.out));
        }
        out
    }

    fn frames_of(bytes: &[u8]) -> Vec<RelayFrame> {
        let mut d = RelayDecoder::new();
        d.push(bytes);
        let mut out = Vec::new();
        while let Some(item) = d.next_item().unwrap() {
            if let RelayItem::Frame(f) = item {
                out.push(f);
            }
        }
        out
    }

    /// At qp-every 4 a relay sends every process's totals every tick and its counters every
    /// fourth tick (one process of four a tick, phase-shifted), and at once when its list of
    /// counters changes; the dashboard fed that stream shows the same per-process figures at
    /// every tick as one fed every snapshot (bit for bit), and per QP the figures of the newest
    /// whole snapshot, equal to the full stream's at that time.
    #[test]
    fn qp_every_sends_totals_and_keeps_process_figures_exact() {
        use crate::agg::window::{ProcAt, Window};
        const TICKS: u64 = 16;
        let full = relay_ticks(1, TICKS);
        let reduced = relay_ticks(4, TICKS);
        // What each tick carries: (whole snapshots, totals) by process.
        let mut wholes = Vec::new();
        for (tick, bytes) in reduced.iter().enumerate().skip(1) {
            // The hello line first (the first piece has no snapshot).
            let frames = frames_of(&[&reduced[0][..], bytes].concat());
            let whole: Vec<u32> = frames
                .iter()
                .filter_map(|f| match f {
                    RelayFrame::Proc {
                        key,
                        frame: Frame::Snapshot(_),
                    } => Some(key.pid),
                    _ => None,
                })
                .collect();
            let totals = frames
                .iter()
                .filter(|f| matches!(f, RelayFrame::Totals { .. }))
                .count();
            assert_eq!(totals, 4, "tick {tick}");
            // Events: only the doorbells travel, with their indexes (every 7th from 3: 21 of
            // 150; process 0 from tick 3 on: all 150).
            for f in &frames {
                match f {
                    RelayFrame::Events { key, kept, total } => {
                        let t = tick as u64 - 1;
                        let all = key.pid == 0 && t >= 3;
                        let want = match (key.pid, t) {
                            (3, 5) => 0,
                            (3, 10..) => panic!("no doorbell: its events travel as a count"),
                            _ if all => 150,
                            _ => 21,
                        };
                        assert_eq!(
                            (kept.len(), *total),
                            (want, if want == 0 { 0 } else { 150 })
                        );
                        if !all && want > 0 {
                            assert_eq!(kept[0].0, 3);
                            assert_eq!(kept[20].0, 143);
                        }
                    }
                    RelayFrame::Proc {
                        frame: Frame::Events(_),
                        ..
                    } => panic!("whole events at qp-every 4"),
                    _ => {}
                }
            }
            wholes.push(whole);
        }
        // Tick 0: every process's first snapshot. Then process p is whole when (seen + p) % 4
        // is 0: seen 1 → p 3, 2 → p 2, 3 → p 1, 4 → p 0, ...; process 2's new QP at tick 6
        // sends it whole at once; process 1's counter reset needs no whole snapshot.
        let want: Vec<Vec<u32>> = (0..TICKS)
            .map(|t| {
                if t == 0 {
                    return vec![0, 1, 2, 3];
                }
                (0..4u32)
                    .filter(|p| (t + u64::from(*p)) % 4 == 0 || (*p == 2 && t == 6))
                    .collect()
            })
            .collect();
        assert_eq!(wholes, want);
        // Totals are smaller than the snapshots they replace (16 counters here; 128 a process
        // of 64 QPs): at most 96 bytes framed.
        let size = |v: &[Vec<u8>]| v[1..].iter().map(Vec::len).sum::<usize>();
        assert!(
            size(&reduced) < size(&full),
            "{} vs {}",
            size(&reduced),
            size(&full)
        );
        for f in frames_of(&[&reduced[0][..], &reduced[TICKS as usize]].concat()) {
            if let RelayFrame::Totals { .. } = f {
                let mut b = Vec::new();
                encode(&f, &mut b).unwrap();
                assert!(b.len() <= 96, "{} bytes: {f:?}", b.len());
            }
        }
        let (mut m1, mut m4) = (Model::new(), Model::new());
        let mut merge1 = Merge::new(&["a".into()], &mut m1);
        let mut merge4 = Merge::new(&["a".into()], &mut m4);
        for (tick, (b1, b4)) in full.iter().zip(&reduced).enumerate() {
            merge1.push(0, b1, &mut m1).unwrap();
            merge4.push(0, b4, &mut m4).unwrap();
            if tick == 0 {
                continue;
            }
            let t = m1.latest_ns();
            assert_eq!(m4.latest_ns(), t);
            for p in 0..4 {
                let k = key("na", p);
                let (p1, p4) = (&m1.processes[&k], &m4.processes[&k]);
                let (h1, h4) = (&p1.history, &p4.history);
                assert_eq!(h1.len(), h4.len());
                for i in 0..h1.len() {
                    assert_eq!(
                        (h1.at_ns(i), h1.seq(i), h1.tx_rx(i)),
                        (h4.at_ns(i), h4.seq(i), h4.tx_rx(i))
                    );
                    assert_eq!(h1.monotone(0, i), h4.monotone(0, i), "p{p} {i}");
                }
                assert_eq!(
                    format!("{:?}", h1.totals()),
                    format!("{:?}", h4.totals()),
                    "tick {tick} process {p}"
                );
                // What the Nodes view and the process rows read: the same, bit for bit.
                for w in [Window::Seconds(1), Window::All] {
                    let a1 = ProcAt::new(&k, p1, t, w, false);
                    let a4 = ProcAt::new(&k, p4, t, w, false);
                    assert_eq!(a1.detailed, a4.detailed, "p{p} tick {tick}");
                    let n = h4.len();
                    if a1.detailed && n >= 2 && !(h4.is_full(n - 1) && h4.is_full(n - 2)) {
                        // Read from endpoints (a step that was not monotone: process 1 at tick
                        // 9 and in the window after it), the reduced stream's at its newest
                        // whole snapshot, "now" from the whole one before: compared below.
                        assert!(p == 1 && tick >= 9, "p{p} tick {tick}");
                        continue;
                    }
                    assert_eq!(
                        format!("{:?}", a1.sums),
                        format!("{:?}", a4.sums),
                        "tick {tick} process {p}"
                    );
                    assert_eq!(a1.drops, a4.drops);
                }
                // Per QP: the newest whole snapshot, as the full stream had it at that time,
                // and "now" over the step from the whole one before.
                let f = h4.full_at(h4.len() - 1).unwrap();
                let tf = h4.at_ns(f);
                let d4 = ProcAt::new(&k, p4, t, Window::All, true);
                let d1 = ProcAt::new(&k, p1, tf, Window::All, true);
                assert_eq!(
                    format!("{:?}", (d1.sums.tot, d1.sums.win_tx, d1.window_ns)),
                    format!("{:?}", (d4.sums.tot, d4.sums.win_tx, d4.window_ns)),
                    "tick {tick} process {p}"
                );
                let tot = |a: &ProcAt| -> Vec<(u32, u64, u64, u64)> {
                    a.eps
                        .iter()
                        .map(|(ep, e)| (ep, e.tot.tx, e.tot.rx, e.tot.ops))
                        .collect()
                };
                assert_eq!(tot(&d1), tot(&d4));
                if let Some(f0) = f.checked_sub(1).and_then(|i| h4.full_at(i)) {
                    let tf0 = h4.at_ns(f0);
                    let before = tot(&ProcAt::new(&k, p1, tf0, Window::All, true));
                    assert_eq!(d4.now_ns, tf - tf0);
                    let now: Vec<(u32, u64, u64, u64)> = d4
                        .eps
                        .iter()
                        .map(|(ep, e)| (ep, e.now.tx, e.now.rx, e.now.ops))
                        .collect();
                    let want: Vec<(u32, u64, u64, u64)> = tot(&d1)
                        .iter()
                        .map(|&(ep, tx, rx, ops)| {
                            let b = before
                                .iter()
                                .find(|b| b.0 == ep)
                                .map_or((0, 0, 0), |b| (b.1, b.2, b.3));
                            // A counter that went back counts from zero (process 1, QP 3).
                            (ep, tx.saturating_sub(b.0), rx - b.1, ops - b.2)
                        })
                        .collect();
                    if !(p == 1 && tf0 < snap(1, 9).at_ns && tf >= snap(1, 9).at_ns) {
                        assert_eq!(now, want, "tick {tick} process {p}");
                    }
                }
                assert_eq!(h4.get(h4.len() - 1).unwrap().at_ns, tf);
                // The sampled events the views read: the same, though only doorbells travel.
                let ev = |p: &crate::agg::ProcessState| -> Vec<(u64, u64)> {
                    p.recent.iter().map(|e| (e.tsc, e.bytes)).collect()
                };
                let (e1, e4) = (ev(p1), ev(p4));
                if p == 3 && tick >= 11 {
                    // Its events of the last tick, none a doorbell, are still a count at the
                    // relay (it travels with the next totals): the window of the latest events
                    // moves 250 ms later, by one batch (21 doorbells of an old one).
                    assert!(
                        e4.ends_with(&e1) && e4.len() - e1.len() <= 21,
                        "tick {tick}"
                    );
                } else {
                    assert_eq!(e1, e4, "tick {tick} process {p}");
                }
                assert_eq!(
                    p1.clock.samples(),
                    p4.clock.samples(),
                    "tick {tick} process {p}"
                );
                assert!(!p4.recent.is_empty());
                assert_eq!(h4.last().unwrap().into_owned(), snap(p, h4.seq(f)));
            }
        }
        // Every 4th snapshot of a process whole: process 0's were ticks 0, 4, 8, 12.
        let h = &m4.processes[&key("na", 0)].history;
        let whole: Vec<u64> = (0..h.len())
            .filter(|&i| h.is_full(i))
            .map(|i| h.seq(i))
            .collect();
        assert_eq!(whole, [0, 4, 8, 12]);
    }

    #[test]
    fn totals_without_a_snapshot_before_are_refused() {
        let mut m = Model::new();
        let mut merge = Merge::new(&["a".into()], &mut m);
        let t = ProcTotals::from(&crate::agg::snapshots::Totals::default());
        let s = stream(
            "na",
            &[RelayFrame::Totals {
                key: key("na", 5),
                totals: Box::new(t.clone()),
            }],
        );
        let e = merge.push(0, &s, &mut m).unwrap_err().reason;
        assert!(
            e.contains("sent totals of process 5 on na before its hello"),
            "{e}"
        );
        let mut m = Model::new();
        let mut merge = Merge::new(&["a".into()], &mut m);
        let s = stream(
            "na",
            &[
                RelayFrame::Proc {
                    key: key("na", 5),
                    frame: Frame::hello(ident("na", 5)),
                },
                RelayFrame::Totals {
                    key: key("na", 5),
                    totals: Box::new(t),
                },
            ],
        );
        let e = merge.push(0, &s, &mut m).unwrap_err().reason;
        assert!(
            e.contains("without a snapshot of its counters before them"),
            "{e}"
        );
    }

    #[test]
    fn qp_every_follows_the_counters() {
        assert_eq!(qp_every_for(0), 1);
        // One host: 8 processes × 64 QPs × 2 counters.
        assert_eq!(qp_every_for(1024), 1);
        assert_eq!(qp_every_for(COUNTERS_PER_TICK), 1);
        assert_eq!(qp_every_for(COUNTERS_PER_TICK + 1), 2);
        // 256 hosts × 8 processes × 64 QPs × 2 counters.
        assert_eq!(qp_every_for(262_144), 8);
        assert_eq!(qp_every_for(usize::MAX), MAX_QP_EVERY);
    }

    /// A GPU QP that rings 100 doorbells every 250 ms: at qp-every 4 the doorbell view's rate
    /// is 400/s at every sample once two whole snapshots are in (held between them), as at
    /// qp-every 1, not 0, 0, 0, 1,600.
    #[test]
    fn doorbell_rates_hold_between_whole_snapshots() {
        use crate::agg::history::{doorbell_series, sample_times};
        use crate::agg::window::{ProcAt, Window};
        use crate::event::{Op, OpCount};
        let rates = |n: u32| -> Vec<f64> {
            let mut enc = RelayEncoder::default();
            enc.set_qp_every(n);
            enc.out
                .extend_from_slice(RelayHello::ours("na").line().as_bytes());
            let k = key("na", 1);
            enc.frame(&k, Frame::hello(ident("na", 1)));
            for tick in 0..24u64 {
                enc.frame(
                    &k,
                    Frame::Snapshot(crate::event::Snapshot {
                        at_ns: 1_000_000_000 + tick * 250_000_000,
                        seq: tick,
                        counts: vec![OpCount {
                            ep: 1,
                            op: Op::GpuDoorbell as u8,
                            ops: 100 * (tick + 1),
                            ..Default::default()
                        }],
                        ..Default::default()
                    }),
                );
            }
            let mut m = Model::new();
            let mut merge = Merge::new(&["a".into()], &mut m);
            merge.push(0, &enc.out, &mut m).unwrap();
            let t = m.latest_ns();
            let p = &m.processes[&k];
            let procs = vec![ProcAt::new(&k, p, t, Window::All, true)];
            let times = sample_times(&m, t);
            let s = doorbell_series(&m, &procs, t, &times, Window::All);
            assert_eq!(s.len(), 1);
            s[0].rate_history.clone()
        };
        let full = rates(1);
        assert_eq!(full.len(), 23);
        assert!(full.iter().all(|r| *r == 400.0), "{full:?}");
        let reduced = rates(4);
        assert_eq!(reduced.len(), 23);
        // Whole snapshots at ticks 0, 4, 8, ...: nothing known before the second one.
        assert!(reduced[..3].iter().all(|r| *r == 0.0), "{reduced:?}");
        assert!(reduced[3..].iter().all(|r| *r == 400.0), "{reduced:?}");
    }

    /// Back to qp-every 1 (the job shrank): the clock sample and the count of events that
    /// waited for the next snapshot are sent at once, and the stream is protocol 1's again.
    #[test]
    fn back_to_every_snapshot_sends_what_waited() {
        let mut enc = RelayEncoder::default();
        enc.set_qp_every(4);
        enc.out
            .extend_from_slice(RelayHello::ours("na").line().as_bytes());
        let k = key("na", 1);
        enc.frame(&k, Frame::hello(ident("na", 1)));
        enc.frame(&k, Frame::Snapshot(snap(0, 0)));
        enc.frame(&k, Frame::Events(events(3, 12)));
        let c = crate::event::ClockSample {
            tsc: 7,
            mono_ns: 8,
            real_ns: 9,
        };
        enc.frame(&k, Frame::Clock(c));
        let before = frames_of(&enc.out).len();
        enc.set_qp_every(1);
        enc.frame(&k, Frame::Snapshot(snap(0, 1)));
        let frames = frames_of(&enc.out);
        let tail: Vec<&RelayFrame> = frames[before..].iter().collect();
        assert_eq!(
            tail,
            [
                &RelayFrame::Events {
                    key: k.clone(),
                    kept: Vec::new(),
                    total: 150
                },
                &RelayFrame::Proc {
                    key: k.clone(),
                    frame: Frame::Clock(c)
                },
                &RelayFrame::Proc {
                    key: k.clone(),
                    frame: Frame::Snapshot(snap(0, 1))
                },
            ]
        );
    }
}
