#!/usr/bin/python3
"""Context-parallel (ring) attention on loopback: posenc.torch.distributed over gloo, 1, 2 and 4
ranks on this machine, one training step (forward + backward) of causal attention.

Each rank holds its zigzag shard of a T-token sequence (q, k, v [T / world, heads, head_dim],
float32) and runs context_parallel_attention then backward. The call's stats separate compute
(the kernel calls and the log-sum-exp merges) from waits (time blocked on isend/irecv; a wait is
short when the transfer hid behind the kernel) and count the bytes each rank sends. The
theoretical minimum a rank must receive (hence, on a ring, send) in the forward pass is
(world - 1) / world of the whole K and V, i.e. (world - 1) shards; the backward pass sends K/V
again (world - 1 shards: blocks are not kept from the forward pass, to keep memory at one shard)
plus the reduce-scatter of dk and dv (world - 1 float32 shards). Positions add 8 bytes a token.

Useful work counts the causal lower triangle: 4 T(T+1)/2 head_dim heads flops forward and 2.5x
that backward (the scores recomputed, then dv, dp, dq, dk: five products against two).

usage: PYTHONPATH=build/python /usr/bin/python3 bench/context_parallel.py [--tokens 4096]
       [--heads 8] [--head-dim 64] [--worlds 1 2 4] [--repeats 3] [--threads N]
(--threads: kernel threads per rank; default the CPU count divided by the ranks, at least 1.)
"""

import argparse
import datetime
import os
import socket
import statistics
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_main(rank, world, port, args, threads, results):
    import torch
    import torch.distributed as dist

    import posenc.torch as pt

    torch.set_num_threads(threads)  # posenc's OpenMP regions follow torch's thread count
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=120),
    )
    cp = pt.distributed
    pos = cp.shard_positions(args.tokens, world, rank, "zigzag")
    g = torch.Generator().manual_seed(rank)
    shape = (len(pos), args.heads, args.head_dim)
    q, k, v, d_out = (torch.randn(*shape, generator=g) for _ in range(4))
    steps = []
    for repeat in range(args.repeats + 1):  # the first round warms up
        qs, ks, vs = (t.clone().requires_grad_() for t in (q, k, v))
        fwd, bwd = {}, {}
        dist.barrier()
        start = time.perf_counter()
        out = cp.context_parallel_attention(
            qs, ks, vs, pos, causal=True, stats=fwd, qkv_format="bshd"
        )
        middle = time.perf_counter()
        # The backward pass's stats land in the dict the forward call was given.
        before = dict(fwd)
        out.backward(d_out)
        end = time.perf_counter()
        for key in ("compute_s", "wait_s", "bytes_sent"):
            bwd[key] = fwd.get(key, 0) - before.get(key, 0)
        if repeat:
            steps.append(
                dict(
                    step_s=end - start,
                    fwd_s=middle - start,
                    bwd_s=end - middle,
                    fwd_compute_s=before.get("compute_s", 0),
                    fwd_wait_s=before.get("wait_s", 0),
                    fwd_bytes=before.get("bytes_sent", 0),
                    bwd_compute_s=bwd["compute_s"],
                    bwd_wait_s=bwd["wait_s"],
                    bwd_bytes=bwd["bytes_sent"],
                )
            )
    dist.barrier()
    dist.destroy_process_group()
    # The median repeat of this rank.
    steps.sort(key=lambda s: s["step_s"])
    results.put((rank, steps[len(steps) // 2]))


def run_world(world, args):
    import torch.multiprocessing as mp

    threads = args.threads or max(1, (os.cpu_count() or 1) // world)
    context = mp.get_context("spawn")
    results = context.Queue()
    port = free_port()
    processes = [
        context.Process(target=rank_main, args=(r, world, port, args, threads, results))
        for r in range(world)
    ]
    for p in processes:
        p.start()
    try:
        reports = dict(results.get(timeout=600) for _ in range(world))
    finally:
        for p in processes:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    return threads, reports


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--worlds", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=0)
    args = parser.parse_args()

    t, h, d = args.tokens, args.heads, args.head_dim
    fwd_flops = 4 * t * (t + 1) / 2 * d * h
    bwd_flops = 2.5 * fwd_flops
    kv_bytes = 2 * t * h * d * 4  # the whole K and V, float32
    cpu = "unknown"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    print(
        f"CPU: {cpu}, {os.cpu_count()} CPUs; T = {t}, {h} heads, head_dim {d}, causal, "
        "float32, zigzag shards, gloo on 127.0.0.1"
    )
    print(
        "Per rank, one step (median of the repeats; compute and wait: mean over ranks;"
        " step: slowest rank)"
    )
    header = (
        "| ranks | threads/rank | step ms | fwd ms | bwd ms | fwd compute ms | fwd wait ms "
        "| bwd compute ms | bwd wait ms | GFLOP/s/rank (compute) | fwd MB sent | fwd min MB "
        "| bwd MB sent | bwd min MB |"
    )
    print(header)
    print("|" + "---:|" * (header.count("|") - 1))
    for world in args.worlds:
        threads, reports = run_world(world, args)
        rows = list(reports.values())

        def mean(key, rows=rows):
            return statistics.mean(r[key] for r in rows)

        compute = mean("fwd_compute_s") + mean("bwd_compute_s")
        rate = (fwd_flops + bwd_flops) / world / compute / 1e9
        shard = kv_bytes / world
        print(
            f"| {world} | {threads} | {max(r['step_s'] for r in rows) * 1e3:.0f} "
            f"| {max(r['fwd_s'] for r in rows) * 1e3:.0f} "
            f"| {max(r['bwd_s'] for r in rows) * 1e3:.0f} "
            f"| {mean('fwd_compute_s') * 1e3:.0f} | {mean('fwd_wait_s') * 1e3:.1f} "
            f"| {mean('bwd_compute_s') * 1e3:.0f} | {mean('bwd_wait_s') * 1e3:.1f} "
            f"| {rate:.1f} | {mean('fwd_bytes') / 1e6:.2f} "
            f"| {(world - 1) * shard / 1e6:.2f} | {mean('bwd_bytes') / 1e6:.2f} "
            f"| {2 * (world - 1) * shard / 1e6:.2f} |",
            flush=True,
        )
    print(
        "fwd min: (world - 1) / world of K and V; bwd min: K and V again plus the dk, dv "
        "reduce-scatter, each (world - 1) / world of K and V."
    )


if __name__ == "__main__":
    main()
