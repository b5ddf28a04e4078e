"""rope_from_hf_config against the frequencies Hugging Face transformers
computed (tests/golden/hf_rope, produced by the reference code, not by
posenc)."""

import json
import pathlib

import numpy as np
import pytest
import torch

import posenc
import posenc.torch as pt

GOLDEN = pathlib.Path(__file__).resolve().parents[2] / "tests" / "golden" / "hf_rope"
# The golden config_input is what Hugging Face was given (plain attribute
# objects); the model_type is the model each file names.
MODEL_TYPES = {
    "llama2_7b": "llama",
    "gpt_neox_20b": "gpt_neox",
    "llama2_7b_linear4": "llama",
    "llama3_1_8b": "llama",
    "nomic_embed_v1_5_dynamic2": "nomic_bert",
    "nomic_embed_v1_5_dynamic2__seq4096": "nomic_bert",
    "nomic_embed_v1_5_dynamic2__seq8192": "nomic_bert",
    "qwen2_5_7b_instruct_yarn4": "qwen2",
    "deepseek_v3_yarn": "deepseek_v3",
    "phi3_128k_longrope__seq4096": "phi3",
    "phi3_128k_longrope__seq4097": "phi3",
}


@pytest.mark.parametrize("name", sorted(MODEL_TYPES))
def test_frequencies_match_hugging_face(name, tmp_path):
    golden = json.loads((GOLDEN / f"{name}.json").read_text())
    config = dict(golden["config_input"], model_type=MODEL_TYPES[name])
    rope = posenc.rope_from_hf_config(config, seq_len=golden["seq_len"])
    assert (rope.head_dim, rope.rotary_dim) == (
        golden["head_dim"],
        golden["rotary_dim"],
    )
    # REFERENCE precision: the float32 values the reference stores, within one
    # float32 ulp.
    expected = np.array(golden["inv_freq_hf_f32"], dtype=np.float32)
    ulps = np.abs(np.array(rope.inv_freq) - expected) / np.spacing(expected)
    assert np.all(ulps <= 1), ulps
    assert rope.attention_factor == pytest.approx(golden["attention_factor"], rel=1e-12)
    config_file = tmp_path / "config.json"
    config_file.write_text(json.dumps(config))
    from_file = posenc.rope_from_hf_config(config_file, seq_len=golden["seq_len"])
    assert from_file.inv_freq == rope.inv_freq


def test_rotary_embedding_from_a_config():
    config = {
        "model_type": "llama",
        "hidden_size": 64,
        "num_attention_heads": 4,
        "max_position_embeddings": 128,
        "rope_theta": 100.0,
    }
    module = pt.RotaryEmbedding.from_hf_config(config, qkv_format="bshd")
    torch.testing.assert_close(
        module.inv_freq,
        100.0 ** (-torch.arange(0, 16, 2) / 16.0).double(),
        rtol=2.0**-23,
        atol=0,
    )
    q, k = torch.randn(1, 3, 4, 16), torch.randn(1, 3, 4, 16)
    q_rot, _ = module(q, k, torch.arange(3))
    torch.testing.assert_close(q_rot[:, 0], q[:, 0])  # position 0 is the identity


def test_configs_that_are_not_rope_or_are_malformed():
    gpt2 = {
        "model_type": "gpt2",
        "n_positions": 1024,
        "n_embd": 768,
        "n_head": 12,
    }
    with pytest.raises(
        ValueError,
        match=r"\[hf_config\] config must describe a RoPE model, " r"got gpt2",
    ):
        posenc.rope_from_hf_config(gpt2)
    bad = {
        "model_type": "llama",
        "hidden_size": 64,
        "num_attention_heads": 4,
        "max_position_embeddings": 128,
        "rope_scaling": {"rope_type": "linear", "factor": "4"},
    }
    with pytest.raises(ValueError, match=r"\[hf_config\] rope_scaling.factor"):
        posenc.rope_from_hf_config(bad)
    with pytest.raises(
        ValueError,
        match=r"\[hf_config\] config must be a dict, a transformers PretrainedConfig or a config",
    ):
        posenc.rope_from_hf_config(42)


