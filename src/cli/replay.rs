//! `sigmatop replay DIR` and `sigmatop demo`: a recording drives the same `Model` as a live
//! session, by time. Snapshots, endpoint updates and events are applied as their timestamps pass on
//! a virtual clock that runs at the chosen speed and stops on pause. Event files are streamed a chunk
//! at a time (never loaded whole).
//!
//! `sigmatop demo` replays the bundled recording `fixtures/nccl/moe_np4/rec` (a real MoE
//! dispatch/combine over NCCL, 4 ranks on an H200 over the software NIC; `demo mpi`:
//! `fixtures/demo-moe`, a real 4-rank MPI run over UCX; `demo gpu`: NVSHMEM), embedded in the
//! binary and unpacked into a private temporary directory that is removed at exit.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::dashboard::{self, Source};
use super::view_model::{ClockStyle, warning_text};
use super::{CliResult, DemoArgs, ReplayArgs, table};
use crate::agg::at::{AtOptions, ModelAt};
use crate::agg::warnings::{SUMMARY_RULES, WarningConfig, matrix_skew, warnings_of};
use crate::agg::{Model, ProcKey};
use crate::event::{Event, Snapshot, TscClock};
use crate::trace::reader::{ProcessRecording, ThreadEventReader};
use crate::wire::Frame;

/// Events applied to the model per process and poll, at most: the view keeps the latest
/// `agg::RECENT_EVENTS`, so older ones in the same poll are skipped (and counted).
const EVENTS_PER_POLL: usize = crate::agg::RECENT_EVENTS;
/// Replay speeds offered by `+` / `-`.
pub const SPEEDS: [f64; 9] = [0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 10.0, 30.0, 100.0];

struct ThreadFeed {
    reader: ThreadEventReader,
    /// Decoded events of the current block not yet applied, with their real-time stamps.
    pending: Vec<(u64, Event)>,
    pos: usize,
    done: bool,
}

struct ProcFeed {
    key: ProcKey,
    rec: ProcessRecording,
    clock: TscClock,
    started: bool,
    next_snapshot: usize,
    next_update: usize,
    next_queues: usize,
    threads: Vec<ThreadFeed>,
    ended: bool,
    /// Time after which the process is over: its clean end, else its last snapshot.
    end_ns: u64,
    /// Its NCCL profiler records (`nccl-<pid>.stn` beside its directory), by time, played
    /// through the tracker the preload runs live: the Collectives view of a replay is the one
    /// the live run had.
    nccl: Option<NcclFeed>,
}

struct NcclFeed {
    /// (CLOCK_REALTIME ns, record), by time.
    recs: Vec<(u64, crate::nccl::format::Rec)>,
    pos: usize,
    tracker: crate::nccl::live::Tracker,
    /// Every record played and the tracker told the record ended.
    done: bool,
}

/// The NCCL file of a process of a recording, if it has one; a problem reading it is said.
fn nccl_feed(
    pr: &ProcessRecording,
    clock: &TscClock,
    problems: &mut Vec<String>,
) -> Option<NcclFeed> {
    let path = pr
        .dir
        .parent()?
        .join(format!("nccl-{}.stn", pr.identity.pid));
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            problems.push(format!("{}: {e}", path.display()));
            return None;
        }
    };
    let d = crate::nccl::format::decode(&bytes);
    if let Some(p) = d.problem {
        problems.push(format!("{}: {p}", path.display()));
    }
    let mut recs: Vec<(u64, crate::nccl::format::Rec)> = d
        .recs
        .into_iter()
        .map(|r| (clock.to_real_ns(r.tsc()), r))
        .collect();
    recs.sort_by_key(|x| x.0);
    Some(NcclFeed {
        recs,
        pos: 0,
        tracker: crate::nccl::live::Tracker::new(),
        done: false,
    })
}

/// A recording played back through the model.
pub struct ReplaySource {
    procs: Vec<ProcFeed>,
    label: String,
    start_ns: u64,
    end_ns: u64,
    vnow: u64,
    speed: f64,
    playing: bool,
    last_real: Instant,
    problems: Vec<String>,
    /// Events read but not kept by the view (more than it shows arrived within one poll).
    pub events_skipped: u64,
    pub events_applied: u64,
    /// `sigmatop demo`: plays the recording again from its start, [`LOOP_HOLD`] after its end.
    looping: Option<Loop>,
}

/// How long a looping replay holds its last state before it starts again.
pub const LOOP_HOLD: Duration = Duration::from_secs(4);

