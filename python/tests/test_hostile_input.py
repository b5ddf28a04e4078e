"""Hostile and careless input to the numpy and torch APIs: one row per case.

Each error row names the exact message and asserts that every buffer the call
could reach is unchanged afterwards (nothing is written when an argument is
bad). The other tables hold what must succeed: legitimate aliasing, empty
inputs, and NaN carried through attention as the math carries it.
"""

import pathlib
import pickle
import re
import subprocess
import sys
import traceback

import numpy as np
import pytest
import torch
from numpy.lib.stride_tricks import as_strided

import posenc
import posenc.torch as pt
import posenc.torch.distributed as cp

ROPE = posenc.Rope.default(8)
CAP = "must hold at most 17179869184 bytes (16 GiB, the cap on arrays posenc allocates)"
CONFIGS = pathlib.Path(__file__).resolve().parents[2] / "tests" / "configs"


def past_limit(name, value):
    """The message of the one position rule, the same on every path."""
    return (
        f"{name} must be <= 2^32 = 4294967296 (kMaxPosition, where float32 RoPE "
        f"stops being accurate), got {value}"
    )


def data(*shape, dtype=np.float32):
    """Distinct values (so a rotation or overwrite always shows)."""
    return np.random.default_rng(7).standard_normal(shape).astype(dtype)


def tensor(*shape):
    return torch.from_numpy(data(*shape))


# Each builder returns (call, buffers): the call must raise, and the buffers
# (every array it could write, as their base memory) must keep their bytes.


def inplace_qk_later_element_overlaps():
    # Negative batch stride, so one call per element: q[0] and k[0] are
    # apart, q[1] and k[1] are the same rows. Element 0 used to be rotated
    # before element 1 raised.
    buf = data(4, 3, 2, 8)
    q, k = buf[0:2], buf[3:0:-2]
    return lambda: posenc.apply_rope_qk_inplace(ROPE, np.arange(3), q, k), [buf]


def inplace_qk_overlap_across_batch():
    # q[1] is k[0]; within each element q and k are apart.
    buf = data(3, 3, 2, 8)
    q, k = buf[1::-1], buf[2:0:-1]
    return lambda: posenc.apply_rope_qk_inplace(ROPE, np.arange(3), q, k), [buf]


def out_overlaps_x_across_batch():
    # out[1] is x[0]: writing element 0 used to overwrite the input of 1.
    buf = data(3, 3, 2, 8)
    x, out = buf[1::-1], buf[2:0:-1]
    return lambda: posenc.apply_rope(ROPE, np.arange(3), x, out=out), [buf]


def qk_out_overlaps_k_across_batch():
    buf, q = data(3, 3, 2, 8), data(2, 3, 2, 8)
    k, k_out = buf[1::-1], buf[2:0:-1]
    return (
        lambda: posenc.apply_rope_qk(ROPE, np.arange(3), q, k, q_out=np.empty_like(q), k_out=k_out),
        [buf, q],
    )


def inplace_batch_elements_share_memory():
    # A writeable broadcast: both batch elements are the same rows, which
    # would be rotated twice.
    buf = data(3, 2, 8)
    x = as_strided(buf, (2, 3, 2, 8), (0,) + buf.strides)
    return lambda: posenc.apply_rope_inplace(ROPE, np.arange(3), x), [buf]


def hf_layout_overlap_across_batch_torch():
    # Hugging Face [batch, heads, seq, dim] tensors, seen as numpy views of
    # their memory (as torch users call the in-place API); k[0] is q[1].
    buf = tensor(3, 2, 3, 8)
    q, k = buf[0:2].transpose(1, 2), buf[1:3].transpose(1, 2)
    return (
        lambda: posenc.apply_rope_qk_inplace(ROPE, np.arange(3), q.numpy(), k.numpy()),
        [buf.numpy()],
    )


def attention_out_overlaps_q_across_batch():
    # out[0] is q[1]: element 0's result used to overwrite element 1's query.
    buf, kv = data(3, 3, 2, 8), data(2, 3, 2, 8)
    q, out = buf[0:2], buf[1:3]
    return (
        lambda: posenc.attention(q, kv, kv, np.arange(3), out=out),
        [buf, kv],
    )


def attention_out_overlaps_v_across_batch():
    buf, q = data(3, 3, 2, 8), data(2, 3, 2, 8)
    v, out = buf[0:2], buf[1:3]
    return (
        lambda: posenc.attention(q, q, v, np.arange(3), out=out),
        [buf, q],
    )


def hf_layout_later_position_too_large():
    buf = data(2, 2, 3, 8)  # [batch, heads, seq, dim]
    x = buf.transpose(0, 2, 1, 3)
    positions = [[0, 1, 2], [0, 1, 2**40]]
    return lambda: posenc.apply_rope_inplace(ROPE, positions, x), [buf]


def masked_attention_out_later_row_bad():
    # A key mask runs one kernel call per batch row: row 0 used to be written
    # into out before row 1's position was refused.
    q, out = tensor(2, 3, 2, 8), tensor(2, 3, 2, 8)
    mask = torch.ones(2, 3, dtype=torch.bool)
    positions = torch.tensor([[0, 1, 2], [0, 1, 2**40]])
    return (
        lambda: pt.attention(q, q, q, positions, attention_mask=mask, out=out, qkv_format="bshd"),
        [q.numpy(), out.numpy()],
    )


