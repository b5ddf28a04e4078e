"""Real transformers model classes with attn_implementation="posenc" (posenc.transformers)
against the model's own attention: "sdpa", or "eager" where the model offers no SDPA (Gemma 2 and
gpt-oss: soft-capping and sinks). Pinned release: transformers 5.23.0 (TRANSFORMERS_VERSION).

Each model is its published config shrunk (small hidden size, 2-4 layers, a tiny vocabulary,
windows and context lengths cut so that they bite within a few tokens) with random weights
(seeded). For each: logits in float32 and bfloat16 on a left-padded batch (non-pad positions),
greedy generate() of 32 new tokens, one training step's gradients of every parameter. The model
keeps its own RoPE; posenc does the attention.
"""

import copy
import json
import pathlib

import pytest
import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM, Qwen2VLForConditionalGeneration
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import (
    and_masks,
    causal_mask_function,
    chunked_causal_mask_function,
    packed_sequence_mask_function,
    sdpa_mask,
    sliding_window_causal_mask_function,
)

import posenc
import posenc.transformers as ptf

TRANSFORMERS_VERSION = "5.23.0"
CONFIGS = pathlib.Path(__file__).resolve().parents[2] / "tests" / "configs"

ptf.register()

# The shrink every model gets: 64 wide, 2 layers, head_dim 16, a 128-token vocabulary. The
# initializer range is 0.1 (published: 0.02) so that random q.k scores spread over a few units
# and attention is far from uniform: a wrong mask or a missing softcap or sink shows in the logits.
SMALL = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    head_dim=16,
    vocab_size=128,
    initializer_range=0.1,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=0,
)


def _published(name):
    with open(CONFIGS / name) as f:
        return json.load(f)


def _config(fields, **shrunk):
    fields = dict(fields, **SMALL)
    fields.update(shrunk)
    return AutoConfig.for_model(fields.pop("model_type"), **fields)


def llama31():
    # tests/configs/llama3.1-8b.json (meta-llama/Llama-3.1-8B: llama3 RoPE, 32/8 heads): heads
    # 4/1 keep the GQA group of 4.
    return _config(_published("llama3.1-8b.json"), num_attention_heads=4, num_key_value_heads=1)


def qwen25():
    # tests/configs/qwen2.5-7b-instruct-yarn.json (Qwen/Qwen2.5-7B-Instruct with the model card's
    # YaRN snippet, 28/4 heads): heads 4/2.
    return _config(
        _published("qwen2.5-7b-instruct-yarn.json"), num_attention_heads=4, num_key_value_heads=2
    )


def gemma2():
    # google/gemma-2-2b-it's config.json (transformers 4.42.4; 8/4 heads, head_dim 256,
    # query_pre_attn_scalar 256, attn_logit_softcapping 50, final_logit_softcapping 30,
    # sliding_window 4096 on every other layer, the "hybrid" static cache), written here from
    # the published file: heads 4/2, head_dim 16 with query_pre_attn_scalar 16, window 6. The
    # softcap is 5 (published 50) so that the shrunk model's scores, which stay within a few
    # units, are actually capped.
    published = dict(
        model_type="gemma2",
        attention_bias=False,
        attention_dropout=0.0,
        attn_logit_softcapping=50.0,
        cache_implementation="hybrid",
        final_logit_softcapping=30.0,
        hidden_activation="gelu_pytorch_tanh",
        max_position_embeddings=8192,
        query_pre_attn_scalar=256,
        rms_norm_eps=1e-06,
        rope_theta=10000.0,
        sliding_window=4096,
    )
    return _config(
        published,
        num_attention_heads=4,
        num_key_value_heads=2,
        query_pre_attn_scalar=16,
        sliding_window=6,
        attn_logit_softcapping=5.0,
    )