def test_per_layer_configs_default_to_the_first_rope_setting():
    gemma3 = {
        "model_type": "gemma3_text",
        "hidden_size": 64,
        "num_attention_heads": 4,
        "head_dim": 16,
        "max_position_embeddings": 1024,
        "rope_theta": 1000000.0,
        "rope_local_base_freq": 10000.0,
    }
    for layer_type, base in (
        ("sliding_attention", 10000.0),
        ("full_attention", 1000000.0),
        (None, 1000000.0),  # the first RoPE setting: the full layers' rope_theta
    ):
        rope = posenc.rope_from_hf_config(gemma3, layer_type=layer_type)
        exact = base ** (-np.arange(0, 16, 2) / 16.0)
        np.testing.assert_allclose(rope.inv_freq, exact, rtol=2.0**-23)
    # The CLI without --layer takes the same (docs/MODELS.md, "Choosing a layer").
    with pytest.raises(
        ValueError,
        match=r"\[hf_config\] layer must be left out when layer_type is given",
    ):
        posenc.rope_from_hf_config(gemma3, layer=0, layer_type="full_attention")


# ---------------------------------------------------------------------------
# posenc.model_positions: the per-layer description, against the reference's
# per-layer facts (tests/golden/model_positions, from the Hugging Face code).

ROOT = pathlib.Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "tests" / "configs"
MODEL_GOLDEN = ROOT / "tests" / "golden" / "model_positions"
LAYER_KEYS = {
    "index",
    "scheme",
    "layer_type",
    "rope_theta",
    "rope_type",
    "sliding_window",
    "attention_chunk_size",
    "query_scale",
    "causal",
    "symmetric_window",
}
REAL = [
    "llama4-scout-17b-16e",
    "smollm3-3b-base",
    "gemma3_text-embeddinggemma-300m",
    "chatglm-chatglm2-6b",
    "chatglm-glm-4-9b-chat",
    "cohere-aya-23-8b",
]


def _model_golden(name):
    return json.loads((MODEL_GOLDEN / f"{name}.json").read_text())


def _q_input(head_dim):
    """The reference's input: q[h][d] = 0.01 (d + 1) - 0.3 h in float32,
    heads 0 and 1, one token: [1, 2, head_dim]."""
    d = np.arange(head_dim, dtype=np.float32)
    h = np.arange(2, dtype=np.float32)[:, None]
    return (np.float32(0.01) * (d + np.float32(1)) - np.float32(0.3) * h).astype(np.float32)[None]


@pytest.mark.parametrize("name", REAL)
def test_model_positions_match_the_reference_layer_by_layer(name):
    golden = _model_golden(name)
    model = posenc.model_positions(CONFIGS / "real" / f"{name}.json")
    assert model.scheme == "rope"  # NoPE layers or not, these rotate
    assert len(model.layers) == golden["num_hidden_layers"]
    bidirectional = golden.get("bidirectional", False)
    for ours, want in zip(model.layers, golden["layers"]):
        assert set(ours.to_dict()) == LAYER_KEYS
        assert ours.index == want["layer"]
        assert ours.scheme == ("rope" if want["use_rope"] else "nope")
        assert ours.layer_type == want["layer_type"]
        assert ours.sliding_window == want["sliding_window"]
        assert ours.attention_chunk_size == want.get("attention_chunk_size")
        assert ours.rope_theta == want["rope_theta"]
        assert (ours.rope_type is None) == (want["rope_theta"] is None)
        assert ours.causal == (not bidirectional)
        assert ours.symmetric_window == (bidirectional and want["sliding_window"] is not None)
    assert model.head_dim == golden["layout"]["head_dim"]
    assert model.rotary_dim == golden["layout"]["rotary_dim"]
    assert model.rotary_offset == 0
    assert model.mrope_section is None
    interleaved = golden["layout"]["kind"].startswith("interleaved")
    assert model.layout == ("interleaved" if interleaved else "half_split")


