//! The one collector thread per process: drains the per-thread rings, sums counters into
//! snapshots, writes the record directory in chunks, and serves the live socket. Everything that
//! does I/O happens here, never on an application thread.

use core::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use sigmatop::event::{DropCounters, Event, Identity, Op, OpCount, RawEvent, Snapshot};
use sigmatop::queue::Queues;
use sigmatop::trace::ProcessRecord;
use sigmatop::trace::writer::ProcessWriter;
use sigmatop::wire::Frame;

use crate::runtime::server::Server;
use crate::runtime::thread::{self, ThreadState};
use crate::{runtime::clock, runtime::config, runtime::registry};

const TICK: Duration = Duration::from_millis(5);
/// Record chunks are flushed at least this often (the most a SIGKILL can lose).
const FLUSH_EVERY: Duration = Duration::from_millis(100);
/// Events buffered per thread before a chunk is written regardless of time.
const CHUNK_EVENTS: usize = 16 * 1024;
/// A ring that held this many events at a drain (a quarter of it) has the collector drain again
/// without sleeping: at the highest event rates a ring fills in less than a tick.
const BUSY_RING: usize = thread::RING_CAP / 4;
/// Sampled events sent live per snapshot interval, at most.
const LIVE_EVENTS_PER_INTERVAL: usize = 4096;

const NOT_STARTED: u8 = 0;
const RUNNING: u8 = 1;
const STOPPED_FOR_EXEC: u8 = 2;
const FAILED: u8 = 3;

static STATE: AtomicU8 = AtomicU8::new(NOT_STARTED);
static STOP: AtomicBool = AtomicBool::new(false);
static DONE: AtomicBool = AtomicBool::new(false);

/// Registered with pthread_atfork: in the child, the parent's collector thread does not exist.
/// The child gets its own collector (own socket and record directory, counters from zero) after a
/// short grace period, so the common fork + exec leaves nothing behind: the exec'd image starts its
/// own tracing if it uses RDMA.
extern "C" fn after_fork_in_child() {
    PROCESS_PID.store(crate::runtime::os::kernel_pid(), Ordering::Release);
    let was_running = STATE.load(Ordering::Acquire) == RUNNING;
    crate::runtime::thread::reset_after_fork();
    crate::runtime::fork::run_child_hooks();
    STATE.store(NOT_STARTED, Ordering::Release);
    STOP.store(false, Ordering::Release);
    DONE.store(false, Ordering::Release);
    RUN_BEGAN.store(false, Ordering::Release);
    HURRY.store(false, Ordering::Release);
    CANCEL.store(false, Ordering::Release);
    if was_running {
        START_DELAY_MS.store(50, Ordering::Release);
        ensure_started();
    }
}

/// Called on the collector thread after each record chunk it wrote, with the record's bytes
/// written so far: the benchmark entry points' slow disk (bench.rs). Unset in the shipped library.
static AFTER_CHUNK: std::sync::OnceLock<fn(u64)> = std::sync::OnceLock::new();

/// A layer's own live frames, sent after each snapshot (NCCL's collectives and where they wait:
/// lib.rs installs it; the runtime names no layer).
static LIVE_FRAME: std::sync::OnceLock<fn(&mut Vec<Frame>)> = std::sync::OnceLock::new();

/// Installs the per-snapshot live frames (constructor only; a second call changes nothing).
pub fn live_frame(f: fn(&mut Vec<Frame>)) {
    let _ = LIVE_FRAME.set(f);
}

/// The work queues' state at each interval, from the snapshot just taken (verbs QPs: lib.rs
/// installs the layer's; the runtime names no layer). Sent live and recorded.
static QUEUES: std::sync::OnceLock<fn(&Snapshot) -> Option<Queues>> = std::sync::OnceLock::new();

/// Installs the per-interval queue source and its per-drain tick (constructor only; a second
/// call changes nothing).
pub fn queue_source(f: fn(&Snapshot) -> Option<Queues>, tick: fn()) {
    let _ = QUEUES.set(f);
    let _ = QUEUE_TICK.set(tick);
}

/// Called after each drain (every few ms): queue ages finer than an interval.
static QUEUE_TICK: std::sync::OnceLock<fn()> = std::sync::OnceLock::new();

