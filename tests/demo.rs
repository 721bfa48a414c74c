//! `sigmatop demo` as a user types it: the bundled recordings replay from any directory, headless
//! with their exact figures, and in the dashboard in tmux. `sigmatop demo` (nccl) is
//! tests/gpu/moe_dispatch.py's MoE dispatch/combine over NCCL, 4 ranks on an H200 over the
//! software NIC (fixtures/nccl/moe_np4): its figures here come from the splits the program chose
//! (splits.json) and the NIC's own log (nic/), not from sigmatop's record. `sigmatop demo mpi` is
//! the 4-rank Open MPI MoE-style exchange of fixtures/src/moe_demo.c, recorded by
//! fixtures/make-demo.sh with 120 steps: its figures here are computed from that program's
//! `tokens()` (rank src sends tokens(src, dst, step) 4-byte tokens to dst at each step), not read
//! from the recording.
//! `sigmatop demo gpu` is NVIDIA's
//! NVSHMEM shmem_put_bw with 2 PEs on an H200 over the software mlx5 NIC
//! (fixtures/nvshmem/put_bw.gpumem.traced: 150 RDMA writes per QP on two QPs, 2,150,400 bytes,
//! as its NIC log says and tests/gpu_nvshmem.rs checks), and its doorbell view shows them.
mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::Bounded;
use common::tmux::Tmux;
use common::{summary_bytes, summary_times, words};

/// fixtures/src/moe_demo.c's tokens(): how many 4-byte tokens rank `src` sends to `dst` at `step`.
fn tokens(src: u64, dst: u64, step: u64) -> u64 {
    let base = 2048 + 512 * ((src + step) % 4);
    let wave = if step % 40 < 20 {
        (step % 20) * 256
    } else {
        (20 - step % 20) * 256
    };
    (base + wave) * if dst == 2 { 3 } else { 1 }
}

/// fixtures/make-demo.sh ran it with 4 ranks and 120 steps.
const RANKS: u64 = 4;
const STEPS: u64 = 120;

/// Bytes rank `src` sent rank `dst` over the whole run.
fn pair(src: u64, dst: u64) -> u64 {
    if src == dst {
        return 0;
    }
    (0..STEPS).map(|s| 4 * tokens(src, dst, s)).sum()
}

fn egress(r: u64) -> u64 {
    (0..RANKS).map(|d| pair(r, d)).sum()
}

fn ingress(r: u64) -> u64 {
    (0..RANKS).map(|s| pair(s, r)).sum()
}

#[test]
fn demo_mpi_headless_has_the_moe_workloads_figures() {
    let o = Command::new(common::sigmatop_bin())
        .args(["demo", "mpi", "--headless"])
        .current_dir(std::env::temp_dir())
        .output_bounded()
        .expect("sigmatop demo mpi");
    assert!(o.status.success(), "{}", common::stderr_of(&o));
    let out = common::stdout_of(&o);
    let lines: Vec<&str> = out.lines().collect();
    let posts = (STEPS * (RANKS - 1)).to_string();
    for r in 0..RANKS {
        // host pid rank program tx rx tx-ops rx-ops lost: one MPI_Isend and one MPI_Irecv per
        // peer per step.
        let at = lines
            .iter()
            .position(|l| {
                let w = words(l);
                w.len() > 3 && w[2] == r.to_string() && w[3] == "moe_demo"
            })
            .unwrap_or_else(|| panic!("no row for rank {r}:\n{out}"));
        let w = words(lines[at]).join(" ");
        assert!(
            w.ends_with(&format!(
                "moe_demo {} {} {posts} {posts} 0",
                summary_bytes(egress(r)),
                summary_bytes(ingress(r))
            )),
            "rank {r}: {w}"
        );
        let block: Vec<String> = lines[at + 1..]
            .iter()
            .take_while(|l| l.starts_with("    "))
            .map(|l| words(l).join(" "))
            .collect();
        for d in (0..RANKS).filter(|&d| d != r) {
            let want = format!("r{d} tag_send {}", summary_times(STEPS, pair(r, d)));
            assert!(
                block.iter().any(|l| l.ends_with(&want)),
                "rank {r}: {want:?} in {block:?}"
            );
        }
        let want = format!(
            "tag_recv {}",
            summary_times(STEPS * (RANKS - 1), ingress(r))
        );
        assert!(
            block.iter().any(|l| l.ends_with(&want)),
            "rank {r}: {want:?}"
        );
    }
    let all: u64 = (0..RANKS).map(egress).sum();
    let ops = STEPS * (RANKS - 1) * RANKS;
    let total = format!(
        "total: ▲ {b} in {ops} ops, ▼ {b} in {ops} ops; events lost 0",
        b = summary_bytes(all)
    );
    assert!(out.contains(&total), "{total:?}:\n{out}");
    // The rank × rank matrix of the summary, row by row, with each row's egress.
    for r in 0..RANKS {
        let row = lines
            .iter()
            .find(|l| words(l).first() == Some(&format!("r{r}")))
            .unwrap_or_else(|| panic!("no matrix row r{r}:\n{out}"));
        let mut want = vec![format!("r{r}")];
        for d in 0..RANKS {
            if d == r {
                want.push("·".into());
            } else {
                want.extend(summary_bytes(pair(r, d)).split(' ').map(str::to_string));
            }
        }
        want.extend(summary_bytes(egress(r)).split(' ').map(str::to_string));
        assert_eq!(words(row), want, "matrix row r{r}");
    }
}

