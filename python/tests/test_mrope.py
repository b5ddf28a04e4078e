"""Multi-stream RoPE from Python: posenc.MRope and apply_mrope* (numpy),
posenc.torch's MultimodalRotaryEmbedding, VisionRotaryEmbedding and
apply_mrope, against Hugging Face's reference outputs (tests/golden/mrope/),
1-D RoPE, gradcheck and the library's error messages."""

import json
import pathlib
import re

import numpy as np
import pytest
import torch

import posenc
import posenc.torch as pt

ROOT = pathlib.Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden" / "mrope"

TEXT = {
    "qwen2_vl_text": False,
    "qwen2_vl_text_small": False,
    "qwen3_vl_text": True,
    "qwen3_vl_text_small": True,
    "qwen3_vl_text_uneven": True,
}
VISION = {
    "qwen2_vl_vision": posenc.MRope.qwen_vision,
    "qwen2_5_vl_vision": posenc.MRope.qwen_vision,
    "qwen3_vl_vision": posenc.MRope.qwen_vision,
    "pixtral_vision": posenc.MRope.pixtral,
    "llama4_vision": posenc.MRope.llama4_vision,
}
# float32 storage: float32 arithmetic on exact angles, one rounding; against
# the float64 truth within a few float32 ulps of the largest |x|.
F32_TOL = 4e-6
# float64 storage is the library's double reference; Hugging Face's float64
# lines agree with an independent rotation to 2e-11 at positions near 2^17.
F64_TOL = 1e-9


def golden(name):
    return json.loads((GOLDEN / f"{name}.json").read_text())


# Qwen3-VL's [2, 3, 3] over 8 pairs: the interleaving slice stops at the last
# pair, so the streams get 3, 3 and 2 pairs, not the sections' counts.
UNEVEN_PAIR_STREAM = [0, 1, 2, 0, 1, 2, 0, 1]


def text_case(name):
    """(mrope, positions [3, T], q [T, Hq, D], k or None) of a text file, the
    rotation built on the file's float64 frequencies."""
    g = golden(name)
    d, t = g["head_dim"], g["tokens"]
    rope = posenc.Rope(d, d, posenc.RopeLayout.HALF_SPLIT, g["inv_freq_f64"])
    mrope = posenc.MRope.sections(rope, g["mrope_section"], TEXT[name])
    q = np.array(g["q"], np.float32).reshape(t, g["num_heads_q"], d)
    k = None
    if g["num_heads_k"]:
        k = np.array(g["k"], np.float32).reshape(t, g["num_heads_k"], d)
    return g, mrope, np.array(g["positions"], np.int64), q, k


def vision_case(name):
    """(mrope, positions [2, n], q [n, 1, D], want_f32, want_f64) of the
    file's apply tokens."""
    g = golden(name)
    mrope = VISION[name](g["head_dim"], g["theta"])
    key = "positions_window_order" if "positions_window_order" in g else "positions"
    positions = np.array(g[key], np.int64)[:, g["apply_tokens"]]
    shape = (len(g["apply_tokens"]), 1, g["head_dim"])
    q = np.array(g["q"], np.float32).reshape(shape)
    return (
        mrope,
        positions,
        q,
        np.array(g["q_out_f32"]).reshape(shape),
        np.array(g["q_out_f64"]).reshape(shape),
    )


def reference(mrope, positions, x):
    """A plain NumPy rotation by the MRope's own fields, in float64:
    positions [streams, T], x [T, H, D]."""
    rope = mrope.rope
    half, begin = rope.rotary_dim // 2, rope.rotary_offset
    inv_freq = np.array(rope.inv_freq)
    pos = positions[np.array(mrope.pair_stream)].T  # [T, half]
    angle = pos * inv_freq
    cos = rope.attention_factor * np.cos(angle)[:, None, :]
    sin = rope.attention_factor * np.sin(angle)[:, None, :]
    out = x.astype(np.float64).copy()
    if rope.layout == posenc.RopeLayout.HALF_SPLIT:
        a = slice(begin, begin + half)
        b = slice(begin + half, begin + 2 * half)
    else:
        a = slice(begin, begin + 2 * half, 2)
        b = slice(begin + 1, begin + 2 * half, 2)
    xa, xb = out[..., a].copy(), out[..., b].copy()
    out[..., a] = xa * cos - xb * sin
    out[..., b] = xb * cos + xa * sin
    return out


# ---------------------------------------------------------------- builders


def test_sections_blocks_and_interleaved_pair_streams():
    rope = posenc.Rope.default(128, 1e6)
    blocks = posenc.MRope.sections(rope, [16, 24, 24])
    assert blocks.num_streams == 3
    assert blocks.pair_stream == [0] * 16 + [1] * 24 + [2] * 24
    assert blocks.rope.inv_freq == rope.inv_freq
    inter = posenc.MRope.sections(rope, [24, 20, 20], interleaved=True)
    assert inter.pair_stream == [0, 1, 2] * 20 + [0] * 4
    small = posenc.MRope.sections(posenc.Rope.default(16), [4, 2, 2], True)
    assert small.pair_stream == [0, 1, 2, 0, 1, 2, 0, 0]
    # Qwen3-VL's rule as it is: [2, 3, 3] over 8 pairs gives height 1, 4, 7
    # and width 2, 5 (the slice stops at the last pair), time the rest.
    uneven = posenc.MRope.sections(posenc.Rope.default(16), [2, 3, 3], True)
    assert uneven.pair_stream == UNEVEN_PAIR_STREAM
    assert "num_streams=3" in repr(blocks) and "0 x16, 1 x24, 2 x24" in repr(blocks)


def test_vision_builders():
    qwen = posenc.MRope.qwen_vision(80)
    assert qwen.num_streams == 2 and qwen.head_dim == 80
    assert qwen.pair_stream == [0] * 20 + [1] * 20
    assert qwen.rope.layout == posenc.RopeLayout.HALF_SPLIT
    np.testing.assert_allclose(
        qwen.rope.inv_freq[:20], 1e4 ** (-np.arange(0, 40, 2) / 40), rtol=1e-15
    )
    assert qwen.rope.inv_freq[:20] == qwen.rope.inv_freq[20:]
    pixtral = posenc.MRope.pixtral(64)
    f = 1e4 ** (-np.arange(0, 64, 2) / 64)
    np.testing.assert_allclose(pixtral.rope.inv_freq, np.r_[f[::2], f[1::2]], rtol=1e-15)
    llama4 = posenc.MRope.llama4_vision(88)
    assert llama4.rope.layout == posenc.RopeLayout.INTERLEAVED
    assert posenc.MRope.MAX_STREAMS == 4


def test_explicit_pair_stream_and_equality():
    rope = posenc.Rope.default(8)
    m = posenc.MRope(rope, [0, 1, 1, 0])
    assert m.num_streams == 2
    assert posenc.MRope(rope, [0, 1, 1, 0], num_streams=2) == m
    assert posenc.MRope(rope, [0, 0, 0, 0], num_streams=3).num_streams == 3
    assert posenc.MRope.one_stream(rope).pair_stream == [0] * 4
    sixteen = posenc.Rope.default(16)
    assert posenc.MRope(sixteen, UNEVEN_PAIR_STREAM) == posenc.MRope.sections(
        sixteen, [2, 3, 3], True
    )
    assert m != posenc.MRope.one_stream(rope)