/// A looping replay: what to open again, and how often it played.
#[derive(Clone, Debug)]
struct Loop {
    dirs: Vec<PathBuf>,
    lap: u32,
    ended_at: Option<Instant>,
}

impl ReplaySource {
    /// Opens a recording (one or more roots) for playback.
    pub fn open(dirs: &[PathBuf], label: &str, speed: f64) -> Result<ReplaySource, String> {
        Self::open_run(dirs, None, label, speed)
    }

    /// Opens run `run` (1-based; None: the only run) of a recording for playback.
    pub fn open_run(
        dirs: &[PathBuf],
        run: Option<usize>,
        label: &str,
        speed: f64,
    ) -> Result<ReplaySource, String> {
        let rec = super::runs::open_one(dirs, run)?;
        if rec.processes.is_empty() {
            let why = rec
                .problems
                .first()
                .map(|p| p.to_string())
                .unwrap_or_else(|| "no process could be read".into());
            return Err(format!("nothing to replay: {why}"));
        }
        let mut problems: Vec<String> = rec.problems.iter().map(|p| p.to_string()).collect();
        let mut procs = Vec::new();
        for pr in rec.processes {
            let mut threads = Vec::new();
            for (tid, path) in pr.thread_files() {
                match ThreadEventReader::open(&path, tid) {
                    Ok(reader) => threads.push(ThreadFeed {
                        reader,
                        pending: Vec::new(),
                        pos: 0,
                        done: false,
                    }),
                    Err(p) => problems.push(p.to_string()),
                }
            }
            let last_snap = pr.snapshots.last().map_or(0, |s| s.at_ns);
            let end_ns = pr.end.map_or(last_snap, |(at, _)| at.max(last_snap));
            let clock = pr.clock();
            let nccl = nccl_feed(&pr, &clock, &mut problems);
            procs.push(ProcFeed {
                key: ProcKey::of(&pr.identity),
                nccl,
                clock,
                rec: pr,
                started: false,
                next_snapshot: 0,
                next_update: 0,
                next_queues: 0,
                threads,
                ended: false,
                end_ns,
            });
        }
        let start_ns = procs
            .iter()
            .map(|p| {
                let first = p.rec.snapshots.first().map_or(u64::MAX, |s| s.at_ns);
                match p.rec.identity.start_ns {
                    0 => first,
                    s => s.min(first),
                }
            })
            .min()
            .unwrap_or(0);
        let end_ns = procs.iter().map(|p| p.end_ns).max().unwrap_or(start_ns);
        let end_ns = end_ns.max(start_ns);
        Ok(ReplaySource {
            procs,
            label: label.to_string(),
            start_ns,
            end_ns,
            // Speed 0: no playback, the whole recording at once.
            vnow: if speed == 0.0 { end_ns } else { start_ns },
            speed: if speed.is_finite() && speed > 0.0 {
                speed
            } else {
                1.0
            },
            playing: true,
            last_real: Instant::now(),
            problems,
            events_skipped: 0,
            events_applied: 0,
            looping: None,
        })
    }

    /// Plays the recording again and again (`sigmatop demo`): [`LOOP_HOLD`] after its end, the
    /// model is emptied and the replay starts from the beginning.
    pub fn looping(mut self, dirs: &[PathBuf]) -> ReplaySource {
        self.looping = Some(Loop {
            dirs: dirs.to_vec(),
            lap: 1,
            ended_at: None,
        });
        self
    }

    /// Which pass of a looping replay this is (1: the first; 0: not looping).
    pub fn lap(&self) -> u32 {
        self.looping.as_ref().map_or(0, |l| l.lap)
    }

    /// A looping replay at its end for [`LOOP_HOLD`]: starts it again (`now`: the real time).
    fn restart_if_due(&mut self, model: &mut Model, now: Instant) -> bool {
        let Some(l) = self.looping.as_mut() else {
            return false;
        };
        if !(self.playing && self.vnow >= self.end_ns && self.procs.iter().all(|p| p.ended)) {
            l.ended_at = None;
            return false;
        }
        let ended = *l.ended_at.get_or_insert(now);
        if now.duration_since(ended) < LOOP_HOLD {
            return false;
        }
        let (dirs, lap) = (l.dirs.clone(), l.lap);
        match ReplaySource::open(&dirs, &self.label, self.speed) {
            Ok(mut fresh) => {
                fresh.looping = Some(Loop {
                    dirs,
                    lap: lap + 1,
                    ended_at: None,
                });
                fresh.events_applied = self.events_applied;
                fresh.events_skipped = self.events_skipped;
                *self = fresh;
                *model = Model::new();
                true
            }
            Err(e) => {
                // The recording went away under us: stop looping, keep what is shown.
                model
                    .messages
                    .push(format!("demo: cannot play it again: {e}"));
                self.looping = None;
                false
            }
        }
    }

