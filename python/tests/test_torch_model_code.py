"""posenc.torch as real model code uses it: Hugging Face's layout, padded and
packed batches, length-dependent scaling, pickling, meta and fake tensors,
torch.fx, and the pure-PyTorch path against the kernels."""

import copy
import io
import json
import math
import pathlib
import pickle

import pytest
import torch
import torch.fx

import posenc
import posenc.torch as pt
from posenc import _torch_reference as reference
from posenc.torch._tensors import _head_view

torch.manual_seed(0)
ROOT = pathlib.Path(__file__).resolve().parents[2]
HF_GOLDEN = ROOT / "tests" / "golden" / "hf_rope"


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def hf_apply_rotary_pos_emb(q, k, cos, sin):
    """Hugging Face's Llama: q, k [batch, heads, seq, dim], cos and sin
    [batch, seq, dim] unsqueezed over the heads."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def hf_cos_sin_f64(positions, dim, base):
    """Hugging Face's cos and sin, in float64, from its formula."""
    inv_freq = base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    freqs = positions.double()[..., None] * inv_freq
    emb = torch.cat((freqs, freqs), -1)
    return emb.cos(), emb.sin()


# ---------------------------------------------------------------------------
# Hugging Face's [batch, heads, seq, dim]: stated, never guessed.


def test_hf_layout_equals_hf_formula_forward_and_backward():
    q = torch.randn(2, 4, 6, 16, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 4, 6, 16, dtype=torch.float64, requires_grad=True)
    position_ids = torch.tensor([[0, 1, 2, 3, 4, 5], [9, 10, 11, 12, 13, 14]])
    rope = pt.RotaryEmbedding(16, 500.0, qkv_format="bshd")
    q_rot, k_rot = rope(q, k, position_ids, qkv_format="bhsd")
    cos, sin = hf_cos_sin_f64(position_ids, 16, 500.0)
    want_q, want_k = hf_apply_rotary_pos_emb(q, k, cos, sin)
    torch.testing.assert_close(q_rot, want_q, rtol=0, atol=1e-12)
    torch.testing.assert_close(k_rot, want_k, rtol=0, atol=1e-12)
    assert q_rot.is_contiguous()  # Hugging Face's memory order kept
    g = torch.randn_like(q_rot)
    (q_rot * g).sum().backward()
    grad_q = q.grad.clone()
    q.grad = None
    (want_q * g).sum().backward()
    torch.testing.assert_close(grad_q, q.grad, rtol=0, atol=1e-12)


def test_hf_layout_views_are_read_in_place():
    """The transposed view of a [batch, heads, seq, dim] tensor and of its
    gradient reaches the kernel as it is: no copy."""
    x = torch.randn(2, 4, 6, 16)
    view = x.transpose(1, 2)
    assert _head_view(view) is view
    expanded = torch.randn(1, 1, 16).expand(6, 4, 16)
    assert _head_view(expanded) is not expanded


def test_positions_are_never_guessed_from_an_ambiguous_shape():
    """Multi-head attention: q and k have the same head count, so [1, 8, 8,
    64] could be tokens-first or heads-first. Without qkv_format the module
    refuses to pick positions."""
    q = torch.randn(1, 8, 8, 64)
    rope = pt.RotaryEmbedding(64)
    with pytest.raises(posenc.Error, match=r"^\[rope\] qkv_format must be .*, stated here or "):
        rope(q, q)
    hf = pt.RotaryEmbedding(64, qkv_format="bhsd")
    q_rot = hf(q)
    torch.testing.assert_close(q_rot, rope(q, positions=torch.arange(8), qkv_format="bhsd"))
    cos, sin = hf_cos_sin_f64(torch.arange(8)[None], 64, 10000.0)
    want, _ = hf_apply_rotary_pos_emb(q.double(), q.double(), cos, sin)
    torch.testing.assert_close(q_rot.double(), want, rtol=0, atol=1e-5)