#[test]
fn demo_mpi_as_typed_replays_to_the_moe_workloads_figures() {
    // `sigmatop demo mpi --once` at the recorded speed: 6 s of replay.
    let cmd = format!(
        "{} demo mpi --once --speed 1",
        common::sigmatop_bin().display()
    );
    let Some(t) = Tmux::start("demo-typed", &cmd) else {
        return;
    };
    let limit = Duration::from_secs(40);
    t.wait_for("the replay to finish", limit, |s| {
        s.contains("replay finished")
    });
    t.keys(&["5"]);
    let m = t.wait_for("the matrix", limit, |s| s.contains("rank × rank"));
    let matrix: Vec<Vec<u64>> = (0..RANKS)
        .map(|r| (0..RANKS).map(|d| pair(r, d)).collect())
        .collect();
    common::assert_rank_matrix(&m, &matrix);
    t.keys(&["q"]);
    t.wait_for("exit status 0", limit, |s| s.contains("SIGMATOP-EXIT=0"));
}

#[test]
fn demo_gpu_headless_has_the_perftests_figures() {
    let o = Command::new(common::sigmatop_bin())
        .args(["demo", "gpu", "--headless"])
        .current_dir(std::env::temp_dir())
        .output_bounded()
        .expect("sigmatop demo gpu");
    assert!(o.status.success(), "{}", common::stderr_of(&o));
    let out = common::stdout_of(&o);
    let pe0 = out
        .lines()
        .find(|l| l.contains("shmem_put_bw") && l.contains(" 0 "))
        .unwrap_or_else(|| panic!("PE 0's row:\n{out}"));
    assert!(pe0.contains("2.15 MB"), "{pe0}");
    assert_eq!(
        out.matches("RDMA_WRITE 150×7.17 kB = 1.08 MB").count(),
        2,
        "two QPs, 150 writes of 7168 B each:\n{out}"
    );
    assert!(
        out.contains("→ vm pid 595 r1"),
        "PE 0's QPs reach PE 1:\n{out}"
    );
}

#[test]
fn demo_gpu_doorbells_in_the_dashboard() {
    let cmd = format!("{} demo gpu --speed 0", common::sigmatop_bin().display());
    let Some(t) = Tmux::start("demo-gpu", &cmd) else {
        return;
    };
    let limit = Duration::from_secs(30);
    t.wait_for("the dashboard", limit, |s| s.contains("demo gpu"));
    t.keys(&["d"]);
    let s = t.wait_for("GPU doorbells", limit, |s| {
        s.contains("GPU0") && s.contains("RDMA_WRITE")
    });
    assert!(!s.contains("no GPU-initiated doorbells"), "{s}");
    t.keys(&["q"]);
    t.wait_for("exit status 0", limit, |s| s.contains("SIGMATOP-EXIT=0"));
}

