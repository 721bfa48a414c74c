//! The live socket: privacy, credentials, readers that stall or vanish, frames dropped for a
//! slow reader.

use super::*;

/// The live socket of a traced process, once it exists.
fn socket_of(trace: &Trace, child: &mut Child) -> PathBuf {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let found = std::fs::read_dir(&trace.socket_dir).ok().and_then(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .find(|p| p.extension().is_some_and(|x| x == "sock"))
        });
        if let Some(s) = found {
            return s;
        }
        if Instant::now() > deadline || child.try_wait().ok().flatten().is_some() {
            panic!("no socket appeared in {}", trace.socket_dir.display());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Decodes a byte stream of frames; the stream may end inside a frame (a reader that stopped).
fn frames(bytes: &[u8]) -> Vec<Frame> {
    let mut d = Decoder::new();
    d.push(bytes);
    let mut out = Vec::new();
    while let Some(f) = d.next_frame().expect("a valid sigmatop stream") {
        out.push(f);
    }
    out
}

/// Checks, without sigmatop's decoder, that `bytes` open with a hello frame: a 4-byte
/// little-endian length, then postcard's variant index 0 (Hello) and the magic "sigmatop".
fn opens_with_hello(bytes: &[u8]) -> bool {
    bytes.len() >= 13 && bytes[4] == 0 && &bytes[5..13] == b"sigmatop"
}

/// The frames a reader received from process `pid`: a hello of that process first (checked on
/// the bytes, then decoded), then whole frames.
fn stream_of(pid: u32, bytes: &[u8], who: &str) -> Vec<Frame> {
    assert!(opens_with_hello(bytes), "{who}: a hello first");
    let f = frames(bytes);
    match &f[0] {
        Frame::Hello { identity, .. } => assert_eq!(identity.pid, pid, "{who}"),
        other => panic!("{who}: first frame {other:?}"),
    }
    f
}

/// Reads until EOF or `limit`.
fn read_all(s: &mut UnixStream, limit: Duration) -> Vec<u8> {
    s.set_read_timeout(Some(limit)).expect("timeout");
    let mut v = Vec::new();
    let _ = s.read_to_end(&mut v);
    v
}

#[test]
fn socket_is_private_and_other_uids_are_refused_by_their_credentials() {
    if !common::is_root() {
        return common::skip(
            "needs root (to run a process as uid 65534 and to open the socket's path to it): run the suite as root (CI does)",
        );
    }
    let dir = common::scratch("socket-private");
    let trace = Trace::new("aggregate", &dir);
    let mut child = staying(&trace, 10);
    let sock = socket_of(&trace, &mut child.0);
    let mode = |p: &Path| std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&trace.socket_dir), 0o700);
    assert_eq!(mode(&sock), 0o600);
    // A process of uid 65534 tries to connect and read: "refused ERRNO" when connect() fails,
    // else "connected N" with N the bytes it read before the server closed the connection.
    let foreign = || {
        // Started as root, it drops to uid/gid 65534 (no supplementary groups) before it
        // touches the socket; everything it needs is imported first.
        let script = format!(
            "import os, socket\nos.setgroups([]); os.setgid(65534); os.setuid(65534)\nassert os.getuid() == 65534 and os.geteuid() == 65534\ns=socket.socket(socket.AF_UNIX)\ns.settimeout(10)\ntry:\n  s.connect({:?})\nexcept OSError as e:\n  print('refused', e.errno); raise SystemExit\nn=0\nwhile True:\n  b=s.recv(65536)\n  if not b: break\n  n+=len(b)\nprint('connected', n)",
            sock.display().to_string()
        );
        let out = Command::new(common::require("python3"))
            .arg("-c")
            .arg(&script)
            .output_bounded()
            .expect("python3");
        format!(
            "{}{}",
            common::stdout_of(&out).trim(),
            common::stderr_of(&out)
        )
    };
    // As created, the file system keeps it out: the directory is 0700 (EACCES).
    assert_eq!(foreign(), format!("refused {}", libc::EACCES));
    // Given a path (a directory it may traverse, a socket anyone may write to), it connects,
    // and sigmatop's SO_PEERCRED check closes the connection without sending a byte...
    std::fs::set_permissions(&trace.socket_dir, std::fs::Permissions::from_mode(0o711)).unwrap();
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o666)).unwrap();
    assert_eq!(foreign(), "connected 0", "refused by the credential check");
    // ...while its own user, through the same path, is welcome: the hello, with this pid.
    let mut own = UnixStream::connect(&sock).expect("connect as the owner");
    own.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut head = [0u8; 13];
    own.read_exact(&mut head)
        .expect("the owner reads the hello");
    assert!(opens_with_hello(&head), "{head:?}");
    drop(own);
    drop(child);
}