def test_query_only_and_in_place():
    rope = posenc.Rope.default(8)
    q = torch.randn(3, 5, 2, 8)
    positions = torch.tensor([3, 4, 5, 6, 7])
    alone = pt.apply_rope(rope, positions, q, qkv_format="bshd")
    q_rot, _ = pt.apply_rope(rope, positions, q, q.clone(), qkv_format="bshd")
    assert torch.equal(alone, q_rot)
    inplace = q.clone()
    assert pt.apply_rope_(rope, positions, inplace, qkv_format="bshd") is inplace
    assert torch.equal(inplace, alone)
    hf = q.transpose(1, 2).contiguous()
    pt.apply_rope_(rope, positions, hf, qkv_format="bhsd")
    assert torch.equal(hf.transpose(1, 2), alone)
    leaf = q.clone().requires_grad_()
    with pytest.raises(posenc.Error, match=r"^\[rope\] q and k must not require grad"):
        pt.apply_rope_(rope, positions, leaf, qkv_format="bshd")


def test_in_place_writes_nothing_when_an_argument_is_bad():
    rope = posenc.Rope.default(8)
    q, k = torch.randn(5, 2, 8), torch.randn(4, 1, 8)  # k has a token too few
    before = q.clone()
    with pytest.raises(posenc.Error):
        pt.apply_rope_(rope, torch.arange(5), q, k, qkv_format="bshd")
    assert torch.equal(q, before)


def test_cos_sin_in_hugging_face_form():
    """(cos, sin) that Hugging Face's apply_rotary_pos_emb takes, at posenc's
    accuracy: the float64 values rounded once (Hugging Face's float32 angle
    at position 10^6 is off by about 0.03)."""
    rope = pt.RotaryEmbedding(16, 10000.0, qkv_format="bshd")
    position_ids = torch.tensor([[0, 5, 1_000_000]])
    cos, sin = rope.cos_sin(position_ids)
    assert cos.shape == (1, 3, 16) and cos.dtype == torch.float32
    want_cos, want_sin = hf_cos_sin_f64(position_ids, 16, 10000.0)
    assert torch.equal(cos, want_cos.float()) and torch.equal(sin, want_sin.float())
    q = torch.randn(1, 2, 3, 16)
    q_hf, _ = hf_apply_rotary_pos_emb(q, q, cos, sin)
    q_rot = pt.apply_rope(rope, position_ids, q, qkv_format="bhsd")
    torch.testing.assert_close(q_rot, q_hf, rtol=0, atol=1e-5)
    inter = pt.RotaryEmbedding(4, 100.0, layout="interleaved", qkv_format="bshd")
    c, _ = inter.cos_sin(torch.tensor([1]))
    assert torch.equal(c, torch.tensor([[math.cos(1), math.cos(1), math.cos(0.1), math.cos(0.1)]]))


# ---------------------------------------------------------------------------
# Length-dependent rules follow the positions, as Hugging Face's module does.


def golden(name):
    return json.loads((HF_GOLDEN / f"{name}.json").read_text())


@pytest.mark.parametrize(
    "name",
    [
        "nomic_embed_v1_5_dynamic2__seq8192",
        "phi3_128k_longrope__seq4096",
        "phi3_128k_longrope__seq4097",
    ],
)
def test_length_dependent_frequencies_follow_the_positions(name):
    g = golden(name)
    rope = pt.RotaryEmbedding.from_hf_config(g["config_input"], qkv_format="bshd")
    positions = torch.tensor([0, 17, g["seq_len"] - 1])
    at_length = rope.rope_at(positions)
    assert at_length.inv_freq == pytest.approx(g["inv_freq_hf_f32"], rel=0, abs=0)
    assert at_length.attention_factor == pytest.approx(g["attention_factor"], rel=1e-15)
    q = torch.randn(3, 1, g["head_dim"])
    fixed = posenc.rope_from_hf_config(g["config_input"], seq_len=g["seq_len"])
    assert torch.equal(
        rope(q, positions=positions), pt.apply_rope(fixed, positions, q, qkv_format="bshd")
    )
    # The same module at a short length uses the construction-time frequencies.
    short = torch.tensor([0, 1, 2])
    assert rope.rope_at(short) == posenc.rope_from_hf_config(g["config_input"])


