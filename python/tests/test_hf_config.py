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

GOLDEN = (
    pathlib.Path(__file__).resolve().parents[2]
    / "tests"
    / "golden"
    / "hf_rope"
)
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
    assert rope.attention_factor == pytest.approx(
        golden["attention_factor"], rel=1e-12
    )
    config_file = tmp_path / "config.json"
    config_file.write_text(json.dumps(config))
    from_file = posenc.rope_from_hf_config(
        config_file, seq_len=golden["seq_len"]
    )
    assert from_file.inv_freq == rope.inv_freq


def test_rotary_embedding_from_a_config():
    config = {
        "model_type": "llama",
        "hidden_size": 64,
        "num_attention_heads": 4,
        "max_position_embeddings": 128,
        "rope_theta": 100.0,
    }
    module = pt.RotaryEmbedding.from_hf_config(config)
    torch.testing.assert_close(
        module.inv_freq,
        100.0 ** (-torch.arange(0, 16, 2) / 16.0).double(),
        rtol=2.0**-23,
        atol=0,
    )
    q, k = torch.randn(1, 3, 4, 16), torch.randn(1, 3, 4, 16)
    q_rot, _ = module(q, k)
    torch.testing.assert_close(
        q_rot[:, 0], q[:, 0]
    )  # position 0 is the identity


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
        match=r"\[hf_config\] config must be a dict or a config.json",
    ):
        posenc.rope_from_hf_config(42)


def test_per_layer_configs_need_a_layer_type():
    gemma3 = {
        "model_type": "gemma3_text",
        "hidden_size": 64,
        "num_attention_heads": 4,
        "head_dim": 16,
        "max_position_embeddings": 1024,
        "rope_theta": 1000000.0,
        "rope_local_base_freq": 10000.0,
    }
    with pytest.raises(
        ValueError,
        match=r"\[hf_config\] layer_type must name one of the config's layer "
        r"types \(full_attention, sliding_attention\), got None",
    ):
        posenc.rope_from_hf_config(gemma3)
    for layer_type, base in (
        ("sliding_attention", 10000.0),
        ("full_attention", 1000000.0),
    ):
        rope = posenc.rope_from_hf_config(gemma3, layer_type=layer_type)
        exact = base ** (-np.arange(0, 16, 2) / 16.0)
        np.testing.assert_allclose(rope.inv_freq, exact, rtol=2.0**-23)
