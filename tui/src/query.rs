//! The `/` filter: parses `rank=3 host=node2 write`-style queries and matches them against rows.
//!
//! Terms are separated by spaces and all must match. `key=value` compares exactly (case-insensitive;
//! QPNs compare as numbers, so `qpn=2a40` equals `qpn=0x2a40`), `key~value` matches a substring, and a
//! bare word matches a substring of any field. Keys: host, rank, pid, qpn (alias qp, id, ep), layer
//! (`--layers`'s names, which the views show too; verbs = ibverbs, ofi = libfabric), op (alias
//! opcode; always a substring), gpu, peer (`peer=r5` matches one word of the peer column), type
//! (alias transport), state.

use crate::model::{
    DoorbellRecord, DoorbellSeries, EndpointRow, GpuRow, NodeRow, ProcessRow, RankRow,
};

/// The keys a filter term can name (aliases: node, r, qp, id, ep, opcode, transport).
pub const KEYS: [&str; 10] = [
    "host", "rank", "pid", "qpn", "layer", "op", "gpu", "peer", "type", "state",
];

/// A parsed filter; the empty filter matches everything.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Query {
    terms: Vec<Term>,
    /// `key=value` terms whose key is no filter key (`bogus=1`): kept as free text, and named
    /// to the user so an empty result is not a silent mystery.
    unknown: Vec<String>,
}

#[derive(Clone, Debug, PartialEq)]
enum Term {
    Exact(Key, String),
    Contains(Key, String),
    Any(String),
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Key {
    Host,
    Rank,
    Pid,
    Qpn,
    Layer,
    Op,
    Gpu,
    Peer,
    Transport,
    State,
}

impl Key {
    fn parse(s: &str) -> Option<Key> {
        Some(match s.to_ascii_lowercase().as_str() {
            "host" | "node" => Key::Host,
            "rank" | "r" => Key::Rank,
            "pid" => Key::Pid,
            "qpn" | "qp" | "id" | "ep" => Key::Qpn,
            "layer" => Key::Layer,
            "op" | "opcode" => Key::Op,
            "gpu" => Key::Gpu,
            "peer" => Key::Peer,
            "type" | "transport" => Key::Transport,
            "state" => Key::State,
            _ => return None,
        })
    }
}

/// The fields of a row that a filter can look at.
#[derive(Default)]
struct Fields<'a> {
    host: Option<&'a str>,
    rank: Option<u32>,
    pid: Option<u32>,
    qpn: Option<String>,
    layers: Vec<&'a str>,
    ops: Vec<&'a str>,
    gpu: Option<u32>,
    peer: Option<String>,
    transport: Option<&'a str>,
    state: Option<&'a str>,
    extra: Vec<&'a str>,
}

impl Query {
    /// Parses a query. A term with an unknown key (`foo=bar`) is matched as free text and listed
    /// in [`Query::unknown_keys`], so the dashboard can say so.
    pub fn parse(query: &str) -> Query {
        let mut unknown = Vec::new();
        let terms = query
            .split_whitespace()
            .map(|t| {
                // The first '=' or '~' separates the key; the value may hold either.
                if let Some(at) = t.find(['=', '~']) {
                    let (k, v) = (&t[..at], &t[at + 1..]);
                    let exact = t[at..].starts_with('=');
                    match Key::parse(k) {
                        Some(key) => {
                            let v = v.to_ascii_lowercase();
                            return if exact && key != Key::Op {
                                Term::Exact(key, v)
                            } else {
                                Term::Contains(key, v)
                            };
                        }
                        None if !k.is_empty() && !unknown.iter().any(|u: &String| u == k) => {
                            unknown.push(k.to_string())
                        }
                        None => {}
                    }
                }
                Term::Any(t.to_ascii_lowercase())
            })
            .collect();
        Query { terms, unknown }
    }

    /// Keys of `key=value` / `key~value` terms that are no filter key, in the order typed.
    pub fn unknown_keys(&self) -> &[String] {
        &self.unknown
    }