def attention_out_requires_grad():
    q, out = tensor(2, 3, 2, 8), torch.zeros(2, 3, 2, 8, requires_grad=True)
    return lambda: pt.attention(q, q, q, out=out, qkv_format="bshd"), [
        q.numpy(),
        out.detach().numpy(),
    ]


def torch_positions_past_limit(call, dtype):
    """call(q) on q of dtype (the PyTorch-definition paths) must refuse
    positions as the float32 kernel does."""

    def build():
        q = tensor(3, 2, 8).to(dtype)
        return (lambda: call(q)), [q.numpy()]

    return build


def kv_cache_call(call):
    """call(cache) on a cache holding two tokens; the cache must not change."""

    def build():
        cache = pt.KVCache(4, 2, 8, rope=ROPE)
        cache.append(tensor(2, 2, 8), tensor(2, 2, 8))
        keys = cache._cache.keys  # a read-only view of the cache's own memory
        return (lambda: call(cache)), [keys]

    return build


def tampered_state(cls, obj, index, value):
    """Unpickling obj's state with field index replaced."""
    state = list(obj.__getstate__())
    state[index] = value
    return lambda: cls.__new__(cls).__setstate__(tuple(state))


def call_only(call, *shapes):
    """A call that reaches no caller memory but the arrays given."""
    return lambda: (call, list(shapes))


def float_positions(call):
    buf = data(2, 3, 2, 8)
    return lambda: (lambda: call(buf), [buf])


def torch_float_positions(call):
    q = tensor(2, 3, 2, 8)
    return lambda: (lambda: call(q), [q.numpy()])


def broadcast(shape):
    """A read-only view of `shape` over 32 bytes of memory."""
    return np.broadcast_to(np.zeros(shape[-1], np.float32), shape)