/// What a reader that never reads can hold: the kernel's buffer for the socket, whose size the
/// preload asks for (4 MiB, SO_SNDBUF) and the kernel caps at net.core.wmem_max, then doubles.
fn stalled_reader_capacity() -> usize {
    let max: usize = std::fs::read_to_string("/proc/sys/net/core/wmem_max")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(4 << 20);
    2 * max.min(4 << 20)
}

/// A real UCX program for the live-reader tests: one thread, rounds of `n` tagged messages over
/// shared memory, every event sent live (`SIGMATOP_SAMPLE=1`) every 10 ms; it waits for the file
/// `go` once its collector listens, and ends after its current round once `stop` exists.
struct LiveUcx {
    n: u64,
    trace: Trace,
    go: PathBuf,
    stop: PathBuf,
    child: Reaped,
}

fn live_ucx(name: &str) -> LiveUcx {
    let n = 100_000u64;
    let dir = common::scratch(name);
    let trace = Trace::new("simple", &dir);
    let (go, stop) = (dir.join("go"), dir.join("stop"));
    let mut cmd = ucx_cmd(&trace, "sm,self", &["threads", "1", &n.to_string()]);
    cmd.env("LIFE_GO", &go)
        .env("LIFE_STOP", &stop)
        .env("SIGMATOP_SAMPLE", "1")
        .env("SIGMATOP_INTERVAL_MS", "10");
    let child = Reaped(common::spawn(&mut cmd));
    LiveUcx {
        n,
        trace,
        go,
        stop,
        child,
    }
}

