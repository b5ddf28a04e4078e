"""posenc.transformers: posenc's attention as a Hugging Face transformers backend.

Example::

    import posenc.transformers
    from transformers import AutoModelForCausalLM

    posenc.transformers.register()
    model = AutoModelForCausalLM.from_pretrained(name, attn_implementation="posenc")
    other.set_attn_implementation("posenc")        # a model already loaded

``register()`` adds ``"posenc"`` to transformers' ``AttentionInterface`` (the
attention) and ``AttentionMaskInterface`` (the mask the model builds: SDPA's
boolean one, or None where SDPA would rely on ``is_causal``). The model keeps
its own code, RoPE included; ``attention_forward`` hands the rotated q, k and v
to ``posenc.torch.attention``: on CPU float32 and bfloat16 tensors posenc's
fused kernel, forward and backward (docs/PYTHON.md).

The 4-D mask ``[batch, 1 or heads, q_tokens, kv_tokens]`` (boolean, True: seen;
or additive, 0: seen, -inf or the dtype's minimum: not) becomes what posenc's
attention takes: each query row's seen keys must be one interval [lo, hi) of
key indices, and the rows of one call must follow one rule, lo = max(begin,
hi - window) with a first key ``begin`` per batch row and one ``window`` (0:
none). Keys are given positions 1 .. kv_tokens and each query the position hi,
so that the causal rule (key position <= query position) ends the interval at
hi, the window rule starts it at hi - window, the padding mask at begin; a row
that sees no key gets position 0 and zeros, as posenc and SDPA give such rows
(eager attention gives them the mean of every value). Causal masks, left or
right padding, sliding windows, bidirectional masks and static caches fit one
call; masks whose first key changes from stretch to stretch of queries (chunked
attention, packed sequences) run one call per stretch, in which the first key
is fixed. A row whose seen keys are not one interval, masks that differ between
heads and additive masks holding other values than 0 and -inf raise
``posenc.Error`` naming what does not fit: never a silent approximation.

Also taken from the model's call: ``scaling``; ``softcap`` (Gemma 2's
``attn_logit_softcapping``); ``s_aux`` or ``sinks`` (gpt-oss's learned sink
logits, one per head, with their gradient); grouped KV heads as they come.
``dropout`` > 0 in training, ``position_bias`` and ``alibi`` tensors and a
paged cache are refused (posenc's attention has no dropout and adds no
arbitrary bias).
"""

import torch
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from posenc import _core
from posenc.torch import _masks, attention

__all__ = ["NAME", "attention_forward", "register"]

NAME = "posenc"
_FUNCTION = "posenc.transformers.attention_forward"


def register():
    """Makes ``attn_implementation="posenc"`` available to every transformers
    model (from_pretrained, from_config, set_attn_implementation). Calling it
    again changes nothing."""
    AttentionInterface.register(NAME, attention_forward)
    AttentionMaskInterface.register(NAME, sdpa_mask)


def _error(name, rule, value):
    return _core.Error(f"[{_FUNCTION}] {name} must {rule}, got {value}")


def _seen_keys(attention_mask, batch, q_tokens, kv_tokens):
    """The 4-D mask as a bool tensor [batch, q_tokens, kv_tokens] (True:
    seen), its heads folded when they agree, cut to the keys as SDPA cuts
    it."""
    mask = attention_mask
    if not isinstance(mask, torch.Tensor):
        raise _error(
            "attention_mask",
            "be None or a torch.Tensor (not a flex BlockMask)",
            type(mask).__name__,
        )
    if (
        mask.dim() != 4
        or mask.shape[0] not in (1, batch)
        or mask.shape[2] != q_tokens
        or mask.shape[3] < kv_tokens
    ):
        raise _error(
            "attention_mask.shape",
            f"be [{batch} or 1, 1 or heads, {q_tokens}, at least {kv_tokens}] (batch, heads, "
            "q_tokens, kv_tokens)",
            tuple(mask.shape),
        )
    mask = mask[..., :kv_tokens]
    if mask.dtype != torch.bool:
        if not mask.is_floating_point():
            raise _error("attention_mask", "be bool or floating (additive)", mask.dtype)
        seen, valid = _masks.additive_seen(mask)
        if not bool(valid.all()):
            raise _error(
                "attention_mask",
                "hold only 0 (seen) and -inf or the dtype's minimum (not seen): posenc adds "
                "no other bias",
                "other values",
            )
        mask = seen
    if mask.shape[1] > 1:
        if not bool((mask == mask[:, :1]).all()):
            raise _error("attention_mask", "be the same for every head", "masks per head")
    return mask[:, 0].expand(batch, -1, -1)


def _key_intervals(seen):
    """(lo, hi, any): each row's seen keys as the interval [lo, hi) of key
    indices, from a bool mask [batch, q_tokens, kv_tokens]; any[b, i] is False
    for a row that sees no key. A row whose seen keys are not one interval
    raises posenc.Error naming it."""
    lo, hi, interval = _masks.row_intervals(seen)
    if not bool(interval.all()):
        b, i = (int(x) for x in torch.nonzero(~interval)[0])
        row = torch.nonzero(seen[b, i]).flatten().tolist()
        raise _error(
            f"attention_mask[{b}, :, {i}]",
            "see one interval of keys (posenc's attention takes causal, window and padding "
            "bounds, not holes)",
            f"keys {row}",
        )
    return lo, hi, hi > lo


