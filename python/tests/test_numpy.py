"""posenc's numpy API against references written here and worked numbers."""

import json
import math
import os
import subprocess

import numpy as np
import pytest

import posenc

RNG_SEED = 1234


def reference_inv_freq(rotary_dim, base=10000.0):
    return base ** (-np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim)


def reference_rope(x, positions, inv_freq, layout, attention_factor=1.0, sign=1.0):
    """x [..., tokens, heads, head_dim] rotated in float64."""
    x = np.asarray(x, dtype=np.float64)
    rotary_dim = 2 * len(inv_freq)
    angles = np.asarray(positions, dtype=np.float64)[..., None] * inv_freq  # [..., tokens, half]
    cos = attention_factor * np.cos(angles)[..., None, :]
    sin = sign * attention_factor * np.sin(angles)[..., None, :]
    out = x.copy()
    if layout == posenc.RopeLayout.HALF_SPLIT:
        a, b = x[..., : rotary_dim // 2], x[..., rotary_dim // 2 : rotary_dim]
        out[..., : rotary_dim // 2] = a * cos - b * sin
        out[..., rotary_dim // 2 : rotary_dim] = a * sin + b * cos
    else:
        a, b = x[..., 0:rotary_dim:2], x[..., 1:rotary_dim:2]
        out[..., 0:rotary_dim:2] = a * cos - b * sin
        out[..., 1:rotary_dim:2] = a * sin + b * cos
    return out


def random(shape, dtype=np.float32, seed=RNG_SEED):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


LAYOUTS = [posenc.RopeLayout.HALF_SPLIT, posenc.RopeLayout.INTERLEAVED]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_rope_matches_reference_on_a_batch(layout):
    rope = posenc.Rope.default(16, 10000.0, layout)
    x = random((3, 5, 4, 16))
    positions = np.array([0, 1, 7, 1000, 123456], dtype=np.int64)
    y = posenc.apply_rope(rope, positions, x)
    expected = reference_rope(x, positions, reference_inv_freq(16), layout)
    assert y.dtype == np.float32 and y.shape == x.shape
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)


def test_rope_float64_is_double_precision():
    rope = posenc.Rope.default(8, 500.0, posenc.RopeLayout.INTERLEAVED)
    x = random((2, 6, 3, 8), np.float64)
    positions = np.arange(6, dtype=np.int64) * 997
    y = posenc.apply_rope(rope, positions, x)
    assert y.dtype == np.float64
    expected = reference_rope(
        x,
        positions,
        reference_inv_freq(8, 500.0),
        posenc.RopeLayout.INTERLEAVED,
    )
    np.testing.assert_allclose(y, expected, rtol=0, atol=1e-12)


def test_float16_storage_rounds_once():
    rope = posenc.Rope.default(8)
    x = random((6, 2, 8), np.float16)
    positions = np.array([0, 1, 2, 3, 1000, 65536], dtype=np.int64)
    y = posenc.apply_rope(rope, positions, x)
    assert y.dtype == np.float16
    exact = reference_rope(x, positions, reference_inv_freq(8), posenc.RopeLayout.HALF_SPLIT)
    # Half a float16 ulp (2^-11 relative) from the one rounding, plus float32
    # arithmetic.
    assert np.all(np.abs(y - exact) <= 2.0**-11 * np.abs(exact) + 1e-6)


def test_quarter_turn_by_hand():
    # head_dim 2: one pair with inv_freq 1; position pi/2 would be a quarter
    # turn, so use the frequency instead: inv_freq = pi / 2 at position 1 turns
    # (1, 0) into (0, 1).
    rope = posenc.Rope(2, 2, posenc.RopeLayout.HALF_SPLIT, [math.pi / 2])
    x = np.array([[[1.0, 0.0]]], dtype=np.float32)
    y = posenc.apply_rope(rope, [1], x)
    np.testing.assert_allclose(y, [[[0.0, 1.0]]], atol=1e-7)
    y = posenc.apply_rope(rope, [2], x)  # a half turn
    np.testing.assert_allclose(y, [[[-1.0, 0.0]]], atol=1e-7)


def test_partial_rotary_and_attention_factor():
    inv_freq = reference_inv_freq(4, 100.0)
    rope = posenc.Rope(8, 4, posenc.RopeLayout.HALF_SPLIT, list(inv_freq), 1.5)
    x = random((4, 2, 8))
    positions = np.array([3, 1, 4, 1], dtype=np.int64)
    y = posenc.apply_rope(rope, positions, x)
    np.testing.assert_array_equal(y[..., 4:], x[..., 4:])
    expected = reference_rope(x, positions, inv_freq, posenc.RopeLayout.HALF_SPLIT, 1.5)
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)


def test_per_batch_positions_and_transposed_views_without_copies():
    rope = posenc.Rope.default(8)
    # Hugging Face's [batch, heads, seq, dim] memory, seen as [batch, seq,
    # heads, dim].
    hf = random((2, 3, 5, 8))
    x = hf.transpose(0, 2, 1, 3)
    positions = np.array([[0, 1, 2, 3, 4], [10, 11, 12, 13, 14]], dtype=np.int64)
    expected = reference_rope(x, positions, reference_inv_freq(8), posenc.RopeLayout.HALF_SPLIT)
    posenc.apply_rope_inplace(rope, positions, x)
    np.testing.assert_allclose(hf.transpose(0, 2, 1, 3), expected, rtol=1e-5, atol=1e-5)


def test_inverse_undoes_forward_in_place():
    rope = posenc.Rope.default(32, layout=posenc.RopeLayout.INTERLEAVED)
    x = random((7, 3, 32))
    original = x.copy()
    positions = np.arange(7, dtype=np.int64) * 100000
    posenc.apply_rope_inplace(rope, positions, x)
    assert not np.allclose(x, original)
    posenc.apply_rope_inplace(rope, positions, x, direction=posenc.RopeDirection.INVERSE)
    np.testing.assert_allclose(x, original, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_q_and_k_with_fewer_kv_heads(dtype):
    rope = posenc.Rope.default(8, layout=posenc.RopeLayout.INTERLEAVED)
    q = random((2, 4, 6, 8), dtype, seed=1)
    k = random((2, 4, 2, 8), dtype, seed=2)
    positions = np.array([5, 6, 7, 8], dtype=np.int64)
    q_rot, k_rot = posenc.apply_rope_qk(rope, positions, q, k)
    for rotated, original in ((q_rot, q), (k_rot, k)):
        expected = reference_rope(
            original,
            positions,
            reference_inv_freq(8),
            posenc.RopeLayout.INTERLEAVED,
        )
        np.testing.assert_allclose(rotated, expected, rtol=1e-5, atol=1e-5)
    posenc.apply_rope_qk_inplace(rope, positions, q, k)
    np.testing.assert_array_equal(q, q_rot)
    np.testing.assert_array_equal(k, k_rot)


def test_scores_depend_only_on_distance():
    rope = posenc.Rope.default(16)
    q, k = random((1, 1, 16), seed=3), random((1, 1, 16), seed=4)
    scores = []
    for m, n in ((5, 2), (1005, 1002), (3, 0)):
        q_rot = posenc.apply_rope(rope, [m], q)
        k_rot = posenc.apply_rope(rope, [n], k)
        scores.append(float(np.sum(q_rot * k_rot)))
    assert scores[0] == pytest.approx(scores[1], rel=1e-5)
    assert scores[0] == pytest.approx(scores[2], rel=1e-5)


def test_rope_angle_and_default_inv_freq():
    np.testing.assert_allclose(
        posenc.default_inv_freq(10000.0, 8), [1, 0.1, 0.01, 0.001], rtol=1e-15
    )
    cos, sin = posenc.rope_angle(3, 0.5)
    assert (cos, sin) == (math.cos(1.5), math.sin(1.5))


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda r, x: posenc.apply_rope(r, np.arange(4, dtype=np.int32), x),
            "[rope] positions must have dtype int64, got int32",
        ),
        (
            lambda r, x: posenc.apply_rope(r, [0.5, 1, 2, 3], x),
            "[rope] positions must be an int64 array or a sequence of ints",
        ),
        (
            lambda r, x: posenc.apply_rope(r, np.arange(5), x),
            "[rope] positions.shape must be (tokens,) = (4,) or the batch's (2, 4), got (5,)",
        ),
        (
            lambda r, x: posenc.apply_rope(r, np.arange(4), x.astype(np.int16)),
            "[rope] x must have dtype float32, float64 or float16 (or hold "
            "bfloat16 bits, with bfloat16=True), got int16",
        ),
        (
            lambda r, x: posenc.apply_rope(r, np.arange(4), x, bfloat16=True),
            "[rope] x must have dtype int16 or uint16 (bfloat16 bits), got float32",
        ),
        (
            lambda r, x: posenc.apply_rope(r, np.arange(4), x[0, 0]),
            "[rope] x.shape must be [..., tokens, heads, head_dim] (at least 3 dims), got (3, 8)",
        ),
        (
            lambda r, x: posenc.apply_rope(r, np.arange(4), x[..., ::2]),
            "[rope] x.strides[-1] must be the item size (4 bytes): head_dim must be contiguous",
        ),
        (
            lambda r, x: posenc.apply_rope(r, np.arange(4), x[..., :6]),
            "head_dim must equal rope.head_dim (8), got 6",
        ),
        (
            lambda r, x: posenc.apply_rope(r, [0, 1, -2, 3], x),
            "[rope] positions[2] must be >= 0, got -2",
        ),
        (
            lambda r, x: posenc.apply_rope(r, np.arange(4), x, out=x),
            "must not share memory",
        ),
        (
            lambda r, x: posenc.apply_rope(
                r, np.arange(4), x, out=np.empty((2, 4, 3, 7), np.float32)
            ),
            "[rope] out.shape must equal x.shape (2, 4, 3, 8), got (2, 4, 3, 7)",
        ),
        (
            lambda r, x: posenc.apply_rope_inplace(r, np.arange(4), x.tolist()),
            "[rope] x must be a numpy array, got list",
        ),
        (
            lambda r, x: posenc.apply_rope_qk(r, np.arange(4), x, x[:, :3]),
            "tokens must equal q_in.tokens (4), got 3",
        ),
        (
            lambda r, x: posenc.apply_rope_qk(r, np.arange(4), x, x[:1]),
            "[rope] k.shape[:-3] must equal q's batch dims (2,), got (1,)",
        ),
        (
            lambda r, x: posenc.apply_rope_qk_inplace(r, np.arange(4), x, x),
            "[rope] k must not share memory with q",
        ),
    ],
)
def test_bad_rope_arguments_raise_the_library_message(call, message):
    rope = posenc.Rope.default(8)
    x = random((2, 4, 3, 8))
    before = x.copy()
    with pytest.raises(ValueError) as error:
        call(rope, x)
    assert message in str(error.value)
    assert isinstance(error.value, posenc.Error)
    np.testing.assert_array_equal(x, before)