#[test]
fn the_cpu_demo_points_at_the_gpu_one() {
    let cmd = format!("{} demo --speed 0", common::sigmatop_bin().display());
    let Some(t) = Tmux::start("demo-cpu", &cmd) else {
        return;
    };
    let limit = Duration::from_secs(30);
    t.wait_for("the dashboard", limit, |s| s.contains("demo"));
    t.keys(&["d"]);
    t.wait_for("the hint", limit, |s| {
        s.contains("`sigmatop demo gpu` replays GPU doorbells")
    });
    t.keys(&["q"]);
}

/// What fixtures/nccl/moe_np4 says without sigmatop: per (src rank, dst rank) the data bytes the
/// program's splits give (dispatch: S[src][dst] token copies of `hidden` bf16 values src → dst;
/// combine: the same copies dst → src), and from the NIC's own log (nic/testnic-PID.log, one line
/// per executed WQE) every byte and operation each process put on the wire.
struct Moe {
    n: usize,
    hot: usize,
    /// Bytes of the splits, src → dst.
    data: Vec<Vec<u64>>,
    /// The NIC: bytes src → dst of every WQE, of its writes with immediate (NCCL's data), and the
    /// count of its plain RDMA writes (NCCL's 64-byte FIFO entries, receiver → sender).
    wire: Vec<Vec<u64>>,
    imm: Vec<Vec<u64>>,
    fifo: Vec<Vec<u64>>,
    /// Per rank: WQEs posted, receives completed (writes with immediate aimed at it).
    tx_ops: Vec<u64>,
    rx_ops: Vec<u64>,
}

fn moe() -> Moe {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/nccl/moe_np4");
    let sp: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("splits.json")).expect("splits.json"),
    )
    .expect("splits.json parses");
    let n = sp["world"].as_u64().expect("world") as usize;
    let hot = sp["hot"].as_u64().expect("hot") as usize;
    let per_token =
        sp["hidden"].as_u64().expect("hidden") * sp["elem_bytes"].as_u64().expect("elem");
    let mut data = vec![vec![0u64; n]; n];
    for step in sp["splits"].as_array().expect("splits") {
        for (i, row) in step.as_array().expect("row").iter().enumerate() {
            for (j, c) in row.as_array().expect("cells").iter().enumerate() {
                if i != j {
                    let b = c.as_u64().expect("count") * per_token;
                    data[i][j] += b; // dispatch
                    data[j][i] += b; // combine
                }
            }
        }
    }
    // Rank (= node softhostR) of each pid: the record's directories rec/softhostR/PID.
    let mut rank_of = std::collections::HashMap::new();
    for h in std::fs::read_dir(dir.join("rec")).expect("rec") {
        let h = h.expect("entry");
        let name = h.file_name().to_string_lossy().to_string();
        let r: usize = name
            .trim_start_matches("softhost")
            .parse()
            .expect("softhostN");
        for p in std::fs::read_dir(h.path()).expect("host dir") {
            let p = p.expect("entry");
            if let Ok(pid) = p.file_name().to_string_lossy().parse::<u32>() {
                rank_of.insert(pid, r);
            }
        }
    }
    assert_eq!(rank_of.len(), n, "one process per rank: {rank_of:?}");
    let z = || vec![vec![0u64; n]; n];
    let (mut wire, mut imm, mut fifo) = (z(), z(), z());
    let (mut tx_ops, mut rx_ops) = (vec![0u64; n], vec![0u64; n]);
    for f in std::fs::read_dir(dir.join("nic")).expect("nic") {
        let text = std::fs::read_to_string(f.expect("entry").path()).expect("NIC log");
        for line in text.lines() {
            let kv: std::collections::HashMap<&str, &str> = line
                .split_whitespace()
                .filter_map(|w| w.split_once('='))
                .collect();
            assert_eq!(kv["status"], "0x00", "{line}");
            let src = rank_of[&kv["pid"].parse::<u32>().expect("pid")];
            let dst = rank_of[&kv["rpid"].parse::<u32>().expect("rpid")];
            let len: u64 = kv["len"].parse().expect("len");
            wire[src][dst] += len;
            tx_ops[src] += 1;
            match kv["op"] {
                "RDMA_WRITE_IMM" => {
                    imm[src][dst] += len;
                    rx_ops[dst] += 1;
                }
                "RDMA_WRITE" => {
                    assert_eq!(len, 64, "NCCL's FIFO entries are 64 bytes: {line}");
                    fifo[src][dst] += 1;
                }
                op => panic!("an operation NCCL's IB transport does not post here: {op}"),
            }
        }
    }
    Moe {
        n,
        hot,
        data,
        wire,
        imm,
        fifo,
        tx_ops,
        rx_ops,
    }
}

