"""RoPE on torch tensors: apply_rope, apply_rope_, rope_cos_sin and the RotaryEmbedding
module, rotating through the kernels (posenc's ops posenc::rope and posenc::rope_, whose
backward pass is the inverse rotation) or the PyTorch definition."""

import json
import os

import torch
import torch.fx

from posenc import _core, _pretrained_config_dict, rope_from_hf_config
from posenc import _torch_reference as _reference
from posenc.torch import _ops
from posenc.torch._tensors import (
    _ROPE_DTYPES,
    _check_instance,
    _check_int,
    _check_number,
    _check_pair,
    _check_positions_device,
    _check_tensor,
    _error,
    _float_dtype,
    _layout,
    _on_kernel,
    _plain,
    _position_range,
    _position_tensor,
    _qkv_format,
    _records,
    _same_view,
    _tokens_first,
    _traced,
)


def _rotate_views(function, rotation, positions, views):
    """Rotates posenc-layout views by a posenc.Rope or posenc.MRope at int64
    positions: the kernel on CPU tensors (straight from the binding for plain
    tensors that autograd does not record, else differentiably through
    _ops.rotate: posenc's ops, whose backward pass is the inverse rotation),
    else the pure-PyTorch definition."""
    if _plain(*views, positions) and not _records(*views):
        q, k = views if len(views) == 2 else (views[0], None)
        outs = _ops.kernel_rotate(rotation, positions.numpy(), q, k, _core.RopeDirection.FORWARD)
        return (outs,) if k is None else outs
    if _on_kernel(*views, positions):
        return tuple(_ops.rotate(rotation, positions, v) for v in views)
    positions = positions.to(views[0].device)
    return tuple(_reference.rotate(rotation, positions, v) for v in views)


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
    if _plain(*views, positions):
        _ops.rotate_inplace(rotation, positions, *views, *(None,) * (2 - len(views)))
    elif _on_kernel(*views, positions):
        # One op call for q and k: the kernel refuses them sharing memory.
        ints, floats = _ops.rope_fields(rotation)
        _ops.rope_(*views, *(None,) * (2 - len(views)), positions, ints, floats)
    else:
        # The kernel checks overlap element by element; off the CPU, q and k
        # as one view (rotated twice in place) are refused with its message.
        if len(views) == 2 and _same_view(*views):
            raise _error(function, "k", "not share memory with q", "overlapping views")
        rotated = _rotate_views(function, rotation, positions, views)
        for view, out in zip(views, rotated):
            view.copy_(out)
    return q if k is None else (q, k)


def apply_rope(rope, positions, q, k=None, *, qkv_format=None):
    """Rotates q (and k) by RoPE at their positions; differentiable.

    Forward: pair i of each head turns by phi = pos * rope.inv_freq[i], cos and sin times
    rope.attention_factor (y = a R(phi) x). Backward: the transpose a R(-phi), by the same
    kernel. The argument order is posenc's everywhere (numpy's ``posenc.apply_rope`` and the C++
    ApplyRope): scheme, positions, tensors. Plain CPU tensors run the C++ kernels in float32,
    float64, bfloat16 or float16; tensors elsewhere (CUDA, meta, FakeTensor) run the same
    definition in PyTorch operations.

    Args:
        rope: a ``posenc.Rope``, or a ``RotaryEmbedding`` (whose dynamic-NTK or LongRoPE
            frequencies then follow the positions: L = max(positions) + 1).
        positions: int64 [tokens] (shared by the batch) or [..., tokens] (Hugging Face's
            position_ids [batch, seq]), each in [0, 2^32]; a sequence of ints is converted.
        q: the queries: float32, float64, bfloat16 or float16.
        k: the keys, of q's dtype; None rotates q alone.
        qkv_format: "bshd" (posenc's) or "bhsd" (Hugging Face's, read and written without a
            copy, forward and backward); required, no default.

    Shapes:
        q: [..., tokens, heads, head_dim] for "bshd"; [..., heads, tokens, head_dim] for "bhsd".
        k: [..., tokens, kv_heads, head_dim] for "bshd"; [..., kv_heads, tokens, head_dim] for
            "bhsd".

    Returns:
        q_rot, or (q_rot, k_rot) when k is given: new tensors of the inputs' shapes and dtype.

    Raises:
        posenc.Error: a bad argument (type, dtype, shape, qkv_format, a position outside
            [0, 2^32]), before anything is computed.
    """
    if _plain_rope_call(rope, positions, q, k, qkv_format):
        return _ops.kernel_rotate(rope, positions.numpy(), q, k, _core.RopeDirection.FORWARD)
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
        and _plain(q, k, positions)
        and positions.dtype is torch.int64
        and q.dtype in _ROPE_DTYPES
        and (k is None or k.dtype is q.dtype)
        and not _records(q, k)
    )