def test_an_explicit_length_fixes_the_frequencies():
    g = golden("nomic_embed_v1_5_dynamic2__seq8192")
    rope = pt.RotaryEmbedding.from_hf_config(g["config_input"], seq_len=4096, qkv_format="bshd")
    assert rope.rope_at(torch.tensor([8191])) == rope.rope


# ---------------------------------------------------------------------------
# Padded and packed batches.


def make_qkv(batch, tokens, heads=4, kv_heads=2, dim=16, dtype=torch.float32):
    return (
        torch.randn(*batch, tokens, heads, dim).to(dtype),
        torch.randn(*batch, tokens, kv_heads, dim).to(dtype),
        torch.randn(*batch, tokens, kv_heads, dim).to(dtype),
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_left_padding_equals_the_unpadded_rows(dtype):
    q, k, v = make_qkv((3,), 7, dtype=dtype)
    mask = torch.tensor([[1] * 7, [0, 0, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 1, 1]])
    rope = posenc.Rope.default(16, 500.0)
    alibi = posenc.Alibi(4)
    out = pt.attention(
        q, k, v, causal=True, rope=rope, alibi=alibi, attention_mask=mask, qkv_format="bshd"
    )
    assert out.dtype == dtype
    for b, pad in enumerate([0, 2, 5]):
        alone = pt.attention(
            q[b, pad:],
            k[b, pad:],
            v[b, pad:],
            causal=True,
            rope=rope,
            alibi=alibi,
            qkv_format="bshd",
        )
        assert torch.equal(out[b, pad:], alone)


def test_a_mask_with_gaps_runs_the_definition():
    q, k, v = make_qkv((2,), 6)
    mask = torch.tensor([[1, 0, 1, 1, 0, 1], [1, 1, 1, 1, 1, 1]])
    positions = torch.arange(6)
    out = pt.attention(
        q, k, v, positions, positions, causal=True, attention_mask=mask, qkv_format="bshd"
    )
    # Row 0 by hand: only keys 0, 2, 3 and 5 exist.
    kept = torch.tensor([0, 2, 3, 5])
    for i in range(6):
        seen = kept[kept <= i]
        want = pt.attention(q[0, i : i + 1], k[0, seen], v[0, seen], [i], seen, qkv_format="bshd")
        torch.testing.assert_close(out[0, i : i + 1], want, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(
        out[1],
        pt.attention(q[1], k[1], v[1], positions, causal=True, qkv_format="bshd"),
        rtol=1e-6,
        atol=1e-6,
    )


def test_packed_sequences_equal_separate_calls():
    lengths = [5, 1, 9, 3]
    total = sum(lengths)
    q, k, v = make_qkv((), total)
    cu = torch.tensor([0, 5, 6, 15, 18], dtype=torch.int32)
    rope, alibi = posenc.Rope.default(16), posenc.Alibi(4)
    out = pt.attention(
        q, k, v, causal=True, rope=rope, alibi=alibi, window=4, cu_seqlens_q=cu, qkv_format="bshd"
    )
    for a, b in zip(cu[:-1].tolist(), cu[1:].tolist()):
        alone = pt.attention(
            q[a:b], k[a:b], v[a:b], causal=True, rope=rope, alibi=alibi, window=4, qkv_format="bshd"
        )
        assert torch.equal(out[a:b], alone)
    bad = torch.tensor([0, 5, 4, 18])
    with pytest.raises(posenc.Error, match=r"^\[attention\] cu_seqlens_q must start at 0"):
        pt.attention(q, k, v, cu_seqlens_q=bad, qkv_format="bshd")


def test_hf_layout_attention_and_defaults():
    q, k, v = make_qkv((2,), 5)
    hf = [t.transpose(1, 2).contiguous() for t in (q, k, v)]
    out = pt.attention(*hf, causal=True, qkv_format="bhsd")
    want = pt.attention(q, k, v, torch.arange(5), causal=True, scale=1 / 4, qkv_format="bshd")
    torch.testing.assert_close(out.transpose(1, 2), want, rtol=0, atol=0)
    # A decode step: the one query sits after its keys by default.
    step = pt.attention(q[:, -1:], k, v, causal=True, qkv_format="bshd")
    torch.testing.assert_close(step, want[:, -1:], rtol=1e-6, atol=1e-6)


def test_attention_dtype_and_out():
    q, k, v = make_qkv((), 4, dtype=torch.bfloat16)
    assert pt.attention(q, k, v, qkv_format="bshd").dtype == torch.bfloat16
    wide = pt.attention(q, k, v, out_dtype=torch.float32, qkv_format="bshd")
    assert wide.dtype == torch.float32
    out = torch.empty(4, 4, 16)
    assert pt.attention(q, k, v, out=out, qkv_format="bshd") is out and torch.equal(out, wide)


# ---------------------------------------------------------------------------
# The PyTorch definition against the kernels (CPU), which is what makes it
# trustworthy where the kernels cannot run.


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize(
    "rope",
    [
        posenc.Rope.default(16),
        posenc.Rope.default(16, 500.0, posenc.RopeLayout.INTERLEAVED, 8),
        posenc.Rope.default(24, 1e6, rotary_dim=8, rotary_offset=16),
        posenc.Rope(8, 8, posenc.RopeLayout.HALF_SPLIT, [1.0, 0.3, 0.01, 1e-4], 1.2),
    ],
)
def test_reference_rotation_equals_the_kernel(dtype, rope):
    x = torch.randn(2, 5, 3, rope.head_dim).to(dtype)
    positions = torch.tensor([[0, 1, 7, 4096, 1_000_003], [5, 5, 6, 2, 999_999]])
    kernel = pt.apply_rope(rope, positions, x, qkv_format="bshd")
    mine = reference.rotate(rope, positions, x)
    assert mine.dtype == dtype
    tol = {torch.float64: 1e-12, torch.float32: 2e-6}.get(dtype, 0)
    if tol:
        torch.testing.assert_close(mine, kernel, rtol=0, atol=tol * x.abs().max().item())
    else:  # one rounding of the same float32 value, at most one unit apart
        ulp = (kernel.float() - mine.float()).abs()
        assert (ulp <= kernel.float().abs() * 2.0**-7 + 1e-6).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    "options",
    [
        dict(causal=True),
        dict(causal=True, window=3, alibi=posenc.Alibi(4)),
        dict(causal=False, rope=posenc.Rope.default(16, 1e4)),
        dict(causal=True, rope=posenc.Rope.default(16), scale=0.3),
    ],
)
def test_reference_attention_equals_the_kernel(dtype, options):
    q, k, v = make_qkv((2,), 9, dtype=dtype)
    qpos = torch.tensor([3, 4, 5, 6, 7, 8, 9, 10, 11])
    kpos = torch.tensor([0, 2, 4, 6, 8, 9, 10, 11, 100])
    kernel = pt.attention(
        q, k, v, qpos, kpos, out_dtype=torch.float32, qkv_format="bshd", **options
    )
    mine = reference.attention(q, k, v, qpos, kpos, **options)
    atol = 1e-5 if dtype == torch.float32 else 2.0**-9 * v.abs().max().item() + 1e-5
    torch.testing.assert_close(mine, kernel, rtol=0, atol=atol)


def test_attention_trains_through_the_definition():
    """With autograd recording, attention is differentiable (gradcheck in
    float64 on the PyTorch path)."""
    q, k, v = (t.double().requires_grad_() for t in make_qkv((1,), 4, dim=8))
    rope, alibi = posenc.Rope.default(8), posenc.Alibi(4)
    assert torch.autograd.gradcheck(
        lambda a, b, c: pt.attention(
            a, b, c, causal=True, rope=rope, alibi=alibi, qkv_format="bshd"
        ),
        (q, k, v),
    )


# ---------------------------------------------------------------------------
# Tooling: pickle, deepcopy, torch.save, meta and fake tensors, torch.fx.


def round_trip(obj):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    # A whole module, not a state dict: torch 2.6 and later load only tensors unless told.
    return torch.load(buffer, weights_only=False)


def test_schemes_and_modules_pickle_deepcopy_and_save():
    g = golden("nomic_embed_v1_5_dynamic2__seq8192")
    rope = pt.RotaryEmbedding.from_hf_config(g["config_input"], qkv_format="bshd")
    for scheme in (
        posenc.Rope.default(8, 500.0),
        posenc.Alibi(6, max_bias=4.0),
        posenc.MRope.sections(posenc.Rope.default(8), [1, 2, 1], False),
    ):
        assert pickle.loads(pickle.dumps(scheme)) == scheme
        assert copy.deepcopy(scheme) == scheme
    model = torch.nn.ModuleDict({"rope": rope, "plain": pt.RotaryEmbedding(64, qkv_format="bhsd")})
    q = torch.randn(9000, 1, 64)
    positions = torch.arange(9000)
    for other in (copy.deepcopy(model), pickle.loads(pickle.dumps(model)), round_trip(model)):
        assert torch.equal(other["rope"](q, positions=positions), rope(q, positions=positions))
        assert other["plain"].qkv_format == "bhsd"
    # A state read back is validated like any Rope: a file is not trusted.
    state = (8, 65, posenc.RopeLayout.HALF_SPLIT, [1.0] * 4, 1.0, 0)
    with pytest.raises(posenc.Error, match=r"^\[rope\] rotary_dim"):
        posenc.Rope.__new__(posenc.Rope).__setstate__(state)


def test_meta_tensors_give_shapes_without_computing():
    rope = pt.RotaryEmbedding(16, qkv_format="bhsd")
    q = torch.empty(2, 4, 10, 16, device="meta", dtype=torch.bfloat16)
    k = torch.empty(2, 2, 10, 16, device="meta", dtype=torch.bfloat16)
    q_rot, k_rot = rope(q, k)
    assert q_rot.is_meta and q_rot.shape == q.shape and q_rot.dtype == torch.bfloat16
    out = pt.attention(q, k, k, causal=True, qkv_format="bhsd")
    assert out.is_meta and out.shape == (2, 4, 10, 16) and out.dtype == torch.bfloat16


def test_fake_tensors_give_shapes_without_computing():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q = torch.empty(1, 6, 4, 16)
        k = torch.empty(1, 6, 2, 16)
        q_rot, k_rot = pt.apply_rope(
            posenc.Rope.default(16), torch.arange(6), q, k, qkv_format="bshd"
        )
        out = pt.attention(
            q_rot, k_rot, k, causal=True, rope=posenc.Rope.default(16), qkv_format="bshd"
        )
    assert q_rot.shape == q.shape and out.shape == (1, 6, 4, 16)


class TinyBlock(torch.nn.Module):
    """Attention the way model code writes it, with the Rope, an ALiBi and a
    module as constants of the graph."""

    def __init__(self):
        super().__init__()
        self.rotary = pt.RotaryEmbedding(16, qkv_format="bhsd")
        self.rope = posenc.Rope.default(16, 500.0)
        self.alibi = posenc.Alibi(4)

    def forward(self, q, k, v, positions):
        q, k = self.rotary(q, k, positions)
        out = pt.attention(q, k, v, causal=True, qkv_format="bhsd")
        again = pt.apply_rope(self.rope, positions, out, qkv_format="bhsd")
        return pt.attention(again, k, v, alibi=self.alibi, qkv_format="bhsd") * 2


def test_torch_fx_traces_model_code():
    block = TinyBlock()
    traced = torch.fx.symbolic_trace(block)
    q, k, v = (t.transpose(1, 2).contiguous() for t in make_qkv((1,), 6))
    positions = torch.arange(3, 9)
    assert torch.equal(traced(q, k, v, positions), block(q, k, v, positions))
    code = traced.code
    assert "apply_rope" in code and "attention" in code


def test_multimodal_modules_take_queries_alone():
    rot = pt.MultimodalRotaryEmbedding(16, [2, 3, 3], qkv_format="bshd")
    q = torch.randn(1, 5, 2, 16)
    position_ids = torch.randint(0, 50, (3, 1, 5))
    q_rot, _ = rot(q, q.clone(), position_ids)
    assert torch.equal(rot(q, position_ids=position_ids), q_rot)
    vision = pt.VisionRotaryEmbedding("qwen2_vl", 8)
    x = torch.randn(4, 1, 8)
    grid = torch.tensor([[0, 0, 1, 1], [0, 1, 0, 1]])
    assert torch.equal(vision(x, positions=grid), vision(x, x.clone(), grid)[0])


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda q: pt.attention(q, q, q, attention_mask=torch.ones(2, 5), qkv_format="bshd"),
            "[attention] attention_mask must be bool or integer 0/1 when it is a padding mask "
            "[*batch, kv_tokens] (an additive float mask is 4-D: [*batch, 1 or heads, q_tokens, "
            "kv_tokens]), got float32",
        ),
        (
            lambda q: pt.attention(
                q, q, q, attention_mask=torch.ones(2, 4, dtype=torch.bool), qkv_format="bshd"
            ),
            "[attention] attention_mask.shape must be (*batch, kv_tokens) = (2, 5), got (2, 4)",
        ),
        (
            lambda q: pt.attention(
                q[0], q[0], q[0], cu_seqlens_q=torch.tensor([0, 2.0, 5]), qkv_format="bshd"
            ),
            "[attention] cu_seqlens_q must be a 1-D int32 or int64 tensor [segments + 1], "
            "got (3,) float32",
        ),
        (
            lambda q: pt.attention(
                q[0],
                q[0],
                q[0],
                cu_seqlens_q=torch.tensor([0, 5]),
                cu_seqlens_k=torch.tensor([0, 2, 5]),
                qkv_format="bshd",
            ),
            "[attention] cu_seqlens_k must hold as many segments as cu_seqlens_q (1), got 2",
        ),
        (
            lambda q: pt.attention(
                q[0], q[0], q[0], cu_seqlens_k=torch.tensor([0, 5]), qkv_format="bshd"
            ),
            "[attention] cu_seqlens_k must come with cu_seqlens_q, got alone",
        ),
        (
            lambda q: pt.attention(q, q, q, out=torch.empty(2, 5, 2), qkv_format="bshd"),
            "[attention] out.shape must be (2, 5, 2, 8), got (2, 5, 2)",
        ),
        (
            lambda q: pt.attention(q, q, q, causal=1, qkv_format="bshd"),
            "[attention] causal must be a bool, got int",
        ),
        (
            lambda q: pt.apply_rope(posenc.Rope.default(8), [0, 1, 2, 3, 4], q, qkv_format="thd"),
            "[rope] qkv_format must be 'bshd' ([..., tokens, heads, head_dim], posenc's) or "
            "'bhsd' ([..., heads, tokens, head_dim], Hugging Face's), stated (no default: a [b, 8, "
            "8, d] tensor reads either way), got 'thd'",
        ),
        (
            lambda q: pt.RotaryEmbedding(8, qkv_format="bshd")(q, positions=torch.arange(5.0)),
            "[rope] positions must have dtype int64, got float32",
        ),
    ],
)
def test_bad_arguments_name_themselves(call, message):
    q = torch.randn(2, 5, 2, 8)
    with pytest.raises(posenc.Error) as error:
        call(q)
    assert str(error.value) == message


