"""Attention on torch tensors: attention (posenc's fused kernel with its backward pass, through
posenc's ops, or the PyTorch definition), self_extend_attention and dual_chunk_attention;
posenc.Rope and posenc.Alibi as torch.fx graph arguments."""

import math

import torch
import torch.fx

from posenc import _core
from posenc import _torch_reference as _reference
from posenc.torch import _masks, _ops
from posenc.torch._tensors import (
    _FORMATS,
    _LAYOUTS,
    _PLAIN_TENSORS,
    _check_int,
    _check_tensor,
    _dtype_name,
    _error,
    _float_dtype,
    _numpy,
    _on_kernel,
    _plain,
    _position_range,
    _position_tensor,
    _qkv_format,
    _real_number,
    _records,
    _tokens_first,
)
from posenc.torch.mrope import MultimodalRotaryEmbedding, _rotate_streams, _stream_positions
from posenc.torch.rope import RotaryEmbedding

# The kernel's dtypes; the KV cache stores these.
_ATTENTION_DTYPES = (torch.float32, torch.bfloat16)
# attention() also takes float16 and float64, which run the PyTorch definition.
_ANY_ATTENTION_DTYPES = _ATTENTION_DTYPES + (torch.float16, torch.float64)


def _check_scale(function, scale):
    """scale: None (1 / sqrt(head_dim), the default of every attention call) or a positive
    finite number."""
    if scale is None:
        return
    try:
        value = _real_number(scale)
    except (TypeError, ValueError):
        value = None
    if value is None or not value > 0 or math.isinf(value):
        shown = scale if value is not None else type(scale).__name__
        raise _error(
            function,
            "scale",
            "be None (1 / sqrt(head_dim)) or a positive finite number",
            shown,
        )


def _multi_stream(rope):
    """Whether rope is M-RoPE (a posenc.MRope or a MultimodalRotaryEmbedding)."""
    return isinstance(rope, (_core.MRope, MultimodalRotaryEmbedding))


def _rotated_by_streams(rope, streams, order, views):
    """The tokens-first views (q, k) rotated by M-RoPE at their position streams (streams:
    query's and key's), each Hugging Face's position_ids [streams, *batch, tokens], or
    [*batch, tokens] (text), or None for the token order (order: the call's positions); both
    are checked before either turns."""
    mrope = rope.mrope if isinstance(rope, MultimodalRotaryEmbedding) else rope
    checked = []
    for given, positions, view, name in zip(
        streams, order, views, ("query_positions", "key_positions")
    ):
        if given is None:
            given = positions.expand(view.shape[:-3] + positions.shape[-1:])
        checked.append(_stream_positions("attention", mrope, view, given, name, True, "bshd"))
    return tuple(
        _rotate_streams(mrope, positions, view, None, "bshd")
        for positions, view in zip(checked, views)
    )


def _check_options(scale, window, alibi, rope, causal, function="attention"):
    """What the binding could not convert, named here: pybind11 would list its
    whole signature instead."""
    _check_scale(function, scale)
    if isinstance(window, bool) or not isinstance(window, int) or window < 0:
        raise _error(function, "window", "be an int >= 0 (0: no window)", window)
    if alibi is not None and not isinstance(alibi, _core.Alibi):
        raise _error(function, "alibi", "be None or a posenc.Alibi", type(alibi).__name__)
    if _multi_stream(rope):
        if function != "attention":
            raise _error(
                function,
                "rope",
                "be None, a posenc.Rope or a posenc.torch.RotaryEmbedding (M-RoPE's position "
                "streams are posenc.torch.attention's alone)",
                type(rope).__name__,
            )
    elif rope is not None and not isinstance(rope, (_core.Rope, RotaryEmbedding)):
        raise _error(
            function,
            "rope",
            "be None, a posenc.Rope, a posenc.torch.RotaryEmbedding, or for attention a "
            "posenc.MRope or a posenc.torch.MultimodalRotaryEmbedding",
            type(rope).__name__,
        )
    if not isinstance(causal, bool):
        raise _error(function, "causal", "be a bool", type(causal).__name__)


def _check_softcap_sinks(softcap, sinks, q, num_heads, function="attention"):
    """softcap: a finite number >= 0 (0: off); sinks: None or a floating
    tensor [num_heads] on q's device."""
    try:
        value = _real_number(softcap) if not isinstance(softcap, bool) else None
    except (TypeError, ValueError):
        value = None
    if value is None or not (value >= 0 and math.isfinite(value)):
        shown = softcap if value is not None else type(softcap).__name__
        raise _error(function, "softcap", "be a finite number >= 0 (0: off)", shown)
    if sinks is None:
        return
    if not isinstance(sinks, torch.Tensor):
        raise _error(
            function, "sinks", "be None or a torch.Tensor [num_heads]", type(sinks).__name__
        )
    if not sinks.is_floating_point():
        raise _error(function, "sinks", "have a floating dtype", _dtype_name(sinks.dtype))
    if tuple(sinks.shape) != (num_heads,):
        raise _error(
            function,
            "sinks.shape",
            f"be ({num_heads},) (one logit per query head)",
            tuple(sinks.shape),
        )
    if sinks.device != q.device:
        raise _error(function, "sinks", f"be on q's device ({q.device})", sinks.device)