    /// "bogus= is no filter key (keys: host rank …)" when a term names an unknown key.
    pub fn unknown_keys_message(&self) -> Option<String> {
        if self.unknown.is_empty() {
            return None;
        }
        let names: Vec<String> = self.unknown.iter().map(|k| format!("{k}=")).collect();
        Some(format!(
            "{} {} no filter key (keys: {})",
            names.join(" "),
            if names.len() == 1 { "is" } else { "are" },
            KEYS.join(" ")
        ))
    }

    /// True when the filter has no terms.
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    fn matches(&self, f: &Fields) -> bool {
        self.terms.iter().all(|t| term_matches(t, f))
    }

    pub fn process(&self, r: &ProcessRow) -> bool {
        self.is_empty()
            || self.matches(&Fields {
                host: Some(&r.host),
                rank: r.rank,
                pid: Some(r.pid),
                layers: r.layers.iter().map(String::as_str).collect(),
                extra: vec![&r.mode, if r.exited { "exited" } else { "" }, &r.end],
                ..Fields::default()
            })
    }

    pub fn endpoint(&self, r: &EndpointRow) -> bool {
        self.is_empty()
            || self.matches(&Fields {
                host: Some(&r.host),
                rank: r.rank,
                pid: Some(r.pid),
                qpn: Some(r.local_id.clone()),
                layers: vec![&r.layer],
                ops: r.ops_by_opcode.iter().map(|(o, _)| o.as_str()).collect(),
                peer: Some(r.peer.label()),
                transport: Some(&r.transport),
                state: Some(&r.state),
                extra: vec![if r.unattributed { "unattributed" } else { "" }],
                ..Fields::default()
            })
    }

    pub fn gpu(&self, r: &GpuRow) -> bool {
        self.is_empty()
            || self.matches(&Fields {
                host: Some(&r.host),
                rank: r.rank,
                pid: Some(r.pid),
                gpu: Some(r.gpu),
                ops: r.opcode_mix.iter().map(|(o, _)| o.as_str()).collect(),
                ..Fields::default()
            })
    }

    pub fn node(&self, r: &NodeRow) -> bool {
        self.is_empty()
            || self.matches(&Fields {
                host: Some(&r.host),
                ..Fields::default()
            })
    }

    pub fn rank(&self, r: &RankRow) -> bool {
        self.is_empty()
            || self.matches(&Fields {
                host: Some(&r.host),
                rank: Some(r.rank),
                ..Fields::default()
            })
    }

    pub fn doorbell(&self, r: &DoorbellRecord) -> bool {
        self.is_empty()
            || self.matches(&Fields {
                host: Some(&r.host),
                gpu: Some(r.gpu),
                qpn: Some(format!("0x{:x}", r.qpn)),
                layers: vec!["mlx5"],
                ops: vec![&r.opcode],
                ..Fields::default()
            })
    }

    pub fn series(&self, r: &DoorbellSeries) -> bool {
        self.is_empty()
            || self.matches(&Fields {
                host: Some(&r.host),
                gpu: r.gpu,
                qpn: r.qpn.map(|q| format!("0x{q:x}")),
                layers: vec!["mlx5"],
                extra: vec![&r.label],
                ..Fields::default()
            })
    }
}

fn num(v: &str) -> Option<u32> {
    v.parse().ok()
}

/// QPN-style ids compare as hex numbers when both sides parse; otherwise as strings.
fn id_eq(have: &str, want: &str) -> bool {
    let hex = |s: &str| {
        let s = s.trim_start_matches("0x");
        u64::from_str_radix(s, 16).ok()
    };
    let have_l = have.to_ascii_lowercase();
    if have_l == want {
        return true;
    }
    match (have_l.starts_with("0x"), hex(&have_l), hex(want)) {
        (true, Some(a), Some(b)) => a == b,
        _ => false,
    }
}

fn contains(have: &str, want: &str) -> bool {
    have.to_ascii_lowercase().contains(want)
}

fn eq(have: &str, want: &str) -> bool {
    have.eq_ignore_ascii_case(want)
}

