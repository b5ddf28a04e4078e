"""posenc.torch's checks and conversions: argument and tensor checks with the library's
messages, positions, numpy views of tensor memory (bfloat16 as its int16 bits), which tensors
the C++ kernels read in place, and the two activation layouts ("bshd", "bhsd")."""

import math
import operator

import torch
import torch.fx

from posenc import _core

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
        raise _error(function, name, "be a torch.Tensor", type(tensor).__name__)
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
        raise _error(function, name, "be a torch.Tensor", type(tensor).__name__)
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
        raise _error(function, name, "have dtype int64", _dtype_name(positions.dtype))
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
    entry; meta and fake tensors hold no values to check, nor do tensors
    while torch.compile or torch.export traces (the ops' kernels check them
    when they run)."""
    if isinstance(positions, torch.Tensor):
        if (
            torch.compiler.is_compiling()
            or type(positions) not in _PLAIN_TENSORS
            or positions.device.type == "meta"
        ):
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
    the size cap (a meta tensor may claim any number of tokens). While
    torch.compile traces, the kernels check the positions when they run."""
    if count > 0 and not torch.compiler.is_compiling():
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
        raise _error("rope", "layout", "be 'half_split' or 'interleaved'", repr(layout))
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


# Tensors the bindings can read in place: plain tensors with CPU storage.
_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)
_FORMATS = ("bshd", "bhsd")


def _on_kernel(*tensors):
    """Whether posenc's kernels take these tensors: all on the CPU. Plain ones
    (_plain) reach the kernels straight from the bindings, others (FakeTensor,
    and every tensor while torch.compile or torch.export traces) through
    posenc's torch ops (posenc.torch._ops); meta tensors and other devices run
    the pure-PyTorch definitions of posenc._torch_reference instead."""
    for t in tensors:
        if t is not None and t.device.type != "cpu":
            return False
    return True


def _plain(*tensors):
    """Whether the bindings can read these tensors' memory now: plain CPU
    tensors, outside torch.compile and torch.export tracing."""
    if torch.compiler.is_compiling():
        return False
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


def _qkv_format(function, qkv_format, where=""):
    """qkv_format, which every call that takes activations must state: it has no default,
    since a [b, 8, 8, d] tensor reads either way when q and k have as many heads as tokens.
    where: where it may be given, for a module's message."""
    if qkv_format not in _FORMATS:
        raise _error(
            function,
            "qkv_format",
            "be 'bshd' ([..., tokens, heads, head_dim], posenc's) or 'bhsd' ([..., heads, "
            "tokens, head_dim], Hugging Face's), stated" + where + " (no default: a [b, 8, 8, "
            "d] tensor reads either way)",
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
            raise _error(function, name, "have dtype int64", _dtype_name(positions.dtype))
    else:
        positions = torch.from_numpy(_positions(function, positions, name))
    _check_positions(function, positions, name)
    return positions


def _tensor_of(array, bfloat16):
    """The tensor sharing a result array's memory (bfloat16 from its int16
    bits)."""
    tensor = torch.from_numpy(array)
    return tensor.view(torch.bfloat16) if bfloat16 else tensor


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
            raise _error(function, "k.device", f"equal q.device ({q.device})", k.device)


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


def _same_view(a, b):
    return (
        a.device.type != "meta"  # meta tensors have no memory: every data_ptr is 0
        and a.data_ptr() == b.data_ptr()
        and a.shape == b.shape
        and a.stride() == b.stride()
    )


def _traced(*values):
    """Whether torch.fx is tracing these values. A traced call records one
    node per rotated tensor, since fx cannot unpack a node's result."""
    return any(isinstance(v, torch.fx.Proxy) for v in values)


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
        raise _error(function, name, "be a number", type(value).__name__) from None


def _int_tensor_numpy(function, name, value):
    """An integer (or bool) tensor or sequence as an int64 numpy array; None
    stays None. Floats are refused, never truncated."""
    if value is None:
        return None
    if isinstance(value, torch.Tensor):
        _check_cpu(function, name, value)
        if value.numel() and (value.dtype.is_floating_point or value.dtype.is_complex):
            raise _error(
                function,
                name,
                "be an integer tensor",
                _dtype_name(value.dtype),
            )
        return value.to(torch.int64).numpy()
    return _positions(function, value, name)