# ---------------------------------------------------------- golden (numpy)


@pytest.mark.parametrize("name", TEXT)
def test_text_golden_float64_is_the_reference(name):
    g, mrope, positions, q, k = text_case(name)
    out = posenc.apply_mrope(mrope, positions, q.astype(np.float64))
    np.testing.assert_allclose(out.reshape(-1), g["q_out_f64"], rtol=0, atol=F64_TOL)
    if k is not None:
        q_out, k_out = posenc.apply_mrope_qk(
            mrope, positions, q.astype(np.float64), k.astype(np.float64)
        )
        np.testing.assert_array_equal(q_out, out)
        np.testing.assert_allclose(k_out.reshape(-1), g["k_out_f64"], rtol=0, atol=F64_TOL)


@pytest.mark.parametrize("name", TEXT)
def test_text_golden_float32(name):
    g, mrope, positions, q, k = text_case(name)
    out = posenc.apply_mrope(mrope, positions, q)
    assert out.dtype == np.float32
    # Against the float64 truth everywhere (posenc's angles are exact)...
    truth = np.array(g["q_out_f64"]).reshape(q.shape)
    np.testing.assert_allclose(out, truth, rtol=0, atol=F32_TOL)
    # ... and against Hugging Face's float32 run where its float32 angles
    # are still exact to float32 rounding (positions < 2^12; at 131071 they
    # are off by ~0.01 rad, SOURCES.md).
    small = positions.max(axis=0) < 4096
    hf32 = np.array(g["q_out_f32"]).reshape(q.shape)
    np.testing.assert_allclose(out[small], hf32[small], rtol=0, atol=F32_TOL)
    if k is not None:
        rope32 = posenc.Rope(
            g["head_dim"],
            g["head_dim"],
            posenc.RopeLayout.HALF_SPLIT,
            [float(np.float32(f)) for f in g["inv_freq_f32"]],
        )
        m32 = posenc.MRope.sections(rope32, g["mrope_section"], TEXT[name])
        _, k_out = posenc.apply_mrope_qk(m32, positions, q, k)
        k32 = np.array(g["k_out_f32"]).reshape(k.shape)
        np.testing.assert_allclose(k_out[small], k32[small], rtol=0, atol=F32_TOL)


@pytest.mark.parametrize("name", VISION)
def test_vision_golden(name):
    mrope, positions, q, want32, want64 = vision_case(name)
    out64 = posenc.apply_mrope(mrope, positions, q.astype(np.float64))
    np.testing.assert_allclose(out64, want64, rtol=0, atol=F64_TOL)
    out32 = posenc.apply_mrope(mrope, positions, q)
    np.testing.assert_allclose(out32, want32, rtol=0, atol=F32_TOL)
    np.testing.assert_allclose(out64, reference(mrope, positions, q), rtol=0, atol=1e-12)


def test_text_golden_default_frequencies_match_hugging_face():
    # Rope.default's double frequencies are Hugging Face's float64 ones.
    g = golden("qwen2_vl_text")
    rope = posenc.Rope.default(g["head_dim"], g["theta"])
    np.testing.assert_allclose(rope.inv_freq, g["inv_freq_f64"], rtol=1e-15)


# ------------------------------------------------------- 1-D RoPE equality


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("interleaved", [False, True])
def test_equal_streams_are_1d_rope_bit_for_bit(dtype, interleaved):
    rope = posenc.Rope.default(32, 5e5, rotary_dim=24, rotary_offset=4)
    mrope = posenc.MRope.sections(rope, [4, 4, 4], interleaved)
    x = np.random.default_rng(1).standard_normal((2, 9, 3, 32)).astype(dtype)
    pos = np.array([0, 1, 2, 7, 99, 4096, 131071, 1 << 20, 123456789])
    streams = np.broadcast_to(pos, (3, 9))  # stride 0 over streams
    np.testing.assert_array_equal(
        posenc.apply_mrope(mrope, streams, x), posenc.apply_rope(rope, pos, x)
    )
    one = posenc.MRope.one_stream(rope)
    np.testing.assert_array_equal(
        posenc.apply_mrope(one, pos[None], x), posenc.apply_rope(rope, pos, x)
    )


def test_equal_streams_bfloat16_bits():
    rope = posenc.Rope.default(16)
    mrope = posenc.MRope.sections(rope, [2, 3, 3])
    bits = torch.randn(2, 5, 2, 16).to(torch.bfloat16).view(torch.int16).numpy()
    pos = np.arange(5) * 1000
    out = posenc.apply_mrope(mrope, np.stack([pos] * 3), bits, bfloat16=True)
    np.testing.assert_array_equal(out, posenc.apply_rope(rope, pos, bits, bfloat16=True))


# -------------------------------------------------- forms, strides, batches


def random_case(seed=0, batch=(2,), tokens=6, heads=3, dim=16):
    rng = np.random.default_rng(seed)
    mrope = posenc.MRope.sections(posenc.Rope.default(dim), [2, 3, 3])
    positions = rng.integers(0, 5000, (3,) + batch + (tokens,))
    x = rng.standard_normal(batch + (tokens, heads, dim)).astype(np.float32)
    return mrope, positions, x


def per_element(mrope, positions, x):
    """The rotation of each batch element by its own streams, in float64."""
    out = np.empty(x.shape)
    for b in np.ndindex(*x.shape[:-3]):
        out[b] = reference(mrope, positions[(slice(None),) + b], x[b])
    return out


@pytest.mark.parametrize("batch", [(), (1,), (2,), (2, 3)])
def test_batched_streams_match_per_element_reference(batch):
    mrope, positions, x = random_case(batch=batch)
    want = per_element(mrope, positions, x)
    np.testing.assert_allclose(posenc.apply_mrope(mrope, positions, x), want, rtol=0, atol=F32_TOL)
    shared = positions[(slice(None),) + (0,) * len(batch)]
    want_shared = per_element(
        mrope, np.broadcast_to(shared[(slice(None),) + (None,) * len(batch)], positions.shape), x
    )
    np.testing.assert_allclose(
        posenc.apply_mrope(mrope, shared, x), want_shared, rtol=0, atol=F32_TOL
    )


