//! Communication matrices: the rows and columns (ranks, nodes, GPUs) of a list of processes and
//! their labels, shared by the dashboard, `report` and `export` so that a matrix has one shape
//! whichever of them draws it.

use serde::Serialize;

/// A square matrix of bytes sent from row to column.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Matrix {
    pub labels: Vec<String>,
    pub bytes: Vec<Vec<u64>>,
}

/// The ranks and nodes of a list of processes (numbered by their position in it): the rows and
/// columns of the rank and node matrices, both sorted. Processes of one rank value (two runs in
/// one record) share its row.
#[derive(Clone, Debug, Default)]
pub struct Groups {
    pub ranks: Vec<u32>,
    pub hosts: Vec<String>,
    rank_of: Vec<Option<usize>>,
    host_of: Vec<usize>,
}

impl Groups {
    /// From each process's (rank, host), in process order.
    pub fn new<'a>(procs: impl IntoIterator<Item = (Option<u32>, &'a str)> + Clone) -> Groups {
        let mut ranks: Vec<u32> = procs.clone().into_iter().filter_map(|p| p.0).collect();
        ranks.sort_unstable();
        ranks.dedup();
        let mut hosts: Vec<String> = procs.clone().into_iter().map(|p| p.1.to_string()).collect();
        hosts.sort_unstable();
        hosts.dedup();
        let mut g = Groups {
            ranks,
            hosts,
            ..Default::default()
        };
        for (rank, host) in procs {
            g.rank_of
                .push(rank.and_then(|r| g.ranks.binary_search(&r).ok()));
            g.host_of.push(
                g.hosts
                    .binary_search_by(|h| h.as_str().cmp(host))
                    .unwrap_or(0),
            );
        }
        g
    }

    /// The rank row of process `proc` (None when it has no rank).
    pub fn rank_of(&self, proc: u32) -> Option<usize> {
        self.rank_of.get(proc as usize).copied().flatten()
    }

    /// The node row of process `proc`.
    pub fn host_of(&self, proc: u32) -> Option<usize> {
        self.host_of.get(proc as usize).copied()
    }

    /// "r0", "r1", ...
    pub fn rank_labels(&self) -> Vec<String> {
        self.ranks.iter().map(|r| format!("r{r}")).collect()
    }

    /// Folds a process × process matrix of bytes into the rank and node matrices. A cell whose
    /// other side is [`UNTRACED`] lands in an "untraced" row or column, added when one has bytes.
    pub fn fold(&self, process_cells: impl IntoIterator<Item = ((u32, u32), u64)>) -> RankNode {
        let cells: Vec<((u32, u32), u64)> =
            process_cells.into_iter().filter(|(_, b)| *b > 0).collect();
        let untraced = cells
            .iter()
            .any(|((s, d), _)| *s == UNTRACED || *d == UNTRACED);
        let mut rank_labels = self.rank_labels();
        let mut node_labels = self.hosts.clone();
        if untraced {
            rank_labels.push(UNTRACED_LABEL.into());
            node_labels.push(UNTRACED_LABEL.into());
        }
        let (nr, nh) = (rank_labels.len(), node_labels.len());
        let mut rank = vec![vec![0u64; nr]; nr];
        let mut node = vec![vec![0u64; nh]; nh];
        let side = |p: u32, of: &dyn Fn(u32) -> Option<usize>, n: usize| {
            if p == UNTRACED { Some(n - 1) } else { of(p) }
        };
        for ((s, d), b) in cells {
            let ranks = (
                side(s, &|p| self.rank_of(p), nr),
                side(d, &|p| self.rank_of(p), nr),
            );
            if let (Some(i), Some(j)) = ranks {
                rank[i][j] += b;
            }
            let hosts = (
                side(s, &|p| self.host_of(p), nh),
                side(d, &|p| self.host_of(p), nh),
            );
            if let (Some(i), Some(j)) = hosts {
                node[i][j] += b;
            }
        }
        RankNode {
            rank: Matrix {
                labels: rank_labels,
                bytes: rank,
            },
            node: Matrix {
                labels: node_labels,
                bytes: node,
            },
        }
    }
}

