"""Absolute position embeddings on torch tensors: SinusoidalPositions and LearnedPositions
(GPT-2's learned table)."""

import os

import torch

from posenc import _core
from posenc.torch._tensors import _check_int, _check_number, _empty, _error, _positions


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
        _core.sinusoidal(positions, self.spec.dim, self.spec.base, out=out.numpy())
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

    def __init__(self, max_positions, d_model, *, seed=0, stddev=0.02, table=None):
        super().__init__()
        if table is None:
            _check_int("learned", "max_positions", max_positions)
            _check_int("learned", "d_model", d_model)
            _check_int("learned", "seed", seed)
            _check_number("learned", "stddev", stddev)
            table = _core.LearnedPositions.random(max_positions, d_model, seed, stddev)
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
                "be the library table's own float32 CPU memory (do not move, cast or replace it)",
                f"{weight.dtype} on {weight.device}",
            )
        return _LearnedLookup.apply(weight, _positions("learned", positions), self.table)

    def extra_repr(self):
        table = self.table
        return f"max_positions={table.max_positions}, d_model={table.d_model}"
