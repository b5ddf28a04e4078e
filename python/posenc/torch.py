"""posenc.torch: posenc for PyTorch tensors, thin over the C++ library.

Plain CPU tensors are handed to the library as numpy views of their own memory
(no copies where the layout allows): float32, bfloat16 and float16 (the
library's kernels: float32 arithmetic, one rounding to the storage type) and
float64 (a double-precision twin of the reference, which makes
``torch.autograd.gradcheck`` meaningful). RoPE, M-RoPE and attention also run
on any other tensor (CUDA, meta, FakeTensor) through the same definitions in
PyTorch operations (posenc._torch_reference; docs/PYTHON.md says which path
runs where). A bad argument raises ``posenc.Error`` (a ``ValueError``).
Activations are posenc's [..., tokens, heads, head_dim] ("bshd") or, where
``qkv_format="bhsd"`` says so, Hugging Face's [..., heads, tokens, head_dim].

Modules and functions: ``RotaryEmbedding`` (``from_hf_config(config,
layer=i)`` for a model's layer i; a NoPE layer is an error),
``SinusoidalPositions``, ``LearnedPositions``, ``apply_rope``,
``attention``, and the biases added to the attention scores:
``alibi_bias`` (ALiBi's fixed linear bias) and ``RelativePositionBias``
(T5's learned bias: buckets of key - query position from posenc, a
trainable [num_buckets, num_heads] table looked up in torch). Multimodal RoPE:
``MultimodalRotaryEmbedding`` (Qwen-VL's M-RoPE, ``from_hf_config``, called
with Hugging Face's position_ids [3, batch, seq]), ``VisionRotaryEmbedding``
(the 2-D RoPE of vision towers), ``apply_mrope`` and ``get_rope_index``
(Qwen-VL's positions and rope deltas). ``KVCache``: one layer's KV cache for a
decode loop (keys rotated once on append; context shifts and attention sinks).

Example::

    import torch
    import posenc.torch as pt

    rope = pt.RotaryEmbedding(head_dim=64, qkv_format="bshd")
    # [batch, tokens, heads, head_dim]
    q = torch.randn(2, 16, 8, 64, requires_grad=True)
    k = torch.randn(2, 16, 2, 64, requires_grad=True)   # fewer kv heads (GQA)
    q_rot, k_rot = rope(q, k)                             # positions 0 .. 15
    (q_rot * k_rot.repeat_interleave(4, dim=2)).sum().backward()
"""

import json
import math
import operator
import os

import numpy as np
import torch
import torch.fx

from posenc import _core
from posenc import _torch_reference as _reference
from posenc import (
    model_positions,
    mrope_from_hf_config,
    qwen_vl_rope_index,
    rope_from_hf_config,
    vision_rope_from_hf_config,
)

__all__ = [
    "KVCache",
    "LearnedPositions",
    "MultimodalRotaryEmbedding",
    "RelativePositionBias",
    "RotaryEmbedding",
    "SinusoidalPositions",
    "VisionRotaryEmbedding",
    "alibi_bias",
    "alibi_slopes",
    "apply_mrope",
    "apply_rope",
    "apply_rope_",
    "attention",
    "get_rope_index",
    "rope_cos_sin",
    "rope_from_hf_config",
    "self_extend_attention",
]

_ROPE_DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)
_LAYOUTS = {
    "half_split": _core.RopeLayout.HALF_SPLIT,
    "interleaved": _core.RopeLayout.INTERLEAVED,
}


def _error(function, name, rule, value):
    """posenc.Error with the library's message pattern."""
    return _core.Error(f"[{function}] {name} must {rule}, got {value}")


def _check_cpu(function, name, tensor):
    if not isinstance(tensor, torch.Tensor):
        raise _error(
            function, name, "be a torch.Tensor", type(tensor).__name__
        )
    if tensor.device.type != "cpu":
        raise _error(
            function,
            name,
            "be a CPU tensor (posenc runs on the CPU; use .cpu())",
            f"device {tensor.device}",
        )


def _check_activations(function, name, tensor, dtypes=_ROPE_DTYPES):
    _check_cpu(function, name, tensor)
    _check_tensor(function, name, tensor, dtypes)


def _check_tensor(function, name, tensor, dtypes=_ROPE_DTYPES):
    """A tensor of one of dtypes, on any device."""
    if not isinstance(tensor, torch.Tensor):
        raise _error(
            function, name, "be a torch.Tensor", type(tensor).__name__
        )
    if tensor.dtype not in dtypes:
        allowed = ", ".join(str(d).replace("torch.", "") for d in dtypes)
        raise _error(
            function,
            name,
            f"have dtype {allowed}",
            str(tensor.dtype).replace("torch.", ""),
        )


def _positions(function, positions, name="positions"):
    """int64 CPU positions as a numpy view. A sequence or array of ints is
    converted; floats and bools are refused, never truncated."""
    if not isinstance(positions, torch.Tensor):
        given = type(positions).__name__
        try:
            positions = torch.as_tensor(positions)
        except (TypeError, ValueError, RuntimeError, OverflowError):
            raise _error(
                function,
                name,
                "be an int64 tensor or a sequence of ints",
                type(positions).__name__,
            ) from None
        integral = positions.numel() == 0 or not (
            positions.dtype.is_floating_point
            or positions.dtype.is_complex
            or positions.dtype == torch.bool
        )
        if not integral:
            raise _error(
                function,
                name,
                "be an int64 tensor or a sequence of ints",
                f"{given} of {_dtype_name(positions.dtype)}",
            )
        positions = positions.to(torch.int64)
    _check_cpu(function, name, positions)
    if positions.dtype != torch.int64:
        raise _error(
            function, name, "have dtype int64", _dtype_name(positions.dtype)
        )
    return positions.numpy()


def _require_size(function, shape, dtype, name="out.shape"):
    """Refuses a tensor of shape past the cap posenc's numpy API holds its own
    results to, before anything is allocated."""
    if math.prod(shape) * _item_size(dtype) > _core.MAX_OUTPUT_BYTES:
        raise _error(
            function,
            name,
            f"hold at most {_core.MAX_OUTPUT_BYTES} bytes (16 GiB, the cap on "
            "arrays posenc allocates)",
            f"{tuple(shape)} {_dtype_name(dtype)}",
        )


def _empty(function, shape, dtype, like=None, name="out.shape"):
    """A new tensor of shape (strided like `like` when given), within the cap
    (_require_size)."""
    _require_size(function, tuple(shape), dtype, name)
    if like is not None:
        return torch.empty_like(like)
    return torch.empty(shape, dtype=dtype)


def _check_positions(function, positions, name="positions"):
    """The one position rule of every API (posenc/positions.h: each position
    an integer in [0, 2^32]), checked by the library's own validator with its
    message before any work, on every path: the kernels' bindings check it
    the same way. positions is an int64 tensor or numpy array. A tensor on
    another device is tested where it lies and copied only to name a bad
    entry; meta and fake tensors hold no values to check."""
    if isinstance(positions, torch.Tensor):
        if type(positions) not in _PLAIN_TENSORS or positions.device.type == "meta":
            return
        if not positions.is_cpu:
            if not bool(((positions < 0) | (positions > _core.MAX_POSITION)).any()):
                return
            positions = positions.cpu()
        positions = positions.numpy()
    _core.validate_positions(function, positions, name)


def _position_range(function, count, name="positions"):
    """Positions 0 .. count - 1 as an int64 tensor (a default for count
    tokens), refused before allocation when they break the position rule or
    the size cap (a meta tensor may claim any number of tokens)."""
    if count > 0:
        _core.validate_positions(function, count - 1, f"{name}[{count - 1}]")
    _require_size(function, (count,), torch.int64, f"{name}.shape")
    return torch.arange(count, dtype=torch.int64)


def _float_dtype(function, name, dtype):
    """dtype when it is one posenc rounds results to (float32, float64,
    bfloat16, float16); an integer or bool dtype would truncate the result
    without a word."""
    if dtype not in _ROPE_DTYPES:
        shown = _dtype_name(dtype) if isinstance(dtype, torch.dtype) else repr(dtype)
        raise _error(function, name, "be float32, float64, bfloat16 or float16", shown)
    return dtype


def _real_number(value):
    """float(value) for numbers only: float("1.5") would let a string through."""
    if isinstance(value, (str, bytes, bytearray)):
        raise TypeError(type(value).__name__)
    return float(value)


def _instance_or_none(cls):
    """A check that raises TypeError unless its value is None or a cls."""

    def check(value):
        if value is not None and not isinstance(value, cls):
            raise TypeError

    return check


def _dtype_name(dtype):
    return str(dtype).replace("torch.", "")


def _layout(layout):
    if isinstance(layout, _core.RopeLayout):
        return layout
    if layout not in _LAYOUTS:
        raise _error(
            "rope", "layout", "be 'half_split' or 'interleaved'", repr(layout)
        )
    return _LAYOUTS[layout]


_ITEM_SIZES = {}


def _item_size(dtype):
    size = _ITEM_SIZES.get(dtype)
    if size is None:
        size = _ITEM_SIZES[dtype] = torch.empty((), dtype=dtype).element_size()
    return size


def _numpy(tensor):
    """A numpy view of the tensor's memory; bfloat16 as its int16 bits."""
    if tensor.requires_grad:
        tensor = tensor.detach()
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy()
    return tensor.numpy()


# Tensors the C++ kernels can read in place: plain tensors with CPU storage.
# Subclasses (FakeTensor and the like), meta tensors and other devices run the
# pure-PyTorch definitions of posenc._torch_reference instead.
_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)
_FORMATS = ("bshd", "bhsd")


def _on_kernel(*tensors):
    for t in tensors:
        if t is not None and (type(t) not in _PLAIN_TENSORS or not t.is_cpu):
            return False
    return True


def _records(*tensors):
    """Whether autograd would record an operation on these tensors."""
    if torch.is_grad_enabled():
        for t in tensors:
            if t is not None and t.requires_grad:
                return True
    return False


def _head_view(tensor):
    """The tensor when a head view can describe it (last dim contiguous, no
    stride-0 dims), else a contiguous copy: autograd may hand over expanded
    gradients; the usual ones, Hugging Face's layout included, pass as they
    are."""
    if tensor.stride(-1) == 1 and all(
        s != 0 or n == 1 for s, n in zip(tensor.stride(), tensor.shape)
    ):
        return tensor
    return tensor.contiguous()


def _qkv_format(function, qkv_format):
    if qkv_format not in _FORMATS:
        raise _error(
            function,
            "qkv_format",
            "be 'bshd' ([..., tokens, heads, head_dim], posenc's) or 'bhsd' "
            "([..., heads, tokens, head_dim], Hugging Face's)",
            repr(qkv_format),
        )
    return qkv_format


def _tokens_first(function, name, tensor, qkv_format):
    """tensor as posenc's [..., tokens, heads, dim]: itself, or the
    transposed view of Hugging Face's [..., heads, tokens, dim] (no copy)."""
    if tensor.dim() < 3:
        layout = "[..., tokens, heads, head_dim]"
        if qkv_format == "bhsd":
            layout = "[..., heads, tokens, head_dim]"
        raise _error(function, f"{name}.shape", f"be {layout}", tuple(tensor.shape))
    return tensor if qkv_format == "bshd" else tensor.transpose(-2, -3)


