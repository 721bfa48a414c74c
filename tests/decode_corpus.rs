//! Replays the fuzz regression corpus (fuzz/regressions/<target>/) and a few thousand
//! deterministic pseudo-random and mutated inputs through every decoder, asserting no panic.
//!
//! This is the fuzzers' safety net where no fuzzer runs (CI, stable toolchains): each input goes
//! through the same `sigmatop::decode::harness` functions the cargo-fuzz targets call.
//! `SIGMATOP_WRITE_SEEDS=1 cargo test --test decode_corpus -- --ignored` rewrites the seed files.

use std::path::{Path, PathBuf};

use sigmatop::decode::devx::{CreateQpIn, CreateQpOut, DestroyQpIn, DevxUar, ModifyQpIn};
use sigmatop::decode::devx::{QpTransition, QpcPath, rq_type, st};
use sigmatop::decode::harness;

type Harness = fn(&[u8]);

const TARGETS: [(&str, Harness); 3] = [
    ("doorbell", harness::doorbell),
    ("wqe", harness::wqe),
    ("devx_mailbox", harness::devx_mailbox),
];

fn regressions_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz")
        .join("regressions")
        .join(target)
}

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }

    fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next() as u8).collect()
    }

    /// Flips, overwrites, truncates or extends a valid input.
    fn mutate(&mut self, mut v: Vec<u8>) -> Vec<u8> {
        for _ in 0..=self.below(4) {
            match self.below(5) {
                0 if !v.is_empty() => {
                    let i = self.below(v.len() as u64) as usize;
                    v[i] ^= 1 << self.below(8);
                }
                1 if !v.is_empty() => {
                    let i = self.below(v.len() as u64) as usize;
                    v[i] = [0, 0xff, 0x80, 0x7f, 1][self.below(5) as usize];
                }
                2 => {
                    let keep = self.below(v.len() as u64 + 1) as usize;
                    v.truncate(keep);
                }
                3 => {
                    let len = self.below(64) as usize;
                    let extra = self.bytes(len);
                    v.extend_from_slice(&extra);
                }
                _ => {}
            }
        }
        v
    }
}