def test_four_forms_and_inverse():
    mrope, positions, x = random_case(batch=(2,))
    k = np.random.default_rng(5).standard_normal((2, 6, 1, 16)).astype(np.float32)
    out = posenc.apply_mrope(mrope, positions, x)
    q_out, k_out = posenc.apply_mrope_qk(mrope, positions, x, k)
    np.testing.assert_array_equal(q_out, out)
    np.testing.assert_array_equal(k_out, posenc.apply_mrope(mrope, positions, k))
    inplace = x.copy()
    posenc.apply_mrope_inplace(mrope, positions, inplace)
    np.testing.assert_array_equal(inplace, out)
    qi, ki = x.copy(), k.copy()
    posenc.apply_mrope_qk_inplace(mrope, positions, qi, ki)
    np.testing.assert_array_equal(qi, q_out)
    np.testing.assert_array_equal(ki, k_out)
    back = posenc.apply_mrope(mrope, positions, out, direction=posenc.RopeDirection.INVERSE)
    np.testing.assert_allclose(back, x, rtol=0, atol=1e-5)
    into = np.empty_like(x)
    assert posenc.apply_mrope(mrope, positions, x, out=into) is into
    np.testing.assert_array_equal(into, out)


def test_strided_positions_and_activations_are_read_in_place():
    mrope, positions, x = random_case(batch=(2,), tokens=6)
    want = per_element(mrope, positions, x)
    # [batch, tokens, streams] transposed to [streams, batch, tokens]; a
    # strided slice; Hugging Face's [batch, heads, seq, dim] transposed.
    tbs = np.ascontiguousarray(positions.transpose(1, 2, 0)).transpose(2, 0, 1)
    wide = np.zeros((3, 2, 12), np.int64)
    wide[:, :, ::2] = positions
    hf = np.ascontiguousarray(x.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)
    for p in (tbs, wide[:, :, ::2]):
        for xs in (x, hf):
            np.testing.assert_allclose(posenc.apply_mrope(mrope, p, xs), want, rtol=0, atol=F32_TOL)
    # Reversed (negative strides) is copied, not refused.
    np.testing.assert_allclose(
        posenc.apply_mrope(mrope, positions[::-1][::-1], x), want, rtol=0, atol=F32_TOL
    )
    # A Python list of lists is converted.
    np.testing.assert_allclose(
        posenc.apply_mrope(mrope, positions.tolist(), x), want, rtol=0, atol=F32_TOL
    )


def test_in_place_writes_the_callers_memory():
    mrope, positions, x = random_case(batch=(2,))
    hf = np.ascontiguousarray(x.transpose(0, 2, 1, 3))  # [b, h, t, d]
    view = hf.transpose(0, 2, 1, 3)
    posenc.apply_mrope_inplace(mrope, positions, view)
    np.testing.assert_allclose(
        hf.transpose(0, 2, 1, 3), per_element(mrope, positions, x), rtol=0, atol=F32_TOL
    )


def test_decode_step_shared_streams_of_one_token():
    # One token per batch element with shared streams: stride 0 over the
    # folded batch, one call.
    mrope, _, x = random_case(batch=(4,), tokens=1)
    p = np.array([[70], [71], [75]])
    want = per_element(mrope, np.broadcast_to(p[:, None, :], (3, 4, 1)), x)
    np.testing.assert_allclose(posenc.apply_mrope(mrope, p, x), want, rtol=0, atol=F32_TOL)


def test_empty_inputs_are_no_ops():
    mrope = posenc.MRope.qwen_vision(16)
    x = np.zeros((0, 5, 2, 16), np.float32)
    assert posenc.apply_mrope(mrope, np.zeros((2, 5), np.int64), x).shape == x.shape
    y = np.zeros((3, 0, 2, 16), np.float32)
    assert posenc.apply_mrope(mrope, np.zeros((2, 3, 0), np.int64), y).shape == y.shape


# ------------------------------------------------------------------ errors

MROPE = posenc.MRope.sections(posenc.Rope.default(16), [2, 3, 3])
X = np.random.default_rng(3).standard_normal((2, 4, 2, 16)).astype(np.float32)
P = np.zeros((3, 2, 4), np.int64)


def big_positions():
    p = P.copy()
    p[1, 1, 2] = 1 << 60
    return p


NUMPY_ERRORS = {
    "streams": (
        lambda x: posenc.apply_mrope_inplace(MROPE, np.zeros((2, 2, 4), np.int64), x),
        "[mrope] positions.num_streams must equal the rotation's streams (3), got 2",
    ),
    "positions shape": (
        lambda x: posenc.apply_mrope_inplace(MROPE, np.zeros((3, 2, 5), np.int64), x),
        "[mrope] positions.shape must be (streams, tokens) = (3, 4) or "
        "(streams, *batch, tokens) = (3, 2, 4), got (3, 2, 5)",
    ),
    "1-D positions": (
        lambda x: posenc.apply_mrope_inplace(MROPE, np.arange(4), x),
        "[mrope] positions.shape must be (streams, tokens) = (3, 4) or "
        "(streams, *batch, tokens) = (3, 2, 4), got (4,)",
    ),
    "positions dtype": (
        lambda x: posenc.apply_mrope_inplace(MROPE, P.astype(np.int32), x),
        "[mrope] positions must have dtype int64, got int32",
    ),
    "float positions": (
        lambda x: posenc.apply_mrope_inplace(MROPE, [[0.5] * 4] * 3, x),
        "[mrope] positions must be an int64 array or a sequence of ints, got list",
    ),
    "position too large, later element": (
        lambda x: posenc.apply_mrope_inplace(MROPE, big_positions(), x),
        "[mrope] positions[1][1][2] must be <= 2^32 = 4294967296 (kMaxPosition, where "
        "float32 RoPE stops being accurate), got 1152921504606846976",
    ),
    "head_dim": (
        lambda x: posenc.apply_mrope_inplace(
            posenc.MRope.sections(posenc.Rope.default(8), [2, 1, 1]), P, x
        ),
        "[mrope] x.head_dim must equal rope.head_dim (8), got 16",
    ),
    "k tokens": (
        lambda x: posenc.apply_mrope_qk_inplace(MROPE, P, x, np.zeros((2, 3, 1, 16), np.float32)),
        "[mrope] k.tokens must equal q.tokens (4), got 3",
    ),
    "k batch": (
        lambda x: posenc.apply_mrope_qk_inplace(MROPE, P, x, np.zeros((3, 4, 1, 16), np.float32)),
        "[mrope] k.shape[:-3] must equal q's batch dims (2,), got (3,)",
    ),
    "rope as mrope": (
        lambda x: posenc.apply_mrope_inplace(posenc.Rope.default(16), P, x),
        "[mrope] mrope must be a posenc.MRope, got Rope",
    ),
    "direction": (
        lambda x: posenc.apply_mrope_inplace(MROPE, P, x, direction="inverse"),
        "[mrope] direction must be a posenc.RopeDirection, got str",
    ),
    "q and k the same memory": (
        lambda x: posenc.apply_mrope_qk_inplace(MROPE, P, x, x[:, :, :1]),
        "[mrope] k must not share memory with q, got overlapping views",
    ),
    "out overlaps x across the batch": (
        lambda x: posenc.apply_mrope(MROPE, P, x[::-1], out=x),
        "[mrope] out must not share memory with x, got overlapping views",
    ),
    "out dtype": (
        lambda x: posenc.apply_mrope(MROPE, P, x, out=np.zeros(x.shape)),
        "[mrope] out must have dtype float32, got float64",
    ),
}


