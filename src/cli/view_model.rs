//! From the model to the dashboard's `ViewModel`: a translation of `agg::ModelAt` (the model at
//! the view time) into the rows and strings the dashboard draws. Pure: the same model and options
//! give the same view. Live, replay and demo all go through `build_view`.
//!
//! Everything computed here is presentation: labels, the order of rows, texts of warnings. The
//! figures themselves (rates, totals, peers, matrices, warnings) come from `agg`.

use sigmatop_tui::{
    CollArrivals, CollRankRow, CollRow, CollectivesModel, DoorbellModel, DoorbellRecord,
    DoorbellSeries, EndpointRow, GpuRow, Header, Matrices, Matrix, NodeRow, Percentiles,
    ProcessRow, RankRow, StatusCounters, Tab, ViewModel, Warning, WarningKind, Window,
};

use crate::agg::at::{AtCache, AtOptions, Detail, EndpointAt, ModelAt, RateMatrix, write_local_id};
use crate::agg::history;
use crate::agg::warnings::{self, WarningConfig};
use crate::agg::window::{self, history_position};
use crate::agg::{Model, ProcessState};
use crate::event::{DropCounters, Op, layer_names};

/// How the header clock is written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ClockStyle {
    /// Local wall time "12:04:18" (live).
    #[default]
    Wall,
    /// Seconds since the earliest process start, "t+12.004s" (replay).
    SinceStart,
}

/// What to show: the window, the history position and labels.
#[derive(Clone, Debug, Default)]
pub struct ViewOptions {
    pub window: Window,
    /// View time (ns, CLOCK_REALTIME); None = the newest data.
    pub at: Option<u64>,
    /// "live", "replay out/", "demo".
    pub source: String,
    pub clock: ClockStyle,
    /// Wall clock (ns, CLOCK_REALTIME) of a live view: when every process has gone quiet, the view
    /// time still moves on, so "now" rates fall to zero instead of freezing at their last value.
    pub now_ns: Option<u64>,
}

impl ViewOptions {
    fn at_options(&self, detail: Detail) -> AtOptions {
        AtOptions {
            window: core_window(self.window),
            at: self.at,
            now_ns: self.now_ns,
            detail,
        }
    }
}

/// The parts of the view model a frame draws, besides the header, status line, warnings and
/// history position (always built). The dashboard builds what its current tab shows: on a job of
/// thousands of processes the QP rows and matrices cost far more than the rest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sections {
    /// `processes` (Overview; the Matrix, GPUs and Doorbells views read them too).
    pub processes: bool,
    /// `endpoints` (QPs).
    pub endpoints: bool,
    /// `gpus` (GPUs).
    pub gpus: bool,
    /// `nodes` and `ranks` (Nodes).
    pub nodes: bool,
    /// `matrices` (Matrix).
    pub matrices: bool,
    /// `doorbells` (Doorbells).
    pub doorbells: bool,
    /// `bandwidth_history` (Overview).
    pub bandwidth: bool,
    /// `collectives` (Collectives).
    pub collectives: bool,
}

impl Sections {
    /// Everything (`build_view`).
    pub const ALL: Sections = Sections {
        processes: true,
        endpoints: true,
        gpus: true,
        nodes: true,
        matrices: true,
        doorbells: true,
        bandwidth: true,
        collectives: true,
    };

    /// What the views of `tab` read.
    pub fn of_tab(tab: Tab) -> Sections {
        let none = Sections {
            processes: false,
            endpoints: false,
            gpus: false,
            nodes: false,
            matrices: false,
            doorbells: false,
            bandwidth: false,
            collectives: false,
        };
        match tab {
            Tab::Overview => Sections {
                processes: true,
                bandwidth: true,
                ..none
            },
            Tab::Qps => Sections {
                endpoints: true,
                ..none
            },
            Tab::Gpus => Sections {
                processes: true,
                gpus: true,
                ..none
            },
            Tab::Nodes => Sections {
                nodes: true,
                ..none
            },
            Tab::Matrix => Sections {
                processes: true,
                matrices: true,
                ..none
            },
            Tab::Doorbells => Sections {
                processes: true,
                doorbells: true,
                ..none
            },
            Tab::Collectives => Sections {
                collectives: true,
                ..none
            },
        }
    }
}