#[test]
fn demo_nccl_fixture_is_the_programs_splits_on_the_wire() {
    let m = moe();
    // Every data byte NCCL wrote is one the splits asked for, and the rest are FIFO entries.
    assert_eq!(m.imm, m.data, "writes with immediate = the splits' bytes");
    for i in 0..m.n {
        for j in 0..m.n {
            assert_eq!(m.wire[i][j], m.data[i][j] + 64 * m.fifo[i][j], "{i} → {j}");
        }
    }
    // The skew the program chose: the hot rank's experts get most token copies.
    let egress: Vec<u64> = m.wire.iter().map(|r| r.iter().sum()).collect();
    let max = (0..m.n).max_by_key(|&i| egress[i]).expect("ranks");
    assert_eq!(max, m.hot);
}

#[test]
fn demo_headless_has_the_nccl_moe_figures() {
    let m = moe();
    let o = Command::new(common::sigmatop_bin())
        .args(["demo", "--headless"])
        .current_dir(std::env::temp_dir())
        .output_bounded()
        .expect("sigmatop demo");
    assert!(o.status.success(), "{}", common::stderr_of(&o));
    let out = common::stdout_of(&o);
    let lines: Vec<&str> = out.lines().collect();
    let egress: Vec<u64> = m.wire.iter().map(|r| r.iter().sum()).collect();
    let ingress: Vec<u64> = (0..m.n)
        .map(|j| (0..m.n).map(|i| m.data[i][j]).sum())
        .collect();
    for r in 0..m.n {
        // host pid rank program tx rx tx-ops rx-ops lost: tx = every byte the NIC sent for it,
        // rx = the data written into it with immediate (the receives it completed).
        let row = lines
            .iter()
            .map(|l| words(l))
            .find(|w| w.len() > 3 && w[0] == format!("softhost{r}") && w[2] == r.to_string())
            .unwrap_or_else(|| panic!("no row for rank {r}:\n{out}"));
        let want = format!(
            "python3.12 {} {} {} {} 0",
            summary_bytes(egress[r]),
            summary_bytes(ingress[r]),
            m.tx_ops[r],
            m.rx_ops[r]
        );
        assert!(
            row.join(" ").ends_with(&want),
            "rank {r}: {row:?}, want {want}"
        );
    }
    // The node × node matrix, row by row (each rank is its own node), with the hot node's
    // max/mean mark computed from the NIC's bytes.
    let mean = egress.iter().sum::<u64>() as f64 / m.n as f64;
    let node_at = lines
        .iter()
        .position(|l| l.starts_with("node × node"))
        .unwrap_or_else(|| panic!("no node matrix:\n{out}"));
    for (r, &eg) in egress.iter().enumerate() {
        let row = lines[node_at..]
            .iter()
            .find(|l| words(l).first() == Some(&format!("softhost{r}")))
            .unwrap_or_else(|| panic!("no node row softhost{r}:\n{out}"));
        let mut want = vec![format!("softhost{r}")];
        for d in 0..m.n {
            if d == r {
                want.push("·".into());
            } else {
                want.extend(summary_bytes(m.wire[r][d]).split(' ').map(str::to_string));
            }
        }
        want.extend(summary_bytes(eg).split(' ').map(str::to_string));
        if r == m.hot {
            want.extend([
                "◀".to_string(),
                format!("{:.2}×", eg as f64 / mean),
                "mean".into(),
            ]);
        }
        assert_eq!(words(row), want, "node row softhost{r}");
    }
    // The warnings name the hot node, egress and ingress, and no other node, with the figure of
    // the matrix above: the NIC's bytes over the whole record (issue 39, items 1 and 7: they said
    // 1.87× beside a ◀ 1.83×, rates of each process over its own lifetime). Ingress is the
    // column's sum, every byte the NIC wrote into the rank; its ◀ under the matrix says the same.
    let wire_in: Vec<u64> = (0..m.n)
        .map(|j| (0..m.n).map(|i| m.wire[i][j]).sum())
        .collect();
    let in_mean = wire_in.iter().sum::<u64>() as f64 / m.n as f64;
    let in_mark = format!(
        "◀ softhost{} {:.2}× mean",
        m.hot,
        wire_in[m.hot] as f64 / in_mean
    );
    assert!(
        lines[node_at..]
            .iter()
            .any(|l| l.trim_start().starts_with("ingress") && l.ends_with(&in_mark)),
        "{in_mark:?} under the node matrix:\n{out}"
    );
    for (dir, ratio) in [
        ("egress", egress[m.hot] as f64 / mean),
        ("ingress", wire_in[m.hot] as f64 / in_mean),
    ] {
        let w: Vec<&&str> = lines
            .iter()
            .filter(|l| l.starts_with("warning: softhost") && l.contains(&format!(" {dir} ")))
            .collect();
        assert_eq!(w.len(), 1, "one node {dir} warning:\n{out}");
        let rest = w[0]
            .strip_prefix(&format!("warning: softhost{} {dir} ", m.hot))
            .unwrap_or_else(|| panic!("names softhost{}: {}", m.hot, w[0]));
        // Said over what (the dashboard's are over its window).
        assert_eq!(
            rest,
            format!("{ratio:.2}× mean over the whole record"),
            "{}",
            w[0]
        );
        assert!(ratio >= 1.5, "{ratio}");
    }
}

