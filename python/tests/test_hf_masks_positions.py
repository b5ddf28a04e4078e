"""posenc.torch.attention against transformers 5.23.0's own masks and positions.

The masks come from transformers.masking_utils (sdpa_mask: boolean, eager_mask: additive float),
as a model builds them for a left-padded batch, a pre-allocated (static) cache, a sliding window
and chunked attention; the expected outputs from torch's scaled_dot_product_attention with the
same mask, and the expected positions from generate()'s own position_ids
(GenerationMixin._prepare_position_ids_for_generation: cumsum - 1, padding 0)."""

import pytest
import torch
import torch.nn.functional as F
from transformers import LlamaConfig
from transformers import masking_utils as hf_masks
from transformers.generation.utils import GenerationMixin
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

import posenc
import posenc.torch as pt
from posenc import _core

torch.manual_seed(0)
HEADS, KV_HEADS, DIM = 4, 2, 16

# Two left-padded rows and a full one, as a tokenizer pads for generate().
PADDING = torch.tensor(
    [[0, 0, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 1, 1, 1]]
)


def hf_position_ids(padding):
    """generate()'s position_ids of a padded batch (transformers 5.23.0)."""
    return GenerationMixin._prepare_position_ids_for_generation(
        None, torch.zeros_like(padding), {"attention_mask": padding}
    )


def hf_mask(kind, float_mask, q_length, kv_length, q_offset, padding):
    """A model's 4-D mask for this call, from transformers' own mask functions."""
    functions = {
        "causal": hf_masks.causal_mask_function,
        "sliding": hf_masks.sliding_window_causal_mask_function(3),
        "chunked": hf_masks.chunked_causal_mask_function(3, (padding == 0).sum(-1)),
    }
    make = hf_masks.eager_mask if float_mask else hf_masks.sdpa_mask
    return make(
        batch_size=padding.shape[0],
        q_length=q_length,
        kv_length=kv_length,
        q_offset=q_offset,
        mask_function=functions[kind],
        attention_mask=padding.to(torch.bool),
        allow_is_causal_skip=False,
    )


# (q_length, kv_length, q_offset): a prefill, a static cache of 12 slots holding 8 tokens (a
# decode step, then a chunk of 3 written at slots 5 .. 7), and a prefill into that cache.
CALLS = [(8, 8, 0), (1, 12, 7), (3, 12, 5), (8, 12, 0)]


def qkv_hf(q_length, kv_length, batch=3, dtype=torch.float32):
    """q [b, heads, q, d], k and v [b, kv_heads, kv, d]: Hugging Face's layout."""
    q = torch.randn(batch, HEADS, q_length, DIM, dtype=dtype)
    k = torch.randn(batch, KV_HEADS, kv_length, DIM, dtype=dtype)
    v = torch.randn(batch, KV_HEADS, kv_length, DIM, dtype=dtype)
    return q, k, v


def sdpa(q, k, v, mask):
    group = HEADS // KV_HEADS
    return F.scaled_dot_product_attention(
        q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1), attn_mask=mask
    )


def seen_rows(mask):
    """[b, 1, q, 1]: whether each query sees a key (sdpa averages every key for a float mask's
    empty row; posenc gives zeros, as sdpa does for a boolean mask)."""
    keep = mask if mask.dtype == torch.bool else mask == 0
    return keep.any(-1, keepdim=True)


@pytest.mark.parametrize("float_mask", [False, True])
@pytest.mark.parametrize("kind", ["causal", "sliding", "chunked"])
@pytest.mark.parametrize("call", CALLS)
def test_four_d_masks_equal_sdpa_with_the_same_mask(call, kind, float_mask):
    q_length, kv_length, q_offset = call
    padding = PADDING[:, : q_offset + q_length]
    mask = hf_mask(kind, float_mask, q_length, kv_length, q_offset, padding)
    q, k, v = qkv_hf(q_length, kv_length)
    positions = dict(
        query_positions=torch.arange(q_offset, q_offset + q_length),
        key_positions=torch.arange(kv_length),
    )
    out = pt.attention(q, k, v, **positions, attention_mask=mask, qkv_format="bhsd")
    want = sdpa(q, k, v, mask)
    rows = seen_rows(mask)
    torch.testing.assert_close(out * rows, want * rows, rtol=2e-6, atol=2e-6)
    assert torch.equal(out * ~rows, torch.zeros_like(out))


