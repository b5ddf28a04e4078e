"""posenc.torch against plain PyTorch written here, gradcheck, bad inputs."""

import math

import numpy as np
import pytest
import torch

import posenc
import posenc.torch as pt
from posenc.torch.absolute import _LearnedLookup

torch.manual_seed(0)


def inv_freq(rotary_dim, base=10000.0):
    return base ** (-torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope_rotate_half(x, positions, rotary_dim, base=10000.0):
    """Hugging Face's Llama style, x [..., tokens, heads, dim], in float64."""
    angles = positions.to(torch.float64)[..., None] * inv_freq(rotary_dim, base)
    emb = torch.cat((angles, angles), dim=-1)[..., None, :]  # [..., tokens, 1, rotary_dim]
    rot, rest = x[..., :rotary_dim].double(), x[..., rotary_dim:].double()
    rotated = rot * emb.cos() + rotate_half(rot) * emb.sin()
    return torch.cat((rotated, rest), dim=-1)


def rope_complex(x, positions, base=10000.0):
    """Meta's reference style: interleaved pairs as complex numbers."""
    dim = x.shape[-1]
    angles = positions.to(torch.float64)[..., None] * inv_freq(dim, base)
    rotation = torch.polar(torch.ones_like(angles), angles)[..., None, :]
    pairs = torch.view_as_complex(x.double().reshape(*x.shape[:-1], dim // 2, 2))
    return torch.view_as_real(pairs * rotation).flatten(-2)


def test_apply_rope_matches_rotate_half_with_partial_rotary_and_gqa():
    rope = posenc.Rope.default(16, 500.0, rotary_dim=8)
    q, k = torch.randn(2, 7, 4, 16), torch.randn(2, 7, 2, 16)
    positions = torch.tensor([0, 1, 2, 3, 50, 51, 4096])
    q_rot, k_rot = pt.apply_rope(rope, positions, q, k, qkv_format="bshd")
    assert q_rot.dtype == torch.float32 and q_rot.shape == q.shape
    torch.testing.assert_close(
        q_rot.double(),
        rope_rotate_half(q, positions, 8, 500.0),
        rtol=1e-5,
        atol=1e-5,
    )
    torch.testing.assert_close(
        k_rot.double(),
        rope_rotate_half(k, positions, 8, 500.0),
        rtol=1e-5,
        atol=1e-5,
    )


def test_apply_rope_matches_complex_multiply_with_per_batch_positions():
    rope = posenc.Rope.default(8, layout=posenc.RopeLayout.INTERLEAVED)
    q, k = torch.randn(3, 5, 2, 8), torch.randn(3, 5, 1, 8)
    positions = torch.randint(0, 100000, (3, 5))
    q_rot, k_rot = pt.apply_rope(rope, positions, q, k, qkv_format="bshd")
    torch.testing.assert_close(q_rot.double(), rope_complex(q, positions), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(k_rot.double(), rope_complex(k, positions), rtol=1e-5, atol=1e-5)


def test_hugging_face_layout_passes_as_a_transposed_view():
    rope = posenc.Rope.default(8)
    q_hf, k_hf = torch.randn(2, 4, 6, 8), torch.randn(2, 2, 6, 8)  # [batch, heads, seq, dim]
    positions = torch.arange(6)
    q_rot, k_rot = pt.apply_rope(
        rope, positions, q_hf.transpose(1, 2), k_hf.transpose(1, 2), qkv_format="bshd"
    )
    assert q_rot.transpose(1, 2).is_contiguous()  # the result keeps the input's memory order
    expected = rope_rotate_half(q_hf.transpose(1, 2), positions, 8)
    torch.testing.assert_close(q_rot.double(), expected, rtol=1e-5, atol=1e-5)


def test_float64_is_double_precision():
    rope = posenc.Rope.default(8, layout=posenc.RopeLayout.INTERLEAVED)
    q, k = torch.randn(4, 3, 8, dtype=torch.float64), torch.randn(4, 3, 8, dtype=torch.float64)
    positions = torch.tensor([0, 10, 1000, 1000000])
    q_rot, k_rot = pt.apply_rope(rope, positions, q, k, qkv_format="bshd")
    assert q_rot.dtype == torch.float64
    torch.testing.assert_close(q_rot, rope_complex(q, positions), rtol=0, atol=1e-12)
    torch.testing.assert_close(k_rot, rope_complex(k, positions), rtol=0, atol=1e-12)


@pytest.mark.parametrize("dtype, ulp", [(torch.bfloat16, 2.0**-8), (torch.float16, 2.0**-11)])
def test_half_precision_storage_rounds_once(dtype, ulp):
    rope = posenc.Rope.default(8)
    # Hugging Face's [batch, heads, seq, dim] memory: the views are strided,
    # and stay so.
    q_hf = torch.randn(2, 4, 5, 8).to(dtype)
    k_hf = torch.randn(2, 1, 5, 8).to(dtype)
    positions = torch.tensor([0, 1, 2, 300, 70000])
    q_rot, k_rot = pt.apply_rope(
        rope, positions, q_hf.transpose(1, 2), k_hf.transpose(1, 2), qkv_format="bshd"
    )
    assert q_rot.dtype == dtype and q_rot.transpose(1, 2).is_contiguous()
    for rotated, original in ((q_rot, q_hf), (k_rot, k_hf)):
        exact = rope_rotate_half(original.transpose(1, 2), positions, 8)
        # One rounding of the storage type (half an ulp), plus float32
        # arithmetic.
        error = (rotated.double() - exact).abs()
        assert torch.all(error <= ulp * exact.abs() + 1e-6), error.max()


def test_backward_matches_autograd_of_the_plain_implementation():
    rope = posenc.Rope.default(16)
    q = torch.randn(2, 5, 3, 16, requires_grad=True)
    k = torch.randn(2, 5, 1, 16, requires_grad=True)
    positions = torch.arange(5) * 37
    weight_q, weight_k = torch.randn(2, 5, 3, 16), torch.randn(2, 5, 1, 16)
    q_rot, k_rot = pt.apply_rope(rope, positions, q, k, qkv_format="bshd")
    ((q_rot * weight_q).sum() + (k_rot * weight_k).sum()).backward()
    q_ref = q.detach().double().requires_grad_()
    k_ref = k.detach().double().requires_grad_()
    (
        (rope_rotate_half(q_ref, positions, 16) * weight_q).sum()
        + (rope_rotate_half(k_ref, positions, 16) * weight_k).sum()
    ).backward()
    torch.testing.assert_close(q.grad.double(), q_ref.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(k.grad.double(), k_ref.grad, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("layout", [posenc.RopeLayout.HALF_SPLIT, posenc.RopeLayout.INTERLEAVED])
def test_gradcheck_rope_in_double(layout):
    # A scaled, partial rotary: attention_factor != 1 makes the backward a
    # transpose, not an undo.
    rope = posenc.Rope(6, 4, layout, [1.0, 0.01], 1.3)
    q = torch.randn(2, 3, 2, 6, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 3, 1, 6, dtype=torch.float64, requires_grad=True)
    positions = torch.tensor([[0, 1, 5], [7, 2, 1000]])
    assert torch.autograd.gradcheck(
        lambda a, b: pt.apply_rope(rope, positions, a, b, qkv_format="bshd"), (q, k)
    )
    assert torch.autograd.gradgradcheck(
        lambda a, b: pt.apply_rope(rope, positions, a, b, qkv_format="bshd"), (q, k)
    )


def test_rotary_embedding_module():
    module = pt.RotaryEmbedding(8, 100.0, layout="interleaved", qkv_format="bshd")
    q, k = torch.randn(1, 4, 2, 8), torch.randn(1, 4, 2, 8)
    q_rot, k_rot = module(q, k)
    torch.testing.assert_close(
        q_rot.double(),
        rope_complex(q, torch.arange(4), 100.0),
        rtol=1e-5,
        atol=1e-5,
    )
    torch.testing.assert_close(module.inv_freq, inv_freq(8, 100.0), rtol=1e-15, atol=0)
    assert list(module.parameters()) == []


def test_numpy_and_torch_agree():
    rope = posenc.Rope.default(8)
    q, k = torch.randn(2, 3, 2, 8), torch.randn(2, 3, 2, 8)
    positions = torch.tensor([4, 5, 6])
    q_rot, k_rot = pt.apply_rope(rope, positions, q, k, qkv_format="bshd")
    for rotated, x in ((q_rot, q), (k_rot, k)):
        from_numpy = posenc.apply_rope(rope, positions.numpy(), x.numpy())
        np.testing.assert_array_equal(rotated.numpy(), from_numpy)


@pytest.mark.parametrize(
    "make, message",
    [
        (
            lambda q, k, p: (q.int(), k.int(), p),
            "[rope] q must have dtype float32, float64, bfloat16, float16, got int32",
        ),
        (
            lambda q, k, p: (q, k.double(), p),
            "[rope] k.dtype must equal q.dtype",
        ),
        (
            lambda q, k, p: (q, k, p.int()),
            "[rope] positions must have dtype int64, got int32",
        ),
        (
            lambda q, k, p: (q, k, p[:3]),
            "[rope] positions.shape must be (tokens,) = (4,)",
        ),
        (
            lambda q, k, p: (q[0, 0], k, p),
            "[rope] q.shape must be [..., tokens, heads, head_dim]",
        ),
        (
            lambda q, k, p: (q[..., ::2], k, p),
            "[rope] q.strides[-1] must be the item size",
        ),
        (
            lambda q, k, p: (q, k[:, :3], p),
            "tokens must equal q_in.tokens (4), got 3",
        ),
        (
            lambda q, k, p: (q.to("meta"), k, p),
            "[rope] k.device must equal q.device (meta), got cpu",
        ),
        (
            lambda q, k, p: (q, k, p.to("meta")),
            "[rope] positions must hold values (a meta tensor holds none) "
            "unless q is meta, got meta",
        ),
    ],
)
def test_bad_inputs_raise_clear_errors(make, message):
    q, k, positions = (
        torch.randn(2, 4, 2, 8),
        torch.randn(2, 4, 1, 8),
        torch.arange(4),
    )
    with pytest.raises(ValueError) as error:
        q, k, positions = make(q, k, positions)
        pt.apply_rope(posenc.Rope.default(8), positions, q, k, qkv_format="bshd")
    assert message in str(error.value)


def test_sinusoidal_positions_module():
    module = pt.SinusoidalPositions(6, 100.0)
    values = module(torch.tensor([[0, 1], [2, 300]]))
    assert values.shape == (2, 2, 6) and values.dtype == torch.float32
    # PE(1) by hand: frequencies 1, 100^(-2/6), 100^(-4/6).
    w = [1.0, 100.0 ** (-2 / 6), 100.0 ** (-4 / 6)]
    expected = [f(w[j // 2]) for j, f in enumerate([math.sin, math.cos] * 3)]
    torch.testing.assert_close(values[0, 1], torch.tensor(expected, dtype=torch.float32))
    with pytest.raises(ValueError, match=r"\[sinusoidal\]"):
        module(torch.tensor([-1]))


def test_learned_positions_train_the_library_table(tmp_path):
    module = pt.LearnedPositions(5, 3, seed=11)
    positions = torch.tensor([[4, 0], [4, 2]])
    out = module(positions)
    torch.testing.assert_close(out, torch.nn.functional.embedding(positions, module.weight))
    grad_out = torch.randn(2, 2, 3)
    out.backward(grad_out)
    reference = module.weight.detach().clone().requires_grad_()
    torch.nn.functional.embedding(positions, reference).backward(grad_out)
    torch.testing.assert_close(module.weight.grad, reference.grad)
    torch.optim.SGD(module.parameters(), lr=0.5).step()
    expected = reference.detach() - 0.5 * reference.grad
    np.testing.assert_allclose(module.table.table, expected.numpy(), rtol=1e-6)
    with pytest.raises(ValueError, match=r"must be < max_positions \(5\), got 5"):
        module(torch.tensor([5]))
    path = tmp_path / "wpe.npy"
    module.save(path)
    loaded = pt.LearnedPositions.load(path)
    torch.testing.assert_close(loaded.weight, module.weight, rtol=0, atol=0)
    module.double()
    with pytest.raises(ValueError, match=r"\[learned\] weight must be the library table's own"):
        module(positions)


def test_gradcheck_learned_lookup():
    # The library's table is float32, so gradcheck runs in float32 here; the
    # map is a 0/1 selection, so central differences are exact up to float32
    # rounding at this step size.
    module = pt.LearnedPositions(4, 2, seed=3)
    positions = torch.tensor([3, 1, 3])
    function = _LearnedLookup.apply
    with pytest.warns(UserWarning):
        assert torch.autograd.gradcheck(
            lambda w: function(w, positions.numpy(), module.table),
            (module.weight,),
            eps=1e-2,
            atol=1e-4,
            rtol=1e-3,
        )


def test_alibi_slopes_and_bias():
    torch.testing.assert_close(
        pt.alibi_slopes(4, dtype=torch.float64),
        torch.tensor([0.25, 0.0625, 2.0**-6, 2.0**-8], dtype=torch.float64),
        rtol=0,
        atol=0,
    )
    queries, keys = torch.tensor([3, 4]), torch.tensor([0, 1, 2, 3, 4])
    bias = pt.alibi_bias(4, queries, keys)
    assert bias.shape == (4, 2, 5) and bias.dtype == torch.float32
    slopes = torch.tensor([0.25, 0.0625, 2.0**-6, 2.0**-8])
    expected = -slopes[:, None, None] * (queries[:, None] - keys[None, :]).float()
    torch.testing.assert_close(bias, expected, rtol=0, atol=0)
    assert pt.alibi_bias(4, queries, dtype=torch.bfloat16).dtype == torch.bfloat16
    with pytest.raises(ValueError, match=r"\[alibi\] num_heads"):
        pt.alibi_slopes(0)


def torch_attention(q, k, v, causal, rope_positions=None):
    """Plain attention in float64 on [tokens, heads, dim] tensors (RoPE first,
    Llama's rotate_half, when positions are given); grouped heads share k, v.
    """
    q, k, v = q.double(), k.double(), v.double()
    if rope_positions is not None:
        q = rope_rotate_half(q, rope_positions, q.shape[-1])
        k = rope_rotate_half(k, rope_positions, k.shape[-1])
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)
    v = v.repeat_interleave(group, dim=1)
    scores = torch.einsum("ihd,jhd->hij", q, k) / math.sqrt(q.shape[-1])
    if causal:
        tokens = q.shape[0]
        hidden = torch.ones(tokens, tokens, dtype=torch.bool).triu(1)
        scores = scores.masked_fill(hidden, -math.inf)
    return torch.einsum("hij,jhd->ihd", scores.softmax(-1), v)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_attention_matches_plain_torch(dtype):
    q = torch.randn(37, 8, 64).to(dtype)
    k = torch.randn(37, 2, 64).to(dtype)
    v = torch.randn(37, 2, 32).to(dtype)
    positions = torch.arange(37)
    if dtype == torch.float32:
        with torch.no_grad():
            out = pt.attention(
                q, k, v, positions, causal=True, rope=posenc.Rope.default(64), qkv_format="bshd"
            )
        expected = torch_attention(q, k, v, True, positions)
        atol = 1e-5
    else:
        # Without RoPE (which rounds rotated q and k back to bfloat16), the
        # only rounding beyond float32 is the weights', at most 2^-9 max|v|,
        # and the output's, to bfloat16 (bfloat16 in, bfloat16 out).
        out = pt.attention(q, k, v, positions, causal=True, qkv_format="bshd")
        expected = torch_attention(q, k, v, True)
        atol = 2.0**-9 * v.abs().max().item() + 2.0**-8 * expected.abs().max().item()
    assert out.dtype == dtype and out.shape == (37, 8, 32)
    torch.testing.assert_close(out.double(), expected, rtol=0, atol=atol)


def test_attention_refuses_what_it_cannot_do():
    q = torch.randn(4, 2, 8)
    with pytest.raises(ValueError, match=r"\[attention\] q must have dtype"):
        pt.attention(q.int(), q, q, torch.arange(4), qkv_format="bshd")
    with pytest.raises(ValueError, match=r"\[attention\] k and v must have"):
        pt.attention(q, q.bfloat16(), q, [0, 1, 2, 3], qkv_format="bshd")


# ---------------------------------------------------------------------------
# Models layer by layer and T5's relative bias, against the reference's
# outputs (tests/golden/model_positions, tests/golden/t5_buckets).

import json  # noqa: E402
import pathlib  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODEL_GOLDEN = ROOT / "tests" / "golden" / "model_positions"
LLAMA4 = ROOT / "tests" / "configs" / "real" / "llama4-scout-17b-16e.json"
DEEPSEEK = ROOT / "tests" / "configs" / "deepseek-v3.json"


def _reference_q(head_dim):
    """q[h][d] = 0.01 (d + 1) - 0.3 h in float32: [1 token, 2 heads, dim]."""
    d = torch.arange(head_dim, dtype=torch.float32)
    h = torch.arange(2, dtype=torch.float32)[:, None]
    return (0.01 * (d + 1) - 0.3 * h)[None]


def test_rotary_embedding_of_a_layer_index():
    golden = json.loads((MODEL_GOLDEN / "llama4-scout-17b-16e.json").read_text())
    module = pt.RotaryEmbedding.from_hf_config(LLAMA4, layer=0, qkv_format="bshd")
    q = _reference_q(128)
    q_rot, _ = module(q, q.clone(), torch.tensor([7]))
    want = torch.tensor(golden["layout"]["rotated_q"]["7"], dtype=torch.float32)
    torch.testing.assert_close(q_rot[0], want, atol=2e-6, rtol=0)
    with pytest.raises(ValueError, match=r"layer must pick a RoPE layer \(layer 3 is nope"):
        pt.RotaryEmbedding.from_hf_config(LLAMA4, layer=3, qkv_format="bshd")
    # A layer type still works.
    by_type = pt.RotaryEmbedding.from_hf_config(
        LLAMA4, layer="chunked_attention", qkv_format="bshd"
    )
    torch.testing.assert_close(by_type.inv_freq, module.inv_freq)


def test_rotary_embedding_honours_rotary_offset():
    """DeepSeek V3: head_dim 192; the first 128 features pass, the last 64
    rotate. The reference stores the rotated part de-interleaved (pair i at
    128 + i and 160 + i); posenc rotates pairs (2i, 2i + 1) in place."""
    golden = json.loads((MODEL_GOLDEN / "deepseek-v3.json").read_text())
    module = pt.RotaryEmbedding.from_hf_config(DEEPSEEK, qkv_format="bshd")
    assert module.rope.rotary_offset == 128
    q = _reference_q(192)
    for position in (7, 1000):
        q_rot, _ = module(q, q.clone(), torch.tensor([position]))
        want = torch.tensor(golden["layout"]["rotated_q"][str(position)], dtype=torch.float64)
        d = torch.arange(128, 192)
        order = torch.cat((torch.arange(128), 128 + (d - 128) // 2 + ((d - 128) % 2) * 32))
        torch.testing.assert_close(
            q_rot[0].double(),
            want[:, order],
            atol=2e-6 if position < 100 else 1e-4,  # float32 angles there
            rtol=0,
        )
        torch.testing.assert_close(q_rot[0, :, :128], q[0, :, :128])


def test_relative_position_bias_buckets_match_hugging_face():
    for name, bidirectional in (("t5_bidirectional", True), ("t5_causal", False)):
        golden = json.loads((ROOT / "tests" / "golden" / "t5_buckets" / f"{name}.json").read_text())
        wanted = dict(zip(golden["relative_position"], golden["bucket"]))
        bias = pt.RelativePositionBias(32, 128, 4, bidirectional=bidirectional)
        query = torch.tensor([0, 5, 300, 4000])
        key = torch.arange(0, 5001, 7)
        buckets = bias.buckets(query, key)
        for i, qp in enumerate(query.tolist()):
            for j, kp in enumerate(key.tolist()):
                assert buckets[i, j].item() == wanted[kp - qp]
    pairs = json.loads((MODEL_GOLDEN / "t5-buckets-32-128.json").read_text())
    module = pt.RelativePositionBias(32, 128, 2, bidirectional=True)
    for pair in pairs["pairs"]:
        bucket = module.buckets([pair["query_pos"]], [pair["key_pos"]])
        assert bucket.item() == pair["bidirectional"]


def test_relative_position_bias_is_a_table_lookup():
    module = pt.RelativePositionBias(
        num_buckets=32, max_distance=128, num_heads=3, bidirectional=False
    )
    assert module.weight.shape == (32, 3) and module.weight.requires_grad
    bias = module(5, 7)  # query positions 0..4, key positions 0..6
    assert bias.shape == (3, 5, 7) and bias.dtype == torch.float32
    buckets = module.buckets(torch.arange(5), torch.arange(7))
    for h in range(3):
        for i in range(5):
            for j in range(7):
                assert bias[h, i, j] == module.weight[buckets[i, j], h]
    # Explicit positions (one decode step at 9 against keys 0..9).
    step = module(torch.tensor([9]), torch.arange(10))
    assert step.shape == (3, 1, 10)
    torch.testing.assert_close(step[:, 0, 9], module.weight[0])  # distance 0
    # Loadable from a T5 state dict's relative_attention_bias.weight.
    table = torch.randn(32, 3)
    module.load_state_dict({"weight": table})
    torch.testing.assert_close(module(2, 2)[:, 1, 0], table[1])  # key 1 back


def test_relative_position_bias_gradient_counts_bucket_uses():
    module = pt.RelativePositionBias(16, 64, 2, bidirectional=True)
    module(6, 9).sum().backward()
    buckets = module.buckets(torch.arange(6), torch.arange(9))
    counts = torch.bincount(buckets.flatten(), minlength=16).float()
    torch.testing.assert_close(module.weight.grad, counts[:, None].expand(16, 2))
    # gradcheck of the module's forward in float64, weight as the input.
    double = pt.RelativePositionBias(16, 64, 2).double()
    weight = torch.randn(16, 2, dtype=torch.float64, requires_grad=True)

    def forward(w):
        return torch.nn.utils.stateless.functional_call(double, {"weight": w}, (4, 5))

    assert forward(weight).dtype == torch.float64
    assert torch.autograd.gradcheck(forward, (weight,))


def test_relative_position_bias_from_a_t5_config_and_bad_input():
    config = {
        "model_type": "t5",
        "d_model": 512,
        "num_heads": 8,
        "num_layers": 6,
        "relative_attention_num_buckets": 32,
        "relative_attention_max_distance": 128,
    }
    module = pt.RelativePositionBias.from_hf_config(config, bidirectional=False)
    assert module.weight.shape == (32, 8) and not module.bidirectional
    with pytest.raises(ValueError, match=r"describe a model with T5"):
        pt.RelativePositionBias.from_hf_config(LLAMA4)
    with pytest.raises(ValueError, match=r"num_heads must be > 0"):
        pt.RelativePositionBias(32, 128, 0)
    with pytest.raises(ValueError):
        pt.RelativePositionBias(2, 128, 4)
    with pytest.raises(
        ValueError, match=r"^\[relative_bias\] query_pos\[0\] must be >= 0, got -1$"
    ):
        pt.RelativePositionBias(32, 128, 4)(torch.tensor([-1]), torch.tensor([0]))
    with pytest.raises(ValueError, match=r"\[relative_bias\] query_pos must have dtype int64"):
        pt.RelativePositionBias(32, 128, 4)(torch.tensor([0.5]), torch.tensor([0]))


def test_alibi_takes_a_posenc_alibi_as_numpy_does():
    alibi = posenc.Alibi(6, max_bias=4.0, head_offset=2, shard_heads=3)
    torch.testing.assert_close(
        pt.alibi_slopes(alibi, dtype=torch.float64),
        torch.from_numpy(posenc.alibi_slopes(alibi)),
        rtol=0,
        atol=0,
    )
    queries = torch.tensor([0, 3, 5])
    expected = posenc.alibi_bias(alibi, queries.numpy())
    torch.testing.assert_close(pt.alibi_bias(alibi, queries), torch.from_numpy(expected))
    with pytest.raises(ValueError, match=r"\[alibi\] max_bias, head_offset, shard_heads must be"):
        pt.alibi_slopes(alibi, max_bias=2.0)


def test_names_of_an_earlier_release_warn_and_point_to_the_new_ones():
    for old, new in (
        ("KvCache", "KVCache"),
        ("KvCacheBatch", "KVCacheBatch"),
        ("qwen_vl_rope_index", "get_rope_index"),
    ):
        with pytest.warns(DeprecationWarning, match=f"posenc.{old} is now posenc.{new}"):
            assert getattr(posenc, old) is getattr(posenc, new)
    with pytest.raises(AttributeError):
        posenc.no_such_name  # noqa: B018