fn seeds() -> Vec<(&'static str, &'static str, Vec<u8>)> {
    let mut out = Vec::new();

    // doorbell: [log_sq_size, pi_hi, pi_lo, words...]
    let gpu = |pi: u16| {
        let mut w = (u32::from(pi) << 8).to_be_bytes().to_vec();
        w.extend_from_slice(&(0xabcu32 << 8).to_be_bytes());
        w
    };
    let mut d = vec![6, 0xff, 0xf0];
    for pi in [0xfff4u16, 0xfff4, 0x0004, 0x0004, 0x0044, 0x0030] {
        d.extend(gpu(pi)); // batch, DOCA double ring, wrap, overrun, behind
    }
    out.push(("doorbell", "seed-gpu-wrap-double-ring", d));
    let mut d = vec![4, 0, 0];
    // CPU words: RDMA_WRITE ds 3 at 0, ds 6 at 1, duplicate, ds 0 (malformed).
    for w in [
        [0u8, 0, 0, 0x08, 0, 0x0a, 0xbc, 3],
        [0, 0, 1, 0x08, 0, 0x0a, 0xbc, 6],
        [0, 0, 1, 0x08, 0, 0x0a, 0xbc, 6],
        [0, 0, 9, 0x08, 0, 0x0a, 0xbc, 0],
    ] {
        d.extend_from_slice(&w);
    }
    out.push(("doorbell", "seed-cpu-words", d));

    // wqe: [log, qp_type, start(2), n(2), flags, ring...]
    let ctrl = |idx: u16, op: u8, ds: u8, opmod: u8| -> Vec<u8> {
        let mut c = vec![opmod, (idx >> 8) as u8, idx as u8, op, 0, 0x0a, 0xbc, ds];
        c.extend_from_slice(&[0, 0, 0, 0x08, 0, 0, 0, 0]);
        c
    };
    let raddr = |a: u64, k: u32| {
        let mut s = a.to_be_bytes().to_vec();
        s.extend_from_slice(&k.to_be_bytes());
        s.extend_from_slice(&[0; 4]);
        s
    };
    let data = |n: u32| {
        let mut s = n.to_be_bytes().to_vec();
        s.extend_from_slice(&7u32.to_be_bytes());
        s.extend_from_slice(&0x1000u64.to_be_bytes());
        s
    };
    // RC ring of 4: write, read, inline, atomic.
    let mut ring = Vec::new();
    ring.extend(ctrl(0, 0x08, 3, 0));
    ring.extend(raddr(0x5000, 1));
    ring.extend(data(64));
    ring.resize(64, 0);
    ring.extend(ctrl(1, 0x10, 3, 0));
    ring.extend(raddr(0x6000, 1));
    ring.extend(data(128));
    ring.resize(128, 0);
    ring.extend(ctrl(2, 0x08, 3, 0));
    ring.extend(raddr(0x7000, 1));
    ring.extend_from_slice(&(0x8000_0008u32).to_be_bytes());
    ring.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0]);
    ring.resize(192, 0);
    ring.extend(ctrl(3, 0x15, 4, 0x08));
    ring.extend(raddr(0x8000, 1));
    ring.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    ring.extend(data(4));
    let mut w = vec![2, 0, 0, 0, 0, 4, 0];
    w.extend_from_slice(&ring);
    out.push(("wqe", "seed-rc-four-shapes", w));
    // DCI full AV (2 WQEBBs) spanning the end of a ring of 2.
    let mut ring = vec![0u8; 128];
    let mut wqe = ctrl(1, 0x08, 6, 0);
    let mut av = vec![0u8; 48];
    av[8..12].copy_from_slice(&(0x8000_0123u32).to_be_bytes());
    wqe.extend(av);
    wqe.extend(raddr(0x9000, 2));
    wqe.extend(data(4096));
    for (i, b) in wqe.iter().enumerate() {
        ring[(64 + i) % 128] = *b;
    }
    let mut w = vec![1, 1, 0xff, 0xff, 0, 2, 0];
    // start 0xffff: slot 1 holds index 0xffff in this seed.
    ring[64 + 1] = 0xff;
    ring[64 + 2] = 0xff;
    w.extend_from_slice(&ring);
    out.push(("wqe", "seed-dci-full-av-spanning-end", w));

    // devx
    let q = CreateQpIn {
        st: st::DCI,
        pm_state: 3,
        pd: 0x12,
        log_sq_size: 10,
        uar_page: 0x77,
        user_index: 1,
        cqn_snd: 0x40,
        dbr_addr: 8,
        rq_type: rq_type::SRQ,
        dbr_umem_valid: true,
        dbr_umem_id: 5,
        wq_umem_offset: 0x1000,
        wq_umem_id: 6,
        wq_umem_valid: true,
        ..Default::default()
    };
    out.push(("devx_mailbox", "seed-create-qp-dci", q.encode().to_vec()));
    let q = CreateQpIn {
        st: st::RC,
        log_rq_size: 4,
        log_rq_stride: 2,
        log_sq_size: 6,
        ..Default::default()
    };
    out.push(("devx_mailbox", "seed-create-qp-rc-rq", q.encode().to_vec()));
    let m = ModifyQpIn {
        transition: QpTransition::Init2Rtr,
        qpn: 0x123,
        opt_param_mask: 0,
        path: Some(QpcPath {
            mtu: 5,
            remote_qpn: 0x456,
            grh: true,
            rgid: [0xfe; 16],
            port: 1,
            rmac: [2, 0, 0, 0, 0, 1],
            ..Default::default()
        }),
    };
    out.push(("devx_mailbox", "seed-init2rtr", m.encode().to_vec()));
    let m = ModifyQpIn {
        transition: QpTransition::ToErr,
        qpn: 9,
        opt_param_mask: 0,
        path: None,
    };
    out.push(("devx_mailbox", "seed-2err", m.encode()[..16].to_vec()));
    out.push((
        "devx_mailbox",
        "seed-destroy",
        DestroyQpIn { qpn: 9 }.encode().to_vec(),
    ));
    out.push((
        "devx_mailbox",
        "seed-create-out",
        CreateQpOut {
            status: 0,
            syndrome: 0,
            qpn: 0x1234,
        }
        .encode()
        .to_vec(),
    ));
    out.push((
        "devx_mailbox",
        "seed-devx-uar",
        DevxUar {
            reg_addr: 0x7f00_0000_0800,
            base_addr: 0x7f00_0000_0000,
            page_id: 3,
            mmap_off: 0x3000,
            comp_mask: 0,
        }
        .to_ne_bytes()
        .to_vec(),
    ));
    out
}