def _rule(lo, hi, any_key):
    """(begin [batch], window) with lo = max(begin, hi - window) (window 0:
    lo = begin) on every row that sees a key, or None when no such pair
    exists."""
    big = torch.iinfo(lo.dtype).max
    begin = torch.where(any_key, lo, big).amin(-1, keepdim=True)
    begin = torch.where(begin == big, 0, begin)
    bitten = any_key & (lo > begin)  # rows the window starts, not the padding
    widths = torch.unique((hi - lo)[bitten])
    if widths.numel() > 1:
        return None
    window = int(widths[0]) if widths.numel() else 0
    expect = begin.expand_as(lo) if window == 0 else torch.maximum(begin, hi - window)
    if not bool((~any_key | (lo == expect)).all()):
        return None
    return begin.squeeze(-1), window


def _stretches(lo, any_key):
    """Query ranges [(start, stop)] within which each batch row's first seen
    key stays the same (rows that see no key join any stretch)."""
    # A row that sees no key takes the lo of the last row before it that sees one, so that it
    # never starts a stretch.
    rows = torch.arange(lo.shape[1]).expand_as(lo)
    last = torch.where(any_key, rows, 0).cummax(-1).values
    filled = lo.gather(-1, last)
    same = filled[:, 1:] == filled[:, :-1]
    starts = [0] + [int(i) + 1 for i in torch.nonzero(~same.all(0)).flatten()]
    return list(zip(starts, starts[1:] + [lo.shape[1]]))


def _attend(q, k, v, lo, hi, any_key, begin, window, options):
    """One posenc call on tokens-first views: keys at positions 1 .. kv,
    queries at hi (0 when they see nothing), the padding as an interval
    mask only when some batch row starts after key 0."""
    kv_tokens = k.shape[-3]
    key_positions = torch.arange(1, kv_tokens + 1)
    query_positions = torch.where(any_key, hi, 0)
    padding = None
    if bool((begin > 0).any()):
        padding = key_positions[None, :] > begin[:, None]
    return attention(
        q,
        k,
        v,
        query_positions,
        key_positions,
        causal=True,
        window=window,
        attention_mask=padding,
        qkv_format="bshd",
        **options,
    )


def _masked_attention(q, k, v, seen, options):
    lo, hi, any_key = _key_intervals(seen)
    rule = _rule(lo, hi, any_key)
    if rule is not None:
        return _attend(q, k, v, lo, hi, any_key, *rule, options)
    parts = []
    for start, stop in _stretches(lo, any_key):
        # Within a stretch each batch row's first key is fixed: begin is that key, no window.
        part = (lo[:, start:stop], hi[:, start:stop], any_key[:, start:stop])
        parts.append(_attend(q[:, start:stop], k, v, *part, *_rule(*part), options))
    return torch.cat(parts, dim=1)


def attention_forward(
    module,
    query,
    key,
    value,
    attention_mask,
    dropout=0.0,
    scaling=None,
    is_causal=None,
    softcap=None,
    s_aux=None,
    sinks=None,
    sliding_window=None,
    position_bias=None,
    alibi=None,
    cache=None,
    **kwargs,
):
    """transformers' attention function for ``attn_implementation="posenc"``:
    query [batch, heads, q_tokens, d], key and value [batch, kv_heads,
    kv_tokens, d] (rotated by the model) -> ([batch, q_tokens, heads, dv],
    None). See the module's docstring for the mask and the options."""
    if dropout and getattr(module, "training", False):
        raise _error(
            "dropout",
            "be 0 in training (posenc's attention has no dropout; set the "
            "config's attention_dropout to 0 or use another attn_implementation)",
            dropout,
        )
    for name, given in (("position_bias", position_bias), ("alibi", alibi)):
        if given is not None:
            raise _error(name, "be None (posenc adds no arbitrary bias tensor)", "a tensor")
    if cache is not None:
        raise _error("cache", "be None (no paged cache)", type(cache).__name__)
    if s_aux is not None and sinks is not None:
        raise _error("s_aux and sinks", "not both be given", "both")
    options = dict(
        scale=None if scaling is None else float(scaling),
        softcap=float(softcap or 0.0),
        sinks=s_aux if s_aux is not None else sinks,
    )
    q, k, v = (t.transpose(1, 2) for t in (query, key, value))  # tokens first, no copy
    if attention_mask is not None:
        seen = _seen_keys(attention_mask, q.shape[0], q.shape[1], k.shape[1])
        return _masked_attention(q, k, v, seen, options), None
    # No mask: what SDPA does then. Causal (unless the module says otherwise) with the queries
    # at the first keys (is_causal's top-left alignment, which is how a model's mask builder
    # skips the mask of an empty static cache's prefill); one query sees every key.
    causal = getattr(module, "is_causal", True) if is_causal is None else is_causal
    if causal and q.shape[1] > 1:
        positions = torch.arange(k.shape[1])
        return attention(
            q,
            k,
            v,
            positions[: q.shape[1]],
            positions,
            causal=True,
            window=sliding_window or 0,
            qkv_format="bshd",
            **options,
        ), None
    return attention(q, k, v, qkv_format="bshd", **options), None