/// Whether an interval's queues go to the record: when a count or a state changed since the last
/// recorded one, or while send work is outstanding (its ages are what a stall is read from).
/// Receives that stay posted and unchanged are not written again: their ages follow from the
/// last entry.
fn queues_worth_recording(q: &Queues, last: &[(u32, [u64; 6])]) -> bool {
    q.queues.len() != last.len()
        || q.queues.iter().any(|s| s.sq_outstanding() > 0)
        || q.queues.iter().zip(last).any(|(s, l)| queue_key(s) != *l)
}

fn queue_key(s: &sigmatop::queue::QueueState) -> (u32, [u64; 6]) {
    let errors: u64 = s.errors.iter().map(|e| e.1).sum();
    (
        s.ep,
        [
            s.sq_posted,
            s.sq_completed,
            s.rq_posted,
            s.rq_completed,
            errors + s.unmatched,
            s.health as u64,
        ],
    )
}

/// Installs the after-chunk hook (constructor only; a second call changes nothing).
pub fn after_each_chunk(f: fn(u64)) {
    let _ = AFTER_CHUNK.set(f);
}

static START_DELAY_MS: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

/// Set once `run` has begun (socket and record created).
static RUN_BEGAN: AtomicBool = AtomicBool::new(false);
/// Ends a fork child's start-up grace period early (it must flush before an exec).
static HURRY: AtomicBool = AtomicBool::new(false);
/// Cancels a collector that has not begun (nothing to record).
static CANCEL: AtomicBool = AtomicBool::new(false);

/// Called right before an exec replaces this image: ends the record cleanly (final drain, End
/// record, Bye to live readers). A fork child whose collector has not begun yet (still in its
/// grace period) is simply cancelled: nothing of it is created.
pub fn before_exec() {
    // A vfork child's exec: the collector in this memory is the parent's, which goes on.
    if memory_of_another_process() {
        return;
    }
    if end_now() {
        STATE.store(STOPPED_FOR_EXEC, Ordering::Release);
    }
}

/// Called by the `_exit`/`_Exit` hooks (crate::interpose::libc::exit), where no destructor will run: the same
/// final flush as at a normal exit, and the same cancellation of a fork child's collector that
/// has not begun.
pub fn before_exit() {
    end_now();
}

/// Ends the collector now (before an exec or `_exit`): false when none was running.
fn end_now() -> bool {
    if STATE.load(Ordering::Acquire) != RUNNING {
        return false;
    }
    if !RUN_BEGAN.load(Ordering::Acquire) && !crate::runtime::thread::any_registered() {
        // Still in its grace period and nothing traced since the fork: cancel it.
        CANCEL.store(true, Ordering::Release);
    } else {
        // Something was traced: the collector starts now (if it has not) and flushes it all.
        HURRY.store(true, Ordering::Release);
        shutdown();
    }
    true
}

/// The process this memory belongs to: set in the constructor and, in a fork child, by the
/// fork handler. A vfork child (or any `clone` child that shares or copies the memory without
/// running fork handlers) sees its parent's pid here.
static PROCESS_PID: core::sync::atomic::AtomicU32 = core::sync::atomic::AtomicU32::new(0);

/// True when the calling process is not the one whose sigmatop state this memory holds: a vfork
/// child, which shares its parent's memory and must leave the parent's collector and doorbell
/// poller alone when it execs or exits (`_exit` is what it calls when its exec fails).
pub fn memory_of_another_process() -> bool {
    let pid = PROCESS_PID.load(Ordering::Acquire);
    pid != 0 && pid != crate::runtime::os::kernel_pid()
}

/// The collector thread's kernel id (0 before it runs): an `_exit` from a signal handler that
/// interrupted the collector itself must not wait for it.
static COLLECTOR_TID: core::sync::atomic::AtomicU32 = core::sync::atomic::AtomicU32::new(0);

/// True on the collector thread.
pub fn on_collector_thread() -> bool {
    let tid = COLLECTOR_TID.load(Ordering::Acquire);
    tid != 0 && tid == crate::runtime::os::tid()
}

/// The exec failed: this image goes on, and so does tracing.
pub fn after_failed_exec() {
    restart();
}

