"""posenc's kernels as PyTorch operators: torch.library custom ops in the namespace ``posenc``,
so that torch.compile and torch.export see each call as one node of the graph instead of
stopping at code they cannot trace.

    posenc::rope(x, positions, rope_ints, rope_floats, inverse) -> y
    posenc::rope_(q!, k!?, positions, rope_ints, rope_floats)     (in place, forward)
    posenc::mrope(x, positions, rope_ints, rope_floats, pair_stream, inverse) -> y
    posenc::attention(q, k, v, query_positions, key_positions, key_mask, sinks, *options) -> out
    posenc::attention_forward(...same...) -> (out, lse)
    posenc::attention_backward(...same tensors..., out, lse, d_out, *options)
        -> (dq, dk, dv, d_sinks)

Activations are posenc's layout, [..., tokens, heads, dim], on the CPU: x in float32, float64,
bfloat16 or float16, q, k and v in float32 or bfloat16; positions int64. rope and mrope are
differentiable (the backward pass is the same op in the other direction), attention_forward
through attention_backward (whose own backward raises: the kernel's backward is not
differentiable again). attention is the inference call (no log-sum-exp kept).

Scheme objects cannot be operator arguments, so a posenc.Rope travels as its fields
(``rope_fields``: ints [head_dim, rotary_dim, rotary_offset, interleaved] and float64s
[attention_factor, *inv_freq]), a posenc.MRope as those and its pair_stream, a posenc.Alibi as
[num_heads, head_offset, shard_heads] and max_bias; each op rebuilds the scheme (once per set of
fields). The attention options after sinks are ATTENTION_OPTIONS, in that order; scale 0 means
1 / sqrt(head_dim). key_mask, bool [..., 1 or q_tokens, kv_tokens] (posenc.torch._masks: a
padding mask's one row, or each query's row of a 4-D mask), runs the kernel per piece of a
batch element, its queries against their interval of keys (or a padding mask's kept keys where
they are not one interval), each at its own positions, which is the masked attention exactly; a
query that sees no key gets zeros.

Each op's implementation is a plain function here as well, which posenc.torch calls straight
from eager code on plain CPU tensors: directly when autograd does not record (a decode step's
path), through a torch.autograd.Function with the op's own autograd formula when it does
(_EagerAttention, _EagerRotation: the op's autograd wrapper costs more per call than a short
sequence's kernel). FakeTensors, torch.compile and torch.export get the ops.
"""

import numpy as np
import torch

from posenc import _core
from posenc.torch import _masks
from posenc.torch._masks import batch_element
from posenc.torch._tensors import _empty, _head_view, _numpy, _plain, _tensor_of

_FORWARD, _INVERSE = _core.RopeDirection.FORWARD, _core.RopeDirection.INVERSE

# Schemes rebuilt from fields, by their fields (a decode loop rebuilds none); bounded, as a
# length-dependent RoPE rule gives one Rope per length.
_SCHEMES = {}
_CACHED_SCHEMES = 64


def _remember(key, scheme):
    if len(_SCHEMES) >= _CACHED_SCHEMES:
        _SCHEMES.clear()
    _SCHEMES[key] = scheme
    return scheme


# The fields are read by plain Python even while torch.compile traces (assume_constant_result):
# a scheme's accessors return new objects on each call (its layout, an MRope's rope), on whose
# identity the traced code would otherwise depend. The scheme itself is guarded as usual.


# Each Rope's fields, by its id (the Rope held, so that the id is not reused): reading
# inv_freq from the library costs an eager call more than the rest of its options.
_FIELDS = {}


@torch.compiler.assume_constant_result
def rope_fields(rope):
    """A posenc.Rope as operator arguments: (ints [head_dim, rotary_dim, rotary_offset,
    interleaved], float64s [attention_factor, *inv_freq]); nothing is rounded."""
    held = _FIELDS.get(id(rope))
    if held is not None and held[0] is rope:
        return held[1]
    interleaved = int(rope.layout == _core.RopeLayout.INTERLEAVED)
    ints = [rope.head_dim, rope.rotary_dim, rope.rotary_offset, interleaved]
    fields = (ints, [rope.attention_factor, *rope.inv_freq])
    if len(_FIELDS) >= _CACHED_SCHEMES:
        _FIELDS.clear()
    _FIELDS[id(rope)] = (rope, fields)
    return fields