impl Default for Sections {
    fn default() -> Self {
        Sections::ALL
    }
}

/// The dashboard's window as the core's.
pub fn core_window(w: Window) -> window::Window {
    match w.seconds() {
        Some(s) => window::Window::Seconds(s),
        None => window::Window::All,
    }
}

/// What is kept between frames: the tables that change only with the job's topology. Transparent:
/// a view built with a cache equals one built without.
#[derive(Default)]
pub struct ViewCache {
    at: AtCache,
}

/// Builds the whole view model. Pure: the same model and options give the same view.
pub fn build_view(model: &Model, opts: &ViewOptions) -> ViewModel {
    let mut vm = ViewModel::default();
    build_view_into(model, opts, &mut ViewCache::default(), &mut vm);
    vm
}

/// `build_view` into the view model of the previous frame (the dashboard's 4 Hz loop): the result
/// equals a fresh build, but the endpoint rows (thousands on a large job) reuse their buffers
/// instead of being freed and allocated again.
pub fn build_view_into(
    model: &Model,
    opts: &ViewOptions,
    cache: &mut ViewCache,
    vm: &mut ViewModel,
) {
    build_sections_into(model, opts, Sections::ALL, cache, vm);
}

/// `build_view_into` of the `sections` a frame draws: the others are left empty. The sections
/// built equal those of a whole build.
pub fn build_sections_into(
    model: &Model,
    opts: &ViewOptions,
    sections: Sections,
    cache: &mut ViewCache,
    vm: &mut ViewModel,
) {
    let detail = if sections.endpoints || sections.matrices {
        Detail::Endpoints
    } else {
        Detail::Processes
    };
    let at = ModelAt::with_cache(model, &opts.at_options(detail), &mut cache.at);
    let t = at.t;
    let mut drops = DropCounters::default();
    for a in &at.procs {
        drops.add(&a.drops);
    }
    vm.processes.clear();
    if sections.processes {
        for (pi, (a, r)) in at.procs.iter().zip(&at.rates).enumerate() {
            vm.processes.push(ProcessRow {
                host: a.key.host.clone(),
                pid: a.key.pid,
                rank: a.p.identity.rank,
                child_of_rank: a.p.child_of_rank,
                mode: a.p.identity.mode().name().to_string(),
                layers: layer_names(a.p.layers_used())
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect(),
                tx_bps: r.tx_bps,
                rx_bps: r.rx_bps,
                ops_per_s: r.ops_per_s,
                tx_bytes: r.tot.tx,
                rx_bytes: r.tot.rx,
                drops: a.drops.total_events_lost(),
                exited: a.p.exited,
                end: match (a.p.exit_signal, a.p.exit_code) {
                    (Some(s), _) => crate::event::ProcessEnd::Signal(s).short(),
                    (None, Some(c)) => crate::event::ProcessEnd::Exit(c).short(),
                    _ => String::new(),
                },
                silent_s: at.silent_ns(pi as u32).map(|n| n as f64 / 1e9),
            });
        }
        // Traced processes that never answered (their socket is there): a row each, never
        // dropped.
        let now = at.live_now.unwrap_or(t);
        for ((host, pid), n) in &model.not_answering {
            vm.processes.push(ProcessRow {
                host: host.clone(),
                pid: *pid,
                silent_s: Some(now.saturating_sub(n.since_ns) as f64 / 1e9),
                ..Default::default()
            });
        }
    }
    // Who waits on whom, for the endpoint rows' marks (the warnings say the same).
    let waits = if sections.endpoints {
        warnings::waits_for(&at, &WarningConfig::default())
    } else {
        Default::default()
    };
    if sections.endpoints {
        vm.endpoints.truncate(at.endpoints.len());
        while vm.endpoints.len() < at.endpoints.len() {
            vm.endpoints.push(EndpointRow::default());
        }
        for (row, e) in vm.endpoints.iter_mut().zip(&at.endpoints) {
            fill_endpoint_row(row, &at, e);
            mark_endpoint_row(row, &at, &waits, e);
        }
    } else {
        vm.endpoints.clear();
    }
    vm.nodes.clear();
    vm.ranks.clear();
    if sections.nodes {
        let mut per_host = vec![(0u32, 0u32); at.groups.hosts.len()];
        for pi in 0..at.procs.len() {
            if let Some(n) = at
                .groups
                .host_of(pi as u32)
                .and_then(|h| per_host.get_mut(h))
            {
                n.0 += 1;
                if at.silent_ns(pi as u32).is_some() {
                    n.1 += 1;
                }
            }
        }
        vm.nodes = at
            .nodes()
            .into_iter()
            .zip(per_host)
            .map(|(n, (processes, silent))| NodeRow {
                processes,
                silent,
                host: n.host,
                state: String::new(),
                egress_bps: n.egress_bps,
                ingress_bps: n.ingress_bps,
                egress_bytes: n.egress_bytes,
                ingress_bytes: n.ingress_bytes,
            })
            .collect();
        add_link_states(model, &mut vm.nodes);
        vm.ranks = at
            .ranks()
            .into_iter()
            .map(|r| RankRow {
                silent_s: rank_silent(&at, r.rank),
                rank: r.rank.unwrap_or_default(),
                host: r.host,
                egress_bps: r.egress_bps,
                ingress_bps: r.ingress_bps,
                egress_bytes: r.egress_bytes,
                ingress_bytes: r.ingress_bytes,
            })
            .collect();
    }
    vm.gpus.clear();
    if sections.gpus {
        vm.gpus = at
            .gpus()
            .into_iter()
            .map(|g| GpuRow {
                host: g.host,
                pid: g.pid,
                rank: g.rank,
                gpu: g.gpu,
                bytes_per_s: g.bytes_per_s,
                doorbells_per_s: g.doorbells_per_s,
                opcode_mix: g
                    .opcode_mix
                    .iter()
                    .map(|(op, n)| (op_name(*op), *n))
                    .collect(),
                inflight_wqes: 0,
            })
            .collect();
    }
    vm.matrices = if sections.matrices {
        let m = at.matrices();
        Matrices {
            rank: matrix(m.rank),
            node: matrix(m.node),
            gpu: matrix(m.gpu),
            left_out_bytes: m.left_out_bytes,
            left_out_endpoints: m.left_out_endpoints,
        }
    } else {
        Matrices::default()
    };

    let times = if sections.bandwidth || sections.doorbells {
        history::sample_times(model, t)
    } else {
        Vec::new()
    };
    vm.bandwidth_history = if sections.bandwidth {
        history::bandwidth(model, &times)
    } else {
        Vec::new()
    };
    // The samples' mean spacing: the chart's time axis (issue 39, item 7: it had none).
    vm.bandwidth_interval_s = match (times.first(), times.last()) {
        (Some(a), Some(b)) if sections.bandwidth && times.len() >= 2 => {
            b.saturating_sub(*a) as f64 / 1e9 / (times.len() - 1) as f64
        }
        _ => 0.0,
    };
    vm.doorbells = if sections.doorbells {
        doorbells(model, &at, &times, core_window(opts.window))
    } else {
        DoorbellModel::default()
    };

    vm.collectives = if sections.collectives {
        collectives(model, t)
    } else {
        CollectivesModel {
            hang_s: WarningConfig::default().collective_hang_ns as f64 / 1e9,
            ..Default::default()
        }
    };

    vm.status = StatusCounters {
        refused: at.rates.iter().map(|r| r.tot.refused).sum(),
        errors: at
            .procs
            .iter()
            .flat_map(|a| a.eps.iter().map(|(_, e)| e.errors))
            .sum(),
        dropped_events: drops.total_events_lost(),
        coalesced_doorbells: drops.coalesced_doorbells,
        unparsable_wqes: drops.unparsable_wqes,
        frames_lost: model.missed().0,
        message: model.messages.last().cloned().or_else(|| {
            model
                .processes
                .values()
                .rev()
                .find_map(|p| p.problem.clone())
        }),
        notice: None,
    };
    // A skew here is of the window's rates, which move as the job does; `report` and the
    // headless summaries judge the whole record's bytes: each says which (issue 39, item 7: one
    // skew read 1.95× on the dashboard and 1.83× in `demo --headless`).
    let over = match opts.window.seconds() {
        Some(_) => format!("over {}", opts.window.label()),
        None => "over the whole run".to_string(),
    };
    vm.warnings = warnings::warnings(&at, &WarningConfig::default())
        .iter()
        .map(|w| Warning {
            kind: warning_kind(w.kind),
            message: skew_over(warning_text(w), w.kind, &over),
            short: w.short.clone(),
        })
        .collect();
    (vm.history_pos, vm.history_len) = history_position(model, opts.at);
    vm.header = header(model, &at, opts);
}

