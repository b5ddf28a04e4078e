"""The definitions behind posenc.torch, written in plain PyTorch operations.

posenc.torch runs the C++ kernels on CPU tensors. Everywhere else (CUDA and
other devices, meta tensors, FakeTensor and other tensor subclasses) it runs
these functions instead: the same definitions, differentiable by autograd, on
any device where PyTorch runs. The tests compare them with the kernels on the
CPU to float rounding, which is what makes them trustworthy where the kernels
cannot run.

Precision follows the kernels: angles are formed in float64 from int64
positions and float64 inverse frequencies; cos and sin are rounded once to
the compute type (float32, or float64 for float64 tensors); bfloat16 and
float16 inputs are rotated in float32 and rounded once. Attention scores,
softmax and the weighted sum are float32 (float64 for float64 inputs).

Shapes are posenc's: [..., tokens, heads, head_dim]; positions [tokens] or
[..., tokens].
"""

import math

import torch

from posenc import _core


def _compute_dtype(dtype):
    return torch.float64 if dtype == torch.float64 else torch.float32


def _float64_device(device):
    """Where float64 angles can be formed: the tensor's device, or the CPU
    for devices without float64 (Apple's MPS)."""
    return torch.device("cpu") if device.type == "mps" else device


def _rope_of(rotation):
    """The posenc.Rope of a rotation: itself, or a posenc.MRope's."""
    return rotation.rope if isinstance(rotation, _core.MRope) else rotation


def cos_sin(rotation, positions, dtype=torch.float32, device=None):
    """(cos, sin) [..., tokens, rotary_dim / 2] at int64 positions,
    attention_factor included: cos(pos * inv_freq[i]) * factor formed in
    float64, rounded once to dtype. rotation is a posenc.Rope (positions
    [..., tokens]) or a posenc.MRope (positions [streams, ..., tokens]: pair
    i reads stream pair_stream[i])."""
    device = positions.device if device is None else device
    where = _float64_device(device)
    rope = _rope_of(rotation)
    inv_freq = torch.tensor(rope.inv_freq, dtype=torch.float64, device=where)
    positions = positions.to(where, torch.float64)
    if isinstance(rotation, _core.MRope):
        streams = torch.tensor(rotation.pair_stream, dtype=torch.int64, device=where)
        angles = positions.index_select(0, streams).movedim(0, -1) * inv_freq
    else:
        angles = positions[..., None] * inv_freq
    factor = rope.attention_factor
    cos = (torch.cos(angles) * factor).to(device, dtype)
    sin = (torch.sin(angles) * factor).to(device, dtype)
    return cos, sin


def hf_cos_sin(rope, positions, dtype=torch.float32):
    """Hugging Face's (cos, sin) [..., tokens, rotary_dim]: each pair's value
    on both of its features, in the pair layout's order (half-split:
    cat(f, f); interleaved: each repeated twice)."""
    cos, sin = cos_sin(rope, positions, torch.float64)
    if rope.layout == _core.RopeLayout.HALF_SPLIT:
        cos, sin = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)
    else:
        cos = torch.stack((cos, cos), -1).flatten(-2)
        sin = torch.stack((sin, sin), -1).flatten(-2)
    return cos.to(dtype), sin.to(dtype)


def _pairs(rope, x):
    """The two halves (x1, x2) of every rotary pair, and the features before
    and after the rotated ones."""
    begin = rope.rotary_offset
    end = begin + rope.rotary_dim
    rotated = x[..., begin:end]
    if rope.layout == _core.RopeLayout.HALF_SPLIT:
        half = rope.rotary_dim // 2
        x1, x2 = rotated[..., :half], rotated[..., half:]
    else:
        x1, x2 = rotated[..., 0::2], rotated[..., 1::2]
    return x1, x2, x[..., :begin], x[..., end:]


def _join(rope, y1, y2, before, after):
    if rope.layout == _core.RopeLayout.HALF_SPLIT:
        rotated = torch.cat((y1, y2), -1)
    else:
        rotated = torch.stack((y1, y2), -1).flatten(-2)
    return torch.cat((before, rotated, after), -1)