/// The other side of bytes whose receiving (or sending) process is not traced or not
/// identified: a row and column of its own in every matrix, so that egress to an untraced peer
/// is egress everywhere.
pub const UNTRACED: u32 = u32::MAX;
/// The label of that row and column.
pub const UNTRACED_LABEL: &str = "untraced";

/// The rank × rank and node × node matrices of one set of cells.
#[derive(Clone, Debug, Default)]
pub struct RankNode {
    pub rank: Matrix,
    pub node: Matrix,
}

/// One row / column of the GPU matrix: one device of one process. GPU ordinals are the
/// process's own (with CUDA_VISIBLE_DEVICES every rank may call its GPU 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GpuKey {
    pub process: u32,
    /// None: the process's host memory.
    pub gpu: Option<u32>,
}

impl GpuKey {
    /// The cell of bytes moving from `from` to `to`, when at least one side is a GPU (traffic
    /// between host memories is not GPU traffic).
    pub fn cell(from: GpuKey, to: GpuKey) -> Option<(GpuKey, GpuKey)> {
        (from.gpu.is_some() || to.gpu.is_some()).then_some((from, to))
    }
}

/// Label of one side of the GPU matrix: "r3:gpu0", "pid@host:gpu0" without a rank, "r3:cpu"
/// for host memory.
pub fn gpu_side_label(rank: Option<u32>, pid: u32, host: &str, gpu: Option<u32>) -> String {
    let who = match rank {
        Some(r) => format!("r{r}"),
        None => format!("{pid}@{host}"),
    };
    match gpu {
        Some(g) => format!("{who}:gpu{g}"),
        None => format!("{who}:cpu"),
    }
}

/// The rows (and columns) of a GPU matrix, sorted: both sides of every cell, and the GPU of
/// every GPU endpoint (a row with traffic or not).
pub fn gpu_sides<'a>(
    cells: impl Iterator<Item = &'a (GpuKey, GpuKey)>,
    gpus: impl Iterator<Item = GpuKey>,
) -> Vec<GpuKey> {
    let mut keys: Vec<GpuKey> = cells.flat_map(|(a, b)| [*a, *b]).chain(gpus).collect();
    keys.sort_unstable();
    keys.dedup();
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_sort_ranks_and_hosts_and_fold_cells() {
        let g = Groups::new([(Some(3), "b"), (Some(1), "a"), (None, "b"), (Some(3), "c")]);
        assert_eq!(g.ranks, vec![1, 3]);
        assert_eq!(g.hosts, vec!["a", "b", "c"]);
        assert_eq!(g.rank_of(0), Some(1));
        assert_eq!(g.rank_of(2), None);
        assert_eq!(g.host_of(3), Some(2));
        let m = g.fold([((0, 1), 10), ((1, 2), 5), ((3, 1), 7)]);
        assert_eq!(m.rank.labels, vec!["r1", "r3"]);
        assert_eq!(m.rank.bytes, vec![vec![0, 0], vec![17, 0]]);
        assert_eq!(
            m.node.bytes,
            vec![vec![0, 5, 0], vec![10, 0, 0], vec![7, 0, 0]]
        );
    }

    #[test]
    fn gpu_cells_need_a_gpu_on_one_side() {
        let cpu = |p| GpuKey {
            process: p,
            gpu: None,
        };
        let gpu = |p| GpuKey {
            process: p,
            gpu: Some(0),
        };
        assert_eq!(GpuKey::cell(cpu(0), cpu(1)), None);
        assert_eq!(GpuKey::cell(gpu(0), cpu(1)), Some((gpu(0), cpu(1))));
        assert_eq!(gpu_side_label(Some(3), 9, "h", Some(1)), "r3:gpu1");
        assert_eq!(gpu_side_label(None, 9, "h", None), "9@h:cpu");
    }
}
