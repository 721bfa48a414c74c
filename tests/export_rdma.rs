//! RDMA-specific correlation on real recordings:
//! - doorbell → WQE association on fixtures/demo-gpu (GPU-initiated doorbells recorded on an
//!   H200 with the test-only emulated NIC, see fixtures/README.md): every doorbell whose WQEs are
//!   in the record gets exactly the WQE events of the same (endpoint, TSC), the recomputed
//!   producer-index ranges agree with the WQEBBs the preload counted, the counts equal the
//!   record's, and the Perfetto doorbell instants carry the association (checked with the
//!   official schema);
//! - the same doorbells checked without sigmatop's decoder or correlator: the doorbell words are
//!   decoded here (mlx5 layout, written from the format, not from src/decode) and their
//!   producer-index steps, QP by QP, are the ones tests/gpu/scenario.h was written to make (its
//!   WQE counts per doorbell), and each step equals the WQE events recorded with the doorbell.
mod common;

use common::Bounded;
#[path = "export_util.rs"]
mod util;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use sigmatop::correlate::doorbell::{DoorbellInfo, WqeLink};
use sigmatop::correlate::merge::Merged;
use sigmatop::correlate::{Correlation, RunOptions, Sink};
use sigmatop::event::Op;
use sigmatop::trace::reader::Recording;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name)
}

#[derive(Default)]
struct Capture {
    /// seq → what the correlator recomputed for the doorbell.
    doorbells: HashMap<u64, DoorbellInfo>,
    /// doorbell seq → WQEs linked to it (in order)
    links: HashMap<u64, Vec<(u32, u32, u64, u32)>>,
}

impl Sink for Capture {
    fn event(&mut self, _seq: u64, _m: &Merged, _peer: Option<u32>) {}
    fn doorbell(&mut self, seq: u64, info: &DoorbellInfo) {
        self.doorbells.insert(seq, *info);
    }
    fn doorbell_wqe(&mut self, link: &WqeLink, _seq: u64, m: &Merged) {
        self.links
            .entry(link.doorbell_seq)
            .or_default()
            .push((m.proc, m.ev.ep, m.ev.tsc, link.index));
    }
}