ERRORS = {
    # Data loss and aliasing across batch elements (numpy and torch memory).
    "inplace qk, later element overlaps": (
        inplace_qk_later_element_overlaps,
        "[rope] k must not share memory with q, got overlapping views (in batch element 1)",
    ),
    "inplace qk, overlap across batch": (
        inplace_qk_overlap_across_batch,
        "[rope] k must not share memory with q, got overlapping views",
    ),
    "out overlaps x across batch": (
        out_overlaps_x_across_batch,
        "[rope] out must not share memory with x, got overlapping views",
    ),
    "k_out overlaps k across batch": (
        qk_out_overlaps_k_across_batch,
        "[rope] k_out must not share memory with k, got overlapping views",
    ),
    "inplace, batch elements share memory": (
        inplace_batch_elements_share_memory,
        "[rope] x must not have batch elements that share memory, got strides (0, 64, 32, 4)",
    ),
    "torch HF layout, q and k overlap across batch": (
        hf_layout_overlap_across_batch_torch,
        "[rope] k must not share memory with q, got overlapping views",
    ),
    "attention out overlaps q across batch": (
        attention_out_overlaps_q_across_batch,
        "[attention] out must not share memory with q, got overlapping views",
    ),
    "attention out overlaps v across batch": (
        attention_out_overlaps_v_across_batch,
        "[attention] out must not share memory with v, got overlapping views",
    ),
    # Float positions: refused, never truncated.
    "numpy, list of floats": (
        float_positions(lambda x: posenc.apply_rope_inplace(ROPE, [0.9, 1.9, 2], x)),
        "[rope] positions must be an int64 array or a sequence of ints, got list",
    ),
    "numpy, float array": (
        float_positions(lambda x: posenc.apply_rope_inplace(ROPE, np.array([0.9, 1.9, 2.0]), x)),
        "[rope] positions must have dtype int64, got float64",
    ),
    "numpy, list of bools": (
        float_positions(lambda x: posenc.apply_rope_inplace(ROPE, [True, False, True], x)),
        "[rope] positions must be an int64 array or a sequence of ints, got list",
    ),
    "numpy attention, float key positions": (
        float_positions(lambda x: posenc.attention(x, x, x, np.arange(3), [0.5, 1, 2])),
        "[attention] key_positions must be an int64 array or a sequence of ints, got list",
    ),
    "torch, list of floats": (
        torch_float_positions(
            lambda q: pt.apply_rope(ROPE, [0.9, 1.9, 2.0], q, q, qkv_format="bshd")
        ),
        "[rope] positions must be an int64 tensor or a sequence of ints, got list of float32",
    ),
    "torch, float64 numpy array": (
        torch_float_positions(
            lambda q: pt.apply_rope(ROPE, np.array([0.9, 1.9, 2.0]), q, q, qkv_format="bshd")
        ),
        "[rope] positions must be an int64 tensor or a sequence of ints, got ndarray of float64",
    ),
    "torch, float tensor": (
        torch_float_positions(
            lambda q: pt.apply_rope(ROPE, torch.tensor([0.9, 1.9, 2.0]), q, q, qkv_format="bshd")
        ),
        "[rope] positions must have dtype int64, got float32",
    ),
    "torch, list of bools": (
        torch_float_positions(
            lambda q: pt.apply_rope(ROPE, [True, False, True], q, q, qkv_format="bshd")
        ),
        "[rope] positions must be an int64 tensor or a sequence of ints, got list of bool",
    ),
    "torch attention, float positions": (
        torch_float_positions(lambda q: pt.attention(q, q, q, [0.0, 1.0, 2.0], qkv_format="bshd")),
        "[attention] query_positions must be an int64 tensor or a sequence of "
        "ints, got list of float32",
    ),
    "torch sinusoidal, float positions": (
        call_only(lambda: pt.SinusoidalPositions(8)([0.5, 1.5])),
        "[sinusoidal] positions must be an int64 tensor or a sequence of ints, got list of float32",
    ),
    "torch alibi, float positions": (
        call_only(lambda: pt.alibi_bias(4, [0, 1], [0.5, 1.5])),
        "[alibi] key_positions must be an int64 tensor or a sequence of ints, got list of float32",
    ),
    # Positions: the library's one rule, checked for every batch element
    # before the first is written (the index is the entry's in the array given).
    "HF layout in place, later element's position too large": (
        hf_layout_later_position_too_large,
        "[rope] " + past_limit("positions[1][2]", 2**40),
    ),
    "torch attention, mask and out=, later row's position too large": (
        masked_attention_out_later_row_bad,
        "[attention] " + past_limit("query_positions[1][2]", 2**40),
    ),
    # Every path, the PyTorch definitions included, refuses what the float32
    # kernel refuses, with its message.
    "torch float64 attention, position past the limit": (
        torch_positions_past_limit(
            lambda q: pt.attention(q, q, q, [0, 1, 2**62], qkv_format="bshd"), torch.float64
        ),
        "[attention] " + past_limit("query_positions[2]", 2**62),
    ),
    "torch float16 attention, negative key position": (
        torch_positions_past_limit(
            lambda q: pt.attention(q, q, q, [0, 1, 2], [0, -1, 2], qkv_format="bshd"), torch.float16
        ),
        "[attention] key_positions[1] must be >= 0, got -1",
    ),
    "torch attention, kept keys not one interval, position past the limit": (
        torch_positions_past_limit(
            lambda q: pt.attention(
                q[None],
                q[None],
                q[None],
                [0, 1, 2**33],
                attention_mask=torch.tensor([[True, False, True]]),
                qkv_format="bshd",
            ),
            torch.float32,
        ),
        "[attention] " + past_limit("query_positions[2]", 2**33),
    ),
    "torch float64 self_extend, position past the limit": (
        torch_positions_past_limit(
            lambda q: pt.self_extend_attention(
                q,
                q,
                q,
                [0, 1, 2**62],
                rope=ROPE,
                group_size=2,
                neighbor_window=2,
                qkv_format="bshd",
            ),
            torch.float64,
        ),
        "[self_extend] " + past_limit("query_positions[2]", 2**62),
    ),
    "rope_cos_sin, position past the limit": (
        call_only(lambda: pt.rope_cos_sin(ROPE, [0, 2**62])),
        "[rope] " + past_limit("positions[1]", 2**62),
    ),
    "RelativePositionBias, position past the limit": (
        call_only(lambda: pt.RelativePositionBias().buckets([0, 2**33], [0])),
        "[relative_bias] " + past_limit("query_pos[1]", 2**33),
    ),
    "shard_positions 2^34 tokens": (
        call_only(lambda: cp.shard_positions(2**34, 1, 0)),
        "[shard_positions] " + past_limit("seq_len - 1", 2**34 - 1),
    ),
    "alibi_bias, negative position": (
        call_only(lambda: posenc.alibi_bias(posenc.Alibi(4), [0, -1])),
        "[alibi] query_positions[1] must be >= 0, got -1",
    ),
    "torch alibi_bias, position past the limit": (
        call_only(lambda: pt.alibi_bias(4, [0, 1], [2**62, 0])),
        "[alibi] key_positions[0] must be <= 2^32 = 4294967296 (kMaxPosition, "
        "where float32 RoPE stops being accurate), got 4611686018427387904",
    ),
    # Huge sizes: refused before any allocation.
    "shard_positions, 2^32 positions on one rank": (
        call_only(lambda: cp.shard_positions(2**32, 1, 0, "contiguous")),
        f"[shard_positions] positions.shape {CAP}, got (4294967296,) int64",
    ),
    "RelativePositionBias of 2^40 tokens": (
        call_only(lambda: pt.RelativePositionBias(num_heads=8)(2**40)),
        f"[relative_bias] out.shape {CAP}, got (8, 1099511627776, 1099511627776) float32",
    ),
    "RelativePositionBias of a negative length": (
        call_only(lambda: pt.RelativePositionBias()(-1, 4)),
        "[relative_bias] query must be a length >= 0 or int64 positions, got -1",
    ),
    "RotaryEmbedding, default positions of 2^40 meta tokens": (
        call_only(
            lambda: pt.RotaryEmbedding(8, qkv_format="bshd")(
                torch.empty(2**40, 1, 8, device="meta")
            )
        ),
        "[rope] " + past_limit("positions[1099511627775]", 2**40 - 1),
    ),
    "sinusoidal_table 2^40 x 2^20": (
        call_only(lambda: posenc.sinusoidal_table(2**40, 2**20)),
        f"[sinusoidal] [tokens, dim] {CAP}, got (1099511627776, 1048576) float32",
    ),
    "sinusoidal_table, product past int64": (
        call_only(lambda: posenc.sinusoidal_table(2**62, 2**20)),
        f"[sinusoidal] [tokens, dim] {CAP}, got (4611686018427387904, 1048576) float32",
    ),
    "sinusoidal, huge dim": (
        call_only(lambda: posenc.sinusoidal(np.arange(4), 2**40)),
        f"[sinusoidal] out.shape {CAP}, got (4, 1099511627776) float32",
    ),
    "LearnedPositions 2^40 rows": (
        call_only(lambda: posenc.LearnedPositions(2**40, 1024)),
        f"[learned] [max_positions, d_model] {CAP}, got (1099511627776, 1024) float32",
    ),
    "alibi_bias 2^17 x 2^17": (
        call_only(lambda: posenc.alibi_bias(posenc.Alibi(8), np.arange(2**17))),
        f"[alibi] out.shape {CAP}, got (8, 131072, 131072) float32",
    ),
    "torch alibi_bias 2^17 x 2^17": (
        call_only(lambda: pt.alibi_bias(8, torch.arange(2**17))),
        f"[alibi] out.shape {CAP}, got (8, 131072, 131072) float32",
    ),
    "apply_rope of a huge broadcast": (
        call_only(
            lambda: posenc.apply_rope(ROPE, np.arange(2**20), broadcast((2**20, 2**20, 1, 8)))
        ),
        f"[rope] out.shape {CAP}, got (1048576, 1048576, 1, 8) float32",
    ),
    "torch apply_rope of a huge expand": (
        call_only(
            lambda: pt.apply_rope(
                ROPE,
                torch.arange(2**20),
                *[torch.zeros(8).expand(2**20, 2**20, 1, 8)] * 2,
                qkv_format="bshd",
            )
        ),
        f"[rope] out.shape {CAP}, got (1048576, 1048576, 1, 8) float32",
    ),
    "attention of huge broadcasts": (
        call_only(
            lambda: posenc.attention(*[broadcast((2**10, 2**20, 4, 8))] * 3, np.arange(2**20))
        ),
        f"[attention] out.shape {CAP}, got (1024, 1048576, 4, 8) float32",
    ),
    # Arguments of the wrong type: posenc's message, not pybind11's signature.
    "torch attention, scale 0": (
        torch_float_positions(
            lambda q: pt.attention(q, q, q, [0, 1, 2], scale=0.0, qkv_format="bshd")
        ),
        "[attention] scale must be None (1 / sqrt(head_dim)) or a positive finite number, got 0.0",
    ),
    "torch attention, scale as a string": (
        torch_float_positions(
            lambda q: pt.attention(q, q, q, [0, 1, 2], scale="1.5", qkv_format="bshd")
        ),
        "[attention] scale must be None (1 / sqrt(head_dim)) or a positive finite number, got str",
    ),
    "torch attention, a sinusoidal module as rope": (
        torch_float_positions(
            lambda q: pt.attention(
                q, q, q, [0, 1, 2], rope=pt.SinusoidalPositions(8), qkv_format="bshd"
            )
        ),
        "[attention] rope must be None, a posenc.Rope, a posenc.torch.RotaryEmbedding, or for "
        "attention a posenc.MRope or a posenc.torch.MultimodalRotaryEmbedding, got "
        "SinusoidalPositions",
    ),
    "torch attention, float window": (
        torch_float_positions(
            lambda q: pt.attention(q, q, q, [0, 1, 2], window=1.5, qkv_format="bshd")
        ),
        "[attention] window must be an int >= 0 (0: no window), got 1.5",
    ),
    "torch attention, bad qkv_format": (
        torch_float_positions(lambda q: pt.attention(q, q, q, [0, 1, 2], qkv_format="sbhd")),
        "[attention] qkv_format must be 'bshd' ([..., tokens, heads, head_dim], posenc's) "
        "or 'bhsd' ([..., heads, tokens, head_dim], Hugging Face's), stated (no default: a "
        "[b, 8, 8, d] tensor reads either way), got 'sbhd'",
    ),
    "torch apply_rope, a number as rope": (
        torch_float_positions(lambda q: pt.apply_rope(8, [0, 1, 2], q, q, qkv_format="bshd")),
        "[rope] rope must be a posenc.Rope or a posenc.torch.RotaryEmbedding, got int",
    ),
    "torch attention, out= that requires grad": (
        attention_out_requires_grad,
        "[attention] out must not require grad while autograd records (out= is written "
        "in place), got a tensor that requires grad",
    ),
    "KVCache.from_hf_config, BLOOM": (
        call_only(lambda: pt.KVCache.from_hf_config(CONFIGS / "bloom.json", 8)),
        "[kv_cache] config must describe a model with RoPE (a RoPE-less cache: "
        "KVCache(capacity, kv_heads, head_dim), with attend(alibi=...) for ALiBi), "
        "got bloom (alibi)",
    ),
    "KVCache.from_hf_config, MPT": (
        call_only(lambda: pt.KVCache.from_hf_config(CONFIGS / "mpt-7b.json", 8)),
        "[kv_cache] config must describe a model with RoPE (a RoPE-less cache: "
        "KVCache(capacity, kv_heads, head_dim), with attend(alibi=...) for ALiBi), "
        "got mpt (alibi)",
    ),
    "KVCache.from_hf_config, GPT-2": (
        call_only(lambda: pt.KVCache.from_hf_config(CONFIGS / "gpt2.json", 8)),
        "[kv_cache] config must describe a model with RoPE (a RoPE-less cache: "
        "KVCache(capacity, kv_heads, head_dim), with attend(alibi=...) for ALiBi), "
        "got gpt2 (learned)",
    ),
    "KVCache.rope_delta, a float tensor": (
        kv_cache_call(lambda c: setattr(c, "rope_delta", torch.tensor([[1.5]]))),
        "[kv_cache] rope_delta must be an int in [-2^32, 2^32] or a one-element integer "
        "tensor (get_rope_index's rope_deltas[b]), got Tensor of shape (1, 1) and "
        "dtype torch.float32",
    ),
    "KVCache.rope_delta, a batch's deltas": (
        kv_cache_call(lambda c: setattr(c, "rope_delta", torch.tensor([[1], [2]]))),
        "[kv_cache] rope_delta must be an int in [-2^32, 2^32] or a one-element integer "
        "tensor (get_rope_index's rope_deltas[b]), got Tensor of shape (2, 1) and "
        "dtype torch.int64",
    ),
    "KVCache.rope_delta, a string": (
        kv_cache_call(lambda c: setattr(c, "rope_delta", "3")),
        "[kv_cache] rope_delta must be an int in [-2^32, 2^32] or a one-element integer "
        "tensor (get_rope_index's rope_deltas[b]), got str",
    ),
    "KVCache.rope_delta, 2^62": (
        kv_cache_call(lambda c: setattr(c, "rope_delta", 2**62)),
        "[kv_cache] rope_delta must be an int in [-2^32, 2^32] or a one-element integer "
        "tensor (get_rope_index's rope_deltas[b]), got 4611686018427387904",
    ),
    "pickled Rope, head_dim a string": (
        call_only(tampered_state(posenc.Rope, ROPE, 0, "8")),
        "[rope] pickled state[0] (head_dim) must be an int, got str",
    ),
    "pickled Rope, inv_freq a string": (
        call_only(tampered_state(posenc.Rope, ROPE, 3, "1.0")),
        "[rope] pickled state[3] (inv_freq) must be a list of floats, got str",
    ),
    "pickled MRope, rope a dict": (
        call_only(tampered_state(posenc.MRope, posenc.MRope.sections(ROPE, [2, 1, 1]), 0, {})),
        "[mrope] pickled state[0] (rope) must be a posenc.Rope, got dict",
    ),
    "pickled Alibi, max_bias a string": (
        call_only(tampered_state(posenc.Alibi, posenc.Alibi(4), 1, "8")),
        "[alibi] pickled state[1] (max_bias) must be a float, got str",
    ),
    "torch alibi_slopes, num_heads a string": (
        call_only(lambda: pt.alibi_slopes("8")),
        "[alibi] num_heads must be an int, got str",
    ),
    "SinusoidalPositions, dim a float": (
        call_only(lambda: pt.SinusoidalPositions(8.0)),
        "[sinusoidal] dim must be an int, got float",
    ),
    "LearnedPositions, stddev a string": (
        call_only(lambda: pt.LearnedPositions(8, 4, stddev="0.02")),
        "[learned] stddev must be a number, got str",
    ),
    "KVCache, capacity a tensor": (
        call_only(lambda: pt.KVCache(torch.tensor([1.5]), 2, 8)),
        "[kv_cache] capacity must be an int, got Tensor",
    ),
    "torch self_extend, group_size past int64": (
        torch_float_positions(
            lambda q: pt.self_extend_attention(
                q, q, q, rope=ROPE, group_size=2**70, neighbor_window=2, qkv_format="bshd"
            )
        ),
        "[self_extend] group_size must be an int in [-2^63, 2^63), got 1180591620717411303424",
    ),
    # Silent casts: a result is never truncated to an integer dtype.
    "KVCache.attend, out_dtype int64": (
        kv_cache_call(lambda c: c.attend(tensor(1, 2, 8), out_dtype=torch.int64)),
        "[kv_cache] out_dtype must be float32, float64, bfloat16 or float16, got int64",
    ),
    "torch attention, out_dtype int64": (
        torch_float_positions(
            lambda q: pt.attention(q, q, q, out_dtype=torch.int64, qkv_format="bshd")
        ),
        "[attention] out_dtype must be float32, float64, bfloat16 or float16, got int64",
    ),
    "torch self_extend, out_dtype int32": (
        torch_float_positions(
            lambda q: pt.self_extend_attention(
                q,
                q,
                q,
                rope=ROPE,
                group_size=2,
                neighbor_window=2,
                out_dtype=torch.int32,
                qkv_format="bshd",
            )
        ),
        "[self_extend] out_dtype must be float32, float64, bfloat16 or float16, got int32",
    ),
    "alibi_slopes, dtype int64": (
        call_only(lambda: pt.alibi_slopes(4, dtype=torch.int64)),
        "[alibi] dtype must be float32, float64, bfloat16 or float16, got int64",
    ),
    "torch alibi_bias, dtype bool": (
        call_only(lambda: pt.alibi_bias(4, [0, 1], dtype=torch.bool)),
        "[alibi] dtype must be float32, float64, bfloat16 or float16, got bool",
    ),
    "rope_cos_sin, dtype int32": (
        call_only(lambda: pt.rope_cos_sin(ROPE, [0, 1], dtype=torch.int32)),
        "[rope] dtype must be float32, float64, bfloat16 or float16, got int32",
    ),
}


