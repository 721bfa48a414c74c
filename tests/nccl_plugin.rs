//! sigmatop's NCCL profiler plugin driven on the CPU the way NCCL 2.28 drives it
//! (tests/nccl_plugin_driver.c: the v5 descriptors laid out by the C compiler from NCCL's header
//! fields): every field NCCL passes lands where src/nccl/format.rs says, with the parent links
//! (the Coll under its CollApi under its GroupApi); NCCL's per-poll SendPeerWait state is kept
//! once per step; the totals record closes the file. Aggregate mode asks NCCL for the host calls
//! only and counts them. A user's own plugin (tests/nccl_count_plugin.c, a counting plugin of
//! ours) chained behind sigmatop's gets every event of the types it asked for, with its own
//! handles and parents, while sigmatop records what it recorded alone; one that cannot be loaded
//! is said in one line and sigmatop's attribution goes on, and so is one whose init fails. An
//! event of a type profiler v5 does not have (v6's CeColl) is counted, never recorded.
mod common;

use common::Bounded;

use std::path::{Path, PathBuf};
use std::process::Command;

use sigmatop::nccl::format::{self, Rec, etype, kind};

/// Compiles `src` (under tests/) with gcc and `args` into `out`.
fn gcc(src: &str, out: &Path, args: &[&str]) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join(src);
    let o = Command::new("gcc")
        .args(["-O2", "-Wall", "-Werror"])
        .args(args)
        .arg("-o")
        .arg(out)
        .arg(&src)
        .arg("-ldl")
        .output_bounded()
        .expect("gcc");
    assert!(o.status.success(), "{}", common::stderr_of(&o));
}

/// Runs the driver under the preload with `env`; its stdout, stderr and the records of the one
/// NCCL file it left.
fn drive(dir: &Path, env: &[(&str, &str)]) -> (String, String, Vec<Rec>) {
    let drv = dir.join("driver");
    if !drv.exists() {
        gcc("nccl_plugin_driver.c", &drv, &[]);
    }
    let rec = dir.join("rec");
    let _ = std::fs::remove_dir_all(&rec);
    let pre = common::preload();
    let mut cmd = Command::new(&drv);
    cmd.arg(&pre)
        .env("LD_PRELOAD", &pre)
        .env("SIGMATOP_RECORD", &rec)
        .env("SIGMATOP_SOCKET_DIR", dir.join("sock"))
        .env_remove("SIGMATOP_MODE")
        .env_remove("SIGMATOP_NCCL_PROFILER_PLUGIN");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output_bounded().expect("driver");
    assert!(out.status.success(), "{}", common::stderr_of(&out));
    let files: Vec<PathBuf> = std::fs::read_dir(&rec)
        .expect("record dir")
        .flatten()
        .flat_map(|h| std::fs::read_dir(h.path()).expect("host dir").flatten())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "stn"))
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let d = format::decode(&std::fs::read(&files[0]).expect("read"));
    assert!(d.problem.is_none(), "{:?}", d.problem);
    (common::stdout_of(&out), common::stderr_of(&out), d.recs)
}

/// START records per event type.
fn starts_by_type(recs: &[Rec]) -> std::collections::BTreeMap<u8, usize> {
    let mut m = std::collections::BTreeMap::new();
    for r in recs.iter().filter(|r| r.kind() == kind::START) {
        *m.entry(r.etype()).or_default() += 1;
    }
    m
}

