"""Training through posenc.torch.attention: the kernel's backward pass (an
autograd Function over posenc.attention_forward and attention_backward)
against autograd through the PyTorch definition (posenc._torch_reference),
gradcheck on the reference path, determinism across thread counts, the
numpy bindings' contract, and a short AdamW run."""

import math

import numpy as np
import pytest
import torch

import posenc
import posenc.torch as pt
from posenc import _core
from posenc import _torch_reference as reference

HEADS, KV_HEADS, DIM = 4, 2, 16


class KernelCalls:
    """Counts the calls of the training bindings, so that a test cannot
    pass on the PyTorch definition by accident."""

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


@pytest.fixture
def calls(monkeypatch):
    return KernelCalls(monkeypatch)


def leaves(batch, q_tokens, kv_tokens, dtype, qkv_format="bshd", kv_heads=KV_HEADS, seed=0):
    """q, k, v leaves that require grad, in qkv_format's layout."""
    generator = torch.Generator().manual_seed(seed)

    def make(tokens, heads):
        shape = (*batch, tokens, heads, DIM)
        if qkv_format == "bhsd":
            shape = (*batch, heads, tokens, DIM)
        x = torch.randn(*shape, generator=generator)
        return x.to(dtype).requires_grad_()

    return make(q_tokens, HEADS), make(kv_tokens, kv_heads), make(kv_tokens, kv_heads)


def grads_of(fn, inputs, d_out):
    out = fn(*inputs)
    return out, torch.autograd.grad(out, inputs, d_out)


def reference_grads(inputs, d_out, qkv_format, query_positions, key_positions, **options):
    """Autograd through the PyTorch definition, in float64 on the same
    values (bfloat16 inputs widened exactly)."""
    wide = [t.detach().double().requires_grad_() for t in inputs]
    views = wide if qkv_format == "bshd" else [t.transpose(-2, -3) for t in wide]
    rope = options.pop("rope", None)
    q_tokens, kv_tokens = views[0].shape[-3], views[1].shape[-3]
    if query_positions is None:
        query_positions = torch.arange(kv_tokens - q_tokens, kv_tokens)
    if key_positions is None:
        key_positions = torch.arange(kv_tokens)
    if rope is not None and not isinstance(rope, posenc.Rope):
        rope = rope.rope_at(query_positions, key_positions)
    out = reference.attention(*views, query_positions, key_positions, rope=rope, **options)
    if qkv_format == "bhsd":
        out = out.transpose(-2, -3)
    return out, torch.autograd.grad(out, wide, d_out.double())


ROPE_HALF = posenc.Rope.default(DIM, 500.0)
# Interleaved pairs over the middle 8 of 16 features: partial and offset rotary.
ROPE_PARTIAL = posenc.Rope(
    DIM, 8, posenc.RopeLayout.INTERLEAVED, [1.0, 0.1, 0.01, 0.001], rotary_offset=4
)
CASES = {
    "plain": dict(),
    "causal": dict(causal=True),
    "window": dict(causal=True, window=3),
    "window_bidirectional": dict(window=4),
    "alibi": dict(causal=True, alibi=posenc.Alibi(HEADS)),
    "rope_half_split": dict(causal=True, rope=ROPE_HALF),
    "rope_interleaved_partial": dict(causal=True, rope=ROPE_PARTIAL),
    "rope_module": dict(
        causal=True, rope=pt.RotaryEmbedding(DIM, layout="interleaved", qkv_format="bshd")
    ),
    "everything": dict(causal=True, window=5, alibi=posenc.Alibi(HEADS), rope=ROPE_HALF, scale=0.3),
}