@pytest.mark.parametrize("build, message", ERRORS.values(), ids=ERRORS.keys())
def test_hostile_input_raises_and_writes_nothing(build, message):
    call, buffers = build()
    before = [b.copy() for b in buffers]
    with pytest.raises(posenc.Error, match="^" + re.escape(message) + "$"):
        call()
    for b, old in zip(buffers, before):
        np.testing.assert_array_equal(b, old)


def test_error_is_a_value_error():
    assert issubclass(posenc.Error, ValueError)


# A wrong argument type never reaches the library's checks: the numpy API
# answers it as a posenc.Error (and a TypeError) naming the function, the
# signature it takes and what it got, for functions, constructors, static
# methods, methods and pickled states alike.
WRONG_TYPES = {
    "sinusoidal_table, tokens a string": (
        lambda: posenc.sinusoidal_table("x", 8),
        "[sinusoidal_table] arguments must be (tokens: int, dim: int, base: float = "
        "10000.0), got (str 'x', int 8)",
    ),
    "Alibi, num_heads a string": (
        lambda: posenc.Alibi("x"),
        "[Alibi] arguments must be (num_heads: int, *, max_bias: float = 8.0, "
        "head_offset: int = 0, shard_heads: int = 0), got (str 'x')",
    ),
    "Rope.default, head_dim a float": (
        lambda: posenc.Rope.default(8.5),
        "[Rope.default] arguments must be (head_dim: int, base: float = 10000.0, "
        "layout: posenc._core.RopeLayout = <RopeLayout.HALF_SPLIT: 0>, rotary_dim: "
        "int | None = None, *, rotary_offset: int = 0), got (float 8.5)",
    ),
    "apply_rope, no Rope": (
        lambda: posenc.apply_rope(None, np.arange(2), data(2, 1, 8)),
        "[apply_rope] arguments must be (rope: posenc._core.Rope, positions: object, "
        "x: object, *, direction: posenc._core.RopeDirection = <RopeDirection.FORWARD: "
        "0>, out: object = None, bfloat16: bool = False), got (NoneType None, ndarray "
        "int64 (2,), ndarray float32 (2, 1, 8))",
    ),
    "alibi_slopes, a count for an Alibi": (
        lambda: posenc.alibi_slopes(8),
        "[alibi_slopes] arguments must be (alibi: posenc._core.Alibi), got (int 8)",
    ),
    "pickled Rope, a state that is no tuple": (
        lambda: posenc.Rope.__new__(posenc.Rope).__setstate__("junk"),
        "[Rope.__setstate__] arguments must be (arg0: tuple), got (str 'junk')",
    ),
}