@torch.compiler.assume_constant_result
def mrope_fields(mrope):
    """A posenc.MRope as operator arguments: its rope's fields and pair_stream."""
    return (*rope_fields(mrope.rope), list(mrope.pair_stream))


@torch.compiler.assume_constant_result
def alibi_fields(alibi):
    """A posenc.Alibi as operator arguments: (ints [num_heads, head_offset, shard_heads],
    max_bias)."""
    return [alibi.num_heads, alibi.head_offset, alibi.shard_heads], alibi.max_bias


def _rope_of(ints, floats):
    key = ("rope", tuple(ints), tuple(floats))
    rope = _SCHEMES.get(key)
    if rope is None:
        head_dim, rotary_dim, offset, interleaved = ints
        layout = _core.RopeLayout.INTERLEAVED if interleaved else _core.RopeLayout.HALF_SPLIT
        rope = _remember(
            key,
            _core.Rope(
                head_dim, rotary_dim, layout, list(floats[1:]), floats[0], rotary_offset=offset
            ),
        )
    return rope


def _mrope_of(ints, floats, pair_stream):
    key = ("mrope", tuple(ints), tuple(floats), tuple(pair_stream))
    mrope = _SCHEMES.get(key)
    if mrope is None:
        mrope = _remember(key, _core.MRope(_rope_of(ints, floats), list(pair_stream)))
    return mrope


def _alibi_of(ints, max_bias):
    key = ("alibi", tuple(ints), max_bias)
    alibi = _SCHEMES.get(key)
    if alibi is None:
        num_heads, head_offset, shard_heads = ints
        alibi = _remember(
            key,
            _core.Alibi(
                num_heads, max_bias=max_bias, head_offset=head_offset, shard_heads=shard_heads
            ),
        )
    return alibi


# RoPE and M-RoPE.


def kernel_rotate(rotation, positions, q, k, direction):
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
            rotation,
            positions,
            _numpy(q),
            direction=direction,
            out=_numpy(q_out),
            bfloat16=bfloat16,
        )
        return q_out
    k_out = _empty(function, k.shape, k.dtype, like=k)
    apply_qk = _core.apply_mrope_qk if multi else _core.apply_rope_qk
    apply_qk(
        rotation,
        positions,
        _numpy(q),
        _numpy(k),
        direction=direction,
        q_out=_numpy(q_out),
        k_out=_numpy(k_out),
        bfloat16=bfloat16,
    )
    return q_out, k_out


def _direction(inverse):
    return _INVERSE if inverse else _FORWARD


@torch.library.custom_op("posenc::rope", mutates_args=())
def rope(
    x: torch.Tensor,
    positions: torch.Tensor,
    rope_ints: list[int],
    rope_floats: list[float],
    inverse: bool,
) -> torch.Tensor:
    """x [..., tokens, heads, head_dim] turned by RoPE at int64 positions [tokens] or [...,
    tokens]: y = a R(phi) x, or with inverse its transpose a R(-phi). y is allocated like x."""
    rotation = _rope_of(rope_ints, rope_floats)
    return kernel_rotate(rotation, positions.numpy(), x, None, _direction(inverse))


@torch.library.custom_op("posenc::mrope", mutates_args=())
def mrope(
    x: torch.Tensor,
    positions: torch.Tensor,
    rope_ints: list[int],
    rope_floats: list[float],
    pair_stream: list[int],
    inverse: bool,
) -> torch.Tensor:
    """x turned by multi-stream RoPE at int64 position streams [streams, tokens] or [streams,
    ..., tokens]: pair i by the positions of stream pair_stream[i]."""
    rotation = _mrope_of(rope_ints, rope_floats, pair_stream)
    return kernel_rotate(rotation, positions.numpy(), x, None, _direction(inverse))


@rope.register_fake
def _rope_fake(x, positions, rope_ints, rope_floats, inverse):
    return torch.empty_like(x)


