//! Synthetic NCCL plugin records for the unit tests of `model` and `live`: one rank of a
//! communicator making an AllReduce (with a kernel's GPU start and stop, as NCCL's KernelCh
//! events give them), an AlltoAll (NCCL 2.28: one GroupApi of depth 1 holding a Send and a Recv
//! P2pApi per rank; the P2p parts to the other ranks only, the rank's own part with no event) and
//! a user's group of one Send and one Recv (GroupApi of depth 2), in the order NCCL 2.28.9 makes
//! them. The record clock is the TSC with real = 1 s + tsc (ns).

use super::format::{self, Rec, etype, kind, state};

/// Parameters of one rank's records.
pub struct Rank {
    pub rank: u32,
    pub nranks: u32,
    /// Host call of the AllReduce (TSC).
    pub t0: u64,
    /// When the proxy sees the kernel start, after the host call (the kernel queued behind
    /// other work on the GPU when large).
    pub kernel_seen: u64,
    /// The GPU's globaltimer at the kernel start (its own epoch).
    pub gpu0: u64,
}

struct B {
    recs: Vec<Rec>,
    n: u64,
}

impl B {
    fn id(&mut self, t: u8) -> u64 {
        self.n += 1;
        self.n << 4 | t as u64
    }
    fn start(&mut self, tsc: u64, t: u8, parent: u64, p: &[u64]) -> u64 {
        let id = self.id(t);
        let mut r = Rec::new(tsc, 7, kind::START, t, 0);
        r.0[2] = id;
        r.0[3] = parent;
        r.0[4] = 1;
        for (i, v) in p.iter().enumerate() {
            r.0[5 + i] = *v;
        }
        self.recs.push(r);
        id
    }
    fn stop(&mut self, tsc: u64, id: u64) {
        let mut r = Rec::new(tsc, 7, kind::STOP, (id & 15) as u8, 0);
        r.0[2] = id;
        self.recs.push(r);
    }
    fn state(&mut self, tsc: u64, id: u64, st: u8, p0: u64) {
        let mut r = Rec::new(tsc, 7, kind::STATE, (id & 15) as u8, st);
        r.0[2] = id;
        r.0[5] = p0;
        self.recs.push(r);
    }
}

/// Bytes of the AllReduce, of each AlltoAll part, of each Group part.
pub const ALLREDUCE_BYTES: u64 = 4096;
pub const ALLTOALL_BYTES: u64 = 1024;
pub const GROUP_BYTES: u64 = 256;