#[test]
fn the_plugin_records_what_nccl_passes_it() {
    let dir = common::scratch("nccl-plugin");
    let (so, _, recs) = drive(&dir, &[]);
    assert!(
        so.contains("mask=2014") && so.contains("handles ok"),
        "{so}"
    );
    let d = format::Decoded {
        recs,
        problem: None,
    };
    let find = |k: u8, t: u8| {
        d.recs
            .iter()
            .find(|r| r.kind() == k && r.etype() == t)
            .unwrap_or_else(|| panic!("no record kind {k} type {t}: {:?}", d.recs))
    };
    let init = find(kind::INIT, 0);
    assert_eq!(
        (init.p(0), init.p(1), init.p(2), init.p(3)),
        (0x1234abcd5678ef00, 2, 2, 1)
    );
    assert_eq!(format::unpack_name(&init.0[10..14]), "driver comm");
    assert_eq!(
        init.0[14], 5,
        "the profiler interface the events came through"
    );
    // The event of a type v5 does not have (profiler v6's CeColl): counted in the totals, not
    // recorded, no handle given.
    assert!(!so.contains("an unknown type got a handle"), "{so}");
    assert!(
        !d.recs.iter().any(|r| r.etype() == etype::OTHER),
        "an event of an unknown type was recorded: {:?}",
        d.recs
    );
    let gapi = find(kind::START, etype::GROUP_API);
    assert_eq!((gapi.parent(), gapi.p(0)), (0, 1), "GroupApi of depth 1");
    let capi = find(kind::START, etype::COLL_API);
    assert_eq!(capi.parent(), gapi.id());
    assert_eq!((capi.p(1), capi.p(3) as i64), (65536, -1));
    assert_eq!(format::unpack_coll(capi.p(2)).0, 1, "CollApi of AllReduce");
    let coll = find(kind::START, etype::COLL);
    assert_eq!(coll.comm(), init.comm());
    assert_eq!(coll.parent(), capi.id(), "the Coll under its CollApi");
    let gstates: Vec<u8> = d
        .recs
        .iter()
        .filter(|r| r.kind() == kind::STATE && r.etype() == etype::GROUP_API)
        .map(|r| r.state())
        .collect();
    assert_eq!(gstates, [23, 24], "GroupStartApiStop, GroupEndApiStart");
    assert!(
        !d.recs.iter().any(|r| r.etype() == etype::PROXY_CTRL),
        "simple mode does not ask for proxy control events"
    );
    assert_eq!(
        (coll.p(0), coll.p(1), coll.p(3) as i64, coll.0[13]),
        (41, 65536, -1, 1)
    );
    assert_eq!(format::unpack_coll(coll.p(2)), (1, 7, 1, 2, 8, 16));
    let op = find(kind::START, etype::PROXY_OP);
    assert_eq!(op.parent(), coll.id());
    assert_eq!(
        (op.p(0), op.p(1), op.p(2), op.p(3), op.p(4), op.p(5)),
        (4242, 3, 0, 4, 131072, 1)
    );
    let step = find(kind::START, etype::PROXY_STEP);
    assert_eq!((step.parent(), step.p(0)), (op.id(), 2));
    let net = find(kind::START, etype::NET_PLUGIN);
    assert_eq!(net.parent(), step.id());
    assert_eq!(
        (
            net.p(0),
            net.p(1),
            net.p(2),
            net.p(3),
            net.p(4),
            net.p(5),
            net.p(6)
        ),
        (0x10001, 1, 0, 0x7700000000000005, 3, 0x1c3, 32768)
    );
    // SendPeerWait polled three times: its first kept; then SendWait.
    let states: Vec<_> = d
        .recs
        .iter()
        .filter(|r| r.kind() == kind::STATE && r.etype() == etype::PROXY_STEP)
        .collect();
    assert_eq!(
        states.len(),
        2,
        "one SendPeerWait, one SendWait: {states:?}"
    );
    assert_eq!(
        (states[0].id(), states[0].state(), states[0].p(0)),
        (step.id(), 20, 32768)
    );
    assert_eq!(
        (states[1].id(), states[1].state(), states[1].p(0)),
        (step.id(), 9, 32768)
    );
    let stops: Vec<u64> = d
        .recs
        .iter()
        .filter(|r| r.kind() == kind::STOP)
        .map(|r| r.id())
        .collect();
    assert_eq!(
        stops,
        [
            capi.id(),
            net.id(),
            step.id(),
            op.id(),
            coll.id(),
            gapi.id()
        ]
    );
    assert!(d.recs.iter().any(|r| r.kind() == kind::FINALIZE));
    let last = d.recs.last().expect("records");
    // Last, the totals: nothing dropped, the one event of an unknown type counted.
    assert_eq!((last.kind(), last.p(0), last.p(1)), (kind::TOTALS, 0, 1));
}

/// A user's plugin chained behind sigmatop's (SIGMATOP_NCCL_PROFILER_PLUGIN, what `sigmatop run`
/// sets from the user's NCCL_PROFILER_PLUGIN): NCCL sees both masks merged; the counting plugin
/// gets every event of its types (ProxyCtrl among them, which sigmatop does not record in simple
/// mode), every state and stop, with its own handles and parents (it counts any that are not:
/// 0); sigmatop's records are those it writes alone.
#[test]
fn a_chained_plugin_gets_every_event_it_asks_for_beside_sigmatop() {
    let dir = common::scratch("nccl-plugin-chain");
    let lib = dir.join("libnccl-profiler-counter.so");
    gcc("nccl_count_plugin.c", &lib, &["-shared", "-fPIC"]);
    let (_, _, alone) = drive(&dir, &[]);
    let out = dir.join("counts.txt");
    let (so, se, recs) = drive(
        &dir,
        &[
            ("SIGMATOP_NCCL_PROFILER_PLUGIN", lib.to_str().expect("path")),
            ("COUNT_OUT", out.to_str().expect("path")),
        ],
    );
    // Theirs: ProxyCtrl, Coll, ProxyOp, GroupApi, CollApi (806); ours: 2014.
    assert!(so.contains(&format!("mask={}", 2014 | 806)), "{so}");
    assert!(so.contains("events 7") && so.contains("handles ok"), "{so}");
    assert!(se.contains("NCCL profiler plugin chained: counter"), "{se}");
    let counts = std::fs::read_to_string(&out).expect("the counting plugin's finalize wrote");
    assert_eq!(
        counts.trim(),
        "inits 1 finalizes 1 starts 5 stops 5 states 4 types=1:1,3:1,5:1,8:1,9:1, bad 0",
        "every event of its types, its states (2 of the GroupApi, 2 of the ProxyCtrl) and stops, with its own handles"
    );
    assert_eq!(starts_by_type(&recs), starts_by_type(&alone));
    assert_eq!(
        recs.len(),
        alone.len(),
        "sigmatop records what it records alone"
    );
    // By name too, as NCCL looks plugins up (libnccl-profiler-NAME.so on the library path).
    let (_, se, _) = drive(
        &dir,
        &[
            ("SIGMATOP_NCCL_PROFILER_PLUGIN", "counter"),
            ("LD_LIBRARY_PATH", dir.to_str().expect("path")),
            ("COUNT_OUT", out.to_str().expect("path")),
        ],
    );
    assert!(se.contains("chained: counter (counter)"), "{se}");
}

