//! What a GPU stop is (`GpuStop`): data only, below the view time (`at`), whose per-view memo
//! holds them, and below `gpu_stops`, which finds them.

/// One process's GPU (or one of its GPU QPs that names no GPU) whose doorbells stopped.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuStop {
    /// Index of the process in `ModelAt::procs`.
    pub proc: u32,
    pub host: String,
    pub rank: Option<u32>,
    pub pid: u32,
    pub gpu: Option<u32>,
    /// The QP that rang last (lowest QPN among equals): the one named.
    pub qpn: Option<u32>,
    /// Its endpoint id.
    pub ep: u32,
    /// QPs of this GPU that stopped (every one that rang).
    pub qps: u32,
    /// When the last doorbell of any of them rang (ns, CLOCK_REALTIME; at most this late).
    pub last_ns: u64,
    /// The view time minus `last_ns`.
    pub quiet_ns: u64,
    /// `last_ns` is only a bound: the last doorbell came at or before it (before the oldest
    /// snapshot searched or kept), so the GPU has been quiet at least `quiet_ns`.
    pub at_least: bool,
}

impl GpuStop {
    /// "softhost1 r1 GPU0": the process and GPU as warnings name them.
    pub fn who(&self) -> String {
        let p = match self.rank {
            Some(r) => format!("{} r{r}", self.host),
            None => format!("{} pid {}", self.host, self.pid),
        };
        match (self.gpu, self.qpn) {
            (Some(g), _) => format!("{p} GPU{g}"),
            (None, Some(q)) => format!("{p} QP 0x{q:x}"),
            (None, None) => format!("{p} endpoint {}", self.ep),
        }
    }

    pub(super) fn qps_text(&self) -> String {
        let qp = match self.qpn {
            Some(n) => format!("QP 0x{n:x}"),
            None => format!("endpoint {}", self.ep),
        };
        if self.qps > 1 {
            format!("{qp} +{}", self.qps - 1)
        } else {
            qp
        }
    }
}
