//! sigmatop's NCCL profiler plugin driven on the CPU the way NCCL 2.28 drives it
//! (tests/nccl_plugin_driver.c: the v5 descriptors laid out by the C compiler from NCCL's header
//! fields): every field NCCL passes lands where src/nccl/format.rs says, with the parent links;
//! NCCL's per-poll SendPeerWait state is kept once per step; the totals record closes the file.
mod common;

use common::Bounded;

use std::process::Command;

use sigmatop::nccl::format::{self, etype, kind};

#[test]
fn the_plugin_records_what_nccl_passes_it() {
    let dir = common::scratch("nccl-plugin");
    let drv = dir.join("driver");
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/nccl_plugin_driver.c");
    let out = Command::new("gcc")
        .args(["-O2", "-Wall", "-Werror", "-o"])
        .arg(&drv)
        .arg(&src)
        .arg("-ldl")
        .output_bounded()
        .expect("gcc");
    assert!(out.status.success(), "{}", common::stderr_of(&out));
    let rec = dir.join("rec");
    let pre = common::preload();
    let out = Command::new(&drv)
        .arg(&pre)
        .env("LD_PRELOAD", &pre)
        .env("SIGMATOP_RECORD", &rec)
        .env("SIGMATOP_SOCKET_DIR", dir.join("sock"))
        .output_bounded()
        .expect("driver");
    assert!(out.status.success(), "{}", common::stderr_of(&out));
    let so = common::stdout_of(&out);
    assert!(so.contains("mask=158") && so.contains("handles ok"), "{so}");
    let files: Vec<_> = std::fs::read_dir(&rec)
        .expect("record dir")
        .flatten()
        .flat_map(|h| std::fs::read_dir(h.path()).expect("host dir").flatten())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "stn"))
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let d = format::decode(&std::fs::read(&files[0]).expect("read"));
    assert!(d.problem.is_none(), "{:?}", d.problem);
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
    let coll = find(kind::START, etype::COLL);
    assert_eq!(coll.comm(), init.comm());
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
    let states: Vec<_> = d.recs.iter().filter(|r| r.kind() == kind::STATE).collect();
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
    assert_eq!(stops, [net.id(), step.id(), op.id(), coll.id()]);
    assert!(d.recs.iter().any(|r| r.kind() == kind::FINALIZE));
    let last = d.recs.last().expect("records");
    assert_eq!((last.kind(), last.p(0), last.p(1)), (kind::TOTALS, 0, 0));
}