def gemma3():
    # google/gemma-3-4b-it's text_config (gemma3_text: 8/4 heads, head_dim 256, sliding_window
    # 1024 on five layers of six, local RoPE theta 1e4, global theta 1e6 with linear factor 8,
    # query_pre_attn_scalar 256, no softcaps), written here from the published file: heads 4/2,
    # head_dim 16, window 6, 4 layers typed as the published pattern's last four (3 sliding, 1
    # full).
    published = dict(
        model_type="gemma3_text",
        attention_bias=False,
        attention_dropout=0.0,
        attn_logit_softcapping=None,
        final_logit_softcapping=None,
        hidden_activation="gelu_pytorch_tanh",
        max_position_embeddings=131072,
        query_pre_attn_scalar=256,
        rms_norm_eps=1e-06,
        rope_local_base_freq=10000.0,
        rope_scaling={"factor": 8.0, "rope_type": "linear"},
        rope_theta=1000000.0,
        sliding_window=1024,
        sliding_window_pattern=6,
    )
    return _config(
        published,
        num_attention_heads=4,
        num_key_value_heads=2,
        query_pre_attn_scalar=16,
        sliding_window=6,
        num_hidden_layers=4,
        layer_types=["sliding_attention"] * 3 + ["full_attention"],
    )


PHI3_ORIGINAL = 16


def phi3():
    # tests/configs/phi3-128k-longrope.json (microsoft/Phi-3-mini-128k-instruct, April 2024:
    # LongRoPE, 48 short and long factors, original_max_position_embeddings 4096 of 131072,
    # 32/32 heads): heads 4/4, head_dim 16 with every sixth factor (8 each), 16 original
    # positions of 512 (the published ratio 32, so the same attention factor), so that a prompt
    # of 12 tokens runs the short factors and one of 24 the long ones. Its "type": "su" is
    # written "longrope" (later revisions of the file say so; transformers 5.23.0 refuses "su"
    # without original_max_position_embeddings inside rope_scaling).
    fields = _published("phi3-128k-longrope.json")
    scaling = dict(fields["rope_scaling"], type="longrope")
    for key in ("short_factor", "long_factor"):
        scaling[key] = scaling[key][::6]
    fields["rope_scaling"] = scaling
    return _config(
        fields,
        num_attention_heads=4,
        num_key_value_heads=4,
        original_max_position_embeddings=PHI3_ORIGINAL,
        max_position_embeddings=512,
    )


def mistral():
    # mistralai/Mistral-7B-v0.1's config.json (32/8 heads, sliding_window 4096, theta 1e4),
    # written here from the published file: heads 4/1, window 6 (shorter than the prompts).
    published = dict(
        model_type="mistral",
        max_position_embeddings=32768,
        rms_norm_eps=1e-05,
        rope_theta=10000.0,
        sliding_window=4096,
    )
    return _config(published, num_attention_heads=4, num_key_value_heads=1, sliding_window=6)


def gpt_oss():
    # tests/configs/gpt-oss-20b.json (openai/gpt-oss-20b: yarn RoPE, 64/8 heads, head_dim 64,
    # learned sinks; the class's layer_types alternate sliding (128) and full, 32 experts, 4 per
    # token): heads 4/2, window 6, 4 experts, 2 per token.
    return _config(
        _published("gpt-oss-20b.json"),
        num_attention_heads=4,
        num_key_value_heads=2,
        sliding_window=6,
        num_local_experts=4,
        num_experts_per_tok=2,
    )


def smollm3():
    # tests/configs/real/smollm3-3b-base.json (HuggingFaceTB/SmolLM3-3B-Base: every fourth layer
    # NoPE, 16/4 heads, 36 layers): heads 4/1, 4 layers (the fourth NoPE).
    return _config(
        _published("real/smollm3-3b-base.json"),
        num_attention_heads=4,
        num_key_value_heads=1,
        num_hidden_layers=4,
        pretraining_tp=1,
    )


def qwen2_vl():
    # tests/configs/real/qwen2_vl-qwen2-vl-7b-instruct.json (Qwen/Qwen2-VL-7B-Instruct: M-RoPE
    # sections 16/24/24 of head_dim 128, 28/4 heads): heads 4/2, head_dim 16 with sections 2/3/3,
    # a one-block vision tower of width 32; its token ids moved into the 128-token vocabulary.
    # Text-only input: the vision tower is built but not run.
    fields = _published("real/qwen2_vl-qwen2-vl-7b-instruct.json")
    fields["rope_scaling"] = dict(fields["rope_scaling"], mrope_section=[2, 3, 3])
    fields["vision_config"] = dict(
        fields["vision_config"], depth=1, embed_dim=32, num_heads=2, hidden_size=64
    )
    ids = dict(
        vision_start_token_id=120,
        vision_end_token_id=121,
        vision_token_id=122,
        image_token_id=123,
        video_token_id=124,
    )
    fields.update(ids)
    return _config(fields, num_attention_heads=4, num_key_value_heads=2)