    /// Length of the recording.
    pub fn duration_ns(&self) -> u64 {
        self.end_ns - self.start_ns
    }

    /// Virtual time now.
    pub fn now_ns(&self) -> u64 {
        self.vnow
    }

    pub fn finished(&self) -> bool {
        self.vnow >= self.end_ns && self.procs.iter().all(|p| p.ended)
    }

    /// Moves the virtual clock to `t` (forward only) and applies what it passed.
    pub fn advance_to(&mut self, model: &mut Model, t: u64) -> usize {
        self.vnow = self.vnow.max(t.min(self.end_ns));
        self.apply_due(model)
    }

    fn apply_due(&mut self, model: &mut Model) -> usize {
        for p in self.problems.drain(..) {
            model.messages.push(p);
        }
        let now = self.vnow;
        let replay_end = self.end_ns;
        let mut applied = 0;
        for f in &mut self.procs {
            if f.ended {
                continue;
            }
            let start = f.rec.identity.start_ns;
            let first = f.rec.snapshots.first().map_or(start, |s| s.at_ns);
            if !f.started {
                if now < start.min(first) {
                    continue;
                }
                f.started = true;
                model.apply(&f.key, Frame::hello(f.rec.identity.clone()));
                model.apply(&f.key, Frame::Endpoints(f.rec.endpoints.clone()));
                for c in &f.rec.clocks {
                    model.apply(&f.key, Frame::Clock(*c));
                }
                applied += 3;
            }
            let n_up = f.rec.updates[f.next_update..]
                .iter()
                .take_while(|u| u.at_ns <= now)
                .count();
            if n_up > 0 {
                let ups = f.rec.updates[f.next_update..f.next_update + n_up].to_vec();
                f.next_update += n_up;
                model.apply(&f.key, Frame::Updates(ups));
                applied += 1;
            }
            // Events before the snapshots that follow them.
            let mut batch: Vec<Event> = Vec::new();
            for th in &mut f.threads {
                loop {
                    if th.pos >= th.pending.len() {
                        if th.done {
                            break;
                        }
                        th.pending.clear();
                        th.pos = 0;
                        // An event stamped after its process ended (a timestamp the clock
                        // samples do not cover) is played at the end rather than never.
                        let end = f.end_ns;
                        match th.reader.next_block() {
                            Some(block) => th.pending.extend(
                                block
                                    .iter()
                                    .map(|e| (f.clock.to_real_ns(e.tsc).min(end), *e)),
                            ),
                            None => {
                                th.done = true;
                                if let Some(p) = th.reader.problem.take() {
                                    model.messages.push(p.to_string());
                                }
                                break;
                            }
                        }
                        continue;
                    }
                    let (at, e) = th.pending[th.pos];
                    if at > now {
                        break;
                    }
                    batch.push(e);
                    th.pos += 1;
                }
            }
            if !batch.is_empty() {
                if f.threads.len() > 1 {
                    batch.sort_by_key(|e| e.tsc);
                }
                let skip = batch.len().saturating_sub(EVENTS_PER_POLL);
                self.events_skipped += skip as u64;
                self.events_applied += (batch.len() - skip) as u64;
                batch.drain(..skip);
                model.apply(&f.key, Frame::Events(batch));
                applied += 1;
            }
            while let Some(s) = f.rec.snapshots.get_mut(f.next_snapshot) {
                if s.at_ns > now {
                    break;
                }
                // Played once: the model keeps it from here on, so move it rather than copy it
                // (its time and sequence number stay for anything that looks at the timeline).
                let kept = Snapshot {
                    at_ns: s.at_ns,
                    seq: s.seq,
                    ..Default::default()
                };
                model.apply(&f.key, Frame::Snapshot(std::mem::replace(s, kept)));
                f.next_snapshot += 1;
                applied += 1;
            }
            // The queues' state of the newest interval passed (each is whole: only the last
            // one due matters).
            let n_q = f.rec.queues[f.next_queues..]
                .iter()
                .take_while(|q| q.at_ns <= now)
                .count();
            if n_q > 0 {
                f.next_queues += n_q;
                let q = std::mem::take(&mut f.rec.queues[f.next_queues - 1]);
                model.apply(&f.key, Frame::Queues(q));
                applied += 1;
            }
            if f.next_snapshot >= f.rec.snapshots.len() && now >= f.end_ns {
                f.ended = true;
                match f.rec.end {
                    Some((at_ns, _)) => model.apply(&f.key, Frame::Bye { at_ns }),
                    None => model.source_closed(
                        &f.key,
                        Some("record cut: the process did not shut down cleanly".into()),
                    ),
                }
                applied += 1;
            }
        }
        // The NCCL collectives up to the view time (the newest snapshot played), not the
        // virtual clock: the dashboard shows every figure as of that snapshot, and the clock runs
        // ahead of it by a poll's worth of playback, so the Collectives view read differently at
        // the same moment at another speed (issue 39, item 7). A process whose record ended gives
        // all it has.
        let upto = model.latest_ns().min(now);
        for f in &mut self.procs {
            let Some(n) = f.nccl.as_mut() else { continue };
            let (limit, view) = if f.ended {
                (u64::MAX, now)
            } else {
                (upto, upto)
            };
            let due = n.recs[n.pos..].iter().take_while(|x| x.0 <= limit).count();
            if due > 0 {
                for (_, r) in &n.recs[n.pos..n.pos + due] {
                    n.tracker.push(r);
                }
                n.pos += due;
                model.apply(&f.key, Frame::Nccl(n.tracker.live()));
                model.apply(&f.key, Frame::NcclWaits(n.tracker.waits()));
                model.apply(&f.key, Frame::NcclCalls(n.tracker.calls()));
                applied += 1;
            }
            // Its last record is past by the grace: what waits only for it completes (the
            // live plugin's tracker sees its clock move on; a record's tracker does not).
            let last = n.recs.last().map_or(0, |x| x.0);
            if !n.done
                && n.pos == n.recs.len()
                && view
                    >= last
                        .saturating_add(crate::nccl::live::NO_OP_GRACE_NS)
                        .min(replay_end)
            {
                n.done = true;
                n.tracker.end();
                model.apply(&f.key, Frame::Nccl(n.tracker.live()));
                model.apply(&f.key, Frame::NcclWaits(n.tracker.waits()));
                model.apply(&f.key, Frame::NcclCalls(n.tracker.calls()));
                applied += 1;
            }
        }
        applied
    }
}