def test_read_only_array_is_refused_in_place():
    x = random((2, 2, 8))
    x.flags.writeable = False
    with pytest.raises(ValueError, match=r"\[rope\] x must be writeable"):
        posenc.apply_rope_inplace(posenc.Rope.default(8), [0, 1], x)


def test_bad_rope_configuration():
    with pytest.raises(ValueError, match=r"\[rope\] rotary_dim must be even and <= head_dim"):
        posenc.Rope.default(8, rotary_dim=9)
    with pytest.raises(ValueError, match=r"\[rope\] inv_freq.size\(\) must equal"):
        posenc.Rope(8, 8, posenc.RopeLayout.HALF_SPLIT, [1.0])


def test_rotary_offset_worked_example():
    # head_dim 6, rotary_offset 1 (odd), rotary_dim 4: x = [9 | 1 2 3 4 | 8],
    # pair 0 a quarter turn, pair 1 a half turn. Half-split pairs (1, 3) and
    # (2, 4); interleaved pairs (1, 2) and (3, 4).
    x = np.array([[[9, 1, 2, 3, 4, 8]]], dtype=np.float32)
    want = {
        posenc.RopeLayout.HALF_SPLIT: [9, -3, -2, 1, -4, 8],
        posenc.RopeLayout.INTERLEAVED: [9, -2, 1, -3, -4, 8],
    }
    for layout, expected in want.items():
        rope = posenc.Rope(6, 4, layout, [math.pi / 2, math.pi], rotary_offset=1)
        assert rope.rotary_offset == 1
        y = posenc.apply_rope(rope, [1], x)
        np.testing.assert_allclose(y[0, 0], expected, atol=1e-6)
        assert y[0, 0, 0] == 9 and y[0, 0, 5] == 8


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rotary_offset_rotates_only_the_block(layout, dtype):
    # DeepSeek V2/V3 MLA: heads of 192 = 128 unrotated + 64 rotated features.
    rope = posenc.Rope.default(192, 10000.0, layout, 64, rotary_offset=128)
    assert rope.rotary_dim == 64 and rope.rotary_offset == 128
    assert "rotary_offset=128" in repr(rope)
    q = random((2, 5, 4, 192), dtype, seed=1)
    k = random((2, 5, 2, 192), dtype, seed=2)
    positions = np.array([0, 1, 2, 4096, 900001], dtype=np.int64)
    # The frequencies of the 64-feature block; the rotation below uses
    # posenc's own copy, since at position 900001 one ulp of a frequency
    # moves the angle by 1e-10 rad, above float64's tolerance.
    inv_freq = np.array(rope.inv_freq)
    np.testing.assert_allclose(inv_freq, reference_inv_freq(64), rtol=1e-15)

    def expected(x):
        out = np.asarray(x, dtype=np.float64).copy()
        out[..., 128:] = reference_rope(x[..., 128:], positions, inv_freq, layout)
        return out

    tol = 1e-5 if dtype == np.float32 else 1e-12
    y = posenc.apply_rope(rope, positions, q)
    np.testing.assert_array_equal(y[..., :128], q[..., :128])
    np.testing.assert_allclose(y, expected(q), rtol=0, atol=tol)
    q_out, k_out = posenc.apply_rope_qk(rope, positions, q, k)
    np.testing.assert_array_equal(q_out, y)
    np.testing.assert_array_equal(k_out[..., :128], k[..., :128])
    np.testing.assert_allclose(k_out, expected(k), rtol=0, atol=tol)
    q_in_place, k_in_place = q.copy(), k.copy()
    posenc.apply_rope_qk_inplace(rope, positions, q_in_place, k_in_place)
    np.testing.assert_array_equal(q_in_place, q_out)
    np.testing.assert_array_equal(k_in_place, k_out)
    # The inverse undoes it.
    back = posenc.apply_rope(rope, positions, y, direction=posenc.RopeDirection.INVERSE)
    np.testing.assert_allclose(back, q, rtol=0, atol=10 * tol)