#[test]
fn demo_gpu_doorbells_are_associated_with_their_wqes() {
    let dirs = vec![fixture("demo-gpu")];
    let rec = Recording::open(&dirs).expect("open fixtures/demo-gpu");
    // What the record holds, straight from the files: per (proc, ep, tsc) the doorbell's WQEBBs
    // and the number of WQE events.
    let mut want_db: HashMap<(u32, u32, u64), u64> = HashMap::new();
    let mut want_wqes: HashMap<(u32, u32, u64), u32> = HashMap::new();
    let mut test_proc = None;
    for (i, p) in rec.processes.iter().enumerate() {
        let mut probs = Vec::new();
        for e in p.read_all_events(&mut probs) {
            match Op::from_u8(e.op) {
                Some(Op::GpuDoorbell) => {
                    assert!(
                        want_db.insert((i as u32, e.ep, e.tsc), e.bytes).is_none(),
                        "two doorbells share (ep, tsc)"
                    );
                }
                Some(o) if o.layer() == sigmatop::event::Layer::Mlx5 => {
                    *want_wqes.entry((i as u32, e.ep, e.tsc)).or_default() += 1
                }
                _ => {}
            }
        }
        assert!(probs.is_empty(), "{probs:?}");
        // The `test` scenario is the process with the multi-WQE doorbells (batched submission).
        if p.identity.pid == 456 {
            test_proc = Some(i as u32);
        }
    }
    let test_proc = test_proc.expect("the `test` process (pid 456) is in the fixture");
    let c = Correlation::new(&rec);
    let mut cap = Capture::default();
    let a = c.run(&RunOptions::default(), &mut cap);
    let d = &a.doorbells;
    let n_wqes: u64 = want_wqes.values().map(|&n| n as u64).sum();
    assert_eq!(
        d.doorbells,
        want_db.len() as u64,
        "doorbells = the record's"
    );
    assert_eq!(d.wqes, n_wqes, "WQE events = the record's");
    assert_eq!(d.wqes_associated, n_wqes, "every WQE found its doorbell");
    assert_eq!(d.mismatches, 0, "{d:?}");
    assert_eq!(d.pi_mismatches, 0);
    assert_eq!(d.orphan_wqes, 0);
    assert_eq!(cap.doorbells.len() as u64, d.doorbells);
    // Each doorbell's WQEs: the same (proc, ep, tsc), numbered 0.., as many as the record has.
    let mut by_key_seen = 0;
    let mut test_doorbells = 0;
    let mut test_multi = 0;
    for (seq, links) in &cap.links {
        let (p, ep, tsc, _) = links[0];
        let key = (p, ep, tsc);
        assert!(cap.doorbells.contains_key(seq));
        assert!(links.iter().all(|l| (l.0, l.1, l.2) == key));
        assert!(links.iter().enumerate().all(|(i, l)| l.3 == i as u32));
        assert_eq!(links.len() as u32, want_wqes[&key]);
        // In this recording every WQE is one WQEBB: WQEs = WQEBBs of the doorbell.
        assert_eq!(links.len() as u64, want_db[&key]);
        by_key_seen += 1;
        if p == test_proc {
            test_doorbells += 1;
            if links.len() > 1 {
                test_multi += 1;
            }
        }
    }
    let test_with_wqes = want_db
        .keys()
        .filter(|k| k.0 == test_proc && want_wqes.contains_key(k))
        .count();
    assert_eq!(
        test_doorbells, test_with_wqes,
        "every doorbell of `test` with WQEs"
    );
    assert!(test_multi >= 5, "batched submissions: {test_multi}");
    assert_eq!(by_key_seen, want_wqes.len());
    // Per QP, figures for the report.
    let q = d
        .qps
        .iter()
        .find(|q| q.process == test_proc && q.qpn == Some(0x1c1))
        .expect("QP 0x1c1 of `test`");
    assert_eq!(
        (q.doorbells, q.wqebbs, q.wqes),
        (12, 3297, 3297),
        "batched QP of `test`"
    );
    assert_eq!(
        (q.wqes_per_doorbell.min, q.wqes_per_doorbell.max),
        (1, 1024)
    );

    // The export: JSON figures, report line, Perfetto doorbell instants with their WQEs.
    let out = common::scratch("export-rdma-doorbells");
    let (j, _) = util::export(&dirs, &out);
    assert_eq!(j["doorbells"]["wqes_associated"], n_wqes);
    assert_eq!(j["doorbells"]["mismatches"], 0);
    let events = util::readable_events(&dirs);
    let trace = out.join("trace.pftrace");
    let sum = util::check_perfetto(&trace, events);
    assert_eq!(sum["errors"], 0);
    let py = util::perfetto_python();
    let script = r#"
import sys
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
t = pb.Trace(); t.ParseFromString(open(sys.argv[1], 'rb').read())
names = {}
for p in t.packet:
    for e in p.interned_data.debug_annotation_names: names[e.iid] = e.name
dbs = wqes = linked = with_ops = 0
for p in t.packet:
    if not p.HasField('track_event'): continue
    a = {names.get(x.name_iid): x for x in p.track_event.debug_annotations}
    if 'qpn' in a and 'wqes' in a:
        dbs += 1; wqes += a['wqes'].uint_value
        if 'opcodes' in a and a['opcodes'].string_value: with_ops += 1
    if 'doorbell_pi' in a: linked += 1
print(dbs, wqes, linked, with_ops)
"#;
    let o = Command::new(py)
        .args(["-c", script])
        .arg(&trace)
        .output_bounded()
        .expect("python");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Vec<u64> = String::from_utf8_lossy(&o.stdout)
        .split_whitespace()
        .map(|x| x.parse().unwrap())
        .collect();
    assert_eq!(
        v[0],
        want_db.len() as u64,
        "doorbell instants with qpn/wqes"
    );
    assert_eq!(v[1], n_wqes, "sum of the doorbells' wqes annotations");
    assert_eq!(v[2], n_wqes, "WQE instants naming their doorbell");
    assert_eq!(
        v[3],
        want_wqes.len() as u64,
        "doorbells listing their opcodes"
    );
    let (ok, report, _) = util::sigmatop(&["report".as_ref(), dirs[0].as_os_str()]);
    assert!(ok);
    assert!(
        report.contains(&format!("{n_wqes} of {n_wqes} WQEs associated")),
        "{report}"
    );
}