fn restart() {
    if STATE.load(Ordering::Acquire) != STOPPED_FOR_EXEC {
        return;
    }
    let deadline = Instant::now() + Duration::from_secs(2);
    while !DONE.load(Ordering::Acquire) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    STOP.store(false, Ordering::Release);
    DONE.store(false, Ordering::Release);
    RUN_BEGAN.store(false, Ordering::Release);
    HURRY.store(false, Ordering::Release);
    CANCEL.store(false, Ordering::Release);
    STATE.store(NOT_STARTED, Ordering::Release);
    ensure_started();
}

/// Notes this process's pid and installs the fork handler. Constructor only.
pub fn init() {
    PROCESS_PID.store(crate::runtime::os::kernel_pid(), Ordering::Release);
    // sigmatop's locks first: child handlers run in registration order, so they are free
    // before the child's collector is started.
    crate::runtime::os::at_fork(
        crate::runtime::fork::prepare,
        crate::runtime::fork::release,
        crate::runtime::fork::release,
    );
    crate::runtime::os::at_fork_child(after_fork_in_child);
}

/// Starts the collector once; called from control-path hooks (library init, endpoint creation),
/// never from the hot path.
pub fn ensure_started() {
    match STATE.load(Ordering::Acquire) {
        NOT_STARTED => {}
        // A variadic exec (execl...) that failed cannot resume tracing itself: the next
        // control-path call does.
        STOPPED_FOR_EXEC => return restart(),
        _ => return,
    }
    if STATE
        .compare_exchange(NOT_STARTED, RUNNING, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return;
    }
    config::flush_warnings();
    let spawned = std::thread::Builder::new()
        .name("sigmatop".into())
        .stack_size(1 << 20)
        .spawn(|| {
            COLLECTOR_TID.store(crate::runtime::os::tid(), Ordering::Release);
            let delay = START_DELAY_MS.swap(0, Ordering::AcqRel);
            let until = Instant::now() + Duration::from_millis(delay);
            while Instant::now() < until
                && !HURRY.load(Ordering::Acquire)
                && !CANCEL.load(Ordering::Acquire)
            {
                std::thread::sleep(Duration::from_millis(1));
            }
            if CANCEL.load(Ordering::Acquire) {
                // A fork child that exec'd before tracing anything: leave nothing behind.
                DONE.store(true, Ordering::Release);
                return;
            }
            RUN_BEGAN.store(true, Ordering::Release);
            let r = std::panic::catch_unwind(run);
            if r.is_err() {
                config::disable_all();
                eprintln!(
                    "sigmatop: collector failed; tracing and recording stopped, the program continues untraced"
                );
            }
            DONE.store(true, Ordering::Release);
        });
    if spawned.is_err() {
        STATE.store(FAILED, Ordering::Release);
        eprintln!("sigmatop: cannot start the collector thread; tracing disabled");
    }
}

/// No collector was ever started in this image: nothing was traced.
pub fn never_started() -> bool {
    STATE.load(Ordering::Acquire) == NOT_STARTED
}

pub fn running() -> bool {
    STATE.load(Ordering::Acquire) == RUNNING && !DONE.load(Ordering::Acquire)
}