/// The demo plays again and again (4 s after its end, from an empty view): after the second
/// pass the matrix holds one run's figures, not two.
#[test]
fn demo_plays_again_from_an_empty_view() {
    let cmd = format!("{} demo mpi --speed 4", common::sigmatop_bin().display());
    let Some(t) = Tmux::start("demo-loop", &cmd) else {
        return;
    };
    let limit = Duration::from_secs(60);
    t.wait_for("the first pass", limit, |s| s.contains("demo pass 1"));
    t.wait_for("the second pass to end", limit, |s| {
        s.contains("demo pass 2") && s.contains("ended, plays again")
    });
    // Paused, it stays there.
    t.keys(&["Space", "5"]);
    let m = t.wait_for("the matrix", limit, |s| s.contains("rank × rank"));
    let matrix: Vec<Vec<u64>> = (0..RANKS)
        .map(|r| (0..RANKS).map(|d| pair(r, d)).collect())
        .collect();
    common::assert_rank_matrix(&m, &matrix);
    t.keys(&["q"]);
    t.wait_for("exit status 0", limit, |s| s.contains("SIGMATOP-EXIT=0"));
}

#[test]
fn demo_as_typed_opens_on_the_nccl_moe_matrix() {
    let m = moe();
    let cmd = format!("{} demo --speed 0", common::sigmatop_bin().display());
    let Some(t) = Tmux::start("demo-nccl", &cmd) else {
        return;
    };
    let limit = Duration::from_secs(30);
    t.wait_for("the dashboard with the hot node's warning", limit, |s| {
        s.contains("demo") && s.contains(&format!("softhost{} egress", m.hot))
    });
    t.keys(&["5"]);
    // Each rank is its own node, so the matrix view opens on node × node; the hot row carries
    // its max/mean mark (bytes: the NIC's), and the warning bar names the hot node.
    let s = t.wait_for("the node matrix", limit, |s| s.contains("node × node"));
    let egress: Vec<u64> = m.wire.iter().map(|r| r.iter().sum()).collect();
    let mean = egress.iter().sum::<u64>() as f64 / m.n as f64;
    for (r, &eg) in egress.iter().enumerate() {
        let row = s
            .lines()
            .find(|l| words(l).first() == Some(&format!("softhost{r}")))
            .unwrap_or_else(|| panic!("no row softhost{r}:\n{s}"));
        let mut want = vec![format!("softhost{r}")];
        for d in 0..m.n {
            want.push(if d == r {
                "·".into()
            } else {
                common::table_si(m.wire[r][d])
            });
        }
        want.push(common::table_si(eg));
        if r == m.hot {
            want.extend(["◀".to_string(), format!("{:.2}×", eg as f64 / mean)]);
        }
        assert_eq!(words(row), want, "node row softhost{r}");
    }
    let ingress = s
        .lines()
        .find(|l| l.contains("▼ ingress"))
        .unwrap_or_else(|| panic!("no ingress row:\n{s}"));
    let mut want = vec!["▼".to_string(), "ingress".to_string()];
    want.extend((0..m.n).map(|j| common::table_si((0..m.n).map(|i| m.wire[i][j]).sum())));
    assert_eq!(words(ingress), want, "ingress row");
    assert!(s.contains(&format!("⚠ softhost{} egress", m.hot)), "{s}");
    t.keys(&["q"]);
    t.wait_for("exit status 0", limit, |s| s.contains("SIGMATOP-EXIT=0"));
}

