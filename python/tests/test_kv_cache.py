"""posenc.KVCache and posenc.torch.KVCache: a decode through the cache equals
attention over the whole sequence; context shifts and sink rolls equal
attention from scratch at the moved positions; every error leaves the cache
as it was."""

import gc
import re

import numpy as np
import pytest
import torch

import posenc
import posenc.torch as pt

HEAD_DIM = 16
KV_HEADS = 2
HEADS = 4  # grouped: two query heads per kv head
ROPE = posenc.Rope.default(HEAD_DIM, 10000.0)


def normal(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def qkv(tokens, seed=0, value_dim=HEAD_DIM):
    return (
        normal(tokens, HEADS, HEAD_DIM, seed=seed),
        normal(tokens, KV_HEADS, HEAD_DIM, seed=seed + 1),
        normal(tokens, KV_HEADS, value_dim, seed=seed + 2),
    )


def bf16_bits(x):
    """bfloat16 bits (int16) of a float32 array, rounded as torch rounds."""
    return torch.from_numpy(x).bfloat16().view(torch.int16).numpy()


def test_decode_through_the_cache_equals_attention_over_the_sequence():
    n, prefill = 24, 9
    q, k, v = qkv(n)
    positions = np.arange(n) + 5  # not from 0: the rotation must use them
    expect = posenc.attention(q, k, v, positions, causal=True, rope=ROPE)
    cache = posenc.KVCache(32, KV_HEADS, HEAD_DIM, rope=ROPE)
    cache.append(positions[:prefill], k[:prefill], v[:prefill])
    got = [cache.attend(q[:prefill], positions[:prefill], causal=True)]
    for t in range(prefill, n):
        cache.append(positions[t : t + 1], k[t : t + 1], v[t : t + 1])
        got.append(cache.attend(q[t : t + 1], positions[t : t + 1], causal=True))
    np.testing.assert_allclose(np.concatenate(got), expect, rtol=0, atol=1e-6)
    assert cache.size == len(cache) == n
    np.testing.assert_array_equal(cache.positions, positions)
    np.testing.assert_array_equal(cache.values, v)
    np.testing.assert_array_equal(cache.keys, posenc.apply_rope(ROPE, positions, k))


def test_attention_options_pass_through():
    n = 12
    q, k, v = qkv(n, seed=3)
    pos = np.arange(n)
    cache = posenc.KVCache(n, KV_HEADS, HEAD_DIM, rope=ROPE)
    cache.append(pos, k, v)
    alibi = posenc.Alibi(HEADS)
    for options in (
        dict(causal=True, window=3),
        dict(causal=True, scale=0.5),
        dict(causal=False),
    ):
        expect = posenc.attention(q, k, v, pos, rope=ROPE, **options)
        got = cache.attend(q, pos, **options)
        np.testing.assert_allclose(got, expect, rtol=0, atol=1e-6)
    # ALiBi without rotation: a cache without rope.
    plain = posenc.KVCache(n, KV_HEADS, HEAD_DIM)
    plain.append(pos, k, v)
    expect = posenc.attention(q, k, v, pos, causal=True, alibi=alibi)
    np.testing.assert_allclose(
        plain.attend(q, pos, causal=True, alibi=alibi), expect, rtol=0, atol=1e-6
    )
    # Chunks: each query sees its own chunk of 4 positions only.
    chunked = cache.attend(q, pos, causal=True, chunk_size=4)
    for start in (0, 4, 8):
        part = slice(start, start + 4)
        expect = posenc.attention(q[part], k[part], v[part], pos[part], causal=True, rope=ROPE)
        np.testing.assert_allclose(chunked[part], expect, rtol=0, atol=1e-6)


def test_out_and_value_dim():
    q, k, v = qkv(5, value_dim=6)
    cache = posenc.KVCache(8, KV_HEADS, HEAD_DIM, value_dim=6, rope=ROPE)
    cache.append(np.arange(5), k, v)
    out = np.full((5, HEADS, 6), np.nan, np.float32)
    assert cache.attend(q, np.arange(5), causal=True, out=out) is out
    expect = posenc.attention(q, k, v, np.arange(5), causal=True, rope=ROPE)
    np.testing.assert_allclose(out, expect, rtol=0, atol=1e-6)


def test_chunked_appends_equal_one():
    n = 17
    q, k, v = qkv(n, seed=5)
    pos = np.arange(n) * 3  # any increasing positions
    one = posenc.KVCache(n, KV_HEADS, HEAD_DIM, rope=ROPE)
    one.append(pos, k, v)
    chunked = posenc.KVCache(n, KV_HEADS, HEAD_DIM, rope=ROPE)
    for a, b in ((0, 1), (1, 6), (6, 13), (13, 13), (13, n)):
        chunked.append(pos[a:b], k[a:b], v[a:b])
    for name in ("keys", "values", "positions"):
        np.testing.assert_array_equal(getattr(chunked, name), getattr(one, name))
    np.testing.assert_array_equal(
        chunked.attend(q, pos, causal=True), one.attend(q, pos, causal=True)
    )


def test_context_shift_equals_attention_from_scratch_at_the_shifted_positions():
    n, n_keep, n_discard = 20, 4, 7
    q, k, v = qkv(n + 1, seed=9)
    cache = posenc.KVCache(n + 1, KV_HEADS, HEAD_DIM, rope=ROPE)
    cache.append(np.arange(n), k[:n], v[:n])
    cache.context_shift(n_keep, n_discard)
    kept = np.r_[0:n_keep, n_keep + n_discard : n]
    new_pos = np.arange(len(kept))
    assert cache.size == len(kept)
    np.testing.assert_array_equal(cache.positions, new_pos)
    np.testing.assert_array_equal(cache.values, v[kept])
    # The moved keys equal the original keys rotated at their new positions.
    np.testing.assert_allclose(
        cache.keys, posenc.apply_rope(ROPE, new_pos, k[kept]), rtol=0, atol=1e-5
    )
    # The next token continues at the shifted end.
    t = len(kept)
    cache.append([t], k[n : n + 1], v[n : n + 1])
    keys, values = np.concatenate([k[kept], k[n:]]), np.concatenate([v[kept], v[n:]])
    expect = posenc.attention(q[n:], keys, values, [t], np.arange(t + 1), causal=True, rope=ROPE)
    np.testing.assert_allclose(cache.attend(q[n:], [t], causal=True), expect, rtol=0, atol=1e-5)


def test_remove_and_shift_positions_are_the_two_halves():
    q, k, v = qkv(10, seed=2)
    a = posenc.KVCache(10, KV_HEADS, HEAD_DIM, rope=ROPE)
    b = posenc.KVCache(10, KV_HEADS, HEAD_DIM, rope=ROPE)
    for cache in (a, b):
        cache.append(np.arange(10), k, v)
    a.context_shift(2, 3)
    b.remove(2, 5)
    np.testing.assert_array_equal(b.positions, [0, 1, 5, 6, 7, 8, 9])
    b.shift_positions(2, 7, -3)
    for name in ("keys", "values", "positions"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))