/// An mlx5 send doorbell as the event carries it (`addr`: the 8 bytes written, big-endian):
/// `opmod_idx_opcode` then `qpn_ds`. Decoded here from the format (reference/hardware-and-hooks.md
/// §2), independently of src/decode.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Word {
    idx: u16,
    opcode: u8,
    qpn: u32,
    ds: u8,
}

fn word(addr: u64) -> Word {
    let (w0, w1) = ((addr >> 32) as u32, addr as u32);
    Word {
        idx: (w0 >> 8) as u16,
        opcode: w0 as u8,
        qpn: w1 >> 8,
        ds: w1 as u8,
    }
}

impl Word {
    /// The producer index after this doorbell. A GPU word (NVSHMEM IBGDA, opcode and ds zero)
    /// carries it; a CPU word (BlueFlame) names its WQE, which spans ds 16-byte units, in
    /// 64-byte WQEBBs.
    fn end(&self) -> u16 {
        if self.opcode == 0 && self.ds == 0 {
            self.idx
        } else {
            self.idx
                .wrapping_add((u16::from(self.ds) * 16).div_ceil(64))
        }
    }
}

/// tests/gpu/scenario.h's `test` scenario, WQEs per doorbell on each QP, in order:
/// QP 0: 8 writes, 8 reads, 4 inline writes, 4 fetch-adds, 4 compare-swaps, one doorbell each,
/// then one write rung the DOCA way (the same word stored twice into the doorbell page: one
/// change of the page, so one doorbell for a poller of it);
/// QP 1: the in-flight sweep (sweep_n: 1, 2, 3, 16, 100, 255, 256, 511, 1000, 1024), the
/// BlueFlame write (gpu_workload.cu k_single, one WQE, a CPU word), the 32-thread batch of 4 each
/// (k_batch<<<1, 32>>>(w, 4)).
fn scenario_steps() -> [Vec<u16>; 2] {
    let qp0 = vec![1u16; 29];
    let mut qp1 = vec![1u16, 2, 3, 16, 100, 255, 256, 511, 1000, 1024];
    qp1.extend([1, 32 * 4]);
    [qp0, qp1]
}