def _position_tensor(function, positions, name="positions"):
    """positions as an int64 tensor (where they lie), checked against the
    position rule (_check_positions); a sequence or array of ints is
    converted, floats and bools are refused, never truncated."""
    if isinstance(positions, torch.Tensor):
        if positions.dtype != torch.int64:
            raise _error(
                function, name, "have dtype int64", _dtype_name(positions.dtype)
            )
    else:
        positions = torch.from_numpy(_positions(function, positions, name))
    _check_positions(function, positions, name)
    return positions


def _kernel_rotate(rotation, positions, q, k, direction):
    """Rotated copies of q (and k), allocated like them (strides preserved):
    q_out, or (q_out, k_out). rotation is a posenc.Rope (positions [...,
    tokens]) or a posenc.MRope (position streams [streams, ..., tokens]);
    positions is an int64 numpy array."""
    multi = type(rotation) is _core.MRope
    function = "mrope" if multi else "rope"
    bfloat16 = q.dtype is torch.bfloat16
    if q.is_contiguous() and (k is None or k.is_contiguous()):
        # The binding allocates contiguous results itself (within its cap), one conversion
        # fewer per tensor than handing it tensors to write into.
        if k is None:
            apply_one = _core.apply_mrope if multi else _core.apply_rope
            out = apply_one(rotation, positions, _numpy(q), direction=direction, bfloat16=bfloat16)
            return _tensor_of(out, bfloat16)
        apply_qk = _core.apply_mrope_qk if multi else _core.apply_rope_qk
        q_out, k_out = apply_qk(
            rotation, positions, _numpy(q), _numpy(k), direction=direction, bfloat16=bfloat16
        )
        return _tensor_of(q_out, bfloat16), _tensor_of(k_out, bfloat16)
    q_out = _empty(function, q.shape, q.dtype, like=q)
    if k is None:
        apply_one = _core.apply_mrope if multi else _core.apply_rope
        apply_one(
            rotation, positions, _numpy(q), direction=direction, out=_numpy(q_out),
            bfloat16=bfloat16,
        )
        return q_out
    k_out = _empty(function, k.shape, k.dtype, like=k)
    apply_qk = _core.apply_mrope_qk if multi else _core.apply_rope_qk
    apply_qk(
        rotation, positions, _numpy(q), _numpy(k), direction=direction,
        q_out=_numpy(q_out), k_out=_numpy(k_out), bfloat16=bfloat16,
    )
    return q_out, k_out


def _tensor_of(array, bfloat16):
    """The tensor sharing a result array's memory (bfloat16 from its int16
    bits)."""
    tensor = torch.from_numpy(array)
    return tensor.view(torch.bfloat16) if bfloat16 else tensor


_OPPOSITE = {
    _core.RopeDirection.FORWARD: _core.RopeDirection.INVERSE,
    _core.RopeDirection.INVERSE: _core.RopeDirection.FORWARD,
}


class _ApplyRope(torch.autograd.Function):
    """FORWARD is y = a R(phi) x on q (and k); INVERSE is its transpose
    a R(-phi). Each is the other's backward pass, and the backward is itself
    this Function, so it is differentiable again (gradgradcheck). The rotation
    is a posenc.Rope or a posenc.MRope (each pair's angle from its own
    position stream; the transpose is the same). k may be None."""

    @staticmethod
    def forward(ctx, q, k, positions, rotation, direction):
        ctx.rotation, ctx.positions, ctx.direction = rotation, positions, direction
        return _kernel_rotate(rotation, positions, q, k, direction)

    @staticmethod
    def backward(ctx, grad_q, grad_k=None):
        grads = _ApplyRope.apply(
            _head_view(grad_q),
            None if grad_k is None else _head_view(grad_k),
            ctx.positions,
            ctx.rotation,
            _OPPOSITE[ctx.direction],
        )
        if grad_k is None:
            return grads, None, None, None, None
        return grads[0], grads[1], None, None, None


def _rotate_views(function, rotation, positions, views):
    """Rotates posenc-layout views by a posenc.Rope or posenc.MRope at int64
    positions: the kernel on plain CPU tensors (through the autograd Function
    only when autograd records), else the pure-PyTorch definition."""
    if _on_kernel(*views, positions):
        array = positions.numpy() if isinstance(positions, torch.Tensor) else positions
        forward = _core.RopeDirection.FORWARD
        q, k = views if len(views) == 2 else (views[0], None)
        if _records(*views):
            outs = _ApplyRope.apply(q, k, array, rotation, forward)
        else:
            outs = _kernel_rotate(rotation, array, q, k, forward)
        return (outs,) if k is None else outs
    positions = positions.to(views[0].device)
    return tuple(_reference.rotate(rotation, positions, v) for v in views)


def _check_pair(function, q, k, dtypes=_ROPE_DTYPES):
    _check_tensor(function, "q", q, dtypes)
    if k is not None:
        _check_tensor(function, "k", k, dtypes)
        if k.dtype != q.dtype:
            raise _error(
                function,
                "k.dtype",
                f"equal q.dtype ({_dtype_name(q.dtype)})",
                _dtype_name(k.dtype),
            )
        if k.device != q.device:
            raise _error(
                function, "k.device", f"equal q.device ({q.device})", k.device
            )


def _check_positions_device(function, positions, q, name="positions"):
    """Positions are read where they lie (moved to q's device when they
    differ); a meta tensor has no values to read, unless q is meta too."""
    if positions.device.type == "meta" and q.device.type != "meta":
        raise _error(
            function,
            name,
            "hold values (a meta tensor holds none) unless q is meta",
            "meta",
        )


def _rope_scheme(function, rope, positions):
    """The posenc.Rope that rope= names at these positions: a posenc.Rope as
    it is; a RotaryEmbedding's, following the positions where its scaling
    rule depends on the length (dynamic NTK, LongRoPE)."""
    if isinstance(rope, _core.Rope):
        return rope
    if isinstance(rope, RotaryEmbedding):
        return rope.rope_at(positions)
    raise _error(
        function,
        "rope",
        "be a posenc.Rope or a posenc.torch.RotaryEmbedding",
        type(rope).__name__,
    )


def _rope_call(function, rope, positions, q, k, qkv_format, inplace):
    _check_pair(function, q, k)
    qkv_format = _qkv_format(function, qkv_format)
    views = tuple(
        _tokens_first(function, name, t, qkv_format)
        for name, t in (("q", q), ("k", k))
        if t is not None
    )
    positions = _position_tensor(function, positions)
    _check_positions_device(function, positions, q)
    rotation = _rope_scheme(function, rope, positions)
    if not inplace:
        outs = _rotate_views(function, rotation, positions, views)
        if qkv_format == "bhsd":
            outs = tuple(o.transpose(-2, -3) for o in outs)
        return outs[0] if k is None else outs
    if _records(q, k):
        raise _error(
            function,
            "q and k",
            "not require grad while autograd records (an in-place rotation "
            "has no backward; use apply_rope)",
            "a tensor that requires grad",
        )
    if _on_kernel(*views, positions):
        bfloat16 = q.dtype == torch.bfloat16
        arrays = [_numpy(v) for v in views]
        if k is None:
            _core.apply_rope_inplace(rotation, positions.numpy(), *arrays, bfloat16=bfloat16)
        else:
            _core.apply_rope_qk_inplace(rotation, positions.numpy(), *arrays, bfloat16=bfloat16)
    else:
        # The kernel checks overlap element by element; off the CPU, q and k
        # as one view (rotated twice in place) are refused with its message.
        if len(views) == 2 and _same_view(*views):
            raise _error(function, "k", "not share memory with q", "overlapping views")
        rotated = _rotate_views(function, rotation, positions, views)
        for view, out in zip(views, rotated):
            view.copy_(out)
    return q if k is None else (q, k)


def _same_view(a, b):
    return (
        a.device.type != "meta"  # meta tensors have no memory: every data_ptr is 0
        and a.data_ptr() == b.data_ptr()
        and a.shape == b.shape
        and a.stride() == b.stride()
    )


def apply_rope(rope, positions, q, k=None, *, qkv_format="bshd"):
    """Rotates q (and k) by RoPE; differentiable. Returns q_rot, or
    (q_rot, k_rot) when k is given. The argument order is posenc's everywhere
    (numpy's ``posenc.apply_rope`` and the C++ ApplyRope): scheme, positions,
    tensors.

    rope is a ``posenc.Rope`` or a ``RotaryEmbedding`` (whose dynamic or
    LongRoPE frequencies then follow the positions: L = max(positions) + 1).
    qkv_format "bshd" (default, posenc's): q [..., tokens, heads, head_dim],
    k [..., tokens, kv_heads, head_dim]; "bhsd" (Hugging Face's): q [...,
    heads, tokens, head_dim], k [..., kv_heads, tokens, head_dim], read and
    written without a copy, forward and backward. positions is int64
    [tokens] (shared by the batch) or [..., tokens] (Hugging Face's
    position_ids [batch, seq]).

    Forward: pair i of each head is turned by phi = pos * rope.inv_freq[i],
    cos and sin times rope.attention_factor (y = a R(phi) x). Backward: the
    transpose a R(-phi), by the same kernel. Plain CPU tensors run the C++
    kernels in float32, float64, bfloat16 or float16; tensors elsewhere
    (CUDA, meta, FakeTensor) run the same definition in PyTorch operations.
    """
    if _plain_rope_call(rope, positions, q, k, qkv_format):
        return _kernel_rotate(rope, positions.numpy(), q, k, _core.RopeDirection.FORWARD)
    if _traced(q, k, positions):
        q_rot = _apply_rope_one(rope, positions, q, qkv_format)
        return q_rot if k is None else (q_rot, _apply_rope_one(rope, positions, k, qkv_format))
    return _rope_call("rope", rope, positions, q, k, qkv_format, False)


def _plain_rope_call(rope, positions, q, k, qkv_format):
    """Whether a call can go straight to the kernel: a posenc.Rope, posenc's
    layout, int64 positions and q, k on the CPU, nothing for autograd to
    record. The library validates the rest (shapes, positions) itself; this
    test keeps a decode loop's call within microseconds of the kernel."""
    return (
        type(rope) is _core.Rope
        and qkv_format == "bshd"
        and _on_kernel(q, k, positions)
        and type(positions) in _PLAIN_TENSORS
        and positions.dtype is torch.int64
        and q.dtype in _ROPE_DTYPES
        and (k is None or k.dtype is q.dtype)
        and not _records(q, k)
    )


def _traced(*values):
    """Whether torch.fx is tracing these values. A traced call records one
    node per rotated tensor, since fx cannot unpack a node's result."""
    return any(isinstance(v, torch.fx.Proxy) for v in values)


def _rotate_with(rotate, module, q, k, *rest):
    """A rotary module's forward: rotate(module, q, k, *rest), or while torch.fx traces, one
    node per rotated tensor (fx cannot unpack a node's result)."""
    if k is not None and _traced(q, k, *rest):
        return rotate(module, q, None, *rest), rotate(module, k, None, *rest)
    return rotate(module, q, k, *rest)


def _apply_rope_one(rope, positions, x, qkv_format):
    """One tensor's rotation, as torch.fx records it."""
    return _rope_call("rope", rope, positions, x, None, qkv_format, False)


