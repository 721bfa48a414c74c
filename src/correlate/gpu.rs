//! GPU × GPU traffic: which GPU's QPs moved how many bytes to which GPU.
//!
//! A GPU here is one device of one process (`EndpointDef::gpu` is the CUDA device ordinal the
//! QP's work queue lives on, which is only unique within a process: with CUDA_VISIBLE_DEVICES
//! every rank may call its GPU 0). An endpoint's bytes count when it or its peer QP names a
//! GPU; the side that names none is that process's host memory ("cpu"). The peer is the QP the
//! topology matched (`EpTopo::peer_ep`). Sends and writes count from the issuer to the peer,
//! one-sided reads from the peer to the issuer, as in the process matrix. Built from each
//! process's last snapshot, so aggregate-mode records have it too.

use std::collections::BTreeMap;

use super::Correlation;
use crate::agg::matrix::{GpuKey, Matrix, gpu_side_label, gpu_sides};
use crate::event::Op;

/// The matrix, and the GPU endpoints' bytes whose peer QP is not known.
#[derive(Clone, Debug, Default)]
pub struct GpuTraffic {
    pub matrix: Matrix,
    pub keys: Vec<GpuKey>,
    pub unresolved_bytes: u64,
}

/// Label of a GPU key of the recording.
pub fn gpu_label(c: &Correlation, k: GpuKey) -> String {
    match c.rec.processes.get(k.process as usize) {
        Some(p) => gpu_side_label(p.identity.rank, p.identity.pid, &p.identity.host, k.gpu),
        None => format!("process#{}", k.process),
    }
}

pub fn gpu_traffic(c: &Correlation) -> GpuTraffic {
    let procs = &c.rec.processes;
    let gpu_of = |proc: u32, ep: u32| -> Option<u32> {
        c.topo
            .ep(proc, ep)
            .and_then(|e| e.def.as_ref())
            .and_then(|d| d.gpu)
    };
    let mut cells: BTreeMap<(GpuKey, GpuKey), u64> = BTreeMap::new();
    let mut unresolved = 0u64;
    for (i, p) in procs.iter().enumerate() {
        let i = i as u32;
        let Some(s) = p.last_snapshot() else { continue };
        for cnt in &s.counts {
            let Some(op) = Op::from_u8(cnt.op) else {
                continue;
            };
            let Some(toward_peer) = op.toward_peer() else {
                continue;
            };
            if cnt.bytes == 0 {
                continue;
            }
            let mine = gpu_of(i, cnt.ep);
            let peer = c.topo.ep(i, cnt.ep).and_then(|e| e.peer_ep);
            let Some((pp, pe)) = peer else {
                if mine.is_some() {
                    unresolved += cnt.bytes;
                }
                continue;
            };
            let theirs = gpu_of(pp, pe);
            let a = GpuKey {
                process: i,
                gpu: mine,
            };
            let b = GpuKey {
                process: pp,
                gpu: theirs,
            };
            let (from, to) = if toward_peer { (a, b) } else { (b, a) };
            if let Some(cell) = GpuKey::cell(from, to) {
                *cells.entry(cell).or_default() += cnt.bytes;
            }
        }
    }
    let keys = gpu_sides(
        cells.keys(),
        procs.iter().enumerate().flat_map(|(i, p)| {
            p.endpoints.iter().filter_map(move |d| {
                d.gpu.map(|g| GpuKey {
                    process: i as u32,
                    gpu: Some(g),
                })
            })
        }),
    );
    let pos = |k: &GpuKey| keys.binary_search(k).unwrap_or(0);
    let mut bytes = vec![vec![0u64; keys.len()]; keys.len()];
    for ((a, b), v) in &cells {
        bytes[pos(a)][pos(b)] += v;
    }
    GpuTraffic {
        matrix: Matrix {
            labels: keys.iter().map(|k| gpu_label(c, *k)).collect(),
            bytes,
        },
        keys,
        unresolved_bytes: unresolved,
    }
}