@pytest.mark.parametrize("kind", ["causal", "sliding"])
@pytest.mark.parametrize("call", CALLS)
def test_four_d_masks_in_training_equal_sdpa_gradients(call, kind):
    q_length, kv_length, q_offset = call
    padding = PADDING[:, : q_offset + q_length]
    mask = hf_mask(kind, False, q_length, kv_length, q_offset, padding)
    inputs = [t.requires_grad_() for t in qkv_hf(q_length, kv_length)]
    d_out = torch.randn(3, HEADS, q_length, DIM)
    positions = (torch.arange(q_offset, q_offset + q_length), torch.arange(kv_length))
    got = torch.autograd.grad(
        pt.attention(*inputs, *positions, attention_mask=mask, qkv_format="bhsd"), inputs, d_out
    )
    want = torch.autograd.grad(sdpa(*inputs, mask), inputs, d_out)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)


def test_four_d_masks_in_float64_run_the_definition_and_equal_sdpa():
    padding = PADDING[:, :8]
    mask = hf_mask("sliding", True, 3, 12, 5, padding)
    q, k, v = qkv_hf(3, 12, dtype=torch.float64)
    out = pt.attention(
        q, k, v, torch.arange(5, 8), torch.arange(12), attention_mask=mask, qkv_format="bhsd"
    )
    rows = seen_rows(mask)
    torch.testing.assert_close(out * rows, sdpa(q, k, v, mask) * rows, rtol=1e-12, atol=1e-12)


def test_a_causal_four_d_prefill_is_one_kernel_call_per_batch_row(monkeypatch):
    mask = hf_mask("causal", False, 8, 8, 0, PADDING)
    q, k, v = qkv_hf(8, 8)
    calls = []
    binding = _core.attention

    def counted(*args, **kwargs):
        calls.append(kwargs.get("causal"))
        return binding(*args, **kwargs)

    monkeypatch.setattr(_core, "attention", counted)
    pt.attention(q, k, v, attention_mask=mask, qkv_format="bhsd")
    # The padding queries see no key and take no call; the others are causal by position.
    assert calls == [True, True, True]


# ------------------------------------------------------------------ default positions


def hf_rope(config, q, k, position_ids):
    """Llama's own rotation (transformers 5.23.0) of q and k at position_ids [b, tokens]."""
    cos, sin = LlamaRotaryEmbedding(config)(q, position_ids)
    return apply_rotary_pos_emb(q, k, cos, sin)


LLAMA = LlamaConfig(
    hidden_size=HEADS * DIM,
    num_attention_heads=HEADS,
    num_key_value_heads=KV_HEADS,
    rope_theta=500.0,
)


@pytest.mark.parametrize("float_mask", [False, True])
@pytest.mark.parametrize("call", CALLS)
def test_default_positions_of_a_four_d_mask_are_generates(call, float_mask):
    """Hugging Face rotates each call's q and k at generate()'s position_ids; a static cache's
    keys were rotated when they were written, at theirs. posenc's defaults, read off the 4-D
    mask, rotate them the same: empty cache slots are not keys, padding is at 0."""
    q_length, kv_length, q_offset = call
    padding = PADDING[:, : q_offset + q_length]
    mask = hf_mask("causal", float_mask, q_length, kv_length, q_offset, padding)
    q, k, v = qkv_hf(q_length, kv_length)
    position_ids = hf_position_ids(padding)
    key_ids = torch.zeros(3, kv_length, dtype=torch.int64)
    key_ids[:, : position_ids.shape[1]] = position_ids
    q_rot, _ = hf_rope(LLAMA, q, q[:, :KV_HEADS], position_ids[:, q_offset:])
    _, k_rot = hf_rope(LLAMA, k.repeat(1, 2, 1, 1), k, key_ids)
    rope = pt.RotaryEmbedding.from_hf_config(LLAMA.to_dict())
    out = pt.attention(q, k, v, rope=rope, attention_mask=mask, qkv_format="bhsd")
    rows = seen_rows(mask)
    torch.testing.assert_close(out * rows, sdpa(q_rot, k_rot, v, mask) * rows, rtol=1e-5, atol=1e-5)
    explicit = pt.attention(
        q,
        k,
        v,
        position_ids[:, q_offset:],
        key_ids,
        rope=rope,
        attention_mask=mask,
        qkv_format="bhsd",
    )
    assert torch.equal(out, explicit)


