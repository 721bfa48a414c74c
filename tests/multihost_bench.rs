//! Multi-host benchmarks (issue 12, item 4; not run in CI; results in BENCHMARKS.md under
//! "Many hosts"):
//!
//! ```text
//! cargo build --release --workspace
//! cargo test --release --test multihost_bench --no-run
//! B=$(ls -t target/release/deps/multihost_bench-* | grep -v '\.d$' | head -1)
//! for t in merge_256_hosts_at_4hz merge_256_hosts_cpu_per_tick relay_bytes_per_process \
//!          serve_64_processes; do
//!   $B --ignored --nocapture --exact $t     # one process per test, so peak RSS is per test
//! done
//! ```
//!
//! 1. `merge_256_hosts_at_4hz`: a synthetic relay: a producer thread makes, every 250 ms, what
//!    256 hosts' traced processes send their relays for 8 processes × 64 QPs each (a clock
//!    sample, a snapshot of every QP's cumulative counters, 16 sampled events per process) and
//!    encodes it with the real relay's encoder at the `qp-every` the dashboard asks for that
//!    many counters (8; `SIGMATOP_BENCH_QP_EVERY` overrides it); the
//!    dashboard's own loop (`Dashboard::tick`, `draw`, `wait`) merges it through `relay::Merge`
//!    into the model and draws the Nodes view at 4 Hz, 200×60, into /dev/null, for 30 s
//!    (`SIGMATOP_BENCH_SECS`). CPU of the dashboard thread (RUSAGE_THREAD), peak RSS of the
//!    process, both sampled every 5 s.
//!    `merge_256_hosts_cpu_per_tick`: the same work without the clock, tick by tick (merge,
//!    build, draw timed apart; `SIGMATOP_BENCH_TICKS`, default 480 ticks = 120 s of data, past
//!    the 60 s the history keeps at least), so that a loaded machine slows it down without
//!    changing what it measures. With `SIGMATOP_BENCH_JITTER=1` (either test) every QP moves a
//!    different amount every tick (±50 %) instead of the same: the history's worst case.
//! 2. `relay_bytes_per_process`: a real `sigmatop relay` over a real traced ucx_perftest tag_bw
//!    pair (simple mode, default sampling), its stdout counted for 10 s.
//! 3. `serve_64_processes`: 64 fake traced processes speak the real wire protocol on Unix
//!    sockets (64 QPs each, a snapshot every 250 ms); a real `sigmatop serve` follows them; 20
//!    scrapes of /metrics are timed, and serve's peak RSS read from /proc.

mod common;

use common::{now_ns, rusage};

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, sync_channel};
use std::time::{Duration, Instant};

use ratatui::backend::CrosstermBackend;
use ratatui::layout::Rect;
use ratatui::{Terminal, TerminalOptions, Viewport};
use sigmatop::agg::{Model, ProcKey};
use sigmatop::cli::dashboard::{Dashboard, Source};
use sigmatop::event::{
    ClockSample, EndpointDef, EndpointKind, Event, Identity, Layer, Op, OpCount, Peer, Snapshot,
};
use sigmatop::live::LiveSink;
use sigmatop::relay::{Merge, RelayEncoder, RelayHello, qp_every_for};
use sigmatop::wire::{self, Frame};
use sigmatop_tui::{App, Tab, Theme};

const HOSTS: u32 = 256;
const PROCS: u32 = 8;
const QPS: u32 = 64;

/// Resident set now (KiB), from /proc/self/statm.
fn rss_now_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = s
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    pages * 4
}

fn identity(host: u32, p: u32, start: u64) -> Identity {
    let g = host * PROCS + p;
    Identity {
        host: format!("node{host:03}"),
        pid: 10_000 + p,
        rank: Some(g),
        mode: 1,
        layers: Layer::Ibverbs.bit(),
        sample: 64,
        own_addr_hashes: vec![u64::from(g) + 1],
        start_ns: start,
        exe: "synthetic".into(),
        ..Default::default()
    }
}