def check_close(got, want, dtype):
    """float32 within float32 rounding of sums over a few dozen terms;
    bfloat16 within a few bfloat16 ulps of the largest gradient (its
    inputs' RoPE rounding, the weights' rounding and the result's)."""
    for g, w in zip(got, want):
        assert g.dtype == dtype
        scale = float(w.abs().max()) + 1e-30
        error = float((g.double() - w).abs().max())
        if dtype == torch.float32:
            assert error <= 2e-6 * max(scale, 1.0), (error, scale)
        else:
            assert error <= 1.5e-2 * scale, (error, scale)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("qkv_format", ["bshd", "bhsd"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_kernel_gradients_match_the_definition(calls, case, qkv_format, dtype):
    inputs = leaves((2,), 11, 11, dtype, qkv_format)
    options = dict(CASES[case])
    d_out = torch.randn(inputs[0].shape[:-1] + (DIM,), generator=torch.Generator().manual_seed(1))
    out, got = grads_of(
        lambda q, k, v: pt.attention(q, k, v, qkv_format=qkv_format, **options),
        inputs,
        d_out.to(dtype),
    )
    assert calls.forward == 1 and calls.backward == 1
    assert out.dtype == dtype and out.grad_fn is not None
    want_out, want = reference_grads(inputs, d_out.to(dtype), qkv_format, None, None, **options)
    check_close([out], [want_out], dtype)
    check_close(got, want, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_decode_shaped_call_with_batched_positions_and_mqa(calls, dtype):
    """Fewer queries than keys, per-element positions with gaps, one kv head,
    two batch dims."""
    inputs = leaves((2, 2), 3, 13, dtype, kv_heads=1)
    key_positions = torch.stack([torch.arange(13) * 2, torch.arange(13) + 100])
    key_positions = key_positions.expand(2, 2, 13)
    query_positions = key_positions[..., -3:]
    options = dict(causal=True, window=9, rope=ROPE_HALF, alibi=posenc.Alibi(HEADS))
    d_out = torch.randn(2, 2, 3, HEADS, DIM).to(dtype)
    _, got = grads_of(
        lambda q, k, v: pt.attention(
            q, k, v, query_positions, key_positions, qkv_format="bshd", **options
        ),
        inputs,
        d_out,
    )
    assert calls.backward == 1
    _, want = reference_grads(inputs, d_out, "bshd", query_positions, key_positions, **options)
    check_close(got, want, dtype)


def test_a_query_that_sees_no_key_gives_zero_gradients(calls):
    q, k, v = leaves((), 4, 4, torch.float32)
    # Queries 0 and 1 come before every key: the causal mask hides them all.
    query_positions, key_positions = torch.arange(4), torch.arange(2, 6)
    out = pt.attention(q, k, v, query_positions, key_positions, causal=True, qkv_format="bshd")
    out.sum().backward()  # an expanded gradient: stride 0 everywhere
    assert calls.backward == 1
    assert torch.equal(out[:2], torch.zeros_like(out[:2]))
    assert torch.equal(q.grad[:2], torch.zeros_like(q.grad[:2]))
    _, want = reference_grads(
        (q, k, v),
        torch.ones(4, HEADS, DIM),
        "bshd",
        query_positions,
        key_positions,
        causal=True,
    )
    check_close((q.grad, k.grad, v.grad), want, torch.float32)


def test_padding_mask_of_intervals_and_packed_sequences_run_the_kernel(calls):
    q, k, v = leaves((3,), 7, 7, torch.float32)
    mask = torch.tensor([[1] * 7, [0, 0, 1, 1, 1, 1, 1], [0] * 7])
    options = dict(causal=True, rope=ROPE_HALF)
    out = pt.attention(q, k, v, attention_mask=mask, qkv_format="bshd", **options)
    d_out = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v), d_out)
    assert calls.backward == 2  # one per row with kept keys; the empty row is zeros
    qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
    want_out = pt.attention(qd, kd, vd, attention_mask=mask, qkv_format="bshd", **options)
    want = torch.autograd.grad(want_out, (qd, kd, vd), d_out.double())
    check_close([out], [want_out], torch.float32)
    check_close(got, want, torch.float32)

    packed = leaves((), 12, 12, torch.float32)
    cu_seqlens = torch.tensor([0, 5, 12], dtype=torch.int32)
    out = pt.attention(
        *packed, causal=True, alibi=posenc.Alibi(HEADS), cu_seqlens_q=cu_seqlens, qkv_format="bshd"
    )
    got = torch.autograd.grad(out, packed, d_out[0, :1].expand(12, HEADS, DIM))
    assert calls.backward == 4
    wide = [t.detach().double().requires_grad_() for t in packed]
    want_out = pt.attention(
        *wide, causal=True, alibi=posenc.Alibi(HEADS), cu_seqlens_q=cu_seqlens, qkv_format="bshd"
    )
    want = torch.autograd.grad(want_out, wide, d_out[0, :1].expand(12, HEADS, DIM).double())
    check_close(got, want, torch.float32)


def test_other_calls_keep_the_pytorch_definition(calls):
    # float64 (gradcheck's dtype) and float16.
    for dtype in (torch.float64, torch.float16):
        q, k, v = leaves((), 5, 5, dtype)
        pt.attention(q, k, v, causal=True, qkv_format="bshd").float().sum().backward()
        assert q.grad is not None
    assert calls.forward == 0 and calls.backward == 0


def test_padding_mask_of_scattered_keys_runs_the_kernel_on_the_kept_keys(calls):
    """Kept keys that are not one interval: the kernel on those keys at their own positions
    (the masked attention exactly), against float64 through the PyTorch definition."""
    q, k, v = leaves((2,), 5, 5, torch.float32)
    mask = torch.tensor([[1, 0, 1, 1, 0], [0, 1, 1, 0, 1]])
    options = dict(causal=True, rope=ROPE_HALF, qkv_format="bshd")
    out = pt.attention(q, k, v, attention_mask=mask, **options)
    d_out = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v), d_out)
    assert calls.forward == 2 and calls.backward == 2
    qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
    want_out = pt.attention(qd, kd, vd, attention_mask=mask, **options)
    want = torch.autograd.grad(want_out, (qd, kd, vd), d_out.double())
    check_close([out], [want_out], torch.float32)
    check_close(got, want, torch.float32)