/// One name per layer, whichever a person types: `--layers` and every view spell them ibverbs,
/// libfabric, ucx, mlx5, cuda (issue 39, item 5); the short forms people type (verbs, ofi) are
/// the same layers.
fn layer_name(s: &str) -> &str {
    match s.to_ascii_lowercase().as_str() {
        "ibverbs" | "verbs" => "ibverbs",
        "libfabric" | "ofi" | "fabric" => "libfabric",
        "ucx" | "ucp" => "ucx",
        "mlx5" | "mlx5dv" | "devx" => "mlx5",
        "cuda" => "cuda",
        _ => s,
    }
}

/// Both spellings of a layer's name (its name and the short form people type), for substring
/// terms.
fn layer_spellings(s: &str) -> [&str; 2] {
    match layer_name(s) {
        "ibverbs" => ["ibverbs", "verbs"],
        "libfabric" => ["libfabric", "ofi"],
        _ => [s, s],
    }
}

/// `peer=` is the whole peer label ("node1 r5 0x1b07") or one of its words, as the column shows
/// them: `peer=r5`, `peer=node1`, `peer=1b07` (QPNs as numbers).
fn peer_eq(label: &str, v: &str) -> bool {
    eq(label, v) || label.split_whitespace().any(|w| eq(w, v) || id_eq(w, v))
}

