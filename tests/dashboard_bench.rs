//! Dashboard benchmarks (not run in CI; results go to BENCHMARKS.md under "Dashboard"):
//!
//! ```text
//! cargo test --release --test dashboard_bench --no-run
//! B=$(ls -t target/release/deps/dashboard_bench-* | grep -v '\.d$' | head -1)
//! for t in rows_4096_at_4hz events_1m_per_s build_view_4096_profile draw_4096_profile; do
//!   $B --ignored --nocapture --exact $t     # one process per test, so peak RSS is per test
//! done
//! ```
//!
//! 1. `rows_4096_at_4hz`: a synthetic recording of 64 processes × 64 QPs (4,096 QP rows; nothing
//!    unattributed, so no row for it) replayed at 1× through the real dashboard loop
//!    (`Dashboard::tick`, `draw` and `wait`: a recording is polled when a refresh is due, the view
//!    rebuilt when new data arrived and drawn at 4 Hz on the QPs tab, 200×60, into /dev/null
//!    through the crossterm backend, buffered like the dashboard's stdout) for 30 s: CPU of one
//!    core (getrusage), peak RSS, and the CPU of ticks and draws (CLOCK_THREAD_CPUTIME_ID).
//! 2. `events_1m_per_s`: a fake traced process serves the real wire protocol on a Unix socket and
//!    offers 1,000,000 sampled events/s (10,000 every 10 ms) plus a snapshot every 250 ms; the
//!    dashboard attaches through `LiveSource` and runs its loop for 10 s. The producer never blocks:
//!    whatever the socket does not take at once is counted as dropped. Its socket has the 4 MiB
//!    send buffer the preload's collector gives each live client (`SIGMATOP_BENCH_SNDBUF=0`: the
//!    kernel's default). CPU of the dashboard thread (RUSAGE_THREAD), events offered / sent /
//!    dropped.
//! 3. `build_view_4096_profile`, `draw_4096_profile`: `build_view_into` alone and `draw` alone on
//!    the same 4,160-row model, CPU per call.

mod common;

use common::{now_ns, rusage};

use std::fs::File;
use std::io::{BufWriter, ErrorKind, Write};
use std::os::unix::net::UnixListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ratatui::backend::CrosstermBackend;
use ratatui::layout::Rect;
use ratatui::{Terminal, TerminalOptions, Viewport};
use sigmatop::cli::dashboard::Dashboard;
use sigmatop::cli::live_feed::LiveFeed;
use sigmatop::cli::replay::ReplaySource;
use sigmatop::event::{
    ClockSample, EndpointDef, EndpointKind, Event, Identity, Layer, Op, OpCount, Peer, Snapshot,
};
use sigmatop::live::{LiveSource, ProcessFilter};
use sigmatop::trace::ProcessRecord;
use sigmatop::trace::writer::ProcessWriter;
use sigmatop::wire::{Frame, encode};
use sigmatop_tui::{App, Tab, Theme};

const S: u64 = 1_000_000_000;