def llama4():
    # tests/configs/real/llama4-scout-17b-16e.json's text_config (meta-llama/Llama-4-Scout-17B-16E:
    # chunked attention of 8192 on the RoPE layers, every fourth layer NoPE with attention
    # temperature tuning from floor_scale 8192, 16 experts, 1 per token, 40/8 heads): heads
    # 4/1, 4 layers (the fourth NoPE), chunks of 4, floor_scale 4, 4 experts; its printed
    # attn_temperature_tuning 4 written true (the class takes a bool; later files say true).
    fields = dict(_published("real/llama4-scout-17b-16e.json")["text_config"])
    return _config(
        fields,
        num_attention_heads=4,
        num_key_value_heads=1,
        num_hidden_layers=4,
        no_rope_layers=[1, 1, 1, 0],
        moe_layers=[0, 1, 2, 3],
        num_local_experts=4,
        intermediate_size_mlp=128,
        attention_chunk_size=4,
        floor_scale=4,
        attn_temperature_tuning=True,
    )


MODELS = {
    "llama3.1": (llama31, "sdpa"),
    "qwen2.5": (qwen25, "sdpa"),
    "gemma2": (gemma2, "eager"),
    "gemma3": (gemma3, "sdpa"),
    "phi3": (phi3, "sdpa"),
    "mistral": (mistral, "sdpa"),
    "gpt-oss": (gpt_oss, "eager"),
    "smollm3": (smollm3, "sdpa"),
    "qwen2-vl": (qwen2_vl, "sdpa"),
    "llama4": (llama4, "sdpa"),
}

_BUILT = {}


def model_of(name):
    """The float32 model (built once, seeded), in eval mode and on its reference attention."""
    if name not in _BUILT:
        make, reference = MODELS[name]
        config = make()
        torch.manual_seed(0)
        if config.model_type == "qwen2_vl":
            model = Qwen2VLForConditionalGeneration._from_config(
                config, attn_implementation=reference, dtype=torch.float32
            )
        else:
            model = AutoModelForCausalLM.from_config(
                config, attn_implementation=reference, dtype=torch.float32
            )
        if hasattr(config, "num_local_experts"):
            # gpt-oss's sinks start near 0 (std 0.02): spread them so that they weigh.
            with torch.no_grad():
                for module in model.modules():
                    if hasattr(module, "sinks"):
                        module.sinks.normal_(0.0, 1.0)
        _BUILT[name] = model.eval()
    return _BUILT[name]


def batch(length=12):
    """A left-padded batch of 3 rows: length, length - 4 and 5 tokens (ids 3..127)."""
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(3, 128, (3, length), generator=generator)
    mask = torch.ones_like(ids)
    mask[1, :4] = 0
    mask[2, : length - 5] = 0
    ids = ids.masked_fill(mask == 0, 0)
    return ids, mask


def run(model, impl, ids, mask, **kwargs):
    """The model's output on impl; position ids as generate() makes them for a padded batch
    (Qwen2-VL makes its own M-RoPE positions from the mask)."""
    model.set_attn_implementation(impl)
    if not isinstance(model, Qwen2VLForConditionalGeneration):
        kwargs["position_ids"] = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)
    return model(input_ids=ids, attention_mask=mask, **kwargs)


def reference_of(name):
    return MODELS[name][1]


PROMPTS = [(name, 12) for name in MODELS] + [("phi3", 24)]  # Phi-3 past its 16 positions too
PROMPT_IDS = [f"{name}-{length}" for name, length in PROMPTS]


def test_pinned_release():
    assert transformers.__version__ == TRANSFORMERS_VERSION


@pytest.mark.parametrize("name, length", PROMPTS, ids=PROMPT_IDS)
def test_logits_float32(name, length):
    model = model_of(name)
    ids, mask = batch(length)
    with torch.no_grad():
        expect = run(model, reference_of(name), ids, mask).logits
        got = run(model, "posenc", ids, mask).logits
    kept = mask.bool()
    # float32: the two attentions sum in different orders, each rounding to float32 (2^-24
    # relative); through 2-4 layers the logits (of size ~1-10) move by ~1e-6. 2e-5 of the
    # largest logit is ~100 float32 ulps: far below any error of a wrong key or a lost cap.
    scale = expect[kept].abs().max()
    assert (got[kept] - expect[kept]).abs().max() <= 2e-5 * scale