def apply_rope_(rope, positions, q, k=None, *, qkv_format="bshd"):
    """apply_rope in place, for decode loops: q (and k) are overwritten with
    their rotation and returned. Not differentiable: a tensor that requires
    grad while autograd records raises posenc.Error. Nothing is written
    unless every argument is valid."""
    if _plain_rope_call(rope, positions, q, k, qkv_format):
        arrays = [_numpy(q)] if k is None else [_numpy(q), _numpy(k)]
        inplace = _core.apply_rope_inplace if k is None else _core.apply_rope_qk_inplace
        inplace(rope, positions.numpy(), *arrays, bfloat16=q.dtype is torch.bfloat16)
        return q if k is None else (q, k)
    return _rope_call("rope", rope, positions, q, k, qkv_format, True)


def rope_cos_sin(rope, positions, dtype=torch.float32):
    """Hugging Face's (cos, sin), each [..., tokens, rotary_dim] for int64
    positions [..., tokens]: pair i's cos(pos * inv_freq[i]) *
    attention_factor on both of its features (half-split: cat(f, f);
    interleaved: each twice), formed in float64 and rounded once to dtype
    (Hugging Face forms the angle in float32, which loses digits at large
    positions). rope is a posenc.Rope or a RotaryEmbedding."""
    dtype = _float_dtype("rope", "dtype", dtype)
    positions = _position_tensor("rope", positions)
    return _reference.hf_cos_sin(_rope_scheme("rope", rope, positions), positions, dtype)


def _module_rope(module, q, k, positions, qkv_format):
    """RotaryEmbedding.forward, as a function torch.fx records as one node."""
    qkv_format = qkv_format or module.qkv_format
    if positions is None:
        if qkv_format is None:
            raise _error(
                "rope",
                "positions",
                "be given unless qkv_format says where the tokens are ('bshd' "
                "or 'bhsd', here or to RotaryEmbedding): [.., a, b, head_dim] "
                "does not tell tokens from heads",
                None,
            )
        _check_tensor("rope", "q", q, _ROPE_DTYPES)
        axis = -3 if qkv_format == "bshd" else -2
        if q.dim() < 3:
            _tokens_first("rope", "q", q, _qkv_format("rope", qkv_format))
        positions = _position_range("rope", q.shape[axis])
    return apply_rope(module, positions, q, k, qkv_format=qkv_format or "bshd")


torch.fx.wrap("_apply_rope_one")
torch.fx.wrap("_module_rope")


class RotaryEmbedding(torch.nn.Module):
    """RoPE as a module: ``forward(q, k=None, positions=None, *,
    qkv_format=None)`` -> q_rot, or (q_rot, k_rot) when k is given.

    Built from plain RoPE arguments (head_dim, base, layout 'half_split' or
    'interleaved' (the pairs), rotary_dim: the rotated features, None for all
    from rotary_offset; rotary_offset: the first rotated feature, DeepSeek
    MLA: head_dim 192, rotary_offset 128, rotary_dim 64), from a ready
    ``posenc.Rope`` (``rope=``), or from a Hugging Face config
    (``from_hf_config``). Shapes as in ``apply_rope``; qkv_format ('bshd' or
    'bhsd'), given here or per call, says where the tokens are, and only then
    may positions be left out (0 .. tokens - 1). The module has no
    parameters; it pickles, deep-copies and goes through torch.save.
    """

    def __init__(
        self,
        head_dim=None,
        base=10000.0,
        *,
        layout="half_split",
        rotary_dim=None,
        rotary_offset=0,
        rope=None,
        qkv_format=None,
    ):
        super().__init__()
        if rope is None:
            if head_dim is None:
                raise _error(
                    "rope", "head_dim", "be given when rope is not", None
                )
            _check_int("rope", "head_dim", head_dim)
            _check_number("rope", "base", base)
            _check_int("rope", "rotary_dim", rotary_dim, allow_none=True)
            _check_int("rope", "rotary_offset", rotary_offset)
            rope = _core.Rope.default(
                head_dim,
                base,
                _layout(layout),
                rotary_dim or 0,
                rotary_offset=rotary_offset,
            )
        _check_instance("rope", "rope", rope, _core.Rope, "a posenc.Rope")
        self.rope = rope
        self.qkv_format = (
            None if qkv_format is None else _qkv_format("rope", qkv_format)
        )
        # The config and layer of a length-dependent rule (dynamic NTK,
        # LongRoPE), whose frequencies follow max(positions) + 1; None when
        # the frequencies are fixed.
        self._length_rule = None
        self._by_length = {}

    @classmethod
    def from_hf_config(
        cls,
        config,
        layer=None,
        *,
        layer_type=None,
        seq_len=None,
        precision=_core.RopePrecision.REFERENCE,
        qkv_format=None,
    ):
        """The RoPE of a Hugging Face config (see ``rope_from_hf_config``).

        ``layer`` is a layer index (``posenc.model_positions(config).layers``)
        or a layer type; a layer that does not rotate (a NoPE layer of Llama 4
        or SmolLM3) raises ``posenc.Error`` (a ValueError) naming it. Where
        the rope type depends on the length (dynamic NTK, LongRoPE) the
        frequencies follow each call's positions, L = max(positions) + 1, as
        Hugging Face's module does, unless ``seq_len`` fixes L here."""
        options = dict(layer=layer, layer_type=layer_type, precision=precision)
        module = cls(
            rope=rope_from_hf_config(config, seq_len=seq_len, **options),
            qkv_format=qkv_format,
        )
        if seq_len is None:
            short = rope_from_hf_config(config, seq_len=1, **options)
            long = rope_from_hf_config(config, seq_len=_LONGEST, **options)
            if short != long:
                module._length_rule = (_config_text(config), options)
        return module

    def rope_at(self, *positions):
        """The posenc.Rope of a call at these int64 positions (one tensor, or
        a call's query and key positions): the module's own, or for a
        length-dependent rule the one of L = max(positions) + 1 (cached per
        length). Fixed rules never read the positions."""
        if self._length_rule is None:
            return self.rope
        known = [p for p in positions if p.numel() and p.device.type != "meta"]
        if not known:
            return self.rope
        length = max(max(int(p.max()) for p in known) + 1, 1)
        rope = self._by_length.get(length)
        if rope is None:
            text, options = self._length_rule
            rope = rope_from_hf_config(text, seq_len=length, **options)
            if len(self._by_length) >= _CACHED_LENGTHS:
                self._by_length.clear()
            self._by_length[length] = rope
        return rope

    @property
    def inv_freq(self):
        """float64 [rotary_dim / 2]: the inverse frequencies (at the
        construction-time length for a length-dependent rule)."""
        return torch.tensor(self.rope.inv_freq, dtype=torch.float64)

    def cos_sin(self, positions, dtype=torch.float32):
        """Hugging Face's (cos, sin) at these positions (``rope_cos_sin``)."""
        return rope_cos_sin(self, positions, dtype)

    def forward(self, q, k=None, positions=None, *, qkv_format=None):
        return _rotate_with(_module_rope, self, q, k, positions, qkv_format)

    def extra_repr(self):
        text = repr(self.rope)
        if self.qkv_format is not None:
            text += f", qkv_format={self.qkv_format!r}"
        if self._length_rule is not None:
            text += ", frequencies follow the positions' length"
        return text


# A length past every model's: with L = 1 it tells a length-dependent rule.
_LONGEST = 1 << 30
# Lengths whose Rope a module keeps (a decode loop under dynamic NTK asks for
# a new one per token; the cache only saves the rebuild of repeated lengths).
_CACHED_LENGTHS = 64


def _config_text(config):
    """The JSON text of a config given as a dict, JSON text or path (read
    once: the module then depends on no file)."""
    if isinstance(config, dict):
        return json.dumps(config)
    if isinstance(config, str) and config.lstrip().startswith("{"):
        return config
    with open(os.fspath(config), encoding="utf-8") as f:
        return f.read()


def _check_instance(function, name, value, cls, what):
    if not isinstance(value, cls):
        raise _error(function, name, f"be {what}", type(value).__name__)


def _int_list(values):
    """A list of ints from a sequence of ints, else None (bools and floats are
    refused, never truncated)."""
    try:
        items = list(values)
        if any(isinstance(v, bool) for v in items):
            return None
        return [operator.index(v) for v in items]
    except TypeError:
        return None


def _check_int(function, name, value, allow_none=False):
    """Refuses what is not an int (bools and floats too) with posenc's
    message, before pybind11 could print a signature."""
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        rule = "be an int or None" if allow_none else "be an int"
        raise _error(function, name, rule, type(value).__name__)
    if not -(2**63) <= value < 2**63:  # the library's int64_t
        raise _error(function, name, "be an int in [-2^63, 2^63)", value)


def _check_number(function, name, value):
    try:
        _real_number(value)
    except (TypeError, ValueError):
        raise _error(
            function, name, "be a number", type(value).__name__
        ) from None


def _stream_positions(function, mrope, q, positions, name, text_form, qkv_format="bshd"):
    """positions as the int64 tensor [streams, *batch, tokens] the rotation
    reads, for q [*batch, tokens, heads, head_dim] (or bhsd). With text_form
    (Hugging Face's position_ids), [*batch, tokens] is every stream's and None
    means 0 .. tokens - 1 in every stream (expanded views, no copy); without
    it, [streams, tokens] is shared by the batch."""
    _check_tensor(function, "q", q)
    view = _tokens_first(function, "q", q, _qkv_format(function, qkv_format))
    batch, tokens = tuple(view.shape[:-3]), view.shape[-3]
    full = (mrope.num_streams,) + batch + (tokens,)
    if positions is None and text_form:
        return _position_range(function, tokens, name).expand(full)
    positions = _position_tensor(function, positions, name)
    _check_positions_device(function, positions, q, name)
    shape = tuple(positions.shape)
    if shape == full:
        return positions
    if text_form and shape == batch + (tokens,):
        return positions.expand(full)
    if not text_form and shape == full[:1] + full[-1:]:
        return positions
    rule = f"be (streams, *batch, tokens) = {full}"
    if text_form:
        rule += (
            f" or (*batch, tokens) = {batch + (tokens,)} (text: the same "
            "position in every stream)"
        )
    elif batch:
        rule += f" or (streams, tokens) = {full[:1] + full[-1:]}"
    raise _error(function, f"{name}.shape", rule, shape)


def apply_mrope(mrope, positions, q, k=None, *, qkv_format="bshd"):
    """Rotates q and k by multi-stream RoPE; differentiable. Returns (q_rot,
    k_rot), or q_rot when k is None.

    mrope is a ``posenc.MRope`` (M-RoPE sections, a vision tower's 2-D RoPE).
    Shapes as in ``apply_rope``: qkv_format "bshd" (q [..., tokens,
    num_heads, head_dim], k [..., tokens, num_kv_heads, head_dim]) or "bhsd"
    (Hugging Face's, no copy); positions is int64 [streams, ..., tokens]
    (Hugging Face's position_ids [3, batch, seq]) or [streams, tokens]
    (shared by the batch), read where it lies (any strides, no copy). Pair i
    turns by the position of stream mrope.pair_stream[i]. Backward: the
    transpose, by the same kernel. Plain CPU tensors (float32, float64,
    bfloat16, float16) run the kernels; others the PyTorch definition.
    """
    _check_instance(
        "mrope",
        "mrope",
        mrope,
        _core.MRope,
        "a posenc.MRope (of a MultimodalRotaryEmbedding: its .mrope)",
    )
    positions = _position_tensor("mrope", positions)
    _check_positions_device("mrope", positions, q)
    return _rotate_streams(mrope, positions, q, k, qkv_format)