/// The endpoints of process `p` of `host`: QP q talks to the process q ranks further on, so
/// most traffic crosses hosts.
fn endpoints(host: u32, p: u32, start: u64) -> Vec<EndpointDef> {
    let g = host * PROCS + p;
    let all = HOSTS * PROCS;
    (0..QPS)
        .map(|q| EndpointDef {
            id: q + 1,
            layer: Layer::Ibverbs,
            kind: EndpointKind::VerbsQp,
            label: format!("qp {}", 0x100 + q),
            transport: "RC".into(),
            peer: Peer {
                addr_hash: u64::from((g + q * 9 + 1) % all) + 1,
                qpn: Some(0x200 + q),
                ..Default::default()
            },
            qpn: Some(0x100 + q),
            gpu: None,
            created_ns: start,
        })
        .collect()
}

/// Feeds what 256 relays send, one tick (250 ms) at a time, into `Merge`.
struct SyntheticRelays {
    rx: Receiver<Vec<Vec<u8>>>,
    merge: Merge,
}

impl Source for SyntheticRelays {
    fn poll(&mut self, model: &mut Model) -> usize {
        let mut n = 0;
        while let Ok(tick) = self.rx.try_recv() {
            for (h, bytes) in tick.iter().enumerate() {
                n += self.merge.push(h, bytes, model).expect("a valid stream");
            }
        }
        n
    }
    fn label(&self) -> String {
        "bench".into()
    }
}

fn proc_key(h: u32, p: u32) -> ProcKey {
    ProcKey {
        host: format!("node{h:03}"),
        pid: 10_000 + p,
        start_ns: 0,
    }
}

/// The 256 relays: each host's frames go through the real relay's encoder (`RelayEncoder`, the
/// `LiveSink` that `sigmatop relay` feeds from the sockets), so the stream is what a real relay
/// sends: at `qp_every` N > 1 every process's totals every tick and its whole snapshot every
/// Nth tick, phase-shifted. N is what the dashboard asks of its relays for this many counters
/// (`relay::qp_every_for`; a real dashboard asks after its first second, at N = 1), unless
/// `SIGMATOP_BENCH_QP_EVERY` says otherwise (1: every snapshot whole, as relay protocol 1 did).
struct Relays {
    enc: Vec<RelayEncoder>,
    /// Thread CPU seconds spent in the encoders: the relay's own work.
    cpu_s: f64,
}

fn qp_every() -> u32 {
    std::env::var("SIGMATOP_BENCH_QP_EVERY")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| qp_every_for((HOSTS * PROCS * QPS * 2) as usize))
}

impl Relays {
    fn new(qp_every: u32) -> Relays {
        Relays {
            enc: (0..HOSTS)
                .map(|_| {
                    let mut e = RelayEncoder::default();
                    e.set_qp_every(qp_every);
                    e
                })
                .collect(),
            cpu_s: 0.0,
        }
    }

    /// What each relay sends first: its hello, and each process's hello and endpoints.
    fn first_tick(&mut self, start: u64) -> Vec<Vec<u8>> {
        (0..HOSTS)
            .map(|h| {
                let e = &mut self.enc[h as usize];
                e.out
                    .extend_from_slice(RelayHello::ours(&format!("node{h:03}")).line().as_bytes());
                for p in 0..PROCS {
                    let k = proc_key(h, p);
                    e.frame(&k, Frame::hello(identity(h, p, start)));
                    e.frame(&k, Frame::Endpoints(endpoints(h, p, start)));
                }
                std::mem::take(&mut e.out)
            })
            .collect()
    }

    /// What each relay sends for tick `tick` (taken at `at`): per process a clock sample, a
    /// snapshot of every QP's cumulative counters and 16 sampled events, as the process sends
    /// them to the relay.
    fn tick(&mut self, tick: u64, at: u64, counters: &mut Counters) -> Vec<Vec<u8>> {
        (0..HOSTS)
            .map(|h| {
                let e = &mut self.enc[h as usize];
                for p in 0..PROCS {
                    let k = proc_key(h, p);
                    let counts = (0..QPS)
                        .flat_map(|q| {
                            let (ops, tx, rx) = counters.advance(tick, h, p, q);
                            [
                                OpCount {
                                    ep: q + 1,
                                    op: Op::VerbsWrite as u8,
                                    ops,
                                    bytes: tx,
                                    errors: 0,
                                    ..OpCount::default()
                                },
                                OpCount {
                                    ep: q + 1,
                                    op: Op::VerbsRecv as u8,
                                    ops,
                                    bytes: rx,
                                    errors: 0,
                                    ..OpCount::default()
                                },
                            ]
                        })
                        .collect();
                    let snapshot = Snapshot {
                        at_ns: at,
                        seq: tick,
                        counts,
                        ..Default::default()
                    };
                    let evs = (0..16u32)
                        .map(|i| Event {
                            tsc: at + u64::from(i) * 1000,
                            tid: 1,
                            ep: 1 + i % QPS,
                            op: Op::VerbsWrite as u8,
                            bytes: 4096,
                            ..Default::default()
                        })
                        .collect();
                    let c0 = thread_cpu();
                    e.frame(
                        &k,
                        Frame::Clock(ClockSample {
                            tsc: at,
                            mono_ns: at,
                            real_ns: at,
                        }),
                    );
                    e.frame(&k, Frame::Snapshot(snapshot));
                    e.frame(&k, Frame::Events(evs));
                    self.cpu_s += thread_cpu() - c0;
                }
                std::mem::take(&mut e.out)
            })
            .collect()
    }
}