def test_bad_rotary_offset():
    with pytest.raises(
        ValueError,
        match=r"^\[rope\] rotary_offset must be <= head_dim - rotary_dim "
        r"\(8 - 4 = 4\), got 5$",
    ):
        posenc.Rope.default(8, rotary_dim=4, rotary_offset=5)
    with pytest.raises(ValueError, match=r"^\[rope\] rotary_offset must be >= 0, got -1$"):
        posenc.Rope(8, 4, posenc.RopeLayout.HALF_SPLIT, [1.0, 0.1], rotary_offset=-1)
    rope = posenc.Rope.default(8, rotary_dim=4)
    assert rope.rotary_offset == 0
    rope.rotary_offset = 5
    with pytest.raises(ValueError, match=r"rotary_offset must be <= head_dim"):
        rope.validate()
    x = random((1, 1, 8))
    before = x.copy()
    with pytest.raises(ValueError, match=r"rotary_offset must be <= head_dim"):
        posenc.apply_rope_inplace(rope, [3], x)
    np.testing.assert_array_equal(x, before)


def reference_sinusoidal(positions, dim, base=10000.0):
    positions = np.asarray(positions, dtype=np.float64)[..., None]
    j = np.arange(dim)
    angle = positions / base ** (2 * (j // 2) / dim)
    return np.where(j % 2 == 0, np.sin(angle), np.cos(angle))


def test_sinusoidal_by_hand_and_against_the_formula():
    table = posenc.sinusoidal_table(3, 4)
    # Row 1: sin(1), cos(1), sin(1 / 100), cos(1 / 100) (base^(2/4) = 100).
    np.testing.assert_allclose(
        table[1],
        [math.sin(1), math.cos(1), math.sin(0.01), math.cos(0.01)],
        rtol=1e-7,
    )
    np.testing.assert_array_equal(table[0], [0, 1, 0, 1])
    positions = np.array([[0, 5], [1000000, 7]], dtype=np.int64)
    values = posenc.sinusoidal(positions, 9, 500.0)
    assert values.shape == (2, 2, 9) and values.dtype == np.float32
    np.testing.assert_allclose(values, reference_sinusoidal(positions, 9, 500.0), atol=1e-6)
    spec = posenc.Sinusoidal(4)
    assert spec.frequency(2) == pytest.approx(0.01)
    assert spec.value(1, 1) == pytest.approx(math.cos(1))


def test_sinusoidal_errors():
    with pytest.raises(ValueError, match=r"\[sinusoidal\]"):
        posenc.sinusoidal([0, -1], 4)
    with pytest.raises(ValueError, match=r"\[sinusoidal\] out.shape must be \(2, 4\)"):
        posenc.sinusoidal([0, 1], 4, out=np.empty((2, 5), np.float32))


def test_learned_table_lookup_gradient_and_npy(tmp_path):
    table = posenc.LearnedPositions(4, 3)
    view = table.table
    view[:] = np.arange(12, dtype=np.float32).reshape(4, 3)  # writes through, no copy
    out = table.lookup(np.array([[3, 0], [1, 1]], dtype=np.int64))
    np.testing.assert_array_equal(out, [[[9, 10, 11], [0, 1, 2]], [[3, 4, 5], [3, 4, 5]]])
    table.accumulate_gradient([1, 1, 2], np.ones((3, 3), np.float32))
    np.testing.assert_array_equal(table.grad, [[0] * 3, [2] * 3, [1] * 3, [0] * 3])
    table.zero_gradient()
    assert not table.grad.any()
    with pytest.raises(
        ValueError,
        match=r"positions\[1\] must be < max_positions \(4\), got 4",
    ):
        table.lookup([0, 4])
    path = str(tmp_path / "wpe.npy")
    table.save(path)
    np.testing.assert_array_equal(np.load(path), view)
    np.save(path, np.full((2, 5), 0.5, np.float64))
    loaded = posenc.LearnedPositions.load(path)
    assert (loaded.max_positions, loaded.d_model) == (2, 5)
    np.testing.assert_array_equal(loaded.table, np.full((2, 5), 0.5))


def test_embed_tokens():
    tokens = random((10, 6))
    ids = np.array([3, 9, 3], dtype=np.int64)
    positions = np.array([0, 1, 2], dtype=np.int64)
    out = posenc.embed_tokens(tokens, ids, positions, posenc.Sinusoidal(6))
    np.testing.assert_allclose(out, tokens[ids] + reference_sinusoidal(positions, 6), atol=1e-6)
    learned = posenc.LearnedPositions.random(3, 6, seed=7)
    out = posenc.embed_tokens(tokens, ids, positions, learned)
    np.testing.assert_allclose(out, tokens[ids] + learned.table[positions], atol=1e-6)
    with pytest.raises(ValueError, match=r"ids"):
        posenc.embed_tokens(tokens, [10, 0, 0], positions, learned)
    with pytest.raises(ValueError, match=r"\[embed\] positions.shape must equal ids.shape"):
        posenc.embed_tokens(tokens, ids, [0, 1], learned)


def test_alibi_slopes_and_bias_by_hand():
    np.testing.assert_array_equal(
        posenc.alibi_slopes(posenc.Alibi(8)), [2.0**-k for k in range(1, 9)]
    )
    # 12 heads: the 8-head slopes, then every other slope of the 16-head
    # sequence.
    twelve = [2.0**-k for k in range(1, 9)] + [2.0 ** -(k + 0.5) for k in range(4)]
    np.testing.assert_allclose(posenc.alibi_slopes(posenc.Alibi(12)), twelve, rtol=1e-15)
    shard = posenc.alibi_slopes(posenc.Alibi(8, head_offset=2, shard_heads=3))
    np.testing.assert_array_equal(shard, [2.0**-3, 2.0**-4, 2.0**-5])
    bias = posenc.alibi_bias(posenc.Alibi(2), [0, 1, 2], [0, 2])
    assert bias.shape == (2, 3, 2) and bias.dtype == np.float32
    # Head 0 slope 2^-4, head 1 slope 2^-8; bias = -slope * (i - j).
    np.testing.assert_array_equal(bias[0], [[0, 0.125], [-0.0625, 0.0625], [-0.125, 0]])
    np.testing.assert_array_equal(bias[1], -(2.0**-8) * np.subtract.outer([0, 1, 2], [0, 2]))
    with pytest.raises(ValueError, match=r"\[alibi\] num_heads"):
        posenc.Alibi(0)


def reference_attention(q, k, v, qpos, kpos, causal, slopes=None):
    """q [tq, h, d], k [tk, g, d], v [tk, g, dv] in float64."""
    heads, groups = q.shape[1], k.shape[1]
    out = np.zeros((q.shape[0], heads, v.shape[2]))
    for h in range(heads):
        g = h // (heads // groups)
        scores = q[:, h] @ k[:, g].T / math.sqrt(q.shape[2])
        if slopes is not None:
            scores = scores - slopes[h] * np.subtract.outer(qpos, kpos)
        if causal:
            scores = np.where(np.subtract.outer(qpos, kpos) < 0, -np.inf, scores)
        weights = np.exp(scores - scores.max(axis=1, keepdims=True))
        weights /= weights.sum(axis=1, keepdims=True)
        out[:, h] = weights @ v[:, g]
    return out


def test_attention_with_rope_alibi_gqa_and_a_batch():
    q, k = random((2, 5, 4, 8), seed=5), random((2, 5, 2, 8), seed=6)
    v = random((2, 5, 2, 3), seed=7)
    positions = np.arange(5, dtype=np.int64)
    rope = posenc.Rope.default(8)
    out = posenc.attention(q, k, v, positions, causal=True, rope=rope)
    assert out.shape == (2, 5, 4, 3)
    half_split, freqs = posenc.RopeLayout.HALF_SPLIT, reference_inv_freq(8)
    for b in range(2):
        q_rot = reference_rope(q[b], positions, freqs, half_split)
        k_rot = reference_rope(k[b], positions, freqs, half_split)
        expected = reference_attention(q_rot, k_rot, v[b], positions, positions, True)
        np.testing.assert_allclose(out[b], expected, rtol=1e-4, atol=1e-5)
    slopes = [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8]
    out = posenc.attention(q[0], k[0], v[0], positions, alibi=posenc.Alibi(4))
    expected = reference_attention(
        q[0].astype(np.float64),
        k[0],
        v[0],
        positions,
        positions,
        False,
        slopes,
    )
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match=r"\[attention\] v.shape\[:-3\] must equal q's batch"):
        posenc.attention(q, k, v[:1], positions)


def to_bfloat16_bits(x):
    """float32 -> bfloat16 bits (uint16), rounded to nearest even, and their values."""
    bits = x.astype(np.float32).view(np.uint32)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return rounded, (rounded.astype(np.uint32) << 16).view(np.float32)


def test_attention_on_bfloat16_bits():
    # Products exact, sums float32; the weights may be rounded to bfloat16
    # (AVX512-BF16), which moves an output by at most 2^-9 max|v|.
    q, q_values = to_bfloat16_bits(random((70, 4, 40), seed=8))
    k, k_values = to_bfloat16_bits(random((70, 2, 40), seed=9))
    v, v_values = to_bfloat16_bits(random((70, 2, 24), seed=10))
    positions = np.arange(70, dtype=np.int64)
    out = posenc.attention(q, k, v, positions, causal=True, bfloat16=True)
    assert out.dtype == np.float32 and out.shape == (70, 4, 24)
    expected = reference_attention(
        q_values.astype(np.float64),
        k_values,
        v_values,
        positions,
        positions,
        True,
    )
    bound = 2.0**-9 * np.abs(v_values).max() + 1e-5
    np.testing.assert_allclose(out, expected, rtol=0, atol=bound)
    with pytest.raises(
        ValueError,
        match=r"\[attention\] q must have dtype int16 or uint16 \(bfloat16 bits\), "
        r"got float32",
    ):
        posenc.attention(q_values, k, v, positions, bfloat16=True)


def cli():
    path = os.environ.get("POSENC_CLI")
    if not path:
        pytest.skip("POSENC_CLI is not set (run through CTest)")
    return path


def test_cli_sinusoidal_table_round_trip(tmp_path):
    path = tmp_path / "pe.npy"
    subprocess.run(
        [
            cli(),
            "table",
            "sinusoidal",
            "--positions",
            "50",
            "--dim",
            "12",
            "--base",
            "1000",
            "--format",
            "npy",
            "--output",
            str(path),
        ],
        check=True,
    )
    from_cli = np.load(path)
    assert from_cli.dtype == np.float32 and from_cli.shape == (50, 12)
    np.testing.assert_array_equal(from_cli, posenc.sinusoidal_table(50, 12, 1000.0))
    np.testing.assert_allclose(from_cli, reference_sinusoidal(np.arange(50), 12, 1000.0), atol=1e-6)


def test_cli_alibi_round_trip():
    result = subprocess.run(
        [cli(), "alibi", "--heads", "12", "--max-bias", "8", "--json"],
        check=True,
        capture_output=True,
        text=True,
    )
    slopes = json.loads(result.stdout)["slopes"]
    np.testing.assert_array_equal(posenc.alibi_slopes(posenc.Alibi(12)), slopes)


def test_cli_table_as_learned_positions(tmp_path):
    path = tmp_path / "pe.npy"
    subprocess.run(
        [
            cli(),
            "table",
            "sinusoidal",
            "--positions",
            "8",
            "--dim",
            "4",
            "--format",
            "npy",
            "--output",
            str(path),
        ],
        check=True,
    )
    table = posenc.LearnedPositions.load(str(path))
    np.testing.assert_array_equal(table.lookup([7, 2]), np.load(path)[[7, 2]])