/// `attach HOST...`: each host's link state on its node row, and a row for each host that has
/// none yet (connecting, or never reached): the Nodes view lists every host the user named.
fn add_link_states(model: &Model, nodes: &mut Vec<NodeRow>) {
    for l in &model.links {
        let state = l.state.label();
        match nodes.iter_mut().find(|n| n.host == l.name()) {
            Some(n) => n.state = state,
            None => nodes.push(NodeRow {
                host: l.name().to_string(),
                state,
                ..Default::default()
            }),
        }
    }
}

fn header(model: &Model, at: &ModelAt, opts: &ViewOptions) -> Header {
    let mut modes: Vec<&str> = at
        .procs
        .iter()
        .map(|a| a.p.identity.mode().name())
        .collect();
    modes.sort_unstable();
    modes.dedup();
    let (tx_bps, rx_bps) = at.rates_now();
    // A live view whose processes have all ended says so: its rates are 0 because nothing runs,
    // not because the traffic stopped (issue 25, item 3).
    let ended = opts.source == "live"
        && opts.at.is_none()
        && !model.processes.is_empty()
        && model.processes.values().all(|p| p.exited);
    Header {
        source: if ended {
            "ended".to_string()
        } else {
            opts.source.clone()
        },
        mode: match modes.as_slice() {
            [] => String::new(),
            [one] => one.to_string(),
            _ => "mixed".into(),
        },
        nodes: at.groups.hosts.len() as u32,
        ranks: at.groups.ranks.len() as u32,
        processes: at.procs.len() as u32,
        qps: at.qps as u32,
        row_kinds: crate::agg::at::RowKind::ALL
            .iter()
            .zip(at.row_kinds)
            .filter(|(_, n)| *n > 0)
            .map(|(k, n)| (k.noun(n).to_string(), n as u32))
            .collect(),
        tx_bps,
        rx_bps,
        window: opts.window.label().to_string(),
        snapshot_lag_s: opts.at.map(|_| {
            at.procs
                .iter()
                .filter_map(|a| {
                    let h = &a.p.history;
                    let i = window::idx_at(h, at.t)?;
                    // A process that ended before the view time is at its end, not behind.
                    (!(a.p.exited && i + 1 == h.len())).then(|| h.at_ns(i))
                })
                .map(|s| at.t.saturating_sub(s))
                .max()
                .unwrap_or(0) as f64
                / 1e9
        }),
        window_span_s: {
            let span = at.t.saturating_sub(model.first_start_ns()) as f64 / 1e9;
            let first = model.first_start_ns();
            match opts.window.seconds() {
                _ if first == 0 => None,
                Some(w) if (w as f64) <= span => None,
                _ => Some(span),
            }
        },
        clock: match opts.clock {
            ClockStyle::Wall if at.t > 0 => wall_clock(at.t),
            ClockStyle::Wall => String::new(),
            ClockStyle::SinceStart => format!(
                "t+{:.3}s",
                at.t.saturating_sub(model.first_start_ns()) as f64 / 1e9
            ),
        },
    }
}