pub fn rank(k: &Rank) -> Vec<Rec> {
    let f = |n: &str| format::index_of(format::FUNCS, n.as_bytes());
    let float = format::datatype_index(b"ncclFloat32");
    let mut b = B {
        recs: Vec::new(),
        n: 0,
    };
    for (tsc, real) in [(0u64, 1_000_000_000u64), (10_000_000, 1_010_000_000)] {
        let mut c = Rec::new(tsc, 7, kind::CLOCK, 0, 0);
        c.0[5] = tsc;
        c.0[6] = real;
        b.recs.push(c);
    }
    let mut init = Rec::new(1, 7, kind::INIT, 0, 0);
    init.0[4] = 1;
    init.0[5] = 0xabc;
    init.0[6] = k.nranks as u64;
    init.0[7] = k.nranks as u64;
    init.0[8] = k.rank as u64;
    b.recs.push(init);
    // AllReduce of 1024 floats, RING/SIMPLE, 1 channel.
    let t = k.t0;
    let g = b.start(t, etype::GROUP_API, 0, &[1]);
    let api = format::pack_coll(f("AllReduce"), float, 255, 255, 0, 0);
    let capi = b.start(t + 1, etype::COLL_API, g, &[0, ALLREDUCE_BYTES / 4, api]);
    b.stop(t + 2, capi);
    let coll = format::pack_coll(f("AllReduce"), float, 1, 2, 1, 16);
    let c = b.start(t + 10, etype::COLL, capi, &[0, ALLREDUCE_BYTES / 4, coll]);
    let op = b.start(
        t + 20,
        etype::PROXY_OP,
        c,
        &[9, 0, ((k.rank + 1) % k.nranks) as u64, 2, 0, 1],
    );
    b.stop(t + 30, c);
    b.stop(t + 40, g);
    let kc = b.start(t + k.kernel_seen, etype::KERNEL_CH, c, &[0, k.gpu0]);
    b.state(
        t + k.kernel_seen + 800,
        kc,
        state::KERNEL_CH_STOP,
        k.gpu0 + 800,
    );
    b.stop(t + k.kernel_seen + 810, kc);
    b.stop(t + k.kernel_seen + 900, op);
    // AlltoAll of 256 floats per peer.
    let t = k.t0 + 100_000;
    let g = b.start(t, etype::GROUP_API, 0, &[1]);
    let mut apis = Vec::new();
    for r in 0..k.nranks {
        for (i, name) in ["Send", "Recv"].iter().enumerate() {
            let a = format::pack_coll(f(name), float, 255, 255, 0, 0);
            let id = b.start(
                t + 1 + 2 * r as u64 + i as u64,
                etype::P2P_API,
                g,
                &[0, ALLTOALL_BYTES / 4, a],
            );
            b.stop(t + 2 + 2 * r as u64 + i as u64, id);
            apis.push((r, *name, id));
        }
    }
    let mut parts = Vec::new();
    for (r, name, api) in apis.into_iter().filter(|x| x.0 != k.rank) {
        let p = format::pack_coll(f(name), float, 255, 255, 1, 0);
        let id = b.start(
            t + 100,
            etype::P2P,
            api,
            &[0, ALLTOALL_BYTES / 4, p, r as u64],
        );
        let send = (name == "Send") as u64;
        let op = b.start(t + 110, etype::PROXY_OP, id, &[9, 0, r as u64, 1, 0, send]);
        parts.push((id, op));
    }
    for (id, _) in &parts {
        b.stop(t + 120, *id);
    }
    b.stop(t + 130, g);
    for (i, (_, op)) in parts.iter().enumerate() {
        b.stop(t + 1000 + i as u64, *op);
    }
    // A user's group: one Send to the next rank, one Recv from the one before.
    let t = k.t0 + 200_000;
    let g = b.start(t, etype::GROUP_API, 0, &[2]);
    let next = (k.rank + 1) % k.nranks;
    let prev = (k.rank + k.nranks - 1) % k.nranks;
    let mut parts = Vec::new();
    for (name, peer) in [("Send", next), ("Recv", prev)] {
        let a = format::pack_coll(f(name), float, 255, 255, 0, 0);
        let api = b.start(t + 1, etype::P2P_API, g, &[0, GROUP_BYTES / 4, a]);
        b.stop(t + 2, api);
        let p = format::pack_coll(f(name), float, 255, 255, 1, 0);
        let id = b.start(
            t + 10,
            etype::P2P,
            api,
            &[0, GROUP_BYTES / 4, p, peer as u64],
        );
        let op = b.start(
            t + 11,
            etype::PROXY_OP,
            id,
            &[9, 0, peer as u64, 1, 0, (name == "Send") as u64],
        );
        parts.push((id, op));
    }
    for (id, _) in &parts {
        b.stop(t + 20, *id);
    }
    b.stop(t + 30, g);
    for (_, op) in &parts {
        b.stop(t + 500, *op);
    }
    // Something later, so the live tracker's grace for the AlltoAll's missing self parts passes.
    let mut c = Rec::new(k.t0 + 300_000_000, 7, kind::CLOCK, 0, 0);
    c.0[5] = k.t0 + 300_000_000;
    c.0[6] = 1_000_000_000 + k.t0 + 300_000_000;
    b.recs.push(c);
    b.recs
}