/// Asks the collector for a final flush and waits for it (bounded: exit must never hang).
pub fn shutdown() {
    if STATE.load(Ordering::Acquire) != RUNNING {
        return;
    }
    STOP.store(true, Ordering::Release);
    HURRY.store(true, Ordering::Release);
    // Exit must never hang, but a slow machine (an emulated guest, an overloaded node) must not
    // lose the last flush either: wait up to 2 s, and up to 15 s while the collector visibly
    // makes progress (its loop counter moves).
    let start = Instant::now();
    let mut last_progress = PROGRESS.load(Ordering::Acquire);
    let mut last_change = start;
    while !DONE.load(Ordering::Acquire) {
        let now = Instant::now();
        let p = PROGRESS.load(Ordering::Acquire);
        if p != last_progress {
            last_progress = p;
            last_change = now;
        }
        let waited = now - start;
        let stalled = now - last_change > Duration::from_millis(500);
        if waited > Duration::from_secs(15) || (waited > Duration::from_secs(2) && stalled) {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Bumped by the collector as it works, so an exiting process can tell slow from stuck.
static PROGRESS: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

pub fn identity() -> Identity {
    let env_u32 = |names: &[&str]| {
        names.iter().find_map(|n| {
            std::env::var(n)
                .ok()
                .and_then(|v| v.trim().parse::<u32>().ok())
        })
    };
    let exe = std::fs::read_link("/proc/self/exe")
        .ok()
        .and_then(|p| p.file_name().map(|f| f.to_string_lossy().into_owned()))
        .unwrap_or_default();
    Identity {
        host: crate::runtime::os::hostname(),
        pid: crate::runtime::os::pid(),
        ppid: crate::runtime::os::ppid(),
        uid: crate::runtime::os::uid(),
        exe,
        rank: env_u32(&[
            "OMPI_COMM_WORLD_RANK",
            "PMI_RANK",
            "PMIX_RANK",
            "SLURM_PROCID",
            "RANK",
        ]),
        local_rank: env_u32(&[
            "OMPI_COMM_WORLD_LOCAL_RANK",
            "MPI_LOCALRANKID",
            "SLURM_LOCALID",
            "LOCAL_RANK",
        ]),
        world_size: env_u32(&[
            "OMPI_COMM_WORLD_SIZE",
            "PMI_SIZE",
            "SLURM_NTASKS",
            "WORLD_SIZE",
        ]),
        mode: config::mode() as u8,
        layers: config::layers(),
        sample: config::sample(),
        own_addr_hashes: registry::own_addrs(),
        start_ns: clock::real_ns(),
        version: env!("CARGO_PKG_VERSION").to_string(),
    }
}

/// Adds a thread's counters of (`ep`, `op`) to a process total.
fn add_slot(
    e: std::collections::hash_map::Entry<'_, (u32, u8), OpCount>,
    ep: u32,
    op: u8,
    s: &thread::Slot,
) {
    let c = e.or_insert(OpCount {
        ep,
        op,
        ..Default::default()
    });
    c.ops += s.ops.load(Ordering::Relaxed);
    c.bytes += s.bytes.load(Ordering::Relaxed);
    c.errors += s.errors.load(Ordering::Relaxed);
    c.refused += s.refused.load(Ordering::Relaxed);
    c.posted += s.posted.load(Ordering::Relaxed);
    c.posted_bytes += s.posted_bytes.load(Ordering::Relaxed);
}

/// Counters of threads that exited, folded in so totals never go backwards.
#[derive(Default)]
struct Totals {
    retired: HashMap<(u32, u8), OpCount>,
    retired_ring_full: u64,
    retired_overflow: u64,
}

struct ThreadBuf {
    events: Vec<RawEvent>,
    written: u64,
    started: bool,
}

struct Collector {
    identity: Identity,
    identity_gen: u64,
    writer: Option<ProcessWriter>,
    record_root: Option<PathBuf>,
    server: Option<Server>,
    totals: Totals,
    bufs: HashMap<u32, ThreadBuf>,
    scratch: Vec<RawEvent>,
    defs_sent: usize,
    updates_sent: usize,
    live_events: Vec<Event>,
    live_counter: u64,
    events_total: u64,
    drops: DropCounters,
    seq: u64,
    /// The key of each queue in the last `Queues` recorded.
    queues_recorded: Vec<(u32, [u64; 6])>,
}

impl Collector {
    fn record(&mut self, rec: &ProcessRecord) {
        if let Some(w) = self.writer.as_mut()
            && let Err(e) = w.write_record(rec)
        {
            self.record_failed(e);
        }
    }

    fn record_failed(&mut self, e: std::io::Error) {
        if let Some(w) = self.writer.take() {
            eprintln!(
                "sigmatop: recording to {} stopped: {e}; live tracing continues, the record is cut here",
                w.dir().display()
            );
        }
    }

    fn write_chunk(w: &mut ProcessWriter, tid: u32, events: &[RawEvent]) -> std::io::Result<()> {
        if config::fault() == config::Fault::Disk && w.bytes_written > 4096 {
            return Err(std::io::Error::from_raw_os_error(libc::ENOSPC));
        }
        let r = w.write_events(tid, events);
        if let Some(after) = AFTER_CHUNK.get() {
            after(w.bytes_written);
        }
        r
    }

    fn write_events(&mut self, tid: u32) {
        PROGRESS.fetch_add(1, Ordering::Release);
        let Some(buf) = self.bufs.get_mut(&tid) else {
            return;
        };
        if buf.events.is_empty() {
            return;
        }
        let n = buf.events.len() as u64;
        let mut failed = None;
        if let Some(w) = self.writer.as_mut() {
            if !buf.started {
                buf.started = true;
            }
            match Self::write_chunk(w, tid, &buf.events) {
                Ok(()) => buf.written += n,
                Err(e) => failed = Some(e),
            }
        }
        buf.events.clear();
        if let Some(e) = failed {
            self.drops.record_lost += n;
            self.record_failed(e);
        }
    }

    /// Drains every ring (and retires threads that exited); returns the most events one ring
    /// held.
    fn drain(&mut self, force_flush: bool) -> usize {
        if config::fault() == config::Fault::Ring {
            return 0;
        }
        let mut fullest = 0;
        let mut exited: Vec<&'static ThreadState> = Vec::new();
        // Without a record the rings hold only the events the hot path sampled for live viewers:
        // each goes out as it is; with one they hold every event, and one in `sample` goes out.
        let sample = if config::events() == config::Events::All {
            config::sample().max(1) as u64
        } else {
            1
        };
        let recording = self.writer.is_some();
        let mut new_threads = Vec::new();
        thread::for_each_thread(|ts| {
            if ts.retired.load(Ordering::Acquire) {
                return;
            }
            let was_exited = ts.exited.load(Ordering::Acquire);
            self.scratch.clear();
            let n = ts.drain(&mut self.scratch);
            fullest = fullest.max(n);
            if n > 0 {
                self.events_total += n as u64;
                for e in &self.scratch {
                    self.live_counter += 1;
                    if self.live_counter.is_multiple_of(sample) {
                        if self.live_events.len() < LIVE_EVENTS_PER_INTERVAL {
                            self.live_events.push(Event::from_raw(e, ts.tid));
                        } else {
                            self.drops.live_not_sent += 1;
                        }
                    }
                }
                if !recording && self.record_root.is_some() {
                    // The record stopped (disk full, I/O error): what it would have held is lost.
                    self.drops.record_lost += n as u64;
                }
                if recording {
                    let buf = self.bufs.entry(ts.tid).or_insert_with(|| {
                        new_threads.push((ts.tid, ts.name()));
                        ThreadBuf {
                            events: Vec::with_capacity(CHUNK_EVENTS),
                            written: 0,
                            started: false,
                        }
                    });
                    buf.events.extend_from_slice(&self.scratch);
                }
            }
            if was_exited {
                exited.push(ts);
            }
        });
        for (tid, name) in new_threads {
            self.record(&ProcessRecord::ThreadStart { tid, name });
        }
        let tids: Vec<u32> = self
            .bufs
            .iter()
            .filter(|(_, b)| force_flush || b.events.len() >= CHUNK_EVENTS)
            .map(|(t, _)| *t)
            .collect();
        for tid in tids {
            self.write_events(tid);
        }
        for ts in exited {
            self.retire(ts);
        }
        fullest
    }

    fn retire(&mut self, ts: &'static ThreadState) {
        ts.for_each_counter(|ep, op, s| add_slot(self.totals.retired.entry((ep, op)), ep, op, s));
        self.totals.retired_ring_full += ts.ring_full.load(Ordering::Relaxed);
        self.totals.retired_overflow += ts.endpoint_overflow.load(Ordering::Relaxed);
        self.write_events(ts.tid);
        if let Some(buf) = self.bufs.remove(&ts.tid)
            && buf.started
        {
            self.record(&ProcessRecord::ThreadEnd {
                tid: ts.tid,
                events: buf.written,
            });
        }
        ts.retired.store(true, Ordering::Release);
        ts.release_memory();
    }

    fn snapshot(&mut self) -> Snapshot {
        let mut sums: HashMap<(u32, u8), OpCount> = self.totals.retired.clone();
        let mut ring_full = self.totals.retired_ring_full;
        let mut overflow = self.totals.retired_overflow;
        let mut threads = 0u32;
        thread::for_each_thread(|ts| {
            if ts.retired.load(Ordering::Acquire) {
                return;
            }
            threads += 1;
            ring_full += ts.ring_full.load(Ordering::Relaxed);
            overflow += ts.endpoint_overflow.load(Ordering::Relaxed);
            ts.for_each_counter(|ep, op, s| add_slot(sums.entry((ep, op)), ep, op, s));
        });
        let mut counts: Vec<OpCount> = sums.into_values().collect();
        counts.sort_by_key(|c| (c.ep, c.op));
        // The layers used: those noted on the control path and those of every counted operation.
        let layers_used = counts
            .iter()
            .filter_map(|c| Op::from_u8(c.op))
            .fold(config::used(), |m, op| m | op.layer().bit());
        let mut drops = self.drops;
        drops.ring_full = ring_full;
        drops.endpoint_overflow = overflow;
        drops.unattributed_ops = registry::UNATTRIBUTED.load(Ordering::Relaxed);
        drops.hook_failures = crate::runtime::drops::HOOK_FAILURES.load(Ordering::Relaxed);
        drops.coalesced_doorbells =
            crate::runtime::drops::COALESCED_DOORBELLS.load(Ordering::Relaxed);
        drops.unparsable_wqes = crate::runtime::drops::UNPARSABLE_WQES.load(Ordering::Relaxed);
        let s = Snapshot {
            at_ns: clock::real_ns(),
            seq: self.seq,
            counts,
            drops,
            events: self.events_total,
            threads,
            layers_used,
        };
        self.seq += 1;
        s
    }

    fn publish_definitions(&mut self) {
        let generation = registry::IDENTITY_GEN.load(Ordering::Acquire);
        if generation != self.identity_gen {
            self.identity_gen = generation;
            self.identity.own_addr_hashes = registry::own_addrs();
            let rec = ProcessRecord::Identity(self.identity.clone());
            self.record(&rec);
            if let Some(s) = self.server.as_mut() {
                s.broadcast(&Frame::Identity(self.identity.clone()));
                s.set_identity(self.identity.clone());
            }
        }
        let defs = registry::defs_since(self.defs_sent);
        if !defs.is_empty() {
            self.defs_sent += defs.len();
            for d in &defs {
                self.record(&ProcessRecord::Endpoint(d.clone()));
            }
            if let Some(s) = self.server.as_mut() {
                s.broadcast(&Frame::Endpoints(defs));
            }
        }
        let ups = registry::updates_since(self.updates_sent);
        if !ups.is_empty() {
            self.updates_sent += ups.len();
            for u in &ups {
                self.record(&ProcessRecord::EndpointUpdate(u.clone()));
            }
            if let Some(s) = self.server.as_mut() {
                s.broadcast(&Frame::Updates(ups));
            }
        }
        for m in registry::take_mrs() {
            self.record(&ProcessRecord::MemRegion(m));
        }
    }

    fn interval(&mut self) {
        let c = clock::sample();
        self.record(&ProcessRecord::Clock(c));
        let snap = self.snapshot();
        self.record(&ProcessRecord::Snapshot(snap.clone()));
        let queues = QUEUES.get().and_then(|f| f(&snap));
        if let Some(q) = &queues
            && queues_worth_recording(q, &self.queues_recorded)
        {
            self.queues_recorded = q.queues.iter().map(queue_key).collect();
            self.record(&ProcessRecord::Queues(q.clone()));
        }
        if let Some(s) = self.server.as_mut() {
            s.broadcast(&Frame::Clock(c));
            if !self.live_events.is_empty() {
                s.broadcast(&Frame::Events(std::mem::take(&mut self.live_events)));
            }
            s.broadcast(&Frame::Snapshot(snap.clone()));
            s.set_last_snapshot(snap);
            if let Some(q) = queues {
                s.broadcast(&Frame::Queues(q));
            }
            if let Some(f) = LIVE_FRAME.get() {
                let mut frames = Vec::new();
                f(&mut frames);
                for frame in &frames {
                    s.broadcast(frame);
                }
            }
        }
        self.live_events.clear();
    }
}

fn run() {
    // The generation first, then the addresses: one added in between bumps it and is published.
    let identity_gen = registry::IDENTITY_GEN.load(Ordering::Acquire);
    let mut identity = identity();
    identity.own_addr_hashes = registry::own_addrs();
    let paths = config::paths();
    // The identity goes in with the file's header, in one write (a kill cannot part them).
    let first = ProcessRecord::Identity(identity.clone());
    let writer = match &paths.record {
        Some(root) => {
            match ProcessWriter::create_with_first(root, &identity.host, identity.pid, Some(&first))
            {
                Ok(w) => Some(w),
                Err(e) => {
                    eprintln!(
                        "sigmatop: cannot record to {}: {e}; tracing continues without a record (pick a writable directory with --record or SIGMATOP_RECORD)",
                        root.display()
                    );
                    None
                }
            }
        }
        None => None,
    };
    let server = match Server::bind(&paths.socket_dir, &identity) {
        Ok(s) => Some(s),
        Err(e) => {
            eprintln!("sigmatop: live view disabled: {e}");
            None
        }
    };
    let mut c = Collector {
        identity_gen,
        identity,
        writer,
        record_root: paths.record.clone(),
        server,
        totals: Totals::default(),
        bufs: HashMap::new(),
        scratch: Vec::with_capacity(thread::RING_CAP),
        defs_sent: 0,
        updates_sent: 0,
        live_events: Vec::new(),
        live_counter: 0,
        events_total: 0,
        drops: DropCounters::default(),
        seq: 0,
        queues_recorded: Vec::new(),
    };
    c.record(&ProcessRecord::Clock(clock::sample()));
    let interval = Duration::from_millis(config::interval_ms() as u64);
    let mut last_interval = Instant::now();
    let mut last_flush = Instant::now();
    loop {
        PROGRESS.fetch_add(1, Ordering::Release);
        let stopping = STOP.load(Ordering::Acquire);
        c.publish_definitions();
        let flush = stopping || last_flush.elapsed() >= FLUSH_EVERY;
        let fullest = c.drain(flush);
        if let Some(tick) = QUEUE_TICK.get() {
            tick();
        }
        if flush {
            last_flush = Instant::now();
        }
        if stopping || last_interval.elapsed() >= interval {
            last_interval = Instant::now();
            c.interval();
            if config::fault() == config::Fault::Collector {
                panic!("injected collector fault (SIGMATOP_TEST_FAULT=collector)");
            }
        }
        if let Some(s) = c.server.as_mut() {
            s.poll();
        }
        if stopping {
            break;
        }
        if fullest >= BUSY_RING {
            // A thread fills its ring faster than one tick drains it: drain again at once
            // instead of sleeping (the collector's CPU follows the event rate; idle, it ticks).
            std::thread::yield_now();
        } else {
            std::thread::sleep(TICK);
        }
    }
    // Final: every thread's remaining events, then the end marker.
    let tids: Vec<u32> = c.bufs.keys().copied().collect();
    for tid in tids {
        c.write_events(tid);
        if let Some(buf) = c.bufs.get(&tid) {
            let ev = ProcessRecord::ThreadEnd {
                tid,
                events: buf.written,
            };
            c.record(&ev);
        }
    }
    let snap = c.snapshot();
    if snap.drops.total_events_lost() > 0 {
        eprintln!(
            "sigmatop: {} events were not kept (ring full {}, record {}); the counters are exact",
            snap.drops.total_events_lost(),
            snap.drops.ring_full,
            snap.drops.record_lost
        );
    }
    let end = ProcessRecord::End {
        at_ns: clock::real_ns(),
        drops: snap.drops,
    };
    c.record(&end);
    if let Some(dir) = &config::paths().final_dir {
        let queues = QUEUES.get().and_then(|f| f(&snap));
        crate::runtime::final_state::write(dir, &c.identity, clock::sample(), &snap, queues);
    }
    if let Some(s) = c.server.as_mut() {
        s.broadcast(&Frame::Bye {
            at_ns: clock::real_ns(),
        });
        s.finish();
    }
}