def _rotate_streams(mrope, positions, q, k, qkv_format="bshd"):
    """apply_mrope with positions already an int64 tensor; k may be None
    (q_rot alone is returned)."""
    _check_pair("mrope", q, k)
    qkv_format = _qkv_format("mrope", qkv_format)
    views = tuple(
        _tokens_first("mrope", name, t, qkv_format)
        for name, t in (("q", q), ("k", k))
        if t is not None
    )
    outs = _rotate_views("mrope", mrope, positions, views)
    if qkv_format == "bhsd":
        outs = tuple(o.transpose(-2, -3) for o in outs)
    return outs[0] if k is None else outs


def _module_mrope(module, q, k, position_ids, qkv_format):
    """MultimodalRotaryEmbedding.forward, as a function torch.fx records as one node."""
    qkv_format = qkv_format or module.qkv_format
    if position_ids is None and qkv_format is None:
        raise _error(
            "mrope",
            "position_ids",
            "be given unless qkv_format says where the tokens are ('bshd' "
            "or 'bhsd', here or to MultimodalRotaryEmbedding)",
            None,
        )
    qkv_format = qkv_format or "bshd"
    positions = _stream_positions(
        "mrope", module.mrope, q, position_ids, "position_ids", True, qkv_format
    )
    return _rotate_streams(module.mrope, positions, q, k, qkv_format)


def _module_vision_rope(module, q, k, positions):
    """VisionRotaryEmbedding.forward, as a function torch.fx records as one node."""
    positions = _stream_positions("mrope", module.mrope, q, positions, "positions", False)
    return _rotate_streams(module.mrope, positions, q, k)


torch.fx.wrap("_module_mrope")
torch.fx.wrap("_module_vision_rope")


class MultimodalRotaryEmbedding(torch.nn.Module):
    """Multimodal RoPE as a module: ``forward(q, k, position_ids=None) ->
    (q_rot, k_rot)``.

    M-RoPE of Qwen2-VL and Qwen2.5-VL (``mrope_section`` pairs per stream in
    blocks) and Qwen3-VL (``interleaved=True``): each token has a time, a
    height and a width position, and each rotary pair turns by one of them.
    Built from a Hugging Face config (``from_hf_config``), from head_dim,
    mrope_section and base (plain RoPE frequencies), from a ready
    ``posenc.Rope`` and mrope_section, or from a ``posenc.MRope``.

    Shapes as in ``apply_rope``, in qkv_format "bshd" or "bhsd" (Hugging
    Face's), said here or per call. position_ids is Hugging Face's int64 [3,
    batch, tokens] (``get_rope_index``), or [batch, tokens] for text (the same
    position in each stream: then M-RoPE is 1-D RoPE exactly), or None for 0
    .. tokens - 1 when qkv_format says where the tokens are. Autograd: the
    backward pass is the inverse rotation. The module has no parameters.
    """

    def __init__(
        self,
        head_dim=None,
        mrope_section=None,
        base=10000.0,
        *,
        interleaved=False,
        rope=None,
        mrope=None,
        qkv_format=None,
    ):
        super().__init__()
        self.qkv_format = (
            None if qkv_format is None else _qkv_format("mrope", qkv_format)
        )
        if mrope is None:
            if mrope_section is None:
                raise _error(
                    "mrope", "mrope_section", "be given when mrope is not", None
                )
            sections = _int_list(mrope_section)
            if sections is None:
                raise _error(
                    "mrope",
                    "mrope_section",
                    "be a sequence of ints",
                    repr(mrope_section),
                )
            if rope is None:
                if head_dim is None:
                    raise _error(
                        "mrope",
                        "head_dim",
                        "be given when rope and mrope are not",
                        None,
                    )
                _check_int("mrope", "head_dim", head_dim)
                _check_number("mrope", "base", base)
                rope = _core.Rope.default(head_dim, float(base))
            _check_instance("mrope", "rope", rope, _core.Rope, "a posenc.Rope")
            mrope = _core.MRope.sections(rope, sections, bool(interleaved))
        _check_instance("mrope", "mrope", mrope, _core.MRope, "a posenc.MRope")
        self.mrope = mrope

    @classmethod
    def from_hf_config(cls, config, layer=None, *, qkv_format=None, **kwargs):
        """The M-RoPE of a Hugging Face Qwen2-VL, Qwen2.5-VL or Qwen3-VL
        config (a dict, its JSON text or a config.json path):
        ``posenc.mrope_from_hf_config`` (the language model's RoPE with its
        ``mrope_section``, in blocks or interleaved as the model lays them;
        ``layer`` and the other keywords as in ``rope_from_hf_config``). A
        config without M-RoPE raises ``posenc.Error``."""
        mrope = mrope_from_hf_config(config, layer=layer, **kwargs)
        if mrope.num_streams == 1:
            model = model_positions(config)
            raise _error(
                "mrope",
                "config",
                "describe a model with M-RoPE (rope_scaling.mrope_section: "
                "Qwen2-VL, Qwen2.5-VL, Qwen3-VL)",
                f"{model.model_type} ({model.scheme}, no mrope_section)",
            )
        return cls(mrope=mrope, qkv_format=qkv_format)

    @property
    def rope(self):
        """The underlying ``posenc.Rope`` (layout, frequencies, scaling)."""
        return self.mrope.rope

    @property
    def inv_freq(self):
        """float64 [rotary_dim / 2]: the inverse frequencies."""
        return torch.tensor(self.mrope.rope.inv_freq, dtype=torch.float64)

    def forward(self, q, k=None, position_ids=None, *, qkv_format=None):
        return _rotate_with(_module_mrope, self, q, k, position_ids, qkv_format)

    def extra_repr(self):
        text = repr(self.mrope)
        if self.qkv_format is not None:
            text += f", qkv_format={self.qkv_format!r}"
        return text


_VISION_KINDS = {
    "qwen2_vl": _core.MRope.qwen_vision,
    "qwen2_5_vl": _core.MRope.qwen_vision,
    "qwen3_vl": _core.MRope.qwen_vision,
    "pixtral": _core.MRope.pixtral,
    "llama4": _core.MRope.llama4_vision,
}


class VisionRotaryEmbedding(torch.nn.Module):
    """The 2-D RoPE of a vision tower as a module: ``forward(q, k, positions)
    -> (q_rot, k_rot)``, and ``positions(...)``, the patch positions the
    tower rotates by.

    kind: "qwen2_vl", "qwen2_5_vl", "qwen3_vl" (the Qwen towers: pairs
    [0, head_dim / 4) by the patch row, the rest by the column, at
    theta^(-2j / (head_dim / 2))), "pixtral" (rows at the even, columns at
    the odd frequencies of theta^(-2j / head_dim)) or "llama4" (interleaved
    pairs; positions (column + 1, row + 1), the class token (0, 0)); head_dim
    the tower's head width (a multiple of 4), theta the base. Or a ready
    ``posenc.MRope`` as mrope. ``from_hf_config`` reads all of it, and the
    patch grid (spatial_merge_size, window_units, patches_per_side), from a
    multimodal config.

    q and k are [tokens, heads, head_dim] (as the Qwen towers hold them) or
    [batch, tokens, heads, head_dim], CPU float32, bfloat16, float16 or
    float64; positions is int64 [2, tokens] (stream 0, stream 1 of each
    patch; shared by the batch) or [2, batch, tokens]. Autograd: the backward
    pass is the inverse rotation. The module has no parameters.
    """

    def __init__(
        self,
        kind=None,
        head_dim=None,
        theta=10000.0,
        *,
        mrope=None,
        spatial_merge_size=2,
        window_units=4,
        patches_per_side=None,
    ):
        super().__init__()
        if mrope is None:
            if kind not in _VISION_KINDS:
                raise _error(
                    "mrope",
                    "kind",
                    "be one of " + ", ".join(repr(k) for k in _VISION_KINDS),
                    repr(kind),
                )
            _check_int("mrope", "head_dim", head_dim)
            _check_number("mrope", "theta", theta)
            mrope = _VISION_KINDS[kind](head_dim, float(theta))
        _check_instance("mrope", "mrope", mrope, _core.MRope, "a posenc.MRope")
        _check_int("mrope", "spatial_merge_size", spatial_merge_size, True)
        _check_int("mrope", "window_units", window_units, True)
        _check_int("mrope", "patches_per_side", patches_per_side, True)
        self.kind = kind
        self.mrope = mrope
        self.spatial_merge_size = spatial_merge_size
        self.window_units = window_units
        self.patches_per_side = patches_per_side

    @classmethod
    def from_hf_config(cls, config):
        """The vision tower of a Hugging Face config (a dict, its JSON text or
        a config.json path): Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Pixtral (llava /
        mistral3) or Llama 4 (``posenc.vision_rope_from_hf_config``), with its
        patch grid. A config without such a tower raises ``posenc.Error``."""
        mrope = vision_rope_from_hf_config(config)
        tower = model_positions(config).vision_rope
        return cls(
            tower["kind"],
            mrope=mrope,
            spatial_merge_size=tower["spatial_merge_size"],
            window_units=tower["window_units"],
            patches_per_side=tower["patches_per_side"],
        )

    def positions(self, grids=None, *, window_order=None):
        """int64 [2, tokens]: the patch positions the tower rotates by, in its
        token order.

        Qwen kinds: grids is image_grid_thw or video_grid_thw, int [n, 3]
        rows (t, h, w); patches in merge-block order, and for "qwen2_5_vl" in
        window order (window_order=False: rot_pos_emb's order). "pixtral":
        grids is [n, 2] rows (patch rows, patch columns) per image. "llama4":
        no grids; the patches_per_side^2 patches, then the class token."""
        kind = self.kind
        if kind == "llama4":
            if grids is not None or self.patches_per_side is None:
                raise _error(
                    "mrope",
                    "grids",
                    "be None for llama4 (its tower has patches_per_side^2 "
                    "patches, from the config)",
                    "a grid" if grids is not None else "no patches_per_side",
                )
            out = _core.llama4_vision_positions(self.patches_per_side)
        elif kind == "pixtral":
            out = _core.pixtral_vision_positions(
                _int_tensor_numpy("mrope", "grids", grids)
            )
        elif kind in ("qwen2_vl", "qwen2_5_vl", "qwen3_vl"):
            grid = _int_tensor_numpy("mrope", "grids", grids)
            windows = kind == "qwen2_5_vl" if window_order is None else window_order
            _check_int("mrope", "spatial_merge_size", self.spatial_merge_size)
            if windows:
                _check_int("mrope", "window_units", self.window_units)
                out = _core.qwen_vision_positions_in_window_order(
                    grid, self.spatial_merge_size, self.window_units
                )
            else:
                out = _core.qwen_vision_positions(grid, self.spatial_merge_size)
        else:
            raise _error(
                "mrope",
                "kind",
                "be one of " + ", ".join(repr(k) for k in _VISION_KINDS)
                + " for positions",
                repr(kind),
            )
        return torch.from_numpy(out)

    def window_order(self, grids):
        """Qwen2.5-VL's (window_index, cu_window_seqlens), int64, as its
        get_window_index gives them (without repeated offsets): merged token
        window_index[k] goes to slot k, and window attention stays inside each
        range of cu_window_seqlens."""
        index, offsets = _core.qwen_vision_window_order(
            _int_tensor_numpy("mrope", "grids", grids),
            self.spatial_merge_size,
            self.window_units,
        )
        return torch.from_numpy(index), torch.from_numpy(offsets)

    def forward(self, q, k=None, positions=None):
        return _rotate_with(_module_vision_rope, self, q, k, positions)

    def extra_repr(self):
        return (f"kind={self.kind!r}, " if self.kind else "") + repr(self.mrope)