@pytest.mark.parametrize("call, message", NUMPY_ERRORS.values(), ids=NUMPY_ERRORS.keys())
def test_numpy_errors_name_the_argument_and_write_nothing(call, message):
    x = X.copy()
    with pytest.raises(posenc.Error, match="^" + re.escape(message) + "$"):
        call(x)
    np.testing.assert_array_equal(x, X)


BUILDER_ERRORS = {
    "sections sum": (
        lambda: posenc.MRope.sections(posenc.Rope.default(16), [2, 2, 2]),
        "[mrope] sections must add up to the rotary pairs, rotary_dim / 2 = 8 "
        "(they add up to 6), got 6",
    ),
    "vision head_dim": (
        lambda: posenc.MRope.qwen_vision(78),
        "[mrope] QwenVision head_dim must be a multiple of 4 in [4, 2^20], got 78",
    ),
    "pair_stream": (
        lambda: posenc.MRope(posenc.Rope.default(8), [0, 1, 2, 0], num_streams=2),
        "[mrope] pair_stream[2] must be in [0, num_streams = 2), got 2",
    ),
    "rope type": (
        lambda: posenc.MRope.sections("rope", [1]),
        "[mrope] rope must be a posenc.Rope, got str",
    ),
}


@pytest.mark.parametrize("call, message", BUILDER_ERRORS.values(), ids=BUILDER_ERRORS.keys())
def test_builder_errors(call, message):
    with pytest.raises(posenc.Error, match="^" + re.escape(message) + "$"):
        call()


# ------------------------------------------------------------------- torch


QWEN2_VL = {
    "model_type": "qwen2_vl",
    "hidden_size": 3584,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "num_hidden_layers": 28,
    "max_position_embeddings": 32768,
    "rope_theta": 1000000.0,
    "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
}


def hf_mrope_reference(q, position_ids, inv_freq, section, interleaved):
    """Hugging Face's Qwen2-VL / Qwen3-VL text rotation in float64, written
    from the lines SOURCES.md quotes: q [B, T, H, D], position_ids [3, B, T]."""
    freqs = position_ids.double()[..., None] * inv_freq  # [3, B, T, D/2]
    if interleaved:
        f = freqs[0].clone()
        for dim, offset in ((1, 1), (2, 2)):
            idx = slice(offset, section[dim] * 3, 3)
            f[..., idx] = freqs[dim, ..., idx]
    else:
        splits = freqs.split(section, dim=-1)
        f = torch.cat([m[i % 3] for i, m in enumerate(splits)], dim=-1)
    emb = torch.cat((f, f), dim=-1)[:, :, None, :]  # [B, T, 1, D]
    x = q.double()
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * emb.cos() + rotated * emb.sin()


@pytest.mark.parametrize("interleaved", [False, True])
def test_module_matches_hugging_face_lines(interleaved):
    section = [24, 20, 20] if interleaved else [16, 24, 24]
    rot = pt.MultimodalRotaryEmbedding(
        128, section, 5e6, interleaved=interleaved, qkv_format="bshd"
    )
    q, k = torch.randn(2, 7, 4, 128), torch.randn(2, 7, 2, 128)
    position_ids = torch.randint(0, 20000, (3, 2, 7))
    q_rot, k_rot = rot(q, k, position_ids)
    assert q_rot.dtype == torch.float32 and q_rot.shape == q.shape
    inv = rot.inv_freq
    torch.testing.assert_close(
        q_rot.double(),
        hf_mrope_reference(q, position_ids, inv, section, interleaved),
        rtol=0,
        atol=2e-5,
    )
    torch.testing.assert_close(
        k_rot.double(),
        hf_mrope_reference(k, position_ids, inv, section, interleaved),
        rtol=0,
        atol=2e-5,
    )


@pytest.mark.parametrize("name", ["qwen2_vl_text_small", "qwen3_vl_text_small"])
def test_module_golden_float64(name):
    g = golden(name)
    rot = pt.MultimodalRotaryEmbedding(
        g["head_dim"], g["mrope_section"], g["theta"], interleaved=TEXT[name], qkv_format="bshd"
    )
    t, d = g["tokens"], g["head_dim"]
    q = torch.tensor(g["q"], dtype=torch.float32).reshape(1, t, -1, d).double()
    k = torch.tensor(g["k"], dtype=torch.float32).reshape(1, t, -1, d).double()
    position_ids = torch.tensor(g["positions"])[:, None, :]  # [3, 1, T]
    q_rot, k_rot = rot(q, k, position_ids)
    want_q = torch.tensor(g["q_out_f64"], dtype=torch.float64).reshape(q.shape)
    want_k = torch.tensor(g["k_out_f64"], dtype=torch.float64).reshape(k.shape)
    torch.testing.assert_close(q_rot, want_q, rtol=0, atol=F64_TOL)
    torch.testing.assert_close(k_rot, want_k, rtol=0, atol=F64_TOL)


def test_from_hf_config_and_text_positions_are_1d_rope():
    rot = pt.MultimodalRotaryEmbedding.from_hf_config(QWEN2_VL, qkv_format="bshd")
    assert rot.mrope.pair_stream == [0] * 16 + [1] * 24 + [2] * 24
    rope = posenc.rope_from_hf_config(QWEN2_VL)
    assert rot.rope.inv_freq == rope.inv_freq
    q, k = torch.randn(2, 5, 28, 128), torch.randn(2, 5, 4, 128)
    text = torch.tensor([[0, 1, 2, 3, 4], [9, 10, 11, 12, 13]])
    one_d = pt.apply_rope(rope, text, q, k, qkv_format="bshd")
    for position_ids in (text, text[None].expand(3, 2, 5)):
        q_rot, k_rot = rot(q, k, position_ids)
        assert torch.equal(q_rot, one_d[0]) and torch.equal(k_rot, one_d[1])
    q_rot, _ = rot(q, k, qkv_format="bshd")  # None: 0 .. T - 1 (where the layout says)
    assert torch.equal(q_rot, pt.apply_rope(rope, torch.arange(5), q, k, qkv_format="bshd")[0])


def test_hf_layout_transposed_tensors_keep_their_strides():
    rot = pt.MultimodalRotaryEmbedding(16, [2, 3, 3], qkv_format="bshd")
    q_hf = torch.randn(2, 4, 5, 16)  # [batch, heads, seq, dim]
    k_hf = torch.randn(2, 1, 5, 16)
    position_ids = torch.randint(0, 100, (3, 2, 5))
    q_rot, k_rot = rot(q_hf.transpose(1, 2), k_hf.transpose(1, 2), position_ids)
    assert q_rot.stride() == q_hf.transpose(1, 2).stride()
    want_q, want_k = rot(
        q_hf.transpose(1, 2).contiguous(), k_hf.transpose(1, 2).contiguous(), position_ids
    )
    assert torch.equal(q_rot, want_q) and torch.equal(k_rot, want_k)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_module_low_precision_dtypes(dtype):
    rot = pt.MultimodalRotaryEmbedding(16, [4, 2, 2], interleaved=True, qkv_format="bshd")
    q, k = torch.randn(2, 6, 3, 16), torch.randn(2, 6, 1, 16)
    position_ids = torch.randint(0, 3000, (3, 2, 6))
    q_rot, k_rot = rot(q.to(dtype), k.to(dtype), position_ids)
    assert q_rot.dtype == dtype and k_rot.dtype == dtype
    want_q, want_k = rot(q.to(dtype).double(), k.to(dtype).double(), position_ids)
    tol = {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 4e-3}[dtype]
    torch.testing.assert_close(q_rot.double(), want_q, rtol=tol, atol=tol)
    torch.testing.assert_close(k_rot.double(), want_k, rtol=tol, atol=tol)