def _kernel_options(options):
    """The options as the bindings take them: scale 0 for None, the sinks
    as a float32 numpy array (a copy, detached)."""
    sinks = options.get("sinks")
    if sinks is not None:
        sinks = sinks.detach().to(torch.float32).contiguous().numpy()
    return dict(options, scale=options["scale"] or 0.0, sinks=sinks)


def _plain_views(q, k, v, qkv_format, out):
    """q, k, v as posenc's layout for the kernel's direct call: themselves (bshd), their
    transposed views (bhsd, no out=), or None for a call the general path takes."""
    if qkv_format not in _FORMATS or (qkv_format == "bhsd" and out is not None):
        return None
    for t in (q, k, v):
        if type(t) not in _PLAIN_TENSORS or t.dim() < 3:
            return None
    if qkv_format == "bshd":
        return q, k, v
    return q.transpose(-2, -3), k.transpose(-2, -3), v.transpose(-2, -3)


# 0, 1, ...: the default positions' storage, sliced by each call with default positions and
# grown (to twice the longest call so far) when a call needs more, so that a decode loop does
# not build and check a new range each step.
_RANGE = torch.zeros(0, dtype=torch.int64)


def _range_positions(q_tokens, kv_tokens):
    """_aligned_positions as views of _RANGE."""
    global _RANGE
    count = max(q_tokens, kv_tokens)
    if _RANGE.shape[0] < count:
        size = max(count, min(2 * _RANGE.shape[0], _core.MAX_POSITION + 1))
        _RANGE = _position_range("attention", size)
    shift = max(kv_tokens - q_tokens, 0)
    return _RANGE[shift : shift + q_tokens], _RANGE[:kv_tokens]


def _plain_attention_call(q, k, v, qpos, kpos, out, causal, alibi, rope, scale, window):
    """Whether a call can go straight to the kernel: CPU float32 or bfloat16
    q, k, v, explicit int64 positions, a float32 out= or none, plain option
    values, nothing for autograd to record. The library validates the rest
    (shapes, grouping, positions, window) itself; this test keeps a decode
    step's call within microseconds of the kernel."""
    return (
        _plain(q, k, v, qpos, kpos, out)
        and type(qpos) in _PLAIN_TENSORS
        and type(kpos) in _PLAIN_TENSORS
        and qpos.dtype is torch.int64
        and kpos.dtype is torch.int64
        and (q.dtype is torch.float32 or q.dtype is torch.bfloat16)
        and k.dtype is q.dtype
        and v.dtype is q.dtype
        and (out is None or (out.dtype is torch.float32 and not out.requires_grad))
        and type(causal) is bool
        and type(window) is int
        and (alibi is None or type(alibi) is _core.Alibi)
        and (rope is None or type(rope) is _core.Rope)
        and (scale is None or (type(scale) is float and 0.0 < scale < math.inf))
        and not _records(q, k, v)
    )


def _varlen_bounds(function, cu_seqlens, name, total):
    """The segment bounds of FlashAttention's cu_seqlens: int [segments + 1],
    0 first, non-decreasing, total last."""
    if not isinstance(cu_seqlens, torch.Tensor):
        cu_seqlens = torch.as_tensor(cu_seqlens)
    if cu_seqlens.dtype not in (torch.int32, torch.int64) or cu_seqlens.dim() != 1:
        raise _error(
            function,
            name,
            "be a 1-D int32 or int64 tensor [segments + 1]",
            f"{tuple(cu_seqlens.shape)} {_dtype_name(cu_seqlens.dtype)}",
        )
    bounds = [int(b) for b in cu_seqlens.cpu()]
    ok = (
        len(bounds) >= 2
        and bounds[0] == 0
        and bounds[-1] == total
        and all(a <= b for a, b in zip(bounds, bounds[1:]))
    )
    if not ok:
        raise _error(
            function,
            name,
            f"start at 0, never decrease and end at the token count {total}",
            bounds,
        )
    return bounds