def _rotate_with(rotate, module, q, k, *rest):
    """A rotary module's forward: rotate(module, q, k, *rest), or while torch.fx traces, one
    node per rotated tensor (fx cannot unpack a node's result)."""
    if k is not None and _traced(q, k, *rest):
        return rotate(module, q, None, *rest), rotate(module, k, None, *rest)
    return rotate(module, q, k, *rest)


def _apply_rope_one(rope, positions, x, qkv_format):
    """One tensor's rotation, as torch.fx records it."""
    return _rope_call("rope", rope, positions, x, None, qkv_format, False)


def apply_rope_(rope, positions, q, k=None, *, qkv_format=None):
    """Rotates q (and k) by RoPE in place, for decode loops: ``apply_rope`` written into its
    inputs.

    Not differentiable. Nothing is written unless every argument is valid.

    Args:
        rope: a ``posenc.Rope`` or a ``RotaryEmbedding``, as in ``apply_rope``.
        positions: int64 [tokens] or [..., tokens], as in ``apply_rope``.
        q: the queries, overwritten with their rotation.
        k: the keys, overwritten likewise (not sharing memory with q); None rotates q alone.
        qkv_format: "bshd" or "bhsd", as in ``apply_rope``; required, no default.

    Shapes:
        q, k: as in ``apply_rope``.

    Returns:
        q, or (q, k) when k is given: the input tensors themselves, rotated.

    Raises:
        posenc.Error: a bad argument as in ``apply_rope``, k sharing memory with q, or a tensor
            that requires grad while autograd records (an in-place rotation has no backward).
    """
    if _plain_rope_call(rope, positions, q, k, qkv_format):
        _ops.rotate_inplace(rope, positions, q, k)
        return q if k is None else (q, k)
    return _rope_call("rope", rope, positions, q, k, qkv_format, True)


def rope_cos_sin(rope, positions, dtype=torch.float32):
    """Hugging Face's (cos, sin) tables of a RoPE at these positions.

    Pair i's cos(pos * inv_freq[i]) * attention_factor (and its sin) sits on both of the pair's
    features (half-split: cat(f, f); interleaved: each twice), formed in float64 and rounded
    once to dtype (Hugging Face forms the angle in float32, which loses digits at large
    positions).

    Args:
        rope: a ``posenc.Rope`` or a ``RotaryEmbedding`` (a length-dependent rule at
            L = max(positions) + 1).
        positions: int64 [..., tokens], each in [0, 2^32]; a sequence of ints is converted.
        dtype: the tables' dtype: float32, float64, bfloat16 or float16.

    Returns:
        (cos, sin), each [..., tokens, rotary_dim] of dtype.

    Raises:
        posenc.Error: a bad rope, position or dtype.
    """
    dtype = _float_dtype("rope", "dtype", dtype)
    positions = _position_tensor("rope", positions)
    return _reference.hf_cos_sin(_rope_scheme("rope", rope, positions), positions, dtype)


def _module_rope(module, q, k, positions, qkv_format):
    """RotaryEmbedding.forward, as a function torch.fx records as one node."""
    qkv_format = _qkv_format("rope", qkv_format or module.qkv_format, " here or to RotaryEmbedding")
    if positions is None:
        _check_tensor("rope", "q", q, _ROPE_DTYPES)
        if q.dim() < 3:
            _tokens_first("rope", "q", q, qkv_format)
        positions = _position_range("rope", q.shape[-3 if qkv_format == "bshd" else -2])
    return apply_rope(module, positions, q, k, qkv_format=qkv_format)


torch.fx.wrap("_apply_rope_one")
torch.fx.wrap("_module_rope")