impl Source for ReplaySource {
    fn poll(&mut self, model: &mut Model) -> usize {
        let real = Instant::now();
        if self.playing {
            let dt = real.duration_since(self.last_real).as_nanos() as f64 * self.speed;
            self.vnow = self.vnow.saturating_add(dt as u64).min(self.end_ns);
        }
        self.last_real = real;
        if self.restart_if_due(model, real) {
            self.last_real = Instant::now();
        }
        self.apply_due(model)
    }

    fn set_paused(&mut self, paused: bool) {
        self.playing = !paused;
        self.last_real = Instant::now();
    }

    fn pauses_collection(&self) -> bool {
        true
    }

    fn poll_every(&self) -> Duration {
        super::dashboard::REFRESH
    }

    fn change_speed(&mut self, d: i32) {
        let i = SPEEDS
            .iter()
            .position(|s| *s >= self.speed - 1e-9)
            .unwrap_or(SPEEDS.len() - 1) as i32;
        self.speed = SPEEDS[(i + d).clamp(0, SPEEDS.len() as i32 - 1) as usize];
    }

    fn step_forward(&mut self, model: &mut Model, samples: i32) -> bool {
        // 250 ms per sample, the preload's default interval.
        let t = self.vnow + samples.max(0) as u64 * 250_000_000;
        self.advance_to(model, t);
        true
    }

    fn label(&self) -> String {
        self.label.clone()
    }

    fn collectives_hint(&self) -> Option<String> {
        (self.label == "demo").then(|| {
            "this recording's NCCL profiler events were left out for size (the verbs traffic is all here): `sigmatop demo collectives` replays an NCCL-shaped MoE exchange with them".to_string()
        })
    }

    fn clock_style(&self) -> ClockStyle {
        ClockStyle::SinceStart
    }