@mrope.register_fake
def _mrope_fake(x, positions, rope_ints, rope_floats, pair_stream, inverse):
    return torch.empty_like(x)


def _rotation_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[1])
    ctx.fields = inputs[2:]


def _rope_backward(ctx, grad):
    """The transpose of a R(phi) is a R(-phi): the same op in the other direction, itself
    differentiable."""
    (positions,) = ctx.saved_tensors
    ints, floats, inverse = ctx.fields
    return rope(_head_view(grad), positions, ints, floats, not inverse), None, None, None, None


def _mrope_backward(ctx, grad):
    (positions,) = ctx.saved_tensors
    ints, floats, pair_stream, inverse = ctx.fields
    grad = mrope(_head_view(grad), positions, ints, floats, pair_stream, not inverse)
    return grad, None, None, None, None, None


rope.register_autograd(_rope_backward, setup_context=_rotation_setup)
mrope.register_autograd(_mrope_backward, setup_context=_rotation_setup)


def rotate_inplace(rope, positions, q, k):
    """q (and k, or None) turned by a posenc.Rope in place (the forward direction), one kernel
    call that refuses q and k sharing memory."""
    bfloat16 = q.dtype is torch.bfloat16
    if k is None:
        _core.apply_rope_inplace(rope, positions.numpy(), _numpy(q), bfloat16=bfloat16)
    else:
        _core.apply_rope_qk_inplace(
            rope, positions.numpy(), _numpy(q), _numpy(k), bfloat16=bfloat16
        )


@torch.library.custom_op(
    "posenc::rope_",
    mutates_args=("q", "k"),
    schema="(Tensor(a!) q, Tensor(b!)? k, Tensor positions, int[] rope_ints, "
    "float[] rope_floats) -> ()",
)
def rope_(q, k, positions, rope_ints, rope_floats):
    """q (and k) turned by RoPE in place, as posenc.torch.apply_rope_."""
    rotate_inplace(_rope_of(rope_ints, rope_floats), positions, q, k)


@rope_.register_fake
def _rope_inplace_fake(q, k, positions, rope_ints, rope_floats):
    return None


class _EagerRotation(torch.autograd.Function):
    """posenc::rope and posenc::mrope for plain CPU tensors in eager code, without the
    dispatcher: the same kernel call and the same backward pass (the rotation in the other
    direction, itself differentiable). rotation is the scheme itself, not its fields."""

    @staticmethod
    def forward(ctx, x, positions, rotation, inverse):
        ctx.save_for_backward(positions)
        ctx.rotation, ctx.inverse = rotation, inverse
        return kernel_rotate(rotation, positions.numpy(), x, None, _direction(inverse))

    @staticmethod
    def backward(ctx, grad):
        (positions,) = ctx.saved_tensors
        grad = rotate(ctx.rotation, positions, _head_view(grad), not ctx.inverse)
        return grad, None, None, None


def rotate(rotation, positions, x, inverse=False):
    """x rotated by a posenc.Rope or a posenc.MRope, differentiably: through _EagerRotation for
    plain CPU tensors in eager code, else through posenc::rope or posenc::mrope."""
    if _plain(x, positions):
        return _EagerRotation.apply(x, positions, rotation, inverse)
    if type(rotation) is _core.MRope:
        ints, floats, pair_stream = mrope_fields(rotation)
        return mrope(x, positions, ints, floats, pair_stream, inverse)
    ints, floats = rope_fields(rotation)
    return rope(x, positions, ints, floats, inverse)


# Attention.

# The attention options after sinks, in this order, as each attention op's schema takes them.
ATTENTION_OPTIONS = (
    "bool causal, float scale, int window, float softcap, int[]? alibi_ints, "
    "float alibi_max_bias, int[]? rope_ints, float[]? rope_floats"
)


def attention_options(causal, alibi, rope, scale, window, softcap):
    """The attention options as operator arguments (ATTENTION_OPTIONS): alibi a posenc.Alibi
    or None, rope a posenc.Rope or None, scale None for 1 / sqrt(head_dim)."""
    alibi_ints, max_bias = (None, 0.0) if alibi is None else alibi_fields(alibi)
    rope_ints, rope_floats = (None, None) if rope is None else rope_fields(rope)
    return (causal, scale or 0.0, window, softcap, alibi_ints, max_bias, rope_ints, rope_floats)


