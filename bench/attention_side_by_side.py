#!/usr/bin/python3
"""posenc's attention kernel beside PyTorch's attention, in one process, same threads.

PyTorch (Debian's python3-torch, CPU) runs attention the way a model written in torch ops does:
q k^T, + ALiBi bias (a [heads, T, T] tensor, built before the clock starts) + causal mask,
softmax, x v. posenc runs posenc.attention (the tiled kernel, bias from positions inside the
tile loop). Same inputs; the outputs are compared (max abs difference) before anything is timed.
Useful work counts only the causal lower triangle: 4 T(T+1)/2 head_dim heads flops for prefill,
4 keys head_dim query_heads for decode.

usage: PYTHONPATH=build/python /usr/bin/python3 bench/attention_side_by_side.py \
  [--threads 2] [--repeats 10]
"""

import argparse
import time

import numpy as np
import torch

import posenc


def best_seconds(fn, repeats):
    fn()  # warm-up: page faults, thread start, caches
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def torch_attention(q, k, v, bias, mask, scale):
    # q [heads, Tq, d], k and v [kv_heads, Tk, d]; grouped heads share k and v without a copy.
    heads, tq, d = q.shape
    kv_heads = k.shape[0]
    qg = q.reshape(kv_heads, heads // kv_heads * tq, d)
    scores = torch.matmul(qg, k.transpose(1, 2)).mul_(scale).reshape(heads, tq, -1)
    if bias is not None:
        scores += bias
    if mask is not None:
        scores.masked_fill_(mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).reshape(kv_heads, heads // kv_heads * tq, -1)
    return torch.matmul(weights, v).reshape(heads, tq, d)


def case(name, tq, tk, heads, kv_heads, d, alibi, repeats, useful_flops, dtype=torch.float32):
    """dtype float32, or bfloat16: posenc on the bits (bfloat16=True), PyTorch in bfloat16."""
    rng = np.random.default_rng(0)
    q, k, v = (
        torch.from_numpy(rng.standard_normal(shape, dtype=np.float32)).to(dtype)
        for shape in ((tq, heads, d), (tk, kv_heads, d), (tk, kv_heads, d))
    )
    qpos = np.arange(tk - tq, tk, dtype=np.int64)
    kpos = np.arange(tk, dtype=np.int64)
    scale = 1.0 / np.sqrt(d)
    spec = posenc.Alibi(heads) if alibi else None

    qt, kt, vt = (x.permute(1, 0, 2).contiguous() for x in (q, k, v))
    distance = torch.from_numpy(qpos)[:, None] - torch.from_numpy(kpos)[None, :]
    mask = distance < 0 if tq > 1 else None
    bias = None
    if alibi:
        slopes = torch.tensor(posenc.alibi_slopes(spec), dtype=torch.float32)
        bias = (-slopes[:, None, None] * distance[None].float()).to(dtype)

    bf16 = dtype == torch.bfloat16
    arrays = [(x.view(torch.int16) if bf16 else x).numpy() for x in (q, k, v)]
    out = np.empty((tq, heads, d), dtype=np.float32)
    run_posenc = lambda: posenc.attention(
        *arrays, qpos, kpos, causal=True, alibi=spec, out=out, bfloat16=bf16
    )
    with torch.no_grad():
        run_torch = lambda: torch_attention(qt, kt, vt, bias, mask, scale)
        reference = run_torch().permute(1, 0, 2).float().numpy()
        run_posenc()
        diff = float(np.max(np.abs(out - reference)))
        t_posenc = best_seconds(run_posenc, repeats)
        t_torch = best_seconds(run_torch, repeats)
    gp, gt = useful_flops / t_posenc / 1e9, useful_flops / t_torch / 1e9
    print(
        f"| {name} | {t_posenc * 1e3:.2f} ms, {gp:.0f} GFLOP/s | {t_torch * 1e3:.2f} ms, "
        f"{gt:.0f} GFLOP/s | {t_torch / t_posenc:.1f}x | {diff:.1e} |"
    )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)  # posenc's OpenMP threads: OMP_NUM_THREADS or all cores
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print("| case | posenc | PyTorch | posenc speed-up | max abs diff |")
    print("|---|---:|---:|---:|---:|")
    t, h, d = 2048, 8, 128
    prefill = 4 * t * (t + 1) / 2 * d * h
    case("prefill T=2048, 8 heads, 128, causal", t, t, h, h, d, False, args.repeats, prefill)
    case("prefill T=2048, 8 heads, 128, causal, ALiBi", t, t, h, h, d, True, args.repeats, prefill)
    case(
        "prefill bfloat16, causal (PyTorch in bfloat16)",
        t,
        t,
        h,
        h,
        d,
        False,
        args.repeats,
        prefill,
        torch.bfloat16,
    )
    case(
        "prefill bfloat16, causal, ALiBi (PyTorch in bfloat16)",
        t,
        t,
        h,
        h,
        d,
        True,
        args.repeats,
        prefill,
        torch.bfloat16,
    )
    keys, qh, kvh = 8192, 32, 8
    case(
        "decode 1 x 8192 keys, 32 over 8 heads",
        1,
        keys,
        qh,
        kvh,
        d,
        False,
        args.repeats * 5,
        4 * keys * d * qh,
    )
    case(
        "decode bfloat16 (PyTorch in bfloat16)",
        1,
        keys,
        qh,
        kvh,
        d,
        False,
        args.repeats * 5,
        4 * keys * d * qh,
        torch.bfloat16,
    )


if __name__ == "__main__":
    main()