/// Fills one endpoint row in place: its strings and vectors keep their buffers, so a steady view
/// allocates nothing per row.
fn fill_endpoint_row(row: &mut EndpointRow, at: &ModelAt, e: &EndpointAt) {
    let a = &at.procs[e.proc as usize];
    let p: &ProcessState = a.p;
    let def = e.def;
    let peer = e.peer.process.and_then(|pp| at.procs.get(pp as usize));
    row.peer.id.clear();
    row.peer.host.clear();
    row.peer.rank = None;
    if let Some(d) = def {
        match (d.peer.qpn, e.peer.addr) {
            // A QP whose peer is not traced: by its address (`10.0.1.1 qp 0x10c`), or on the
            // host of a traced process on that address (`node1` `qp 0x10c`); never a process.
            (Some(_), Some(addr)) if peer.is_none() && !e.peer.several => {
                match addr.host_of.and_then(|h| at.procs.get(h as usize)) {
                    Some(h) => {
                        set_str(&mut row.peer.host, &h.key.host);
                        set_fmt(&mut row.peer.id, format_args!("qp 0x{:x}", addr.qpn));
                    }
                    None => set_fmt(&mut row.peer.id, format_args!("{addr}")),
                }
            }
            (Some(q), _) => set_fmt(&mut row.peer.id, format_args!("0x{q:x}")),
            (None, _) if peer.is_none() => set_str(&mut row.peer.id, &d.peer.text),
            (None, _) => {}
        }
    }
    if let Some(pa) = peer {
        set_str(&mut row.peer.host, &pa.key.host);
        row.peer.rank = pa.p.identity.rank;
        if row.peer.rank.is_none() {
            set_fmt(&mut row.peer.id, format_args!("pid {}", pa.key.pid));
        }
    }
    // Operations by code, most first (ties by name).
    let empty = Default::default();
    let sums = a.eps.get(e.ep);
    let ops = sums.map_or(&empty, |s| &s.ops);
    let n_ops = ops.count();
    row.ops_by_opcode.truncate(n_ops);
    while row.ops_by_opcode.len() < n_ops {
        row.ops_by_opcode.push((String::new(), 0));
    }
    for (slot, (op, n)) in row.ops_by_opcode.iter_mut().zip(ops.iter()) {
        op_name_into(&mut slot.0, op);
        slot.1 = n;
    }
    row.ops_by_opcode
        .sort_by(|x, y| y.1.cmp(&x.1).then_with(|| x.0.cmp(&y.0)));
    set_str(&mut row.host, &a.key.host);
    row.rank = p.identity.rank;
    row.pid = a.key.pid;
    set_str(&mut row.layer, def.map_or("", |d| d.layer.name()));
    write_local_id(&mut row.local_id, def, e.ep);
    set_str(&mut row.transport, def.map_or("", |d| d.transport.as_str()));
    match p.ep_state.get(&e.ep) {
        Some(st) if !st.is_empty() => set_str(&mut row.state, st),
        _ if p.exited => set_str(&mut row.state, "exited"),
        _ => row.state.clear(),
    }
    row.tx_bps = e.tx_bps;
    row.rx_bps = e.rx_bps;
    row.tx_bps_window = e.tx_bps_window;
    row.rx_bps_window = e.rx_bps_window;
    row.tx_bytes = e.tot.tx;
    row.rx_bytes = e.tot.rx;
    row.ops_per_s = e.ops_per_s;
    row.doorbells_per_s = (e.is_gpu_qp() || e.tot.doorbells > 0).then_some(e.doorbells_per_s);
    row.posted = e.tot.outstanding();
    row.refused = e.tot.refused;
    row.errors = sums.map_or(0, |s| s.errors);
    row.unattributed = e.unattributed();
    row.queue = p.queues.as_ref().and_then(|qs| {
        let q = qs.get(e.ep)?;
        let q = crate::agg::stalls::queue_at(q, qs.at_ns, at.t.max(qs.at_ns));
        let r = crate::agg::report::QueueReport::of(&q, qs.at_ns, warnings::hang_ns());
        // A process that stopped reporting is not judged (the warnings say it is silent).
        let judged = crate::agg::stalls::reporting(at, e.proc as usize);
        Some(sigmatop_tui::QueueRow {
            sq_outstanding: r.sq_outstanding,
            sq_posted: r.sq_posted,
            sq_completed: r.sq_completed,
            sq_oldest_s: r.sq_oldest_s,
            sq_stalled_s: r.sq_stalled_s,
            rq_outstanding: r.rq_outstanding,
            rq_oldest_s: r.rq_oldest_s,
            last_completion_s: r.last_completion_s,
            errors: r.errors.into_iter().collect(),
            health: r.health.to_string(),
            stalled: r.stalled && judged,
            blind: r.blind,
        })
    });
}

