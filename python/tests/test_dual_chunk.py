"""Dual chunk attention from Python (posenc.dual_chunk_attention) against vLLM's own code
(tests/golden/dca_vllm/, its README: DualChunkRotaryEmbedding and the dual-chunk attention
backend run outside the repository) and against the rule written out here in numpy, float64
(docs/DUAL_CHUNK.md)."""

import json
import math
from pathlib import Path

import numpy as np
import pytest

import posenc

GOLDEN = Path(__file__).resolve().parents[2] / "tests" / "golden" / "dca_vllm"


def golden_input(tokens, heads, dim, salt):
    """The golden inputs: ((131 t + 71 h + 29 d + 17 salt) mod 251 - 125) / 64, exact in float32."""
    t, h, d = np.ogrid[:tokens, :heads, :dim]
    return (((t * 131 + h * 71 + d * 29 + salt * 17) % 251 - 125) / 64).astype(np.float32)


def rotate(x, positions, base):
    """Half-split RoPE of x [tokens, heads, d] at int positions [tokens], float64."""
    d = x.shape[-1]
    angles = positions[:, None].astype(np.float64) * base ** (-np.arange(0, d, 2) / d)
    c, s = np.cos(angles)[:, None, :], np.sin(angles)[:, None, :]
    x1, x2 = x[..., : d // 2].astype(np.float64), x[..., d // 2 :].astype(np.float64)
    return np.concatenate((x1 * c - x2 * s, x2 * c + x1 * s), -1)


def formula(q, k, v, qpos, kpos, chunk_size, local_size, original, base=10000.0):
    """Every (query, key) pair scored with q rotated for the key's chunk, one causal softmax."""
    length = chunk_size - local_size
    n = kpos.max() + 1
    f = max(1.0, 0.1 * math.log(n / original) + 1) if original > 0 else 1.0
    scale = f * f / math.sqrt(q.shape[-1])
    keys = rotate(k, kpos % length, base)
    queries = [
        rotate(q, qpos % length, base),
        rotate(q, np.minimum(qpos % length + length, chunk_size), base),
        rotate(q, np.full_like(qpos, min(2 * length - 1, chunk_size)), base),
    ]
    lag = qpos[:, None] // length - kpos[None, :] // length
    part = np.clip(lag, 0, 2)
    group = q.shape[1] // k.shape[1]
    out = np.zeros((q.shape[0], q.shape[1], v.shape[-1]))
    for h in range(q.shape[1]):
        kv = h // group
        scores = np.choose(part, [x[:, h] @ keys[:, kv].T * scale for x in queries])
        scores = np.where(kpos[None, :] <= qpos[:, None], scores, -np.inf)
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


ROPE = posenc.Rope.default(16, 10000.0)


@pytest.mark.parametrize(
    "name",
    [
        "prefill_qwen_1m_shrunk",
        "prefill_chunk24_local8",
        "prefill_chunk20_local12",
        "decode_qwen_1m_shrunk",
    ],
)
def test_matches_vllm(name):
    c = json.loads((GOLDEN / f"{name}.json").read_text())
    tokens = c.get("tokens", c.get("cached_tokens", 0) + 1)
    first = c.get("query_position", 0)
    dim = c["head_dim"]
    q = golden_input(tokens, c["num_heads"], dim, 1)[first:]
    k = golden_input(tokens, c["num_kv_heads"], dim, 2)
    v = golden_input(tokens, c["num_kv_heads"], dim, 3)
    out = posenc.dual_chunk_attention(
        q,
        k,
        v,
        np.arange(first, tokens),
        np.arange(tokens),
        chunk_size=c["chunk_size"],
        local_size=c["local_size"],
        original_max_position_embeddings=c["original_max_position_embeddings"],
        rope=posenc.Rope.default(dim, c["rope_theta"]),
    )
    want = np.array(c["out"]).reshape(out.shape)
    np.testing.assert_allclose(out, want, rtol=0, atol=4e-5)


@pytest.mark.parametrize("chunk_size, local_size, original", [(8, 3, 0), (12, 2, 10), (20, 12, 0)])
def test_numpy_equals_the_formula(chunk_size, local_size, original):
    q, k, v = qkv(60)
    pos = np.arange(60)
    out = posenc.dual_chunk_attention(
        q,
        k,
        v,
        pos,
        chunk_size=chunk_size,
        local_size=local_size,
        original_max_position_embeddings=original,
        rope=ROPE,
    )
    want = formula(q, k, v, pos, pos, chunk_size, local_size, original)
    np.testing.assert_allclose(out, want, rtol=0, atol=2e-5)


def test_decode_step_is_the_last_prefill_row():
    q, k, v = qkv(50, seed=3)
    pos = np.arange(50)
    options = dict(chunk_size=12, local_size=2, original_max_position_embeddings=10, rope=ROPE)
    prefill = posenc.dual_chunk_attention(q, k, v, pos, **options)
    decode = posenc.dual_chunk_attention(q[-1:], k, v, pos[-1:], pos, **options)
    np.testing.assert_allclose(decode[0], prefill[-1], rtol=0, atol=2e-6)


def test_a_batch_is_each_element_alone():
    q, k, v = (np.stack([a, b]) for a, b in zip(qkv(30, seed=1), qkv(30, seed=2)))
    pos = np.array([np.arange(30), np.arange(30) + 50])
    out = posenc.dual_chunk_attention(q, k, v, pos, chunk_size=10, local_size=3, rope=ROPE)
    for b in range(2):
        alone = posenc.dual_chunk_attention(
            q[b], k[b], v[b], pos[b], chunk_size=10, local_size=3, rope=ROPE
        )
        np.testing.assert_array_equal(out[b], alone)


def test_bfloat16_is_near_float32():
    q, k, v = qkv(40, seed=4)
    pos = np.arange(40)

    def bits(x):  # round to bfloat16 (nearest even) and keep the bits as int16
        u = x.view(np.uint32).astype(np.uint64)
        return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16).view(np.int16)

    def widened(b):
        return (b.view(np.uint16).astype(np.uint32) << 16).view(np.float32)

    qb, kb, vb = bits(q), bits(k), bits(v)
    out = posenc.dual_chunk_attention(
        qb, kb, vb, pos, chunk_size=8, local_size=3, rope=ROPE, bfloat16=True
    )
    want = formula(widened(qb), widened(kb), widened(vb), pos, pos, 8, 3, 0)
    np.testing.assert_allclose(out, want, rtol=0, atol=2e-2)


