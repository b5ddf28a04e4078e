"""The config readers take a transformers PretrainedConfig as they take its dict: the
frequencies equal those transformers 5.23.0's own rotary modules compute from the same object
(the language model's and, for Qwen2-VL and Qwen2.5-VL, the vision tower's)."""

import json
import pathlib

import pytest
import torch
import transformers
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLVisionRotaryEmbedding
from transformers.models.qwen2_vl.modeling_qwen2_vl import (
    Qwen2VLRotaryEmbedding,
    Qwen2VLVisionRotaryEmbedding,
    apply_rotary_pos_emb_vision,
)
from transformers.vision_utils import get_vision_position_ids

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
    torch.testing.assert_close(
        torch.tensor(rope.inv_freq, dtype=torch.float64), want, rtol=0, atol=0
    )
    module = pt.RotaryEmbedding.from_hf_config(config, qkv_format="bhsd")
    torch.testing.assert_close(module.inv_freq, want, rtol=0, atol=0)
    cache = pt.KVCache.from_hf_config(config, capacity=8, layer=0)
    assert cache.rope.inv_freq == rope.inv_freq
    assert cache.kv_heads == config.num_key_value_heads
    assert (
        posenc.model_positions(config).to_dict()
        == posenc.model_positions(config.to_dict()).to_dict()
    )


def test_mrope_readers_take_a_config_object():
    config = config_object("real/qwen2_vl-qwen2-vl-7b-instruct.json")
    text = config.get_text_config()
    want = Qwen2VLRotaryEmbedding(text).inv_freq.double()
    mrope = posenc.mrope_from_hf_config(config)
    torch.testing.assert_close(
        torch.tensor(mrope.rope.inv_freq, dtype=torch.float64), want, rtol=0, atol=0
    )
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
        hidden_size=64,
        num_attention_heads=4,
        max_position_embeddings=32,
        rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0},
    )
    from_object = pt.RotaryEmbedding.from_hf_config(config, qkv_format="bshd")
    from_dict = pt.RotaryEmbedding.from_hf_config(config.to_dict(), qkv_format="bshd")
    for length in (16, 100):
        positions = torch.arange(length)
        assert from_object.rope_at(positions).inv_freq == from_dict.rope_at(positions).inv_freq
    assert (
        from_object.rope_at(torch.arange(16)).inv_freq
        != from_object.rope_at(torch.arange(100)).inv_freq
    )


# Vision towers of Qwen2-VL and Qwen2.5-VL as transformers 5.23.0 builds them from the published
# configs (tests/configs/real/), shrunk to two heads of 16: the vision_config is a nested config
# object (model_type "qwen2_vl_vision" / "qwen2_5_vl_vision", rope_parameters {"rope_type":
# "axial", "rope_theta": ...}). "theta 5000": the same with a base of its own in rope_parameters,
# which transformers 5's module reads.
VISION_TOWERS = {
    "qwen2-vl": (
        "real/qwen2_vl-qwen2-vl-7b-instruct.json",
        Qwen2VLVisionRotaryEmbedding,
        dict(embed_dim=32, num_heads=2, hidden_size=64),
        None,
    ),
    "qwen2-vl theta 5000": (
        "real/qwen2_vl-qwen2-vl-7b-instruct.json",
        Qwen2VLVisionRotaryEmbedding,
        dict(embed_dim=32, num_heads=2, hidden_size=64),
        5000.0,
    ),
    "qwen2.5-vl": (
        "real/qwen2_5_vl-qwen2.5-vl-7b-instruct.json",
        Qwen2_5_VLVisionRotaryEmbedding,
        dict(hidden_size=32, num_heads=2, out_hidden_size=64),
        None,
    ),
    "qwen2.5-vl theta 5000": (
        "real/qwen2_5_vl-qwen2.5-vl-7b-instruct.json",
        Qwen2_5_VLVisionRotaryEmbedding,
        dict(hidden_size=32, num_heads=2, out_hidden_size=64),
        5000.0,
    ),
}


@pytest.mark.parametrize("name", VISION_TOWERS)
def test_vision_rope_reader_takes_a_transformers_5_qwen_vl_config(name):
    file, module_class, shrunk, theta = VISION_TOWERS[name]
    data = json.loads((CONFIGS / file).read_text())
    data["vision_config"] = dict(data["vision_config"], **shrunk)
    if theta is not None:
        data["vision_config"]["rope_parameters"] = {"rope_type": "axial", "rope_theta": theta}
    config = transformers.AutoConfig.for_model(**data)
    vision = config.vision_config
    assert isinstance(vision, transformers.PretrainedConfig)
    assert vision.model_type.endswith("_vision") and vision.rope_parameters["rope_type"] == "axial"
    # The object, its dict and the vision config's own dict give one MRope.
    mrope = posenc.vision_rope_from_hf_config(config)
    assert posenc.vision_rope_from_hf_config(config.to_dict()) == mrope
    rot = pt.VisionRotaryEmbedding.from_hf_config(config)
    assert rot.mrope == mrope and rot.spatial_merge_size == vision.spatial_merge_size
    # transformers 5.23.0's rotary module of the tower, built from the same vision config.
    module = module_class(vision)
    quarter = mrope.head_dim // 4
    assert mrope.head_dim == 16 and mrope.pair_stream == [0] * quarter + [1] * quarter
    inv_freq = torch.tensor(mrope.rope.inv_freq, dtype=torch.float64)
    torch.testing.assert_close(inv_freq[:quarter], inv_freq[quarter:], rtol=0, atol=0)
    torch.testing.assert_close(inv_freq[:quarter].float(), module.inv_freq, rtol=1e-7, atol=0)
    # Its cos and sin at the tower's own positions (two images, merge-block order) rotate q
    # [tokens, heads, head_dim] as the tower's attention does; posenc's rotation at the same
    # positions gives the same q.
    grids = torch.tensor([[1, 4, 6], [2, 2, 4]])
    position_ids = get_vision_position_ids(grids, vision.spatial_merge_size)  # [tokens, 2]
    torch.testing.assert_close(rot.positions(grids), position_ids.T, rtol=0, atol=0)
    q = torch.randn(len(position_ids), 2, 16, generator=torch.Generator().manual_seed(7))
    cos, sin = module(q, position_ids)
    want, _ = apply_rotary_pos_emb_vision(q, q, cos, sin)
    got = rot(q, positions=position_ids.T)
    torch.testing.assert_close(got, want, rtol=0, atol=2e-6)
