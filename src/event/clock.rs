//! Clock calibration of the event schema: the samples a process takes of its TSC, CLOCK_MONOTONIC
//! and CLOCK_REALTIME at one instant, and the conversion of TSC ticks through them (re-exported
//! by `event`).

use serde::{Deserialize, Serialize};

/// One calibration sample: the same instant read on three clocks. TSC ticks convert to
/// CLOCK_MONOTONIC by linear interpolation between samples; CLOCK_REALTIME aligns hosts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClockSample {
    pub tsc: u64,
    pub mono_ns: u64,
    pub real_ns: u64,
}

/// Converts TSC ticks to ns on a given clock using calibration samples.
#[derive(Clone, Debug, Default)]
pub struct TscClock {
    samples: Vec<ClockSample>,
}

impl TscClock {
    pub fn new(mut samples: Vec<ClockSample>) -> Self {
        samples.sort_by_key(|s| s.tsc);
        samples.dedup_by_key(|s| s.tsc);
        drop_preempted(&mut samples);
        TscClock { samples }
    }
    pub fn push(&mut self, s: ClockSample) {
        if self.samples.last().is_none_or(|l| s.tsc > l.tsc) {
            self.samples.push(s);
        }
    }
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }
    /// The samples, by TSC.
    pub fn samples(&self) -> &[ClockSample] {
        &self.samples
    }
    /// Forgets the samples that converting a TSC value at or after `tsc` does not read: those
    /// before the last sample at or before `tsc` (two samples always stay).
    pub fn forget_before(&mut self, tsc: u64) {
        let at_or_before = self.samples.partition_point(|s| s.tsc <= tsc);
        let n = at_or_before
            .saturating_sub(1)
            .min(self.samples.len().saturating_sub(2));
        self.samples.drain(..n);
    }
    /// Ticks per ns estimated from the outermost samples (1.0 when unknown).
    pub fn ticks_per_ns(&self) -> f64 {
        match (self.samples.first(), self.samples.last()) {
            (Some(a), Some(b)) if b.mono_ns > a.mono_ns && b.tsc > a.tsc => {
                (b.tsc - a.tsc) as f64 / (b.mono_ns - a.mono_ns) as f64
            }
            _ => 1.0,
        }
    }
    /// CLOCK_REALTIME ns for a TSC value (interpolated between the two nearest samples).
    pub fn to_real_ns(&self, tsc: u64) -> u64 {
        self.convert(tsc, |s| s.real_ns)
    }
    /// CLOCK_MONOTONIC ns for a TSC value.
    pub fn to_mono_ns(&self, tsc: u64) -> u64 {
        self.convert(tsc, |s| s.mono_ns)
    }
    fn convert(&self, tsc: u64, clock: impl Fn(&ClockSample) -> u64) -> u64 {
        let n = self.samples.len();
        if n == 0 {
            return tsc;
        }
        let idx = self.samples.partition_point(|s| s.tsc <= tsc);
        let (a, b) = if n == 1 {
            (self.samples[0], self.samples[0])
        } else if idx == 0 {
            (self.samples[0], self.samples[1])
        } else if idx >= n {
            (self.samples[n - 2], self.samples[n - 1])
        } else {
            (self.samples[idx - 1], self.samples[idx])
        };
        let rate = if b.tsc > a.tsc && b.mono_ns > a.mono_ns {
            (b.mono_ns - a.mono_ns) as f64 / (b.tsc - a.tsc) as f64
        } else {
            1.0 / self.ticks_per_ns().max(1e-9)
        };
        let delta = (tsc as f64 - a.tsc as f64) * rate;
        let base = clock(&a) as f64;
        (base + delta).max(0.0) as u64
    }
}

/// How far (ns) a calibration sample may sit off the line through its two neighbours before it
/// is taken for one whose reads were split by a preemption.
const SAMPLE_OUTLIER_NS: f64 = 1_000_000.0;

