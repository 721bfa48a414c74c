//! Clock normalisation: every process's TSC ticks → CLOCK_REALTIME ns through its calibration
//! samples, with an estimate of the residual error of each conversion.
//!
//! Within a process the conversion is piecewise linear between consecutive samples, using the
//! CLOCK_MONOTONIC rate of each segment (so NTP steps of CLOCK_REALTIME between samples do not
//! bend the TSC rate), anchored at the sample's CLOCK_REALTIME reading. Processes and hosts are
//! aligned by that CLOCK_REALTIME (PTP-disciplined where present).
//!
//! Residual error of one process (`ProcClock::err_ns`), the sum of:
//! - pairing: the preload reads TSC between two CLOCK_MONOTONIC reads and then CLOCK_REALTIME; the
//!   window is not recorded, so it is estimated as half the largest deviation of one sample-to-
//!   sample step of `real_ns - mono_ns` from the median step (read jitter; a steady NTP slew is
//!   followed by the per-segment anchors), and at least `PAIR_FLOOR_NS`;
//! - outliers: a sample inconsistent with both neighbours (preempted between its reads) is
//!   dropped before anything else and counted in the note;
//! - drift: the largest misprediction of a sample from the rate of the segment before it (how far
//!   the TSC rate wandered between samples), which bounds the interpolation error in between;
//! - same host: processes of one host share the TSC, so converting the same tick through two
//!   processes' calibrations measures their combined error directly; each process's estimate is
//!   raised to the largest such disagreement with another process of its host (`same_host_ns`);
//! - uncalibrated: a process with a single sample borrows the TSC rate of another process on the
//!   same host (same TSC); with none, ticks are taken as ns and the error is unknown (`u64::MAX`).
//!
//! Between hosts the error adds the CLOCK_REALTIME synchronisation of the hosts themselves, which
//! a record cannot measure; `Causality` counts receives seen completing before their send, which
//! would betray a larger cross-host offset.

use crate::event::ClockSample;

/// Floor of the pairing error: the TSC and CLOCK_REALTIME are read one after the other and the
/// read window is not recorded (vDSO clock reads take tens of ns on bare metal, a few hundred on a
/// VM; seen here: two processes of one host disagreeing by 256 ns).
pub const PAIR_FLOOR_NS: u64 = 1_000;
/// A sample whose MONOTONIC reading misses the line through its neighbours by more than
/// max(this, 20 × the median miss) is rejected as an outlier.
pub const OUTLIER_FLOOR_NS: f64 = 20_000.0;

/// Conversion of one process's TSC to CLOCK_REALTIME.
#[derive(Clone, Debug, Default)]
pub struct ProcClock {
    /// Sorted by tsc, strictly increasing tsc and mono.
    samples: Vec<ClockSample>,
    /// ns per tick used outside / without segments.
    default_rate: f64,
    /// Estimated residual error of a converted timestamp, ns (u64::MAX: unknown).
    pub err_ns: u64,
    /// Parts of the estimate, for the report.
    pub pair_ns: u64,
    pub drift_ns: u64,
    /// Samples dropped as outliers.
    pub rejected: usize,
    /// Largest disagreement with another process of the same host at a common tick.
    pub same_host_ns: u64,
    /// What is special about this clock, if anything.
    pub note: Option<String>,
}