def test_gradcheck_float64():
    rot = pt.MultimodalRotaryEmbedding(8, [1, 2, 1], 100.0, qkv_format="bshd")
    q = torch.randn(2, 3, 2, 8, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 3, 1, 8, dtype=torch.float64, requires_grad=True)
    position_ids = torch.tensor(
        [[[0, 1, 2], [5, 5, 6]], [[0, 3, 2], [5, 6, 7]], [[0, 1, 9], [5, 7, 6]]]
    )
    assert torch.autograd.gradcheck(lambda a, b: rot(a, b, position_ids), (q, k))
    assert torch.autograd.gradgradcheck(lambda a, b: rot(a, b, position_ids), (q, k))


def test_backward_is_the_inverse_rotation():
    rot = pt.MultimodalRotaryEmbedding(16, [2, 3, 3], qkv_format="bshd")
    mrope = rot.mrope
    q = torch.randn(2, 5, 3, 16, requires_grad=True)
    k = torch.randn(2, 5, 1, 16, requires_grad=True)
    position_ids = torch.randint(0, 9000, (3, 2, 5))
    gq, gk = torch.randn(2, 5, 3, 16), torch.randn(2, 5, 1, 16)
    q_rot, k_rot = rot(q, k, position_ids)
    torch.autograd.backward((q_rot, k_rot), (gq, gk))
    inverse = posenc.RopeDirection.INVERSE
    p = position_ids.numpy()
    np.testing.assert_array_equal(
        q.grad.numpy(), posenc.apply_mrope(mrope, p, gq.numpy(), direction=inverse)
    )
    np.testing.assert_array_equal(
        k.grad.numpy(), posenc.apply_mrope(mrope, p, gk.numpy(), direction=inverse)
    )


@pytest.mark.parametrize("name", VISION)
def test_vision_module_golden(name):
    g = golden(name)
    kind = name.rsplit("_vision", 1)[0]
    rot = pt.VisionRotaryEmbedding(kind, g["head_dim"], g["theta"])
    mrope, positions, q, want32, want64 = vision_case(name)
    assert rot.mrope == mrope
    qt = torch.from_numpy(q)
    q_rot, k_rot = rot(qt, qt, torch.from_numpy(positions))  # [tokens, heads, dim]
    np.testing.assert_allclose(q_rot.numpy(), want32, rtol=0, atol=F32_TOL)
    assert torch.equal(q_rot, k_rot)
    q64, _ = rot(qt.double()[None], qt.double()[None], torch.from_numpy(positions))
    np.testing.assert_allclose(q64[0].numpy(), want64, rtol=0, atol=F64_TOL)


def test_vision_gradcheck():
    rot = pt.VisionRotaryEmbedding("pixtral", 8)
    q = torch.randn(5, 2, 8, dtype=torch.float64, requires_grad=True)
    positions = torch.tensor([[0, 0, 1, 1, 2], [0, 1, 0, 1, 0]])
    assert torch.autograd.gradcheck(lambda a: rot(a, a, positions)[0], (q,))


def q8(*shape, dtype=torch.float32):
    return torch.zeros(*shape, dtype=dtype)


ROT = pt.MultimodalRotaryEmbedding(8, [1, 2, 1], qkv_format="bshd")
VIS = pt.VisionRotaryEmbedding("qwen2_vl", 8)
TORCH_ERRORS = {
    "position_ids [2, B, T]": (
        lambda: ROT(q8(2, 3, 1, 8), q8(2, 3, 1, 8), torch.zeros(2, 2, 3, dtype=torch.int64)),
        "[mrope] position_ids.shape must be (streams, *batch, tokens) = (3, 2, 3) or "
        "(*batch, tokens) = (2, 3) (text: the same position in every stream), got (2, 2, 3)",
    ),
    "mismatched batch": (
        lambda: ROT(q8(2, 3, 1, 8), q8(2, 3, 1, 8), torch.zeros(3, 4, 3, dtype=torch.int64)),
        "[mrope] position_ids.shape must be (streams, *batch, tokens) = (3, 2, 3) or "
        "(*batch, tokens) = (2, 3) (text: the same position in every stream), got (3, 4, 3)",
    ),
    "mismatched tokens": (
        lambda: ROT(q8(2, 3, 1, 8), q8(2, 3, 1, 8), torch.zeros(3, 2, 4, dtype=torch.int64)),
        "[mrope] position_ids.shape must be (streams, *batch, tokens) = (3, 2, 3) or "
        "(*batch, tokens) = (2, 3) (text: the same position in every stream), got (3, 2, 4)",
    ),
    "float position_ids": (
        lambda: ROT(q8(2, 3, 1, 8), q8(2, 3, 1, 8), torch.zeros(3, 2, 3)),
        "[mrope] position_ids must have dtype int64, got float32",
    ),
    "k tokens": (
        lambda: ROT(q8(2, 3, 1, 8), q8(2, 2, 1, 8), torch.zeros(3, 2, 3, dtype=torch.int64)),
        "[mrope] k.tokens must equal q.tokens (3), got 2",
    ),
    "k dtype": (
        lambda: ROT(q8(1, 3, 1, 8), q8(1, 3, 1, 8, dtype=torch.float64)),
        "[mrope] k.dtype must equal q.dtype (float32), got float64",
    ),
    "int q": (
        lambda: ROT(torch.zeros(1, 3, 1, 8, dtype=torch.int32), q8(1, 3, 1, 8)),
        "[mrope] q must have dtype float32, float64, bfloat16, float16, got int32",
    ),
    "head_dim": (
        lambda: ROT(q8(1, 3, 1, 16), q8(1, 3, 1, 16)),
        "[mrope] q.head_dim must equal rope.head_dim (8), got 16",
    ),
    "2-D q": (
        lambda: ROT(q8(3, 8), q8(3, 8)),
        "[mrope] q.shape must be [..., tokens, heads, head_dim], got (3, 8)",
    ),
    "vision positions [3, T]": (
        lambda: VIS(q8(3, 1, 8), q8(3, 1, 8), torch.zeros(3, 3, dtype=torch.int64)),
        "[mrope] positions.shape must be (streams, *batch, tokens) = (2, 3), got (3, 3)",
    ),
    "negative position": (
        lambda: VIS(q8(3, 1, 8), q8(3, 1, 8), torch.tensor([[0, 1, 2], [0, -1, 0]])),
        "[mrope] positions[1][1] must be >= 0, got -1",
    ),
    "vision kind": (
        lambda: pt.VisionRotaryEmbedding("qwen", 8),
        "[mrope] kind must be one of 'qwen2_vl', 'qwen2_5_vl', 'qwen3_vl', 'pixtral', "
        "'llama4', got 'qwen'",
    ),
    "vision head_dim float": (
        lambda: pt.VisionRotaryEmbedding("pixtral", 8.0),
        "[mrope] head_dim must be an int, got float",
    ),
    "head_dim as a string": (
        lambda: pt.MultimodalRotaryEmbedding("128", [16, 24, 24], qkv_format="bshd"),
        "[mrope] head_dim must be an int, got str",
    ),
    "theta as a string": (
        lambda: pt.VisionRotaryEmbedding("qwen2_vl", 8, "1e4"),
        "[mrope] theta must be a number, got str",
    ),
    "float spatial_merge_size": (
        lambda: pt.VisionRotaryEmbedding("qwen2_vl", 8, spatial_merge_size=2.0),
        "[mrope] spatial_merge_size must be an int or None, got float",
    ),
    "sections of floats": (
        lambda: pt.MultimodalRotaryEmbedding(8, [1.0, 2, 1], qkv_format="bshd"),
        "[mrope] mrope_section must be a sequence of ints, got [1.0, 2, 1]",
    ),
    "config without M-RoPE": (
        lambda: pt.MultimodalRotaryEmbedding.from_hf_config(
            {**QWEN2_VL, "model_type": "qwen2", "rope_scaling": None}, qkv_format="bshd"
        ),
        "[mrope] config must describe a model with M-RoPE (rope_scaling.mrope_section: "
        "Qwen2-VL, Qwen2.5-VL, Qwen3-VL), got qwen2 (rope, no mrope_section)",
    ),
    "functional with a module": (
        lambda: pt.apply_mrope(
            ROT, torch.zeros(3, 3, dtype=torch.int64), q8(3, 1, 8), q8(3, 1, 8), qkv_format="bshd"
        ),
        "[mrope] mrope must be a posenc.MRope (of a MultimodalRotaryEmbedding: its .mrope), "
        "got MultimodalRotaryEmbedding",
    ),
}