@pytest.mark.parametrize("mode", ["text", "cache"])
def test_sink_roll(mode):
    sinks, window, n = 2, 4, 9
    q, k, v = qkv(n, seed=4)
    cache = posenc.KVCache(sinks + window, KV_HEADS, HEAD_DIM, rope=ROPE)
    stayed = []  # the original token index of each slot
    for t in range(n):
        dropped = cache.roll_sink_window(sinks, window, mode=mode)
        # As few as needed: one once the sinks and window are full.
        assert dropped == (1 if t >= sinks + window else 0)
        if dropped:
            del stayed[sinks]
        pos = t if mode == "text" else cache.size
        cache.append([pos], k[t : t + 1], v[t : t + 1])
        stayed.append(t)
    assert stayed == [0, 1, 5, 6, 7, 8]
    np.testing.assert_array_equal(cache.values, v[stayed])
    if mode == "text":
        expect_pos = np.array(stayed)
        np.testing.assert_array_equal(cache.keys, posenc.apply_rope(ROPE, expect_pos, k[stayed]))
    else:
        expect_pos = np.arange(sinks + window)
        np.testing.assert_allclose(
            cache.keys, posenc.apply_rope(ROPE, expect_pos, k[stayed]), rtol=0, atol=1e-5
        )
    np.testing.assert_array_equal(cache.positions, expect_pos)
    last = expect_pos[-1:]
    expect = posenc.attention(
        q[-1:], k[stayed], v[stayed], last, expect_pos, causal=True, rope=ROPE
    )
    np.testing.assert_allclose(cache.attend(q[-1:], last, causal=True), expect, rtol=0, atol=1e-5)