def test_llama4_nope_layers_scale_queries_as_the_reference():
    golden = _model_golden("llama4-scout-17b-16e")
    q = golden["query_scale"]
    model = posenc.model_positions(CONFIGS / "real" / "llama4-scout-17b-16e.json")
    assert model.config_prefix == "text_config."
    for layer, want in zip(model.layers, golden["layers"]):
        if not want["attn_temperature_tuning"]:
            assert layer.query_scale is None
            continue
        scale = layer.query_scale
        assert scale == {
            "rule": "llama4_attn_temperature",
            "beta": q["attn_scale"],
            "floor_scale": q["floor_scale"],
            "offset": 1,
        }
        p = np.array(q["temperature_positions"])
        ours = 1 + scale["beta"] * np.log1p(np.floor((p + scale["offset"]) / scale["floor_scale"]))
        np.testing.assert_allclose(ours, q["temperature_scales"], atol=1e-6)
    text = repr(model)
    assert text.startswith("ModelPositions(scheme='rope', model_type=")
    assert "layers 3, 7, ..., 47 (12): NoPE" in text
    assert "layers 0-2, 4-6, ..., 44-46 (36): RoPE llama3 theta 5e5" in text


def test_model_positions_takes_a_path_a_json_string_or_a_dict():
    path = CONFIGS / "real" / "smollm3-3b-base.json"
    text = path.read_text()
    from_path = posenc.model_positions(path).to_dict()
    assert posenc.model_positions(str(path)).to_dict() == from_path
    assert posenc.model_positions(text).to_dict() == from_path
    assert posenc.model_positions(json.loads(text)).to_dict() == from_path
    with pytest.raises(
        ValueError,
        match=r"\[hf_config\] config must be a dict, a transformers PretrainedConfig or a config",
    ):
        posenc.model_positions(42)
    with pytest.raises(ValueError, match=r"\[hf_config\] config must be valid JSON"):
        posenc.model_positions("{not json")


def test_rope_from_a_layer_index():
    golden = _model_golden("llama4-scout-17b-16e")
    config = CONFIGS / "real" / "llama4-scout-17b-16e.json"
    want = np.array(golden["rope"]["chunked_attention"]["inv_freq"])
    for layer in (0, 46, "chunked_attention"):
        rope = posenc.rope_from_hf_config(config, layer=layer)
        np.testing.assert_allclose(rope.inv_freq, want, rtol=2.0**-23, atol=0)
    with pytest.raises(
        ValueError,
        match=r"\[hf_config\] layer must pick a RoPE layer \(layer 3 is nope, "
        r"full_attention: it does not rotate q and k\), got 3",
    ):
        posenc.rope_from_hf_config(config, layer=3)
    with pytest.raises(ValueError, match=r"layer must be a layer index in \[0, 48\)"):
        posenc.rope_from_hf_config(config, layer=48)
    with pytest.raises(ValueError, match=r"layer must be a layer index \(int\)"):
        posenc.rope_from_hf_config(config, layer=1.0)
    gemma = CONFIGS / "real" / "gemma3_text-embeddinggemma-300m.json"
    gemma_golden = _model_golden("gemma3_text-embeddinggemma-300m")
    for layer, kind in ((5, "full_attention"), (4, "sliding_attention")):
        rope = posenc.rope_from_hf_config(gemma, layer=layer)
        np.testing.assert_allclose(
            rope.inv_freq,
            gemma_golden["rope"][kind]["inv_freq"],
            rtol=2.0**-23,
            atol=0,
        )


@pytest.mark.parametrize(
    "name",
    ["chatglm-chatglm2-6b", "cohere-aya-23-8b", "llama4-scout-17b-16e", "deepseek-v3"],
)
def test_rope_rotates_like_the_reference(name):
    golden = _model_golden(name)
    config = (
        CONFIGS / f"{name}.json" if name == "deepseek-v3" else CONFIGS / "real" / f"{name}.json"
    )
    rope = posenc.rope_from_hf_config(config)
    layout = golden["layout"]
    head_dim = layout["head_dim"]
    assert (rope.head_dim, rope.rotary_dim) == (head_dim, layout["rotary_dim"])
    order = np.arange(head_dim)
    if layout["kind"] == "nope_then_rope_interleave_to_half":
        # DeepSeek: 128 features pass, the last 64 rotate; the reference
        # de-interleaves them (pair i to 128 + i and 160 + i), posenc rotates
        # pairs (2i, 2i + 1) in place.
        assert rope.rotary_offset == golden["heads"]["qk_nope_head_dim"]
        d = np.arange(128, head_dim)
        order[128:] = 128 + (d - 128) // 2 + ((d - 128) % 2) * 32
    for position in layout["positions"]:
        out = posenc.apply_rope(rope, np.array([position]), _q_input(head_dim))
        want = np.array(layout["rotated_q"][str(position)])[:, order]
        # The reference's angles are float32 products: at 1000 they are off
        # by up to 1000 * 2^-24 rad; posenc's are exact.
        np.testing.assert_allclose(out[0], want, atol=2e-6 if position < 100 else 1e-4, rtol=0)