#[test]
fn stalled_and_vanishing_readers_never_block_the_program() {
    // A real UCX program, one thread sending rounds of 100,000 tagged messages over shared
    // memory, every event sent live (SIGMATOP_SAMPLE=1) every 10 ms. Three readers connect
    // before it sends: one never reads, one leaves after 7 bytes (inside the hello frame), one
    // reads everything. The program is told to stop (after its current round) once the stream
    // has outgrown what the stalled reader can hold by 1 MiB: from then on the collector could
    // only have gone on by not waiting for that reader.
    let LiveUcx {
        n,
        trace,
        go,
        stop,
        mut child,
    } = live_ucx("stalled-reader");
    // The program's thread opened its context (so the collector started and listens) and waits
    // for `go`: connect the readers first.
    let sock = socket_of(&trace, &mut child.0);
    let mut stalled = UnixStream::connect(&sock).expect("the stalled reader connects");
    let mut vanishing = UnixStream::connect(&sock).expect("the vanishing reader connects");
    let mut healthy = UnixStream::connect(&sock).expect("the healthy reader connects");
    let enough = stalled_reader_capacity() + (1 << 20);
    let stop_at = stop.clone();
    let reader = std::thread::spawn(move || {
        healthy
            .set_read_timeout(Some(Duration::from_secs(120)))
            .unwrap();
        let mut all = Vec::new();
        let mut buf = vec![0u8; 1 << 16];
        loop {
            match healthy.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(k) => all.extend_from_slice(&buf[..k]),
            }
            if all.len() > enough && !stop_at.exists() {
                std::fs::write(&stop_at, b"stop").unwrap();
            }
        }
        all
    });
    let mut part = [0u8; 7];
    vanishing
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    vanishing
        .read_exact(&mut part)
        .expect("the vanishing reader reads 7 bytes");
    drop(vanishing);
    std::fs::write(&go, b"go").unwrap();
    let start = Instant::now();
    let (status, text, err) = child.finish(Duration::from_secs(120));
    let took = start.elapsed();
    assert!(status.success(), "{status:?}: {err}");
    // Only now, with the program gone, does the stalled reader read what it was sent.
    let stalled_bytes = read_all(&mut stalled, Duration::from_secs(10));
    let healthy_bytes = reader.join().expect("healthy reader");
    let rounds: u64 = text
        .trim()
        .strip_prefix(&format!("threads 1 messages {n} each rounds "))
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("output: {text:?}"));
    assert!(stop.exists(), "stopped by the test, not by itself");

    // The program: every message counted, every event on disk or counted as lost.
    let procs = common::processes(&trace);
    assert_eq!(procs.len(), 1);
    let p = &procs[0];
    let pid = p.identity.pid;
    let (msgs, bytes) = (rounds * n, rounds * n * 32);
    let t = common::totals(p);
    assert_eq!(common::op(&t, "tag_send"), (msgs, bytes), "sends");
    assert_eq!(common::op(&t, "tag_recv"), (msgs, bytes), "receives");
    let drops = p.end.expect("clean end").1;
    assert_eq!(
        t.events_on_disk + drops.ring_full,
        2 * msgs,
        "every event is on disk or counted as lost to a full ring"
    );

    // The healthy reader: the whole stream, from the hello to the goodbye, its last snapshot
    // holding the exact totals.
    let hf = stream_of(pid, &healthy_bytes, "healthy reader");
    assert!(
        matches!(hf.last(), Some(Frame::Bye { .. })),
        "the healthy reader got the goodbye"
    );
    let snapshots = |fs: &[Frame]| -> Vec<sigmatop::event::Snapshot> {
        fs.iter()
            .filter_map(|f| match f {
                Frame::Snapshot(s) => Some(s.clone()),
                _ => None,
            })
            .collect()
    };
    let sent = |s: &sigmatop::event::Snapshot| -> (u64, u64) {
        s.counts
            .iter()
            .filter(|c| c.op == Op::UcxTagSend as u8)
            .fold((0, 0), |a, c| (a.0 + c.ops, a.1 + c.bytes))
    };
    let hs = snapshots(&hf);
    assert_eq!(
        sent(hs.last().expect("snapshots")),
        (msgs, bytes),
        "the live totals are exact"
    );

    // The vanishing reader got the first 7 bytes of that same hello.
    assert_eq!(
        part[..],
        healthy_bytes[..7],
        "the vanishing reader's 7 bytes"
    );

    // The stalled reader connected and was sent the beginning of the stream: a hello of this
    // process, then whole frames (the last one possibly cut when the program exited); its
    // snapshots are ones the healthy reader got too, identical. It got less than the healthy
    // reader by more than 1 MiB: the collector went on without it, and the program finished.
    let sf = stream_of(pid, &stalled_bytes, "stalled reader");
    let ss = snapshots(&sf);
    assert!(!ss.is_empty(), "the stalled reader was sent snapshots");
    for s in &ss {
        let same = hs
            .iter()
            .find(|h| h.seq == s.seq)
            .expect("the same snapshot");
        assert_eq!(same.counts, s.counts, "snapshot {}", s.seq);
    }
    assert!(
        sent(ss.last().unwrap()).0 < msgs,
        "the stalled reader did not get the final totals"
    );
    assert!(
        stalled_bytes.len() + (1 << 20) < healthy_bytes.len(),
        "the stream ({} B) outgrew what the stalled reader held ({} B)",
        healthy_bytes.len(),
        stalled_bytes.len()
    );
    eprintln!(
        "stalled readers: program ran {took:?} ({rounds} rounds of {n} messages); healthy reader {} B in {} frames, stalled reader {} B in {} frames; ring full {}",
        healthy_bytes.len(),
        hf.len(),
        stalled_bytes.len(),
        sf.len(),
        drops.ring_full
    );
}