def test_packed_decode_steps_align_queries_after_their_keys():
    """cu_seqlens_k apart from cu_seqlens_q: each segment's queries are the
    last of its keys by default, as a separate call places them."""
    q = torch.randn(3, 4, 16)
    k, v = torch.randn(7, 2, 16), torch.randn(7, 2, 16)
    cu_q, cu_k = torch.tensor([0, 1, 3]), torch.tensor([0, 3, 7])
    rope = posenc.Rope.default(16)
    out = pt.attention(
        q, k, v, causal=True, rope=rope, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, qkv_format="bshd"
    )
    assert torch.equal(
        out[0:1], pt.attention(q[0:1], k[0:3], v[0:3], causal=True, rope=rope, qkv_format="bshd")
    )
    assert torch.equal(
        out[1:3], pt.attention(q[1:3], k[3:7], v[3:7], causal=True, rope=rope, qkv_format="bshd")
    )


def test_multimodal_rope_on_hugging_face_layout_and_elsewhere():
    """M-RoPE on bhsd equals bshd; the PyTorch definition (what runs off the
    CPU kernels) equals the kernel; the layout is never guessed."""
    rot = pt.MultimodalRotaryEmbedding(16, [2, 3, 3], 500.0, qkv_format="bshd")
    q = torch.randn(2, 6, 4, 16, dtype=torch.float64)
    position_ids = torch.randint(0, 10_000, (3, 2, 6))
    want = rot(q, position_ids=position_ids)
    hf = rot(q.transpose(1, 2), position_ids=position_ids, qkv_format="bhsd")
    assert torch.equal(hf.transpose(1, 2), want)
    mine = reference.rotate(rot.mrope, position_ids, q)
    torch.testing.assert_close(mine, want, rtol=0, atol=1e-12)
    meta = rot(q.to("meta"), position_ids=position_ids.to("meta"))
    assert meta.is_meta and meta.shape == q.shape
    unstated = pt.MultimodalRotaryEmbedding(16, [2, 3, 3], 500.0)
    with pytest.raises(posenc.Error, match=r"^\[mrope\] qkv_format must be .*, stated here or "):
        unstated(q, position_ids=position_ids)


