"""qkv_format has no default: Hugging Face's [b, h, s, d] tensors with as many heads as tokens
read either way, so every call that takes activations states the layout, and a call that does
not is refused by name (nothing is computed or written); stated, either layout gives the same
values as torch's scaled_dot_product_attention on Hugging Face's layout."""

import pytest
import torch
import torch.nn.functional as F

import posenc
import posenc.torch as pt

ROPE = posenc.Rope.default(16)
MROPE = pt.MultimodalRotaryEmbedding(16, [2, 3, 3])
RULE = (
    r"qkv_format must be 'bshd' \(\[\.\.\., tokens, heads, head_dim\], posenc's\) or "
    r"'bhsd' \(\[\.\.\., heads, tokens, head_dim\], Hugging Face's\), stated.* \(no "
    r"default: a \[b, 8, 8, d\] tensor reads either way\), got None"
)


def square():
    """Hugging Face's q, k, v [1, 8 heads, 8 tokens, 16]: either layout by shape."""
    torch.manual_seed(0)
    return [torch.randn(1, 8, 8, 16) for _ in range(3)]


POSITIONS = torch.arange(8)
CALLS = {
    "attention": lambda q, k, v: pt.attention(q, k, v, causal=True),
    "attention_with_positions": lambda q, k, v: pt.attention(q, k, v, POSITIONS, POSITIONS),
    "self_extend_attention": lambda q, k, v: pt.self_extend_attention(
        q, k, v, rope=ROPE, group_size=2, neighbor_window=4
    ),
    "apply_rope": lambda q, k, v: pt.apply_rope(ROPE, POSITIONS, q, k),
    "apply_rope_": lambda q, k, v: pt.apply_rope_(ROPE, POSITIONS, q, k),
    "apply_mrope": lambda q, k, v: pt.apply_mrope(MROPE.mrope, POSITIONS.expand(3, 8), q, k),
    "RotaryEmbedding": lambda q, k, v: pt.RotaryEmbedding(16)(q, k, POSITIONS),
    "MultimodalRotaryEmbedding": lambda q, k, v: MROPE(q, k, POSITIONS.expand(3, 1, 8)),
    "context_parallel_attention": lambda q, k, v: pt.distributed.context_parallel_attention(
        q, k, v, POSITIONS
    ),
}


@pytest.mark.parametrize("name", CALLS)
def test_a_call_without_qkv_format_is_refused_and_writes_nothing(name):
    q, k, v = square()
    before = [t.clone() for t in (q, k, v)]
    with pytest.raises(posenc.Error, match=RULE):
        CALLS[name](q, k, v)
    assert all(torch.equal(a, b) for a, b in zip((q, k, v), before))


def test_modules_name_where_the_layout_may_be_given():
    q, k, _ = square()
    with pytest.raises(
        posenc.Error,
        match=r"\[rope\] qkv_format must be .*, stated here or to "
        r"RotaryEmbedding \(no default",
    ):
        pt.RotaryEmbedding(16)(q, k)
    with pytest.raises(
        posenc.Error,
        match=r"\[mrope\] qkv_format must be .*, stated here or to "
        r"MultimodalRotaryEmbedding \(no default",
    ):
        MROPE(q, k)


def test_stated_either_way_the_values_are_sdpa_on_hugging_faces_layout():
    q, k, v = square()
    want = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    got = pt.attention(q, k, v, causal=True, qkv_format="bhsd")
    torch.testing.assert_close(got, want, rtol=2e-6, atol=2e-6)
    tokens_first = [t.transpose(1, 2) for t in (q, k, v)]
    got = pt.attention(*tokens_first, causal=True, qkv_format="bshd")
    torch.testing.assert_close(got.transpose(1, 2), want, rtol=2e-6, atol=2e-6)
    # The mistake the default used to hide: heads read as tokens.
    wrong = pt.attention(q, k, v, causal=True, qkv_format="bshd")
    assert wrong.shape == want.shape and (wrong - want).abs().max() > 0.1


def test_a_module_built_with_a_layout_needs_none_per_call():
    q, k, _ = square()
    module = pt.RotaryEmbedding(16, qkv_format="bhsd")
    q_rot, k_rot = module(q, k)
    want = pt.apply_rope(ROPE, POSITIONS, q, k, qkv_format="bhsd")
    assert torch.equal(q_rot, want[0]) and torch.equal(k_rot, want[1])