def _int_tensor_numpy(function, name, value):
    """An integer (or bool) tensor or sequence as an int64 numpy array; None
    stays None. Floats are refused, never truncated."""
    if value is None:
        return None
    if isinstance(value, torch.Tensor):
        _check_cpu(function, name, value)
        if value.numel() and (
            value.dtype.is_floating_point or value.dtype.is_complex
        ):
            raise _error(
                function,
                name,
                "be an integer tensor",
                _dtype_name(value.dtype),
            )
        return value.to(torch.int64).numpy()
    return _positions(function, value, name)


def get_rope_index(
    config,
    input_ids,
    image_grid_thw=None,
    video_grid_thw=None,
    second_per_grid_ts=None,
    attention_mask=None,
    *,
    rules=None,
):
    """Hugging Face's Qwen-VL ``get_rope_index`` on CPU tensors: returns
    ``(position_ids, rope_deltas)``, int64 [3, batch, seq_len] and int64
    [batch, 1], with Hugging Face's values (``posenc.qwen_vl_rope_index``).

    config: a Qwen2-VL, Qwen2.5-VL or Qwen3-VL config (a dict, its JSON text
    or a config.json path) or a ``posenc.QwenVlTokens``. input_ids [batch,
    seq_len]; image_grid_thw and video_grid_thw [n, 3] (t, h, w);
    second_per_grid_ts [videos] (float32 as the Qwen2.5-VL processor gives
    it); attention_mask [batch, seq_len] of 0 and 1 (int or bool). rules: the
    video numbering (``posenc.MropeIndexRules`` or its name, e.g.
    "qwen2_5_vl_int_seconds"); None for the config's model as released.
    position_ids goes straight into ``MultimodalRotaryEmbedding``.
    """
    fn = "mrope_index"
    seconds = second_per_grid_ts
    if isinstance(seconds, torch.Tensor):
        _check_cpu(fn, "second_per_grid_ts", seconds)
        seconds = seconds.detach().numpy()
    positions, deltas = qwen_vl_rope_index(
        config,
        _int_tensor_numpy(fn, "input_ids", input_ids),
        _int_tensor_numpy(fn, "image_grid_thw", image_grid_thw),
        _int_tensor_numpy(fn, "video_grid_thw", video_grid_thw),
        seconds,
        _int_tensor_numpy(fn, "attention_mask", attention_mask),
        rules=rules,
    )
    return torch.from_numpy(positions), torch.from_numpy(deltas)


class SinusoidalPositions(torch.nn.Module):
    """Sinusoidal positions (Vaswani et al. 2017) as a module without
    parameters.

    ``forward(positions) -> float32 [..., dim]``: PE(p, 2i) = sin(p / base^(2i
    / dim)), PE(p, 2i + 1) = cos(p / base^(2i / dim)) for int64 positions [...]
    (each >= 0).
    """

    def __init__(self, dim, base=10000.0):
        super().__init__()
        _check_int("sinusoidal", "dim", dim)
        _check_number("sinusoidal", "base", base)
        self.spec = _core.Sinusoidal(dim, base)

    def forward(self, positions):
        positions = _positions("sinusoidal", positions)
        out = _empty(
            "sinusoidal",
            tuple(positions.shape) + (self.spec.dim,),
            torch.float32,
        )
        _core.sinusoidal(
            positions, self.spec.dim, self.spec.base, out=out.numpy()
        )
        return out

    def extra_repr(self):
        return f"dim={self.spec.dim}, base={self.spec.base}"


class _LearnedLookup(torch.autograd.Function):
    """out = table[positions]; backward: grad[positions] += grad_out."""

    @staticmethod
    def forward(ctx, weight, positions, table):
        ctx.table, ctx.positions = table, positions
        return torch.from_numpy(table.lookup(positions))

    @staticmethod
    def backward(ctx, grad_out):
        table = ctx.table
        table.zero_gradient()
        table.accumulate_gradient(ctx.positions, grad_out.contiguous().numpy())
        return torch.from_numpy(table.grad.copy()), None, None


class LearnedPositions(torch.nn.Module):
    """A learned absolute position table (GPT-2's wpe): ``forward(positions) ->
    [..., d_model]``.

    ``weight`` is a float32 [max_positions, d_model] Parameter that shares
    memory with the library's table (optimizers update it in place); the
    initial values are N(0, stddev^2) from a fixed seed. Positions are int64
    [...]; a position at or past max_positions is an error, never a wrap or a
    clamp. The table stays float32 on the CPU: moving or casting the module
    (``.to``, ``.double()``) or replacing ``weight.data`` detaches it from the
    library and raises.
    """

    def __init__(
        self, max_positions, d_model, *, seed=0, stddev=0.02, table=None
    ):
        super().__init__()
        if table is None:
            _check_int("learned", "max_positions", max_positions)
            _check_int("learned", "d_model", d_model)
            _check_int("learned", "seed", seed)
            _check_number("learned", "stddev", stddev)
            table = _core.LearnedPositions.random(
                max_positions, d_model, seed, stddev
            )
        self.table = table
        self.weight = torch.nn.Parameter(torch.from_numpy(table.table))

    @classmethod
    def load(cls, path):
        """A module holding the .npy table [max_positions, d_model] at path."""
        table = _core.LearnedPositions.load(os.fspath(path))
        return cls(table.max_positions, table.d_model, table=table)

    def save(self, path):
        """Writes the table as float32 .npy [max_positions, d_model]."""
        self.table.save(os.fspath(path))

    def forward(self, positions):
        weight = self.weight
        if (
            weight.device.type != "cpu"
            or weight.dtype != torch.float32
            or weight.data_ptr() != self.table.table.ctypes.data
        ):
            raise _error(
                "learned",
                "weight",
                "be the library table's own float32 CPU memory (do not "
                "move, cast or replace it)",
                f"{weight.dtype} on {weight.device}",
            )
        return _LearnedLookup.apply(
            weight, _positions("learned", positions), self.table
        )

    def extra_repr(self):
        table = self.table
        return f"max_positions={table.max_positions}, d_model={table.d_model}"


def _alibi(num_heads, max_bias, head_offset, shard_heads):
    """The posenc.Alibi of alibi_slopes' and alibi_bias' arguments."""
    for name, value in (
        ("num_heads", num_heads), ("head_offset", head_offset), ("shard_heads", shard_heads)
    ):
        _check_int("alibi", name, value)
    _check_number("alibi", "max_bias", max_bias)
    return _core.Alibi(
        num_heads, max_bias=max_bias, head_offset=head_offset, shard_heads=shard_heads
    )


def alibi_slopes(
    num_heads,
    *,
    max_bias=8.0,
    head_offset=0,
    shard_heads=0,
    dtype=torch.float32,
):
    """[local_heads] ALiBi slopes (Press et al. 2022): 2^(-max_bias (h + 1) /
    n) for n a power of two, the paper's interleaving otherwise; head_offset
    and shard_heads (0: the rest) pick a tensor-parallel shard. Computed in
    double, returned as dtype."""
    alibi = _alibi(num_heads, max_bias, head_offset, shard_heads)
    _float_dtype("alibi", "dtype", dtype)
    return torch.from_numpy(_core.alibi_slopes(alibi)).to(dtype)


def alibi_bias(
    num_heads,
    query_positions,
    key_positions=None,
    *,
    max_bias=8.0,
    head_offset=0,
    shard_heads=0,
    dtype=torch.float32,
):
    """[local_heads, queries, keys] additive score bias: -slope[h] *
    (query_pos[i] - key_pos[j]).

    query_positions and key_positions are int64 [queries] and [keys]
    (key_positions defaults to query_positions). Add it to the attention scores
    [..., heads, queries, keys] before softmax; the causal mask is separate.
    dtype float32, float64, bfloat16 or float16 (the last two rounded from
    float32).
    """
    alibi = _alibi(num_heads, max_bias, head_offset, shard_heads)
    queries = _positions("alibi", query_positions, "query_positions")
    keys = (
        queries
        if key_positions is None
        else _positions("alibi", key_positions, "key_positions")
    )
    _float_dtype("alibi", "dtype", dtype)
    work = torch.float64 if dtype == torch.float64 else torch.float32
    out = _empty(
        "alibi",
        (
            alibi.local_heads(),
            queries.shape[0] if queries.ndim else 0,
            keys.shape[0] if keys.ndim else 0,
        ),
        work,
    )
    _core.alibi_bias(alibi, queries, keys, out=out.numpy())
    return out.to(dtype)


class RelativePositionBias(torch.nn.Module):
    """T5's learned relative position bias (Raffel et al. 2020) as a module:
    ``forward(query_len, key_len)`` or ``forward(query_pos, key_pos)`` ->
    bias [num_heads, queries, keys], to add to the attention scores
    [..., heads, queries, keys] before softmax (T5 scores without the
    1/sqrt(d) scale).

    ``weight`` [num_buckets, num_heads] is the trainable table, T5's
    ``relative_attention_bias.weight`` (load it with ``load_state_dict({
    "weight": t5_state["encoder.block.0.layer.0.SelfAttention.
    relative_attention_bias.weight"]})``); initialised N(0, 1) like
    ``nn.Embedding``. The buckets of key_pos[j] - query_pos[i] are computed by
    posenc (``posenc.relative_position_bucket``, bit-exact with Hugging
    Face's), the lookup by torch, so gradients reach ``weight``.
    bidirectional: the encoder's buckets; False: the decoder's (causal; keys
    after the query share bucket 0, the causal mask is separate). The bias
    has the weight's dtype (float32 unless the module is converted).
    """

    def __init__(
        self, num_buckets=32, max_distance=128, num_heads=8, bidirectional=True
    ):
        super().__init__()
        # Validates the counts with the library's messages.
        _core.relative_position_bucket(
            torch.zeros(0, dtype=torch.int64).numpy(),
            num_buckets=num_buckets,
            max_distance=max_distance,
            bidirectional=bidirectional,
        )
        if isinstance(num_heads, bool) or not isinstance(num_heads, int):
            raise _error(
                "relative_bias", "num_heads", "be an int", type(num_heads).__name__
            )
        if num_heads <= 0:
            raise _error("relative_bias", "num_heads", "be > 0", num_heads)
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.num_heads = num_heads
        self.bidirectional = bidirectional
        self.weight = torch.nn.Parameter(torch.empty(num_buckets, num_heads))
        torch.nn.init.normal_(self.weight)

    @classmethod
    def from_hf_config(cls, config, *, bidirectional=True):
        """The bias of a T5 / mT5 / UMT5 config (bucket counts and heads from
        the config; bidirectional True for the encoder, False for the
        decoder), with a fresh table to load or train."""
        model = model_positions(config)
        if model.scheme != "relative_bias":
            raise _error(
                "relative_bias",
                "config",
                "describe a model with T5 relative-position buckets",
                f"{model.model_type} ({model.scheme})",
            )
        return cls(
            model.num_buckets,
            model.max_distance,
            model.num_heads,
            bidirectional=bidirectional,
        )

    def buckets(self, query_pos, key_pos):
        """int64 [queries, keys]: the bucket of key_pos[j] - query_pos[i]."""
        queries = _positions("relative_bias", query_pos, "query_pos")
        keys = _positions("relative_bias", key_pos, "key_pos")
        for name, positions in (("query_pos", queries), ("key_pos", keys)):
            if positions.ndim != 1:
                raise _error(
                    "relative_bias",
                    f"{name}.shape",
                    "be 1-D",
                    tuple(positions.shape),
                )
            _check_positions("relative_bias", positions, name)
        # A bias past the output cap is refused before anything is computed.
        self._check_size(queries.shape[0], keys.shape[0])
        relative = keys[None, :] - queries[:, None]
        return torch.from_numpy(
            _core.relative_position_bucket(
                relative,
                num_buckets=self.num_buckets,
                max_distance=self.max_distance,
                bidirectional=self.bidirectional,
            )
        )

    def forward(self, query, key=None):
        """query and key: lengths (positions 0 .. n - 1) or int64 positions;
        key defaults to query."""
        if key is None:
            key = query
        is_length = [isinstance(p, int) and not isinstance(p, bool) for p in (query, key)]
        for p, name, length in zip((query, key), ("query", "key"), is_length):
            if length and p < 0:
                raise _error(
                    "relative_bias", name, "be a length >= 0 or int64 positions", p
                )
        if all(is_length):  # the bias's size before any position is allocated
            self._check_size(query, key)
        query_pos, key_pos = (
            _position_range("relative_bias", p, name) if length else p
            for p, name, length in zip((query, key), ("query_pos", "key_pos"), is_length)
        )
        buckets = self.buckets(query_pos, key_pos)
        # The lookup in torch: autograd adds each use of a bucket into its row.
        return self.weight[buckets].permute(2, 0, 1)

    def _check_size(self, queries, keys):
        _require_size(
            "relative_bias", (self.num_heads, queries, keys), self.weight.dtype
        )

    def extra_repr(self):
        return (
            f"num_buckets={self.num_buckets}, max_distance={self.max_distance}, "
            f"num_heads={self.num_heads}, bidirectional={self.bidirectional}"
        )