impl ProcClock {
    /// Builds the conversion; `host_rate` is ns per tick of another process on the same host.
    pub fn new(raw: &[ClockSample], host_rate: Option<f64>) -> ProcClock {
        let mut samples: Vec<ClockSample> = raw.to_vec();
        samples.sort_by_key(|s| s.tsc);
        // Keep strictly increasing tsc and mono (a repeated or backwards sample is dropped).
        let mut kept: Vec<ClockSample> = Vec::with_capacity(samples.len());
        for s in samples {
            if kept
                .last()
                .is_none_or(|l| s.tsc > l.tsc && s.mono_ns > l.mono_ns)
            {
                kept.push(s);
            }
        }
        // Reject samples inconsistent with both neighbours (a read preempted between the TSC and
        // the clocks): a sample's MONOTONIC reading against the line through its neighbours.
        let mut rejected = 0usize;
        let samples = if kept.len() >= 3 {
            let miss: Vec<f64> = kept
                .windows(3)
                .map(|w| {
                    let r = (w[2].mono_ns - w[0].mono_ns) as f64 / (w[2].tsc - w[0].tsc) as f64;
                    let pred = w[0].mono_ns as f64 + (w[1].tsc - w[0].tsc) as f64 * r;
                    (pred - w[1].mono_ns as f64).abs()
                })
                .collect();
            let mut sorted = miss.clone();
            sorted.sort_by(|a, b| a.total_cmp(b));
            let thr = (sorted[sorted.len() / 2] * 20.0).max(OUTLIER_FLOOR_NS);
            let mut out = Vec::with_capacity(kept.len());
            for (i, smp) in kept.iter().enumerate() {
                let bad = i > 0 && i + 1 < kept.len() && miss[i - 1] > thr;
                if bad {
                    rejected += 1;
                } else {
                    out.push(*smp);
                }
            }
            out
        } else {
            kept
        };
        let mut c = ProcClock {
            default_rate: 1.0,
            ..Default::default()
        };
        match samples.len() {
            0 => {
                c.err_ns = u64::MAX;
                c.note = Some("no clock sample: timestamps taken as ns as recorded".into());
            }
            1 => match host_rate {
                Some(r) => {
                    c.default_rate = r;
                    c.note = Some("one clock sample: TSC rate taken from the same host".into());
                    c.pair_ns = PAIR_FLOOR_NS;
                    c.err_ns = PAIR_FLOOR_NS;
                }
                None => {
                    c.err_ns = u64::MAX;
                    c.note =
                        Some("one clock sample and no rate from the host: uncalibrated".into());
                }
            },
            n => {
                let (a, b) = (samples[0], samples[n - 1]);
                c.default_rate = (b.mono_ns - a.mono_ns) as f64 / (b.tsc - a.tsc) as f64;
                // Pairing: jitter of the REALTIME - MONOTONIC offset from one sample to the next
                // around its median step (a steady NTP slew is followed, not an error).
                let offs: Vec<i128> = samples
                    .iter()
                    .map(|s| s.real_ns as i128 - s.mono_ns as i128)
                    .collect();
                let mut steps: Vec<i128> = offs.windows(2).map(|w| w[1] - w[0]).collect();
                let mut sorted = steps.clone();
                sorted.sort_unstable();
                let med = sorted[sorted.len() / 2];
                let jitter = steps.iter_mut().map(|d| (*d - med).unsigned_abs()).max();
                c.pair_ns = ((jitter.unwrap_or(0) / 2) as u64).max(PAIR_FLOOR_NS);
                let mut drift = 0f64;
                for w in samples.windows(3) {
                    let r = (w[1].mono_ns - w[0].mono_ns) as f64 / (w[1].tsc - w[0].tsc) as f64;
                    let pred = w[1].mono_ns as f64 + (w[2].tsc - w[1].tsc) as f64 * r;
                    drift = drift.max((pred - w[2].mono_ns as f64).abs());
                }
                c.drift_ns = drift.ceil() as u64;
                c.err_ns = c.pair_ns.saturating_add(c.drift_ns);
            }
        }
        if rejected > 0 {
            c.note = Some(format!(
                "{rejected} clock sample(s) rejected: inconsistent with their neighbours (read preempted)"
            ));
        }
        c.rejected = rejected;
        c.samples = samples;
        c
    }

    /// ns per tick over the whole recording (None without two samples).
    pub fn rate(&self) -> Option<f64> {
        (self.samples.len() >= 2).then_some(self.default_rate)
    }

    /// Raises the estimate to a measured disagreement with another process of the same host.
    pub fn note_same_host(&mut self, d: u64) {
        self.same_host_ns = self.same_host_ns.max(d);
        if self.err_ns != u64::MAX {
            self.err_ns = self.err_ns.max(d);
        }
    }

    /// Largest |self(t) - other(t)| over both processes' sample ticks inside their common span
    /// (None without a common span).
    pub fn disagreement(&self, other: &ProcClock) -> Option<u64> {
        let (a, b) = (&self.samples, &other.samples);
        let lo = a.first()?.tsc.max(b.first()?.tsc);
        let hi = a.last()?.tsc.min(b.last()?.tsc);
        if lo > hi {
            return None;
        }
        a.iter()
            .chain(b.iter())
            .map(|s| s.tsc)
            .filter(|t| (lo..=hi).contains(t))
            .map(|t| self.to_real_ns(t).abs_diff(other.to_real_ns(t)))
            .max()
    }

    pub fn samples(&self) -> &[ClockSample] {
        &self.samples
    }

    /// A cursor converting a mostly increasing sequence of ticks cheaply.
    pub fn cursor(&self) -> ClockCursor {
        let mut c = ClockCursor {
            seg: usize::MAX,
            lo: 1,
            hi: 0,
            base_tsc: 0,
            base_real: 0,
            mult: fixed(self.default_rate),
        };
        c.seek(self, 0);
        c
    }

    /// One conversion without a cursor.
    pub fn to_real_ns(&self, tsc: u64) -> u64 {
        self.cursor().to_real_ns(self, tsc)
    }
}

/// Cached segment of a `ProcClock`.
#[derive(Clone, Debug)]
pub struct ClockCursor {
    seg: usize,
    lo: u64,
    hi: u64,
    base_tsc: u64,
    /// Kept integral: CLOCK_REALTIME ns near 1.8e18 do not fit an f64 mantissa (256 ns steps).
    base_real: u64,
    /// ns per tick in 32.32 fixed point: a conversion is one multiply and a shift (the float
    /// path's unsigned conversions cost more than the rest of the merge step).
    mult: u64,
}

