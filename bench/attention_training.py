#!/usr/bin/python3
"""Training through attention: posenc.torch.attention (the kernel's forward pass with its
log-sum-exp, then the FlashAttention-2 style backward pass, as an autograd Function) beside the
same attention written in PyTorch ops with autograd, in one process, same threads.

PyTorch runs it the way a model written in torch ops does: q k^T x scale, + ALiBi bias (a
[heads, T, T] tensor built before the clock starts, as a model would cache it), causal
masked_fill, softmax, x v, then autograd's backward through each op (which keeps the T x T
scores and weights). Layouts are each side's own: PyTorch [heads, T, d] (contiguous matmuls),
posenc [T, heads, d]. Both get the same values and the same d_out; the gradients are compared
(max abs difference) before anything is timed. A step is forward + backward (out.backward(d_out));
the forward passes are also timed alone (recording for autograd, as in training).
leaf gradients are cleared between steps outside the clock. The two sides alternate step by
step; each reports its best of --repeats after a warm-up round: the machine may be shared, and
the best is the least disturbed run.

usage: PYTHONPATH=build/python /usr/bin/python3 bench/attention_training.py [--threads 2]
       [--repeats 5] [--tokens 512 1024 2048]
"""

import argparse
import time

import torch

import posenc
import posenc.torch as pt


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def best_seconds(steps, repeats):
    """Best wall time of each (step, leaves) over repeats, after one warm-up round. The steps
    alternate, so a burst of load from elsewhere on a shared machine hits both sides alike."""
    best = [float("inf")] * len(steps)
    for i in range(repeats + 1):
        for j, (step, leaves) in enumerate(steps):
            for t in leaves:
                t.grad = None
            start = time.perf_counter()
            step()
            elapsed = time.perf_counter() - start
            if i > 0:  # the first round is the warm-up: page faults, thread start, caches
                best[j] = min(best[j], elapsed)
    return best


def torch_attention(q, k, v, bias, mask, scale):
    """q, k, v [heads, T, d] -> [heads, T, d], autograd through each op."""
    scores = torch.matmul(q, k.transpose(-1, -2)) * scale + bias
    weights = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)
    return torch.matmul(weights, v)


def case(tokens, heads, head_dim, repeats):
    generator = torch.Generator().manual_seed(0)
    q, k, v, d_out = (torch.randn(tokens, heads, head_dim, generator=generator) for _ in range(4))
    alibi = posenc.Alibi(heads)
    positions = torch.arange(tokens)
    scale = head_dim**-0.5

    # posenc: [T, heads, d] leaves, positions and ALiBi inside the kernel.
    pq, pk, pv = (x.clone().requires_grad_() for x in (q, k, v))

    def posenc_forward():
        return pt.attention(
            pq, pk, pv, positions, positions, causal=True, alibi=alibi, qkv_format="bshd"
        )

    def posenc_step():
        posenc_forward().backward(d_out)

    # PyTorch: [heads, T, d] leaves; the bias and mask are constants, built once.
    tq, tk, tv = (x.transpose(0, 1).contiguous().requires_grad_() for x in (q, k, v))
    t_d_out = d_out.transpose(0, 1).contiguous()
    slopes = torch.tensor(posenc.alibi_slopes(alibi), dtype=torch.float32)
    distance = (positions[:, None] - positions[None, :]).to(torch.float32)
    bias = -slopes[:, None, None] * distance
    mask = distance < 0

    def torch_forward():
        return torch_attention(tq, tk, tv, bias, mask, scale)

    def torch_step():
        torch_forward().backward(t_d_out)

    # The same gradients first (PyTorch's in float32, so differences are both sides' rounding).
    posenc_step()
    torch_step()
    diff = max(
        float((a.grad - b.grad.transpose(0, 1)).abs().max())
        for a, b in ((pq, tq), (pk, tk), (pv, tv))
    )
    # The forward passes alone (recording, as in training) say how each side's time splits.
    return best_seconds(
        [
            (posenc_forward, ()),
            (posenc_step, (pq, pk, pv)),
            (torch_forward, ()),
            (torch_step, (tq, tk, tv)),
        ],
        repeats,
    ), diff


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--tokens", type=int, nargs="+", default=[512, 1024, 2048])
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=128)
    args = parser.parse_args()
    # posenc's OpenMP regions run on the calling thread's team size, which this sets too.
    torch.set_num_threads(args.threads)
    print(f"CPU: {cpu_model()}")
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; "
        f"causal + ALiBi, {args.heads} heads, head_dim {args.head_dim}, float32, "
        f"forward + backward, best of {args.repeats}"
    )
    print()
    header = (
        "T",
        "posenc fwd",
        "posenc fwd+bwd",
        "PyTorch fwd",
        "PyTorch fwd+bwd",
        "speed-up (fwd+bwd)",
        "max abs grad diff",
    )
    rows = []
    for tokens in args.tokens:
        times, diff = case(tokens, args.heads, args.head_dim, args.repeats)
        _, posenc_step, _, torch_step = times
        rows.append(
            (
                str(tokens),
                *(f"{t * 1e3:.1f} ms" for t in times),
                f"{torch_step / posenc_step:.2f}x",
                f"{diff:.1e}",
            )
        )
    widths = [max(len(r[i]) for r in rows + [header]) for i in range(len(header))]
    print(" | ".join(h.rjust(w) for h, w in zip(header, widths)))
    print("-+-".join("-" * w for w in widths))
    for row in rows:
        print(" | ".join(c.rjust(w) for c, w in zip(row, widths)))


if __name__ == "__main__":
    main()