/// Drops calibration samples whose clock reads were split by a preemption. A sample pairs one TSC
/// read with CLOCK_MONOTONIC and CLOCK_REALTIME reads around it; a thread descheduled between
/// them (seen: 0.68 s on a loaded 2-core machine) pairs the TSC with clocks read much later, and
/// every event converted through that sample moves by as much, out of order with its neighbours.
/// Between two good samples the clocks are linear in the TSC to within parts per million, so a
/// sample more than `SAMPLE_OUTLIER_NS` off the line through its neighbours is dropped (a clock
/// step of CLOCK_REALTIME is then interpolated across, as between any two samples).
fn drop_preempted(samples: &mut Vec<ClockSample>) {
    if samples.len() < 3 {
        return;
    }
    let off = |a: &ClockSample, b: &ClockSample, c: &ClockSample| -> bool {
        let span = c.tsc.saturating_sub(a.tsc) as f64;
        if span <= 0.0 {
            return false;
        }
        let f = b.tsc.saturating_sub(a.tsc) as f64 / span;
        let line = |x: u64, z: u64| x as f64 + f * (z as f64 - x as f64);
        (b.mono_ns as f64 - line(a.mono_ns, c.mono_ns)).abs() > SAMPLE_OUTLIER_NS
            || (b.real_ns as f64 - line(a.real_ns, c.real_ns)).abs() > SAMPLE_OUTLIER_NS
    };
    // Off the line through its neighbours, and through the next ones out where it has them: a
    // good sample beside a bad one is off the first line (which the bad one bends) but not the
    // second.
    let n = samples.len();
    let keep: Vec<bool> = (0..n)
        .map(|i| {
            if i == 0 || i + 1 == n {
                return true;
            }
            let near = off(&samples[i - 1], &samples[i], &samples[i + 1]);
            let far = i < 2 || i + 2 >= n || off(&samples[i - 2], &samples[i], &samples[i + 2]);
            !(near && far)
        })
        .collect();
    let mut i = 0;
    samples.retain(|_| {
        i += 1;
        keep[i - 1]
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_split_by_a_preemption_is_dropped() {
        // 1 tick per ns; REALTIME = MONOTONIC + 1e18; a sample every 100 ms; the fourth one's
        // clocks were read 0.68 s after its TSC.
        let mut v: Vec<ClockSample> = (0..8u64)
            .map(|i| ClockSample {
                tsc: i * 100_000_000,
                mono_ns: i * 100_000_000,
                real_ns: 1_000_000_000_000_000_000 + i * 100_000_000,
            })
            .collect();
        v[3].mono_ns += 340_000_000;
        v[3].real_ns += 680_000_000;
        let c = TscClock::new(v.clone());
        // Conversion stays on the good line, and monotone, around the bad sample.
        let mut last = 0;
        for t in (0..700_000_000u64).step_by(10_000_000) {
            let r = c.to_real_ns(t);
            assert_eq!(r, 1_000_000_000_000_000_000 + t, "at tsc {t}");
            assert!(r >= last);
            last = r;
        }
        // Without a bad sample nothing is dropped.
        v[3] = ClockSample {
            tsc: 300_000_000,
            mono_ns: 300_000_000,
            real_ns: 1_000_000_000_300_000_000,
        };
        assert_eq!(TscClock::new(v.clone()).samples.len(), 8);
    }

    #[test]
    fn tsc_clock_interpolates() {
        let c = TscClock::new(vec![
            ClockSample {
                tsc: 1000,
                mono_ns: 10,
                real_ns: 1_000_010,
            },
            ClockSample {
                tsc: 3000,
                mono_ns: 1010,
                real_ns: 1_001_010,
            },
        ]);
        assert_eq!(c.to_mono_ns(2000), 510);
        assert_eq!(c.to_real_ns(5000), 1_002_010);
        assert!((c.ticks_per_ns() - 2.0).abs() < 1e-9);
    }
}