/// The longest silence among the processes of `rank`, seconds.
fn rank_silent(at: &ModelAt, rank: Option<u32>) -> Option<f64> {
    let rank = rank?;
    at.procs
        .iter()
        .enumerate()
        .filter(|(_, a)| a.p.identity.rank == Some(rank))
        .filter_map(|(i, _)| at.silent_ns(i as u32))
        .max()
        .map(|n| n as f64 / 1e9)
}

/// The row's mark and what it waits on, from the rule the warnings follow (`agg::waits`,
/// `warnings::idle_with_posted`): one rule for marks and warnings.
fn mark_endpoint_row(
    row: &mut EndpointRow,
    at: &ModelAt,
    waits: &crate::agg::waits::Waits,
    e: &EndpointAt,
) {
    use crate::agg::waits;
    row.mark.clear();
    row.waits_on.clear();
    if e.unattributed() {
        return;
    }
    if let Some(ns) = at.silent_ns(e.proc) {
        set_str(&mut row.mark, "silent");
        set_fmt(
            &mut row.waits_on,
            format_args!(
                "{} silent {:.1}s: no frame since (stopped or hung); rates not known",
                waits::short(at, e.proc),
                ns as f64 / 1e9
            ),
        );
    } else if let Some(i) = waits.waiter(e.proc, e.ep) {
        set_str(&mut row.mark, "waits");
        let w = &waits.waited_on[i];
        let state = match w.silent_ns {
            Some(ns) => format!("silent {:.1}s", ns as f64 / 1e9),
            None if w.quiet_ns > 0 => format!("sent nothing {:.1}s", w.quiet_ns as f64 / 1e9),
            None => "sends nothing to it".to_string(),
        };
        set_fmt(
            &mut row.waits_on,
            format_args!("{}, {state}", waits::who(at, w.proc)),
        );
    } else if warnings::idle_with_posted(at, e).is_some() {
        set_str(&mut row.mark, "idle");
    }
}