@pytest.mark.parametrize(
    "padding",
    [PADDING, torch.tensor([[1, 1, 1, 1, 1, 0, 0, 0], [1, 1, 0, 1, 1, 1, 0, 1]])],
    ids=["left", "right_and_holes"],
)
def test_default_positions_of_a_padding_mask_are_generates(padding):
    """A padding mask's defaults are generate()'s position_ids, padding included (0): the
    queries of padding rows turn by them as Hugging Face's do."""
    batch, tokens = padding.shape
    q, k, v = qkv_hf(tokens, tokens, batch)
    rope = pt.RotaryEmbedding.from_hf_config(LLAMA.to_dict())
    ids = hf_position_ids(padding)
    out = pt.attention(q, k, v, rope=rope, attention_mask=padding, qkv_format="bhsd")
    explicit = pt.attention(q, k, v, ids, ids, rope=rope, attention_mask=padding, qkv_format="bhsd")
    assert torch.equal(out, explicit)
    # One query per row at the last position after a cache of the row's keys.
    last = pt.attention(q[..., -1:, :], k, v, rope=rope, attention_mask=padding, qkv_format="bhsd")
    assert torch.equal(
        last,
        pt.attention(
            q[..., -1:, :],
            k,
            v,
            ids[:, -1:],
            ids,
            rope=rope,
            attention_mask=padding,
            qkv_format="bhsd",
        ),
    )


def test_padding_positions_against_sdpa_with_hf_rotation():
    mask = PADDING.to(torch.bool)
    q, k, v = qkv_hf(8, 8)
    ids = hf_position_ids(PADDING)
    q_rot, k_rot = hf_rope(LLAMA, q, k, ids)
    causal = hf_mask("causal", False, 8, 8, 0, PADDING)
    rope = pt.RotaryEmbedding.from_hf_config(LLAMA.to_dict())
    out = pt.attention(q, k, v, rope=rope, causal=True, attention_mask=mask, qkv_format="bhsd")
    rows = seen_rows(causal)
    torch.testing.assert_close(
        out * rows, sdpa(q_rot, k_rot, v, causal) * rows, rtol=1e-5, atol=1e-5
    )


# ------------------------------------------------------------------------- refused


def refused(match, mask, q_length=4, kv_length=6):
    q, k, v = qkv_hf(q_length, kv_length, batch=2)
    with pytest.raises(posenc.Error, match=match):
        pt.attention(q, k, v, attention_mask=mask, qkv_format="bhsd")


def test_a_four_d_row_with_a_hole_is_refused_by_its_index():
    mask = torch.ones(2, 1, 4, 6, dtype=torch.bool)
    mask[1, 0, 2, 3] = False
    refused(r"one interval of keys .* got row \(1, 0, 2\) seeing keys \[0, 1, 2, 4, 5\]", mask)


def test_a_float_bias_is_not_a_mask():
    mask = torch.zeros(2, 1, 4, 6)
    mask[0, 0, 3, 1] = -0.5
    refused(r"hold 0 \(seen\) and -inf .* got -0.5 in row \(0, 0, 3\)", mask)


def test_an_integer_four_d_mask_holds_0_and_1():
    mask = torch.ones(2, 1, 4, 6, dtype=torch.int64)
    mask[0, 0, 1, 0] = 2
    refused(r"hold 0 \(hidden\) and 1 \(seen\) only.* got 2 in row \(0, 0, 1\)", mask)


def test_heads_with_different_masks_are_refused():
    mask = torch.ones(2, HEADS, 4, 6, dtype=torch.bool)
    mask[1, 2, 0, 5] = False
    refused(r"the same for every head .* got row \(1, 2, 0\) unlike head 0's", mask)


@pytest.mark.parametrize("shape", [(2, 1, 4, 5), (2, 3, 4, 6), (2, 1, 6), (1, 1, 4, 6)])
def test_a_mask_of_another_shape_is_refused(shape):
    refused(r"attention_mask.shape must be", torch.ones(shape, dtype=torch.bool))


def test_an_additive_float_padding_mask_is_refused():
    refused(r"padding mask \[\*batch, kv_tokens\]", torch.zeros(2, 6))


def test_nothing_is_written_to_out_when_a_mask_is_refused():
    q, k, v = qkv_hf(4, 6, batch=2)
    out = torch.full((2, HEADS, 4, DIM), 7.0)
    mask = torch.ones(2, 1, 4, 6, dtype=torch.bool)
    mask[0, 0, 0, 2] = False
    with pytest.raises(posenc.Error):
        pt.attention(q, k, v, attention_mask=mask, qkv_format="bhsd", out=out)
    assert torch.equal(out, torch.full_like(out, 7.0))