# The kernel's dtypes; the KV cache stores these.
_ATTENTION_DTYPES = (torch.float32, torch.bfloat16)
# attention() also takes float16 and float64, which run the PyTorch definition.
_ANY_ATTENTION_DTYPES = _ATTENTION_DTYPES + (torch.float16, torch.float64)


def _check_options(scale, window, alibi, rope, causal, function="attention"):
    """What the binding could not convert, named here: pybind11 would list its
    whole signature instead."""
    if scale is not None:
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
    if isinstance(window, bool) or not isinstance(window, int) or window < 0:
        raise _error(function, "window", "be an int >= 0 (0: no window)", window)
    if alibi is not None and not isinstance(alibi, _core.Alibi):
        raise _error(function, "alibi", "be None or a posenc.Alibi", type(alibi).__name__)
    if rope is not None and not isinstance(rope, (_core.Rope, RotaryEmbedding)):
        raise _error(
            function,
            "rope",
            "be None, a posenc.Rope or a posenc.torch.RotaryEmbedding",
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
        raise _error(function, "sinks", "be None or a torch.Tensor [num_heads]",
                     type(sinks).__name__)
    if not sinks.is_floating_point():
        raise _error(function, "sinks", "have a floating dtype", _dtype_name(sinks.dtype))
    if tuple(sinks.shape) != (num_heads,):
        raise _error(function, "sinks.shape", f"be ({num_heads},) (one logit per query head)",
                     tuple(sinks.shape))
    if sinks.device != q.device:
        raise _error(function, "sinks", f"be on q's device ({q.device})", sinks.device)


def _kernel_options(options):
    """The options as the bindings take them: scale 0 for None, the sinks
    as a float32 numpy array (a copy, detached)."""
    sinks = options.get("sinks")
    if sinks is not None:
        sinks = sinks.detach().to(torch.float32).contiguous().numpy()
    return dict(options, scale=options["scale"] or 0.0, sinks=sinks)


def _plain_attention_call(q, k, v, qpos, kpos, out, causal, alibi, rope, scale, window):
    """Whether a call can go straight to the kernel: CPU float32 or bfloat16
    q, k, v, explicit int64 positions, a float32 out= or none, plain option
    values, nothing for autograd to record. The library validates the rest
    (shapes, grouping, positions, window) itself; this test keeps a decode
    step's call within microseconds of the kernel."""
    return (
        _on_kernel(q, k, v, qpos, kpos, out)
        and type(qpos) in _PLAIN_TENSORS
        and type(kpos) in _PLAIN_TENSORS
        and qpos.dtype is torch.int64
        and kpos.dtype is torch.int64
        and (q.dtype is torch.float32 or q.dtype is torch.bfloat16)
        and k.dtype is q.dtype
        and v.dtype is q.dtype
        and (out is None or out.dtype is torch.float32)
        and type(causal) is bool
        and type(window) is int
        and (alibi is None or type(alibi) is _core.Alibi)
        and (rope is None or type(rope) is _core.Rope)
        and (scale is None or (type(scale) is float and 0.0 < scale < math.inf))
        and not _records(q, k, v)
    )


def _padding_positions(mask, q_tokens):
    """Hugging Face's position_ids of a padded batch: each kept token's
    index among the kept ones of its row (left padding starts at 0); the
    queries are the last q_tokens."""
    keys = (mask.to(torch.int64).cumsum(-1) - 1).clamp(min=0)
    return keys[..., keys.shape[-1] - q_tokens :], keys


def _key_interval(row):
    """(begin, end) of the kept keys of a mask row when they are one
    interval, else None."""
    kept = torch.nonzero(row).flatten()
    if kept.numel() == 0:
        return 0, 0
    begin, end = int(kept[0]), int(kept[-1]) + 1
    return (begin, end) if end - begin == kept.numel() else None


def _at(tensor, index):
    """tensor[index] for a batched tensor; a [tokens] tensor is shared."""
    return tensor if tensor.dim() == 1 else tensor[index]


def _kernel_attention(q, k, v, qpos, kpos, out, options, intervals):
    """The C++ kernel into the float32 view out: one call, or one per batch
    element with the keys cut to each row's interval of kept keys."""
    bfloat16 = q.dtype == torch.bfloat16
    if intervals is None:
        _core.attention(
            _numpy(q), _numpy(k), _numpy(v), qpos.numpy(), kpos.numpy(),
            out=_numpy(out), bfloat16=bfloat16, **options,
        )
        return
    for index, (begin, end) in intervals:
        if begin == end:
            out[index].zero_()
            continue
        _core.attention(
            _numpy(q[index]),
            _numpy(k[index][begin:end]),
            _numpy(v[index][begin:end]),
            _at(qpos, index).numpy(),
            _at(kpos, index)[..., begin:end].numpy(),
            out=_numpy(out[index]),
            bfloat16=bfloat16,
            **options,
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
    function, query_positions, key_positions, q_tokens, kv_tokens, mask, segments
):
    """(query, key) positions as int64 tensors: the given ones (checked
    against the position rule before any work), else the defaults of the
    call's form (aligned, padded batch, or per segment)."""
    if mask is not None:
        defaults = _padding_positions(mask, min(q_tokens, kv_tokens))
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


def _key_intervals(key_mask):
    """[(batch index, (begin, end))]: the kept keys of each mask row, or None
    when some row's kept keys are not one interval."""
    intervals = []
    for index in np.ndindex(*key_mask.shape[:-1]):
        interval = _key_interval(key_mask[index])
        if interval is None:
            return None
        intervals.append((index, interval))
    return intervals


class _Attention(torch.autograd.Function):
    """posenc's kernel with its backward pass (posenc/attention_backward.h).
    q, k, v: tokens-first CPU views [..., tokens, heads, dim], float32 or
    bfloat16; out is float32. The forward pass keeps each row's log-sum-exp,
    from which the backward pass recomputes the scores tile by tile (no
    T x T buffer in either). q and k are saved un-rotated: RoPE is applied
    inside both passes and the kernel returns the gradients of the
    un-rotated q and k. The backward pass is itself not differentiable: a
    second derivative needs the PyTorch definition (float64 tensors run
    it)."""

    @staticmethod
    def forward(ctx, q, k, v, qpos, kpos, sinks, options):
        options = _kernel_options(dict(options, sinks=sinks))
        out, lse = _core.attention_forward(
            _numpy(q), _numpy(k), _numpy(v), qpos.numpy(), kpos.numpy(),
            bfloat16=q.dtype is torch.bfloat16, **options,
        )
        out, lse = torch.from_numpy(out), torch.from_numpy(lse)
        # The float32 out, not its bfloat16 rounding: the backward pass's
        # d_out . out term then matches the forward pass exactly.
        ctx.save_for_backward(q, k, v, qpos, kpos, out, lse)
        ctx.options = options
        ctx.sinks_dtype = None if sinks is None else sinks.dtype
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, d_out):
        q, k, v, qpos, kpos, out, lse = ctx.saved_tensors
        # autograd may hand over an expanded gradient (of a sum, say).
        d_out = _head_view(d_out.to(torch.float32))
        dq, dk, dv, *d_sinks = _core.attention_backward(
            _numpy(q), _numpy(k), _numpy(v), qpos.numpy(), kpos.numpy(),
            out=out.numpy(), lse=lse.numpy(), d_out=d_out.numpy(),
            bfloat16=q.dtype is torch.bfloat16, **ctx.options,
        )
        # The kernel's gradients are float32; a bfloat16 input gets bfloat16.
        grads = (
            torch.from_numpy(g).to(t.dtype) for g, t in ((dq, q), (dk, k), (dv, v))
        )
        # With sinks, their gradient [heads] (summed over the batch) in the sinks' dtype.
        d_sinks = torch.from_numpy(d_sinks[0]).to(ctx.sinks_dtype) if d_sinks else None
        return (*grads, None, None, d_sinks, None)


def _trained_attention(qs, ks, vs, qp, kp, options, intervals):
    """The kernel through _Attention (float32 out), or None when the call is
    one the Function does not cover (a masked batch without elements). With
    key intervals, one Function per batch element on its kept keys; a row
    without keys gets zeros, as in the kernel's inference path."""
    sinks = options.get("sinks")
    options = {name: value for name, value in options.items() if name != "sinks"}
    if intervals is None:
        return _Attention.apply(qs, ks, vs, qp, kp, sinks, options)
    if not intervals:
        return None
    rows = []
    for index, (begin, end) in intervals:
        q_row = qs[index]
        if begin == end:
            rows.append(q_row.new_zeros(q_row.shape[:-1] + vs.shape[-1:], dtype=torch.float32))
            continue
        rows.append(
            _Attention.apply(
                q_row, ks[index][begin:end], vs[index][begin:end],
                _at(qp, index), _at(kp, index)[..., begin:end], sinks, options,
            )
        )
    return torch.stack(rows).reshape(qs.shape[:-1] + vs.shape[-1:])


