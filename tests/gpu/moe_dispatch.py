#!/usr/bin/env python3
"""An expert-parallel MoE layer's dispatch and combine over NCCL with skewed routing (issue 24, the
paper's MoE case study on one GPU).

    mpirun -np 4 ... python3 tests/gpu/moe_dispatch.py OUTDIR [--steps 16] [--tokens 1024]
                                                       [--hidden 1024] [--topk 2] [--hot 2]
                                                       [--hot-bias 2.5]

Each MPI rank is one expert-parallel rank with EXPERTS_PER_RANK experts (rank r holds experts
2r and 2r+1). Per step every rank routes its `tokens` tokens (bf16, `hidden` wide) top-k over all
experts with router logits = N(0, 1) + `hot_bias` on the hot rank's experts (the "hot experts":
uneven routing), then
  dispatch: all_to_all_single of the token copies, sorted by destination rank, with the splits the
            routing gives (input splits = tokens this rank sends to each rank);
  expert:   each received token is scaled by (2 + the receiving rank), standing in for the FFN;
  combine:  all_to_all_single back, with the splits transposed;
and checks that every token came back as (2 + the rank it went to) x itself.

The router is replicated: rank r draws the routing of every rank s from a generator seeded with
(seed, step, s), so each rank knows its receive splits without exchanging counts, and the NIC
carries only dispatch and combine. Rank 0 writes OUTDIR/splits.json: per step the split matrix
S[src][dst] (token copies src sends dst in the dispatch; the combine sends S[src][dst] back from
dst to src), with hidden, bytes per element, steps, topk and hot rank, from which a checker
computes the exact bytes every pair of ranks moved. Every rank prints one line
"moe rank R ok steps=N sent=[...] recv=[...]" (token copies per peer over all steps) and exits 0,
or names the token that came back wrong and exits 1.

Launched by tests/gpu/nccl_device.sh moe (NCCL_HOSTID and the UTS host name per rank come from
tests/gpu/nccl_rank.sh: each rank is its own NCCL node, talking over NET/IB on the software NIC).
"""
import argparse
import json
import os
import sys

import torch
import torch.distributed as dist

EXPERTS_PER_RANK = 2


def env_int(*names, default):
    for n in names:
        v = os.environ.get(n)
        if v is not None and v.strip().isdigit():
            return int(v)
    return default


def routing(seed, step, src, tokens, experts, topk, hot, hot_bias, world, device):
    """Destination rank of each of src's token copies at `step` (tokens * topk of them, token-major)."""
    g = torch.Generator(device=device)
    g.manual_seed(seed * 1_000_003 + step * 1_009 + src)
    logits = torch.randn(tokens, experts, generator=g, device=device)
    logits[:, hot * EXPERTS_PER_RANK:(hot + 1) * EXPERTS_PER_RANK] += hot_bias
    top = logits.topk(topk, dim=1).indices  # [tokens, topk]
    return (top // EXPERTS_PER_RANK).flatten()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=1024)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--topk", type=int, default=2)
    ap.add_argument("--hot", type=int, default=2)
    ap.add_argument("--hot-bias", type=float, default=2.5)
    ap.add_argument("--seed", type=int, default=24)
    a = ap.parse_args()

    rank = env_int("OMPI_COMM_WORLD_RANK", "PMI_RANK", "RANK", default=0)
    world = env_int("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "WORLD_SIZE", default=1)
    port = env_int("MOE_PORT", default=29524)
    if not 0 <= a.hot < world:
        print(f"moe: --hot {a.hot} is no rank of {world}: give 0..{world - 1}", file=sys.stderr)
        return 2
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, device_id=dev)
    experts = world * EXPERTS_PER_RANK
    elem = torch.tensor([], dtype=torch.bfloat16).element_size()
    g = torch.Generator(device=dev)
    g.manual_seed(a.seed + 7919 * rank)
    x = torch.randn(a.tokens, a.hidden, generator=g, device=dev).to(torch.bfloat16)
    sent = [0] * world
    recvd = [0] * world
    matrices = []
    for step in range(a.steps):
        # Every rank's routing (replicated router): S[s][d] token copies s -> d.
        dest = [routing(a.seed, step, s, a.tokens, experts, a.topk, a.hot, a.hot_bias, world, dev)
                for s in range(world)]
        S = [torch.bincount(d, minlength=world).tolist() for d in dest]
        matrices.append(S)
        mine = dest[rank]
        order = torch.argsort(mine, stable=True)
        send = x.repeat_interleave(a.topk, dim=0)[order]
        in_splits = S[rank]
        out_splits = [S[s][rank] for s in range(world)]
        recv = torch.empty(sum(out_splits), a.hidden, dtype=torch.bfloat16, device=dev)
        dist.all_to_all_single(recv, send, out_splits, in_splits)
        y = recv * (2 + rank)
        back = torch.empty_like(send)
        dist.all_to_all_single(back, y, in_splits, out_splits)
        want = send * (2 + mine[order]).to(torch.bfloat16).unsqueeze(1)
        if not torch.equal(back, want):
            bad = (back != want).any(dim=1).nonzero()[0].item()
            print(f"moe rank {rank}: step {step}: token copy {bad} came back wrong", file=sys.stderr)
            return 1
        for d in range(world):
            sent[d] += in_splits[d]
            recvd[d] += out_splits[d]
    torch.cuda.synchronize()
    dist.destroy_process_group()
    if rank == 0:
        os.makedirs(a.outdir, exist_ok=True)
        with open(os.path.join(a.outdir, "splits.json"), "w") as f:
            json.dump({"world": world, "steps": a.steps, "tokens": a.tokens, "hidden": a.hidden,
                       "topk": a.topk, "hot": a.hot, "hot_bias": a.hot_bias, "seed": a.seed,
                       "elem_bytes": elem, "experts_per_rank": EXPERTS_PER_RANK,
                       "splits": matrices}, f)
    print(f"moe rank {rank} ok steps={a.steps} sent={sent} recv={recvd}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
