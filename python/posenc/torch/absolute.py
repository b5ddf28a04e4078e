"""Absolute position embeddings on torch tensors: SinusoidalPositions and LearnedPositions
(GPT-2's learned table)."""

import os

import torch

from posenc import _core
from posenc.torch._tensors import _check_int, _check_number, _empty, _error, _positions


class SinusoidalPositions(torch.nn.Module):
    """Sinusoidal positions (Vaswani et al. 2017) as a module without parameters:
    ``forward(positions)`` -> float32 [..., dim].

    PE(p, 2i) = sin(p / base^(2i / dim)), PE(p, 2i + 1) = cos(p / base^(2i / dim))
    (posenc/sinusoidal.h; for an odd dim the last column is a lone sin). Angles and their sin and
    cos are formed in double and rounded to float32 once: float-accurate at positions in the
    millions.

    Args:
        dim: the width of each position vector, an int > 0.
        base: the base of the wavelengths, finite and > 1 (the paper's 10000).

    Raises:
        posenc.Error: a bad dim or base, named.
    """

    def __init__(self, dim, base=10000.0):
        super().__init__()
        _check_int("sinusoidal", "dim", dim)
        _check_number("sinusoidal", "base", base)
        self.spec = _core.Sinusoidal(dim, base)

    def forward(self, positions):
        """The position vectors of these positions.

        Args:
            positions: int64 [...] on the CPU (or a sequence of ints), each in [0, 2^32].

        Returns:
            float32 [..., dim]: PE of each position.

        Raises:
            posenc.Error: a bad position, named.
        """
        positions = _positions("sinusoidal", positions)
        out = _empty(
            "sinusoidal",
            tuple(positions.shape) + (self.spec.dim,),
            torch.float32,
        )
        _core.sinusoidal(positions, self.spec.dim, self.spec.base, out=out.numpy())
        return out

    def extra_repr(self):
        """The module's line in ``print(model)``.

        Returns:
            str: dim and base.
        """
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
    """A learned absolute position table (GPT-2's wpe): ``forward(positions)`` ->
    [..., d_model].

    ``weight`` is a float32 [max_positions, d_model] Parameter that shares memory with the
    library's table (optimizers update it in place). A position at or past max_positions is an
    error, never a wrap or a clamp. The table stays float32 on the CPU: moving or casting the
    module (``.to``, ``.double()``) or replacing ``weight.data`` detaches it from the library and
    raises.

    Args:
        max_positions: the table's rows, one per position, an int > 0.
        d_model: the width of each row, an int > 0.
        seed: the seed of the initial values, N(0, stddev^2) drawn by std::mt19937_64(seed) in
            row-major order (reproducible).
        stddev: their standard deviation, finite and > 0 (GPT-2's 0.02).
        table: a ready ``posenc.LearnedPositions`` to hold (``load`` passes one); max_positions,
            d_model, seed and stddev are then not read. None: a new random table.

    Raises:
        posenc.Error: a bad size, seed or stddev, named.
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
        """A module holding the table of a .npy file.

        Args:
            path: a 2-D float32 (or float64) .npy file [max_positions, d_model] (str or
                os.PathLike).

        Returns:
            A ``LearnedPositions`` holding that table.

        Raises:
            posenc.Error: any other shape, an empty table or an unreadable file, naming the path.
        """
        table = _core.LearnedPositions.load(os.fspath(path))
        return cls(table.max_positions, table.d_model, table=table)

    def save(self, path):
        """Writes the table as a float32 .npy file [max_positions, d_model] (numpy.load reads it).

        Args:
            path: the file to write (str or os.PathLike).

        Raises:
            posenc.Error: a file that cannot be written, naming the path.
        """
        self.table.save(os.fspath(path))

    def forward(self, positions):
        """The rows of these positions; differentiable: the backward pass adds each row's
        gradient into ``weight.grad`` (repeated positions accumulate).

        Args:
            positions: int64 [...] on the CPU (or a sequence of ints), each in
                [0, max_positions).

        Returns:
            float32 [..., d_model].

        Raises:
            posenc.Error: a position outside the table, or a weight moved, cast or replaced.
        """
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
        """The module's line in ``print(model)``.

        Returns:
            str: max_positions and d_model.
        """
        table = self.table
        return f"max_positions={table.max_positions}, d_model={table.d_model}"