/// Broadcast frames of a stream after the snapshot of sequence `seq` (up to the end), leaving
/// out `Missed` frames: (frames, sampled events in their `Events` frames), and the last `Missed`
/// count of the whole stream ((0, 0) when none came).
fn after_snapshot(fs: &[Frame], seq: u64, who: &str) -> ((u64, u64), (u64, u64)) {
    let start = fs
        .iter()
        .position(|f| matches!(f, Frame::Snapshot(s) if s.seq == seq))
        .unwrap_or_else(|| panic!("{who}: no snapshot {seq}"));
    let mut n = (0u64, 0u64);
    for f in &fs[start + 1..] {
        match f {
            Frame::Missed { .. } => {}
            Frame::Events(e) => n = (n.0 + 1, n.1 + e.len() as u64),
            _ => n.0 += 1,
        }
    }
    let missed = fs
        .iter()
        .rev()
        .find_map(|f| match f {
            Frame::Missed { frames, events } => Some((*frames, *events)),
            _ => None,
        })
        .unwrap_or((0, 0));
    (n, missed)
}

/// The sequence number of the second snapshot of a stream: the first one is the copy a reader
/// gets on connecting, the second one was broadcast to every reader.
fn second_snapshot(fs: &[Frame], who: &str) -> u64 {
    fs.iter()
        .filter_map(|f| match f {
            Frame::Snapshot(s) => Some(s.seq),
            _ => None,
        })
        .nth(1)
        .unwrap_or_else(|| panic!("{who}: fewer than two snapshots"))
}

/// Sums `ops` of operation `name` over a JSON report's process (`attach --json`).
fn json_ops(process: &serde_json::Value, name: &str) -> (u64, u64) {
    let mut t = (0, 0);
    for e in process["endpoints"].as_array().into_iter().flatten() {
        if let Some(o) = e["ops"].get(name) {
            t.0 += o["ops"].as_u64().unwrap_or(0);
            t.1 += o["bytes"].as_u64().unwrap_or(0);
        }
    }
    t
}