def test_roll_with_room_drops_nothing():
    cache = posenc.KVCache(8, KV_HEADS, HEAD_DIM, rope=ROPE)
    _, k, v = qkv(3)
    cache.append(np.arange(3), k, v)
    assert cache.roll_sink_window(1, 4, incoming=2, mode="cache") == 0
    # 3 cached + 3 incoming is one past 1 + 4: token 1 goes, token 2 moves down.
    assert cache.roll_sink_window(1, 4, incoming=3, mode="cache") == 1
    np.testing.assert_array_equal(cache.positions, [0, 1])
    np.testing.assert_array_equal(cache.values, v[[0, 2]])


def test_bfloat16_decode_equals_bfloat16_attention():
    n, prefill = 12, 5
    q, k, v = (bf16_bits(x) for x in qkv(n, seed=6))
    pos = np.arange(n)
    expect = posenc.attention(q, k, v, pos, causal=True, rope=ROPE, bfloat16=True)
    cache = posenc.KVCache(n, KV_HEADS, HEAD_DIM, rope=ROPE, bfloat16=True)
    assert cache.bfloat16
    cache.append(pos[:prefill], k[:prefill], v[:prefill])
    got = [cache.attend(q[:prefill], pos[:prefill], causal=True)]
    for t in range(prefill, n):
        cache.append(pos[t : t + 1], k[t : t + 1], v[t : t + 1])
        got.append(cache.attend(q[t : t + 1], pos[t : t + 1], causal=True))
    np.testing.assert_allclose(np.concatenate(got), expect, rtol=0, atol=1e-6)
    assert cache.keys.dtype == np.int16 and cache.values.dtype == np.int16
    np.testing.assert_array_equal(cache.keys, posenc.apply_rope(ROPE, pos, k, bfloat16=True))
    # A float32 array is refused, never converted.
    with pytest.raises(
        posenc.Error,
        match=re.escape(
            "[kv_cache] k must have dtype int16 or uint16 (bfloat16 bits), got float32"
        ),
    ):
        cache.append([0], np.zeros((1, KV_HEADS, HEAD_DIM), np.float32), v[:1])


def test_bfloat16_context_shift_within_bfloat16_rounding():
    n = 10
    _, k, v = qkv(n, seed=8)
    kb, vb = bf16_bits(k), bf16_bits(v)
    cache = posenc.KVCache(n, KV_HEADS, HEAD_DIM, rope=ROPE, bfloat16=True)
    cache.append(np.arange(n), kb, vb)
    cache.context_shift(1, 3)
    kept = np.r_[0:1, 4:n]
    as_float = lambda bits: torch.from_numpy(np.array(bits)).view(torch.bfloat16).float().numpy()
    k_kept = torch.from_numpy(kb[kept]).view(torch.bfloat16).float().numpy()
    expect = posenc.apply_rope(ROPE, np.arange(len(kept)), k_kept)
    # Two roundings to bfloat16 (append, shift): within 2 * 2^-8 of each key's size.
    np.testing.assert_allclose(as_float(cache.keys), expect, rtol=0, atol=2 * 2**-8 * 4)
    np.testing.assert_array_equal(cache.values, vb[kept])


def mrope_cache():
    mrope = posenc.MRope.sections(ROPE, [2, 3, 3])
    return mrope, posenc.KVCache(16, KV_HEADS, HEAD_DIM, mrope=mrope)


def test_mrope_cache_with_streams():
    # Three text tokens, a 2 x 2 image (time 3, rows 3-4, columns 3-4), text again.
    streams = np.array(
        [
            [0, 1, 2, 3, 3, 3, 3, 5, 6],
            [0, 1, 2, 3, 3, 4, 4, 5, 6],
            [0, 1, 2, 3, 4, 3, 4, 5, 6],
        ]
    )
    n = streams.shape[1]
    order = np.arange(n)
    q, k, v = qkv(n, seed=11)
    mrope, cache = mrope_cache()
    cache.append(order[:7], k[:7], v[:7], streams=streams[:, :7])
    cache.append(order[7:], k[7:], v[7:], streams=streams[:, 7:])
    np.testing.assert_array_equal(cache.keys, posenc.apply_mrope(mrope, streams, k))
    q_rot = posenc.apply_mrope(mrope, streams, q)
    k_rot = posenc.apply_mrope(mrope, streams, k)
    expect = posenc.attention(q_rot, k_rot, v, order, causal=True)
    got = cache.attend(q, order, causal=True, query_streams=streams)
    np.testing.assert_allclose(got, expect, rtol=0, atol=1e-6)
    # A shift moves every stream: the moved keys equal rotation at streams - 2.
    cache.context_shift(3, 2)
    kept = np.r_[0:3, 5:n]
    moved = streams[:, kept].copy()
    moved[:, 3:] -= 2
    np.testing.assert_array_equal(cache.positions, np.r_[0:3, 3 : n - 2])
    np.testing.assert_allclose(
        cache.keys, posenc.apply_mrope(mrope, moved, k[kept]), rtol=0, atol=1e-5
    )