/// A 200×60 terminal writing to /dev/null, buffered as the dashboard's stdout is (crossterm
/// writes each escape sequence separately: unbuffered, every one would be a system call).
/// CPU time of the calling thread (CLOCK_THREAD_CPUTIME_ID: exact, unlike getrusage's
/// tick-sampled split, which is too coarse for a few milliseconds).
fn thread_cpu() -> f64 {
    // SAFETY: timespec is plain old data, filled by clock_gettime.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: the pointer is valid for the call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime");
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

fn terminal() -> Terminal<CrosstermBackend<BufWriter<File>>> {
    let null = File::create("/dev/null").expect("/dev/null");
    Terminal::with_options(
        CrosstermBackend::new(BufWriter::with_capacity(64 * 1024, null)),
        TerminalOptions {
            viewport: Viewport::Fixed(Rect::new(0, 0, 200, 60)),
        },
    )
    .expect("terminal")
}

fn identity(p: u32, start: u64) -> Identity {
    Identity {
        host: format!("node{}", p / 8),
        pid: 10_000 + p,
        rank: Some(p),
        mode: 1,
        layers: Layer::Ibverbs.bit(),
        own_addr_hashes: vec![u64::from(p) + 1],
        start_ns: start,
        exe: "synthetic".into(),
        ..Default::default()
    }
}

/// Writes a recording of `procs` × `qps` verbs QPs, snapshots every 250 ms for `secs` seconds.
fn synthetic_recording(root: &std::path::Path, procs: u32, qps: u32, secs: u64) {
    let start = now_ns();
    let snaps = secs * 4;
    for p in 0..procs {
        let id = identity(p, start);
        let mut w = ProcessWriter::create(root, &id.host, id.pid).expect("writer");
        w.write_record(&ProcessRecord::Identity(id)).expect("write");
        for q in 0..qps {
            w.write_record(&ProcessRecord::Endpoint(EndpointDef {
                id: q + 1,
                layer: Layer::Ibverbs,
                kind: EndpointKind::VerbsQp,
                label: format!("qp {}", 0x100 + q),
                transport: "RC".into(),
                peer: Peer {
                    addr_hash: u64::from((p + q + 1) % procs) + 1,
                    qpn: Some(0x200 + q),
                    ..Default::default()
                },
                qpn: Some(0x100 + q),
                gpu: None,
                created_ns: start,
            }))
            .expect("write");
        }
        w.write_record(&ProcessRecord::Clock(ClockSample {
            tsc: start,
            mono_ns: start,
            real_ns: start,
        }))
        .expect("write");
        for i in 1..=snaps {
            let mut counts = Vec::with_capacity(qps as usize * 2 + 1);
            for q in 0..qps {
                let rate = 1_000_000 * u64::from(1 + (p * 7 + q) % 5);
                let ops = i * 10 * u64::from(1 + q % 3);
                counts.push(OpCount {
                    ep: q + 1,
                    op: Op::VerbsWrite as u8,
                    ops,
                    bytes: rate * i / 4,
                    ..Default::default()
                });
                counts.push(OpCount {
                    ep: q + 1,
                    op: Op::VerbsRecv as u8,
                    ops,
                    bytes: rate * i / 8,
                    ..Default::default()
                });
            }
            w.write_record(&ProcessRecord::Snapshot(Snapshot {
                at_ns: start + i * S / 4,
                seq: i,
                counts,
                ..Default::default()
            }))
            .expect("write");
        }
        w.write_record(&ProcessRecord::End {
            at_ns: start + snaps * S / 4,
            drops: Default::default(),
        })
        .expect("write");
    }
}

#[test]
#[ignore]
fn rows_4096_at_4hz() {
    let dir = common::scratch("bench-4096");
    synthetic_recording(&dir, 64, 64, 32);
    let src = ReplaySource::open(std::slice::from_ref(&dir), "bench", 1.0).expect("open");
    let mut app = App::new(Theme::dark());
    app.tab = Tab::Qps;
    let mut dash = Dashboard::new(src, app);
    let mut term = terminal();
    let (cpu0, _) = rusage(libc::RUSAGE_SELF);
    let t0 = Instant::now();
    let (mut frames, mut frame_time, mut draw_time) = (0u32, Duration::ZERO, Duration::ZERO);
    let (mut tick_cpu, mut draw_cpu) = (0.0, 0.0);
    while t0.elapsed() < Duration::from_secs(30) {
        let f0 = Instant::now();
        let c0 = thread_cpu();
        let changed = dash.tick();
        let c1 = thread_cpu();
        tick_cpu += c1 - c0;
        if changed {
            let d0 = Instant::now();
            dash.draw(&mut term).expect("draw");
            draw_cpu += thread_cpu() - c1;
            frames += 1;
            frame_time += f0.elapsed();
            draw_time += d0.elapsed();
        }
        std::thread::sleep(dash.wait());
    }
    let wall = t0.elapsed().as_secs_f64();
    let (cpu1, maxrss) = rusage(libc::RUSAGE_SELF);
    let rows = dash.vm.endpoints.len();
    let cpu_pct = (cpu1 - cpu0) / wall * 100.0;
    println!(
        "DASHBOARD 4096: {rows} endpoint rows, {frames} frames in {wall:.1}s ({:.2} Hz), \
         poll+build+draw {:.2} ms/frame (draw {:.2}), CPU {cpu_pct:.2}% of one core, peak RSS {:.1} MB; \
         CPU per second: ticks (poll + build) {:.2} ms, draws {:.2} ms",
        frames as f64 / wall,
        frame_time.as_secs_f64() * 1e3 / frames.max(1) as f64,
        draw_time.as_secs_f64() * 1e3 / frames.max(1) as f64,
        maxrss as f64 / 1024.0,
        tick_cpu * 1e3 / wall,
        draw_cpu * 1e3 / wall,
    );
    assert_eq!(rows, 64 * 64);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
#[ignore]
fn events_1m_per_s() {
    let dir = common::scratch("bench-events");
    let pid = 4242u32;
    let path = dir.join(format!("benchhost-{pid}.sock"));
    let listener = UnixListener::bind(&path).expect("bind");
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let producer = std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().expect("accept");
        let start = now_ns();
        let mut id = identity(0, start);
        id.pid = pid;
        id.host = "benchhost".into();
        let mut buf = Vec::new();
        encode(&Frame::hello(id), &mut buf).expect("encode");
        let ep = EndpointDef {
            id: 1,
            layer: Layer::Ibverbs,
            kind: EndpointKind::VerbsQp,
            label: "qp".into(),
            transport: "RC".into(),
            peer: Peer::default(),
            qpn: Some(0x42),
            gpu: None,
            created_ns: start,
        };
        encode(&Frame::Endpoints(vec![ep]), &mut buf).expect("encode");
        encode(
            &Frame::Clock(ClockSample {
                tsc: start,
                mono_ns: start,
                real_ns: start,
            }),
            &mut buf,
        )
        .expect("encode");
        // As the preload's collector does for each live client (preload/src/server.rs): a 4 MiB
        // send buffer, so that a briefly descheduled dashboard does not cost frames. Set
        // SIGMATOP_BENCH_SNDBUF=0 to keep the kernel's default and compare.
        let sndbuf: libc::c_int = std::env::var("SIGMATOP_BENCH_SNDBUF")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(4 << 20);
        if sndbuf > 0 {
            use std::os::fd::AsRawFd;
            // SAFETY: valid fd, option value and length.
            let rc = unsafe {
                libc::setsockopt(
                    conn.as_raw_fd(),
                    libc::SOL_SOCKET,
                    libc::SO_SNDBUF,
                    &sndbuf as *const libc::c_int as *const libc::c_void,
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                )
            };
            assert_eq!(rc, 0, "SO_SNDBUF");
        }
        conn.write_all(&buf).expect("hello");
        conn.set_nonblocking(true).expect("nonblocking");
        let (mut offered, mut sent, mut dropped) = (0u64, 0u64, 0u64);
        let mut pending: Vec<u8> = Vec::new();
        let t0 = Instant::now();
        let mut tick = 0u64;
        let mut seq = 0u64;
        while !stop2.load(Ordering::Relaxed) {
            tick += 1;
            let due = t0 + Duration::from_millis(10 * tick);
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            let base = now_ns();
            let evs: Vec<Event> = (0..10_000u64)
                .map(|i| Event {
                    tsc: base + i * 1000,
                    tid: 1,
                    ep: 1,
                    op: Op::VerbsWrite as u8,
                    bytes: 4096,
                    ..Default::default()
                })
                .collect();
            offered += evs.len() as u64;
            let n = evs.len() as u64;
            let mut frame = Vec::new();
            encode(&Frame::Events(evs), &mut frame).expect("encode");
            // Never block, never queue more than one frame: what does not fit is dropped.
            if pending.is_empty() {
                pending = frame;
                sent += n;
            } else {
                dropped += n;
            }
            if tick.is_multiple_of(25) {
                seq += 1;
                encode(
                    &Frame::Snapshot(Snapshot {
                        at_ns: now_ns(),
                        seq,
                        counts: vec![OpCount {
                            ep: 1,
                            op: Op::VerbsWrite as u8,
                            ops: sent,
                            bytes: sent * 4096,
                            ..Default::default()
                        }],
                        events: sent,
                        ..Default::default()
                    }),
                    &mut pending,
                )
                .expect("encode");
            }
            while !pending.is_empty() {
                match conn.write(&pending) {
                    Ok(k) => {
                        pending.drain(..k);
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(_) => return (offered, sent, dropped),
                }
            }
        }
        (offered, sent, dropped)
    });

    let mut live = LiveSource::new(dir.clone(), ProcessFilter::All);
    live.scan_every = Duration::from_millis(50);
    let mut app = App::new(Theme::dark());
    app.tab = Tab::Doorbells;
    let mut dash = Dashboard::new(
        LiveFeed {
            live,
            child: None,
            finals: None,
        },
        app,
    );
    let mut term = terminal();
    let (cpu0, _) = rusage(libc::RUSAGE_THREAD);
    let t0 = Instant::now();
    let mut frames = 0u32;
    while t0.elapsed() < Duration::from_secs(10) {
        if dash.tick() {
            dash.draw(&mut term).expect("draw");
            frames += 1;
        }
        std::thread::sleep(dash.wait());
    }
    let wall = t0.elapsed().as_secs_f64();
    let (cpu1, _) = rusage(libc::RUSAGE_THREAD);
    stop.store(true, Ordering::Relaxed);
    let (offered, sent, dropped) = producer.join().expect("producer");
    let (_, maxrss) = rusage(libc::RUSAGE_SELF);
    let recent = dash
        .model
        .processes
        .values()
        .map(|p| p.recent.len())
        .sum::<usize>();
    println!(
        "DASHBOARD 1M events/s: offered {offered} ({:.2} M/s), sent {sent}, dropped {dropped} \
         ({:.3}%), {frames} frames, dashboard thread CPU {:.1}% of one core, peak RSS {:.1} MB, \
         kept {recent} recent events",
        offered as f64 / wall / 1e6,
        dropped as f64 * 100.0 / offered.max(1) as f64,
        (cpu1 - cpu0) / wall * 100.0,
        maxrss as f64 / 1024.0
    );
    assert!(dash.model.processes.len() == 1, "attached");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
#[ignore]
fn build_view_4096_profile() {
    use sigmatop::cli::view_model::{ViewCache, ViewOptions, build_view_into};
    let dir = common::scratch("bench-build");
    synthetic_recording(&dir, 64, 64, 32);
    let rec = sigmatop::trace::reader::Recording::open(std::slice::from_ref(&dir)).expect("open");
    let model = sigmatop::agg::Model::from_recording(&rec);
    let opts = ViewOptions::default();
    let mut cache = ViewCache::default();
    // As the dashboard does: into the previous frame's view model.
    let mut vm = sigmatop_tui::ViewModel::default();
    build_view_into(&model, &opts, &mut cache, &mut vm);
    let t0 = Instant::now();
    let cpu0 = thread_cpu();
    let n = 200;
    let mut rows = 0;
    for _ in 0..n {
        build_view_into(&model, &opts, &mut cache, &mut vm);
        rows += vm.endpoints.len();
    }
    let cpu1 = thread_cpu();
    println!(
        "DASHBOARD build_view: {:.2} ms per build of {} rows ({:.2} ms of CPU)",
        t0.elapsed().as_secs_f64() * 1e3 / n as f64,
        rows / n,
        (cpu1 - cpu0) * 1e3 / n as f64
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
#[ignore]
fn draw_4096_profile() {
    use sigmatop::cli::view_model::{ViewCache, ViewOptions, build_view_into};
    let dir = common::scratch("bench-draw");
    synthetic_recording(&dir, 64, 64, 32);
    let rec = sigmatop::trace::reader::Recording::open(std::slice::from_ref(&dir)).expect("open");
    let model = sigmatop::agg::Model::from_recording(&rec);
    let mut vm = sigmatop_tui::ViewModel::default();
    build_view_into(
        &model,
        &ViewOptions::default(),
        &mut ViewCache::default(),
        &mut vm,
    );
    let mut app = App::new(Theme::dark());
    app.tab = Tab::Qps;
    let mut term = terminal();
    let n = 200;
    let cpu0 = thread_cpu();
    for i in 0..n {
        // Move the cursor so that every frame differs from the one before.
        app.selected[Tab::Qps.index()] = i % 2;
        term.draw(|f| sigmatop_tui::draw(f, &app, &vm))
            .expect("draw");
    }
    let cpu1 = thread_cpu();
    println!(
        "DASHBOARD draw: {:.2} ms of CPU per frame of the QPs tab, {} rows, 200×60",
        (cpu1 - cpu0) * 1e3 / n as f64,
        vm.endpoints.len()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