/// A plugin that cannot be loaded: one line, and sigmatop's own records as before.
#[test]
fn a_plugin_that_cannot_be_loaded_is_said_and_sigmatop_goes_on() {
    let dir = common::scratch("nccl-plugin-badchain");
    let (_, _, alone) = drive(&dir, &[]);
    let (so, se, recs) = drive(
        &dir,
        &[("SIGMATOP_NCCL_PROFILER_PLUGIN", "/nonexistent/libmine.so")],
    );
    assert!(
        so.contains("mask=2014") && so.contains("handles ok"),
        "{so}"
    );
    let lines: Vec<&str> = se
        .lines()
        .filter(|l| l.contains("cannot load your NCCL profiler plugin"))
        .collect();
    assert_eq!(lines.len(), 1, "{se}");
    assert!(lines[0].contains("/nonexistent/libmine.so") && lines[0].contains("goes on"));
    assert_eq!(starts_by_type(&recs), starts_by_type(&alone));
}

/// A chained plugin whose init fails: one line, NCCL asked for sigmatop's types alone, and
/// sigmatop's records as before; the plugin gets no event.
#[test]
fn a_plugin_whose_init_fails_is_said_and_sigmatop_goes_on() {
    let dir = common::scratch("nccl-plugin-failinit");
    let lib = dir.join("libnccl-profiler-counter.so");
    gcc("nccl_count_plugin.c", &lib, &["-shared", "-fPIC"]);
    let (_, _, alone) = drive(&dir, &[]);
    let out = dir.join("counts.txt");
    let (so, se, recs) = drive(
        &dir,
        &[
            ("SIGMATOP_NCCL_PROFILER_PLUGIN", lib.to_str().expect("path")),
            ("COUNT_OUT", out.to_str().expect("path")),
            ("COUNT_FAIL_INIT", "1"),
        ],
    );
    assert!(
        so.contains("mask=2014") && so.contains("handles ok"),
        "{so}"
    );
    let lines: Vec<&str> = se.lines().filter(|l| l.contains("init failed")).collect();
    assert_eq!(lines.len(), 1, "{se}");
    assert!(
        lines[0].contains("error 3") && lines[0].contains("goes on"),
        "{}",
        lines[0]
    );
    assert!(
        !out.exists(),
        "a plugin whose init failed was finalized: {:?}",
        std::fs::read_to_string(&out)
    );
    assert_eq!(starts_by_type(&recs), starts_by_type(&alone));
    assert_eq!(recs.len(), alone.len());
}

/// Aggregate mode asks NCCL for its host calls only (Coll, P2p: mask 6), records none of them and
/// writes at exit one COUNTS record per communicator and function: here 1 AllReduce of 65536
/// floats.
#[test]
fn aggregate_mode_counts_host_calls_and_records_no_event() {
    let dir = common::scratch("nccl-plugin-agg");
    let (so, _, recs) = drive(&dir, &[("SIGMATOP_MODE", "aggregate")]);
    assert!(so.contains("mask=6"), "{so}");
    assert_eq!(
        recs.iter().filter(|r| r.kind() == kind::START).count(),
        0,
        "no event recorded: {recs:?}"
    );
    let counts: Vec<&Rec> = recs.iter().filter(|r| r.kind() == kind::COUNTS).collect();
    assert_eq!(counts.len(), 1, "{recs:?}");
    assert_eq!(
        (counts[0].p(0), counts[0].p(1), counts[0].p(2)),
        (1, 1, 65536 * 4)
    );
    let init = recs.iter().find(|r| r.kind() == kind::INIT).expect("init");
    assert_eq!(counts[0].comm(), init.comm());
}