@pytest.mark.parametrize("name, length", PROMPTS, ids=PROMPT_IDS)
def test_logits_bfloat16(name, length):
    ids, mask = batch(length)
    kept = mask.bool()
    low = copy.deepcopy(model_of(name)).to(torch.bfloat16)
    with torch.no_grad():
        expect = run(low, reference_of(name), ids, mask).logits[kept].float()
        got = run(low, "posenc", ids, mask).logits[kept].float()
        exact = run(low.float(), reference_of(name), ids, mask).logits[kept]
    # bfloat16 keeps 8 significant bits (2^-9 relative rounding): each linear layer and each
    # attention output rounds, so both bfloat16 runs sit ~1% of the logit scale away from the
    # float32 run of the same (bfloat16-rounded) weights, which rounds 2^16 times finer and
    # stands for the exact values (not float64: gpt-oss's experts take no float64, and Gemma 2's
    # eager attention turns float64's mask minimum into -inf in its float32 softmax, then NaN).
    # posenc's attention computes in float32 and rounds once: it must be as close to the
    # float32 run as the reference attention is (25% slack for the rounding noise both share),
    # and within 5% of the logit scale of the reference run.
    error, reference_error = (got - exact).abs().mean(), (expect - exact).abs().mean()
    assert error <= 1.25 * reference_error
    assert (got - expect).abs().max() <= 0.05 * exact.abs().max()


@pytest.mark.parametrize("name", list(MODELS))
def test_generate(name):
    model = model_of(name)
    ids, mask = batch(12)
    settings = dict(max_new_tokens=32, min_new_tokens=32, do_sample=False, pad_token_id=0)
    tokens = {}
    for impl in (reference_of(name), "posenc"):
        model.set_attn_implementation(impl)
        tokens[impl] = model.generate(input_ids=ids, attention_mask=mask, **settings)
    expect, got = tokens.values()
    assert got.shape == (3, 12 + 32)
    assert torch.equal(got, expect)


@pytest.mark.parametrize("name", list(MODELS))
def test_training_step(name):
    model = copy.deepcopy(model_of(name)).train()
    ids, mask = batch(12)
    # A label counts where both it and the token that predicts it are real: the last pad
    # position, which sees no key, predicts nothing (posenc and SDPA give such a row zeros,
    # eager attention the mean of every value; test_rows_without_keys).
    predicted = mask.bool() & torch.nn.functional.pad(mask.bool(), (1, -1))
    labels = ids.masked_fill(~predicted, -100)
    grads = {}
    for impl in (reference_of(name), "posenc"):
        model.zero_grad()
        run(model, impl, ids, mask, labels=labels).loss.backward()
        grads[impl] = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    expect, got = grads.values()
    assert got.keys() == expect.keys()
    assert len(got) == sum(1 for p in model.parameters() if p.requires_grad) - unused(name)
    for key in expect:
        # float32 gradients through 2-4 layers: 1e-4 of each tensor's norm is ~1000 ulps of
        # its largest entries, far below what a wrong mask, cap or sink gradient changes.
        bound = 1e-4 * expect[key].norm() + 1e-9
        assert (got[key] - expect[key]).norm() <= bound, key


def unused(name):
    """Parameters that get no gradient from a text-only batch (Qwen2-VL's vision tower)."""
    if name != "qwen2-vl":
        return 0
    return sum(1 for p in model_of(name).model.visual.parameters())


def test_generate_static_cache():
    # A pre-allocated cache: the keys include empty slots, which the model's mask hides.
    model = model_of("llama3.1")
    ids, mask = batch(12)
    settings = dict(
        max_new_tokens=32,
        min_new_tokens=32,
        do_sample=False,
        pad_token_id=0,
        cache_implementation="static",
    )
    tokens = []
    for impl in ("sdpa", "posenc"):
        model.set_attn_implementation(impl)
        tokens.append(model.generate(input_ids=ids, attention_mask=mask, **settings))
    assert torch.equal(tokens[1], tokens[0])


def test_rows_without_keys():
    # The pad positions of a left-padded batch see no key: posenc gives them zeros, as SDPA
    # does (eager attention gives them the mean of every value instead), so the logits agree
    # with SDPA's at every position, pads included.
    model = model_of("llama3.1")
    ids, mask = batch(12)
    with torch.no_grad():
        expect = run(model, "sdpa", ids, mask).logits
        got = run(model, "posenc", ids, mask).logits
    torch.testing.assert_close(got, expect, rtol=0, atol=2e-5 * expect.abs().max().item())


