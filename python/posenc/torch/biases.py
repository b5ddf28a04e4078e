"""Attention score biases on torch tensors: ALiBi (alibi_slopes, alibi_bias) and T5's
learned RelativePositionBias."""

import torch

from posenc import _core, model_positions
from posenc.torch._tensors import (
    _check_int,
    _check_number,
    _check_positions,
    _empty,
    _error,
    _float_dtype,
    _position_range,
    _positions,
    _require_size,
)


def _alibi(alibi, max_bias, head_offset, shard_heads):
    """The posenc.Alibi of alibi_slopes' and alibi_bias' arguments: ``alibi``
    itself, or one built from a head count and the keyword fields."""
    if isinstance(alibi, _core.Alibi):
        if (max_bias, head_offset, shard_heads) != (8.0, 0, 0):
            raise _error(
                "alibi",
                "max_bias, head_offset, shard_heads",
                "be left at their defaults when a posenc.Alibi is given (it holds them)",
                (max_bias, head_offset, shard_heads),
            )
        alibi.validate()
        return alibi
    for name, value in (
        ("num_heads", alibi),
        ("head_offset", head_offset),
        ("shard_heads", shard_heads),
    ):
        _check_int("alibi", name, value)
    _check_number("alibi", "max_bias", max_bias)
    return _core.Alibi(alibi, max_bias=max_bias, head_offset=head_offset, shard_heads=shard_heads)


def alibi_slopes(
    alibi,
    *,
    max_bias=8.0,
    head_offset=0,
    shard_heads=0,
    dtype=torch.float32,
):
    """ALiBi's per-head slopes (Press et al. 2022), computed in double.

    Head h of n has slope 2^(-max_bias (h + 1) / n) when n is a power of two,
    the paper's interleaving of the next powers of two otherwise.

    Args:
        alibi: a ``posenc.Alibi``, or the head count n (then ``max_bias``,
            ``head_offset`` and ``shard_heads`` build one, as
            ``posenc.Alibi(n, ...)`` would).
        max_bias: the paper's m (8).
        head_offset: the first head of a tensor-parallel shard.
        shard_heads: the heads in the shard (0: all from head_offset on).
        dtype: the returned dtype (float32, float64, bfloat16 or float16).
    Returns:
        [local_heads] tensor of slopes.
    Raises:
        posenc.Error: a field out of range, or fields given beside a
            ``posenc.Alibi``.
    """
    alibi = _alibi(alibi, max_bias, head_offset, shard_heads)
    _float_dtype("alibi", "dtype", dtype)
    return torch.from_numpy(_core.alibi_slopes(alibi)).to(dtype)