    fn note(&self) -> Option<String> {
        let pos = (self.vnow - self.start_ns) as f64 / 1e9;
        let len = self.duration_ns() as f64 / 1e9;
        if let Some(l) = &self.looping {
            let state = if !self.playing {
                format!("stopped at {}×", fmt_speed(self.speed))
            } else if self.finished() {
                "ended, plays again".to_string()
            } else {
                format!("playing {}×", fmt_speed(self.speed))
            };
            return Some(format!(
                "demo pass {} · {pos:.2}s of {len:.2}s · {state} · + - speed · space pauses · q quits",
                l.lap
            ));
        }
        if self.finished() {
            // Speed means nothing any more; what a person can still do is step back or leave.
            return Some(format!(
                "replay finished ({len:.1}s) · [ ] steps back · q quits"
            ));
        }
        if !self.playing {
            // A replay's figures are the processes' snapshots, 250 ms apart: `]` steps to the
            // next one (the record's events are not counters: their timeline is in
            // `export --perfetto`; docs/DESIGN.md, "Windows and averages").
            return Some(format!(
                "stopped at {}× · {pos:.1}/{len:.1}s · ] next snapshot (250 ms) · +/- speed",
                fmt_speed(self.speed)
            ));
        }
        Some(format!(
            "playing {}× · {pos:.1}/{len:.1}s · +/- speed",
            fmt_speed(self.speed)
        ))
    }
}

fn fmt_speed(s: f64) -> String {
    if s.fract() == 0.0 {
        format!("{s:.0}")
    } else {
        format!("{s}")
    }
}

/// Prints the report of a recording (what `--headless` shows).
fn print_summary(dirs: &[PathBuf], run: Option<usize>) -> CliResult {
    let rec = super::runs::open_one(dirs, run)?;
    let model = Model::from_recording(&rec);
    let r = model.report();
    let limit = table::width_for(std::io::stdout().is_terminal());
    print!("{}", table::render(&r, None, limit));
    print!(
        "{}",
        table::render_matrix("rank × rank", &r.rank_matrix, limit)
    );
    print!(
        "{}",
        table::render_matrix("node × node", &r.node_matrix, limit)
    );
    let at = ModelAt::new(&model, &AtOptions::default());
    // Skew is judged on the matrices printed above (their ◀ and these warnings are one figure:
    // the bytes of the whole record); the other rules on the record's end.
    let cfg = WarningConfig::default();
    let mut ws = warnings_of(&at, &cfg, SUMMARY_RULES);
    ws.extend(matrix_skew(&r.rank_matrix, &r.node_matrix, &cfg));
    ws.sort_by_key(|w| w.kind);
    let mut rest = String::new();
    for w in ws {
        rest.push_str(&format!(
            "warning: {}\n",
            super::view_model::skew_over(warning_text(&w), w.kind, "over the whole record")
        ));
    }
    // The NCCL collectives, as `report` prints them (issue 39, item 7: `report` had them and
    // `replay --headless` did not).
    if let Some(n) = crate::nccl::model::load(&rec) {
        rest.push_str(&crate::nccl::model::render(&n));
    }
    for p in &rec.problems {
        rest.push_str(&format!("skipped: {p}\n"));
    }
    print!("{}", table::fit_lines(&rest, limit));
    Ok(0)
}

fn interactive() -> bool {
    std::io::stdout().is_terminal() && std::io::stdin().is_terminal()
}

pub fn replay(args: &ReplayArgs) -> CliResult {
    let dirs = std::slice::from_ref(&args.dir);
    if args.headless {
        return print_summary(dirs, args.run);
    }
    if !interactive() {
        eprintln!(
            "sigmatop: not a terminal; printing the summary instead (use --headless to say so)"
        );
        return print_summary(dirs, args.run);
    }
    let src = ReplaySource::open_run(
        dirs,
        args.run,
        &format!("replay {}", args.dir.display()),
        args.speed,
    )?;
    dashboard::run(src, args.theme.as_deref())
}

mod embedded {
    include!(concat!(env!("OUT_DIR"), "/demo_files.rs"));
}