@pytest.mark.parametrize("call, message", WRONG_TYPES.values(), ids=WRONG_TYPES.keys())
def test_wrong_argument_types_are_posenc_errors(call, message):
    with pytest.raises(posenc.ArgumentTypeError, match="^" + re.escape(message) + "$") as raised:
        call()
    assert isinstance(raised.value, TypeError) and isinstance(raised.value, posenc.Error)


def test_an_unknown_keyword_is_named_and_other_errors_pass_through():
    with pytest.raises(posenc.ArgumentTypeError, match=r"got \(int 4, int 8, nonsense=int 1\)$"):
        posenc.sinusoidal_table(4, 8, nonsense=1)
    # The library's own checks are untouched: a value error, not a type error.
    with pytest.raises(posenc.Error) as raised:
        posenc.sinusoidal_table(4, 0)
    assert not isinstance(raised.value, TypeError)


class _Subclass(torch.Tensor):
    """A tensor subclass: posenc.torch runs its PyTorch definition, not the
    kernel, as it does on other devices."""


def test_in_place_rope_off_the_kernel_refuses_q_and_k_as_one_view():
    x = torch.randn(2, 3, 8).as_subclass(_Subclass)
    before = x.clone()
    with pytest.raises(
        posenc.Error, match=r"^\[rope\] k must not share memory with q, got overlapping views$"
    ):
        pt.apply_rope_(ROPE, [0, 1], x, x, qkv_format="bshd")
    assert torch.equal(x, before)