def test_bad_input_is_an_error():
    q, k, v = qkv(4)
    pos = np.arange(4)
    with pytest.raises(
        posenc.Error,
        match=r"^\[dual_chunk\] chunk_size must be > local_size "
        r"\(8\): the chunk length chunk_size - local_size must be >= 1, got 8$",
    ):
        posenc.dual_chunk_attention(q, k, v, pos, chunk_size=8, local_size=8, rope=ROPE)
    with pytest.raises(posenc.Error, match=r"^\[dual_chunk\] local_size must be >= 1, got 0$"):
        posenc.dual_chunk_attention(q, k, v, pos, chunk_size=8, local_size=0, rope=ROPE)
    with pytest.raises(posenc.ArgumentTypeError, match=r"^\[dual_chunk_attention\] arguments"):
        posenc.dual_chunk_attention(q, k, v, pos, chunk_size="8", local_size=2, rope=ROPE)


# posenc.torch.dual_chunk_attention: the kernel on CPU float32, the PyTorch definition elsewhere
# (float64 here, differentiated by autograd).
def test_torch_kernel_and_definition_equal_the_formula():
    torch = pytest.importorskip("torch")
    import posenc.torch as pt

    q, k, v = qkv(40, seed=5)
    pos = np.arange(40)
    options = dict(
        rope=ROPE,
        chunk_size=12,
        local_size=2,
        original_max_position_embeddings=10,
        qkv_format="bshd",
    )
    want = formula(q, k, v, pos, pos, 12, 2, 10)
    kernel = pt.dual_chunk_attention(*(torch.from_numpy(x)[None] for x in (q, k, v)), **options)
    np.testing.assert_allclose(kernel[0].numpy(), want, rtol=0, atol=2e-5)
    q64, k64, v64 = (torch.from_numpy(x).double()[None].requires_grad_() for x in (q, k, v))
    definition = pt.dual_chunk_attention(q64, k64, v64, **options)
    np.testing.assert_allclose(definition[0].detach().numpy(), want, rtol=0, atol=1e-10)
    definition.square().sum().backward()
    assert q64.grad is not None and torch.isfinite(q64.grad).all()
    with pytest.raises(posenc.Error, match=r"^\[dual_chunk\] chunk_size and local_size must "):
        pt.dual_chunk_attention(
            q64, k64, v64, rope=ROPE, chunk_size=4, local_size=4, qkv_format="bshd"
        )