def test_mrope_cache_needs_streams_and_a_plain_cache_refuses_them():
    _, cache = mrope_cache()
    _, k, v = qkv(2)
    with pytest.raises(
        posenc.Error,
        match=re.escape(
            "[kv_cache] streams must be given for a cache with mrope "
            "(Append(positions, streams, k, v)), got none"
        ),
    ):
        cache.append([0, 1], k, v)
    with pytest.raises(
        posenc.Error,
        match=re.escape(
            "[kv_cache] streams must be None for a cache without mrope "
            "(positions alone rotate its keys), got an array"
        ),
    ):
        posenc.KVCache(4, KV_HEADS, HEAD_DIM, rope=ROPE).append([0, 1], k, v, streams=[[0, 1]] * 3)
    assert cache.size == 0


def filled_cache():
    _, k, v = qkv(6)
    cache = posenc.KVCache(8, KV_HEADS, HEAD_DIM, rope=ROPE)
    cache.append(np.arange(6), k, v)
    return cache


ZEROS_K = np.zeros((3, KV_HEADS, HEAD_DIM), np.float32)
ERRORS = {
    "past capacity": (
        lambda c: c.append(np.arange(3), ZEROS_K, ZEROS_K),
        "[kv_cache] k.tokens must fit the free slots (capacity 8 - size 6 = 2), got 3",
    ),
    "n_keep + n_discard > size": (
        lambda c: c.context_shift(4, 3),
        "[kv_cache] n_keep + n_discard must be <= size (6), got 7",
    ),
    "n_discard 0": (
        lambda c: c.context_shift(1, 0),
        "[kv_cache] n_discard must be >= 1, got 0",
    ),
    "window 0": (
        lambda c: c.roll_sink_window(2, 0),
        "[sink_window] window must be >= 1, got 0",
    ),
    "sinks + window > capacity": (
        lambda c: c.roll_sink_window(4, 5),
        "[sink_window] sinks + window must be <= capacity (8), got 9",
    ),
    "unknown mode": (
        lambda c: c.roll_sink_window(2, 4, mode="slots"),
        "[sink_window] mode must be 'text' or 'cache', got 'slots'",
    ),
    "k with a batch dim": (
        lambda c: c.append([6], ZEROS_K[None, :1], ZEROS_K[None, :1]),
        "[kv_cache] k.shape must be [tokens, heads, dim] (one sequence per cache, "
        "no batch dims), got (1, 1, 2, 16)",
    ),
    "wrong kv heads": (
        lambda c: c.append([6], np.zeros((1, 3, HEAD_DIM), np.float32), ZEROS_K[:1]),
        "[kv_cache] k.num_heads must equal kv_heads (2), got 3",
    ),
    "wrong head_dim": (
        lambda c: c.append([6], ZEROS_K[:1, :, :8], ZEROS_K[:1]),
        "[kv_cache] k.head_dim must equal head_dim (16), got 8",
    ),
    "v tokens differ": (
        lambda c: c.append([6], ZEROS_K[:1], ZEROS_K[:2]),
        "[kv_cache] v.tokens must equal k.tokens (1), got 2",
    ),
    "positions too few": (
        lambda c: c.append([6], ZEROS_K[:2], ZEROS_K[:2]),
        "[kv_cache] positions.size() must equal the number of tokens (2), got 1",
    ),
    "negative position": (
        lambda c: c.append([-1], ZEROS_K[:1], ZEROS_K[:1]),
        "[kv_cache] positions[0] must be >= 0, got -1",
    ),
    "float64 k": (
        lambda c: c.append([6], ZEROS_K[:1].astype(np.float64), ZEROS_K[:1]),
        "[kv_cache] k must have dtype float32, got float64",
    ),
    "q head_dim": (
        lambda c: c.attend(np.zeros((1, HEADS, 8), np.float32), [6]),
        "[kv_cache] q.head_dim must equal head_dim (16), got 8",
    ),
    "float window": (
        lambda c: c.attend(np.zeros((1, HEADS, HEAD_DIM), np.float32), [6], window=1.5),
        "[kv_cache] window must be an int (0: no window), got float",
    ),
    "shift below 0": (
        lambda c: c.shift_positions(0, 2, -1),
        "[kv_cache] positions[0] + delta must be >= 0, got -1",
    ),
    "remove past size": (
        lambda c: c.remove(2, 7),
        "[kv_cache] end must be in [begin = 2, size = 6], got 7",
    ),
}