def alibi_bias(
    alibi,
    query_positions,
    key_positions=None,
    *,
    max_bias=8.0,
    head_offset=0,
    shard_heads=0,
    dtype=torch.float32,
):
    """ALiBi's additive score bias: -slope[h] * (query_pos[i] - key_pos[j]).

    Add it to the attention scores before softmax; the causal mask is
    separate. ``posenc.torch.attention(alibi=...)`` fuses the same bias
    without building it.

    Args:
        alibi: a ``posenc.Alibi``, or the head count (as in ``alibi_slopes``).
        query_positions: int64 positions of the queries.
        key_positions: int64 positions of the keys (None: query_positions).
        max_bias: as in ``alibi_slopes``.
        head_offset: as in ``alibi_slopes``.
        shard_heads: as in ``alibi_slopes``.
        dtype: float32, float64, bfloat16 or float16 (the last two rounded
            from float32).
    Shapes:
        query_positions: [queries]; key_positions: [keys].
    Returns:
        [local_heads, queries, keys] tensor, to add to scores
        [..., heads, queries, keys].
    Raises:
        posenc.Error: bad fields or positions.
    """
    alibi = _alibi(alibi, max_bias, head_offset, shard_heads)
    queries = _positions("alibi", query_positions, "query_positions")
    keys = queries if key_positions is None else _positions("alibi", key_positions, "key_positions")
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
    ``forward(query_len, key_len)`` or ``forward(query_pos, key_pos)`` -> bias [num_heads,
    queries, keys], to add to the attention scores [..., heads, queries, keys] before softmax
    (T5 scores without the 1/sqrt(d) scale).

    bias_h(i, j) = weight[bucket(key_pos[j] - query_pos[i]), h] (posenc/relative_bias.h).
    ``weight`` [num_buckets, num_heads] is the trainable table, T5's
    ``relative_attention_bias.weight`` (load it with ``load_state_dict({"weight":
    t5_state["encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"]})``);
    initialised N(0, 1) like ``nn.Embedding``. The buckets are computed by posenc
    (``posenc.relative_position_bucket``, bit-exact with Hugging Face's), the lookup by torch,
    so gradients reach ``weight``. The bias has the weight's dtype (float32 unless the module is
    converted).

    Args:
        num_buckets: T5's relative_attention_num_buckets: distances below half of them (a
            quarter when bidirectional) get a bucket each, larger ones logarithmically wider
            buckets.
        max_distance: T5's relative_attention_max_distance: every distance from it on falls
            into the last bucket; it must exceed the exact buckets' range.
        num_heads: the attention heads, an int > 0.
        bidirectional: True: the encoder's buckets (half of them for keys after the query);
            False: the decoder's (causal; keys after the query share bucket 0, the causal mask
            is separate).

    Raises:
        posenc.Error: a bad bucket count, max_distance or num_heads, named.
    """

    def __init__(self, num_buckets=32, max_distance=128, num_heads=8, bidirectional=True):
        super().__init__()
        # Validates the counts with the library's messages.
        _core.relative_position_bucket(
            torch.zeros(0, dtype=torch.int64).numpy(),
            num_buckets=num_buckets,
            max_distance=max_distance,
            bidirectional=bidirectional,
        )
        if isinstance(num_heads, bool) or not isinstance(num_heads, int):
            raise _error("relative_bias", "num_heads", "be an int", type(num_heads).__name__)
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
        """The bias of a T5, mT5 or UMT5 config (bucket counts and heads from the config), with
        a fresh table to load or train.

        Args:
            config: a transformers ``PretrainedConfig``, a dict (a parsed config.json), its JSON
                text or the path of a config.json.
            bidirectional: True for the encoder, False for the decoder.

        Returns:
            A ``RelativePositionBias``.

        Raises:
            posenc.Error: a config without T5 relative-position buckets (naming its model type
                and scheme).
        """
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
        """The bucket of each key - query distance.

        Args:
            query_pos: int64 [queries] (or a sequence of ints), each in [0, 2^32].
            key_pos: int64 [keys], likewise.

        Returns:
            int64 [queries, keys]: the bucket of key_pos[j] - query_pos[i], in
            [0, num_buckets).

        Raises:
            posenc.Error: positions that are not 1-D or not in [0, 2^32], or a bias past the
                output cap (16 GiB).
        """
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
        """The bias of these queries and keys; gradients reach ``weight``.

        Args:
            query: the queries: a length n (positions 0 .. n - 1) or int64 positions [queries].
            key: the keys, likewise; None: query.

        Returns:
            [num_heads, queries, keys] in the weight's dtype.

        Raises:
            posenc.Error: a negative length, bad positions, or a bias past the output cap.
        """
        if key is None:
            key = query
        is_length = [isinstance(p, int) and not isinstance(p, bool) for p in (query, key)]
        for p, name, length in zip((query, key), ("query", "key"), is_length):
            if length and p < 0:
                raise _error("relative_bias", name, "be a length >= 0 or int64 positions", p)
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
        _require_size("relative_bias", (self.num_heads, queries, keys), self.weight.dtype)

    def extra_repr(self):
        """The module's line in ``print(model)``.

        Returns:
            str: num_buckets, max_distance, num_heads and bidirectional.
        """
        return (
            f"num_buckets={self.num_buckets}, max_distance={self.max_distance}, "
            f"num_heads={self.num_heads}, bidirectional={self.bidirectional}"
        )