fn matrix(m: RateMatrix) -> Matrix {
    Matrix {
        untraced: m.untraced,
        labels: m.labels,
        bytes: m.bytes,
        rates: m.rates,
    }
}

fn percentiles(p: history::Percentiles) -> Percentiles {
    Percentiles {
        p50: p.p50,
        p90: p.p90,
        p99: p.p99,
        max: p.max,
    }
}

fn doorbells(model: &Model, at: &ModelAt, times: &[u64], w: window::Window) -> DoorbellModel {
    let series = history::doorbell_series(model, &at.procs, at.t, times, w);
    if series.is_empty() {
        return DoorbellModel::default();
    }
    // GPUs whose QPs stopped ringing (`agg::gpu_stops`): the series of each says since when.
    let stops = crate::agg::gpu_stops::gpu_stops_cached(at, warnings::hang_ns());
    let stopped = |s: &history::DoorbellSeries| -> Option<f64> {
        if s.rate_now > 0.0 {
            return None;
        }
        stops
            .iter()
            .filter(|x| {
                x.host == s.host
                    && match s.gpu {
                        Some(g) => x.gpu == Some(g),
                        None => x.gpu.is_none() && x.qpn == s.qpn,
                    }
            })
            .map(|x| x.quiet_ns)
            .min()
            .map(|ns| ns as f64 / 1e9)
    };
    DoorbellModel {
        series: series
            .into_iter()
            .map(|s| DoorbellSeries {
                stopped_s: stopped(&s),
                label: match (s.gpu, s.qpn) {
                    (Some(g), _) => format!("{} GPU{g}", s.host),
                    (None, Some(q)) => format!("QP 0x{q:x}"),
                    _ => s.host.clone(),
                },
                host: s.host,
                gpu: s.gpu,
                qpn: s.qpn,
                rate_history: s.rate_history,
                rate_now: s.rate_now,
                interval_ns: s.interval_ns.map(percentiles),
                rate_percentiles: s.rate_percentiles.map(percentiles),
            })
            .collect(),
        recent: history::recent_doorbells(model, &at.procs, at.t)
            .into_iter()
            .map(|r| DoorbellRecord {
                time_s: r.time_s,
                host: r.host,
                gpu: r.gpu,
                qpn: r.qpn,
                pi: r.pi,
                opcode: r.op.map_or_else(|| "—".into(), op_name),
                bytes: r.bytes,
                raddr: r.raddr,
                rkey: r.rkey,
                wqes: r.wqes,
            })
            .collect(),
    }
}