def test_no_grad_calls_do_not_save_anything(calls):
    q, k, v = leaves((), 5, 5, torch.float32)
    with torch.no_grad():
        out = pt.attention(q, k, v, causal=True, qkv_format="bshd")
    assert out.grad_fn is None and calls.forward == 0


@pytest.mark.parametrize("case", ["causal", "everything", "rope_interleaved_partial"])
def test_gradcheck_in_float64_on_the_reference_path(calls, case):
    inputs = leaves((2,), 4, 5, torch.float64, "bhsd")
    options = CASES[case]
    assert torch.autograd.gradcheck(
        lambda q, k, v: pt.attention(q, k, v, qkv_format="bhsd", **options), inputs
    )
    assert calls.forward == 0


def test_gradgradcheck_in_float64_on_the_reference_path(calls):
    inputs = leaves((), 3, 4, torch.float64)
    options = CASES["everything"]
    assert torch.autograd.gradgradcheck(
        lambda q, k, v: pt.attention(q, k, v, qkv_format="bshd", **options), inputs
    )
    assert calls.forward == 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_same_bits_for_one_and_two_threads(calls, dtype):
    # Long enough for several tiles of queries and keys in both passes.
    inputs = leaves((2,), 150, 150, dtype, "bhsd")
    options = dict(causal=True, window=90, alibi=posenc.Alibi(HEADS), rope=ROPE_HALF)
    d_out = torch.randn(2, HEADS, 150, DIM).to(dtype)
    threads = torch.get_num_threads()
    results = []
    try:
        for n in (1, 2):
            torch.set_num_threads(n)
            results.append(
                grads_of(
                    lambda q, k, v: pt.attention(q, k, v, qkv_format="bhsd", **options),
                    inputs,
                    d_out,
                )
            )
    finally:
        torch.set_num_threads(threads)
    assert calls.backward == 2
    (out1, grads1), (out2, grads2) = results
    assert torch.equal(out1, out2)
    for a, b in zip(grads1, grads2):
        assert torch.equal(a, b)