def test_version_is_the_project_version():
    cmake = (pathlib.Path(__file__).parents[2] / "CMakeLists.txt").read_text()
    declared = re.search(r"project\(posenc VERSION (\S+)", cmake).group(1)
    assert posenc.__version__ == declared


def fused_qkv_seq_first():
    # Megatron's [seq, batch, 3, heads, dim] as [batch, seq, heads, dim] q and
    # k: their byte ranges interleave token by token, but no element is shared.
    qkv = data(5, 2, 3, 2, 8)
    return qkv, [qkv[:, :, i].transpose(1, 0, 2, 3) for i in range(3)]


def test_disjoint_interleaved_views_are_accepted_across_batch():
    qkv, (q, k, _) = fused_qkv_seq_first()
    expect_q = posenc.apply_rope(ROPE, np.arange(5), q)
    expect_k = posenc.apply_rope(ROPE, np.arange(5), k)
    posenc.apply_rope_qk_inplace(ROPE, np.arange(5), q, k)
    np.testing.assert_array_equal(q, expect_q)
    np.testing.assert_array_equal(k, expect_k)


@pytest.mark.parametrize("batch", [(), (2,)], ids=["no batch", "batch"])
def test_attention_out_into_the_v_slot_of_a_fused_qkv_buffer(batch):
    # q and k are slots 0 and 1 of one fused [..., tokens, 3, heads, dim]
    # buffer and out is written into slot 2: the byte ranges of the three
    # interleave token by token, but no row is shared.
    qkv, v = data(*batch, 5, 3, 2, 8), data(*batch, 5, 2, 8)
    q, k, slot = (qkv[..., i, :, :] for i in range(3))
    expect = posenc.attention(q.copy(), k.copy(), v, np.arange(5), causal=True)
    out = posenc.attention(q, k, v, np.arange(5), causal=True, out=slot)
    assert out is slot
    np.testing.assert_array_equal(slot, expect)