@pytest.mark.parametrize("call, message", TORCH_ERRORS.values(), ids=TORCH_ERRORS.keys())
def test_torch_errors(call, message):
    with pytest.raises(posenc.Error, match="^" + re.escape(message) + "$"):
        call()


# ------------------------------------------------------------ no copies


def test_numpy_positions_and_activations_are_not_copied():
    # A read-only int64 view of a larger buffer: if posenc copied it, a
    # change to the buffer between calls could not show; it must.
    mrope, positions, x = random_case(batch=(2,))
    buf = np.zeros((3, 2, 12), np.int64)
    view = buf[:, :, ::2]
    view.setflags(write=False)
    first = posenc.apply_mrope(mrope, view, x)
    np.testing.assert_array_equal(first, posenc.apply_mrope(mrope, np.zeros_like(positions), x))
    buf[:, :, ::2] = positions
    np.testing.assert_allclose(
        posenc.apply_mrope(mrope, view, x), per_element(mrope, positions, x), rtol=0, atol=F32_TOL
    )
    # In place on a strided view writes the caller's buffer, not a copy.
    big = np.zeros((2, 6, 5, 16), np.float32)
    big[:, :, 1:4] = x
    posenc.apply_mrope_inplace(mrope, positions, big[:, :, 1:4])
    np.testing.assert_allclose(
        big[:, :, 1:4], per_element(mrope, positions, x), rtol=0, atol=F32_TOL
    )
    assert not big[:, :, 0].any() and not big[:, :, 4].any()


def test_torch_expanded_position_ids_are_views():
    # Hugging Face expands text position_ids to [3, B, T] with stride 0; the
    # module reads them in place (the result equals the materialised copy).
    rot = pt.MultimodalRotaryEmbedding(16, [2, 3, 3], qkv_format="bshd")
    q, k = torch.randn(2, 4, 2, 16), torch.randn(2, 4, 1, 16)
    ids = torch.arange(8).reshape(2, 4)
    expanded = ids[None].expand(3, 2, 4)
    assert expanded.stride()[0] == 0
    a = rot(q, k, expanded)
    b = rot(q, k, expanded.contiguous())
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


# ------------------------------------------------ get_rope_index (Qwen-VL)

INDEX = ROOT / "tests" / "golden" / "mrope_index"
REAL = ROOT / "tests" / "configs" / "real"
INDEX_FILES = sorted(p.stem for p in INDEX.glob("*.json"))
# transformers 5.23.0's own get_rope_index on the same inputs and more
# (tests/golden/mrope_index_v5/README.md).
INDEX_V5 = ROOT / "tests" / "golden" / "mrope_index_v5"
INDEX_FILES_V5 = sorted(p.stem for p in INDEX_V5.glob("*.json"))


def index_config(g):
    """A config dict holding the golden file's ids and sizes the way the
    published configs hold them."""
    c = g["config"]
    vision = {"spatial_merge_size": c["spatial_merge_size"]}
    if c["tokens_per_second"] is not None:
        vision["tokens_per_second"] = c["tokens_per_second"]
    return {
        "model_type": g["model"],
        "image_token_id": c["image_token_id"],
        "video_token_id": c["video_token_id"],
        "vision_start_token_id": c["vision_start_token_id"],
        "vision_config": vision,
    }


def index_args(g):
    return (
        g["input_ids"],
        g["image_grid_thw"],
        g["video_grid_thw"],
        g["second_per_grid_ts"],
        g["attention_mask"],
    )


def test_transformers5_golden_files_are_there():
    assert len(INDEX_FILES) == 43 and len(INDEX_FILES_V5) == 45
    assert all(n.split("-")[0].endswith("_transformers5") for n in INDEX_FILES_V5)


@pytest.mark.parametrize(
    "path",
    [INDEX / f"{n}.json" for n in INDEX_FILES] + [INDEX_V5 / f"{n}.json" for n in INDEX_FILES_V5],
    ids=INDEX_FILES + [f"v5/{n}" for n in INDEX_FILES_V5],
)
def test_get_rope_index_golden(path):
    g = json.loads(path.read_text())
    positions, deltas = posenc.get_rope_index(index_config(g), *index_args(g), rules=g["release"])
    assert positions.dtype == np.int64 and deltas.dtype == np.int64
    np.testing.assert_array_equal(positions, g["position_ids"])
    np.testing.assert_array_equal(deltas, g["rope_deltas"])
    # The torch twin, with tensors as Hugging Face holds them: int64 ids,
    # float32 seconds.
    tensors = [None if v is None else torch.tensor(v) for v in index_args(g)]
    if tensors[3] is not None:
        tensors[3] = tensors[3].to(torch.float32)
    tokens = posenc.qwen_vl_tokens(
        index_config(g), posenc.MropeIndexRules.__members__[g["release"].upper()]
    )
    p_t, d_t = pt.get_rope_index(tokens, *tensors)
    assert p_t.dtype == torch.int64 and tuple(p_t.shape) == np.shape(g["position_ids"])
    assert tuple(d_t.shape) == (len(g["input_ids"]), 1)
    assert p_t.tolist() == g["position_ids"] and d_t.tolist() == g["rope_deltas"]