def test_double_backward_raises(calls):
    q, k, v = leaves((), 5, 5, torch.float32)
    out = pt.attention(q, k, v, causal=True, qkv_format="bshd")
    (dq,) = torch.autograd.grad(out.pow(2).sum(), q, create_graph=True)
    assert calls.backward == 1
    with pytest.raises(RuntimeError, match="differentiate twice"):
        dq.sum().backward()


def test_modifying_the_output_in_place_before_backward_is_caught(calls):
    q, k, v = leaves((), 5, 5, torch.float32)
    out = pt.attention(q, k, v, causal=True, qkv_format="bshd")
    loss = out.sum()
    out.mul_(2)  # the saved out no longer matches
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


# The numpy bindings behind the Function.


def numpy_qkv(batch=(2,), tokens=6):
    generator = np.random.default_rng(3)
    return [
        generator.standard_normal((*batch, tokens, heads, DIM)).astype(np.float32)
        for heads in (HEADS, KV_HEADS, KV_HEADS)
    ]


def test_attention_forward_equals_attention_and_keeps_the_true_lse():
    q, k, v = numpy_qkv()
    positions = np.arange(3, 9)
    alibi = posenc.Alibi(HEADS)
    options = dict(causal=True, alibi=alibi, rope=ROPE_HALF, window=4)
    out, lse = posenc.attention_forward(q, k, v, positions, **options)
    assert out.shape == (2, 6, HEADS, DIM) and lse.shape == (2, 6, HEADS)
    assert out.dtype == lse.dtype == np.float32
    np.testing.assert_allclose(
        out, posenc.attention(q, k, v, positions, **options), rtol=0, atol=1e-6
    )
    # The log-sum-exp of the definition's scores (ALiBi included).
    qr = reference.rotate(ROPE_HALF, torch.from_numpy(positions), torch.from_numpy(q).double())
    kr = reference.rotate(ROPE_HALF, torch.from_numpy(positions), torch.from_numpy(k).double())
    scores = reference._scores(qr, kr, 1.0 / math.sqrt(DIM))
    pos = torch.from_numpy(positions)
    scores = scores + reference.alibi_bias(alibi, pos, pos, torch.float64)
    seen = reference.visible(pos, pos, True, 4)
    want = torch.logsumexp(scores.masked_fill(~seen, -math.inf), -1).transpose(-1, -2)
    np.testing.assert_allclose(lse, want.numpy(), rtol=0, atol=2e-5)


def test_attention_backward_bfloat16_bits_and_shapes():
    q, k, v = (torch.from_numpy(x).to(torch.bfloat16) for x in numpy_qkv())
    bits = [x.view(torch.int16).numpy() for x in (q, k, v)]
    positions = np.arange(6)
    out, lse = posenc.attention_forward(*bits, positions, causal=True, bfloat16=True)
    d_out = np.ones_like(out)
    dq, dk, dv = posenc.attention_backward(
        *bits, positions, out=out, lse=lse, d_out=d_out, causal=True, bfloat16=True
    )
    assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape
    assert dq.dtype == dk.dtype == dv.dtype == np.float32
    # Every (query, head) row's weights sum to one, so with d_out all ones the
    # values' gradients sum to the number of rows.
    np.testing.assert_allclose(dv.sum(axis=(1, 2)), np.full((2, DIM), 6 * HEADS), rtol=1e-5)