def rotate(rotation, positions, x, inverse=False):
    """x [..., tokens, heads, head_dim] turned pair by pair: y = a R(phi) x
    (inverse: a R(-phi), the transpose); rotation and positions as in
    cos_sin."""
    compute = _compute_dtype(x.dtype)
    cos, sin = cos_sin(rotation, positions, compute, x.device)
    rope = _rope_of(rotation)
    cos, sin = cos[..., None, :], sin[..., None, :]  # over the heads
    if inverse:
        sin = -sin
    x1, x2, before, after = _pairs(rope, x.to(compute))
    y1 = x1 * cos - x2 * sin
    y2 = x2 * cos + x1 * sin
    return _join(rope, y1, y2, before, after).to(x.dtype)


def alibi_bias(alibi, query_positions, key_positions, dtype):
    """[..., heads, q_tokens, kv_tokens]: -slope[h] * (q - k), formed in
    float64 and rounded once to dtype."""
    device = query_positions.device
    slopes = torch.tensor(_core.alibi_slopes(alibi), dtype=torch.float64, device=device)
    distance = query_positions[..., :, None] - key_positions[..., None, :]
    return (-slopes[:, None, None] * distance[..., None, :, :].to(torch.float64)).to(dtype)


def _repeat_heads(x, group):
    """[..., tokens, kv_heads, d] -> [..., tokens, kv_heads * group, d], each
    kv head read by `group` consecutive query heads (expand: no data-dependent
    size, so meta and fake tensors pass)."""
    if group == 1:
        return x
    shape = x.shape[:-1] + (group, x.shape[-1])
    return x.unsqueeze(-2).expand(shape).flatten(-3, -2)


def visible(query_positions, key_positions, causal, window, key_mask=None):
    """bool [..., 1, q_tokens, kv_tokens]: which keys each query sees, by the
    positions (posenc/attention.h) and the key mask [..., 1 or q_tokens,
    kv_tokens] (the same keys for every query, or per query)."""
    distance = query_positions[..., :, None] - key_positions[..., None, :]
    seen = torch.ones_like(distance, dtype=torch.bool)
    if causal:
        seen = seen & (distance >= 0)
    if window:
        seen = seen & (distance < window)
    if key_mask is not None:
        seen = seen & key_mask.to(torch.bool)
    return seen[..., None, :, :]


def attention(
    q,
    k,
    v,
    query_positions,
    key_positions,
    *,
    causal=False,
    alibi=None,
    rope=None,
    scale=None,
    window=0,
    key_mask=None,
    softcap=0.0,
    sinks=None,
):
    """[..., q_tokens, heads, value_dim], float32 (float64 for float64
    inputs): posenc's attention (posenc/attention.h) composed of PyTorch
    operations. A query that sees no key gets zeros. softcap > 0: each
    scaled score s becomes softcap * tanh(s / softcap) before the ALiBi bias
    and the masks (Gemma 2). sinks [heads]: one logit per query head in
    every row's softmax denominator (gpt-oss), differentiable."""
    if rope is not None:
        q = rotate(rope, query_positions, q)
        k = rotate(rope, key_positions, k)
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    scores = _scores(q, k, scale)
    if softcap:
        scores = softcap * torch.tanh(scores / softcap)
    if alibi is not None:
        scores = scores + alibi_bias(alibi, query_positions, key_positions, scores.dtype)
    seen = visible(query_positions, key_positions, causal, window, key_mask)
    return _weighted_values(scores, seen, v, sinks)