/// A rank's waits as the Collectives view lists them: closest to a hang's cause first, each
/// "ch1→r2 network QP 0x2a1 3 WRs" ("ch0←r0 data" for a receive).
fn waits_text(waits: &[crate::agg::nccl::WaitView]) -> String {
    let mut v: Vec<&crate::agg::nccl::WaitView> = waits.iter().collect();
    v.sort_by(|a, b| a.what.cmp(&b.what).then(b.for_ns.cmp(&a.for_ns)));
    v.iter()
        .map(|w| {
            let dir = if w.send { '→' } else { '←' };
            let mut s = format!("ch{}{dir}r{} {}", w.channel, w.peer, w.state_name());
            if let Some((qpn, n, _)) =
                w.qp.filter(|_| w.what == crate::agg::nccl::WaitKind::Network)
            {
                s.push_str(&format!(
                    " QP 0x{qpn:x} {n} WR{}",
                    if n == 1 { "" } else { "s" }
                ));
            }
            s
        })
        .collect::<Vec<_>>()
        .join(" · ")
}

/// The Collectives tab: `agg::nccl` at the view time, as rows.
fn collectives(model: &Model, t: u64) -> CollectivesModel {
    let hang = WarningConfig::default().collective_hang_ns;
    let v = crate::agg::nccl::collectives(model, t, hang);
    let short = |id: u64| format!("{:08x}", id >> 32);
    let mut m = CollectivesModel {
        dropped_records: v.dropped_records,
        unknown_events: v.unknown_events,
        untracked: v.untracked,
        hang_s: hang as f64 / 1e9,
        ..Default::default()
    };
    for c in &v.comms {
        let comm = short(c.comm_id);
        for r in &c.rows {
            m.rows.push(CollRow {
                comm: comm.clone(),
                ranks: format!("{}/{}", c.ranks.len(), c.nranks),
                func: r.func.clone(),
                algo: r.algo.clone(),
                proto: r.proto.clone(),
                channels: r.channels,
                count: r.count,
                bytes: r.bytes,
                time_s: r.time_ns as f64 / 1e9,
                busbw_bps: r.busbw_gbs * 1e9,
                open: r.open,
            });
        }
        for r in &c.ranks {
            let (open, open_s) = match &r.oldest_open {
                Some((seq, func, ns)) => (format!("{func} #{seq}"), *ns as f64 / 1e9),
                None => (String::new(), 0.0),
            };
            m.ranks.push(CollRankRow {
                comm: comm.clone(),
                rank: r.rank,
                host: r.host.clone(),
                pid: r.pid,
                started: r.started,
                completed: r.completed,
                hung: r.oldest_open.as_ref().is_some_and(|o| o.2 > hang),
                open,
                open_s,
                last_arrivals: r.last_arrivals,
                mean_lag_s: r.mean_lag_ns as f64 / 1e9,
                state: match (r.exited, r.silent_ns) {
                    (true, _) => "exited".into(),
                    (false, Some(ns)) => {
                        format!("silent {}", sigmatop_tui::units::nanos(ns as f64))
                    }
                    (false, None) => String::new(),
                },
                waits: waits_text(&r.waits),
                waits_hot: r.waits.iter().any(|w| {
                    use crate::agg::nccl::WaitKind as K;
                    matches!(w.what, K::Network | K::GpuProduce | K::GpuConsume)
                }),
            });
        }
        m.arrivals.push(CollArrivals {
            comm,
            name: c.name.clone(),
            collectives: c.arrivals,
            median_spread_s: c.median_spread_ns as f64 / 1e9,
            max_spread_s: c.max_spread_ns as f64 / 1e9,
            max_last_rank: c.max_spread_last_rank,
            gpu_collectives: c.gpu_arrivals,
            gpu_median_spread_s: c.gpu_median_spread_ns as f64 / 1e9,
            gpu_max_spread_s: c.gpu_max_spread_ns as f64 / 1e9,
            gpu_max_last_rank: c.gpu_max_spread_last_rank,
        });
    }
    m
}