def _attend(qs, ks, vs, qp, kp, key_mask, target, kernel, options, records=False):
    """One attention over posenc-layout views: the kernel -> float32 (into
    target, a float32 view, when given; through its autograd Function when
    autograd records, never into target then), else the PyTorch definition
    -> its compute type. A key mask whose kept keys are one interval per row
    runs the kernel on that interval; any other runs the definition."""
    intervals = None
    if kernel and key_mask is not None:
        intervals = _key_intervals(key_mask)
        kernel = intervals is not None
    if kernel and records:
        result = _trained_attention(qs, ks, vs, qp, kp, options, intervals)
        if result is not None:
            return result
        kernel = False
    if kernel:
        result = target
        if result is None:
            result = _empty("attention", qs.shape[:-1] + vs.shape[-1:], torch.float32)
        _kernel_attention(qs, ks, vs, qp, kp, result, _kernel_options(options), intervals)
        return result
    device = qs.device
    return _reference.attention(
        qs, ks, vs, qp.to(device), kp.to(device),
        key_mask=None if key_mask is None else key_mask.to(device), **options,
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
    qkv_format="bshd",
    attention_mask=None,
    cu_seqlens_q=None,
    cu_seqlens_k=None,
    out_dtype=None,
    out=None,
):
    """Attention with posenc's position rules: causal mask, sliding window,
    ALiBi and RoPE (applied inside) follow the positions, grouped heads.

    qkv_format "bshd" (posenc's): q [..., q_tokens, heads, head_dim], k
    [..., kv_tokens, kv_heads, head_dim], v [..., kv_tokens, kv_heads,
    value_dim] -> [..., q_tokens, heads, value_dim]; "bhsd" (Hugging
    Face's): heads before tokens, in and out, without a copy.

    Positions are int64 [tokens] or [..., tokens]. Defaults: keys 0 ..
    kv_tokens - 1 and queries the last q_tokens of them (a decode step's
    query after its keys; FlashAttention's bottom-right alignment).

    attention_mask: Hugging Face's padding mask [..., kv_tokens] (1 or True:
    a token; 0: padding); its positions default as Hugging Face numbers a
    padded batch (each token's index among the kept ones). Padding keys are
    never seen; a query that sees no key gets zeros.

    cu_seqlens_q (and cu_seqlens_k, default the same): packed sequences as
    FlashAttention's varlen API takes them, q [total_q, heads, head_dim], k
    and v [total_k, kv_heads, dim], segment s holding tokens cu_seqlens[s]
    .. cu_seqlens[s + 1]; positions [total] per segment (default: each
    segment from 0).

    scale None: 1 / sqrt(head_dim). rope: a posenc.Rope or a RotaryEmbedding
    (its length rule follows the positions).

    softcap > 0 (Gemma 2's attn_logit_softcapping): each scaled score s
    becomes softcap * tanh(s / softcap) before the ALiBi bias and the masks;
    0 is off. sinks (gpt-oss): a floating tensor [heads] on q's device, one
    logit per query head that joins every row's softmax denominator and adds
    no value; it may require grad (its gradient comes from the kernel's
    backward pass, or through the PyTorch definition).

    Output dtype: q's (float32 out for float32 in, bfloat16 for bfloat16)
    unless out_dtype says otherwise; out= takes a float32 tensor of the
    output's shape to write.

    Where it runs: plain CPU float32 and bfloat16 tensors run posenc's fused
    kernel (no T x T buffer; see posenc.attention for its bfloat16
    arithmetic). When autograd records (a tensor requires grad), the kernel
    runs as an autograd Function with the kernel's backward pass
    (FlashAttention-2 style: scores recomputed from a saved log-sum-exp, no
    T x T buffer; deterministic for any thread count); gradients of
    bfloat16 inputs come back in bfloat16, computed in float32. The kernel's
    backward is not differentiable again (a second derivative raises
    RuntimeError). Everything else runs the same definition in PyTorch
    operations, differentiable to any order: CUDA and other devices, meta
    and fake tensors, float16 and float64 (which ``torch.autograd.gradcheck``
    needs), and an attention_mask whose kept keys are not one interval per
    row.
    """
    if _plain_attention_call(
        q, k, v, query_positions, key_positions, out, causal, alibi, rope, scale, window
    ) and (attention_mask is None and cu_seqlens_q is None and cu_seqlens_k is None) and (
        qkv_format == "bshd" and out_dtype is None
    ) and sinks is None and type(softcap) is float and 0.0 <= softcap < math.inf:
        result = _core.attention(
            _numpy(q), _numpy(k), _numpy(v), query_positions.numpy(), key_positions.numpy(),
            causal=causal, alibi=alibi, rope=rope, scale=scale or 0.0, window=window,
            softcap=softcap, out=None if out is None else out.numpy(),
            bfloat16=q.dtype is torch.bfloat16,
        )
        if out is not None:
            return out
        # float32 from the kernel (allocated by the binding), rounded once for bfloat16.
        result = torch.from_numpy(result)
        return result if q.dtype is torch.float32 else result.to(q.dtype)
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
    mask = None
    if attention_mask is not None:
        mask = _position_mask(attention_mask, k_view)
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
    qpos, kpos = _attention_positions(
        "attention", query_positions, key_positions, q_tokens, kv_tokens, mask, segments
    )
    if rope is not None and not isinstance(rope, _core.Rope):
        rope = rope.rope_at(qpos, kpos)  # a length rule reads every position of the call
    kernel = q.dtype in _ATTENTION_DTYPES and _on_kernel(q, k, v, qpos, kpos, mask, out, sinks)
    records = _records(q, k, v, sinks)
    options = dict(
        causal=causal, alibi=alibi, rope=rope, window=window, scale=scale,
        softcap=float(softcap), sinks=sinks,
    )
    if segments is not None:
        result = torch.cat([
            _attend(q_view[qa:qb], k_view[ka:kb], v_view[ka:kb], qpos[qa:qb], kpos[ka:kb],
                    None, None, kernel, options, records)
            for qa, qb, ka, kb in segments
        ])
    else:
        # A float32 out= of the right shape is the kernel's own output, where one kernel call
        # checks the whole batch (positions, shapes, aliasing) before it writes. A key mask runs
        # one call per row: its result is formed apart and copied into out only once complete.
        target = None
        if out is not None and out.dtype == torch.float32 and _on_kernel(out) and mask is None:
            view = _tokens_first("attention", "out", out, qkv_format)
            if view.shape == q_view.shape[:-1] + v_view.shape[-1:] and view.stride(-1) == 1:
                target = view
        result = _attend(
            q_view, k_view, v_view, qpos, kpos, mask, target, kernel, options, records
        )
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
    qkv_format="bshd",
    out_dtype=None,
):
    """Self-Extend attention (Jin et al. 2024; posenc/self_extend.h): a RoPE model reads past its
    trained context with no training. Keys closer than ``neighbor_window`` (W) to the query are
    scored at their own positions, farther ones at grouped positions (keys floor(p / G), queries
    floor(p / G) + W - floor(W / G), G = ``group_size``), one softmax over both. q and k are the
    un-rotated projections; ``rope`` (a posenc.Rope or a RotaryEmbedding) is required.

    Shapes, positions (and their defaults), causal, window, scale, qkv_format and the output
    dtype as in ``attention``. Plain CPU float32 and bfloat16 tensors run posenc's tiled kernel
    twice with no T x T buffer; everything else (other devices, meta and fake tensors, autograd)
    the same formula in PyTorch operations. The authors pick the smallest G whose window
    (L0 - W) G + W holds the input (L0 the trained length); docs/SELF_EXTEND.md.
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
        "self_extend", query_positions, key_positions, q_view.shape[-3], k_view.shape[-3],
        None, None,
    )
    if not isinstance(rope, _core.Rope):
        rope = rope.rope_at(qpos, kpos)
    if q.dtype in _ATTENTION_DTYPES and _on_kernel(q, k, v, qpos, kpos) and not _records(q, k, v):
        result = torch.from_numpy(
            _core.self_extend_attention(
                _numpy(q_view), _numpy(k_view), _numpy(v_view), qpos.numpy(), kpos.numpy(),
                group_size=group_size, neighbor_window=neighbor_window, rope=rope,
                causal=causal, scale=scale or 0.0, window=window,
                bfloat16=q.dtype is torch.bfloat16,
            )
        )
    else:
        if group_size < 1 or neighbor_window < 1:
            raise _error(
                "self_extend", "group_size and neighbor_window", "be >= 1",
                (group_size, neighbor_window),
            )
        device = q.device
        result = _reference.self_extend_attention(
            q_view, k_view, v_view, qpos.to(device), kpos.to(device), group_size=group_size,
            neighbor_window=neighbor_window, rope=rope, causal=causal, scale=scale,
            window=window,
        )
    if qkv_format == "bhsd":
        result = result.transpose(-2, -3)
    return result.to(out_dtype)


torch.fx.wrap("self_extend_attention")


def _position_mask(attention_mask, k_view):
    """attention_mask as a bool tensor [..., kv_tokens] of k's batch dims."""
    if not isinstance(attention_mask, torch.Tensor):
        attention_mask = torch.as_tensor(attention_mask)
    if attention_mask.is_floating_point() or attention_mask.is_complex():
        raise _error(
            "attention",
            "attention_mask",
            "be bool or integer 0/1 (Hugging Face's padding mask, not an "
            "additive float mask)",
            _dtype_name(attention_mask.dtype),
        )
    expect = tuple(k_view.shape[:-3]) + (k_view.shape[-3],)
    if tuple(attention_mask.shape) != expect:
        raise _error(
            "attention",
            "attention_mask.shape",
            f"be (*batch, kv_tokens) = {expect}",
            tuple(attention_mask.shape),
        )
    return attention_mask.to(torch.bool)


torch.fx.wrap("attention")


def _rope_from_fields(head_dim, rotary_dim, layout, inv_freq, factor, offset):
    return _core.Rope(
        head_dim, rotary_dim, _LAYOUTS[layout], list(inv_freq), factor,
        rotary_offset=offset,
    )


def _rope_fx_arg(rope, tracer):
    """A posenc.Rope in a torch.fx graph: a node that rebuilds it from its
    plain fields (fx keeps only plain Python values as constants)."""
    layout = "half_split" if rope.layout == _core.RopeLayout.HALF_SPLIT else "interleaved"
    fields = (rope.head_dim, rope.rotary_dim, layout, tuple(rope.inv_freq),
              rope.attention_factor, rope.rotary_offset)
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


def _kv_tensor(cache, name, tensor):
    """The numpy view of k, v or q for a cache of cache.dtype (inference)."""
    _check_activations("kv_cache", name, tensor, _ATTENTION_DTYPES)
    if tensor.dtype != cache.dtype:
        raise _error(
            "kv_cache",
            f"{name}.dtype",
            f"equal the cache's dtype ({_dtype_name(cache.dtype)})",
            _dtype_name(tensor.dtype),
        )
    if torch.is_grad_enabled() and tensor.requires_grad:
        raise _error(
            "kv_cache",
            name,
            "not require grad while autograd records (the cache is for "
            "inference, there is no backward; use torch.no_grad() or "
            ".detach())",
            "a tensor that requires grad",
        )
    return _numpy(tensor)