#[test]
fn demo_gpu_doorbell_steps_are_the_scenarios_without_sigmatops_decoder() {
    let rec = Recording::open(&[fixture("demo-gpu")]).expect("open fixtures/demo-gpu");
    let p = rec
        .processes
        .iter()
        .find(|p| p.identity.pid == 456)
        .expect("the `test` process (pid 456)");
    let mut probs = Vec::new();
    let mut events = p.read_all_events(&mut probs);
    assert!(probs.is_empty(), "{probs:?}");
    events.sort_by_key(|e| e.tsc);
    // WQE events per (endpoint, TSC): the preload stamps a doorbell's WQEs with its TSC.
    let mut wqes: HashMap<(u32, u64), u64> = HashMap::new();
    for e in &events {
        if Op::from_u8(e.op)
            .is_some_and(|o| o != Op::GpuDoorbell && o.layer() == sigmatop::event::Layer::Mlx5)
        {
            *wqes.entry((e.ep, e.tsc)).or_default() += 1;
        }
    }
    // Doorbells per QP (by the QPN in the word), QPs in the order they first rang.
    let mut order: Vec<u32> = Vec::new();
    // (word, WQEBBs the preload counted, WQE events recorded with it, endpoint, TSC)
    type Ring = (Word, u64, u64, u32, u64);
    let mut rings: HashMap<u32, Vec<Ring>> = HashMap::new();
    for e in events.iter().filter(|e| e.op == Op::GpuDoorbell as u8) {
        let w = word(e.addr);
        if !order.contains(&w.qpn) {
            order.push(w.qpn);
        }
        let n = wqes.get(&(e.ep, e.tsc)).copied().unwrap_or(0);
        rings
            .entry(w.qpn)
            .or_default()
            .push((w, e.bytes, n, e.ep, e.tsc));
        assert_eq!(e.aux, u32::from(w.idx), "the event's index is the word's");
    }
    assert_eq!(order.len(), 2, "two QPs rang: {order:x?}");
    assert_eq!(
        order[1], 0x1c1,
        "QP 1 is the batched QP of the other checks"
    );
    for (q, want) in scenario_steps().iter().enumerate() {
        let r = &rings[&order[q]];
        // Producer-index steps from the words alone, from 0 (a new QP).
        let mut prev = 0u16;
        let steps: Vec<u16> = r
            .iter()
            .map(|(w, ..)| {
                let step = w.end().wrapping_sub(prev);
                prev = w.end();
                step
            })
            .collect();
        assert_eq!(
            &steps, want,
            "QP {q} ({:#x}): WQEBBs per doorbell",
            order[q]
        );
        for ((w, counted, recorded, ep, tsc), step) in r.iter().zip(&steps) {
            assert_eq!(
                *counted,
                u64::from(*step),
                "QP {q}: the preload's count for the doorbell of PI {} (ep {ep}, tsc {tsc})",
                w.end()
            );
            assert_eq!(
                *recorded,
                u64::from(*step),
                "QP {q}: WQE events recorded with the doorbell of PI {}",
                w.end()
            );
        }
        let cpu_words = r
            .iter()
            .filter(|(w, ..)| !(w.opcode == 0 && w.ds == 0))
            .count();
        assert_eq!(cpu_words, q, "QP 1 has the one BlueFlame (CPU) word");
    }
}