fn warning_kind(k: warnings::WarningKind) -> WarningKind {
    use warnings::WarningKind as W;
    match k {
        W::HungCollective => WarningKind::HungCollective,
        W::Silent => WarningKind::Silent,
        W::WaitedOn => WarningKind::WaitedOn,
        W::StalledEdge | W::GpuStopped => WarningKind::StalledEdge,
        W::EventsDropped | W::FramesLost => WarningKind::Drops,
        W::NodeSkew => WarningKind::NodeSkew,
        W::NodeIngressSkew => WarningKind::NodeIngressSkew,
        W::RankSkew => WarningKind::RankSkew,
        W::RankIngressSkew => WarningKind::RankIngressSkew,
        W::IdleWithPosted => WarningKind::IdleWithPosted,
        W::DoorbellStorm => WarningKind::DoorbellStorm,
        W::FailedOperations | W::QpFailed => WarningKind::FailedOperations,
    }
}

/// `text` of a warning of `kind`, a skew's followed by what it is judged over (`over 10s`, `over
/// the whole record`).
pub fn skew_over(mut text: String, kind: warnings::WarningKind, over: &str) -> String {
    use warnings::WarningKind as W;
    if matches!(
        kind,
        W::NodeSkew | W::RankSkew | W::NodeIngressSkew | W::RankIngressSkew
    ) {
        text.push(' ');
        text.push_str(over);
    }
    text
}

/// The text of a warning, as the dashboard, `report` and `replay --headless` print it.
pub fn warning_text(w: &warnings::Warning) -> String {
    use sigmatop_tui::units as fmt;
    use warnings::WarningKind as W;
    match w.kind {
        W::HungCollective
        | W::StalledEdge
        | W::Silent
        | W::WaitedOn
        | W::QpFailed
        | W::GpuStopped => w.subject.clone(),
        W::EventsDropped if w.processes > 0 => format!(
            "{} events dropped (ring full, {} proc{})",
            fmt::count(w.value as u64),
            w.processes,
            fmt::plural(w.processes)
        ),
        W::EventsDropped => format!("{} events dropped (ring full)", fmt::count(w.value as u64)),
        W::FramesLost => {
            let n = w.value as u64;
            format!(
                "{} process{} ended without a goodbye",
                fmt::count(n),
                if n == 1 { "" } else { "es" }
            )
        }
        W::NodeSkew | W::RankSkew => format!("{} egress {:.2}× mean", w.subject, w.value),
        W::NodeIngressSkew | W::RankIngressSkew => {
            format!("{} ingress {:.2}× mean", w.subject, w.value)
        }
        W::IdleWithPosted => format!(
            "{} idle with {} receive WRs posted",
            w.subject,
            fmt::count(w.value as u64)
        ),
        W::DoorbellStorm => format!("{} doorbell storm {}/s", w.subject, fmt::si(w.value)),
        W::FailedOperations => {
            let n = w.value as u64;
            format!(
                "{}: {} failed operation{}",
                w.subject,
                fmt::count(n),
                fmt::plural(n)
            )
        }
    }
}

fn op_name(op: u8) -> String {
    let mut s = String::new();
    op_name_into(&mut s, op);
    s
}

/// Sets `dst` to `src`, keeping its buffer (no allocation when it is already large enough).
fn set_str(dst: &mut String, src: &str) {
    if dst != src {
        dst.clear();
        dst.push_str(src);
    }
}

/// Sets `dst` to formatted text, keeping its buffer.
fn set_fmt(dst: &mut String, args: std::fmt::Arguments) {
    use std::fmt::Write;
    dst.clear();
    let _ = dst.write_fmt(args);
}

fn op_name_into(dst: &mut String, op: u8) {
    match Op::from_u8(op) {
        Some(o) => set_str(dst, o.name()),
        None => set_fmt(dst, format_args!("op{op}")),
    }
}

/// Local time of day for a CLOCK_REALTIME ns value, "HH:MM:SS".
fn wall_clock(ns: u64) -> String {
    let secs = (ns / 1_000_000_000) as libc::time_t;
    // SAFETY: `tm` is plain old data; localtime_r writes it and only reads `secs`.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are valid for the duration of the call; localtime_r is thread-safe.
    let ok = unsafe { !libc::localtime_r(&secs, &mut tm).is_null() };
    if ok {
        format!("{:02}:{:02}:{:02}", tm.tm_hour, tm.tm_min, tm.tm_sec)
    } else {
        let s = secs.rem_euclid(86_400);
        format!("{:02}:{:02}:{:02} UTC", s / 3600, s / 60 % 60, s % 60)
    }
}

#[cfg(test)]
mod tests;