def test_masked_attention_into_out_overlapping_a_later_rows_query():
    # A key mask runs one kernel call per batch row. out[0] is q[1]: writing
    # row 0 into out used to change row 1's query before row 1 was read.
    buf = tensor(3, 3, 2, 8)
    q, out = buf[0:2], buf[1:3]
    mask = torch.tensor([[True, True, True], [False, True, True]])
    expect = pt.attention(q.clone(), q.clone(), q.clone(), attention_mask=mask, qkv_format="bshd")
    assert (
        pt.attention(q, q.clone(), q.clone(), attention_mask=mask, out=out, qkv_format="bshd")
        is out
    )
    torch.testing.assert_close(out, expect, rtol=0, atol=0)


EMPTY = {
    "rope, zero tokens": (
        lambda: posenc.apply_rope(ROPE, np.arange(0), data(2, 0, 3, 8)),
        (2, 0, 3, 8),
    ),
    "rope, zero batch": (
        lambda: posenc.apply_rope(ROPE, np.arange(3), data(0, 3, 3, 8)),
        (0, 3, 3, 8),
    ),
    "rope, zero heads, transposed": (
        lambda: posenc.apply_rope(ROPE, np.arange(3), data(2, 0, 3, 8).transpose(0, 2, 1, 3)),
        (2, 3, 0, 8),
    ),
    "rope inplace, zero tokens": (
        lambda: posenc.apply_rope_inplace(ROPE, [], data(0, 3, 8)) or np.empty((0, 3, 8)),
        (0, 3, 8),
    ),
    "rope qk, zero batch": (
        lambda: posenc.apply_rope_qk(ROPE, np.arange(3), data(0, 3, 4, 8), data(0, 3, 2, 8))[1],
        (0, 3, 2, 8),
    ),
    "attention, zero queries": (
        lambda: posenc.attention(
            data(2, 0, 2, 8), data(2, 3, 2, 8), data(2, 3, 2, 8), [], [0, 1, 2]
        ),
        (2, 0, 2, 8),
    ),
    "attention, zero batch": (
        lambda: posenc.attention(*[data(0, 3, 2, 8)] * 3, np.arange(3)),
        (0, 3, 2, 8),
    ),
    "torch rope, zero tokens": (
        lambda: pt.apply_rope(ROPE, [], tensor(2, 0, 4, 8), tensor(2, 0, 2, 8), qkv_format="bshd")[
            0
        ],
        (2, 0, 4, 8),
    ),
    "torch rope, empty HF layout": (
        lambda: pt.apply_rope(
            ROPE, [], *[tensor(2, 4, 0, 8).transpose(1, 2)] * 2, qkv_format="bshd"
        )[0],
        (2, 0, 4, 8),
    ),
    "torch attention, zero batch": (
        lambda: pt.attention(*[tensor(0, 3, 2, 8)] * 3, [0, 1, 2], qkv_format="bshd"),
        (0, 3, 2, 8),
    ),
    "sinusoidal_table, zero tokens": (lambda: posenc.sinusoidal_table(0, 8), (0, 8)),
    "torch sinusoidal, no positions": (lambda: pt.SinusoidalPositions(8)([]), (0, 8)),
    "torch alibi_bias, no positions": (lambda: pt.alibi_bias(4, []), (4, 0, 0)),
}


@pytest.mark.parametrize("call, shape", EMPTY.values(), ids=EMPTY.keys())
def test_zero_size_input_is_a_no_op(call, shape):
    assert tuple(call().shape) == shape


# Empty inputs are a no-op, but their shapes are still checked: a head_dim
# that does not fit is refused whatever the size of the batch.
EMPTY_WRONG_HEAD_DIM = {
    "rope, zero tokens": (
        lambda: posenc.apply_rope(ROPE, np.arange(0), data(2, 0, 3, 4)),
        "[rope] x_in.head_dim must equal rope.head_dim (8), got 4",
    ),
    "rope inplace, zero batch, HF layout": (
        lambda: posenc.apply_rope_inplace(
            ROPE, np.arange(3), data(0, 3, 3, 4).transpose(0, 2, 1, 3)
        ),
        "[rope] x.head_dim must equal rope.head_dim (8), got 4",
    ),
    "rope, zero heads, transposed": (
        lambda: posenc.apply_rope(ROPE, np.arange(3), data(2, 0, 3, 4).transpose(0, 2, 1, 3)),
        "[rope] x_in.head_dim must equal rope.head_dim (8), got 4",
    ),
    "rope qk, zero batch": (
        lambda: posenc.apply_rope_qk(ROPE, np.arange(3), data(0, 3, 4, 8), data(0, 3, 2, 4)),
        "[rope] k_in.head_dim must equal rope.head_dim (8), got 4",
    ),
    "attention, zero queries": (
        lambda: posenc.attention(
            data(2, 0, 2, 8), data(2, 3, 2, 4), data(2, 3, 2, 8), [], [0, 1, 2]
        ),
        "[attention] k.head_dim must equal q.head_dim (8), got 4",
    ),
    "attention, zero batch": (
        lambda: posenc.attention(
            data(0, 3, 2, 8), data(0, 3, 2, 4), data(0, 3, 2, 8), np.arange(3)
        ),
        "[attention] k.head_dim must equal q.head_dim (8), got 4",
    ),
}