@pytest.mark.parametrize("call, message", ERRORS.values(), ids=ERRORS.keys())
def test_errors_leave_the_cache_untouched(call, message):
    cache = filled_cache()
    before = {n: np.array(getattr(cache, n)) for n in ("keys", "values", "positions")}
    with pytest.raises(posenc.Error, match="^" + re.escape(message) + "$"):
        call(cache)
    assert cache.size == 6
    for name, old in before.items():
        np.testing.assert_array_equal(getattr(cache, name), old)


def test_constructor_errors():
    with pytest.raises(posenc.Error, match=re.escape("[kv_cache] capacity must be >= 1, got 0")):
        posenc.KVCache(0, 1, 8)
    with pytest.raises(
        posenc.Error,
        match=re.escape(
            "[kv_cache] rope must be None or a posenc.Rope (of a RotaryEmbedding: "
            "its .rope), got RotaryEmbedding"
        ),
    ):
        posenc.KVCache(4, 1, 8, rope=pt.RotaryEmbedding(8, qkv_format="bshd"))
    with pytest.raises(
        posenc.Error, match=re.escape("[kv_cache] kv_heads must be an int, got str")
    ):
        posenc.KVCache(4, "2", 8)


def test_views_are_read_only_and_keep_the_cache_alive():
    cache = filled_cache()
    keys, positions = cache.keys, cache.positions
    expect = np.array(keys)
    assert not keys.flags.writeable and not positions.flags.writeable
    del cache
    gc.collect()
    np.testing.assert_array_equal(keys, expect)
    np.testing.assert_array_equal(positions, np.arange(6))


# ------------------------------------------------------------------- torch