def test_rope_index_feeds_the_rotation_of_the_same_config():
    path = REAL / "qwen2_vl-qwen2-vl-7b-instruct.json"
    g = json.loads((INDEX / "qwen2_vl-one_image.json").read_text())
    tokens = posenc.qwen_vl_tokens(path)
    assert tokens.rules == posenc.MropeIndexRules.QWEN2_VL
    assert tokens.image_token_id == g["config"]["image_token_id"]
    ids = torch.tensor(g["input_ids"])
    position_ids, deltas = pt.get_rope_index(path, ids, torch.tensor(g["image_grid_thw"]))
    rot = pt.MultimodalRotaryEmbedding.from_hf_config(path, qkv_format="bshd")
    b, t = ids.shape
    q, k = torch.randn(b, t, 28, 128), torch.randn(b, t, 4, 128)
    q_rot, k_rot = rot(q, k, position_ids)
    want = hf_mrope_reference(q, position_ids, rot.inv_freq, [16, 24, 24], False)
    torch.testing.assert_close(q_rot.double(), want, rtol=0, atol=2e-5)
    # The next decoded token: cache position t plus the delta, in every stream.
    step = torch.full((3, b, 1), t) + deltas[None]
    q1 = torch.randn(b, 1, 28, 128)
    q1_rot, _ = rot(q1, q1[:, :, :4], step)
    one_d = posenc.rope_from_hf_config(path)
    assert torch.equal(
        q1_rot, pt.apply_rope(one_d, (t + deltas), q1, q1[:, :, :4], qkv_format="bshd")[0]
    )


def test_rope_index_rules_and_repr():
    tokens = posenc.QwenVlTokens(
        image_token_id=5,
        video_token_id=6,
        vision_start_token_id=4,
        tokens_per_second=2,
        rules="qwen2_5_vl_int_seconds",
    )
    assert tokens.rules == posenc.MropeIndexRules.QWEN2_5_VL_INT_SECONDS
    assert tokens.rules.rule_name == "qwen2_5_vl_int_seconds"
    assert "rules='qwen2_5_vl_int_seconds'" in repr(tokens)
    # A video of grid (2, 2, 2) at 0.5 s per grid: frame 1 at time 1 by the
    # released rule, at 0 with the int cast.
    ids = [[1, 4, 6, 6, 2]]
    released, _ = posenc.get_rope_index(
        tokens,
        ids,
        video_grid_thw=[[2, 2, 2]],
        second_per_grid_ts=[0.5],
        rules="qwen2_5_vl",
    )
    cast, _ = posenc.get_rope_index(
        tokens, ids, video_grid_thw=[[2, 2, 2]], second_per_grid_ts=[0.5]
    )
    assert released[0, 0].tolist() == [0, 1, 2, 3, 4]
    assert cast[0, 0].tolist() == [0, 1, 2, 2, 3]


INDEX_TOKENS = posenc.QwenVlTokens(image_token_id=5, video_token_id=6, vision_start_token_id=4)
INDEX_ERRORS = {
    "1-D input_ids": (
        lambda: posenc.get_rope_index(INDEX_TOKENS, [1, 2, 3]),
        "[mrope_index] input_ids.shape must be (batch, seq_len), got (3,)",
    ),
    "float input_ids tensor": (
        lambda: pt.get_rope_index(INDEX_TOKENS, torch.zeros(1, 3)),
        "[mrope_index] input_ids must be an integer tensor, got float32",
    ),
    "grid rows": (
        lambda: posenc.get_rope_index(INDEX_TOKENS, [[4, 5]], [[1, 2]]),
        "[mrope_index] image_grid_thw.shape must be (grids, 3): one (t, h, w) per grid, got (1, 2)",
    ),
    "mask shape": (
        lambda: posenc.get_rope_index(INDEX_TOKENS, [[1, 2]], attention_mask=[[1]]),
        "[mrope_index] attention_mask.shape must equal input_ids.shape (1, 2), got (1, 1)",
    ),
    "seconds as strings": (
        lambda: posenc.get_rope_index(INDEX_TOKENS, [[1]], second_per_grid_ts="1"),
        "[mrope_index] second_per_grid_ts must be a sequence of real numbers, got str",
    ),
    "rules name": (
        lambda: posenc.qwen_vl_tokens(INDEX_TOKENS, "qwen4_vl"),
        "[mrope_index] rules must be one of qwen2_vl, qwen2_5_vl, qwen2_5_vl_int_seconds, "
        "qwen3_vl, qwen2_vl_transformers5, qwen2_5_vl_transformers5, "
        'qwen3_vl_transformers5, got "qwen4_vl"',
    ),
    "rules type": (
        lambda: posenc.qwen_vl_tokens(INDEX_TOKENS, 3),
        "[mrope_index_config] rules must be None, a posenc.MropeIndexRules or its name, got int",
    ),
    "tokens type": (
        lambda: posenc._core.qwen_vl_rope_index_of_tokens("x", [[1]]),
        "[mrope_index] tokens must be a posenc.QwenVlTokens, got str",
    ),
}


@pytest.mark.parametrize("call, message", INDEX_ERRORS.values(), ids=INDEX_ERRORS.keys())
def test_rope_index_errors(call, message):
    with pytest.raises(posenc.Error) as error:
        call()
    if message is not None:
        assert str(error.value) == message


# ------------------------------------------------------ configs and towers

REAL_TEXT = {
    "qwen2_vl_text": "qwen2_vl-qwen2-vl-7b-instruct.json",
    "qwen3_vl_text": "qwen3_vl-qwen3-vl-8b-instruct.json",
}


@pytest.mark.parametrize("name", REAL_TEXT)
def test_published_config_rotates_as_hugging_face(name):
    # The golden text files use the published models' head_dim, theta and
    # sections: the config's MRope reproduces them.
    g, _, positions, q, _ = text_case(name)
    path = REAL / REAL_TEXT[name]
    exact = posenc.mrope_from_hf_config(path, precision=posenc.RopePrecision.EXACT)
    assert exact.pair_stream == text_case(name)[1].pair_stream
    out = posenc.apply_mrope(exact, positions, q.astype(np.float64))
    np.testing.assert_allclose(out.reshape(-1), g["q_out_f64"], rtol=0, atol=F64_TOL)
    # REFERENCE: Hugging Face's float32 frequencies, as the model runs.
    rot = pt.MultimodalRotaryEmbedding.from_hf_config(path, qkv_format="bshd")
    np.testing.assert_array_equal(
        np.array(rot.mrope.rope.inv_freq, np.float32), np.array(g["inv_freq_f32"], np.float32)
    )
    qt = torch.from_numpy(q)[None]
    q_rot, _ = rot(qt, qt, torch.from_numpy(positions)[:, None, :])
    small = positions.max(axis=0) < 4096
    hf32 = np.array(g["q_out_f32"]).reshape(q.shape)
    np.testing.assert_allclose(q_rot[0].numpy()[small], hf32[small], rtol=0, atol=F32_TOL)