class VisionLanguageBlock(torch.nn.Module):
    """M-RoPE for text and image tokens and the 2-D RoPE of a vision tower, in one traced model."""

    def __init__(self):
        super().__init__()
        self.mrope = pt.MultimodalRotaryEmbedding(16, [2, 3, 3], qkv_format="bhsd")
        self.vision = pt.VisionRotaryEmbedding("qwen2_vl", 8)

    def forward(self, q, k, position_ids, patches, grid):
        q, k = self.mrope(q, k, position_ids)
        seen, _ = self.vision(patches, patches, grid)
        return pt.attention(q, k, k, causal=True, qkv_format="bhsd"), seen


def test_torch_fx_traces_multimodal_rope():
    block = VisionLanguageBlock()
    traced = torch.fx.symbolic_trace(block)
    q, k = torch.randn(1, 4, 6, 16), torch.randn(1, 2, 6, 16)
    position_ids = torch.randint(0, 20, (3, 1, 6))
    patches, grid = torch.randn(4, 1, 8), torch.tensor([[0, 0, 1, 1], [0, 1, 0, 1]])
    for got, want in zip(
        traced(q, k, position_ids, patches, grid), block(q, k, position_ids, patches, grid)
    ):
        assert torch.equal(got, want)
    assert "_module_mrope" in traced.code and "_module_vision_rope" in traced.code
