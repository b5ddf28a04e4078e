"""The config readers take a transformers PretrainedConfig as they take its dict: the
frequencies equal those transformers 5.23.0's own rotary modules compute from the same object."""

import json
import pathlib

import pytest
import torch
import transformers
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLRotaryEmbedding

import posenc
import posenc.torch as pt

CONFIGS = pathlib.Path(__file__).resolve().parents[2] / "tests" / "configs"


def config_object(name):
    data = json.loads((CONFIGS / name).read_text())
    return transformers.AutoConfig.for_model(**data)


def test_rope_readers_take_a_config_object():
    config = config_object("llama3.1-8b.json")
    assert isinstance(config, transformers.PretrainedConfig)
    want = LlamaRotaryEmbedding(config).inv_freq.double()
    rope = posenc.rope_from_hf_config(config)
    assert rope.inv_freq == posenc.rope_from_hf_config(config.to_dict()).inv_freq
    torch.testing.assert_close(torch.tensor(rope.inv_freq, dtype=torch.float64), want, rtol=0, atol=0)
    module = pt.RotaryEmbedding.from_hf_config(config, qkv_format="bhsd")
    torch.testing.assert_close(module.inv_freq, want, rtol=0, atol=0)
    cache = pt.KVCache.from_hf_config(config, capacity=8, layer=0)
    assert cache.rope.inv_freq == rope.inv_freq
    assert cache.kv_heads == config.num_key_value_heads
    assert posenc.model_positions(config).to_dict() == posenc.model_positions(
        config.to_dict()
    ).to_dict()


def test_mrope_readers_take_a_config_object():
    config = config_object("real/qwen2_vl-qwen2-vl-7b-instruct.json")
    text = config.get_text_config()
    want = Qwen2VLRotaryEmbedding(text).inv_freq.double()
    mrope = posenc.mrope_from_hf_config(config)
    torch.testing.assert_close(torch.tensor(mrope.rope.inv_freq, dtype=torch.float64), want, rtol=0, atol=0)
    module = pt.MultimodalRotaryEmbedding.from_hf_config(config, qkv_format="bhsd")
    torch.testing.assert_close(module.inv_freq, want, rtol=0, atol=0)
    assert pt.KVCache.from_hf_config(config, capacity=8).mrope.pair_stream == mrope.pair_stream
    tokens = posenc.qwen_vl_tokens(config)
    assert tokens.image_token_id == config.image_token_id


def test_another_object_is_refused_by_name():
    with pytest.raises(posenc.Error, match=r"PretrainedConfig or a config.json path .* got object"):
        posenc.rope_from_hf_config(object())


def test_a_length_rule_module_keeps_a_config_objects_text():
    """Dynamic NTK's module rebuilds its Rope per call length from the config it keeps."""
    config = transformers.LlamaConfig(
        hidden_size=64, num_attention_heads=4, max_position_embeddings=32,
        rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0},
    )
    from_object = pt.RotaryEmbedding.from_hf_config(config, qkv_format="bshd")
    from_dict = pt.RotaryEmbedding.from_hf_config(config.to_dict(), qkv_format="bshd")
    for length in (16, 100):
        positions = torch.arange(length)
        assert from_object.rope_at(positions).inv_freq == from_dict.rope_at(positions).inv_freq
    assert from_object.rope_at(torch.arange(16)).inv_freq != from_object.rope_at(
        torch.arange(100)
    ).inv_freq