def _scores(q, k, scale):
    """scale q . k: [..., heads, q_tokens, kv_tokens] in the compute type; each kv head read
    by its group of query heads."""
    compute = _compute_dtype(q.dtype)
    qf = q.to(compute).transpose(-2, -3)  # [..., heads, q_tokens, d]
    kf = _repeat_heads(k.to(compute), q.shape[-2] // k.shape[-2]).transpose(-2, -3)
    return torch.matmul(qf, kf.transpose(-1, -2)) * scale


def _weighted_values(scores, seen, v, sinks=None):
    """softmax over the visible keys, then the weighted sum of v: [..., q_tokens, heads, dv].
    With sinks [heads], each head's sink joins the softmax as one more column, dropped after it
    (gpt-oss): a row that sees no key gives all its weight to the sink, so zeros."""
    vf = _repeat_heads(v.to(scores.dtype), scores.shape[-3] // v.shape[-2]).transpose(-2, -3)
    scores = scores.masked_fill(~seen, float("-inf"))
    if sinks is not None:
        sink = sinks.to(scores.device, scores.dtype).reshape(-1, 1, 1)
        sink = sink.expand(scores.shape[:-1] + (1,))
        weights = torch.softmax(torch.cat((scores, sink), -1), -1)[..., :-1]
        return torch.matmul(weights, vf).transpose(-2, -3)
    # A row with no visible key would be 0/0; its weights are 0 instead.
    any_seen = seen.any(-1, keepdim=True)
    weights = torch.softmax(scores.masked_fill(~any_seen, 0.0), -1) * any_seen
    return torch.matmul(weights, vf).transpose(-2, -3)


def self_extend_attention(
    q,
    k,
    v,
    query_positions,
    key_positions,
    *,
    group_size,
    neighbor_window,
    rope,
    causal=False,
    scale=None,
    window=0,
):
    """Self-Extend (posenc/self_extend.h) composed of PyTorch operations: keys closer than W
    scored at their own positions, farther ones at floor(p / G) (queries at floor(p / G) + W -
    floor(W / G)), one softmax over both; masks in the original positions."""
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    g, w = group_size, neighbor_window
    near = _scores(rotate(rope, query_positions, q), rotate(rope, key_positions, k), scale)
    far = _scores(
        rotate(rope, query_positions // g + w - w // g, q),
        rotate(rope, key_positions // g, k),
        scale,
    )
    distance = query_positions[..., :, None] - key_positions[..., None, :]
    scores = torch.where((distance < w)[..., None, :, :], near, far)
    return _weighted_values(scores, visible(query_positions, key_positions, causal, window), v)


def dual_chunk_attention(
    q,
    k,
    v,
    query_positions,
    key_positions,
    *,
    chunk_size,
    local_size,
    original_max_position_embeddings=0,
    rope,
    scale=None,
):
    """Dual chunk attention (posenc/dual_chunk.h) composed of PyTorch operations: keys rotated
    at p mod L (L = chunk_size - local_size), each query at p mod L, min(p mod L + L, chunk_size)
    or min(2 L - 1, chunk_size) by the chunk lag of the key, scores times f^2
    (f = max(1, 0.1 ln(n / M) + 1), n the largest key position + 1 of each sequence), one causal
    softmax."""
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    length = chunk_size - local_size
    keys = rotate(rope, key_positions % length, k)
    offset = query_positions % length
    parts = [
        _scores(rotate(rope, part, q), keys, scale)
        for part in (
            offset,
            torch.clamp(offset + length, max=chunk_size),
            torch.full_like(offset, min(2 * length - 1, chunk_size)),
        )
    ]
    lag = query_positions[..., :, None] // length - key_positions[..., None, :] // length
    lag = lag[..., None, :, :]  # over the heads
    scores = torch.where(lag <= 0, parts[0], torch.where(lag == 1, parts[1], parts[2]))
    if original_max_position_embeddings > 0 and key_positions.shape[-1] > 0:
        n = key_positions.amax(-1).to(torch.float64) + 1
        f = torch.clamp(0.1 * torch.log(n / original_max_position_embeddings) + 1, min=1)
        scores = scores * (f * f).to(scores.dtype)[..., None, None, None]
    return _weighted_values(scores, visible(query_positions, key_positions, True, 0), v)
