"""Logit soft-capping (softcap, Gemma 2) and attention sinks (sinks, gpt-oss)
in posenc.attention (numpy), posenc.attention_forward / attention_backward and
posenc.torch.attention (the kernel, its autograd Function, and the PyTorch
definition), against Hugging Face's eager attention functions for those models,
reproduced below line for line as the reference formula, in float64."""

import math

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn import functional as F

import posenc
import posenc.torch as pt
from posenc import _core
from posenc import _torch_reference as reference

BATCH, HEADS, KV_HEADS, DIM = 2, 4, 2, 16


# --- Hugging Face's code (transformers, modeling_gemma2.py and modeling_gpt_oss.py) ---------


def repeat_kv(hidden_states, n_rep):
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(
        batch, num_key_value_heads, n_rep, slen, head_dim
    )
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


class Module:
    """The attributes the eager functions read from the attention module."""

    def __init__(self, sinks=None):
        self.head_dim = DIM
        self.num_key_value_groups = HEADS // KV_HEADS
        self.training = False
        self.sinks = sinks


def gemma2_eager_attention_forward(
    module, query, key, value, attention_mask, dropout=0.0, scaling=None, softcap=None, **kwargs
):
    if scaling is None:
        scaling = module.head_dim**-0.5

    key_states = repeat_kv(key, module.num_key_value_groups)
    value_states = repeat_kv(value, module.num_key_value_groups)

    attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling

    if softcap is not None:
        attn_weights = attn_weights / softcap
        attn_weights = torch.tanh(attn_weights)
        attn_weights = attn_weights * softcap
    if attention_mask is not None:  # no matter the length, we just slice it
        causal_mask = attention_mask[:, :, :, : key_states.shape[-2]]
        attn_weights = attn_weights + causal_mask

    # upcast attention to fp32
    attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
    attn_weights = nn.functional.dropout(attn_weights, p=dropout, training=module.training)
    attn_output = torch.matmul(attn_weights, value_states)
    attn_output = attn_output.transpose(1, 2).contiguous()
    return attn_output, attn_weights


def gpt_oss_eager_attention_forward(
    module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs
):
    key_states = repeat_kv(key, module.num_key_value_groups)
    value_states = repeat_kv(value, module.num_key_value_groups)
    attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling
    if attention_mask is not None:
        causal_mask = attention_mask[:, :, :, : key_states.shape[-2]]
        attn_weights = attn_weights + causal_mask

    sinks = module.sinks.reshape(1, -1, 1, 1).expand(query.shape[0], -1, query.shape[-2], -1)
    combined_logits = torch.cat([attn_weights, sinks], dim=-1)

    # This was not in the original implementation and slightly affect results; it prevents
    # overflow in BF16/FP16 when training with bsz>1 we clamp max values.
    combined_logits = combined_logits - combined_logits.max(dim=-1, keepdim=True).values
    probs = F.softmax(combined_logits, dim=-1, dtype=combined_logits.dtype)
    scores = probs[..., :-1]  # we drop the sink here
    attn_weights = nn.functional.dropout(scores, p=dropout, training=module.training)
    attn_output = torch.matmul(attn_weights, value_states)
    attn_output = attn_output.transpose(1, 2).contiguous()
    return attn_output, attn_weights


# --- the test's side -------------------------------------------------------------------------


def additive_mask(q_tokens, kv_tokens, window=0, dtype=torch.float64):
    """Hugging Face's 4-D float mask [1, 1, q, kv]: 0 where visible, the dtype's minimum where
    not; causal, queries the last q_tokens of the keys, and a sliding window (key j visible from
    query i when i - j < window)."""
    i = torch.arange(kv_tokens - q_tokens, kv_tokens)[:, None]
    j = torch.arange(kv_tokens)[None, :]
    seen = j <= i
    if window:
        seen = seen & (i - j < window)
    mask = torch.zeros(q_tokens, kv_tokens, dtype=dtype)
    mask.masked_fill_(~seen, torch.finfo(dtype).min)
    return mask[None, None]