@pytest.mark.parametrize(
    "call, message", EMPTY_WRONG_HEAD_DIM.values(), ids=EMPTY_WRONG_HEAD_DIM.keys()
)
def test_zero_size_input_with_the_wrong_head_dim_is_refused(call, message):
    with pytest.raises(posenc.Error, match="^" + re.escape(message) + "$"):
        call()


def reference_attention(q, k, v):
    """Causal attention in float64 with plain numpy, NaN carried as the
    arithmetic carries it. [tokens, heads, dim] each."""
    q, k, v = (a.astype(np.float64).transpose(1, 0, 2) for a in (q, k, v))
    scores = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1])
    scores[:, np.triu(np.ones(scores.shape[1:], bool), 1)] = -np.inf
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)
    return (weights @ v).transpose(1, 0, 2)


def test_nan_propagates_through_attention_as_in_the_math():
    # A NaN in a key poisons every query that sees it; a NaN in a query
    # poisons its own row (torch does the same). Masking the key away or
    # returning zeros would be a silent wrong answer.
    q, k, v = data(4, 2, 8), data(4, 2, 8), data(4, 2, 8)
    k[2, 1, 3] = np.nan  # key 2 of head 1: seen by queries 2 and 3
    q[0, 0, 0] = np.nan  # query 0 of head 0
    expect = reference_attention(q, k, v)
    assert np.isnan(expect[2:, 1]).all() and np.isnan(expect[0, 0]).all()
    out = posenc.attention(q, k, v, np.arange(4), causal=True)
    np.testing.assert_array_equal(np.isnan(out), np.isnan(expect))


def test_torch_before_2_4_is_refused_at_import():
    # A fresh interpreter whose torch reports an old release (Debian 12's is 1.13.1).
    code = (
        "import torch; torch.__version__ = '1.13.1'\n"
        "try:\n"
        "    import posenc.torch\n"
        "except ImportError as error:\n"
        "    print(error)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert "posenc.torch requires torch >= 2.4" in result.stdout
    assert "the installed torch is 1.13.1" in result.stdout


def _never_constructed(cls):
    return cls.__new__(cls)  # what Python allows: an instance whose __init__ never ran


BOUND_CLASSES = [
    posenc.KVCache,
    posenc.KVCacheBatch,
    posenc.Rope,
    posenc.Alibi,
    posenc.MRope,
    posenc.Sinusoidal,
    posenc.LearnedPositions,
    posenc.QwenVlTokens,
]


@pytest.mark.parametrize("cls", BOUND_CLASSES, ids=lambda c: c.__name__)
def test_an_instance_never_constructed_is_refused_not_read(cls):
    # pybind11 hands such an instance's methods uninitialized memory: posenc refuses it.
    unbuilt = _never_constructed(cls)
    name = cls.__name__
    assert repr(unbuilt) in (f"<posenc.{name}, never constructed>", object.__repr__(unbuilt))
    refused = f"the {name} was never constructed: its __init__ did not run or raised"
    members = [
        m
        for m, v in vars(cls).items()
        if not m.startswith("_")
        and not isinstance(v, staticmethod)
        and type(v).__name__ != "pybind11_static_property"
        and (isinstance(v, property) or callable(v))
    ]
    assert members
    for member in members:
        with pytest.raises(posenc.Error, match=rf"^\[{name}\.{member}\] {refused}"):
            value = getattr(unbuilt, member)
            value()  # reached only for methods
    dunders = {"__getstate__": pickle.dumps, "__len__": len, "__eq__": lambda x: x == x}
    for dunder, call in dunders.items():
        if dunder in vars(cls):
            with pytest.raises(posenc.Error, match=rf"^\[{name}\.{dunder}\] {refused}"):
                call(unbuilt)


def test_an_instance_never_constructed_is_refused_as_an_argument():
    rope = _never_constructed(posenc.Rope)
    with pytest.raises(posenc.Error, match=r"^\[apply_rope\] the Rope was never constructed"):
        posenc.apply_rope(rope, np.arange(4), np.zeros((4, 8), np.float32))
    with pytest.raises(posenc.Error, match=r"^\[KVCache\] the Rope was never constructed"):
        posenc.KVCache(8, 2, 4, rope=rope)
    with pytest.raises(posenc.Error, match=r"^\[MRope\] the Rope was never constructed"):
        posenc.MRope(rope, [0, 0, 1, 1])
    assert posenc.Rope.default(8) == pickle.loads(pickle.dumps(posenc.Rope.default(8)))


def test_a_constructor_that_raises_leaves_no_half_built_instance_in_the_traceback():
    # A debugger, or pytest showing each frame's values, calls repr() on every local: a half-built
    # instance there is uninitialized memory.
    with pytest.raises(posenc.Error) as raised:
        posenc.KVCache(8, 2, 4, value_dim="x")
    for frame, _ in traceback.walk_tb(raised.tb):
        for value in (
            *frame.f_locals.values(),
            *[v for a in frame.f_locals.values() if isinstance(a, tuple) for v in a],
        ):
            assert not isinstance(value, posenc.KVCache), frame.f_code.co_name
