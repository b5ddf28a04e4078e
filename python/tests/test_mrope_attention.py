"""attention(rope=) with Qwen2-VL's M-RoPE: q and k turn by Hugging Face's position_ids
[3, batch, seq] while the causal mask follows the token order, as transformers 5.23.0's
Qwen2-VL computes it (its rotary module and apply_rotary_pos_emb, then SDPA)."""

import json
import pathlib

import pytest
import torch
import torch.nn.functional as F
import transformers
from transformers.models.qwen2_vl.modeling_qwen2_vl import (
    Qwen2VLRotaryEmbedding,
    apply_rotary_pos_emb,
)

import posenc
import posenc.torch as pt

CONFIG = json.loads(
    (
        pathlib.Path(__file__).resolve().parents[2]
        / "tests"
        / "configs"
        / "real"
        / "qwen2_vl-qwen2-vl-7b-instruct.json"
    ).read_text()
)
HEADS, KV_HEADS, DIM = 4, 2, 128  # Qwen2-VL's head_dim and mrope_section [16, 24, 24]


def hf_attention(q, k, v, position_ids, key_ids):
    """Qwen2-VL's rotation (transformers 5.23.0) at position_ids, then causal SDPA in slot
    order (the query slots are the last of the keys')."""
    text = transformers.AutoConfig.for_model(**CONFIG).get_text_config()
    rotary = Qwen2VLRotaryEmbedding(text)
    q_rot, _ = apply_rotary_pos_emb(q, q, *rotary(q, position_ids))
    _, k_rot = apply_rotary_pos_emb(k, k, *rotary(k, key_ids))
    q_len, kv_len = q.shape[2], k.shape[2]
    mask = torch.ones(q_len, kv_len, dtype=torch.bool).tril(kv_len - q_len)
    group = HEADS // KV_HEADS
    return F.scaled_dot_product_attention(
        q_rot, k_rot.repeat_interleave(group, 1), v.repeat_interleave(group, 1), attn_mask=mask
    )


def image_positions(batch, tokens):
    """position_ids [3, batch, tokens] of text, a 2 x 3 image grid, text."""
    ids = torch.arange(tokens).repeat(3, batch, 1)
    ids[1, :, 3:9] = 3 + torch.tensor([0, 0, 0, 1, 1, 1])
    ids[2, :, 3:9] = 3 + torch.tensor([0, 1, 2, 0, 1, 2])
    ids[0, :, 3:9] = 3
    ids[:, :, 9:] = torch.arange(9, tokens) - 3
    return ids


@pytest.mark.parametrize("module", [True, False], ids=["MultimodalRotaryEmbedding", "MRope"])
def test_mrope_attention_equals_qwen2_vl(module):
    torch.manual_seed(0)
    tokens = 12
    q = torch.randn(2, HEADS, tokens, DIM)
    k = torch.randn(2, KV_HEADS, tokens, DIM)
    v = torch.randn(2, KV_HEADS, tokens, DIM)
    ids = image_positions(2, tokens)
    rope = pt.MultimodalRotaryEmbedding.from_hf_config(CONFIG)
    out = pt.attention(
        q, k, v, ids, ids, causal=True, qkv_format="bhsd", rope=rope if module else rope.mrope
    )
    torch.testing.assert_close(out, hf_attention(q, k, v, ids, ids), rtol=2e-5, atol=2e-5)
    # A decode step: one query after the image, its streams one past the last.
    step = pt.attention(
        q[:, :, -1:], k, v, ids[..., -1:], ids, causal=True, qkv_format="bhsd", rope=rope
    )
    torch.testing.assert_close(step, out[:, :, -1:], rtol=2e-5, atol=2e-5)


def test_streams_of_the_wrong_shape_are_named():
    rope = pt.MultimodalRotaryEmbedding.from_hf_config(CONFIG)
    q = torch.randn(1, 5, HEADS, DIM)
    with pytest.raises(posenc.Error, match=r"\[attention\] key_positions.shape must be"):
        pt.attention(
            q, q, q, None, torch.zeros(3, 1, 4, dtype=torch.int64), rope=rope, qkv_format="bshd"
        )


def test_self_extend_refuses_mrope_by_name():
    rope = pt.MultimodalRotaryEmbedding.from_hf_config(CONFIG)
    q = torch.randn(5, HEADS, DIM)
    with pytest.raises(posenc.Error, match=r"\[self_extend\] rope must be .*M-RoPE's position"):
        pt.self_extend_attention(
            q, q, q, rope=rope, group_size=2, neighbor_window=2, qkv_format="bshd"
        )