def test_deepseek_head_split():
    golden = _model_golden("deepseek-v3")
    model = posenc.model_positions(CONFIGS / "deepseek-v3.json")
    assert model.head_dim == golden["heads"]["qk_head_dim"]
    assert model.rotary_dim == golden["heads"]["qk_rope_head_dim"]
    assert model.rotary_offset == golden["heads"]["qk_nope_head_dim"]
    assert model.layers == []  # the subset gives no layer count
    assert model.softmax_scale == pytest.approx(golden["query_scale"]["scaling"], rel=1e-12)
    with pytest.raises(ValueError, match=r"gives no layer count"):
        posenc.rope_from_hf_config(CONFIGS / "deepseek-v3.json", layer=0)


def test_llama_excerpt_takes_llama_configs_layer_count():
    # tests/configs/llama3.1-8b.json leaves out num_hidden_layers: LlamaConfig's
    # default (32 in transformers 5.23.0) gives the layers an index.
    model = posenc.model_positions(CONFIGS / "llama3.1-8b.json")
    assert len(model.layers) == 32
    assert "num_hidden_layers absent: 32 (LlamaConfig's default)" in model.notes
    golden = json.loads((GOLDEN / "llama3_1_8b.json").read_text())
    for layer in (0, 31, None):
        rope = posenc.rope_from_hf_config(CONFIGS / "llama3.1-8b.json", layer=layer)
        # Reference precision: bit-equal to Hugging Face's float32 frequencies.
        np.testing.assert_array_equal(rope.inv_freq, golden["inv_freq_hf_f32"])
    with pytest.raises(ValueError, match=r"layer must be a layer index in \[0, 32\)"):
        posenc.rope_from_hf_config(CONFIGS / "llama3.1-8b.json", layer=32)


T5_SMALL = {
    "model_type": "t5",
    "d_model": 512,
    "num_heads": 8,
    "num_layers": 6,
    "num_decoder_layers": 6,
    "relative_attention_num_buckets": 32,
    "relative_attention_max_distance": 128,
}


def test_t5_model_positions():
    model = posenc.model_positions(T5_SMALL)
    assert model.scheme == "relative_bias"
    assert (model.num_buckets, model.max_distance, model.num_heads) == (
        32,
        128,
        8,
    )
    assert model.bidirectional is True
    assert (model.encoder_layers, model.decoder_layers) == (6, 6)
    assert [layer.causal for layer in model.layers] == [False] * 6 + [True] * 6
    assert {layer.scheme for layer in model.layers} == {"relative_bias"}
    with pytest.raises(ValueError, match=r"describe a RoPE model, got t5"):
        posenc.rope_from_hf_config(T5_SMALL)


def test_opt_learned_offset():
    golden = _model_golden("opt-learned-positions")
    model = posenc.model_positions(
        {
            "model_type": "opt",
            "hidden_size": 768,
            "num_attention_heads": 12,
            "num_hidden_layers": 12,
            "max_position_embeddings": 2048,
        }
    )
    assert model.scheme == "learned"
    assert model.offset == golden["offset"]
    # Position p reads row p + offset: the reference's rows for a full mask.
    assert golden["cases"][0]["embedding_rows"] == [p + model.offset for p in range(5)]
    assert {layer.scheme for layer in model.layers} == {"learned"}


T5_BUCKETS = ROOT / "tests" / "golden" / "t5_buckets"