class RotaryEmbedding(torch.nn.Module):
    """RoPE as a module: ``forward(q, k=None, positions=None, *, qkv_format=None)`` -> q_rot, or
    (q_rot, k_rot) when k is given.

    Built from plain RoPE arguments (head_dim, base, layout, rotary_dim, rotary_offset), from a
    ready ``posenc.Rope`` (``rope=``), or from a Hugging Face config (``from_hf_config``). The
    module has no parameters; it pickles, deep-copies and goes through torch.save.

    Args:
        head_dim: the features of a head; required unless rope is given.
        base: theta of the plain frequencies inv_freq[i] = base^(-2i / rotary_dim).
        layout: the pairs: "half_split" (GPT-NeoX, Llama in Hugging Face: pair i = (i, i +
            rotary_dim / 2)) or "interleaved" (RoFormer, GPT-J: pair i = (2i, 2i + 1)).
        rotary_dim: the rotated features (even); None: all from rotary_offset on. Features past
            them pass through untouched (partial rotary).
        rotary_offset: the first rotated feature (DeepSeek MLA: head_dim 192, rotary_offset 128,
            rotary_dim 64).
        rope: a ready ``posenc.Rope``; None builds one from the arguments above, which are not
            read when it is given.
        qkv_format: "bshd" or "bhsd" (``apply_rope``): where the tokens are, given here or per
            call (one of them is required); None: each call says.

    Raises:
        posenc.Error: head_dim missing without rope, or a bad size, base, layout, rope or
            qkv_format, named.
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
                raise _error("rope", "head_dim", "be given when rope is not", None)
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
        self.qkv_format = None if qkv_format is None else _qkv_format("rope", qkv_format)
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
        yarn_rules=None,
    ):
        """The RoPE of one layer of a Hugging Face config (``posenc.rope_from_hf_config``).

        Where the rope type depends on the length (dynamic NTK, LongRoPE) the frequencies follow
        each call's positions, L = max(positions) + 1, as Hugging Face's module does, unless
        ``seq_len`` fixes L here.

        Args:
            config: a transformers ``PretrainedConfig``, a dict (a parsed config.json), its JSON
                text or the path of a config.json (read once: the module depends on no file).
            layer: a layer index (``posenc.model_positions(config).layers``) or a layer type;
                None: the config's first RoPE setting, as in ``rope_from_hf_config``.
            layer_type: one of a per-layer config's types (e.g. "sliding_attention").
            seq_len: L of a length-dependent rule, fixed here; None: each call's positions.
            precision: ``posenc.RopePrecision.REFERENCE`` (the float32 frequencies the models
                were trained with) or ``EXACT`` (double throughout).
            qkv_format: "bshd" or "bhsd" for the module's calls, as in ``RotaryEmbedding``.
            yarn_rules: a transformers release's YaRN ("transformers5", "transformers4_50" or
                "transformers4_51"); None: the release that wrote the config.

        Returns:
            A ``RotaryEmbedding``.

        Raises:
            posenc.Error: a config that is not RoPE, a bad key (named as written in the file),
                or a layer that does not rotate (a NoPE layer of Llama 4 or SmolLM3), named
                (posenc.Error is a ValueError).
        """
        options = dict(
            layer=layer, layer_type=layer_type, precision=precision, yarn_rules=yarn_rules
        )
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
        """The ``posenc.Rope`` of a call at these positions.

        The module's own, or for a length-dependent rule (dynamic NTK, LongRoPE) the one of
        L = max(positions) + 1 (cached per length). Fixed rules never read the positions.

        Args:
            *positions: int64 tensors: one, or a call's query and key positions.

        Returns:
            A ``posenc.Rope``.
        """
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
        """float64 [rotary_dim / 2]: the inverse frequencies (at the construction-time length
        for a length-dependent rule)."""
        return torch.tensor(self.rope.inv_freq, dtype=torch.float64)

    def cos_sin(self, positions, dtype=torch.float32):
        """Hugging Face's (cos, sin) at these positions: ``rope_cos_sin`` of this module.

        Args:
            positions: int64 [..., tokens], each in [0, 2^32].
            dtype: the tables' dtype: float32, float64, bfloat16 or float16.

        Returns:
            (cos, sin), each [..., tokens, rotary_dim] of dtype.

        Raises:
            posenc.Error: a bad position or dtype.
        """
        return rope_cos_sin(self, positions, dtype)

    def forward(self, q, k=None, positions=None, *, qkv_format=None):
        """Rotates q (and k) by the module's RoPE; differentiable (``apply_rope``).

        Args:
            q: the queries: float32, float64, bfloat16 or float16.
            k: the keys, of q's dtype; None rotates q alone.
            positions: int64 [tokens] or [..., tokens]; None: 0 .. tokens - 1. A
                length-dependent rule (dynamic NTK, LongRoPE) turns at L = max(positions) + 1.
            qkv_format: "bshd" or "bhsd"; None: the module's (one of them is required).

        Shapes:
            q: [..., tokens, heads, head_dim] for "bshd"; [..., heads, tokens, head_dim] for
                "bhsd".
            k: [..., tokens, kv_heads, head_dim] for "bshd"; [..., kv_heads, tokens, head_dim]
                for "bhsd".

        Returns:
            q_rot, or (q_rot, k_rot) when k is given, of the inputs' shapes and dtype.

        Raises:
            posenc.Error: as ``apply_rope``, or no qkv_format here nor on the module.
        """
        return _rotate_with(_module_rope, self, q, k, positions, qkv_format)

    def extra_repr(self):
        """The module's line in ``print(model)``: its ``posenc.Rope``, qkv_format when set, and
        whether the frequencies follow the positions' length.

        Returns:
            str.
        """
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
    """The JSON text of a config given as a PretrainedConfig, dict, JSON text or path (read
    once: the module then depends on no file)."""
    config = _pretrained_config_dict(config) or config
    if isinstance(config, dict):
        return json.dumps(config)
    if isinstance(config, str) and config.lstrip().startswith("{"):
        return config
    with open(os.fspath(config), encoding="utf-8") as f:
        return f.read()