#[test]
fn frames_dropped_for_a_slow_reader_reach_that_reader() {
    // A real UCX program (one thread, rounds of 100,000 tagged messages over shared memory),
    // every event sent live every 10 ms. Three readers connect before it sends: a healthy one
    // that reads everything, a raw one that stops reading, and `sigmatop attach --json`, which
    // the test suspends (SIGSTOP, as a dashboard put in the background or descheduled). Once
    // the stream has outgrown what a stopped reader can hold (the kernel's socket buffer and the
    // 8 MiB queue for it in the process) by 1 MiB, both resume; the program is stopped after 2
    // more MiB. Frames dropped for them must reach them (`Frame::Missed`), exactly: what the raw
    // reader received and what it was told it missed add up to what the healthy reader received;
    // `attach --json` shows the count, and the dashboard's status line shows it.
    let LiveUcx {
        n,
        trace,
        go,
        stop,
        mut child,
    } = live_ucx("slow-reader-told");
    let sock = socket_of(&trace, &mut child.0);
    let pid = child.0.id();

    // sigmatop attach --json, printing a report every 100 ms; connected once it printed one.
    let mut attach = Command::new(common::sigmatop_bin());
    attach
        .args(["attach", "--json", "--interval-ms", "100", "--socket-dir"])
        .arg(&trace.socket_dir)
        .arg(pid.to_string());
    let mut attach = Reaped(common::spawn(&mut attach));
    let attach_pid = attach.0.id() as libc::pid_t;
    let (tx, lines) = std::sync::mpsc::channel::<String>();
    let out = attach.0.stdout.take().expect("attach's stdout");
    std::thread::spawn(move || {
        for l in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    let first = lines
        .recv_timeout(Duration::from_secs(20))
        .expect("attach printed a report");
    assert!(first.contains(&format!("\"pid\":{pid}")), "{first}");

    let mut stalled = UnixStream::connect(&sock).expect("the raw slow reader connects");
    let mut healthy = UnixStream::connect(&sock).expect("the healthy reader connects");
    let resume_at = stalled_reader_capacity() + (8 << 20) + (1 << 20);
    let stop_at = resume_at + (2 << 20);
    let (resume_tx, resume_rx) = std::sync::mpsc::channel::<()>();
    let stop_file = stop.clone();
    // The program is stopped only once attach has read its backlog (it was told what it missed):
    // at the program's end the preload waits for a reader only while it makes progress (200 ms
    // idle, 2 s in all), and an attach still reading megabytes then, on a loaded machine, would
    // miss the goodbye (a report that never says clean_exit).
    let caught_up = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let caught = caught_up.clone();
    let reader = std::thread::spawn(move || {
        healthy
            .set_read_timeout(Some(Duration::from_secs(120)))
            .unwrap();
        let mut all = Vec::new();
        let mut buf = vec![0u8; 1 << 16];
        let mut resumed = false;
        loop {
            match healthy.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(k) => all.extend_from_slice(&buf[..k]),
            }
            if all.len() > resume_at && !resumed {
                resumed = true;
                let _ = resume_tx.send(());
            }
            if all.len() > stop_at
                && caught.load(std::sync::atomic::Ordering::Acquire)
                && !stop_file.exists()
            {
                std::fs::write(&stop_file, b"stop").unwrap();
            }
        }
        all
    });
    // SAFETY: a signal to the attach process this test started (still a child, not reaped).
    assert_eq!(unsafe { libc::kill(attach_pid, libc::SIGSTOP) }, 0);
    std::fs::write(&go, b"go").unwrap();
    resume_rx
        .recv_timeout(Duration::from_secs(120))
        .expect("the stream outgrew a stopped reader");
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(attach_pid, libc::SIGCONT) }, 0);
    // attach reads its backlog up to the frame that tells it what it missed.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let l = lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .expect("attach, resumed, reads its backlog and is told what it missed");
        let v: serde_json::Value = serde_json::from_str(&l).expect("a JSON report");
        if v["live_missed"]["frames"].as_u64().unwrap_or(0) > 0 {
            break;
        }
    }
    caught_up.store(true, std::sync::atomic::Ordering::Release);
    let stalled_bytes = read_all(&mut stalled, Duration::from_secs(120));
    let healthy_bytes = reader.join().expect("healthy reader");
    let (status, text, err) = child.finish(LIMIT);
    assert!(status.success(), "{status:?}: {err}");
    let rounds: u64 = text
        .trim()
        .strip_prefix(&format!("threads 1 messages {n} each rounds "))
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("output: {text:?}"));
    let (msgs, bytes) = (rounds * n, rounds * n * 32);

    // The raw reader: received + told it missed = what the healthy reader received, frames and
    // sampled events, from a snapshot both got on.
    let hf = stream_of(pid, &healthy_bytes, "healthy reader");
    let sf = stream_of(pid, &stalled_bytes, "slow reader");
    for (fs, who) in [(&hf, "healthy reader"), (&sf, "slow reader")] {
        assert!(
            matches!(fs.last(), Some(Frame::Bye { .. })),
            "{who}: the stream ends with the goodbye"
        );
    }
    let seq = second_snapshot(&hf, "healthy").max(second_snapshot(&sf, "slow"));
    let (h, h_missed) = after_snapshot(&hf, seq, "healthy reader");
    let (s, s_missed) = after_snapshot(&sf, seq, "slow reader");
    assert_eq!(h_missed, (0, 0), "the healthy reader missed nothing");
    assert!(s_missed.0 > 0, "frames were dropped for the slow reader");
    assert!(s_missed.1 > 0, "sampled events were in them");
    assert_eq!(
        (s.0 + s_missed.0, s.1 + s_missed.1),
        h,
        "slow reader: received {s:?} + missed {s_missed:?} = healthy reader's {h:?}"
    );
    // Totals survive the drops: the slow reader's last snapshot is the healthy reader's and
    // the record's.
    let last = |fs: &[Frame]| {
        fs.iter()
            .rev()
            .find_map(|f| match f {
                Frame::Snapshot(s) => Some(s.clone()),
                _ => None,
            })
            .expect("a snapshot")
    };
    assert_eq!(last(&sf), last(&hf), "the same final snapshot");
    let procs = common::processes(&trace);
    let t = common::totals(&procs[0]);
    assert_eq!(common::op(&t, "tag_send"), (msgs, bytes), "record: sends");
    let live_sends = last(&sf)
        .counts
        .iter()
        .filter(|c| c.op == Op::UcxTagSend as u8)
        .fold((0, 0), |a, c| (a.0 + c.ops, a.1 + c.bytes));
    assert_eq!(live_sends, (msgs, bytes), "live: sends");

    // The dashboard fed the slow reader's frames shows the count on its status line.
    let mut model = sigmatop::agg::Model::new();
    let key = sigmatop::agg::ProcKey {
        host: procs[0].identity.host.clone(),
        pid,
        start_ns: procs[0].identity.start_ns,
    };
    for f in sf.iter().cloned() {
        model.apply(&key, f);
    }
    let vm = sigmatop::cli::view_model::build_view(
        &model,
        &sigmatop::cli::view_model::ViewOptions {
            window: sigmatop_tui::Window::S10,
            at: None,
            source: "test".into(),
            clock: sigmatop::cli::view_model::ClockStyle::SinceStart,
            now_ns: None,
        },
    );
    assert_eq!(vm.status.frames_lost, s_missed.0, "the view model's count");
    let mut term = ratatui::Terminal::new(ratatui::backend::TestBackend::new(200, 60)).unwrap();
    term.draw(|f| sigmatop_tui::draw(f, &sigmatop_tui::App::new(sigmatop_tui::Theme::dark()), &vm))
        .unwrap();
    let screen: String = term
        .backend()
        .buffer()
        .content()
        .iter()
        .map(|c| c.symbol())
        .collect();
    let shown = format!("frames lost {}", sigmatop_tui::units::count(s_missed.0));
    assert!(screen.contains(&shown), "the status line shows {shown:?}");

    // attach --json: its last report (the process said goodbye) has the exact totals and says
    // what it missed. (It was stopped with SIGSTOP and has a backlog to read: generous on a
    // loaded machine.)
    let deadline = Instant::now() + Duration::from_secs(120);
    let report = loop {
        let l = lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .expect("attach reports the process's end");
        let v: serde_json::Value = serde_json::from_str(&l).expect("a JSON report");
        if v["processes"][0]["clean_exit"] == true {
            break v;
        }
    };
    drop(attach);
    let p = &report["processes"][0];
    assert_eq!(json_ops(p, "tag_send"), (msgs, bytes), "attach: sends");
    let frames = report["live_missed"]["frames"].as_u64().unwrap_or(0);
    let events = report["live_missed"]["events"].as_u64().unwrap_or(0);
    assert!(
        frames > 0 && events > 0,
        "attach was told it missed frames: {report}"
    );
    assert_eq!(p["live_missed"], report["live_missed"], "one process");
    assert!(frames <= h.0 && events <= h.1, "no more than there were");
    eprintln!(
        "slow readers: {rounds} rounds of {n} messages; healthy reader {} B, {h:?} (frames, events) after snapshot {seq}; raw slow reader {} B, received {s:?}, missed {s_missed:?}; attach missed {frames} frames, {events} events",
        healthy_bytes.len(),
        stalled_bytes.len()
    );
}

#[test]
fn attach_refuses_sockets_it_does_not_own() {
    if !common::is_root() {
        return common::skip(
            "needs root to chown a socket to another uid: run the suite as root (CI does; scripts/test.sh installs as root)",
        );
    }
    let dir = common::scratch("foreign-socket");
    let sockdir = dir.join("sock");
    std::fs::create_dir_all(&sockdir).unwrap();
    std::fs::set_permissions(&sockdir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let path = sockdir.join("otherhost-4242.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    std::os::unix::fs::chown(&path, Some(65534), Some(65534)).unwrap();
    let out = Command::new(common::sigmatop_bin())
        .args([
            "attach",
            "--json",
            "--once",
            "--interval-ms",
            "300",
            "--socket-dir",
        ])
        .arg(&sockdir)
        .output_bounded()
        .unwrap();
    assert!(!out.status.success(), "nothing to attach to");
    let err = common::stderr_of(&out);
    assert!(
        err.contains("owned by uid 65534, not you; not attaching"),
        "{err}"
    );
    assert!(err.contains("no traced process found"), "{err}");
}
