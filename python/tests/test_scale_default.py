"""scale=None is 1 / sqrt(head_dim) in every attention entry point, numpy and torch alike, and
the default everywhere; the expected values are the softmax written out in float64."""

import math

import numpy as np
import pytest
import torch

import posenc
import posenc.torch as pt

HEADS, DIM, KEYS = 2, 16, 5
rng = np.random.default_rng(0)
Q = rng.standard_normal((1, HEADS, DIM)).astype(np.float32)
K = rng.standard_normal((KEYS, HEADS, DIM)).astype(np.float32)
V = rng.standard_normal((KEYS, HEADS, DIM)).astype(np.float32)
QPOS, KPOS = np.array([KEYS - 1]), np.arange(KEYS)


def softmax_attention(scale):
    """The last query against every key, per head, in float64."""
    q, k, v = (x.astype(np.float64) for x in (Q, K, V))
    scores = np.einsum("qhd,khd->hqk", q, k) * scale
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    return np.einsum("hqk,khd->qhd", weights, v)


WANT = softmax_attention(1 / math.sqrt(DIM))


def test_numpy_attention_defaults_to_none():
    np.testing.assert_allclose(posenc.attention(Q, K, V, QPOS, KPOS), WANT, rtol=1e-5, atol=1e-6)
    for scale in (None, 0.0):
        got = posenc.attention(Q, K, V, QPOS, KPOS, scale=scale)
        np.testing.assert_allclose(got, WANT, rtol=1e-5, atol=1e-6)
    out, _ = posenc.attention_forward(Q, K, V, QPOS, KPOS, scale=None)
    np.testing.assert_allclose(out, WANT, rtol=1e-5, atol=1e-6)


def numpy_cache():
    cache = posenc.KVCache(8, HEADS, DIM)
    cache.append(KPOS, K, V)
    return cache


def test_numpy_cache_attend_defaults_to_none():
    np.testing.assert_allclose(numpy_cache().attend(Q, QPOS), WANT, rtol=1e-5, atol=1e-6)
    got = numpy_cache().attend(Q, QPOS, scale=None)
    np.testing.assert_allclose(got, WANT, rtol=1e-5, atol=1e-6)
    with pytest.raises(posenc.Error, match=r"scale must be None or a number .* got str"):
        numpy_cache().attend(Q, QPOS, scale="0.25")


def test_torch_attention_and_cache_default_to_none():
    q, k, v = (torch.from_numpy(x) for x in (Q, K, V))
    want = torch.from_numpy(WANT).float()
    got = pt.attention(q, k, v, torch.from_numpy(QPOS), torch.from_numpy(KPOS), qkv_format="bshd")
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    cache = pt.KVCache(8, HEADS, DIM)
    cache.append(k, v)
    at = torch.from_numpy(QPOS)
    torch.testing.assert_close(cache.attend(q, at), want, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(cache.attend(q, at, scale=None), want, rtol=1e-5, atol=1e-6)
    half = torch.from_numpy(softmax_attention(0.5)).float()
    torch.testing.assert_close(cache.attend(q, at, scale=0.5), half, rtol=1e-5, atol=1e-6)
    for scale in (0.0, -1.0, math.inf):
        with pytest.raises(posenc.Error, match=r"\[kv_cache\] scale must be None"):
            cache.attend(q, at, scale=scale)