CONFIG = {
    "model_type": "llama",
    "hidden_size": HEADS * HEAD_DIM,
    "num_attention_heads": HEADS,
    "num_key_value_heads": KV_HEADS,
    "num_hidden_layers": 2,
    "rope_theta": 10000.0,
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_torch_decode_loop_equals_attention(dtype):
    n, prefill = 14, 6
    q, k, v = (torch.from_numpy(x).to(dtype) for x in qkv(n, seed=12))
    cache = pt.KVCache.from_hf_config(CONFIG, capacity=32, layer=0, dtype=dtype)
    assert (cache.kv_heads, cache.head_dim) == (KV_HEADS, HEAD_DIM)
    assert cache.rope.head_dim == HEAD_DIM and cache.mrope is None
    with torch.no_grad():
        expect = pt.attention(
            q,
            k,
            v,
            torch.arange(n),
            causal=True,
            rope=cache.rope,
            out_dtype=torch.float32,
            qkv_format="bshd",
        )
        cache.append(k[:prefill], v[:prefill])  # positions 0 .. prefill - 1
        got = [cache.attend(q[:prefill], out_dtype=torch.float32)]  # causal
        for t in range(prefill, n):
            cache.append(k[t : t + 1], v[t : t + 1])  # continues at t
            got.append(cache.attend(q[t : t + 1], out_dtype=torch.float32))
        assert cache.attend(q[-1:]).dtype == dtype  # the cache's dtype by default
    torch.testing.assert_close(torch.cat(got), expect, rtol=0, atol=1e-6)
    assert torch.equal(cache.positions, torch.arange(n))
    assert cache.keys.dtype == dtype and cache.keys.shape == (n, KV_HEADS, HEAD_DIM)
    assert torch.equal(cache.values, v)


def test_torch_hugging_face_layout_and_explicit_positions():
    q, k, v = (torch.from_numpy(x) for x in qkv(5, seed=13))
    cache = pt.KVCache(8, KV_HEADS, HEAD_DIM, rope=ROPE)
    # Hugging Face's key_states [1, kv_heads, seq, head_dim], viewed without a copy.
    hf_k, hf_v = k.transpose(0, 1)[None].contiguous(), v.transpose(0, 1)[None].contiguous()
    with torch.no_grad():
        cache.append(
            hf_k[0].transpose(0, 1), hf_v[0].transpose(0, 1), positions=[10, 11, 12, 13, 14]
        )
        out = cache.attend(q[-1:])
    assert torch.equal(cache.positions, torch.arange(10, 15))
    expect = pt.attention(
        q[-1:], k, v, [14], torch.arange(10, 15), causal=True, rope=ROPE, qkv_format="bshd"
    )
    torch.testing.assert_close(out, expect, rtol=0, atol=1e-6)


def test_torch_context_shift_and_sinks():
    q, k, v = (torch.from_numpy(x) for x in qkv(8, seed=14))
    cache = pt.KVCache(6, KV_HEADS, HEAD_DIM, rope=ROPE)
    with torch.no_grad():
        for t in range(8):
            cache.roll_sink_window(1, 5, mode="cache")
            cache.append(k[t : t + 1], v[t : t + 1])
        assert torch.equal(cache.positions, torch.arange(6))
        cache.context_shift(1, 2)
        assert torch.equal(cache.positions, torch.arange(4))
        assert torch.equal(cache.values, v[[0, 5, 6, 7]])
        out = cache.attend(q[-1:])
    kept = [0, 5, 6, 7]
    expect = pt.attention(
        q[-1:], k[kept], v[kept], [3], torch.arange(4), causal=True, rope=ROPE, qkv_format="bshd"
    )
    torch.testing.assert_close(out, expect, rtol=0, atol=1e-5)


# rope_delta as an int, or as get_rope_index gives it: rope_deltas [batch, 1],
# of which a sequence's row (or the whole of a batch of one) is set.
@pytest.mark.parametrize(
    "delta",
    [3, torch.tensor([[3]]), torch.tensor([3]), np.array([3]), np.int64(3)],
    ids=["int", "rope_deltas", "rope_deltas[b]", "numpy", "numpy scalar"],
)
def test_torch_mrope_cache_defaults_streams_to_positions_plus_rope_delta(delta):
    mrope = posenc.MRope.sections(ROPE, [2, 3, 3])
    q, k, v = (torch.from_numpy(x) for x in qkv(4, seed=15))
    cache = pt.KVCache(8, KV_HEADS, HEAD_DIM, mrope=mrope)
    cache.rope_delta = delta
    assert cache.rope_delta == 3 and type(cache.rope_delta) is int
    with torch.no_grad():
        cache.append(k, v)
        out = cache.attend(q)
    streams = np.broadcast_to(np.arange(4) + 3, (3, 4))
    q_rot = posenc.apply_mrope(mrope, streams, q.numpy())
    k_rot = posenc.apply_mrope(mrope, streams, k.numpy())
    expect = posenc.attention(q_rot, k_rot, v.numpy(), np.arange(4), causal=True)
    np.testing.assert_allclose(out.numpy(), expect, rtol=0, atol=1e-6)


def test_torch_errors():
    _, k, v = (torch.from_numpy(x) for x in qkv(2))
    cache = pt.KVCache(4, KV_HEADS, HEAD_DIM, rope=ROPE)
    with pytest.raises(
        posenc.Error,
        match=re.escape(
            "[kv_cache] k must not require grad while autograd records (the cache is "
            "for inference, there is no backward; use torch.no_grad() or .detach()), "
            "got a tensor that requires grad"
        ),
    ):
        cache.append(k.clone().requires_grad_(), v)
    with pytest.raises(
        posenc.Error,
        match=re.escape("[kv_cache] k.dtype must equal the cache's dtype (float32), got bfloat16"),
    ):
        cache.append(k.bfloat16(), v.bfloat16())
    with pytest.raises(
        posenc.Error,
        match=re.escape(
            "[kv_cache] positions must be given when q has more tokens than the cache "
            "(size 0), got None for 1 tokens"
        ),
    ):
        cache.attend(torch.zeros(1, HEADS, HEAD_DIM))
    with pytest.raises(
        posenc.Error,
        match=re.escape("[kv_cache] dtype must be float32 or bfloat16, got float16"),
    ):
        pt.KVCache(4, KV_HEADS, HEAD_DIM, dtype=torch.float16)
    assert cache.size == 0


def test_torch_from_hf_config_nope_layer_does_not_rotate():
    config = dict(CONFIG, model_type="smollm3", no_rope_layers=[1, 0], num_hidden_layers=2)
    model = posenc.model_positions(config)
    nope = [layer.index for layer in model.layers if layer.scheme == "nope"]
    assert nope
    cache = pt.KVCache.from_hf_config(config, 4, layer=nope[0])
    assert cache.rope is None and cache.mrope is None and cache.head_dim == HEAD_DIM