class KVCache:
    """One attention layer's KV cache of one sequence, for decoding on the
    CPU (``posenc.KvCache`` on torch tensors).

    Keys are rotated once, when they are appended, by the layer's RoPE (a
    ``posenc.Rope``, or a ``posenc.MRope`` for Qwen-VL's M-RoPE, or neither
    for a NoPE layer); ``attend`` rotates only the new queries. Build it from
    a Hugging Face config with ``from_hf_config(config, capacity, layer=i)``
    or directly. Storage is ``dtype``, float32 or bfloat16; k, v and q must
    have that dtype.

    Shapes are posenc's, one sequence and no batch dim: k [tokens, kv_heads,
    head_dim], v [tokens, kv_heads, value_dim], q [tokens, heads, head_dim]
    (heads a multiple of kv_heads). Hugging Face's key_states [1, kv_heads,
    seq, head_dim] pass as ``key_states[0].transpose(0, 1)`` without a copy.

    Decode loop::

        cache = KVCache.from_hf_config(config, capacity=4096, layer=0)
        cache.append(k, v)                # prefill: positions 0 .. n - 1
        out = cache.attend(q)             # [n, heads, head_dim] float32
        for step in range(steps):
            cache.append(k1, v1)          # the next position
            out = cache.attend(q1)        # the new token against all

    Inference only: nothing is differentiable, and a tensor that requires
    grad while autograd records raises ``posenc.Error`` (use
    ``torch.no_grad()``), as ``attention`` does. Every problem raises
    ``posenc.Error`` (a ValueError) with the library's message before the
    cache changes.

    M-RoPE: keys turn by position streams [streams, tokens] (``streams=``)
    while ``positions`` keep the token order; without ``streams``, every
    stream is ``positions + rope_delta`` (Hugging Face's decode rule, with
    ``rope_delta`` its rope_deltas from ``get_rope_index``; 0 until set).
    """

    def __init__(
        self,
        capacity,
        kv_heads,
        head_dim,
        *,
        value_dim=None,
        rope=None,
        mrope=None,
        dtype=torch.float32,
    ):
        sizes = (("capacity", capacity), ("kv_heads", kv_heads), ("head_dim", head_dim))
        for name, value in sizes:
            _check_int("kv_cache", name, value)
        _check_int("kv_cache", "value_dim", value_dim, allow_none=True)
        if dtype not in _ATTENTION_DTYPES:
            raise _error(
                "kv_cache",
                "dtype",
                "be float32 or bfloat16",
                _dtype_name(dtype)
                if isinstance(dtype, torch.dtype)
                else repr(dtype),
            )
        self._cache = _core.KvCache(
            capacity,
            kv_heads,
            head_dim,
            value_dim=0 if value_dim is None else value_dim,
            rope=rope,
            mrope=mrope,
            bfloat16=dtype == torch.bfloat16,
        )
        self.dtype = dtype
        self.rope_delta = 0

    @property
    def rope_delta(self):
        """Hugging Face's rope_deltas of this sequence (an int; 0 until set):
        an int, or a one-element integer tensor or array (``get_rope_index``'s
        rope_deltas[b]), in [-2^32, 2^32]."""
        return self._rope_delta

    @rope_delta.setter
    def rope_delta(self, value):
        delta, shown = None, type(value).__name__
        if isinstance(value, (torch.Tensor, np.ndarray)):
            shown = f"{shown} of shape {tuple(value.shape)} and dtype {value.dtype}"
            try:
                tensor = torch.as_tensor(value)
            except (TypeError, RuntimeError):  # an object array
                tensor = torch.zeros(0)
            integral = not (
                tensor.is_floating_point() or tensor.is_complex() or tensor.dtype == torch.bool
            )
            if tensor.numel() == 1 and integral:
                delta = int(tensor.item())
        elif isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
            delta = shown = int(value)
        if delta is None or abs(delta) > _core.MAX_POSITION:
            raise _error(
                "kv_cache",
                "rope_delta",
                "be an int in [-2^32, 2^32] or a one-element integer tensor "
                "(get_rope_index's rope_deltas[b])",
                shown,
            )
        self._rope_delta = delta

    @classmethod
    def from_hf_config(
        cls, config, capacity, layer=None, *, dtype=torch.float32, **kwargs
    ):
        """A cache for one layer of a Hugging Face model: kv_heads
        (num_key_value_heads) and the layer's RoPE from the config (a dict,
        its JSON text or a config.json path): ``mrope_from_hf_config`` for a
        config with mrope_section, else ``rope_from_hf_config``; a NoPE layer
        (Llama 4, SmolLM3) gets a cache that does not rotate. ``layer`` is a
        layer index or type as in ``rope_from_hf_config``; other keywords
        (layer_type, seq_len, precision) go to it."""
        model = model_positions(config)
        if model.scheme != "rope":
            raise _error(
                "kv_cache",
                "config",
                "describe a model with RoPE (a RoPE-less cache: KVCache(capacity, "
                "kv_heads, head_dim), with attend(alibi=...) for ALiBi)",
                f"{model.model_type} ({model.scheme})",
            )
        kv_heads = model.num_key_value_heads or model.num_attention_heads
        layers = model.layers
        nope = (
            isinstance(layer, int)
            and not isinstance(layer, bool)
            and 0 <= layer < len(layers)
            and layers[layer].scheme == "nope"
        )
        if nope:
            return cls(capacity, kv_heads, model.head_dim, dtype=dtype)
        if model.to_dict().get("mrope_section") is not None:
            mrope = mrope_from_hf_config(config, layer=layer, **kwargs)
            return cls(
                capacity, kv_heads, mrope.head_dim, mrope=mrope, dtype=dtype
            )
        rope = rope_from_hf_config(config, layer=layer, **kwargs)
        return cls(capacity, kv_heads, rope.head_dim, rope=rope, dtype=dtype)

    def _streams(self, positions, streams, name):
        """streams as given, or every stream at positions + rope_delta (an
        mrope cache); None for a cache without mrope, where the binding
        refuses streams."""
        if streams is not None:
            return _positions("kv_cache", streams, name)
        mrope = self._cache.mrope
        if mrope is None:
            return None
        return np.broadcast_to(
            positions + self.rope_delta,
            (mrope.num_streams, positions.shape[0]),
        )

    def append(self, k, v, positions=None, *, streams=None):
        """Appends n tokens: k [n, kv_heads, head_dim] rotated at
        ``positions`` into the next slots, v [n, kv_heads, value_dim]. Default
        positions continue from the last cached position + 1 (0 for an empty
        cache); explicit ones are an int64 tensor or a sequence of ints."""
        k_array = _kv_tensor(self, "k", k)
        v_array = _kv_tensor(self, "v", v)
        if positions is None:
            n = k.shape[0] if k.dim() == 3 else 0
            positions = np.arange(n, dtype=np.int64) + self._next_position()
        else:
            positions = _positions("kv_cache", positions)
        self._cache.append(
            positions,
            k_array,
            v_array,
            streams=self._streams(positions, streams, "streams"),
        )

    def attend(
        self,
        q,
        positions=None,
        *,
        causal=True,
        alibi=None,
        scale=0.0,
        window=0,
        chunk_size=0,
        softcap=0.0,
        sinks=None,
        streams=None,
        out_dtype=None,
    ):
        """Attention of q [n, heads, head_dim] against every cached token ->
        [n, heads, value_dim] in the cache's dtype (or out_dtype). Default
        positions: those of the last n cached tokens (the queries of the
        tokens just appended). The options are ``posenc.attention``'s,
        against the cached positions: causal, alibi, scale (0: 1 /
        sqrt(head_dim)), window (0: none), chunk_size (Llama 4's chunks; 0:
        none), softcap (Gemma 2; 0: off), sinks (gpt-oss: a floating CPU
        tensor [heads], read without autograd)."""
        q_array = _kv_tensor(self, "q", q)
        if sinks is not None:
            _check_softcap_sinks(softcap, sinks, q, q.shape[-2] if q.dim() else 0, "kv_cache")
            sinks = sinks.detach().to(torch.float32).contiguous().numpy()
        if out_dtype is None:
            out_dtype = self.dtype
        _float_dtype("kv_cache", "out_dtype", out_dtype)
        if positions is None:
            n = q.shape[0] if q.dim() == 3 else 0
            cached = self._cache.positions
            if n > cached.shape[0]:
                raise _error(
                    "kv_cache",
                    "positions",
                    f"be given when q has more tokens than the cache "
                    f"(size {cached.shape[0]})",
                    f"None for {n} tokens",
                )
            positions = np.array(cached[cached.shape[0] - n :])
        else:
            positions = _positions("kv_cache", positions)
        out = self._cache.attend(
            q_array,
            positions,
            causal=causal,
            alibi=alibi,
            scale=scale,
            window=window,
            chunk_size=chunk_size,
            softcap=softcap,
            sinks=sinks,
            query_streams=self._streams(positions, streams, "streams"),
        )
        return torch.from_numpy(out).to(out_dtype)

    def _next_position(self):
        cached = self._cache.positions
        return int(cached[-1]) + 1 if cached.shape[0] else 0

    def context_shift(self, n_keep, n_discard):
        """llama.cpp's context shift: keeps the first n_keep tokens, drops the
        next n_discard, moves the rest down and their positions by
        -n_discard (keys re-rotated exactly)."""
        self._cache.context_shift(n_keep, n_discard)

    def remove(self, begin, end):
        """Drops slots [begin, end); later tokens keep their positions."""
        self._cache.remove(begin, end)

    def shift_positions(self, begin, end, delta):
        """Moves the positions of slots [begin, end) by delta (keys
        re-rotated exactly)."""
        self._cache.shift_positions(begin, end, delta)

    def roll_sink_window(self, sinks, window, incoming=1, mode="text"):
        """Attention sinks (StreamingLLM): makes room for ``incoming`` tokens
        in a cache kept as ``sinks`` first tokens plus a window of the last
        ``window``; returns the number dropped. mode "text" keeps positions
        as in the text, "cache" shifts the window down to cache slots."""
        return self._cache.roll_sink_window(sinks, window, incoming, mode)

    def _tensor(self, array):
        tensor = torch.from_numpy(np.array(array))
        if self.dtype == torch.bfloat16:
            return tensor.view(torch.bfloat16)
        return tensor

    @property
    def keys(self):
        """The cached keys, rotated: a copy, [size, kv_heads, head_dim]."""
        return self._tensor(self._cache.keys)

    @property
    def values(self):
        """The cached values: a copy, [size, kv_heads, value_dim]."""
        return self._tensor(self._cache.values)

    @property
    def positions(self):
        """int64 [size]: the cached positions (a copy)."""
        return torch.from_numpy(np.array(self._cache.positions))

    size = property(lambda self: self._cache.size, doc="Tokens cached.")
    capacity = property(lambda self: self._cache.capacity, doc="Slots.")
    kv_heads = property(lambda self: self._cache.kv_heads)
    head_dim = property(lambda self: self._cache.head_dim)
    value_dim = property(lambda self: self._cache.value_dim)
    rope = property(
        lambda self: self._cache.rope, doc="The posenc.Rope, or None."
    )
    mrope = property(
        lambda self: self._cache.mrope, doc="The posenc.MRope, or None."
    )

    def __len__(self):
        return self._cache.size

    def __repr__(self):
        return f"KVCache({repr(self._cache)[len('KvCache('):]}"


# Context-parallel attention, posenc.torch.distributed: imported last, when every name it uses
# from here exists. posenc.torch is a module, not a package, so the submodule is registered under
# its dotted name as well: `import posenc.torch.distributed` then finds it in sys.modules.
import sys as _sys  # noqa: E402

from posenc import distributed  # noqa: E402

_sys.modules[__name__ + ".distributed"] = distributed