/// SYNTHETIC record (written with the core writer, not by the preload): no real RDMA NIC here,
/// and the soft-RoCE guest test is too slow to rerun for this. Three processes on two hosts:
/// A (host a) writes and reads through a QP connected to B (host b), whose peer is known by QPN;
/// A also has a QP whose peer is unknown, whose writes are attributed by searching every
/// process's regions; C registers a region with the same low rkey bits at other addresses.
#[test]
fn synthetic_one_sided_ops_are_attributed_to_the_region_owner() {
    use sigmatop::event::{
        ClockSample, EndpointDef, EndpointKind, EndpointUpdate, Identity, Layer, MemRegion, Peer,
        RawEvent,
    };
    use sigmatop::trace::ProcessRecord;
    use sigmatop::trace::writer::ProcessWriter;

    let root = common::scratch("export-rdma-mr-synthetic");
    let qp = |id: u32, qpn: u32| EndpointDef {
        id,
        layer: Layer::Ibverbs,
        kind: EndpointKind::VerbsQp,
        label: format!("qp {qpn:#x}"),
        transport: "RC".into(),
        peer: Peer::default(),
        qpn: Some(qpn),
        gpu: None,
        created_ns: 1_000,
    };
    let rtr = |id: u32, qpn: u32| EndpointUpdate {
        id,
        state: "RTR".into(),
        peer: Some(Peer {
            qpn: Some(qpn),
            text: format!("qpn {qpn:#x}"),
            ..Default::default()
        }),
        at_ns: 1_500,
    };
    let mr = |addr: u64, len: u64, rkey: u32, registered: bool, at_ns: u64| MemRegion {
        addr,
        len,
        lkey: rkey ^ 1,
        rkey,
        access: 0xf,
        registered,
        at_ns,
    };
    let write = |host: &str, pid: u32, recs: Vec<ProcessRecord>, evs: Vec<RawEvent>| {
        let mut w = ProcessWriter::create(&root, host, pid).unwrap();
        w.write_record(&ProcessRecord::Identity(Identity {
            host: host.into(),
            pid,
            exe: "synthetic".into(),
            ..Default::default()
        }))
        .unwrap();
        for (tsc, ns) in [(0u64, 0u64), (1_000_000, 1_000_000)] {
            w.write_record(&ProcessRecord::Clock(ClockSample {
                tsc,
                mono_ns: ns,
                real_ns: 1_000 + ns,
            }))
            .unwrap();
        }
        for r in recs {
            w.write_record(&r).unwrap();
        }
        if !evs.is_empty() {
            w.write_events(pid, &evs).unwrap();
        }
    };
    let op = |tsc: u64, ep: u32, op: Op, bytes: u64, addr: u64, rkey: u32| RawEvent {
        tsc,
        bytes,
        addr,
        ep,
        op: op as u8,
        flags: 0,
        aux: rkey,
    };
    // A: QP 0x10 ↔ B's QP 0x20; QP 0x11 connected to an untraced QPN.
    write(
        "a",
        100,
        vec![
            ProcessRecord::Endpoint(qp(1, 0x10)),
            ProcessRecord::Endpoint(qp(2, 0x11)),
            ProcessRecord::EndpointUpdate(rtr(1, 0x20)),
            ProcessRecord::EndpointUpdate(rtr(2, 0x999)),
            ProcessRecord::MemRegion(mr(0x5000, 0x1000, 0xa_0001, true, 1_100)),
        ],
        vec![
            op(10_000, 1, Op::VerbsWrite, 4096, 0x7000_0000, 0x1_1234),
            op(11_000, 1, Op::VerbsWrite, 100, 0x7000_0f00, 0x1_1234),
            op(12_000, 1, Op::VerbsRead, 512, 0x7000_0010, 0x1_1234),
            op(13_000, 1, Op::VerbsAtomicFa, 8, 0x7100_0000, 0x3_0042),
            // Outside B's region: not attributed (peer known; C's region is not looked at).
            op(14_000, 1, Op::VerbsWrite, 64, 0x9000_0000, 0x1_1234),
            // Peer unknown: found by search in C's regions.
            op(15_000, 2, Op::VerbsWrite, 2048, 0x9000_0000, 0x7_1234),
            // Peer unknown, rkey 0x1_1234 at an address in both B's and C's regions: ambiguous.
            op(16_000, 2, Op::VerbsWrite, 32, 0x7000_0000, 0x1_1234),
        ],
    );
    // B: QP 0x20 ↔ A's QP 0x10; two regions.
    write(
        "b",
        200,
        vec![
            ProcessRecord::Endpoint(qp(1, 0x20)),
            ProcessRecord::EndpointUpdate(rtr(1, 0x10)),
            ProcessRecord::MemRegion(mr(0x7000_0000, 0x1000, 0x1_1234, true, 1_200)),
            ProcessRecord::MemRegion(mr(0x7100_0000, 0x10, 0x3_0042, true, 1_200)),
            ProcessRecord::MemRegion(mr(0x7100_0000, 0x10, 0x3_0042, false, 900_000)),
        ],
        vec![],
    );
    // C: regions covering 0x9000_0000 and 0x7000_0000, the second with the very rkey of B's
    // region there (another host's NIC can hand out the same key): with whole 32-bit rkeys in
    // the events, only that makes the search ambiguous.
    write(
        "c",
        300,
        vec![
            ProcessRecord::MemRegion(mr(0x9000_0000, 0x100, 0x7_1234, true, 1_300)),
            ProcessRecord::MemRegion(mr(0x7000_0000, 0x10, 0x1_1234, true, 1_300)),
        ],
        vec![],
    );
    let rec = Recording::open(std::slice::from_ref(&root)).expect("open synthetic record");
    assert_eq!(rec.processes.len(), 3);
    let idx = |pid: u32| {
        rec.processes
            .iter()
            .position(|p| p.identity.pid == pid)
            .unwrap() as u32
    };
    let (a, b, c) = (idx(100), idx(200), idx(300));
    assert_eq!(rec.processes[b as usize].mrs.len(), 3);
    let corr = Correlation::new(&rec);
    let an = corr.run(&RunOptions::default(), &mut sigmatop::correlate::NoSink);
    let o = &an.one_sided;
    assert_eq!(o.ops, 7, "events {} problems {:?}", an.events, an.problems);
    assert_eq!(o.bytes, 4096 + 100 + 512 + 8 + 64 + 2048 + 32);
    assert_eq!(o.attributed_ops, 5, "{o:?}");
    assert_eq!(o.attributed_bytes, 4096 + 100 + 512 + 8 + 2048);
    assert_eq!((o.via_qp_peer_ops, o.via_search_ops), (4, 1));
    assert_eq!((o.no_region_ops, o.ambiguous_ops), (1, 1));
    assert_eq!(o.regions, 5);
    // Matrices: writes/atomics issuer → target, reads target → issuer.
    assert_eq!(
        an.tx_matrix.get(&(a, b)).copied(),
        Some(4096 + 100 + 8 + 64)
    );
    // The read moved B's bytes to A; A issued it.
    assert_eq!(an.read_matrix.get(&(a, b)).copied(), Some(512));
    assert_eq!(an.tx_matrix.get(&(b, a)).copied(), None);
    assert_eq!(an.tx_matrix.get(&(a, c)).copied(), Some(2048));
    // The MR table counts what hit each region.
    let hit: Vec<(u32, u64, u64)> = an
        .mrs
        .entries
        .iter()
        .filter(|m| m.ops > 0)
        .map(|m| (m.process, m.addr, m.bytes))
        .collect();
    assert!(hit.contains(&(b, 0x7000_0000, 4096 + 100 + 512)));
    assert!(hit.contains(&(c, 0x9000_0000, 2048)));

    // JSON and report through the CLI.
    let out = common::scratch("export-rdma-mr-synthetic-out");
    let (j, _) = util::export(std::slice::from_ref(&root), &out);
    let os = &j["one_sided"];
    assert_eq!(os["attributed_bytes"], 4096 + 100 + 512 + 8 + 2048);
    let eps = os["endpoints"].as_array().unwrap();
    let e1 = eps
        .iter()
        .find(|e| e["process_label"] == "synthetic 100@a" && e["ep"] == 1)
        .expect("A's QP 0x10");
    assert_eq!(e1["target"], "synthetic 200@b");
    assert_eq!(e1["unattributed_bytes"], 64);
    assert_eq!(os["mrs"].as_array().unwrap().len(), 5);
    assert_eq!(os["mrs"][0]["process_label"], "synthetic 200@b");
    assert_eq!(os["mrs"][0]["rkey"], 0x1_1234);
    let trace = out.join("trace.pftrace");
    util::check_perfetto(&trace, 7);
    let (ok, report, _) = util::sigmatop(&["report".as_ref(), root.as_os_str()]);
    assert!(ok);
    assert!(
        report.contains("one-sided bytes attributed to targets: 6.76 kB of 6.86 kB"),
        "{report}"
    );
}

