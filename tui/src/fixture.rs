//! A fixed, realistic view model (4 nodes, 8 ranks, UCX / libfabric / verbs / mlx5 endpoints, an
//! unattributed row, an idle QP, two GPUs ringing doorbells, a skewed node) for snapshot tests and
//! smoke tests. Deterministic: integer arithmetic only, no clock, no randomness.

use crate::model::*;
use crate::warnings::{Warning, WarningKind};

const NODES: usize = 4;
const RANKS: usize = 8;
/// Seconds since the start of the run at this sample.
const ELAPSED_S: f64 = 123.0;

fn host(rank: usize) -> String {
    format!("node{}", rank / 2)
}

/// Bytes/s that rank `src` sends to rank `dst`: a ring-like pattern across nodes, with rank 5
/// sending 5.5× what the others send (the skew the warnings must catch).
fn rank_rate(src: usize, dst: usize) -> f64 {
    if src / 2 == dst / 2 {
        return 0.0;
    }
    let base = if dst == (src + 2) % RANKS {
        900e6
    } else if dst == (src + 6) % RANKS {
        450e6
    } else {
        150e6
    };
    // small per-pair variation so nothing looks synthetic
    let wobble = 1.0 + ((src * 7 + dst * 3) % 9) as f64 / 100.0;
    let skew = if src == 5 { 5.5 } else { 1.0 };
    base * wobble * skew
}

/// Deterministic variation in 0.94..=1.06.
fn jitter(i: usize) -> f64 {
    1.0 + ((i * 37 + 11) % 13) as f64 / 100.0 - 0.06
}

fn layer_of(rank: usize) -> (&'static str, &'static str, &'static str) {
    // (layer, transport, state)
    match rank / 2 {
        0 => ("mlx5", "RC", "RTS"),
        1 => ("ucx", "rc_mlx5", ""),
        2 => ("ibverbs", "RC", "RTS"),
        _ => ("libfabric", "verbs;rxm", ""),
    }
}

fn local_id(src: usize, dst: usize) -> String {
    match layer_of(src).0 {
        "ucx" => format!("ep#{}", dst),
        "libfabric" => format!("fi#{}", dst),
        _ => format!("0x{:x}", 0x2a00 + src * 0x40 + dst),
    }
}

fn opcodes(layer: &str, ops_total: u64) -> Vec<(String, u64)> {
    let split: &[(&str, u64)] = match layer {
        "mlx5" => &[("RDMA_WRITE", 88), ("ATOMIC_FA", 9), ("RDMA_READ", 3)],
        "ucx" => &[("RDMA_WRITE", 61), ("SEND", 30), ("RECV", 9)],
        "ibverbs" => &[("SEND", 48), ("RECV", 48), ("RDMA_WRITE", 4)],
        _ => &[("SEND", 50), ("RECV", 50)],
    };
    split
        .iter()
        .map(|(n, pct)| (n.to_string(), ops_total * pct / 100))
        .collect()
}

fn message_size(layer: &str) -> f64 {
    match layer {
        "mlx5" => 65536.0,
        "ucx" => 32768.0,
        "ibverbs" => 65536.0,
        _ => 8192.0,
    }
}

fn matrix(labels: Vec<String>, rate: impl Fn(usize, usize) -> f64) -> Matrix {
    let n = labels.len();
    let rates: Vec<Vec<f64>> = (0..n)
        .map(|i| (0..n).map(|j| rate(i, j)).collect())
        .collect();
    let bytes = rates
        .iter()
        .enumerate()
        .map(|(i, row)| {
            row.iter()
                .enumerate()
                .map(|(j, r)| (r * 10.0 * jitter(i * n + j)).round())
                .collect()
        })
        .collect();
    Matrix {
        labels,
        bytes,
        rates,
        ..Default::default()
    }
}