/// fixtures/nccl/moe_cpu_np4 (`sigmatop demo collectives`): tests/programs/nccl_a2a.c as
/// fixtures/make-nccl-cpu-demo.sh ran it (args: -n 4 -i 24 -c 256 -k 1024 -H 2 -s 900 -l 3 -L 120):
/// per step an AlltoAll of 256 floats per rank, then a user's group of a Send to and a Recv from
/// every other rank of 1024 floats, 3× to the hot rank 2; rank 3 computes 120 ms longer.
struct CpuMoe {
    ranks: u64,
    steps: u64,
    count: u64,
    tokens: u64,
    hot: u64,
}

fn cpu_moe() -> (CpuMoe, std::path::PathBuf) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/nccl/moe_cpu_np4");
    let args = std::fs::read_to_string(dir.join("args")).expect("args");
    let t: Vec<&str> = args.split_whitespace().collect();
    let get = |k: &str| -> u64 {
        t.iter()
            .position(|x| *x == k)
            .and_then(|i| t[i + 1].parse().ok())
            .unwrap_or_else(|| panic!("{k} in {args}"))
    };
    (
        CpuMoe {
            ranks: get("-n"),
            steps: get("-i"),
            count: get("-c"),
            tokens: get("-k"),
            hot: get("-H"),
        },
        dir,
    )
}

/// The collectives demo's record: per rank the AlltoAll and the Group named as the program made
/// them, their bytes from its arguments, every work request joined (their bytes the NIC's log),
/// and the straggler last at every AlltoAll.
#[test]
fn demo_collectives_fixture_names_the_calls_as_the_program_made_them() {
    let (m, dir) = cpu_moe();
    let rec = sigmatop::trace::reader::Recording::open(&[dir.join("rec")]).expect("fixture");
    let n = sigmatop::nccl::model::load(&rec).expect("NCCL files");
    assert_eq!(n.join.wrs_unjoined, 0, "{:?}", n.join);
    // pid → bytes the NIC wrote for it.
    let mut nic: std::collections::BTreeMap<u32, u64> = Default::default();
    for e in std::fs::read_dir(dir.join("nic")).expect("nic").flatten() {
        for l in std::fs::read_to_string(e.path()).expect("log").lines() {
            let f = |k: &str| {
                l.split_whitespace()
                    .find_map(|x| x.strip_prefix(k))
                    .map(str::to_string)
            };
            if let (Some(pid), Some(len)) = (f("pid="), f("len=")) {
                *nic.entry(pid.parse().expect("pid")).or_default() +=
                    len.parse::<u64>().expect("len");
            }
        }
    }
    for p in &rec.processes {
        let rank = p.identity.rank.expect("RANK") as u64;
        let rows: Vec<_> = n
            .collectives
            .iter()
            .filter(|c| c.pid == p.identity.pid && c.part_of.is_empty())
            .collect();
        let a2a = rows
            .iter()
            .find(|c| c.func == "AlltoAll")
            .expect("an AlltoAll row");
        assert_eq!((a2a.count, a2a.bytes), (m.steps, m.steps * m.count * 4));
        let sent: u64 = (0..m.ranks)
            .filter(|&q| q != rank)
            .map(|q| m.tokens * 4 * if q == m.hot { 3 } else { 1 })
            .sum();
        let g = rows
            .iter()
            .find(|c| c.func == "Group")
            .expect("a Group row");
        assert_eq!((g.count, g.bytes), (m.steps, m.steps * sent), "rank {rank}");
        assert_eq!(rows.len(), 2, "{rows:?}");
        let parts: u64 = n
            .collectives
            .iter()
            .filter(|c| c.pid == p.identity.pid && c.part_of == "AlltoAll")
            .map(|c| c.count)
            .sum();
        assert_eq!(
            parts,
            m.steps * 2 * (m.ranks - 1),
            "a Send and a Recv per other rank"
        );
        assert_eq!(
            Some(a2a.wr_bytes + g.wr_bytes),
            nic.get(&p.identity.pid).copied(),
            "rank {rank}: the work requests' bytes = the NIC's"
        );
    }
    // At every AlltoAll the straggler's host call came last.
    for s in 1..=m.steps {
        let last = n
            .calls
            .iter()
            .filter(|c| c.func == "AlltoAll" && c.seq == s)
            .max_by_key(|c| c.host_call_ns)
            .expect("the AlltoAll on every rank");
        assert_eq!(last.rank, 3, "AlltoAll #{s}");
    }
}

