//! Numbers as sigmatop prints them, for the dashboard and the CLI's text tables alike: rates and
//! volumes in bytes or bits with SI prefixes (powers of 1000), byte totals, counts, durations,
//! addresses and opcode mixes. Plain functions over std only, so the core's CLI and exporters use
//! them without pulling in anything of the dashboard.

/// How rates are shown: bytes or bits per second, SI prefixes (powers of 1000) either way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Units {
    #[default]
    Bytes,
    Bits,
}

impl Units {
    /// Unit of a rate column: "B/s" or "b/s".
    pub fn rate(self) -> &'static str {
        match self {
            Units::Bytes => "B/s",
            Units::Bits => "b/s",
        }
    }

    /// Unit of a volume column: "B" or "b".
    pub fn volume(self) -> &'static str {
        match self {
            Units::Bytes => "B",
            Units::Bits => "b",
        }
    }

    fn scale(self, bytes: f64) -> f64 {
        match self {
            Units::Bytes => bytes,
            Units::Bits => bytes * 8.0,
        }
    }
}

/// Compact SI number with three significant digits: "0", "190", "12.5", "4.80k", "1.92G".
pub fn si(v: f64) -> String {
    if !v.is_finite() {
        return "?".to_string();
    }
    if v == 0.0 {
        return "0".to_string();
    }
    let neg = v < 0.0;
    let a = v.abs();
    const PREFIX: [(f64, &str); 5] = [(1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")];
    let (scaled, suffix) = PREFIX
        .iter()
        .find(|(p, _)| a >= *p * 0.9995)
        .map(|(p, s)| (a / p, *s))
        .unwrap_or((a, ""));
    let body = if suffix.is_empty() && scaled.fract() == 0.0 {
        format!("{scaled:.0}")
    } else if scaled >= 99.95 {
        format!("{scaled:.0}{suffix}")
    } else if scaled >= 9.995 {
        format!("{scaled:.1}{suffix}")
    } else {
        format!("{scaled:.2}{suffix}")
    };
    if neg { format!("-{body}") } else { body }
}

/// A rate in bytes/s as a compact number in the chosen units (the column header names the unit).
pub fn rate(bytes_per_s: f64, units: Units) -> String {
    si(units.scale(bytes_per_s))
}

/// A rate with its unit: "38.2 GB/s" or "306 Gb/s".
pub fn rate_unit(bytes_per_s: f64, units: Units) -> String {
    let s = si(units.scale(bytes_per_s));
    let (num, prefix) = split_prefix(&s);
    format!("{num} {prefix}{}", units.rate())
}

/// A volume with its unit: "621 GB" or "4.97 Tb".
pub fn volume_unit(bytes: f64, units: Units) -> String {
    let s = si(units.scale(bytes));
    let (num, prefix) = split_prefix(&s);
    format!("{num} {prefix}{}", units.volume())
}

/// A volume in bytes as a compact number in the chosen units.
pub fn volume(bytes: f64, units: Units) -> String {
    si(units.scale(bytes))
}

/// A byte count as the CLI's text tables print it: whole bytes below 1000, else two decimals and
/// an SI prefix ("1.23 MB", "5.00 PB"; "1000.00 PB" above). Unlike [`volume_unit`] (three
/// significant digits) the two decimals stay at every scale, so a column of totals lines up.
pub fn human_bytes(bytes: f64) -> String {
    const UNITS: [&str; 6] = ["B", "kB", "MB", "GB", "TB", "PB"];
    // Divided step by step, not by one power: the last digit must not move between callers.
    let mut v = bytes;
    let mut i = 0;
    while v.abs() >= 1000.0 && i < UNITS.len() - 1 {
        v /= 1000.0;
        i += 1;
    }
    if i == 0 {
        format!("{v:.0} {}", UNITS[i])
    } else {
        format!("{v:.2} {}", UNITS[i])
    }
}

fn split_prefix(s: &str) -> (&str, &str) {
    match s.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => (&s[..i], &s[i..]),
        _ => (s, ""),
    }
}

/// The plural ending of a noun counted `n` times: "" for one, "s" otherwise.
pub fn plural(n: u64) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// A count with thousands separators: "1,204".
pub fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A duration in nanoseconds: "850ns", "2.1µs", "71µs", "1.3ms", "2.40s".
pub fn nanos(ns: f64) -> String {
    if !ns.is_finite() || ns < 0.0 {
        return "?".to_string();
    }
    let (v, unit) = if ns < 1e3 {
        (ns, "ns")
    } else if ns < 1e6 {
        (ns / 1e3, "µs")
    } else if ns < 1e9 {
        (ns / 1e6, "ms")
    } else {
        (ns / 1e9, "s")
    };
    if unit == "ns" || v >= 9.95 {
        format!("{v:.0}{unit}")
    } else {
        format!("{v:.1}{unit}")
    }
}

/// An age in seconds, as warnings and queue columns write it: "0.4s", "4.1s", "12s", "3m05s",
/// "2h01m".
pub fn secs(s: f64) -> String {
    if !s.is_finite() || s < 0.0 {
        return "?".to_string();
    }
    if s < 9.95 {
        format!("{s:.1}s")
    } else if s < 59.5 {
        format!("{s:.0}s")
    } else if s < 3599.5 {
        let t = s.round() as u64;
        format!("{}m{:02}s", t / 60, t % 60)
    } else {
        let m = (s / 60.0).round() as u64;
        format!("{}h{:02}m", m / 60, m % 60)
    }
}

/// An address split in 16-bit groups for reading: "0x7f3a_5600_0000".
pub fn addr(a: u64) -> String {
    let hex = format!("{a:x}");
    let mut out = String::from("0x");
    for (i, c) in hex.chars().enumerate() {
        if i > 0 && (hex.len() - i).is_multiple_of(4) {
            out.push('_');
        }
        out.push(c);
    }
    out
}

/// Opcode mix as percentages, largest first: "WRITE 71% READ 22% FA 7%".
pub fn mix(ops: &[(String, u64)], max_items: usize) -> String {
    let total: u64 = ops.iter().map(|(_, n)| *n).sum();
    if total == 0 {
        return "—".to_string();
    }
    let mut v: Vec<&(String, u64)> = ops.iter().filter(|(_, n)| *n > 0).collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut parts: Vec<String> = v
        .iter()
        .take(max_items)
        .map(|(name, n)| {
            let pct = (*n as f64) * 100.0 / total as f64;
            format!("{} {:.0}%", short_opcode(name), pct)
        })
        .collect();
    if v.len() > max_items {
        parts.push(format!("+{}", v.len() - max_items));
    }
    parts.join(" ")
}

/// Drops the "RDMA_" / "ATOMIC_" noise from an opcode for narrow cells.
pub fn short_opcode(name: &str) -> &str {
    name.strip_prefix("RDMA_").unwrap_or(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn si_numbers() {
        assert_eq!(si(0.0), "0");
        assert_eq!(si(190.0), "190");
        assert_eq!(si(12.5), "12.5");
        assert_eq!(si(4800.0), "4.80k");
        assert_eq!(si(29_300.0), "29.3k");
        assert_eq!(si(1.92e9), "1.92G");
        assert_eq!(si(310e6), "310M");
        assert_eq!(si(999_999.0), "1.00M");
        assert_eq!(si(f64::NAN), "?");
    }

    #[test]
    fn units() {
        assert_eq!(rate_unit(38.2e9, Units::Bytes), "38.2 GB/s");
        assert_eq!(rate_unit(38.2e9, Units::Bits), "306 Gb/s");
        assert_eq!(rate_unit(0.0, Units::Bytes), "0 B/s");
        assert_eq!(rate(1e3, Units::Bits), "8.00k");
    }

    #[test]
    fn human_bytes_as_the_cli_tables_print_them() {
        assert_eq!(human_bytes(0.0), "0 B");
        assert_eq!(human_bytes(999.0), "999 B");
        assert_eq!(human_bytes(1000.0), "1.00 kB");
        assert_eq!(human_bytes(1_234_567.0), "1.23 MB");
        assert_eq!(human_bytes(5e15), "5.00 PB");
        assert_eq!(human_bytes(1e18), "1000.00 PB");
    }

    #[test]
    fn counts_and_durations() {
        assert_eq!(count(0), "0");
        assert_eq!(count(1204), "1,204");
        assert_eq!(count(1_234_567), "1,234,567");
        assert_eq!(nanos(850.0), "850ns");
        assert_eq!(nanos(2_100.0), "2.1µs");
        assert_eq!(nanos(71_000.0), "71µs");
        assert_eq!(nanos(1_300_000.0), "1.3ms");
        assert_eq!(addr(0x7f3a_5600_0000), "0x7f3a_5600_0000");
        assert_eq!(addr(0x1000), "0x1000");
    }

    #[test]
    fn opcode_mix() {
        let ops = vec![
            ("RDMA_WRITE".to_string(), 71),
            ("RDMA_READ".to_string(), 22),
            ("ATOMIC_FA".to_string(), 7),
        ];
        assert_eq!(mix(&ops, 3), "WRITE 71% READ 22% ATOMIC_FA 7%");
        assert_eq!(mix(&ops, 1), "WRITE 71% +2");
        assert_eq!(mix(&[], 3), "—");
    }
}

#[cfg(test)]
mod secs_tests {
    #[test]
    fn ages_read_short() {
        assert_eq!(super::secs(0.04), "0.0s");
        assert_eq!(super::secs(4.14), "4.1s");
        assert_eq!(super::secs(12.4), "12s");
        assert_eq!(super::secs(185.0), "3m05s");
        assert_eq!(super::secs(7260.0), "2h01m");
        assert_eq!(super::secs(f64::NAN), "?");
    }
}
