//! Slurm's hostlist syntax: `node[01-16,20]` is node01 … node16 and node20. Brackets may appear
//! anywhere in a destination (`user@rack[1-2]-n[1-4]`, `ssh://user@node[1-3]:2222`), commas
//! outside brackets separate destinations, zero padding follows the lower bound as in Slurm
//! (`[01-16]` → `01`…`16`, `[8-10]` → `8`, `9`, `10`).
//!
//! Written here rather than taken from a crate: the one on crates.io (hostlist-parser) accepts
//! host names only (letters, digits, `-`, `.`), not ssh destinations with `user@` or a port, and
//! sorts its output, while a dashboard keeps the order the user gave.

/// Most hosts one expression may name: a typo such as `n[1-1000000]` is an error, not a hang.
pub const MAX_HOSTS: usize = 65536;

/// Expands one hostlist expression into destinations, in order.
pub fn expand(expr: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for item in split_top(expr)? {
        if item.is_empty() {
            return Err(format!("'{expr}': an empty name between commas"));
        }
        let mut names = vec![String::new()];
        let mut rest = item;
        while let Some(open) = rest.find('[') {
            let close = rest[open..]
                .find(']')
                .map(|c| open + c)
                .ok_or_else(|| format!("'{expr}': '[' without ']'"))?;
            let prefix = &rest[..open];
            let alternatives = ranges(expr, &rest[open + 1..close])?;
            if names.len().saturating_mul(alternatives.len()) > MAX_HOSTS {
                return Err(format!("'{expr}' names more than {MAX_HOSTS} hosts"));
            }
            names = names
                .iter()
                .flat_map(|n| alternatives.iter().map(move |a| format!("{n}{prefix}{a}")))
                .collect();
            rest = &rest[close + 1..];
        }
        if rest.contains(']') {
            return Err(format!("'{expr}': ']' without '['"));
        }
        for n in &mut names {
            n.push_str(rest);
        }
        out.extend(names);
        if out.len() > MAX_HOSTS {
            return Err(format!("'{expr}' names more than {MAX_HOSTS} hosts"));
        }
    }
    Ok(out)
}

/// Splits on the commas outside brackets.
fn split_top(expr: &str) -> Result<Vec<&str>, String> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0u32, 0usize);
    for (i, c) in expr.char_indices() {
        match c {
            '[' if depth > 0 => return Err(format!("'{expr}': nested '['")),
            '[' => depth = 1,
            ']' if depth == 0 => return Err(format!("'{expr}': ']' without '['")),
            ']' => depth = 0,
            ',' if depth == 0 => {
                parts.push(&expr[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth > 0 {
        return Err(format!("'{expr}': '[' without ']'"));
    }
    parts.push(&expr[start..]);
    Ok(parts)
}

/// The numbers of one bracket: `01-16,20`.
fn ranges(expr: &str, inner: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for part in inner.split(',') {
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        let num = |s: &str| -> Result<u64, String> {
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) || s.len() > 18 {
                return Err(format!(
                    "'{expr}': '[{inner}]' holds '{part}', not a number or a range N-M"
                ));
            }
            s.parse::<u64>().map_err(|e| format!("'{expr}': {e}"))
        };
        let (a, b) = (num(lo)?, num(hi)?);
        if a > b {
            return Err(format!("'{expr}': the range {part} runs backwards"));
        }
        if (b - a) as usize >= MAX_HOSTS || out.len() + (b - a) as usize >= MAX_HOSTS {
            return Err(format!("'{expr}' names more than {MAX_HOSTS} hosts"));
        }
        let width = if lo.len() > 1 && lo.starts_with('0') {
            lo.len()
        } else {
            0
        };
        for n in a..=b {
            out.push(format!("{n:0width$}"));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(s: &str) -> Vec<String> {
        expand(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn slurm_examples() {
        assert_eq!(ok("node7"), ["node7"]);
        let v = ok("node[01-16,20]");
        assert_eq!(v.len(), 17);
        assert_eq!(v[0], "node01");
        assert_eq!(v[15], "node16");
        assert_eq!(v[16], "node20");
        assert_eq!(ok("n[8-10]"), ["n8", "n9", "n10"]);
        assert_eq!(ok("n[098-101]"), ["n098", "n099", "n100", "n101"]);
        assert_eq!(ok("a,b[1-2],c"), ["a", "b1", "b2", "c"]);
        assert_eq!(
            ok("r[1-2]-n[1-2].x"),
            ["r1-n1.x", "r1-n2.x", "r2-n1.x", "r2-n2.x"]
        );
        assert_eq!(ok("n[0]"), ["n0"]);
    }

    #[test]
    fn ssh_destinations_keep_user_and_port() {
        assert_eq!(ok("user@node[1-2]"), ["user@node1", "user@node2"]);
        assert_eq!(
            ok("ssh://user@node[1-2]:2222"),
            ["ssh://user@node1:2222", "ssh://user@node2:2222"]
        );
    }

    #[test]
    fn bad_expressions_say_what_is_wrong() {
        for (s, what) in [
            ("n[1-2", "without ']'"),
            ("n1-2]", "without '['"),
            ("n[[1]]", "nested"),
            ("n[a-b]", "not a number"),
            ("n[]", "not a number"),
            ("n[5-1]", "backwards"),
            ("n[1-1000000]", "more than 65536"),
            ("n[1-300][1-300]", "more than 65536"),
            ("a,,b", "empty name"),
        ] {
            let e = expand(s).expect_err(s);
            assert!(e.contains(what), "{s}: {e}");
            assert!(e.contains(s), "{s}: the message names the expression: {e}");
        }
    }
}