/// The fixed feed used by the snapshot tests: `sigmatop demo`-like data at t+12.004 s.
pub fn sample_view_model() -> ViewModel {
    let egress = |r: usize| (0..RANKS).map(|d| rank_rate(r, d)).sum::<f64>();
    let ingress = |r: usize| (0..RANKS).map(|s| rank_rate(s, r)).sum::<f64>();

    let mut processes: Vec<ProcessRow> = (0..RANKS)
        .map(|r| {
            let (layer, _, _) = layer_of(r);
            let layers: &[&str] = match layer {
                "mlx5" => &["ibverbs", "mlx5", "cuda"],
                "ucx" => &["ibverbs", "ucx", "cuda"],
                "ibverbs" => &["ibverbs"],
                _ => &["ibverbs", "libfabric"],
            };
            ProcessRow {
                host: host(r),
                pid: 41_200 + (r as u32) * 13,
                rank: Some(r as u32),
                child_of_rank: None,
                mode: if r < 4 { "full" } else { "simple" }.into(),
                layers: layers.iter().map(|s| s.to_string()).collect(),
                tx_bps: egress(r),
                rx_bps: ingress(r),
                ops_per_s: (egress(r) + ingress(r)) / message_size(layer),
                // Ten minutes at these rates.
                tx_bytes: (egress(r) * 600.0) as u64,
                rx_bytes: (ingress(r) * 600.0) as u64,
                drops: if r == 5 { 37 } else { 0 },
                exited: false,
                end: String::new(),
                silent_s: None,
            }
        })
        .collect();
    processes.push(ProcessRow {
        host: "node3".into(),
        pid: 40_977,
        rank: None,
        child_of_rank: None,
        mode: "aggregate".into(),
        layers: vec!["ibverbs".into()],
        exited: true,
        ..ProcessRow::default()
    });

    let mut endpoints = Vec::new();
    for src in 0..RANKS {
        let (layer, transport, state) = layer_of(src);
        for dst in 0..RANKS {
            let tx = rank_rate(src, dst);
            if tx == 0.0 {
                continue;
            }
            let rx = rank_rate(dst, src);
            let k = src * RANKS + dst;
            let ops = (tx + rx) / message_size(layer);
            let total_ops = (ops * ELAPSED_S) as u64;
            let peer_id = match layer_of(dst).0 {
                "ucx" => format!("ep#{src}"),
                "libfabric" => format!("fi#{src}"),
                _ => local_id(dst, src),
            };
            let has_db = matches!(layer, "mlx5" | "ibverbs");
            endpoints.push(EndpointRow {
                host: host(src),
                rank: Some(src as u32),
                pid: 41_200 + (src as u32) * 13,
                layer: layer.into(),
                local_id: local_id(src, dst),
                peer: Peer {
                    host: host(dst),
                    rank: Some(dst as u32),
                    id: peer_id,
                },
                transport: transport.into(),
                state: state.into(),
                tx_bps: tx,
                rx_bps: rx,
                tx_bps_window: tx * jitter(k),
                rx_bps_window: rx * jitter(k + 5),
                tx_bytes: (tx * ELAPSED_S) as u64,
                rx_bytes: (rx * ELAPSED_S) as u64,
                ops_per_s: ops,
                ops_by_opcode: opcodes(layer, total_ops),
                doorbells_per_s: has_db.then(|| (ops / 1.6).round()),
                posted: has_db.then_some(((k * 7) % 24) as u64),
                refused: 0,
                errors: 0,
                unattributed: false,
                mark: String::new(),
                waits_on: String::new(),
                queue: (layer == "ibverbs").then(|| QueueRow {
                    sq_outstanding: (k % 5) as u64,
                    sq_posted: total_ops,
                    sq_completed: total_ops - (k % 5) as u64,
                    rq_outstanding: ((k * 7) % 24) as u64,
                    rq_oldest_s: 0.2,
                    last_completion_s: Some(0.0),
                    health: "live".into(),
                    ..QueueRow::default()
                }),
            });
        }
    }
    // A QP whose writes stopped completing: the stalled edge.
    endpoints.push(EndpointRow {
        host: "node2".into(),
        rank: Some(5),
        pid: 41_265,
        layer: "ibverbs".into(),
        local_id: "0x2a41".into(),
        peer: Peer {
            host: "node3".into(),
            rank: Some(7),
            id: "0x3c11".into(),
        },
        transport: "RC".into(),
        state: "RTS".into(),
        tx_bytes: 8_388_608,
        rx_bytes: 0,
        ops_by_opcode: vec![("RDMA_WRITE".into(), 128)],
        doorbells_per_s: Some(0.0),
        queue: Some(QueueRow {
            sq_outstanding: 128,
            sq_posted: 1_152,
            sq_completed: 1_024,
            sq_oldest_s: 4.1,
            sq_stalled_s: 4.1,
            last_completion_s: Some(4.1),
            health: "live".into(),
            stalled: true,
            ..QueueRow::default()
        }),
        ..EndpointRow::default()
    });
    // Traffic seen on a device but not attributable to any QP we know.
    endpoints.push(EndpointRow {
        host: "node1".into(),
        layer: "ibverbs".into(),
        tx_bps: 12.4e6,
        tx_bps_window: 11.9e6,
        tx_bytes: 1_490_000_000,
        ops_per_s: 190.0,
        unattributed: true,
        ..EndpointRow::default()
    });

    let nodes: Vec<NodeRow> = (0..NODES)
        .map(|n| {
            let e = egress(2 * n) + egress(2 * n + 1);
            let i = ingress(2 * n) + ingress(2 * n + 1);
            NodeRow {
                host: format!("node{n}"),
                state: String::new(),
                processes: 2,
                silent: 0,
                egress_bps: e,
                ingress_bps: i,
                egress_bytes: (e * ELAPSED_S * 0.93) as u64,
                ingress_bytes: (i * ELAPSED_S * 0.93) as u64,
            }
        })
        .collect();
    let ranks: Vec<RankRow> = (0..RANKS)
        .map(|r| RankRow {
            rank: r as u32,
            host: host(r),
            silent_s: None,
            egress_bps: egress(r),
            ingress_bps: ingress(r),
            egress_bytes: (egress(r) * ELAPSED_S * 0.93) as u64,
            ingress_bytes: (ingress(r) * ELAPSED_S * 0.93) as u64,
        })
        .collect();

    // GPUs: ranks 0..4 each drive one GPU; node0's two GPUs ring doorbells themselves (IBGDA).
    let gpu_rank = |g: usize| g; // GPU matrix index = rank
    let gpu_label = |g: usize| format!("r{}:gpu{}", gpu_rank(g), g % 2);
    let gpus: Vec<GpuRow> = (0..4)
        .map(|g| {
            let r = gpu_rank(g);
            let db = match g {
                0 => 41_200.0,
                1 => 12_000.0,
                _ => 0.0,
            };
            GpuRow {
                host: host(r),
                pid: 41_200 + (r as u32) * 13,
                rank: Some(r as u32),
                gpu: (g % 2) as u32,
                bytes_per_s: egress(r),
                doorbells_per_s: db,
                opcode_mix: if g < 2 {
                    opcodes("mlx5", 100_000 + g as u64 * 31_000)
                } else {
                    opcodes("ucx", 60_000)
                },
                inflight_wqes: [37, 9, 0, 0][g],
            }
        })
        .collect();

    let matrices = Matrices {
        rank: matrix((0..RANKS).map(|r| format!("r{r}")).collect(), rank_rate),
        gpu: matrix((0..4).map(gpu_label).collect(), |a, b| {
            rank_rate(gpu_rank(a), gpu_rank(b))
        }),
        node: matrix((0..NODES).map(|n| format!("node{n}")).collect(), |a, b| {
            let mut s = 0.0;
            for i in [2 * a, 2 * a + 1] {
                for j in [2 * b, 2 * b + 1] {
                    s += rank_rate(i, j);
                }
            }
            s
        }),
        ..Default::default()
    };

    const SHAPE: [u32; 16] = [2, 3, 5, 8, 7, 5, 3, 2, 1, 1, 2, 6, 8, 7, 5, 2];
    let series = |label: &str, g: usize, peak: f64, interval: Percentiles| DoorbellSeries {
        label: label.into(),
        host: "node0".into(),
        gpu: Some(g as u32),
        qpn: None,
        rate_history: (0..48)
            .map(|i| peak * SHAPE[(i + g * 3) % 16] as f64 / 8.0 * jitter(i))
            .collect(),
        rate_now: if g == 0 { 41_200.0 } else { 12_000.0 },
        stopped_s: None,
        interval_ns: Some(interval),
        rate_percentiles: Some(Percentiles {
            p50: peak * 0.62,
            p90: peak * 0.9,
            p99: peak * 0.98,
            max: peak * 1.04,
        }),
    };
    let doorbells = DoorbellModel {
        series: vec![
            series(
                "node0 GPU0",
                0,
                50_200.0,
                Percentiles {
                    p50: 2_100.0,
                    p90: 9_800.0,
                    p99: 71_000.0,
                    max: 1_300_000.0,
                },
            ),
            series(
                "node0 GPU1",
                1,
                15_100.0,
                Percentiles {
                    p50: 6_400.0,
                    p90: 31_000.0,
                    p99: 220_000.0,
                    max: 2_900_000.0,
                },
            ),
        ],
        recent: (0..32u64)
            .map(|i| {
                let gpu = u32::from(i % 4 == 3);
                let (opcode, bytes, wqes) = match i % 5 {
                    0 | 1 | 3 => ("RDMA_WRITE", 65_536, 1 + (i % 4) as u32),
                    2 => ("ATOMIC_FA", 8, 1),
                    _ => ("RDMA_READ", 4_096, 1),
                };
                let dst = [2usize, 3, 4, 5, 6, 7][(i % 6) as usize];
                DoorbellRecord {
                    time_s: 12.004_118_201 + i as f64 * 0.000_000_713,
                    host: "node0".into(),
                    gpu,
                    qpn: (0x2a00 + gpu as usize * 0x40 + dst) as u32,
                    pi: 0x11f3 + i as u32 * 4,
                    opcode: opcode.into(),
                    bytes,
                    raddr: 0x7f3a_5600_0000 + i * 0x1_0040,
                    rkey: if gpu == 0 { 0x1a2b3 } else { 0x9c4d1 },
                    wqes,
                }
            })
            .collect(),
    };

    let total_tx: f64 = nodes.iter().map(|n| n.egress_bps).sum::<f64>() + 12.4e6;
    let total_rx: f64 = nodes.iter().map(|n| n.ingress_bps).sum();
    const BW: [u32; 20] = [
        9, 10, 10, 10, 9, 10, 10, 7, 4, 3, 6, 9, 10, 10, 10, 9, 10, 10, 10, 10,
    ];
    let bandwidth_history = (0..60)
        .map(|i| {
            let f = BW[i % 20] as f64 / 10.0;
            (total_tx * f * jitter(i), total_rx * f * jitter(i + 3))
        })
        .collect();

    let qps = endpoints.iter().filter(|e| !e.unattributed).count() as u32;
    // UCX and libfabric rows are endpoints, verbs and mlx5 rows QPs (as the core counts them).
    let eps = endpoints
        .iter()
        .filter(|e| !e.unattributed && matches!(e.layer.as_str(), "ucx" | "libfabric"))
        .count() as u32;
    let row_kinds = vec![("QPs".to_string(), qps - eps), ("endpoints".into(), eps)];
    ViewModel {
        header: Header {
            source: "demo".into(),
            mode: "mixed".into(),
            nodes: NODES as u32,
            ranks: RANKS as u32,
            processes: processes.len() as u32,
            qps,
            row_kinds,
            tx_bps: total_tx,
            rx_bps: total_rx,
            window: "10s".into(),
            window_span_s: None,
            snapshot_lag_s: None,
            clock: "t+12.004s".into(),
        },
        processes,
        endpoints,
        gpus,
        nodes,
        ranks,
        matrices,
        doorbells,
        bandwidth_history,
        bandwidth_interval_s: 0.25,
        status: StatusCounters {
            dropped_events: 37,
            coalesced_doorbells: 1_204,
            unparsable_wqes: 3,
            frames_lost: 0,
            refused: 0,
            errors: 0,
            message: None,
            notice: None,
        },
        history_len: 60,
        history_pos: 59,
        collectives: sample_collectives(),
        // What the core's rules give for figures like these (plus an idle QP with posted work).
        warnings: [
            (
                WarningKind::StalledEdge,
                "stalled QP 0x2a41 node2 r5 pid 41265 → node3 r7: 128 WRs, none done in 4.1s",
            ),
            (WarningKind::Drops, "37 events dropped (ring full, 1 proc)"),
            (WarningKind::NodeSkew, "node2 egress 2.08× mean"),
            (WarningKind::RankSkew, "rank 5 egress 3.53× mean"),
            (WarningKind::RankIngressSkew, "rank 7 ingress 1.93× mean"),
        ]
        .into_iter()
        .map(|(kind, m)| Warning {
            kind,
            message: m.to_string(),
            short: if kind == WarningKind::StalledEdge {
                "stalled QP 0x2a41 node2 r5 → node3 r7: 128 WRs 4.1s".into()
            } else {
                String::new()
            },
        })
        .collect(),
    }
}