@pytest.mark.parametrize("name", sorted(p.stem for p in T5_BUCKETS.glob("*.json")))
def test_relative_position_bucket_matches_hugging_face(name):
    golden = json.loads((T5_BUCKETS / f"{name}.json").read_text())
    relative = np.array(golden["relative_position"], dtype=np.int64)
    buckets = posenc.relative_position_bucket(
        relative,
        num_buckets=golden["num_buckets"],
        max_distance=golden["max_distance"],
        bidirectional=golden["bidirectional"],
    )
    assert buckets.dtype == np.int64 and buckets.shape == relative.shape
    np.testing.assert_array_equal(buckets, golden["bucket"])
    # Any shape: the same values as a 2-D array.
    n = relative.size // 2 * 2
    square = posenc.relative_position_bucket(
        relative[:n].reshape(2, -1),
        num_buckets=golden["num_buckets"],
        max_distance=golden["max_distance"],
        bidirectional=golden["bidirectional"],
    )
    np.testing.assert_array_equal(square.ravel(), golden["bucket"][:n])


def test_relative_position_bucket_pairs_and_errors():
    golden = _model_golden("t5-buckets-32-128")
    pairs = golden["pairs"]
    relative = np.array([p["key_pos"] - p["query_pos"] for p in pairs])
    for direction, bidirectional in (("bidirectional", True), ("causal", False)):
        np.testing.assert_array_equal(
            posenc.relative_position_bucket(relative, bidirectional=bidirectional),
            [p[direction] for p in pairs],
        )
    with pytest.raises(
        ValueError,
        match=r"\[relative_position_bucket\] relative_position must have dtype "
        r"int64, got float64",
    ):
        posenc.relative_position_bucket(np.array([0.5]))
    with pytest.raises(ValueError, match=r"be an int64 array or a sequence of ints"):
        posenc.relative_position_bucket([0.5])
    np.testing.assert_array_equal(posenc.relative_position_bucket([0, 1, -1]), [0, 17, 1])
    with pytest.raises(ValueError):
        posenc.relative_position_bucket(np.array([2**33]))
    with pytest.raises(ValueError):
        posenc.relative_position_bucket(np.array([1]), num_buckets=2)


def test_mrope_sections():
    # Qwen2-VL-7B's published rope values: 16, 24 and 24 pairs for time,
    # height and width, covering every pair of the 128-wide head.
    model = posenc.model_positions(
        {
            "model_type": "qwen2_vl",
            "hidden_size": 3584,
            "num_attention_heads": 28,
            "num_key_value_heads": 4,
            "num_hidden_layers": 28,
            "max_position_embeddings": 32768,
            "rope_theta": 1000000.0,
            "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
        }
    )
    assert model.mrope_section == [16, 24, 24]
    assert model.rotary_dim == 2 * sum(model.mrope_section)
    assert model.summary() == ["all 28 layers: RoPE theta 1e6 [full_attention]"]


# ------------------------------------------ transformers 5.23.0's rope rules
# tests/golden/hf_rope_v5/: each config of tests/configs/ and tests/configs/real/
# that transformers 5.23.0 models, rewritten in its form (rope_parameters, one
# dict per layer type for Gemma 3 and ModernBERT), with the inverse frequencies
# and attention factors its own rotary-embedding classes compute. transformers 5
# agrees with the releases posenc follows on all of them, so posenc must match
# these numbers from the v5 form and from the file as published.
GOLDEN_V5 = GOLDEN.parent / "hf_rope_v5"
V5_FILES = sorted(p.stem for p in GOLDEN_V5.glob("*.json") if p.name != "index.json")
CONFIGS = GOLDEN.parents[1] / "configs"


def v5_cases():
    for name in V5_FILES:
        golden = json.loads((GOLDEN_V5 / f"{name}.json").read_text())
        for entry in golden["layer_types"]:
            lt = entry["layer_type"]
            yield name, lt, None, entry["inv_freq_f32"], entry["attention_factor"]
            for s in entry["by_seq_len"]:
                yield (name, lt, s["seq_len"], s["inv_freq_f32"], s["attention_factor"])


V5_CASES = list(v5_cases())