/// Every QP's cumulative counters: (ops, bytes written, bytes received), by host, process, QP.
struct Counters {
    c: Vec<(u64, u64, u64)>,
    /// Each QP moves a different amount every tick (±50 % around its rate) instead of the same.
    jitter: bool,
}

impl Counters {
    fn new() -> Counters {
        Counters {
            c: vec![(0, 0, 0); (HOSTS * PROCS * QPS) as usize],
            jitter: std::env::var("SIGMATOP_BENCH_JITTER").is_ok_and(|v| v == "1"),
        }
    }

    /// One tick more of QP `q` of process `p` of `host`: its counters now.
    fn advance(&mut self, tick: u64, h: u32, p: u32, q: u32) -> (u64, u64, u64) {
        let i = ((h * PROCS + p) * QPS + q) as usize;
        let rate = 1_000_000 * u64::from(1 + (h + p * 7 + q) % 5);
        let ops = 10 * u64::from(1 + q % 3);
        let (d_ops, d_tx, d_rx) = if self.jitter {
            let mut x = (tick << 32 | i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
            x ^= x >> 29;
            x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
            x ^= x >> 32;
            let u = 512 + x % 1024; // 0.5 .. 1.5, in 1024ths
            (ops * u / 1024, rate / 4 * u / 1024, rate / 8 * u / 1024)
        } else {
            (ops, rate / 4, rate / 8)
        };
        let c = &mut self.c[i];
        *c = (c.0 + d_ops, c.1 + d_tx, c.2 + d_rx);
        *c
    }
}

/// The producer: hellos and endpoints first, then every 250 ms one snapshot per process.
fn produce(tx: std::sync::mpsc::SyncSender<Vec<Vec<u8>>>, stop: Arc<AtomicBool>) {
    let mut relays = Relays::new(qp_every());
    if tx.send(relays.first_tick(now_ns())).is_err() {
        return;
    }
    let t0 = Instant::now();
    let mut tick = 0u64;
    let mut counters = Counters::new();
    while !stop.load(Ordering::Relaxed) {
        tick += 1;
        let due = t0 + Duration::from_millis(250 * tick);
        if let Some(w) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(w);
        }
        if tx.send(relays.tick(tick, now_ns(), &mut counters)).is_err() {
            return;
        }
    }
}

/// Thread CPU seconds (CLOCK_THREAD_CPUTIME_ID).
/// The dashboard of 256 hosts on the Nodes tab, fed by `rx`, and a 200×60 terminal that draws
/// into /dev/null.
fn nodes_dashboard(rx: Receiver<Vec<Vec<u8>>>) -> (Dashboard<SyntheticRelays>, NullTerminal) {
    let names: Vec<String> = (0..HOSTS).map(|h| format!("node{h:03}")).collect();
    let mut model = Model::new();
    let merge = Merge::new(&names, &mut model);
    let mut app = App::new(Theme::dark());
    app.tab = Tab::Nodes;
    let mut dash = Dashboard::new(SyntheticRelays { rx, merge }, app);
    dash.model = model;
    let null = std::fs::File::create("/dev/null").expect("/dev/null");
    let term = Terminal::with_options(
        CrosstermBackend::new(std::io::BufWriter::with_capacity(64 * 1024, null)),
        TerminalOptions {
            viewport: Viewport::Fixed(Rect::new(0, 0, 200, 60)),
        },
    )
    .expect("terminal");
    (dash, term)
}

type NullTerminal = Terminal<CrosstermBackend<std::io::BufWriter<std::fs::File>>>;