def test_attention_backward_messages_name_the_argument():
    q, k, v = numpy_qkv()
    positions = np.arange(6)
    out, lse = posenc.attention_forward(q, k, v, positions)
    with pytest.raises(
        posenc.Error,
        match=r"\[attention_backward\] d_out.shape must be "
        r"\(2, 6, 4, 16\) .*got \(2, 6, 4, 8\)",
    ):
        posenc.attention_backward(q, k, v, positions, out=out, lse=lse, d_out=out[..., :8])
    with pytest.raises(
        posenc.Error,
        match=r"\[attention_backward\] lse must have dtype "
        "float32, got float64",
    ):
        posenc.attention_backward(
            q, k, v, positions, out=out, lse=lse.astype(np.float64), d_out=out
        )
    with pytest.raises(posenc.Error, match=r"\[attention_backward\] lse must be C-contiguous"):
        wide = np.zeros((2, 6, HEADS * 2), np.float32)[..., ::2]
        posenc.attention_backward(q, k, v, positions, out=out, lse=wide, d_out=out)
    with pytest.raises(
        posenc.Error,
        match=r"\[attention_forward\] v.shape\[:-3\] must equal "
        r"q's batch dims \(2,\), got \(1,\)",
    ):
        posenc.attention_forward(q, k, v[:1], positions)
    # Every batch element is validated before any runs; the message names the entry.
    bad = np.stack([positions, positions - 10])
    with pytest.raises(
        posenc.Error,
        match=r"^\[attention_forward\] query_positions\[1\]\[0\] "
        r"must be >= 0, got -10$",
    ):
        posenc.attention_forward(q, k, v, bad, np.stack([positions, positions]))
    with pytest.raises(
        posenc.Error,
        match=r"^\[attention_backward\] query_positions\[1\]\[0\] "
        r"must be >= 0, got -10$",
    ):
        posenc.attention_backward(
            q, k, v, bad, np.stack([positions, positions]), out=out, lse=lse, d_out=out
        )


# A short training run.


class TinyAttention(torch.nn.Module):
    """One causal self-attention layer (RoPE, GQA) with a linear read-out."""

    def __init__(self, attend, width=32):
        super().__init__()
        self.attend = attend
        self.qkv = torch.nn.Linear(width, (HEADS + 2 * KV_HEADS) * DIM, bias=False)
        self.proj = torch.nn.Linear(HEADS * DIM, width)

    def forward(self, x):
        batch, tokens, _ = x.shape
        qkv = self.qkv(x).view(batch, tokens, HEADS + 2 * KV_HEADS, DIM)
        q, k, v = qkv.split([HEADS, KV_HEADS, KV_HEADS], dim=2)
        return self.proj(self.attend(q, k, v).reshape(batch, tokens, HEADS * DIM))


def kernel_attend(q, k, v):
    return pt.attention(
        q, k, v, causal=True, rope=ROPE_HALF, alibi=posenc.Alibi(HEADS), qkv_format="bshd"
    )


def reference_attend(q, k, v):
    positions = torch.arange(q.shape[1])
    return reference.attention(
        q, k, v, positions, positions, causal=True, rope=ROPE_HALF, alibi=posenc.Alibi(HEADS)
    )


def train(attend, steps=40):
    torch.manual_seed(5)
    model = TinyAttention(attend)
    data = torch.Generator().manual_seed(6)
    x = torch.randn(4, 24, 32, generator=data)
    # A target that needs attention: each token's running mean of the inputs.
    target = x.cumsum(1) / torch.arange(1, 25).view(1, 24, 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), target)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses, model


def test_adamw_training_through_the_kernel_matches_the_definition(calls):
    kernel_losses, kernel_model = train(kernel_attend)
    assert calls.forward == calls.backward == 40
    reference_losses, reference_model = train(reference_attend)
    assert calls.forward == 40
    assert kernel_losses[-1] < 0.5 * kernel_losses[0]
    np.testing.assert_allclose(kernel_losses, reference_losses, rtol=1e-4)
    for a, b in zip(kernel_model.parameters(), reference_model.parameters()):
        # Adam divides by the root of each gradient's second moment, so a
        # parameter whose gradient is near 0 moves by rounding noise: atol.
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