def test_transformers5_sweep_covers_the_configs():
    index = json.loads((GOLDEN_V5 / "index.json").read_text())
    assert index["transformers_version"] == "5.23.0"
    assert len(V5_FILES) == 18 and len(V5_CASES) == 25
    types = {t for f in index["files"] for t in f["rope_types"]}
    assert types == {"default", "yarn", "llama3", "dynamic", "longrope"}
    per_layer = {f["file"] for f in index["files"] if f["layer_types"] != [None]}
    assert per_layer == {
        "gemma3_text-embeddinggemma-300m.json",
        "modernbert-modernbert-large-zeroshot-v2.0.json",
    }


@pytest.mark.parametrize(
    "name,layer_type,seq_len,inv_freq,attention_factor",
    V5_CASES,
    ids=[f"{c[0]}-{c[1]}-{c[2]}" for c in V5_CASES],
)
def test_frequencies_match_transformers5(name, layer_type, seq_len, inv_freq, attention_factor):
    golden = json.loads((GOLDEN_V5 / f"{name}.json").read_text())
    published = json.loads((CONFIGS / golden["config_file"]).read_text())
    expected = np.array(inv_freq, dtype=np.float32)
    for config in (golden["config_v5"], published):
        options = {}
        if layer_type is not None:
            options["layer_type"] = layer_type
        if seq_len is not None:
            options["seq_len"] = seq_len
        rope = posenc.rope_from_hf_config(config, **options)
        got = np.array(rope.inv_freq)
        assert got.shape == expected.shape
        ulps = np.abs(got - expected) / np.spacing(expected)
        assert np.all(ulps <= 1), ulps
        assert rope.attention_factor == pytest.approx(attention_factor, rel=1e-12)


# YaRN by release (docs/MODELS.md): rope_from_hf_config(yarn_rules=...) against
# transformers 4.50.3, 4.51.0 and 5.23.0's own numbers (tests/golden/yarn_releases).
YARN_RELEASES = GOLDEN.parent / "yarn_releases"
RULES_OF_RELEASE = {
    "4.50.3": "transformers4_50",
    "4.51.0": "transformers4_51",
    "5.23.0": "transformers5",
}


@pytest.mark.parametrize("name", sorted(p.stem for p in YARN_RELEASES.glob("*.json")))
def test_yarn_rules_match_each_release(name):
    golden = json.loads((YARN_RELEASES / f"{name}.json").read_text())
    rope = posenc.rope_from_hf_config(
        str(CONFIGS / golden["config_file"]),
        yarn_rules=RULES_OF_RELEASE[golden["transformers_version"]],
    )
    expected = np.array(golden["inv_freq_f32"], dtype=np.float32)
    ulps = np.abs(np.array(rope.inv_freq) - expected) / np.spacing(expected)
    assert np.all(ulps <= 1), ulps
    assert rope.attention_factor == pytest.approx(golden["attention_factor"], abs=1e-15)


def test_yarn_rules_default_to_the_release_that_wrote_the_config():
    config = json.loads((CONFIGS / "qwen2.5-7b-instruct-yarn-128k.json").read_text())
    old = json.loads(
        (YARN_RELEASES / "qwen2.5-7b-instruct-yarn-128k__transformers-4.50.3.json").read_text()
    )
    assert posenc.rope_from_hf_config(config).inv_freq == old["inv_freq_f32"]
    del config["transformers_version"]
    new = json.loads(
        (YARN_RELEASES / "qwen2.5-7b-instruct-yarn-128k__transformers-5.23.0.json").read_text()
    )
    assert posenc.rope_from_hf_config(config).inv_freq == new["inv_freq_f32"]
    with pytest.raises(posenc.Error, match="yarn_rules must be transformers5, "):
        posenc.rope_from_hf_config(config, yarn_rules="transformers4_49")
    with pytest.raises(posenc.Error, match="yarn_rules must be None or a name"):
        posenc.rope_from_hf_config(config, yarn_rules=450)


def test_torch_rotary_embedding_takes_yarn_rules():
    name = "qwen2.5-7b-instruct-yarn-128k"
    config = str(CONFIGS / f"{name}.json")
    for release, rules in (("4.50.3", None), ("5.23.0", "transformers5")):
        golden = json.loads((YARN_RELEASES / f"{name}__transformers-{release}.json").read_text())
        module = pt.RotaryEmbedding.from_hf_config(config, yarn_rules=rules, qkv_format="bshd")
        assert module.rope.inv_freq == golden["inv_freq_f32"]