/// A 4-rank job's NCCL collectives: one communicator of all ranks, one of ranks 0-1; rank 3 went
/// silent with AllReduce #225 open on the others (the warning `hung_collective_warning` adds).
fn sample_collectives() -> CollectivesModel {
    let row = |comm: &str,
               ranks: &str,
               func: &str,
               algo: &str,
               proto: &str,
               ch,
               count,
               bytes,
               time_s,
               bus,
               open| CollRow {
        comm: comm.into(),
        ranks: ranks.into(),
        func: func.into(),
        algo: algo.into(),
        proto: proto.into(),
        channels: ch,
        count,
        bytes,
        time_s,
        busbw_bps: bus,
        open,
    };
    let rows = vec![
        row(
            "7f3a1b2c",
            "4/4",
            "AllReduce",
            "RING",
            "SIMPLE",
            2,
            224,
            58_720_256,
            1.84,
            47.9e6,
            3,
        ),
        row(
            "7f3a1b2c",
            "4/4",
            "AllReduce",
            "RING",
            "LL",
            2,
            448,
            1_835_008,
            0.21,
            13.1e6,
            0,
        ),
        row(
            "7f3a1b2c",
            "4/4",
            "AllGather",
            "RING",
            "SIMPLE",
            2,
            56,
            14_680_064,
            0.62,
            53.3e6,
            0,
        ),
        row(
            "c0d4e5f6", "2/2", "Send", "-", "-", 1, 56, 7_340_032, 0.33, 22.2e6, 0,
        ),
        row(
            "c0d4e5f6", "2/2", "Recv", "-", "-", 1, 56, 7_340_032, 0.34, 21.6e6, 0,
        ),
    ];
    let rank = |comm: &str,
                rank,
                host: &str,
                pid,
                started,
                completed,
                open: &str,
                open_s: f64,
                last,
                lag,
                state: &str| CollRankRow {
        comm: comm.into(),
        rank,
        host: host.into(),
        pid,
        started,
        completed,
        open: open.into(),
        open_s,
        hung: open_s > 2.0,
        last_arrivals: last,
        mean_lag_s: lag,
        state: state.into(),
        waits: String::new(),
        waits_hot: false,
    };
    let mut ranks = vec![
        rank(
            "7f3a1b2c",
            0,
            "node0",
            41_207,
            728,
            727,
            "AllReduce #225",
            3.41,
            9,
            0.000_21,
            "",
        ),
        rank(
            "7f3a1b2c",
            1,
            "node1",
            41_208,
            728,
            727,
            "AllReduce #225",
            3.40,
            12,
            0.000_25,
            "",
        ),
        rank(
            "7f3a1b2c",
            2,
            "node2",
            41_209,
            728,
            727,
            "AllReduce #225",
            3.40,
            17,
            0.000_31,
            "",
        ),
        rank(
            "7f3a1b2c",
            3,
            "node3",
            41_210,
            727,
            727,
            "",
            0.0,
            26,
            0.051,
            "silent 3.4s",
        ),
        rank("c0d4e5f6", 0, "node0", 41_207, 0, 0, "", 0.0, 0, 0.0, ""),
        rank("c0d4e5f6", 1, "node1", 41_208, 0, 0, "", 0.0, 0, 0.0, ""),
    ];
    // Where AllReduce #225 waits on the ranks in it: all for silent rank 3, or for those behind.
    for (r, w) in [
        (0, "ch0←r3 data · ch1←r3 data · ch0→r1 send done"),
        (1, "ch0←r0 data · ch1←r0 data"),
        (2, "ch0→r3 peer credit · ch1→r3 peer credit · ch0←r1 data"),
    ] {
        ranks[r].waits = w.into();
    }
    CollectivesModel {
        rows,
        ranks,
        arrivals: vec![
            CollArrivals {
                comm: "7f3a1b2c".into(),
                name: "world".into(),
                collectives: 64,
                median_spread_s: 0.000_42,
                max_spread_s: 3.006,
                max_last_rank: Some(3),
                ..Default::default()
            },
            CollArrivals {
                comm: "c0d4e5f6".into(),
                name: "pairs".into(),
                collectives: 0,
                ..Default::default()
            },
        ],
        dropped_records: 0,
        unknown_events: 0,
        untracked: 0,
        hang_s: 2.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixture_is_consistent() {
        let vm = sample_view_model();
        let node_tx: f64 = vm.nodes.iter().map(|n| n.egress_bps).sum();
        let rank_tx: f64 = vm.ranks.iter().map(|r| r.egress_bps).sum();
        assert!((node_tx - rank_tx).abs() < 1.0);
        let m: f64 = vm.matrices.node.rates.iter().flatten().sum();
        assert!((m - node_tx).abs() < 1.0);
        assert!(vm.endpoints.iter().any(|e| e.unattributed));
        assert_eq!(vm.doorbells.series.len(), 2);
    }

    #[test]
    fn round_trips_through_serde() {
        let vm = sample_view_model();
        let text = toml::to_string(&vm).expect("serializes");
        let back: ViewModel = toml::from_str(&text).expect("deserializes");
        assert_eq!(back.endpoints.len(), vm.endpoints.len());
        assert_eq!(back.header, vm.header);
    }
}