def _kernel_options(
    sinks, causal, scale, window, softcap, alibi_ints, alibi_max_bias, rope_ints, rope_floats
):
    """The options as the bindings take them: schemes rebuilt, the sinks as a float32 numpy
    array (a copy)."""
    if sinks is not None:
        sinks = sinks.detach().to(torch.float32).contiguous().numpy()
    return dict(
        causal=causal,
        scale=scale,
        window=window,
        softcap=softcap,
        sinks=sinks,
        alibi=None if alibi_ints is None else _alibi_of(alibi_ints, alibi_max_bias),
        rope=None if rope_ints is None else _rope_of(rope_ints, rope_floats),
    )


def _pieces(key_mask, qpos, kpos, window):
    """The kernel calls of a masked attention: [(index, queries, keys, options)], the queries
    (a slice) of batch element index against its keys (a slice, or the indices of a padding
    mask's kept keys when they are not one interval: the kernel on those keys at their own
    positions is the masked attention exactly), options (causal, window) to set for that call.
    key_mask is bool [..., 1 or q_tokens, kv_tokens] (posenc.torch._masks); queries in no piece
    see no key."""
    pieces = _masks.kernel_pieces(key_mask, qpos, kpos, window)
    if pieces is not None:
        return [
            (index, slice(qa, qb), slice(ka, kb), options)
            for index, qa, qb, ka, kb, options in pieces
        ]
    pieces = []  # a padding mask with holes: one row of keys per batch element
    for index in np.ndindex(*key_mask.shape[:-2]):
        kept = torch.nonzero(key_mask[index][0]).flatten()
        if kept.numel():
            pieces.append((index, slice(None), kept, {}))
    return pieces


def _piece(index, queries, keys, q, k, v, qpos, kpos):
    """A piece's q, k, v as numpy views (copies for kept-key indices) and its positions."""
    return (
        _numpy(q[index][queries]),
        _numpy(k[index][keys]),
        _numpy(v[index][keys]),
        batch_element(qpos, index)[queries].numpy(),
        batch_element(kpos, index)[..., keys].numpy(),
    )


def _output_shape(q, v):
    return q.shape[:-1] + v.shape[-1:]


def attention_into(out, q, k, v, query_positions, key_positions, key_mask, sinks, *options):
    """The kernel's attention (inference) into out, a float32 [..., q_tokens, heads,
    value_dim] tensor (or a new one when None); returns out."""
    if out is None:
        out = _empty("attention", _output_shape(q, v), torch.float32)
    kernel = _kernel_options(sinks, *options)
    bfloat16 = q.dtype is torch.bfloat16
    if key_mask is None:
        _core.attention(
            _numpy(q),
            _numpy(k),
            _numpy(v),
            query_positions.numpy(),
            key_positions.numpy(),
            out=_numpy(out),
            bfloat16=bfloat16,
            **kernel,
        )
        return out
    out.zero_()
    for index, queries, keys, piece in _pieces(
        key_mask, query_positions, key_positions, kernel["window"]
    ):
        _core.attention(
            *_piece(index, queries, keys, q, k, v, query_positions, key_positions),
            out=_numpy(out[index][queries]),
            bfloat16=bfloat16,
            **dict(kernel, **piece),
        )
    return out


_ATTENTION_ARGS = (
    "Tensor q, Tensor k, Tensor v, Tensor query_positions, Tensor key_positions, "
    "Tensor? key_mask, Tensor? sinks"
)


@torch.library.custom_op(
    "posenc::attention",
    mutates_args=(),
    schema=f"({_ATTENTION_ARGS}, {ATTENTION_OPTIONS}) -> Tensor",
)
def attention(q, k, v, query_positions, key_positions, key_mask, sinks, *options):
    """posenc's attention (inference): float32 [..., q_tokens, heads, value_dim]."""
    return attention_into(None, q, k, v, query_positions, key_positions, key_mask, sinks, *options)


@attention.register_fake
def _attention_fake(q, k, v, query_positions, key_positions, key_mask, sinks, *options):
    return q.new_empty(_output_shape(q, v), dtype=torch.float32)