def test_config_with_uneven_interleaved_sections_follows_hugging_face():
    g, _, positions, q, k = text_case("qwen3_vl_text_uneven")
    config = {
        "model_type": "qwen3_vl",
        "text_config": {
            "model_type": "qwen3_vl_text",
            "hidden_size": 32,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "num_hidden_layers": 2,
            "head_dim": 16,
            "rope_theta": 10000.0,
            "rope_scaling": {
                "rope_type": "default",
                "mrope_section": [2, 3, 3],
                "mrope_interleaved": True,
            },
        },
    }
    rot = pt.MultimodalRotaryEmbedding.from_hf_config(
        config, precision=posenc.RopePrecision.EXACT, qkv_format="bshd"
    )
    assert rot.mrope.pair_stream == UNEVEN_PAIR_STREAM
    q_rot, k_rot = rot(
        torch.from_numpy(q).double()[None],
        torch.from_numpy(k).double()[None],
        torch.from_numpy(positions)[:, None, :],
    )
    np.testing.assert_allclose(q_rot.reshape(-1), g["q_out_f64"], rtol=0, atol=F64_TOL)
    np.testing.assert_allclose(k_rot.reshape(-1), g["k_out_f64"], rtol=0, atol=F64_TOL)


def test_mrope_of_a_1d_config_is_one_stream():
    rope_only = {**QWEN2_VL, "model_type": "qwen2", "rope_scaling": None}
    one = posenc.mrope_from_hf_config(rope_only)
    assert one.num_streams == 1
    assert one.rope.inv_freq == posenc.rope_from_hf_config(rope_only).inv_freq


REAL_TOWERS = {
    "qwen2_vl-qwen2-vl-7b-instruct.json": ("qwen2_vl", 80),
    "qwen2_5_vl-qwen2.5-vl-7b-instruct.json": ("qwen2_5_vl", 80),
    "qwen3_vl-qwen3-vl-8b-instruct.json": ("qwen3_vl", 72),
    "mistral3-mistral-small-3.1-24b-instruct-2503.json": ("pixtral", 64),
    "llama4-scout-17b-16e.json": ("llama4", 88),
}


@pytest.mark.parametrize("file", REAL_TOWERS)
def test_vision_tower_of_published_configs(file):
    kind, head_dim = REAL_TOWERS[file]
    rot = pt.VisionRotaryEmbedding.from_hf_config(REAL / file)
    assert rot.kind == kind and rot.mrope.head_dim == head_dim
    assert rot.mrope == pt.VisionRotaryEmbedding(kind, head_dim).mrope
    assert posenc.vision_rope_from_hf_config(REAL / file) == rot.mrope


def dedupe(offsets):
    return [o for i, o in enumerate(offsets) if i == 0 or o != offsets[i - 1]]


@pytest.mark.parametrize("name", VISION)
def test_vision_positions_and_rotation_golden(name):
    g = golden(name)
    kind = name.rsplit("_vision", 1)[0]
    if kind == "llama4":
        rot = pt.VisionRotaryEmbedding(kind, g["head_dim"], patches_per_side=g["side"])
        positions = rot.positions()
        np.testing.assert_array_equal(posenc.llama4_vision_positions(g["side"]), g["positions"])
    elif kind == "pixtral":
        rot = pt.VisionRotaryEmbedding(kind, g["head_dim"])
        positions = rot.positions(torch.tensor(g["images_rows_cols"]))
        np.testing.assert_array_equal(
            posenc.pixtral_vision_positions(g["images_rows_cols"]), g["positions"]
        )
    else:
        merge = g["spatial_merge_size"]
        rot = pt.VisionRotaryEmbedding(kind, g["head_dim"], spatial_merge_size=merge)
        grids = g["grids_thw"]
        np.testing.assert_array_equal(posenc.qwen_vision_positions(grids, merge), g["positions"])
        np.testing.assert_array_equal(rot.positions(grids, window_order=False), g["positions"])
        positions = rot.positions(torch.tensor(grids))
        if kind == "qwen2_5_vl":
            units = g["window_size"] // merge // g["patch_size"]
            index, offsets = posenc.qwen_vision_window_order(grids, merge, units)
            np.testing.assert_array_equal(index, g["window_index"])
            np.testing.assert_array_equal(offsets, dedupe(g["cu_window_seqlens"]))
            t_index, t_offsets = rot.window_order(grids)
            assert t_index.tolist() == g["window_index"]
            assert t_offsets.tolist() == dedupe(g["cu_window_seqlens"])
    key = "positions_window_order" if kind == "qwen2_5_vl" else "positions"
    assert positions.dtype == torch.int64 and positions.tolist() == g[key]
    # Rotate the whole sequence, then read the golden apply tokens.
    q = torch.zeros(positions.shape[1], 1, g["head_dim"])
    q[g["apply_tokens"]] = torch.tensor(g["q"]).reshape(len(g["apply_tokens"]), 1, -1)
    q_rot, _ = rot(q, q, positions)
    np.testing.assert_allclose(
        q_rot[g["apply_tokens"]].reshape(-1).numpy(), g["q_out_f32"], rtol=0, atol=F32_TOL
    )


CONFIG_ERRORS = {
    "vision tower of a text model": (
        lambda: posenc.vision_rope_from_hf_config({**QWEN2_VL, "model_type": "qwen2"}),
        "[hf_config] config must have a vision_config with 2-D RoPE (Qwen2-VL, Qwen2.5-VL, "
        "Qwen3-VL, Pixtral, Llama 4), got qwen2 (rope)",
    ),
    "mrope of an ALiBi model": (
        lambda: posenc.mrope_from_hf_config({"model_type": "bloom", "n_head": 8}),
        "[hf_config] config must describe a RoPE model, got bloom (alibi)",
    ),
    "llama4 positions with grids": (
        lambda: pt.VisionRotaryEmbedding("llama4", 8, patches_per_side=2).positions([[1, 2]]),
        "[mrope] grids must be None for llama4 (its tower has patches_per_side^2 patches, "
        "from the config), got a grid",
    ),
    "qwen grid not divisible": (
        lambda: posenc.qwen_vision_positions([[1, 3, 4]], 2),
        None,
    ),
    "pixtral sizes of three": (
        lambda: posenc.pixtral_vision_positions([[1, 2, 3]]),
        "[pixtral_vision_positions] images.shape must be (images, 2): one (rows, cols) per "
        "image, got (1, 3)",
    ),
}


@pytest.mark.parametrize("call, message", CONFIG_ERRORS.values(), ids=CONFIG_ERRORS.keys())
def test_config_and_tower_errors(call, message):
    with pytest.raises(posenc.Error) as error:
        call()
    if message is not None:
        assert str(error.value) == message