class _Layer(torch.nn.Module):
    """What attention functions read of the model's attention module."""

    def __init__(self, groups=2):
        super().__init__()
        self.num_key_value_groups = groups
        self.is_causal = True


def _qkv(batch_size, q_tokens, kv_tokens, heads=4, groups=2, dim=8):
    generator = torch.Generator().manual_seed(2)
    q = torch.randn(batch_size, heads, q_tokens, dim, generator=generator)
    k, v = (
        torch.randn(batch_size, heads // groups, kv_tokens, dim, generator=generator)
        for _ in range(2)
    )
    return q, k, v


PADDING = torch.tensor([[1] * 10, [0, 0, 0] + [1] * 7, [0] * 6 + [1] * 4], dtype=torch.bool)
MASKS = {
    # name: the mask builder's arguments (q, kv, offsets, pattern, padding)
    "causal, left padding": dict(q_length=10, kv_length=10, attention_mask=PADDING),
    "causal, right padding": dict(q_length=10, kv_length=10, attention_mask=PADDING.flip(-1)),
    "sliding window 3, left padding": dict(
        q_length=10,
        kv_length=10,
        attention_mask=PADDING,
        mask_function=sliding_window_causal_mask_function(3),
    ),
    "chunks of 4, left padding": dict(
        q_length=10,
        kv_length=10,
        attention_mask=PADDING,
        mask_function=chunked_causal_mask_function(4, torch.tensor([0, 3, 6])),
    ),
    "decode step": dict(q_length=1, kv_length=10, q_offset=9, kv_offset=0, attention_mask=PADDING),
    "static cache, 3 new tokens": dict(
        q_length=3, kv_length=16, q_offset=7, attention_mask=PADDING, allow_is_causal_skip=False
    ),
    "sliding window cache": dict(
        q_length=2,
        kv_length=5,
        q_offset=8,
        kv_offset=5,
        attention_mask=PADDING,
        mask_function=sliding_window_causal_mask_function(4),
    ),
    "packed sequences": dict(  # create_causal_mask turns the skip off for them
        q_length=10,
        kv_length=10,
        allow_is_causal_skip=False,
        mask_function=and_masks(
            causal_mask_function,
            packed_sequence_mask_function(torch.tensor([[0, 0, 0, 1, 1, 1, 1, 2, 2, 2]] * 3)),
        ),
    ),
    "bidirectional, padding": dict(
        q_length=10, kv_length=10, attention_mask=PADDING, mask_function=lambda b, h, q, kv: q >= 0
    ),
    # Any interval per row is taken: here the first key moves back and forth (one call per row).
    "first key 0, 1, 0, 1, ...": dict(
        q_length=10,
        kv_length=10,
        allow_is_causal_skip=False,
        mask_function=lambda b, h, q, kv: (kv >= q % 2) & (kv <= q),
    ),
}


# Where the builder leaves the mask to SDPA's is_causal it returns None, and posenc does what
# SDPA does then: causal queries at the first keys, a single query sees every key.
SKIPPED = {
    "no padding": dict(q_length=10, kv_length=10),
    "decode step, no padding": dict(q_length=1, kv_length=10, q_offset=9),
    "prefill of an empty static cache": dict(
        q_length=4, kv_length=16, attention_mask=torch.arange(16).expand(3, 16) < 4
    ),
}


@pytest.mark.parametrize("mask_name", list(MASKS) + list(SKIPPED))
def test_masks_as_sdpa_reads_them(mask_name):
    # The masks transformers' builders make (sdpa_mask, as registered for "posenc"): posenc
    # against SDPA, every row (a row that sees no key: zeros in both).
    arguments = MASKS.get(mask_name) or SKIPPED[mask_name]
    mask = sdpa_mask(batch_size=3, **arguments)
    assert (mask is None) == (mask_name in SKIPPED)
    q, k, v = _qkv(3, arguments["q_length"], arguments["kv_length"])
    layer = _Layer()
    expect, _ = sdpa_attention_forward(layer, q, k, v, mask)
    got, weights = ptf.attention_forward(layer, q, k, v, mask)
    assert weights is None
    torch.testing.assert_close(got, expect, rtol=0, atol=2e-6)


def _refused(match, mask, layer=None, **options):
    q, k, v = _qkv(3, 10, 10)
    with pytest.raises(posenc.Error, match=match):
        ptf.attention_forward(layer or _Layer(), q, k, v, mask, **options)


def test_masks_posenc_cannot_express_are_refused():
    causal = sdpa_mask(batch_size=3, q_length=10, kv_length=10, allow_is_causal_skip=False)
    holed = causal.clone()
    holed[1, 0, 6, 2] = False  # row 6 of batch row 1 sees keys 0, 1, 3 .. 6
    _refused(
        r"attention_mask\[1, :, 6\] must see one interval of keys .* got keys "
        r"\[0, 1, 3, 4, 5, 6\]",
        holed,
    )
    per_head = causal.expand(3, 4, 10, 10).clone()
    per_head[:, 1, 5, 0] = False
    _refused("must be the same for every head", per_head)
    additive = torch.zeros(3, 1, 10, 10).masked_fill(~causal, float("-inf"))
    additive[0, 0, 4, 2] = -1.5  # a bias, not a mask
    _refused("hold only 0 .* and -inf or the dtype's minimum", additive)


def test_the_same_masks_in_eager_form_are_taken():
    # eager's mask: 0 where seen, the dtype's minimum where not; and -inf.
    causal = sdpa_mask(
        batch_size=3, q_length=10, kv_length=10, attention_mask=PADDING, allow_is_causal_skip=False
    )
    q, k, v = _qkv(3, 10, 10)
    expect, _ = ptf.attention_forward(_Layer(), q, k, v, causal)
    for hidden in (torch.finfo(torch.float32).min, float("-inf")):
        additive = torch.zeros(3, 1, 10, 10).masked_fill(~causal, hidden)
        got, _ = ptf.attention_forward(_Layer(), q, k, v, additive)
        torch.testing.assert_close(got, expect, rtol=0, atol=0)


def test_what_posenc_attention_does_not_do_is_refused():
    layer = _Layer().train()
    _refused(r"dropout must be 0 in training .* got 0.1", None, layer, dropout=0.1)
    _refused("position_bias must be None", None, position_bias=torch.zeros(1, 4, 10, 10))
    # A model whose config asks for attention dropout, in training: refused, not ignored.
    config = llama31()
    config.attention_dropout = 0.1
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="posenc").train()
    ids, mask = batch(12)
    with pytest.raises(posenc.Error, match="dropout must be 0 in training"):
        model(input_ids=ids, attention_mask=mask)
    model.eval()  # out of training, the model passes no dropout
    model(input_ids=ids, attention_mask=mask)