def inputs(q_tokens, kv_tokens, seed=0, range_=3.0, dtype=torch.float32):
    """q [b, h, s, d], k, v [b, kv_h, s, d] (Hugging Face's layout)."""
    g = torch.Generator().manual_seed(seed)
    q = (torch.rand(BATCH, HEADS, q_tokens, DIM, generator=g) * 2 - 1) * range_
    k = (torch.rand(BATCH, KV_HEADS, kv_tokens, DIM, generator=g) * 2 - 1) * range_
    v = torch.rand(BATCH, KV_HEADS, kv_tokens, DIM, generator=g) * 2 - 1
    return q.to(dtype), k.to(dtype), v.to(dtype)


def sinks_tensor(seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(HEADS, generator=g) * 4 - 1  # [-1, 3]: as large as the scores


class KernelCalls:
    """Counts the training bindings' calls: a test cannot pass on the PyTorch definition."""

    def __init__(self, monkeypatch):
        self.forward = self.backward = 0
        forward, backward = _core.attention_forward, _core.attention_backward

        def count_forward(*args, **kwargs):
            self.forward += 1
            return forward(*args, **kwargs)

        def count_backward(*args, **kwargs):
            self.backward += 1
            return backward(*args, **kwargs)

        monkeypatch.setattr(_core, "attention_forward", count_forward)
        monkeypatch.setattr(_core, "attention_backward", count_backward)


def gemma2(q, k, v, softcap, window=0, scaling=None):
    mask = additive_mask(q.shape[-2], k.shape[-2], window)
    out, _ = gemma2_eager_attention_forward(
        Module(), q.double(), k.double(), v.double(), mask, scaling=scaling, softcap=softcap
    )
    return out  # [b, s, h, d]


def gpt_oss(q, k, v, sinks, window=0):
    mask = additive_mask(q.shape[-2], k.shape[-2], window)
    out, _ = gpt_oss_eager_attention_forward(
        Module(sinks.double()), q.double(), k.double(), v.double(), mask, scaling=DIM**-0.5
    )
    return out


@pytest.mark.parametrize("window", [0, 7])
@pytest.mark.parametrize("softcap", [2.0, 50.0])
def test_torch_softcap_matches_gemma2_eager(softcap, window):
    q, k, v = inputs(37, 37)
    # Scores up to about 9: a cap of 2 changes every weight, one of 50 a little.
    got = pt.attention(
        q, k, v, causal=True, window=window, softcap=softcap, qkv_format="bhsd"
    ).transpose(1, 2)
    want = gemma2(q, k, v, softcap, window)
    torch.testing.assert_close(got.double(), want, atol=2e-5, rtol=0)
    plain = gemma2(q, k, v, None, window)
    if softcap == 2.0:
        assert (plain - want).abs().max() > 1e-2  # the cap matters


def test_torch_softcap_gradients_match_gemma2_eager(monkeypatch):
    calls = KernelCalls(monkeypatch)
    q, k, v = (t.requires_grad_() for t in inputs(29, 29, seed=3))
    d_out = torch.randn(BATCH, HEADS, 29, DIM, generator=torch.Generator().manual_seed(4))
    out = pt.attention(q, k, v, causal=True, softcap=2.5, qkv_format="bhsd")
    got = torch.autograd.grad(out, (q, k, v), d_out)
    assert calls.forward == 1 and calls.backward == 1
    wide = [t.detach().double().requires_grad_() for t in (q, k, v)]
    ref = gemma2(*wide, 2.5).transpose(1, 2)
    want = torch.autograd.grad(ref, wide, d_out.double())
    for g, w in zip(got, want):
        torch.testing.assert_close(g.double(), w, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("window", [0, 9])
@pytest.mark.parametrize("q_tokens", [31, 1])
def test_torch_sinks_and_gradients_match_gpt_oss_eager(monkeypatch, q_tokens, window):
    calls = KernelCalls(monkeypatch)
    q, k, v = (t.requires_grad_() for t in inputs(q_tokens, 40, seed=5))
    sinks = sinks_tensor().requires_grad_()
    d_out = torch.randn(BATCH, HEADS, q_tokens, DIM, generator=torch.Generator().manual_seed(6))
    out = pt.attention(q, k, v, causal=True, window=window, sinks=sinks, qkv_format="bhsd")
    got = torch.autograd.grad(out, (q, k, v, sinks), d_out)
    assert calls.forward == 1 and calls.backward == 1
    wide = [t.detach().double().requires_grad_() for t in (q, k, v, sinks)]
    ref = gpt_oss(*wide, window=window).transpose(1, 2)
    torch.testing.assert_close(out.detach().double(), ref.detach(), atol=2e-5, rtol=0)
    want = torch.autograd.grad(ref, wide, d_out.double())
    for name, g, w in zip("q k v sinks".split(), got, want):
        torch.testing.assert_close(g.double(), w, atol=2e-5, rtol=1e-5, msg=name)
    plain = gpt_oss(*[t.detach() for t in wide[:3]], torch.full((HEADS,), -1e30), window)
    assert (plain.transpose(1, 2) - ref).abs().max() > 1e-2  # the sinks matter


def test_torch_sinks_bfloat16_kernel():
    q, k, v = inputs(33, 33, seed=7, dtype=torch.bfloat16)
    sinks = sinks_tensor()
    got = pt.attention(q, k, v, causal=True, sinks=sinks, softcap=4.0, qkv_format="bhsd")
    assert got.dtype == torch.bfloat16
    # The definition on the widened inputs: softcap, then mask, then the softmax with the sink.
    mask = additive_mask(33, 33)
    scores = torch.matmul(q.double(), repeat_kv(k.double(), 2).transpose(2, 3)) * DIM**-0.5
    scores = torch.tanh(scores / 4.0) * 4.0 + mask
    logits = torch.cat([scores, sinks.double().reshape(1, -1, 1, 1).expand(2, -1, 33, -1)], -1)
    weights = torch.softmax(logits, -1)[..., :-1]
    want = torch.matmul(weights, repeat_kv(v.double(), 2))
    # bfloat16 output rounding and the kernel's bfloat16 weights: within 2^-8 of max |v|.
    torch.testing.assert_close(got.double(), want, atol=2**-7, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_pytorch_definition_matches_the_eager_formulas(dtype):
    """The definition path (float64 inputs run it; float32 asked directly) with both options,
    and gradcheck through it with sinks that require grad."""
    q, k, v = inputs(21, 21, seed=8, dtype=dtype)
    sinks = sinks_tensor().to(dtype)
    qpos = kpos = torch.arange(21)
    got = reference.attention(
        q.transpose(1, 2),
        k.transpose(1, 2),
        v.transpose(1, 2),
        qpos,
        kpos,
        causal=True,
        softcap=3.0,
        sinks=sinks,
    )
    mask = additive_mask(21, 21)
    scores = torch.matmul(q.double(), repeat_kv(k.double(), 2).transpose(2, 3)) * DIM**-0.5
    scores = torch.tanh(scores / 3.0) * 3.0 + mask
    logits = torch.cat([scores, sinks.double().reshape(1, -1, 1, 1).expand(2, -1, 21, -1)], -1)
    want = torch.matmul(torch.softmax(logits, -1)[..., :-1], repeat_kv(v.double(), 2))
    torch.testing.assert_close(got.double(), want.transpose(1, 2), atol=1e-5, rtol=0)
    if dtype == torch.float64:
        out = pt.attention(q, k, v, causal=True, softcap=3.0, sinks=sinks, qkv_format="bhsd")
        torch.testing.assert_close(out, want, atol=1e-12, rtol=0)
        small = [t[:1, :, :5].clone().requires_grad_() for t in (q, k, v)]
        leaf = sinks.clone().requires_grad_()
        assert torch.autograd.gradcheck(
            lambda a, b, c, s: pt.attention(
                a, b, c, causal=True, softcap=3.0, sinks=s, qkv_format="bhsd"
            ),
            (*small, leaf),
        )


def test_numpy_attention_with_softcap_and_sinks():
    q, k, v = inputs(25, 25, seed=9)
    sinks = sinks_tensor()
    pos = np.arange(25, dtype=np.int64)
    qn, kn, vn = (t.transpose(1, 2).contiguous().numpy() for t in (q, k, v))
    got = posenc.attention(qn, kn, vn, pos, causal=True, softcap=2.0, sinks=sinks.numpy())
    mask = additive_mask(25, 25)
    scores = torch.matmul(q.double(), repeat_kv(k.double(), 2).transpose(2, 3)) * DIM**-0.5
    scores = torch.tanh(scores / 2.0) * 2.0 + mask
    logits = torch.cat([scores, sinks.double().reshape(1, -1, 1, 1).expand(2, -1, 25, -1)], -1)
    want = torch.matmul(torch.softmax(logits, -1)[..., :-1], repeat_kv(v.double(), 2))
    np.testing.assert_allclose(got, want.transpose(1, 2).numpy(), atol=2e-5, rtol=0)
    # softcap alone is Gemma 2's function.
    got = posenc.attention(qn, kn, vn, pos, causal=True, softcap=2.0)
    np.testing.assert_allclose(got, gemma2(q, k, v, 2.0).numpy(), atol=2e-5, rtol=0)


def test_numpy_training_bindings_with_sinks():
    """attention_forward's lse includes the sink; attention_backward returns d_sinks summed over
    the batch, as autograd through gpt-oss's function gives it."""
    q, k, v = inputs(18, 18, seed=10)
    sinks = sinks_tensor()
    pos = np.arange(18, dtype=np.int64)
    qn, kn, vn = (t.transpose(1, 2).contiguous().numpy() for t in (q, k, v))
    s = sinks.numpy()
    out, lse = posenc.attention_forward(qn, kn, vn, pos, causal=True, sinks=s)
    mask = additive_mask(18, 18)
    scores = torch.matmul(q.double(), repeat_kv(k.double(), 2).transpose(2, 3)) * DIM**-0.5
    logits = torch.cat(
        [scores + mask, sinks.double().reshape(1, -1, 1, 1).expand(2, -1, 18, -1)], -1
    )
    np.testing.assert_allclose(
        lse, torch.logsumexp(logits, -1).transpose(1, 2).numpy(), atol=1e-5, rtol=1e-6
    )
    d_out = np.random.default_rng(11).standard_normal(out.shape).astype(np.float32)
    result = posenc.attention_backward(
        qn, kn, vn, pos, out=out, lse=lse, d_out=d_out, causal=True, sinks=s
    )
    assert len(result) == 4
    wide = [t.double().requires_grad_() for t in (q, k, v, sinks)]
    ref = gpt_oss(*wide).transpose(1, 2)
    want = torch.autograd.grad(ref, wide, torch.from_numpy(d_out).double().transpose(1, 2))
    for name, g, w in zip("q k v".split(), result[:3], want[:3]):
        np.testing.assert_allclose(g, w.transpose(1, 2).numpy(), atol=2e-5, rtol=1e-5, err_msg=name)
    np.testing.assert_allclose(result[3], want[3].numpy(), atol=2e-5, rtol=1e-5)
    # Without sinks, three gradients as before.
    assert len(posenc.attention_backward(qn, kn, vn, pos, out=out, lse=lse, d_out=d_out)) == 3


def test_bad_softcap_and_sinks_are_refused():
    q, k, v = inputs(4, 4)
    qn, kn, vn = (t.transpose(1, 2).contiguous().numpy() for t in (q, k, v))
    pos = np.arange(4, dtype=np.int64)
    with pytest.raises(
        posenc.Error,
        match=r"\[attention\] softcap must be finite and > 0 "
        r"\(0: off\), .*got -1",
    ):
        posenc.attention(qn, kn, vn, pos, softcap=-1.0)
    with pytest.raises(
        posenc.Error,
        match=r"\[attention\] sinks.size\(\) must equal "
        r"q.num_heads \(4\)",
    ):
        posenc.attention(qn, kn, vn, pos, sinks=np.zeros(3, np.float32))
    with pytest.raises(posenc.Error, match=r"\[attention\] sinks\[2\] must be finite, got nan"):
        posenc.attention(qn, kn, vn, pos, sinks=np.array([0, 0, np.nan, 0], np.float32))
    with pytest.raises(posenc.Error, match=r"\[attention\] sinks must have dtype float32"):
        posenc.attention(qn, kn, vn, pos, sinks=np.zeros(4))
    with pytest.raises(posenc.Error, match=r"\[attention\] sinks.shape must be \[num_heads\]"):
        posenc.attention(qn, kn, vn, pos, sinks=np.zeros((2, 2), np.float32))
    # The same messages on the direct kernel call (bshd, explicit positions) and the general path.
    qt, kt, vt = (t.transpose(1, 2).contiguous() for t in (q, k, v))
    positions = torch.arange(4)
    for bad in (-1.0, math.inf, math.nan, "3", True):
        for call in (
            lambda bad=bad: pt.attention(q, k, v, softcap=bad, qkv_format="bhsd"),
            lambda bad=bad: pt.attention(
                qt, kt, vt, positions, positions, softcap=bad, qkv_format="bshd"
            ),
        ):
            with pytest.raises(
                posenc.Error,
                match=r"\[attention\] softcap must be a finite "
                r"number >= 0 \(0: off\)",
            ):
                call()
    with pytest.raises(posenc.Error, match=r"\[attention\] sinks.shape must be \(4,\)"):
        pt.attention(q, k, v, sinks=torch.zeros(2), qkv_format="bhsd")
    with pytest.raises(posenc.Error, match=r"\[attention\] sinks must have a floating dtype"):
        pt.attention(q, k, v, sinks=torch.zeros(4, dtype=torch.int64), qkv_format="bhsd")


@pytest.mark.parametrize("torch_cache", [False, True])
def test_kv_cache_decode_with_softcap_and_sinks(torch_cache):
    """A decode loop on posenc's KV cache (numpy KVCache.attend, posenc.torch.KVCache.attend)
    with both options: each step against the definition written as Hugging Face writes it."""
    q, k, v = inputs(12, 12, seed=12)
    q, k, v = q[:1], k[:1], v[:1]  # one sequence per cache
    sinks = sinks_tensor()
    if torch_cache:
        cache = pt.KVCache(12, KV_HEADS, DIM)
    else:
        cache = posenc.KVCache(12, KV_HEADS, DIM)
    for t in range(12):
        k_t, v_t = k[0, :, t : t + 1].transpose(0, 1), v[0, :, t : t + 1].transpose(0, 1)
        q_t = q[0, :, t : t + 1].transpose(0, 1).contiguous()  # [1, heads, dim]
        if torch_cache:
            cache.append(k_t.contiguous(), v_t.contiguous())
            got = cache.attend(q_t, causal=True, softcap=2.0, sinks=sinks)
        else:
            cache.append(
                np.array([t], np.int64), k_t.contiguous().numpy(), v_t.contiguous().numpy()
            )
            got = torch.from_numpy(
                cache.attend(
                    q_t.numpy(),
                    np.array([t], np.int64),
                    causal=True,
                    softcap=2.0,
                    sinks=sinks.numpy(),
                )
            )
        qs = q[:, :, t : t + 1].double()
        ks, vs = k[:, :, : t + 1].double(), v[:, :, : t + 1].double()
        scores = torch.matmul(qs, repeat_kv(ks, 2).transpose(2, 3)) * DIM**-0.5
        scores = torch.tanh(scores / 2.0) * 2.0
        logits = torch.cat([scores, sinks.double().reshape(1, -1, 1, 1)], -1)
        want = torch.matmul(torch.softmax(logits, -1)[..., :-1], repeat_kv(vs, 2))
        torch.testing.assert_close(got.double(), want[0].transpose(0, 1), atol=2e-5, rtol=0)