/// `sigmatop demo collectives`, `c`: the AlltoAll and Group rows of 4 ranks with the program's
/// counts and bytes, every call compared for arrival, the straggler named last.
#[test]
fn demo_collectives_shows_the_alltoall_rows_and_arrivals() {
    let (m, _) = cpu_moe();
    let cmd = format!(
        "{} demo collectives --speed 0",
        common::sigmatop_bin().display()
    );
    let Some(t) = Tmux::start("demo-coll", &cmd) else {
        return;
    };
    let limit = Duration::from_secs(30);
    t.wait_for("the dashboard", limit, |s| s.contains("demo collectives"));
    t.keys(&["c"]);
    let s = t.wait_for("the Collectives view", limit, |s| {
        s.contains("[c Collectives]") && s.contains("AlltoAll")
    });
    let row = s
        .lines()
        .find(|l| l.contains("AlltoAll") && l.contains("4/4"))
        .unwrap_or_else(|| panic!("an AlltoAll row of 4 ranks:\n{s}"));
    let w = words(row);
    assert!(w.contains(&m.steps.to_string()), "{} calls: {row}", m.steps);
    assert!(
        w.contains(&common::table_si(m.steps * m.count * 4)),
        "bytes per rank: {row}\n{s}"
    );
    assert!(
        s.lines().any(|l| l.contains("Group") && l.contains("4/4")),
        "{s}"
    );
    assert!(
        s.contains(&format!("{} compared", 2 * m.steps)),
        "every AlltoAll and Group compared:\n{s}"
    );
    assert!(s.contains("last: r3"), "the straggler:\n{s}");
    t.keys(&["q"]);
    t.wait_for("exit status 0", limit, |s| s.contains("SIGMATOP-EXIT=0"));
}

/// The default demo's NCCL events were left out for size: its Collectives view says so and
/// where to see them, instead of the NCCL_PROFILER_PLUGIN hint.
#[test]
fn the_default_demo_says_where_its_collectives_are() {
    let cmd = format!("{} demo --speed 0", common::sigmatop_bin().display());
    let Some(t) = Tmux::start("demo-nohint", &cmd) else {
        return;
    };
    let limit = Duration::from_secs(30);
    t.wait_for("the dashboard", limit, |s| s.contains("demo"));
    t.keys(&["c"]);
    t.wait_for("the hint", limit, |s| {
        let s = s.replace('\n', " ");
        s.contains("left out for size") && s.contains("sigmatop demo collectives")
    });
    t.keys(&["q"]);
    t.wait_for("exit status 0", limit, |s| s.contains("SIGMATOP-EXIT=0"));
}
