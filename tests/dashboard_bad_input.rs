//! Bad input never stops the dashboard: a socket that sends garbage, one that speaks another
//! protocol version, a process that dies in the middle of a frame, and a corrupt recording each
//! give a clear message in the status bar while the dashboard keeps drawing.

mod common;

use std::io::Write;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ratatui::Terminal;
use ratatui::backend::TestBackend;
use sigmatop::cli::dashboard::{Dashboard, Source};
use sigmatop::cli::live_feed::LiveFeed;
use sigmatop::cli::replay::ReplaySource;
use sigmatop::event::Identity;
use sigmatop::live::{LiveSource, ProcessFilter};
use sigmatop::wire::{Frame, HELLO_MAGIC, encode};
use sigmatop_tui::{App, Theme};

/// A fake traced process at `dir/<host>-<pid>.sock` that sends `bytes` to the first client and
/// then closes (or keeps the connection open when `hold`).
fn fake(dir: &Path, name: &str, bytes: Vec<u8>, hold: bool) -> std::thread::JoinHandle<()> {
    let l = UnixListener::bind(dir.join(name)).expect("bind");
    std::thread::spawn(move || {
        if let Ok((mut c, _)) = l.accept() {
            let _ = c.write_all(&bytes);
            if hold {
                std::thread::sleep(Duration::from_secs(3));
            }
        }
    })
}

/// Ticks the dashboard (drawing each time) until its status line mentions `want`.
fn until_status<S: Source>(dash: &mut Dashboard<S>, want: &str) -> String {
    let mut term = Terminal::new(TestBackend::new(120, 30)).expect("terminal");
    let start = Instant::now();
    loop {
        dash.tick();
        dash.rebuild();
        dash.draw(&mut term).expect("the dashboard keeps drawing");
        let msg = dash.vm.status.message.clone().unwrap_or_default();
        if msg.contains(want) {
            return msg;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no status message with {want:?}; last {msg:?}; messages {:?}",
            dash.model.messages
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn live(dir: &Path) -> Dashboard<LiveFeed> {
    let mut live = LiveSource::new(dir.to_path_buf(), ProcessFilter::All);
    live.scan_every = Duration::from_millis(10);
    Dashboard::new(
        LiveFeed {
            live,
            child: None,
            finals: None,
        },
        App::new(Theme::dark()),
    )
}

#[test]
fn garbage_old_version_and_cut_frames_are_reported() {
    let dir = common::scratch("bad-sockets");
    let mut dash = live(&dir);

    let g = fake(
        &dir,
        "h-101.sock",
        b"\xff\xff\xff\x7fnot a sigmatop stream".to_vec(),
        true,
    );
    let msg = until_status(&mut dash, "h-101.sock");
    assert!(msg.contains("disconnected"), "{msg}");
    let _ = g.join();

    let mut old = Vec::new();
    encode(
        &Frame::Hello {
            magic: HELLO_MAGIC,
            version: 99,
            identity: Identity::default(),
        },
        &mut old,
    )
    .expect("encode");
    let o = fake(&dir, "h-102.sock", old, true);
    let msg = until_status(&mut dash, "h-102.sock");
    assert!(msg.contains("99"), "names the other version: {msg}");
    let _ = o.join();

    let mut cut = Vec::new();
    let id = Identity {
        host: "h".into(),
        pid: 103,
        ..Default::default()
    };
    encode(&Frame::hello(id), &mut cut).expect("encode");
    encode(&Frame::Bye { at_ns: 1 }, &mut cut).expect("encode");
    cut.truncate(cut.len() - 2);
    let c = fake(&dir, "h-103.sock", cut, false);
    let msg = until_status(&mut dash, "middle of a frame");
    assert!(msg.contains("h-103.sock"), "{msg}");
    let _ = c.join();
    // The process that died is marked, and the dashboard still runs.
    dash.rebuild();
    let p = dash
        .vm
        .processes
        .iter()
        .find(|p| p.pid == 103)
        .expect("row");
    assert!(p.exited);
    let _ = std::fs::remove_dir_all(&dir);
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read_dir").flatten() {
        let dst = to.join(e.file_name());
        if e.path().is_dir() {
            copy_dir(&e.path(), &dst);
        } else {
            std::fs::copy(e.path(), &dst).expect("copy");
        }
    }
}

#[test]
fn corrupt_recording_is_reported_and_replayed_up_to_the_damage() {
    let dir = common::scratch("bad-recording");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/demo-moe");
    copy_dir(&fixture, &dir);
    // Flip bytes in the middle of one thread file's first chunk (the first process's, whatever
    // its pid in the current fixture).
    let mut procs: Vec<PathBuf> = std::fs::read_dir(dir.join("vm"))
        .expect("vm/")
        .flatten()
        .map(|e| e.path())
        .collect();
    procs.sort();
    let pid = procs[0]
        .file_name()
        .expect("pid")
        .to_string_lossy()
        .into_owned();
    let tf_name = format!("thread-{pid}.ste");
    let tf = procs[0].join(&tf_name);
    let mut bytes = std::fs::read(&tf).expect("read");
    let mid = bytes.len() / 2;
    for b in &mut bytes[mid..mid + 8] {
        *b ^= 0xa5;
    }
    std::fs::write(&tf, bytes).expect("write");
    let src = ReplaySource::open(std::slice::from_ref(&dir), "replay", 100.0).expect("opens");
    let mut dash = Dashboard::new(src, App::new(Theme::dark()));
    let msg = until_status(&mut dash, &tf_name);
    assert!(msg.contains("checksum") || msg.contains("chunk"), "{msg}");
    // Playback goes on to the end for every process.
    let start = Instant::now();
    while !dash.source.finished() {
        dash.tick();
        assert!(start.elapsed() < Duration::from_secs(20), "replay ends");
        std::thread::sleep(Duration::from_millis(10));
    }
    dash.rebuild();
    assert_eq!(dash.vm.processes.len(), 4);
    let _ = std::fs::remove_dir_all(&dir);
}
