"""Wrapper time of posenc.torch: what a call costs beyond the C++ call it makes.

Each case times the posenc.torch call and, in the same run, the bare binding
call it ends in (posenc._core on numpy views prepared beforehand). The
difference is the Python wrapper's time per call: checks, conversions, the
output allocation. Shapes are a decode step's, where the kernel itself takes
a few microseconds and the wrapper's share matters most.

    PYTHONPATH=build/python /usr/bin/python3 bench/python_overhead.py
"""

import argparse
import timeit

import numpy as np
import torch

import posenc
import posenc.torch as pt
from posenc import _core


def best_us(call, number, repeat):
    """The best of `repeat` runs of `number` calls, in microseconds per call."""
    return min(timeit.repeat(call, number=number, repeat=repeat)) / number * 1e6


def cases(kv_tokens):
    rope = posenc.Rope.default(128, 500000.0)
    positions = torch.tensor([kv_tokens - 1])
    q = torch.randn(1, 32, 128)  # one decode token, 32 heads
    k = torch.randn(1, 8, 128)
    q_out, k_out = torch.empty_like(q), torch.empty_like(k)
    keys = torch.randn(kv_tokens, 8, 128)
    values = torch.randn(kv_tokens, 8, 128)
    key_positions = torch.arange(kv_tokens)
    out = torch.empty(1, 32, 128)
    arrays = [t.numpy() for t in (q, k, q_out, k_out, keys, values, out)]
    pos, kpos = positions.numpy(), key_positions.numpy()
    yield (
        "rope q and k (1 token, 32 + 8 heads, 128)",
        lambda: pt.apply_rope(rope, positions, q, k, qkv_format="bshd"),
        lambda: _core.apply_rope_qk(
            rope, pos, arrays[0], arrays[1], q_out=arrays[2], k_out=arrays[3]
        ),
    )
    yield (
        "rope in place (1 token, 32 + 8 heads, 128)",
        lambda: pt.apply_rope_(rope, positions, q, k, qkv_format="bshd"),
        lambda: _core.apply_rope_qk_inplace(rope, pos, arrays[0], arrays[1]),
    )
    yield (
        f"decode attention ({kv_tokens} keys), new output",
        lambda: pt.attention(
            q, keys, values, positions, key_positions, causal=True, qkv_format="bshd"
        ),
        lambda: _core.attention(arrays[0], arrays[4], arrays[5], pos, kpos, causal=True),
    )
    yield (
        f"decode attention ({kv_tokens} keys, 32 / 8 heads, 128), out=",
        lambda: pt.attention(
            q, keys, values, positions, key_positions, causal=True, out=out, qkv_format="bshd"
        ),
        lambda: _core.attention(
            arrays[0], arrays[4], arrays[5], pos, kpos, causal=True, out=arrays[6]
        ),
    )


def model_decode_cases(kv_tokens):
    """A decode step as model code makes it: one query, 8 heads of 64 (as many kv heads), in
    posenc's layout with explicit positions, with the default ones, and in Hugging Face's."""
    q = torch.randn(1, 1, 8, 64)
    keys, values = torch.randn(1, kv_tokens, 8, 64), torch.randn(1, kv_tokens, 8, 64)
    positions, key_positions = torch.tensor([kv_tokens - 1]), torch.arange(kv_tokens)
    arrays = [t.numpy() for t in (q, keys, values)]
    pos, kpos = positions.numpy(), key_positions.numpy()
    hf = [t.transpose(1, 2) for t in (q, keys, values)]

    def bare():
        return _core.attention(*arrays, pos, kpos, causal=True)

    yield (
        f"decode 8 x 64, {kv_tokens} keys, bshd, positions",
        lambda: pt.attention(
            q, keys, values, positions, key_positions, causal=True, qkv_format="bshd"
        ),
        bare,
    )
    yield (
        f"decode 8 x 64, {kv_tokens} keys, bshd, default positions",
        lambda: pt.attention(q, keys, values, causal=True, qkv_format="bshd"),
        bare,
    )
    yield (
        f"decode 8 x 64, {kv_tokens} keys, bhsd, default positions",
        lambda: pt.attention(*hf, causal=True, qkv_format="bhsd"),
        bare,
    )


def add_twice_us(number, repeat):
    """Two plain torch.add calls on a decode step's q: the yardstick of a few microseconds."""
    a, b = torch.randn(8, 64), torch.randn(8, 64)
    return best_us(lambda: (torch.add(a, b), torch.add(a, b)), number, repeat)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kv-tokens", type=int, default=256)
    parser.add_argument("--model-kv-tokens", type=int, default=512)
    parser.add_argument("--number", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"{'case':<56} {'posenc.torch':>12} {'binding':>9} {'wrapper':>9}")
    print(f"{'two torch.add calls (8 x 64)':<56} {add_twice_us(args.number, args.repeat):9.2f} us")
    all_cases = list(cases(args.kv_tokens)) + list(model_decode_cases(args.model_kv_tokens))
    for name, wrapped, bare in all_cases:
        for call in (wrapped, bare):  # warm up
            call()
        full = best_us(wrapped, args.number, args.repeat)
        base = best_us(bare, args.number, args.repeat)
        print(f"{name:<56} {full:9.2f} us {base:6.2f} us {full - base:6.2f} us")


if __name__ == "__main__":
    np.random.seed(0)
    main()