def _segments(q, k, v, cu_seqlens_q, cu_seqlens_k):
    """Packed sequences: [(q_begin, q_end, k_begin, k_end)] of each segment
    of q [total_q, heads, d] and k, v [total_k, kv_heads, d]."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 3:
            raise _error(
                "attention",
                f"{name}.shape",
                "be [total_tokens, heads, dim] with cu_seqlens",
                tuple(t.shape),
            )
    q_bounds = _varlen_bounds("attention", cu_seqlens_q, "cu_seqlens_q", q.shape[0])
    k_bounds = (
        q_bounds
        if cu_seqlens_k is None
        else _varlen_bounds("attention", cu_seqlens_k, "cu_seqlens_k", k.shape[0])
    )
    if len(k_bounds) != len(q_bounds):
        raise _error(
            "attention",
            "cu_seqlens_k",
            f"hold as many segments as cu_seqlens_q ({len(q_bounds) - 1})",
            len(k_bounds) - 1,
        )
    return list(zip(q_bounds, q_bounds[1:], k_bounds, k_bounds[1:]))


def _aligned_positions(function, q_tokens, kv_tokens):
    """Default positions: keys 0 .. kv_tokens - 1, queries the last q_tokens
    of them (a decode step's query after its keys)."""
    every = _position_range(function, max(q_tokens, kv_tokens))
    shift = max(kv_tokens - q_tokens, 0)
    return every[shift : shift + q_tokens], every[:kv_tokens]


def _attention_positions(
    function,
    query_positions,
    key_positions,
    q_tokens,
    kv_tokens,
    mask,
    segments,
    per_query=False,
):
    """(query, key) positions as int64 tensors: the given ones (checked
    against the position rule before any work), else the defaults of the
    call's form (aligned, padded batch, or per segment)."""
    if mask is not None:
        defaults = _masks.mask_positions(mask, per_query, q_tokens)
    elif segments is not None:
        per_segment = [
            _aligned_positions(function, qb - qa, kb - ka) for qa, qb, ka, kb in segments
        ]
        defaults = tuple(torch.cat([p[i] for p in per_segment]) for i in (0, 1))
    else:
        defaults = _aligned_positions(function, q_tokens, kv_tokens)
    given = (
        (query_positions, "query_positions"),
        (key_positions, "key_positions"),
    )
    return tuple(
        default if p is None else _position_tensor(function, p, name)
        for default, (p, name) in zip(defaults, given)
    )


def _attend(qs, ks, vs, qp, kp, key_mask, target, kernel, options, records=False):
    """One attention over posenc-layout views: the kernel -> float32, else the PyTorch
    definition -> its compute type. The kernel runs straight from the binding for plain tensors
    that autograd does not record (into target, a float32 view, when given), else through
    posenc's ops (posenc.torch._ops): posenc::attention_forward, whose backward pass is
    posenc::attention_backward, when autograd records, posenc::attention otherwise. key_mask
    (bool [..., 1 or q_tokens, kv_tokens]): the kernel per piece of each batch element
    (_ops._pieces)."""
    if kernel:
        fields = _ops.attention_options(
            options["causal"],
            options["alibi"],
            options["rope"],
            options["scale"],
            options["window"],
            options["softcap"],
        )
        args = (qs, ks, vs, qp, kp, key_mask, options["sinks"], *fields)
        if records:
            return _ops.trained_attention(*args)
        if _plain(qs, ks, vs, qp, kp, key_mask, options["sinks"]):
            return _ops.attention_into(target, *args)
        return _ops.attention(*args)
    device = qs.device
    return _reference.attention(
        qs,
        ks,
        vs,
        qp.to(device),
        kp.to(device),
        key_mask=None if key_mask is None else key_mask.to(device),
        **options,
    )


def attention(
    q,
    k,
    v,
    query_positions=None,
    key_positions=None,
    *,
    causal=False,
    alibi=None,
    rope=None,
    scale=None,
    window=0,
    softcap=0.0,
    sinks=None,
    qkv_format=None,
    attention_mask=None,
    cu_seqlens_q=None,
    cu_seqlens_k=None,
    out_dtype=None,
    out=None,
):
    """Attention with posenc's position rules fused in: the causal mask, sliding window, ALiBi
    and RoPE (applied inside) follow the positions; grouped heads.

    out[i, h] = sum_j softmax_j(scale q'[i, h] . k'[j, g] + bias_h(i, j)) v[j, g], with q' and k'
    rotated at their positions and g = h / (heads / kv_heads) (posenc/attention.h). Default
    positions: keys 0 .. kv_tokens - 1 and queries the last q_tokens of them (a decode step's
    query after its keys; FlashAttention's bottom-right alignment).

    Where it runs: CPU float32 and bfloat16 tensors run posenc's fused kernel (no T x T buffer;
    see posenc.attention for its bfloat16 arithmetic), as posenc's torch ops (posenc::attention,
    and in training posenc::attention_forward and posenc::attention_backward), which
    torch.compile and torch.export see as one node each; plain tensors in eager code reach the
    kernel without the dispatcher. When autograd records (a tensor requires grad), the kernel's
    backward pass runs (FlashAttention-2 style: scores recomputed from a saved log-sum-exp, no
    T x T buffer; deterministic for any thread count); gradients of bfloat16 inputs come back in
    bfloat16, computed in float32. The kernel's backward is not differentiable again (a second
    derivative raises RuntimeError). A padding mask whose kept keys are not one interval runs
    the kernel on those keys at their own positions. Everything else runs the same definition
    in PyTorch operations, differentiable to any order: CUDA and other devices, meta tensors,
    float16 and float64 (which ``torch.autograd.gradcheck`` needs).

    Args:
        q: the queries: float32, bfloat16, float16 or float64.
        k: the keys, of q's dtype.
        v: the values, of q's dtype.
        query_positions: int64 [q_tokens] or [..., q_tokens]; None: the defaults above (or those
            of attention_mask, cu_seqlens_q). With M-RoPE as rope: the queries' position
            streams, Hugging Face's position_ids [3, *batch, tokens] (or [*batch, tokens] for
            text; None: the token order).
        key_positions: int64 [kv_tokens] or [..., kv_tokens]; None: the defaults. With M-RoPE:
            the keys' position streams, as query_positions.
        causal: key j is seen by query i only when key_pos[j] <= query_pos[i].
        alibi: a ``posenc.Alibi``, whose bias -slope[h] * (query_pos[i] - key_pos[j]) joins the
            scores; None: no bias.
        rope: the rotation of q and k inside: a ``posenc.Rope`` or a ``RotaryEmbedding`` (its
            length rule follows the positions), or M-RoPE (a ``posenc.MRope`` or a
            ``MultimodalRotaryEmbedding``): then query_positions and key_positions are its
            position streams, q and k are rotated by them, and the masks and ALiBi follow the
            token order (the default positions). None: q and k as given.
        scale: the score scale, a positive finite number; None: 1 / sqrt(head_dim).
        window: a sliding window W > 0: key j is seen by query i only when query_pos[i] -
            key_pos[j] < W (Mistral's; window_size_left = W - 1); 0: none.
        softcap: > 0 (Gemma 2's attn_logit_softcapping): each scaled score s becomes
            softcap * tanh(s / softcap) before the ALiBi bias and the masks; 0: off.
        sinks: gpt-oss's sinks, a floating tensor [heads] on q's device: one logit per query
            head that joins every row's softmax denominator and adds no value; it may require
            grad (its gradient comes from the kernel's backward pass, or through the PyTorch
            definition). None: none.
        qkv_format: "bshd" (posenc's) or "bhsd" (Hugging Face's: heads before tokens, in and
            out, without a copy); required, no default.
        attention_mask: Hugging Face's padding mask [..., kv_tokens] (1 or True: a token; 0:
            padding), or its 4-D mask [..., 1 or heads, q_tokens, kv_tokens]
            (transformers.masking_utils: boolean, True seen; or additive float, 0 seen, -inf or
            the dtype's lowest value hidden; the same for every head), where each query must see
            one interval of keys (a row that does not is refused, named); q_tokens <= kv_tokens.
            Positions then default as transformers 5.23.0's generate() numbers them: padding
            mask, each token's index among the kept ones (cumsum - 1) and padding 0; 4-D mask, a
            row's tokens are the slots from the first to the last key any query sees, at 0, 1,
            ..., every other slot (padding, a pre-allocated cache's empty slots) at 0, and the
            queries are the keys' slots when there are as many, else the last q_tokens tokens.
            Hidden keys are never seen; a query that sees no key gets zeros. None: no mask.
        cu_seqlens_q: packed sequences as FlashAttention's varlen API takes them: int32 or int64
            [segments + 1], 0 first, non-decreasing, total_q last; segment s holds tokens
            cu_seqlens[s] .. cu_seqlens[s + 1], its positions [total] numbered per segment
            (default: each segment from 0). Only in qkv_format "bshd", without attention_mask.
            None: not packed.
        cu_seqlens_k: the keys' segments, as cu_seqlens_q (as many segments, total_k last); None:
            cu_seqlens_q's. Only with cu_seqlens_q.
        out_dtype: the output's dtype: float32, float64, bfloat16 or float16; None: q's.
        out: a float32 (or bfloat16, float16, float64) tensor of the output's shape to write,
            not requiring grad while autograd records; None: a new tensor.

    Shapes:
        q: [..., q_tokens, heads, head_dim] for "bshd"; [..., heads, q_tokens, head_dim] for
            "bhsd"; [total_q, heads, head_dim] with cu_seqlens_q.
        k: [..., kv_tokens, kv_heads, head_dim], heads before tokens for "bhsd"; [total_k,
            kv_heads, head_dim] with cu_seqlens_q. heads is a multiple of kv_heads.
        v: [..., kv_tokens, kv_heads, value_dim], as k.
        out: [..., q_tokens, heads, value_dim], heads before tokens for "bhsd".

    Returns:
        The output [..., q_tokens, heads, value_dim] ([..., heads, q_tokens, value_dim] for
        "bhsd") in out_dtype (default q's: float32 out for float32 in, bfloat16 for bfloat16),
        or out itself, written.

    Raises:
        posenc.Error: a bad argument (type, dtype, shape, grouping, position, mask, segments,
            option), named, before anything is computed or written.
    """
    views = (
        _plain_views(q, k, v, qkv_format, out)
        if (
            attention_mask is None
            and cu_seqlens_q is None
            and cu_seqlens_k is None
            and out_dtype is None
            and sinks is None
            and type(softcap) is float
            and 0.0 <= softcap < math.inf
        )
        else None
    )
    if views is not None:
        qpos, kpos = query_positions, key_positions
        if qpos is None and kpos is None:
            qpos, kpos = _range_positions(views[0].shape[-3], views[1].shape[-3])
        if _plain_attention_call(*views, qpos, kpos, out, causal, alibi, rope, scale, window):
            result = _core.attention(
                *(_numpy(t) for t in views),
                qpos.numpy(),
                kpos.numpy(),
                causal=causal,
                alibi=alibi,
                rope=rope,
                scale=scale or 0.0,
                window=window,
                softcap=softcap,
                out=None if out is None else out.numpy(),
                bfloat16=q.dtype is torch.bfloat16,
            )
            if out is not None:
                return out
            # float32 from the kernel (allocated by the binding), rounded once for bfloat16.
            result = torch.from_numpy(result)
            result = result if q.dtype is torch.float32 else result.to(q.dtype)
            return result if qkv_format == "bshd" else result.transpose(-2, -3)
    _check_qkv("attention", q, k, v)
    _check_options(scale, window, alibi, rope, causal)
    qkv_format = _qkv_format("attention", qkv_format)
    if out_dtype is None:
        out_dtype = q.dtype
    _float_dtype("attention", "out_dtype", out_dtype)
    if out is not None:
        _check_out("attention", out, q, v)
    if cu_seqlens_q is not None and (attention_mask is not None or qkv_format != "bshd"):
        raise _error(
            "attention",
            "cu_seqlens_q",
            "come without attention_mask, in qkv_format 'bshd' ([total, heads, dim])",
            "with attention_mask or 'bhsd'",
        )
    if cu_seqlens_q is None and cu_seqlens_k is not None:
        raise _error("attention", "cu_seqlens_k", "come with cu_seqlens_q", "alone")
    q_view, k_view, v_view = (
        _tokens_first("attention", name, t, qkv_format)
        for name, t in (("q", q), ("k", k), ("v", v))
    )
    q_tokens, kv_tokens = q_view.shape[-3], k_view.shape[-3]
    _check_softcap_sinks(softcap, sinks, q, q_view.shape[-2])
    mask, per_query = None, False
    if attention_mask is not None:
        mask, per_query = _masks.query_key_mask(
            "attention", attention_mask, k_view.shape[:-3], q_view.shape[-2], q_tokens, kv_tokens
        )
        if q_tokens > kv_tokens:
            raise _error(
                "attention",
                "q.shape",
                f"have at most kv_tokens ({kv_tokens}) tokens with attention_mask",
                q_tokens,
            )
    segments = None
    if cu_seqlens_q is not None:
        segments = _segments(q_view, k_view, v_view, cu_seqlens_q, cu_seqlens_k)
    streams = None
    if _multi_stream(rope):  # the positions are M-RoPE's streams; the masks read token order
        streams, query_positions, key_positions = (query_positions, key_positions), None, None
    qpos, kpos = _attention_positions(
        "attention",
        query_positions,
        key_positions,
        q_tokens,
        kv_tokens,
        mask,
        segments,
        per_query,
    )
    if streams is not None:
        q_view, k_view = _rotated_by_streams(rope, streams, (qpos, kpos), (q_view, k_view))
        rope = None
    if rope is not None and not isinstance(rope, _core.Rope):
        rope = rope.rope_at(qpos, kpos)  # a length rule reads every position of the call
    kernel = q.dtype in _ATTENTION_DTYPES and _on_kernel(q, k, v, qpos, kpos, mask, out, sinks)
    records = _records(q, k, v, sinks)
    options = dict(
        causal=causal,
        alibi=alibi,
        rope=rope,
        window=window,
        scale=scale,
        softcap=float(softcap),
        sinks=sinks,
    )
    if segments is not None:
        result = torch.cat(
            [
                _attend(
                    q_view[qa:qb],
                    k_view[ka:kb],
                    v_view[ka:kb],
                    qpos[qa:qb],
                    kpos[ka:kb],
                    None,
                    None,
                    kernel,
                    options,
                    records,
                )
                for qa, qb, ka, kb in segments
            ]
        )
    else:
        # A float32 out= of the right shape is the kernel's own output, where one kernel call
        # checks the whole batch (positions, shapes, aliasing) before it writes. A key mask runs
        # one call per row: its result is formed apart and copied into out only once complete.
        target = None
        if out is not None and out.dtype == torch.float32 and _plain(out) and mask is None:
            view = _tokens_first("attention", "out", out, qkv_format)
            if view.shape == q_view.shape[:-1] + v_view.shape[-1:] and view.stride(-1) == 1:
                target = view
        result = _attend(q_view, k_view, v_view, qpos, kpos, mask, target, kernel, options, records)
        if target is not None and result is target:
            return out
    if qkv_format == "bhsd":
        result = result.transpose(-2, -3)
    if out is not None:
        return out.copy_(result)
    return result.to(out_dtype)


def _check_out(function, out, q, v):
    """out= of attention, checked before any work: a tensor of q's shape with
    v's value_dim, of a floating dtype, that autograd does not record."""
    _check_tensor(function, "out", out, _ANY_ATTENTION_DTYPES)
    expect = tuple(q.shape[:-1]) + tuple(v.shape[-1:])
    if tuple(out.shape) != expect:
        raise _error(function, "out.shape", f"be {expect}", tuple(out.shape))
    if _records(out):
        raise _error(
            function,
            "out",
            "not require grad while autograd records (out= is written in place)",
            "a tensor that requires grad",
        )


def _check_qkv(function, q, k, v):
    for name, tensor in (("q", q), ("k", k), ("v", v)):
        _check_tensor(function, name, tensor, _ANY_ATTENTION_DTYPES)
    if not (q.dtype == k.dtype == v.dtype):
        raise _error(
            function,
            "k and v",
            f"have q's dtype ({_dtype_name(q.dtype)})",
            f"{_dtype_name(k.dtype)} and {_dtype_name(v.dtype)}",
        )


def self_extend_attention(
    q,
    k,
    v,
    query_positions=None,
    key_positions=None,
    *,
    rope,
    group_size,
    neighbor_window,
    causal=False,
    scale=None,
    window=0,
    qkv_format=None,
    out_dtype=None,
):
    """Self-Extend attention (Jin et al. 2024, arXiv:2401.01325; posenc/self_extend.h): a RoPE
    model reads past its trained context with no training.

    Keys closer than ``neighbor_window`` (W) to the query are scored at their own positions,
    farther ones at grouped positions (keys floor(p / G), queries floor(p / G) + W - floor(W /
    G), G = ``group_size``), one softmax over both. The authors pick the smallest G whose window
    (L0 - W) G + W holds the input (L0 the trained length); docs/SELF_EXTEND.md. Plain CPU
    float32 and bfloat16 tensors run posenc's tiled kernel twice with no T x T buffer;
    everything else (other devices, meta and fake tensors, autograd) the same formula in
    PyTorch operations.

    Args:
        q: the un-rotated query projections: float32, bfloat16, float16 or float64.
        k: the un-rotated key projections, of q's dtype.
        v: the values, of q's dtype.
        query_positions: int64 [q_tokens] or [..., q_tokens]; None: the last q_tokens of the
            keys' (as in ``attention``).
        key_positions: int64 [kv_tokens] or [..., kv_tokens]; None: 0 .. kv_tokens - 1.
        rope: the rotation Self-Extend regroups, a ``posenc.Rope`` or a ``RotaryEmbedding``;
            required.
        group_size: G, an int in [1, 2^32]: keys at distance >= W are scored at floor(p / G).
        neighbor_window: W, an int in [1, 2^32]: keys at distance < W (and, without causal, keys
            ahead of the query) keep their own positions.
        causal: as in ``attention``, in the original positions.
        scale: the score scale, a positive finite number; None: 1 / sqrt(head_dim).
        window: a sliding window in the original positions, as in ``attention``; 0: none.
        qkv_format: "bshd" or "bhsd", as in ``attention``; required, no default.
        out_dtype: the output's dtype: float32, float64, bfloat16 or float16; None: q's.

    Shapes:
        q, k, v: as in ``attention``, without cu_seqlens.

    Returns:
        The output [..., q_tokens, heads, value_dim] ([..., heads, q_tokens, value_dim] for
        "bhsd") in out_dtype.

    Raises:
        posenc.Error: rope missing, group_size or neighbor_window out of range, or a bad
            argument as in ``attention``, named.
    """
    _check_qkv("self_extend", q, k, v)
    if rope is None:
        raise _error("self_extend", "rope", "be given (Self-Extend regroups RoPE positions)", None)
    _check_options(scale, window, None, rope, causal, "self_extend")
    if out_dtype is None:
        out_dtype = q.dtype
    _float_dtype("self_extend", "out_dtype", out_dtype)
    _check_int("self_extend", "group_size", group_size)
    _check_int("self_extend", "neighbor_window", neighbor_window)
    qkv_format = _qkv_format("self_extend", qkv_format)
    q_view, k_view, v_view = (
        _tokens_first("self_extend", name, t, qkv_format)
        for name, t in (("q", q), ("k", k), ("v", v))
    )
    qpos, kpos = _attention_positions(
        "self_extend",
        query_positions,
        key_positions,
        q_view.shape[-3],
        k_view.shape[-3],
        None,
        None,
    )
    if not isinstance(rope, _core.Rope):
        rope = rope.rope_at(qpos, kpos)
    if q.dtype in _ATTENTION_DTYPES and _plain(q, k, v, qpos, kpos) and not _records(q, k, v):
        result = torch.from_numpy(
            _core.self_extend_attention(
                _numpy(q_view),
                _numpy(k_view),
                _numpy(v_view),
                qpos.numpy(),
                kpos.numpy(),
                group_size=group_size,
                neighbor_window=neighbor_window,
                rope=rope,
                causal=causal,
                scale=scale or 0.0,
                window=window,
                bfloat16=q.dtype is torch.bfloat16,
            )
        )
    else:
        if group_size < 1 or neighbor_window < 1:
            raise _error(
                "self_extend",
                "group_size and neighbor_window",
                "be >= 1",
                (group_size, neighbor_window),
            )
        device = q.device
        result = _reference.self_extend_attention(
            q_view,
            k_view,
            v_view,
            qpos.to(device),
            kpos.to(device),
            group_size=group_size,
            neighbor_window=neighbor_window,
            rope=rope,
            causal=causal,
            scale=scale,
            window=window,
        )
    if qkv_format == "bhsd":
        result = result.transpose(-2, -3)
    return result.to(out_dtype)


torch.fx.wrap("self_extend_attention")


def dual_chunk_attention(
    q,
    k,
    v,
    query_positions=None,
    key_positions=None,
    *,
    rope,
    chunk_size,
    local_size,
    original_max_position_embeddings=0,
    scale=None,
    qkv_format=None,
    out_dtype=None,
):
    """Dual chunk attention (An et al. 2024, arXiv:2402.17463; posenc/dual_chunk.h,
    docs/DUAL_CHUNK.md), as Qwen2.5-1M's ``dual_chunk_attention_config`` and vLLM define it.

    With L = chunk_size - local_size, keys rotate at p mod L and each query at p mod L (keys of
    its own chunk), min(p mod L + L, chunk_size) (the chunk before) or min(2 L - 1, chunk_size)
    (earlier chunks), so no scored distance exceeds chunk_size; with
    original_max_position_embeddings M > 0 the scores gain f^2, f = max(1, 0.1 ln(n / M) + 1),
    n the largest key position + 1. Always causal. Plain CPU float32 and bfloat16 tensors run
    posenc's tiled kernel once per part with no T x T buffer; everything else (other devices,
    meta and fake tensors, autograd) the same formula in PyTorch operations.

    Args:
        q: the un-rotated query projections: float32, bfloat16, float16 or float64.
        k: the un-rotated key projections, of q's dtype.
        v: the values, of q's dtype.
        query_positions: int64 [q_tokens] or [..., q_tokens]; None: the last q_tokens of the
            keys' (as in ``attention``).
        key_positions: int64 [kv_tokens] or [..., kv_tokens]; None: 0 .. kv_tokens - 1.
        rope: the rotation dual chunk attention re-positions, a ``posenc.Rope`` or a
            ``RotaryEmbedding``; required.
        chunk_size: an int > local_size: no scored distance exceeds it (vLLM's default 8192,
            Qwen2.5-1M's 262144).
        local_size: an int >= 1 (vLLM's default 1024, Qwen2.5-1M's 8192); chunks hold
            L = chunk_size - local_size positions.
        original_max_position_embeddings: M of the length scaling f, an int >= 0; 0: none.
        scale: the score scale (then times f^2), a positive finite number; None:
            1 / sqrt(head_dim).
        qkv_format: "bshd" or "bhsd", as in ``attention``; required, no default.
        out_dtype: the output's dtype: float32, float64, bfloat16 or float16; None: q's.

    Shapes:
        q, k, v: as in ``attention``, without cu_seqlens.

    Returns:
        The output [..., q_tokens, heads, value_dim] ([..., heads, q_tokens, value_dim] for
        "bhsd") in out_dtype.

    Raises:
        posenc.Error: rope missing, chunk_size, local_size or original_max_position_embeddings
            out of range, or a bad argument as in ``attention``, named.
    """
    _check_qkv("dual_chunk", q, k, v)
    if rope is None:
        raise _error(
            "dual_chunk", "rope", "be given (dual chunk attention re-positions RoPE)", None
        )
    _check_options(scale, 0, None, rope, True, "dual_chunk")
    if out_dtype is None:
        out_dtype = q.dtype
    _float_dtype("dual_chunk", "out_dtype", out_dtype)
    for name, value in (
        ("chunk_size", chunk_size),
        ("local_size", local_size),
        ("original_max_position_embeddings", original_max_position_embeddings),
    ):
        _check_int("dual_chunk", name, value)
    qkv_format = _qkv_format("dual_chunk", qkv_format)
    q_view, k_view, v_view = (
        _tokens_first("dual_chunk", name, t, qkv_format)
        for name, t in (("q", q), ("k", k), ("v", v))
    )
    qpos, kpos = _attention_positions(
        "dual_chunk",
        query_positions,
        key_positions,
        q_view.shape[-3],
        k_view.shape[-3],
        None,
        None,
    )
    if not isinstance(rope, _core.Rope):
        rope = rope.rope_at(qpos, kpos)
    options = dict(
        chunk_size=chunk_size,
        local_size=local_size,
        original_max_position_embeddings=original_max_position_embeddings,
    )
    if q.dtype in _ATTENTION_DTYPES and _plain(q, k, v, qpos, kpos) and not _records(q, k, v):
        result = torch.from_numpy(
            _core.dual_chunk_attention(
                _numpy(q_view),
                _numpy(k_view),
                _numpy(v_view),
                qpos.numpy(),
                kpos.numpy(),
                rope=rope,
                scale=scale,
                bfloat16=q.dtype is torch.bfloat16,
                **options,
            )
        )
    else:
        if local_size < 1 or chunk_size <= local_size:
            raise _error(
                "dual_chunk",
                "chunk_size and local_size",
                "satisfy chunk_size > local_size >= 1",
                (chunk_size, local_size),
            )
        if original_max_position_embeddings < 0:
            raise _error(
                "dual_chunk",
                "original_max_position_embeddings",
                "be >= 0 (0 means no length scaling)",
                original_max_position_embeddings,
            )
        device = q.device
        result = _reference.dual_chunk_attention(
            q_view,
            k_view,
            v_view,
            qpos.to(device),
            kpos.to(device),
            rope=rope,
            scale=scale,
            **options,
        )
    if qkv_format == "bhsd":
        result = result.transpose(-2, -3)
    return result.to(out_dtype)


torch.fx.wrap("dual_chunk_attention")


torch.fx.wrap("attention")


def _rope_from_fields(head_dim, rotary_dim, layout, inv_freq, factor, offset):
    return _core.Rope(
        head_dim,
        rotary_dim,
        _LAYOUTS[layout],
        list(inv_freq),
        factor,
        rotary_offset=offset,
    )


def _rope_fx_arg(rope, tracer):
    """A posenc.Rope in a torch.fx graph: a node that rebuilds it from its
    plain fields (fx keeps only plain Python values as constants)."""
    layout = "half_split" if rope.layout == _core.RopeLayout.HALF_SPLIT else "interleaved"
    fields = (
        rope.head_dim,
        rope.rotary_dim,
        layout,
        tuple(rope.inv_freq),
        rope.attention_factor,
        rope.rotary_offset,
    )
    return tracer.create_node("call_function", _rope_from_fields, fields, {})


def _alibi_from_fields(num_heads, max_bias, head_offset, shard_heads):
    return _core.Alibi(
        num_heads, max_bias=max_bias, head_offset=head_offset, shard_heads=shard_heads
    )


def _alibi_fx_arg(alibi, tracer):
    fields = (alibi.num_heads, alibi.max_bias, alibi.head_offset, alibi.shard_heads)
    return tracer.create_node("call_function", _alibi_from_fields, fields, {})


_core.Rope.__fx_create_arg__ = _rope_fx_arg
_core.Alibi.__fx_create_arg__ = _alibi_fx_arg