def _forward_kernel(q, k, v, query_positions, key_positions, key_mask, sinks, *options):
    """posenc::attention_forward's implementation: (out, lse)."""
    kernel = _kernel_options(sinks, *options)
    bfloat16 = q.dtype is torch.bfloat16
    if key_mask is None:
        out, lse = _core.attention_forward(
            _numpy(q),
            _numpy(k),
            _numpy(v),
            query_positions.numpy(),
            key_positions.numpy(),
            bfloat16=bfloat16,
            **kernel,
        )
        return torch.from_numpy(out), torch.from_numpy(lse)
    out = q.new_zeros(_output_shape(q, v), dtype=torch.float32)
    lse = q.new_full(q.shape[:-1], -torch.inf, dtype=torch.float32)
    for index, queries, keys, piece in _pieces(
        key_mask, query_positions, key_positions, kernel["window"]
    ):
        piece_out, piece_lse = _core.attention_forward(
            *_piece(index, queries, keys, q, k, v, query_positions, key_positions),
            bfloat16=bfloat16,
            **dict(kernel, **piece),
        )
        out[index][queries] = torch.from_numpy(piece_out)
        lse[index][queries] = torch.from_numpy(piece_lse)
    return out, lse


attention_forward = torch.library.custom_op(
    "posenc::attention_forward",
    mutates_args=(),
    schema=f"({_ATTENTION_ARGS}, {ATTENTION_OPTIONS}) -> (Tensor, Tensor)",
)(_forward_kernel)
attention_forward.__doc__ = """The forward pass of training: (out, lse), float32 [...,
q_tokens, heads, value_dim] and [..., q_tokens, heads], lse each row's log-sum-exp, which the
backward pass reads (-inf for a query that sees no key, whose row is zeros)."""


@attention_forward.register_fake
def _attention_forward_fake(q, k, v, query_positions, key_positions, key_mask, sinks, *options):
    out = q.new_empty(_output_shape(q, v), dtype=torch.float32)
    return out, q.new_empty(q.shape[:-1], dtype=torch.float32)


def _backward_kernel(
    q, k, v, query_positions, key_positions, key_mask, sinks, out, lse, d_out, *options
):
    """posenc::attention_backward's implementation."""
    kernel = _kernel_options(sinks, *options)
    bfloat16 = q.dtype is torch.bfloat16
    # autograd may hand over an expanded gradient (of a sum, say).
    d_out = _head_view(d_out.to(torch.float32))
    if key_mask is None:
        dq, dk, dv, *d_sinks = _core.attention_backward(
            _numpy(q),
            _numpy(k),
            _numpy(v),
            query_positions.numpy(),
            key_positions.numpy(),
            out=_numpy(out),
            lse=_numpy(lse),
            d_out=_numpy(d_out),
            bfloat16=bfloat16,
            **kernel,
        )
        grads = [torch.from_numpy(g) for g in (dq, dk, dv)]
        d_sinks = torch.from_numpy(d_sinks[0]) if d_sinks else None
    else:
        grads = [t.new_zeros(t.shape, dtype=torch.float32) for t in (q, k, v)]
        d_sinks = None if sinks is None else sinks.new_zeros(sinks.shape, dtype=torch.float32)
        for index, queries, keys, piece in _pieces(
            key_mask, query_positions, key_positions, kernel["window"]
        ):
            dq, dk, dv, *piece_d_sinks = _core.attention_backward(
                *_piece(index, queries, keys, q, k, v, query_positions, key_positions),
                out=_numpy(out[index][queries]),
                lse=_numpy(lse[index][queries]),
                d_out=_numpy(d_out[index][queries]),
                bfloat16=bfloat16,
                **dict(kernel, **piece),
            )
            # Pieces split the queries; their keys may overlap.
            grads[0][index][queries] = torch.from_numpy(dq)
            grads[1][index][keys] += torch.from_numpy(dk)
            grads[2][index][keys] += torch.from_numpy(dv)
            if piece_d_sinks:
                d_sinks += torch.from_numpy(piece_d_sinks[0])
    # The kernel's gradients are float32; a bfloat16 input gets bfloat16.
    grads = [g if g.dtype is t.dtype else g.to(t.dtype) for g, t in zip(grads, (q, k, v))]
    if d_sinks is None:
        return (*grads, q.new_empty(0, dtype=torch.float32))
    return (*grads, d_sinks.to(sinks.dtype))