/// `rate` (ns per tick) in 32.32 fixed point; 0 for a rate that is not a positive number.
fn fixed(rate: f64) -> u64 {
    if rate.is_finite() && rate > 0.0 {
        (rate * 4_294_967_296.0).round() as u64
    } else {
        0
    }
}

impl ClockCursor {
    fn seek(&mut self, c: &ProcClock, tsc: u64) {
        let s = &c.samples;
        let n = s.len();
        if n == 0 {
            self.seg = 0;
            self.lo = 0;
            self.hi = u64::MAX;
            self.base_tsc = 0;
            self.base_real = 0;
            self.mult = fixed(1.0);
            return;
        }
        if n == 1 {
            self.seg = 0;
            self.lo = 0;
            self.hi = u64::MAX;
            self.base_tsc = s[0].tsc;
            self.base_real = s[0].real_ns;
            self.mult = fixed(c.default_rate);
            return;
        }
        // Segment i spans [s[i].tsc, s[i+1].tsc); the first and last extend outwards.
        let idx = s.partition_point(|x| x.tsc <= tsc);
        let i = idx.saturating_sub(1).min(n - 2);
        self.seg = i;
        self.lo = if i == 0 { 0 } else { s[i].tsc };
        self.hi = if i == n - 2 {
            u64::MAX
        } else {
            s[i + 1].tsc - 1
        };
        self.base_tsc = s[i].tsc;
        self.base_real = s[i].real_ns;
        self.mult =
            fixed((s[i + 1].mono_ns - s[i].mono_ns) as f64 / (s[i + 1].tsc - s[i].tsc) as f64);
    }

    /// A span of `ticks` in ns at the rate of the current segment.
    #[inline]
    pub fn span_ns(&self, ticks: u64) -> u64 {
        ((ticks as u128 * self.mult as u128) >> 32).min(u64::MAX as u128) as u64
    }

    #[inline]
    pub fn to_real_ns(&mut self, c: &ProcClock, tsc: u64) -> u64 {
        if tsc < self.lo || tsc > self.hi {
            self.seek(c, tsc);
        }
        if tsc >= self.base_tsc {
            self.base_real
                .saturating_add(self.span_ns(tsc - self.base_tsc))
        } else {
            self.base_real
                .saturating_sub(self.span_ns(self.base_tsc - tsc))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(tsc: u64, mono: u64, real: u64) -> ClockSample {
        ClockSample {
            tsc,
            mono_ns: mono,
            real_ns: real,
        }
    }

    #[test]
    fn converts_piecewise_and_estimates_error() {
        let c = ProcClock::new(
            &[
                s(1000, 10, 1_000_010),
                s(3000, 1010, 1_001_010),
                s(5000, 2010, 1_002_110),
            ],
            None,
        );
        assert_eq!(c.to_real_ns(2000), 1_000_510);
        assert_eq!(c.to_real_ns(4000), 1_001_510);
        assert_eq!(c.to_real_ns(7000), 1_003_010);
        assert_eq!(c.to_real_ns(0), 1_000_000 - 500 + 10);
        // real - mono moved by 100 ns: pairing 50 -> floor.
        assert_eq!(c.pair_ns, PAIR_FLOOR_NS);
        assert_eq!(c.drift_ns, 0);
        let mut cur = c.cursor();
        let mut last = 0;
        for t in (0..8000).step_by(7) {
            let v = cur.to_real_ns(&c, t);
            assert!(v >= last);
            last = v;
        }
    }

    #[test]
    fn preempted_sample_is_rejected() {
        let mut raw: Vec<ClockSample> = (0..10)
            .map(|i| {
                s(
                    1_000 + i * 2_000_000,
                    10 + i * 1_000_000,
                    5_000_000 + i * 1_000_000,
                )
            })
            .collect();
        // Sample 5: the process was preempted between the TSC and the clock reads.
        raw[5].mono_ns += 3_000_000;
        raw[5].real_ns += 3_000_000;
        let c = ProcClock::new(&raw, None);
        assert!(c.rejected >= 1, "{c:?}");
        assert!(c.err_ns < 10_000, "{c:?}");
        assert_eq!(
            c.to_real_ns(1_000 + 5 * 2_000_000),
            5_000_000 + 5 * 1_000_000
        );
    }

    #[test]
    fn degenerate_samples_never_panic() {
        for raw in [
            vec![],
            vec![s(5, 5, 5)],
            vec![s(5, 5, 5), s(5, 6, 7), s(4, 1, 1)],
            vec![s(u64::MAX, u64::MAX, u64::MAX), s(0, 0, 0)],
        ] {
            let c = ProcClock::new(&raw, None);
            let _ = c.to_real_ns(0);
            let _ = c.to_real_ns(u64::MAX);
            let c = ProcClock::new(&raw, Some(0.5));
            let _ = c.to_real_ns(123);
        }
    }
}