fn term_matches(t: &Term, f: &Fields) -> bool {
    match t {
        Term::Exact(key, v) => match key {
            Key::Host => f.host.is_some_and(|h| eq(h, v)),
            Key::Rank => f.rank.is_some() && f.rank == num(v),
            Key::Pid => f.pid.is_some() && f.pid == num(v),
            Key::Gpu => f.gpu.is_some() && f.gpu == num(v),
            Key::Qpn => f.qpn.as_deref().is_some_and(|q| id_eq(q, v)),
            Key::Layer => f.layers.iter().any(|l| layer_name(l) == layer_name(v)),
            Key::Peer => f.peer.as_deref().is_some_and(|p| peer_eq(p, v)),
            Key::Transport => f.transport.is_some_and(|x| eq(x, v)),
            Key::State => f.state.is_some_and(|x| eq(x, v)),
            Key::Op => f.ops.iter().any(|o| contains(o, v)),
        },
        Term::Contains(key, v) => match key {
            Key::Host => f.host.is_some_and(|h| contains(h, v)),
            Key::Rank => f.rank.is_some_and(|r| r.to_string().contains(v.as_str())),
            Key::Pid => f.pid.is_some_and(|r| r.to_string().contains(v.as_str())),
            Key::Gpu => f.gpu.is_some_and(|r| r.to_string().contains(v.as_str())),
            Key::Qpn => f.qpn.as_deref().is_some_and(|q| contains(q, v)),
            Key::Layer => f
                .layers
                .iter()
                .any(|l| layer_spellings(l).iter().any(|n| contains(n, v))),
            Key::Peer => f.peer.as_deref().is_some_and(|p| contains(p, v)),
            Key::Transport => f.transport.is_some_and(|x| contains(x, v)),
            Key::State => f.state.is_some_and(|x| contains(x, v)),
            Key::Op => f.ops.iter().any(|o| contains(o, v)),
        },
        Term::Any(v) => {
            let strs = f
                .host
                .iter()
                .copied()
                .chain(f.layers.iter().copied())
                .chain(f.ops.iter().copied())
                .chain(f.transport)
                .chain(f.state)
                .chain(f.extra.iter().copied())
                .chain(f.qpn.as_deref())
                .chain(f.peer.as_deref());
            let mut hit = false;
            for s in strs {
                if contains(s, v) {
                    hit = true;
                    break;
                }
            }
            hit || [f.rank, f.pid, f.gpu]
                .iter()
                .flatten()
                .any(|n| n.to_string() == *v)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Peer;

    fn ep() -> EndpointRow {
        EndpointRow {
            host: "node2".into(),
            rank: Some(9),
            pid: 4121,
            layer: "ibverbs".into(),
            local_id: "0x2a40".into(),
            peer: Peer {
                host: "node1".into(),
                rank: Some(5),
                id: "0x1b07".into(),
            },
            transport: "RC".into(),
            state: "RTS".into(),
            ops_by_opcode: vec![("RDMA_WRITE".into(), 10)],
            ..EndpointRow::default()
        }
    }

    #[test]
    fn layer_names_of_the_cli_and_of_the_views_are_one() {
        let e = ep();
        for q in [
            "layer=verbs",
            "layer=ibverbs",
            "layer=IBVERBS",
            "layer~ibv",
            "layer~verb",
        ] {
            assert!(Query::parse(q).endpoint(&e), "{q}");
        }
        assert!(!Query::parse("layer=libfabric").endpoint(&e));
        let p = ProcessRow {
            layers: vec!["libfabric".into()],
            ..ProcessRow::default()
        };
        assert!(Query::parse("layer=ofi").process(&p));
        assert!(Query::parse("layer=libfabric").process(&p));
    }

    #[test]
    fn peer_matches_a_word_of_what_the_column_shows() {
        let e = ep();
        assert_eq!(e.peer.label(), "node1 r5 0x1b07");
        for q in [
            "peer=r5",
            "peer=node1",
            "peer=0x1b07",
            "peer=1b07",
            "peer~r5",
        ] {
            assert!(Query::parse(q).endpoint(&e), "{q}");
        }
        for q in ["peer=r0", "peer=node", "peer=5"] {
            assert!(!Query::parse(q).endpoint(&e), "{q}");
        }
    }

    #[test]
    fn keyed_terms() {
        let e = ep();
        assert!(Query::parse("rank=9").endpoint(&e));
        assert!(!Query::parse("rank=3").endpoint(&e));
        assert!(Query::parse("host=NODE2").endpoint(&e));
        assert!(!Query::parse("host=node").endpoint(&e));
        assert!(Query::parse("host~node").endpoint(&e));
        assert!(Query::parse("qpn=2a40").endpoint(&e));
        assert!(Query::parse("qpn=0x2A40").endpoint(&e));
        assert!(Query::parse("layer=verbs op=write").endpoint(&e));
        assert!(!Query::parse("layer=ucx").endpoint(&e));
        assert!(Query::parse("type=rc state=rts").endpoint(&e));
        assert!(Query::parse("peer~r5").endpoint(&e));
    }

    #[test]
    fn free_text_and_all_terms() {
        let e = ep();
        assert!(Query::parse("").endpoint(&e));
        assert!(Query::parse("write").endpoint(&e));
        assert!(Query::parse("node1").endpoint(&e), "matches the peer");
        assert!(Query::parse("4121").endpoint(&e));
        assert!(!Query::parse("verbs ucx").endpoint(&e));
        assert!(!Query::parse("unknown=zzz").is_empty());
        assert!(!Query::parse("unknown=zzz").endpoint(&e));
    }

    #[test]
    fn unknown_keys_are_named() {
        let q = Query::parse("bogus=1 rank=9 bogus~2 also=x");
        assert_eq!(q.unknown_keys(), ["bogus", "also"]);
        assert_eq!(
            q.unknown_keys_message().as_deref(),
            Some(
                "bogus= also= are no filter key (keys: host rank pid qpn layer op gpu peer type state)"
            )
        );
        assert_eq!(Query::parse("rank=9 write").unknown_keys_message(), None);
        // A known key with a value holding '=' or '~' is fine.
        assert!(Query::parse("peer~a=b").unknown_keys().is_empty());
    }

    #[test]
    fn other_rows() {
        let g = GpuRow {
            host: "node0".into(),
            gpu: 1,
            ..GpuRow::default()
        };
        assert!(Query::parse("gpu=1 host=node0").gpu(&g));
        assert!(!Query::parse("rank=1").gpu(&g));
        let r = GpuRow {
            rank: Some(2),
            pid: 77,
            ..g.clone()
        };
        assert!(Query::parse("rank=2 gpu=1").gpu(&r));
        assert!(Query::parse("pid=77").gpu(&r));
        assert!(!Query::parse("rank=3").gpu(&r));
        let d = DoorbellRecord {
            gpu: 0,
            qpn: 0x2a40,
            opcode: "ATOMIC_FA".into(),
            ..DoorbellRecord::default()
        };
        assert!(Query::parse("qpn=0x2a40 op=atomic").doorbell(&d));
        assert!(!Query::parse("gpu=1").doorbell(&d));
    }
}
