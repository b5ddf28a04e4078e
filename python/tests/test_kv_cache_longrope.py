"""posenc.KVCache with LongRoPE's two factor sets across
original_max_position_embeddings, against transformers 5.23.0's own Phi-3
(tests/golden/longrope_kv_cache/): generate() recomputes at the crossing
(crossing="recompute"), a plain forward loop keeps the cached keys' rotation
(crossing="keep_rotation")."""

import json
import pathlib

import numpy as np
import pytest

import posenc

GOLDEN = json.loads(
    (
        pathlib.Path(__file__).resolve().parents[2]
        / "tests/golden/longrope_kv_cache/phi3.5-mini-shrunk.json"
    ).read_text()
)
L0 = GOLDEN["config"]["original_max_position_embeddings"]


def cache(crossing, long_rope=True):
    config = GOLDEN["config"]
    short = posenc.rope_from_hf_config(config, seq_len=L0)
    return posenc.KVCache(
        32,
        1,
        96,
        rope=short,
        long_rope=posenc.rope_from_hf_config(config, seq_len=L0 + 1) if long_rope else None,
        long_rope_threshold=L0,
        crossing=crossing,
    )


def step(entry):
    return (
        np.array(entry["positions"], dtype=np.int64),
        *(np.array(entry[key], dtype=np.float32) for key in ("q", "k", "v", "out")),
    )


def error_of(c, positions, q, out):
    got = c.attend(q, positions, causal=True)
    return float(np.abs(got - out).max())


def test_generate_recomputes_at_the_crossing():
    c = cache("recompute")
    recomputed = 0
    for entry in GOLDEN["runs"]["generate"]:
        positions, q, k, v, out = step(entry)
        if positions[0] == 0 and len(c) > 0:
            with pytest.raises(posenc.Error, match="Clear\\(\\) and append"):
                c.append(positions[-1:], k[-1:], v[-1:])
            assert len(c) == L0
            c.clear()
            recomputed += 1
        c.append(positions, k, v)
        assert error_of(c, positions, q, out) <= 2e-6
    assert recomputed == 1


def test_a_forward_loop_keeps_the_cached_rotation_and_short_factors_alone_split():
    kept, short_only = cache("keep_rotation"), cache("keep_rotation", False)
    for entry in GOLDEN["runs"]["forward"]:
        positions, q, k, v, out = step(entry)
        kept.append(positions, k, v)
        short_only.append(positions, k, v)
        assert error_of(kept, positions, q, out) <= 2e-6
        if positions[-1] >= L0:
            assert error_of(short_only, positions, q, out) > 1e-3


def test_bad_long_rope_options_are_clear_errors():
    with pytest.raises(posenc.Error, match="crossing must be 'recompute' or"):
        cache("sometimes")
    with pytest.raises(posenc.Error, match="long_rope must be None or a posenc.Rope"):
        posenc.KVCache(4, 1, 96, rope=posenc.Rope.default(96), long_rope=3)
    with pytest.raises(posenc.Error, match="long_rope_threshold must be >= 1"):
        posenc.KVCache(4, 1, 96, rope=posenc.Rope.default(96), long_rope=posenc.Rope.default(96))
    c = cache("keep_rotation")
    assert c.crossing == "keep_rotation" and c.long_rope_threshold == L0
    with pytest.raises(posenc.Error, match="long_rope must be unset to move"):
        c.shift_positions(0, 0, 1)


def test_torch_kv_cache_from_a_phi3_config_switches_as_generate_does():
    import torch

    import posenc.torch as pt

    c = pt.KVCache.from_hf_config(GOLDEN["config"], capacity=32, layer=0)
    assert c.long_rope_threshold == L0 and c.crossing == "recompute"
    recomputed = 0
    with torch.no_grad():
        for entry in GOLDEN["runs"]["generate"]:
            positions, q, k, v, out = (torch.from_numpy(x) for x in step(entry))
            if int(positions[0]) == 0 and len(c) > 0:
                with pytest.raises(posenc.Error, match="Clear\\(\\) and append"):
                    c.append(k[-1:], v[-1:], positions[-1:])
                c.clear()
                recomputed += 1
            c.append(k, v, positions)
            got = c.attend(q, positions)
            assert float((got - out).abs().max()) <= 2e-6
    assert recomputed == 1
    fixed = pt.KVCache.from_hf_config(GOLDEN["config"], capacity=32, seq_len=L0)
    assert fixed.long_rope is None
