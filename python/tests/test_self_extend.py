"""Self-Extend from Python (posenc.self_extend_attention, posenc.torch.self_extend_attention)
against the formula written out here in numpy, float64 (Jin et al. 2024, the authors' code:
neighbour scores where the distance is below W, grouped scores elsewhere, one softmax)."""

import math

import numpy as np
import pytest
import torch

import posenc
import posenc.torch as pt
from posenc import _torch_reference as reference

ROPE = posenc.Rope.default(16, 10000.0)


def rotate(x, positions, base=10000.0):
    """Half-split RoPE of x [tokens, heads, d] at int positions, float64."""
    d = x.shape[-1]
    angles = positions[:, None].astype(np.float64) * base ** (-np.arange(0, d, 2) / d)
    c, s = np.cos(angles)[:, None, :], np.sin(angles)[:, None, :]
    x1, x2 = x[..., : d // 2].astype(np.float64), x[..., d // 2 :].astype(np.float64)
    return np.concatenate((x1 * c - x2 * s, x2 * c + x1 * s), -1)


def formula(q, k, v, qpos, kpos, g, w, causal):
    scale = 1 / math.sqrt(q.shape[-1])
    near_q, near_k = rotate(q, qpos), rotate(k, kpos)
    far_q, far_k = rotate(q, qpos // g + w - w // g), rotate(k, kpos // g)
    group = q.shape[1] // k.shape[1]
    distance = qpos[:, None] - kpos[None, :]
    out = np.zeros((q.shape[0], q.shape[1], v.shape[-1]))
    for h in range(q.shape[1]):
        kv = h // group
        near = near_q[:, h] @ near_k[:, kv].T * scale
        far = far_q[:, h] @ far_k[:, kv].T * scale
        scores = np.where(distance < w, near, far)
        if causal:
            scores = np.where(distance >= 0, scores, -np.inf)
        p = np.exp(scores - scores.max(-1, keepdims=True))
        out[:, h] = (p / p.sum(-1, keepdims=True)) @ v[:, kv].astype(np.float64)
    return out


def qkv(tokens, heads=4, kv_heads=2, dim=16, seed=0):
    rng = np.random.default_rng(seed)
    return (
        rng.standard_normal((tokens, heads, dim)).astype(np.float32),
        rng.standard_normal((tokens, kv_heads, dim)).astype(np.float32),
        rng.standard_normal((tokens, kv_heads, dim)).astype(np.float32),
    )


@pytest.mark.parametrize("causal", [True, False])
def test_numpy_equals_the_formula(causal):
    q, k, v = qkv(40)
    pos = np.arange(40) * 3  # far keys beyond the window, grouped by 4
    out = posenc.self_extend_attention(
        q, k, v, pos, group_size=4, neighbor_window=8, rope=ROPE, causal=causal
    )
    want = formula(q, k, v, pos, pos, 4, 8, causal)
    np.testing.assert_allclose(out, want, rtol=0, atol=2e-5)


def test_a_batch_is_each_element_alone():
    q, k, v = (np.stack([a, b]) for a, b in zip(qkv(12, seed=1), qkv(12, seed=2)))
    pos = np.array([np.arange(12), np.arange(12) + 50])
    out = posenc.self_extend_attention(
        q, k, v, pos, group_size=3, neighbor_window=4, rope=ROPE, causal=True
    )
    for b in range(2):
        alone = posenc.self_extend_attention(
            q[b], k[b], v[b], pos[b], group_size=3, neighbor_window=4, rope=ROPE, causal=True
        )
        np.testing.assert_array_equal(out[b], alone)


def test_group_size_one_is_rope_attention():
    q, k, v = qkv(20)
    pos = np.arange(20)
    out = posenc.self_extend_attention(
        q, k, v, pos, group_size=1, neighbor_window=5, rope=ROPE, causal=True
    )
    plain = posenc.attention(q, k, v, pos, causal=True, rope=ROPE)
    np.testing.assert_allclose(out, plain, rtol=0, atol=2e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_torch_kernel_equals_the_pytorch_definition(dtype):
    q, k, v = (torch.from_numpy(x).to(dtype) for x in qkv(30, seed=3))
    pos = torch.arange(30) * 2
    kernel = pt.self_extend_attention(
        q,
        k,
        v,
        pos,
        pos,
        rope=ROPE,
        group_size=4,
        neighbor_window=6,
        causal=True,
        out_dtype=torch.float32,
        qkv_format="bshd",
    )
    mine = reference.self_extend_attention(
        q, k, v, pos, pos, group_size=4, neighbor_window=6, rope=ROPE, causal=True
    )
    atol = 1e-5 if dtype == torch.float32 else 2.0**-9 * v.float().abs().max().item() + 1e-5
    torch.testing.assert_close(mine.float(), kernel, rtol=0, atol=atol)
    assert (
        pt.self_extend_attention(
            q, k, v, rope=ROPE, group_size=4, neighbor_window=6, qkv_format="bshd"
        ).dtype
        == dtype
    )


def test_torch_hf_layout_and_autograd():
    q, k, v = (torch.from_numpy(x).double() for x in qkv(10, dim=8, seed=4))
    rope = posenc.Rope.default(8)
    want = pt.self_extend_attention(
        q, k, v, rope=rope, group_size=2, neighbor_window=3, causal=True, qkv_format="bshd"
    )
    hf = [t[None].transpose(1, 2) for t in (q, k, v)]
    got = pt.self_extend_attention(
        *hf, rope=rope, group_size=2, neighbor_window=3, causal=True, qkv_format="bhsd"
    )
    torch.testing.assert_close(got[0].transpose(0, 1), want)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    assert torch.autograd.gradcheck(
        lambda a, b, c: pt.self_extend_attention(
            a, b, c, rope=rope, group_size=2, neighbor_window=3, causal=True, qkv_format="bshd"
        ),
        leaves,
    )


def test_bad_arguments_name_themselves():
    q, k, v = qkv(4)
    with pytest.raises(posenc.Error, match=r"^\[self_extend\] group_size must be >= 1, got 0$"):
        posenc.self_extend_attention(
            q, k, v, np.arange(4), group_size=0, neighbor_window=2, rope=ROPE
        )
    with pytest.raises(
        posenc.Error, match=r"^\[self_extend\] neighbor_window must be >= 1, got 0$"
    ):
        pt.self_extend_attention(
            *(torch.from_numpy(x) for x in (q, k, v)),
            rope=ROPE,
            group_size=2,
            neighbor_window=0,
            qkv_format="bshd",
        )
    with pytest.raises(posenc.Error, match=r"^\[self_extend\] rope must be given"):
        pt.self_extend_attention(
            *(torch.from_numpy(x) for x in (q, k, v)),
            rope=None,
            group_size=2,
            neighbor_window=2,
            qkv_format="bshd",
        )
