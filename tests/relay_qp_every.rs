//! A real `sigmatop relay` asked for `qp-every N` (relay protocol 2): on its command line, then
//! on its stdin as the dashboard asks. A fake traced process speaks the real wire protocol on a
//! Unix socket (one snapshot of 4 QPs every 50 ms); the relay's stdout is decoded and checked
//! frame by frame: at N = 1 every snapshot whole and no totals; at N = 4 every snapshot's
//! totals, whole snapshots exactly every 4th one, and no sampled verbs event.

mod common;

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use sigmatop::event::{Event, Identity, Op, OpCount, Snapshot};
use sigmatop::relay::{RelayDecoder, RelayFrame, RelayItem};
use sigmatop::wire::{self, Frame};

/// Longest wait for the frames a check needs (they come every 50 ms).
const LIMIT: Duration = Duration::from_secs(60);

/// Serves one fake traced process on `dir`: hello, then every 50 ms a snapshot (seq 0, 1, ...)
/// and two verbs events, until `stop`.
fn fake_process(dir: &std::path::Path, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    let listener = UnixListener::bind(dir.join("relaytest-4242.sock")).expect("bind");
    std::thread::spawn(move || {
        let Ok((mut conn, _)) = listener.accept() else {
            return;
        };
        let mut buf = Vec::new();
        let id = Identity {
            host: "relaytest".into(),
            pid: 4242,
            start_ns: common::now_ns(),
            ..Default::default()
        };
        wire::encode(&Frame::hello(id), &mut buf).expect("encode");
        let mut seq = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let counts = (1..=4)
                .map(|q| OpCount {
                    ep: q,
                    op: Op::VerbsWrite as u8,
                    ops: (seq + 1) * u64::from(q),
                    bytes: (seq + 1) * 4096 * u64::from(q),
                    ..Default::default()
                })
                .collect();
            let at = common::now_ns();
            wire::encode(
                &Frame::Snapshot(Snapshot {
                    at_ns: at,
                    seq,
                    counts,
                    ..Default::default()
                }),
                &mut buf,
            )
            .expect("encode");
            let evs = vec![
                Event {
                    tsc: seq,
                    op: Op::VerbsWrite as u8,
                    ..Default::default()
                };
                2
            ];
            wire::encode(&Frame::Events(evs), &mut buf).expect("encode");
            if conn.write_all(&buf).is_err() {
                return;
            }
            buf.clear();
            seq += 1;
            std::thread::sleep(Duration::from_millis(50));
        }
    })
}

/// What the relay sends for the process, in order, as it comes (decoded on a thread of its own):
/// ('S', seq) a whole snapshot, ('T', seq) totals, ('E', total) events as a count or a frame of
/// kept ones, ('V', n) whole events.
fn relay_items(mut out: impl Read + Send + 'static) -> std::sync::mpsc::Receiver<(char, u64)> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut d = RelayDecoder::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = out.read(&mut buf) {
            if n == 0 {
                return;
            }
            d.push(&buf[..n]);
            while let Some(item) = d.next_item().expect("a relay stream") {
                let got = match item {
                    RelayItem::Frame(RelayFrame::Proc {
                        frame: Frame::Snapshot(s),
                        ..
                    }) => ('S', s.seq),
                    RelayItem::Frame(RelayFrame::Proc {
                        frame: Frame::Events(e),
                        ..
                    }) => ('V', e.len() as u64),
                    RelayItem::Frame(RelayFrame::Totals { totals, .. }) => ('T', totals.seq),
                    RelayItem::Frame(RelayFrame::Events { total, .. }) => ('E', u64::from(total)),
                    _ => continue,
                };
                if tx.send(got).is_err() {
                    return;
                }
            }
        }
    });
    rx
}

/// What came from `items` until `enough` holds of it; fails after `limit` with what came.
fn read_until(
    items: &std::sync::mpsc::Receiver<(char, u64)>,
    what: &str,
    limit: Duration,
    enough: impl Fn(&[(char, u64)]) -> bool,
) -> Vec<(char, u64)> {
    let until = Instant::now() + limit;
    let mut got = Vec::new();
    while !enough(&got) {
        let left = until.saturating_duration_since(Instant::now());
        match items.recv_timeout(left) {
            Ok(item) => got.push(item),
            Err(e) => panic!("waited {limit:?} for {what} ({e}); came: {got:?}"),
        }
    }
    got
}

#[test]
fn relay_sends_every_qp_every_nth_snapshot_when_asked() {
    let dir = common::scratch("relay-qp-every");
    let sock = dir.join("sock");
    std::fs::create_dir_all(&sock).expect("sock");
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let stop = Arc::new(AtomicBool::new(false));
    let producer = fake_process(&sock, stop.clone());
    // Guarded: ended when the test ends, a panic included.
    let mut relay = common::guard(
        std::os::unix::process::CommandExt::process_group(
            common::default_signals(
                Command::new(common::sigmatop_bin())
                    .args(["relay", "--socket-dir"])
                    .arg(&sock),
            ),
            0,
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("relay"),
    );
    let items = relay_items(relay.stdout.take().expect("stdout"));
    let mut input = relay.stdin.take().expect("stdin");
    let count = |got: &[(char, u64)], kind: char| got.iter().filter(|f| f.0 == kind).count();
    // qp-every 1 (the start): whole snapshots and events, no totals.
    let first = read_until(&items, "5 whole snapshots", LIMIT, |g| count(g, 'S') >= 5);
    let _ = input.write_all(b"qp-every 4\n");
    let _ = input.flush();
    let second = read_until(&items, "the totals of 20 snapshots", LIMIT, |g| {
        count(g, 'T') >= 20
    });
    stop.store(true, Ordering::Relaxed);
    drop(relay);
    let _ = producer.join();
    assert!(
        first.iter().filter(|f| f.0 == 'S').count() >= 5,
        "{first:?}"
    );
    assert!(first.iter().all(|f| f.0 == 'S' || f.0 == 'V'), "{first:?}");
    // After the request: every snapshot's totals, in order; whole ones every 4th from the
    // first snapshot after the switch; verbs events only as counts (2 a snapshot).
    let t: Vec<u64> = second.iter().filter(|f| f.0 == 'T').map(|f| f.1).collect();
    let from = t.first().copied().expect("totals after the request");
    assert!(t.len() >= 20, "{second:?}");
    assert_eq!(t, (from..from + t.len() as u64).collect::<Vec<_>>());
    let whole: Vec<u64> = second
        .iter()
        .filter(|f| f.0 == 'S' && f.1 >= from)
        .map(|f| f.1)
        .collect();
    let want: Vec<u64> = (from..from + t.len() as u64).step_by(4).collect();
    assert_eq!(whole, want, "{second:?}");
    // The frames from the request on (the stream's frames are in snapshot order).
    let first = second
        .iter()
        .position(|f| f.1 >= from)
        .unwrap_or(second.len());
    let after = &second[first..];
    assert!(after.iter().all(|f| f.0 != 'V'), "{second:?}");
    // The events of each snapshot travel as a count (in the next totals, not as frames here):
    // no Events frame either, since none is a doorbell.
    assert!(after.iter().all(|f| f.0 != 'E'), "{second:?}");
}