fn thread_cpu() -> f64 {
    // SAFETY: timespec is plain old data, filled by clock_gettime.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: the pointer is valid for the call.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

/// The work of `merge_256_hosts_at_4hz` per 250 ms tick, without its clock: each tick of what
/// the 256 relays send is encoded first (not measured), then the dashboard's source merges it
/// into the model, the dashboard builds the Nodes view and draws it (each measured, thread CPU).
/// The snapshots are stamped 250 ms apart from an hour ahead (the view time is their newest),
/// so that `SIGMATOP_BENCH_TICKS` ticks (default 480: 120 s of data) take the history past its
/// 60 s floor whatever the machine's load. Prints the mean per tick of every 40 ticks, as % of
/// a core at 4 Hz, and the RSS.
#[test]
#[ignore]
fn merge_256_hosts_cpu_per_tick() {
    let ticks: u64 = std::env::var("SIGMATOP_BENCH_TICKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(480);
    let start = now_ns() + 3_600_000_000_000;
    let (tx, rx) = sync_channel(1);
    let (mut dash, mut term) = nodes_dashboard(rx);
    let n = qp_every();
    let mut relays = Relays::new(n);
    tx.send(relays.first_tick(start)).expect("send");
    dash.source.poll(&mut dash.model);
    assert_eq!(dash.model.processes.len(), (HOSTS * PROCS) as usize);
    let (mut merge_s, mut build_s, mut draw_s) = (0.0, 0.0, 0.0);
    let mut counters = Counters::new();
    let mut relay_bytes = 0usize;
    println!("  qp-every {n}: every QP's counters every {} ms", 250 * n);
    for tick in 1..=ticks {
        let bytes = relays.tick(tick, start + tick * 250_000_000, &mut counters);
        relay_bytes += bytes.iter().map(Vec::len).sum::<usize>();
        tx.send(bytes).expect("send");
        let c0 = thread_cpu();
        dash.source.poll(&mut dash.model);
        let c1 = thread_cpu();
        dash.rebuild();
        let c2 = thread_cpu();
        dash.draw(&mut term).expect("draw");
        let c3 = thread_cpu();
        merge_s += c1 - c0;
        build_s += c2 - c1;
        draw_s += c3 - c2;
        if tick % 40 == 0 {
            let ms = |s: f64| s / 40.0 * 1e3;
            println!(
                "  ticks {:>3}-{tick:>3} ({:>3} s of data): per tick merge {:.2} ms, build {:.2} ms, \
                 draw {:.2} ms = {:.1} % of a core at 4 Hz; RSS {:.0} MB",
                tick - 39,
                tick / 4,
                ms(merge_s),
                ms(build_s),
                ms(draw_s),
                (merge_s + build_s + draw_s) / 40.0 * 4.0 * 100.0,
                rss_now_kib() as f64 / 1024.0
            );
            (merge_s, build_s, draw_s) = (0.0, 0.0, 0.0);
        }
    }
    let kept: usize = dash.model.processes.values().map(|p| p.history.len()).sum();
    let bytes: usize = dash
        .model
        .processes
        .values()
        .map(|p| p.history.bytes())
        .sum();
    let procs = f64::from(HOSTS * PROCS);
    println!(
        "MERGE PER TICK {HOSTS} hosts x {PROCS} processes x {QPS} QPs, qp-every {n}, {ticks} \
         ticks: history {kept} snapshots in {:.1} MB ({:.0} per process); relay stream {:.0} \
         bytes per process per second; relay encoder {:.1} us CPU per process per tick \
         ({:.4} % of a core per process at 4 Hz)",
        bytes as f64 / 1e6,
        kept as f64 / procs,
        relay_bytes as f64 / procs / (ticks as f64 / 4.0),
        relays.cpu_s / ticks as f64 / procs * 1e6,
        relays.cpu_s / ticks as f64 / procs * 4.0 * 100.0
    );
}

#[test]
#[ignore]
fn merge_256_hosts_at_4hz() {
    let (tx, rx) = sync_channel(4);
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let producer = std::thread::spawn(move || produce(tx, stop2));
    let (mut dash, mut term) = nodes_dashboard(rx);
    let secs = std::env::var("SIGMATOP_BENCH_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30u64);
    // The first tick (hellos, endpoints) is set up before the clock starts.
    common::wait_until(
        "every process in the dashboard's model",
        Duration::from_secs(120),
        || {
            dash.tick();
            match dash.model.processes.len() {
                n if n >= (HOSTS * PROCS) as usize => Ok(()),
                n => Err(format!("{n} of {}", HOSTS * PROCS)),
            }
        },
    );
    let (cpu0, _) = rusage(libc::RUSAGE_THREAD);
    let t0 = Instant::now();
    let mut frames = 0u32;
    let mut next_report = 5u64;
    while t0.elapsed() < Duration::from_secs(secs) {
        if dash.tick() {
            dash.draw(&mut term).expect("draw");
            frames += 1;
        }
        if t0.elapsed().as_secs() >= next_report {
            let (cpu, _) = rusage(libc::RUSAGE_THREAD);
            println!(
                "  {next_report:>3} s: dashboard thread {:.1} % of a core so far, RSS {:.0} MB",
                (cpu - cpu0) / t0.elapsed().as_secs_f64() * 100.0,
                rss_now_kib() as f64 / 1024.0
            );
            next_report += 5;
        }
        std::thread::sleep(dash.wait());
    }
    let wall = t0.elapsed().as_secs_f64();
    let (cpu1, _) = rusage(libc::RUSAGE_THREAD);
    let (_, maxrss) = rusage(libc::RUSAGE_SELF);
    stop.store(true, Ordering::Relaxed);
    drop(dash);
    let _ = producer.join();
    println!(
        "MERGE {HOSTS} hosts x {PROCS} processes x {QPS} QPs: {frames} frames in {wall:.1} s \
         ({:.2} Hz), dashboard thread {:.1} % of one core, peak RSS {:.0} MB",
        frames as f64 / wall,
        (cpu1 - cpu0) / wall * 100.0,
        maxrss as f64 / 1024.0
    );
}

/// A traced ucx_perftest pair on loopback and a real relay over its sockets: the relay's bytes
/// per second per traced process.
#[test]
#[ignore]
fn relay_bytes_per_process() {
    let dir = common::scratch("bench-relay");
    let sock = dir.join("sock");
    std::fs::create_dir_all(&sock).expect("sock");
    // The preload serves only from a directory nobody else can enter.
    std::fs::set_permissions(&sock, std::os::unix::fs::PermissionsExt::from_mode(0o700))
        .expect("chmod");
    let traced = |c: &mut Command| {
        c.env("LD_PRELOAD", common::preload())
            .env("SIGMATOP_SOCKET_DIR", &sock)
            .env("UCX_TLS", "tcp");
    };
    let (server, port) = common::ucx_perftest_server("tcp", traced);
    let port = port.to_string();
    let mut client = Command::new(common::require("ucx_perftest"));
    client.args(["127.0.0.1", "-p", &port, "-t", "tag_bw", "-n", "2000000000"]);
    client.args(["-s", "4096", "-w", "1"]);
    traced(&mut client);
    let mut client = common::spawn(&mut client);
    let _client_out = common::PipeReader::new(client.stdout.take().expect("stdout"));
    // Both traced processes serve their sockets before the relay starts.
    let sockets = [server.id(), client.id()]
        .map(|pid| sock.join(format!("{}-{pid}.sock", sigmatop::live::socket_host())));
    common::wait_until(
        "both traced processes' sockets",
        Duration::from_secs(60),
        || match sockets.iter().find(|s| UnixStream::connect(s).is_err()) {
            None => Ok(()),
            Some(s) => Err(format!("{} does not accept", s.display())),
        },
    );
    let mut relay = common::spawn(
        Command::new(common::sigmatop_bin())
            .args(["relay", "--socket-dir"])
            .arg(&sock),
    );
    let mut out = relay.stdout.take().expect("stdout");
    // Skip the start (hellos, endpoints): count 10 s of the steady stream.
    let mut buf = vec![0u8; 1 << 16];
    let warm = Instant::now();
    while warm.elapsed() < Duration::from_secs(2) {
        let _ = out.read(&mut buf);
    }
    let t0 = Instant::now();
    let mut bytes = 0u64;
    while t0.elapsed() < Duration::from_secs(10) {
        bytes += out.read(&mut buf).expect("read") as u64;
    }
    let secs = t0.elapsed().as_secs_f64();
    drop((relay, client, server));
    assert!(
        bytes > 10_000,
        "the relay found the traced processes ({bytes} bytes)"
    );
    println!(
        "RELAY: {bytes} bytes in {secs:.1} s for 2 traced processes (ucx_perftest tag_bw, simple \
         mode, SIGMATOP_SAMPLE=64): {:.0} bytes/s per process",
        bytes as f64 / secs / 2.0
    );
}

/// 64 fake traced processes (the real wire protocol, 64 QPs each, a snapshot every 250 ms) and a
/// real `sigmatop serve`: scrape time and serve's peak RSS.
#[test]
#[ignore]
fn serve_64_processes() {
    let dir = common::scratch("bench-serve");
    let sock = dir.join("sock");
    std::fs::create_dir_all(&sock).expect("sock");
    let stop = Arc::new(AtomicBool::new(false));
    let mut producers = Vec::new();
    for p in 0..64u32 {
        let listener =
            UnixListener::bind(sock.join(format!("benchhost-{}.sock", 10_000 + p))).expect("bind");
        let stop = stop.clone();
        producers.push(std::thread::spawn(move || {
            let Ok((mut conn, _)) = listener.accept() else {
                return;
            };
            let start = now_ns();
            let mut id = identity(p / 8, p % 8, start);
            id.host = "benchhost".into();
            id.pid = 10_000 + p;
            let mut buf = Vec::new();
            wire::encode(&Frame::hello(id), &mut buf).expect("encode");
            wire::encode(&Frame::Endpoints(endpoints(p / 8, p % 8, start)), &mut buf)
                .expect("encode");
            let mut tick = 0u64;
            while !stop.load(Ordering::Relaxed) {
                tick += 1;
                let counts = (0..QPS)
                    .map(|q| OpCount {
                        ep: q + 1,
                        op: Op::VerbsWrite as u8,
                        ops: tick * 10,
                        bytes: tick * 1_000_000,
                        errors: 0,
                        ..OpCount::default()
                    })
                    .collect();
                wire::encode(
                    &Frame::Snapshot(Snapshot {
                        at_ns: now_ns(),
                        seq: tick,
                        counts,
                        ..Default::default()
                    }),
                    &mut buf,
                )
                .expect("encode");
                if conn.write_all(&buf).is_err() {
                    return;
                }
                buf.clear();
                std::thread::sleep(Duration::from_millis(250));
            }
        }));
    }
    let (serve, port) = common::start_server(
        |port| {
            let mut c = Command::new(common::sigmatop_bin());
            c.args([
                "serve",
                "--qp-metrics",
                "--listen",
                &format!("127.0.0.1:{port}"),
            ])
            .arg("--socket-dir")
            .arg(&sock);
            c
        },
        Duration::from_secs(10),
    );
    let get = || -> String {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
        s.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
            .expect("request");
        let mut body = String::new();
        let _ = s.read_to_string(&mut body);
        body
    };
    // Scrapes are timed once serve holds all 64 processes.
    common::wait_until(
        "serve to hold all 64 processes",
        Duration::from_secs(60),
        || {
            let body = get();
            match (0..64u32).find(|p| !body.contains(&format!("pid=\"{}\"", 10_000 + p))) {
                None => Ok(()),
                Some(p) => Err(format!("no pid=\"{}\" in the scrape", 10_000 + p)),
            }
        },
    );
    let scrape = || -> (Duration, usize) {
        let t = Instant::now();
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
        s.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
            .expect("request");
        let mut body = Vec::new();
        s.read_to_end(&mut body).expect("response");
        (t.elapsed(), body.len())
    };
    let mut times = Vec::new();
    let mut size = 0;
    for _ in 0..20 {
        let (t, n) = scrape();
        times.push(t);
        size = n;
        std::thread::sleep(Duration::from_millis(250));
    }
    times.sort();
    let status =
        std::fs::read_to_string(format!("/proc/{}/status", serve.id())).unwrap_or_default();
    let hwm = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .unwrap_or("VmHWM: ?")
        .to_string();
    stop.store(true, Ordering::Relaxed);
    drop(serve);
    for p in producers {
        let _ = p.join();
    }
    println!(
        "SERVE 64 processes x {QPS} QPs (--qp-metrics): response {size} bytes, scrape median {:.1} ms, \
         max {:.1} ms; serve {hwm}",
        times[times.len() / 2].as_secs_f64() * 1e3,
        times[times.len() - 1].as_secs_f64() * 1e3
    );
}