#[test]
fn regression_corpus_replays_without_panic() {
    let mut total = 0;
    for (target, run) in TARGETS {
        let dir = regressions_dir(target);
        let entries = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e} (the corpus is committed)", dir.display()));
        let mut n = 0;
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_file() {
                let bytes = std::fs::read(&path).unwrap();
                run(&bytes);
                n += 1;
            }
        }
        assert!(n > 0, "{}: empty corpus", dir.display());
        total += n;
    }
    assert!(total >= 3);
}

#[test]
fn seeds_are_committed() {
    for (target, name, bytes) in seeds() {
        let path = regressions_dir(target).join(format!("{name}.bin"));
        let on_disk = std::fs::read(&path).unwrap_or_default();
        assert_eq!(
            on_disk,
            bytes,
            "{} is stale: SIGMATOP_WRITE_SEEDS=1 cargo test --test decode_corpus -- --ignored",
            path.display()
        );
    }
}

#[test]
#[ignore = "writes fuzz/regressions/*/seed-*.bin; run with SIGMATOP_WRITE_SEEDS=1"]
fn write_seeds() {
    if std::env::var_os("SIGMATOP_WRITE_SEEDS").is_none() {
        return;
    }
    for (target, name, bytes) in seeds() {
        let dir = regressions_dir(target);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("{name}.bin")), bytes).unwrap();
    }
}

#[test]
fn random_inputs_never_panic() {
    let mut rng = Rng(0x5167_4d41_544f_5021);
    for (_, run) in TARGETS {
        for _ in 0..3000 {
            let len = match rng.below(4) {
                0 => rng.below(16),
                1 => rng.below(300),
                _ => rng.below(4200),
            } as usize;
            let input = rng.bytes(len);
            run(&input);
        }
    }
}

#[test]
fn mutated_seeds_never_panic() {
    let mut rng = Rng(0x0ddb_a11c_afe0_0001);
    let seeds = seeds();
    for _ in 0..4000 {
        let (target, _, bytes) = &seeds[rng.below(seeds.len() as u64) as usize];
        let input = rng.mutate(bytes.clone());
        for (name, run) in TARGETS {
            if name == *target {
                run(&input);
            }
        }
    }
}

#[test]
fn wqe_seeds_parse_as_intended() {
    use sigmatop::decode::wqe::{QpType, WqeRange, walk_new_wqes};
    let seeds = seeds();
    let ring_of = |name: &str| {
        let s = seeds.iter().find(|s| s.1 == name).unwrap();
        s.2[7..].to_vec()
    };
    let rc = ring_of("seed-rc-four-shapes");
    let range = WqeRange {
        start: 0,
        end: 4,
        wqebbs: 4,
        last_wqe: None,
    };
    let out = walk_new_wqes(&rc, 4, &range, QpType::Rc);
    assert!(out.is_complete(), "{:?}", out.error);
    let bytes: Vec<u64> = out.wqes.iter().map(|w| w.bytes()).collect();
    assert_eq!(bytes, [64, 128, 8, 4]);

    let dci = ring_of("seed-dci-full-av-spanning-end");
    let range = WqeRange {
        start: 0xffff,
        end: 1,
        wqebbs: 2,
        last_wqe: None,
    };
    let out = walk_new_wqes(&dci, 2, &range, QpType::Dci);
    assert!(out.is_complete(), "{:?}", out.error);
    assert_eq!(out.wqes[0].raddr.map(|r| r.raddr), Some(0x9000));
    assert_eq!(out.wqes[0].bytes(), 4096);
}