attention_backward = torch.library.custom_op(
    "posenc::attention_backward",
    mutates_args=(),
    schema=f"({_ATTENTION_ARGS}, Tensor out, Tensor lse, Tensor d_out, {ATTENTION_OPTIONS}) "
    "-> (Tensor, Tensor, Tensor, Tensor)",
)(_backward_kernel)
attention_backward.__doc__ = """The backward pass of attention_forward
(posenc/attention_backward.h): given its inputs, out, lse and d_out (the gradient of out),
(dq, dk, dv) in q's, k's and v's dtypes (computed in float32) and d_sinks, the sinks' gradient
[heads] in their dtype (an empty float32 tensor without sinks). q and k are the un-rotated
inputs."""


@attention_backward.register_fake
def _attention_backward_fake(
    q, k, v, query_positions, key_positions, key_mask, sinks, out, lse, d_out, *options
):
    grads = [t.new_empty(t.shape) for t in (q, k, v)]
    d_sinks = q.new_empty(0, dtype=torch.float32) if sinks is None else sinks.new_empty(sinks.shape)
    return (*grads, d_sinks)


def _attention_setup(ctx, inputs, output):
    q, k, v, query_positions, key_positions, key_mask, sinks, *options = inputs
    out, lse = output
    # The float32 out, not its bfloat16 rounding: the backward pass's d_out . out term then
    # matches the forward pass exactly.
    ctx.save_for_backward(q, k, v, query_positions, key_positions, key_mask, sinks, out, lse)
    ctx.options = options
    ctx.mark_non_differentiable(lse)


def _attention_backward(ctx, d_out, d_lse):
    saved = ctx.saved_tensors
    # The op (whose own backward refuses a second derivative) where autograd records the
    # backward pass (create_graph) or a compiler traces it; plain tensors otherwise go straight
    # to the implementation.
    plain = not torch.is_grad_enabled() and _plain(*saved, d_out)
    backward = _backward_kernel if plain else attention_backward
    dq, dk, dv, d_sinks = backward(*saved, d_out, *ctx.options)
    sinks = saved[6]
    rest = (None,) * len(ctx.options)
    return (dq, dk, dv, None, None, None, None if sinks is None else d_sinks, *rest)


def _no_second_derivative(ctx, *grads):
    raise RuntimeError(
        "posenc::attention_backward: the kernel's backward pass is not differentiable; "
        "cannot differentiate twice (a second derivative needs the PyTorch definition: "
        "float64 tensors run it)"
    )


attention_forward.register_autograd(_attention_backward, setup_context=_attention_setup)
attention_backward.register_autograd(_no_second_derivative)


class _EagerAttention(torch.autograd.Function):
    """posenc::attention_forward with its autograd formula (the same implementation,
    _attention_setup and _attention_backward) for plain CPU tensors in eager code, without the
    dispatcher: the op's autograd wrapper costs a training step of a short sequence about as
    much as the kernel (torch's fill_defaults rebuilds the op's 15-argument schema once per
    argument on every call). forward takes ctx (the older form of a Function): with a separate
    setup_context, apply binds the arguments to forward's signature with inspect on each
    call."""

    @staticmethod
    def forward(ctx, *args):
        output = _forward_kernel(*args)
        _attention_setup(ctx, args, output)
        return output

    backward = staticmethod(_attention_backward)


def trained_attention(q, k, v, query_positions, key_positions, key_mask, sinks, *options):
    """The float32 out of posenc::attention_forward, where autograd records: eager plain
    tensors through _EagerAttention, others (FakeTensor, torch.compile's tracing) through the
    op."""
    args = (q, k, v, query_positions, key_positions, key_mask, sinks, *options)
    if _plain(q, k, v, query_positions, key_positions, key_mask, sinks):
        return _EagerAttention.apply(*args)[0]
    return attention_forward(*args)[0]