/// A private (0700) temporary directory, removed when dropped.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(prefix: &str) -> Result<TempDir, String> {
        use std::os::unix::fs::DirBuilderExt;
        let base = std::env::temp_dir();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        for i in 0..16u32 {
            let p = base.join(format!("{prefix}-{}-{nanos:x}-{i}", std::process::id()));
            match std::fs::DirBuilder::new().mode(0o700).create(&p) {
                Ok(()) => return Ok(TempDir(p)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(format!("cannot create {}: {e}", p.display())),
            }
        }
        Err(format!(
            "cannot create a private directory in {}",
            base.display()
        ))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Unpacks the bundled MPI demo recording (`demo mpi`) into a fresh private directory.
pub fn unpack_demo() -> Result<TempDir, String> {
    unpack(embedded::DEMO_FILES)
}

/// Writes bundled files into a private temporary directory.
fn unpack(files: &[(&str, &[u8])]) -> Result<TempDir, String> {
    use std::os::unix::fs::DirBuilderExt;
    let tmp = TempDir::new("sigmatop-demo")?;
    for (rel, bytes) in files {
        let rel = Path::new(rel);
        if rel.is_absolute()
            || rel
                .components()
                .any(|c| !matches!(c, std::path::Component::Normal(_)))
        {
            return Err(format!("bad bundled path {}", rel.display()));
        }
        let path = tmp.path().join(rel);
        if let Some(parent) = path.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(parent)
                .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
        }
        std::fs::write(&path, bytes)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(tmp)
}

/// `sigmatop demo`'s speed when none is given: a tenth of the recording's (the NCCL MoE run is
/// 1.3 s long: 13 s a pass).
pub const DEMO_SPEED: f64 = 0.1;

pub fn demo(args: &DemoArgs) -> CliResult {
    let (files, label) = match args.which.as_str() {
        "gpu" => (embedded::DEMO_GPU_FILES, "demo gpu"),
        "mpi" => (embedded::DEMO_FILES, "demo mpi"),
        "collectives" => (embedded::DEMO_COLL_FILES, "demo collectives"),
        _ => (embedded::DEMO_NCCL_FILES, "demo"),
    };
    if files.is_empty() {
        return Err("this sigmatop was built without the bundled demo recordings".into());
    }
    let tmp = unpack(files)?;
    let dirs = [tmp.path().to_path_buf()];
    if args.headless {
        return print_summary(&dirs, None);
    }
    if !interactive() {
        eprintln!(
            "sigmatop: not a terminal, so no dashboard: printing the demo's summary (`sigmatop demo --headless` does this on purpose)"
        );
        return print_summary(&dirs, None);
    }
    // Played again and again, and by default slower than it ran (the NCCL recording is 1.3 s of
    // program time): long enough to be seen.
    let speed = args.speed.unwrap_or(DEMO_SPEED);
    let src = ReplaySource::open(&dirs, label, speed)?;
    let src = if args.once || speed == 0.0 {
        src
    } else {
        src.looping(&dirs)
    };
    let r = dashboard::run(src, args.theme.as_deref());
    drop(tmp);
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demo_unpacks_privately_and_replays_by_time() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = unpack_demo().expect("unpack");
        let mode = std::fs::metadata(tmp.path())
            .expect("stat")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
        let dir = tmp.path().to_path_buf();
        let mut src = ReplaySource::open(std::slice::from_ref(&dir), "demo", 1.0).expect("open");
        let mut m = Model::new();
        let half = src.start_ns + src.duration_ns() / 2;
        src.advance_to(&mut m, half);
        assert_eq!(m.processes.len(), 4);
        let mid: usize = m.processes.values().map(|p| p.history.len()).sum();
        assert!(!src.finished());
        src.advance_to(&mut m, u64::MAX);
        assert!(src.finished());
        let all: usize = m.processes.values().map(|p| p.history.len()).sum();
        assert!(mid > 0 && mid < all, "{mid} < {all}");
        assert!(m.processes.values().all(|p| p.exited));
        assert!(src.events_applied > 0);
        // Same totals as loading the whole recording.
        let whole = Model::from_recording(
            &crate::trace::reader::Recording::open(std::slice::from_ref(&dir)).expect("open"),
        );
        assert_eq!(
            serde_json::to_string(&m.report().totals).ok(),
            serde_json::to_string(&whole.report().totals).ok()
        );
        // Speed 0 (documented in --help): no playback, the end at the first poll.
        let mut at_end = ReplaySource::open(std::slice::from_ref(&dir), "demo", 0.0).expect("open");
        let mut m0 = Model::new();
        at_end.poll(&mut m0);
        assert!(at_end.finished());
        assert_eq!(
            serde_json::to_string(&m0.report().totals).ok(),
            serde_json::to_string(&whole.report().totals).ok()
        );
        let p = tmp.path().to_path_buf();
        drop(tmp);
        assert!(!p.exists());
    }
}