/// GPU × GPU on fixtures/demo-gpu (real H200 recording, emulated NIC): each run's devx QPs are
/// connected to themselves (the emulated NIC loops a QP back to its own QPN). The `test` run
/// (pid 456) has its work queues in GPU memory (gpu0); the `bench-host` run (pid 467) in host
/// memory. Both runs number their QPs 0x1c0 and 0x1c1, so a QPN-only match across the two
/// processes would be wrong: each QP must find itself. Expected figures from the record's own
/// counters: writes/atomics (tx) and one-sided reads of the GPU QPs, all GPU → same GPU.
#[test]
fn demo_gpu_matrix_is_the_loopback_gpu_traffic() {
    use sigmatop::event::Dir;
    let dirs = vec![fixture("demo-gpu")];
    let rec = Recording::open(&dirs).expect("open fixtures/demo-gpu");
    let c = Correlation::new(&rec);
    // Every devx QP's peer QP is itself.
    let mut gpu_bytes = 0u64;
    for (i, p) in rec.processes.iter().enumerate() {
        for d in &p.endpoints {
            let e = c.topo.ep(i as u32, d.id).expect("endpoint in topology");
            assert_eq!(
                e.peer_ep,
                Some((i as u32, d.id)),
                "{} of {}",
                d.label,
                p.identity.pid
            );
            assert_eq!(e.peer, Some(i as u32));
        }
        let s = p.last_snapshot().expect("snapshot");
        for cnt in &s.counts {
            let gpu = p
                .endpoints
                .iter()
                .find(|d| d.id == cnt.ep)
                .and_then(|d| d.gpu);
            let moved = match Op::from_u8(cnt.op) {
                Some(o) if o.dir() == Dir::Tx => true,
                Some(Op::GpuRead | Op::VerbsRead) => true,
                _ => false,
            };
            if gpu == Some(0) && moved {
                assert_eq!(p.identity.pid, 456, "only `test` has GPU-resident queues");
                gpu_bytes += cnt.bytes;
            }
        }
    }
    assert_eq!(gpu_bytes, 28_133 + 1_675, "tx + reads of `test`'s QPs");
    let out = common::scratch("export-rdma-gpu-matrix");
    let (j, _) = util::export(&dirs, &out);
    assert_eq!(
        j["gpu_matrix"]["labels"],
        serde_json::json!(["456@vm:gpu0"])
    );
    assert_eq!(j["gpu_matrix"]["bytes"], serde_json::json!([[gpu_bytes]]));
    assert_eq!(j["gpu_unresolved_bytes"], 0);
    // The process matrix is diagonal: no bytes between the two runs.
    let pm = &j["process_matrix"]["bytes"];
    assert_eq!(pm[0][1], 0, "{pm}");
    assert_eq!(pm[1][0], 0, "{pm}");
    // Perfetto: one "GPU 0 bytes/s" counter track under the `test` run's "GPU 0" track, a
    // sample per snapshot that counted its GPU QPs.
    let test_proc = rec
        .processes
        .iter()
        .find(|p| p.identity.pid == 456)
        .expect("pid 456");
    let gpu_eps: Vec<u32> = test_proc
        .endpoints
        .iter()
        .filter(|d| d.gpu == Some(0))
        .map(|d| d.id)
        .collect();
    let want_samples = test_proc
        .snapshots
        .iter()
        .filter(|s| s.counts.iter().any(|c| gpu_eps.contains(&c.ep)))
        .count();
    let script = r#"
import sys
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
t = pb.Trace(); t.ParseFromString(open(sys.argv[1], 'rb').read())
tracks = {p.track_descriptor.uuid: p.track_descriptor for p in t.packet if p.HasField('track_descriptor')}
gpu = [u for u, d in tracks.items() if d.name == 'GPU 0 bytes/s']
parents = [tracks[tracks[u].parent_uuid].name for u in gpu]
samples = [p.track_event.counter_value for p in t.packet
           if p.HasField('track_event') and p.track_event.track_uuid in gpu]
print(len(gpu), parents[0] if parents else '-', len(samples), max(samples) if samples else 0)
"#;
    let o = Command::new(util::perfetto_python())
        .args(["-c", script])
        .arg(out.join("trace.pftrace"))
        .output_bounded()
        .expect("python");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Vec<String> = String::from_utf8_lossy(&o.stdout)
        .split_whitespace()
        .map(str::to_string)
        .collect();
    assert_eq!(v[0], "1", "one GPU counter track: {v:?}");
    assert_eq!(v[1], "GPU", "under the GPU track: {v:?}");
    assert_eq!(v[2], "0", "{v:?}");
    assert_eq!(v[3].parse::<usize>().unwrap(), want_samples, "{v:?}");
    assert!(v[4].parse::<i64>().unwrap() > 0, "{v:?}");
    let (ok, report, _) = util::sigmatop(&["report".as_ref(), dirs[0].as_os_str()]);
    assert!(ok);
    assert!(report.contains("GPU × GPU"), "{report}");
    assert!(report.contains("456@vm:gpu0"), "{report}");
}