def test_register_twice_and_load_with_posenc():
    ptf.register()
    ptf.register()
    assert transformers.AttentionInterface._global_mapping["posenc"] is ptf.attention_forward
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(llama31(), attn_implementation="posenc")
    assert model.config._attn_implementation == "posenc"


def test_qwen2_vl_with_an_image():
    # Qwen2-VL with one 4 x 4-patch image per row (4 tokens after the 2 x 2 merge): M-RoPE's
    # three position streams differ there, and the vision tower's attention (bidirectional,
    # no mask, one call per image) runs on posenc too.
    model = model_of("qwen2-vl")
    ids, mask = batch(12)
    ids, mask = ids[:2].clone(), mask[:2]
    ids[:, 5:11] = torch.tensor([120, 123, 123, 123, 123, 121])  # vision start, image, end
    config = model.config.vision_config
    features = config.in_channels * config.temporal_patch_size * config.patch_size**2
    pixels = torch.randn(2 * 16, features, generator=torch.Generator().manual_seed(3))
    image = dict(
        pixel_values=pixels,
        image_grid_thw=torch.tensor([[1, 4, 4], [1, 4, 4]]),
        mm_token_type_ids=(ids == 123).long(),
    )  # text 0, image 1, as the processor
    kept = mask.bool()
    with torch.no_grad():
        expect = run(model, "sdpa", ids, mask, **image).logits[kept]
        got = run(model, "posenc", ids, mask, **image).logits[kept]
    # As in test_logits_float32.
    assert (got - expect).abs().max() <= 2e-5 * expect.abs().max()
    settings = dict(max_new_tokens=32, min_new_tokens=32, do_sample=False, pad_token_id=0)
    tokens = []
    for impl in ("sdpa", "posenc"):
        model.set_attn_implementation(impl)
        tokens.append(model.generate(input_ids=ids, attention_mask=mask, **image, **settings))
    assert torch.equal(tokens[1], tokens[0])
