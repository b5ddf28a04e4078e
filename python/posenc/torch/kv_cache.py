"""KVCache: one attention layer's KV cache for a decode loop on torch tensors;
KVCacheBatch: a batch of sequences of different lengths."""

import numpy as np
import torch

from posenc import _core, model_positions, mrope_from_hf_config, rope_from_hf_config
from posenc.torch._tensors import (
    _check_activations,
    _check_int,
    _dtype_name,
    _error,
    _float_dtype,
    _numpy,
    _positions,
)
from posenc.torch.attention import _ATTENTION_DTYPES, _check_scale, _check_softcap_sinks


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


def _is_longrope(config, layer, l0, options):
    """Whether the layer's frequencies are LongRoPE's: one set up to L0 and
    another, fixed, past it (dynamic NTK keeps changing with the length)."""
    if l0 is None:
        return False
    at = [
        rope_from_hf_config(config, layer=layer, seq_len=n, **options).inv_freq
        for n in (l0, l0 + 1, l0 + 2)
    ]
    return at[0] != at[1] and at[1] == at[2]


def _cache_rotation(config, layer, crossing, kwargs, allow_mrope=True):
    """kv_heads, head_dim and the rotation keywords (rope, mrope, or LongRoPE's
    rope, long_rope, long_rope_threshold and crossing) of a cache for one layer
    of a config."""
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
        return kv_heads, model.head_dim, {}
    if model.to_dict().get("mrope_section") is not None:
        if not allow_mrope:
            raise _error(
                "kv_cache_batch",
                "config",
                "describe a model without M-RoPE (M-RoPE sequences: one KVCache each)",
                model.model_type,
            )
        mrope = mrope_from_hf_config(config, layer=layer, **kwargs)
        return kv_heads, mrope.head_dim, {"mrope": mrope}
    l0 = model.original_max_position_embeddings
    if "seq_len" not in kwargs and _is_longrope(config, layer, l0, kwargs):
        short = rope_from_hf_config(config, layer=layer, seq_len=l0, **kwargs)
        return (
            kv_heads,
            short.head_dim,
            {
                "rope": short,
                "long_rope": rope_from_hf_config(config, layer=layer, seq_len=l0 + 1, **kwargs),
                "long_rope_threshold": l0,
                "crossing": crossing,
            },
        )
    rope = rope_from_hf_config(config, layer=layer, **kwargs)
    return kv_heads, rope.head_dim, {"rope": rope}


class KVCache:
    """One attention layer's KV cache of one sequence, for decoding on the
    CPU (``posenc.KVCache`` on torch tensors).

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

    LongRoPE (Phi-3): ``rope`` holds the short factors and ``long_rope`` the
    long ones; an append or attend whose positions reach
    ``long_rope_threshold`` (L0) turns with long_rope, as Hugging Face's
    rotary module chooses per forward. ``crossing="recompute"`` (Phi-3's
    generate(), which drops its cache at the crossing and recomputes the
    sequence): the append that would take a cache of at most L0 tokens past
    L0 raises ``posenc.Error``; ``clear()`` and append the recomputed
    sequence. ``"keep_rotation"``: cached keys keep the short factors, as a
    plain forward loop does. ``from_hf_config`` sets all of it for a
    LongRoPE config (docs/KV_CACHE.md).

    Args:
        capacity: the slots, allocated up front, an int >= 1.
        kv_heads: the key/value heads, an int >= 1.
        head_dim: the features of a key head, an int >= 1.
        value_dim: the features of a value head; None: head_dim.
        rope: the ``posenc.Rope`` that rotates keys on append (LongRoPE: the short factors);
            None: no 1-D RoPE.
        mrope: the ``posenc.MRope`` that rotates keys by position streams instead (not with
            rope); None: none.
        dtype: the storage, torch.float32 or torch.bfloat16 (bfloat16 keys are rotated in
            float32 and rounded once).
        long_rope: LongRoPE's long-factor ``posenc.Rope`` (the same head_dim, rotary_dim, layout
            and rotary_offset as rope); None: none.
        long_rope_threshold: L0 (original_max_position_embeddings), >= 1 with long_rope.
        crossing: "recompute" or "keep_rotation": what crossing L0 does (above).

    Raises:
        posenc.Error: a bad size, dtype, rotation or crossing, named.
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
        long_rope=None,
        long_rope_threshold=0,
        crossing="recompute",
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
                _dtype_name(dtype) if isinstance(dtype, torch.dtype) else repr(dtype),
            )
        self._cache = _core.KVCache(
            capacity,
            kv_heads,
            head_dim,
            value_dim=value_dim,
            rope=rope,
            mrope=mrope,
            bfloat16=dtype == torch.bfloat16,
            long_rope=long_rope,
            long_rope_threshold=long_rope_threshold,
            crossing=crossing,
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
        cls,
        config,
        capacity,
        layer=None,
        *,
        dtype=torch.float32,
        crossing="recompute",
        **kwargs,
    ):
        """A cache for one layer of a Hugging Face model.

        kv_heads (num_key_value_heads) and the layer's RoPE come from the config:
        ``mrope_from_hf_config`` for a config with mrope_section, else ``rope_from_hf_config``;
        a NoPE layer (Llama 4, SmolLM3) gets a cache that does not rotate; a LongRoPE layer
        (Phi-3) gets both factor sets, switching at original_max_position_embeddings by
        ``crossing`` (see the class), unless ``seq_len`` fixes one.

        Args:
            config: a dict, its JSON text or a config.json path (or a transformers
                ``PretrainedConfig``).
            capacity: the slots, an int >= 1.
            layer: a layer index or type, as in ``rope_from_hf_config``; None: the config's
                first RoPE setting.
            dtype: the storage, torch.float32 or torch.bfloat16.
            crossing: "recompute" or "keep_rotation", for a LongRoPE layer (see the class).
            **kwargs: the other keywords of ``rope_from_hf_config`` (layer_type, seq_len,
                precision, yarn_rules).

        Returns:
            A ``KVCache``.

        Raises:
            posenc.Error: a config without RoPE (a RoPE-less cache is built directly), or a bad
                key or argument.
        """
        kv_heads, head_dim, rotation = _cache_rotation(config, layer, crossing, kwargs)
        return cls(capacity, kv_heads, head_dim, dtype=dtype, **rotation)

    def clear(self):
        """Empties the cache (capacity and options kept): before appending a recomputed
        sequence."""
        self._cache.clear()

    @property
    def long_rope(self):
        """LongRoPE's long-factor posenc.Rope, or None."""
        return self._cache.long_rope

    @property
    def long_rope_threshold(self):
        """L0: positions from it on turn with long_rope."""
        return self._cache.long_rope_threshold

    @property
    def crossing(self):
        """ "recompute" or "keep_rotation" (see the class)."""
        return self._cache.crossing

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
        """Appends n tokens: their keys rotated at their positions into the next slots, their
        values as they are.

        Args:
            k: the keys, un-rotated, of the cache's dtype.
            v: the values, of the cache's dtype.
            positions: int64 [n] (a tensor or a sequence of ints), each in [0, 2^32]; None:
                continuing from the last cached position + 1 (0 for an empty cache).
            streams: an M-RoPE cache's position streams [streams, n] for the keys' rotation
                (positions keep the token order); None: every stream at positions +
                ``rope_delta``.

        Shapes:
            k: [n, kv_heads, head_dim].
            v: [n, kv_heads, value_dim].

        Raises:
            posenc.Error: past capacity, a bad shape, dtype or position, or a LongRoPE crossing
                that "recompute" refuses; the cache is then untouched.
        """
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
        scale=None,
        window=0,
        chunk_size=0,
        softcap=0.0,
        sinks=None,
        streams=None,
        out_dtype=None,
    ):
        """Attention of n queries against every cached token: q is rotated (a copy), the
        cached keys are not.

        The options are ``posenc.attention``'s, against the cached positions.

        Args:
            q: the queries, un-rotated, of the cache's dtype.
            positions: int64 [n]; None: those of the last n cached tokens (the queries of the
                tokens just appended).
            causal: key j is seen only at key_pos[j] <= query_pos[i].
            alibi: a ``posenc.Alibi``; None: no bias.
            scale: the score scale; None: 1 / sqrt(head_dim), as in ``attention``.
            window: a sliding window, as in ``attention``; 0: none.
            chunk_size: Llama 4's chunks: keys seen only in the query's chunk of positions; 0:
                none.
            softcap: Gemma 2's logit soft-capping; 0: off.
            sinks: gpt-oss's sinks, a floating CPU tensor [heads], read without autograd; None:
                none.
            streams: an M-RoPE cache's query position streams [streams, n]; None: every stream
                at positions + ``rope_delta``.
            out_dtype: the output's dtype; None: the cache's.

        Shapes:
            q: [n, heads, head_dim], heads a multiple of kv_heads.

        Returns:
            [n, heads, value_dim] in the cache's dtype (or out_dtype).

        Raises:
            posenc.Error: a bad argument, named; None positions for more queries than cached
                tokens.
        """
        q_array = _kv_tensor(self, "q", q)
        _check_scale("kv_cache", scale)
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
                    f"be given when q has more tokens than the cache (size {cached.shape[0]})",
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
        """llama.cpp's context shift: keeps the first n_keep tokens, drops the next n_discard,
        moves the rest down and their positions by -n_discard (keys re-rotated exactly).

        Args:
            n_keep: the tokens kept at the start, >= 0.
            n_discard: the tokens dropped after them, >= 1; n_keep + n_discard <= size.

        Raises:
            posenc.Error: counts out of range, a moved position below 0, or a LongRoPE cache
                (its keys are never moved).
        """
        self._cache.context_shift(n_keep, n_discard)

    def remove(self, begin, end):
        """Drops slots [begin, end) and moves the later ones down; they keep their positions
        and keys.

        Args:
            begin: the first slot dropped, in [0, size].
            end: the slot after the last one dropped, in [begin, size].

        Raises:
            posenc.Error: a slot out of range.
        """
        self._cache.remove(begin, end)

    def shift_positions(self, begin, end, delta):
        """Moves the positions of slots [begin, end) by delta (keys re-rotated exactly).

        Args:
            begin: the first slot moved, in [0, size].
            end: the slot after the last one moved, in [begin, size].
            delta: the position change, in [-2^32, 2^32]; the new positions stay in [0, 2^32].

        Raises:
            posenc.Error: a slot or delta out of range, a position moved out of [0, 2^32], or a
                LongRoPE cache (its keys are never moved).
        """
        self._cache.shift_positions(begin, end, delta)

    def roll_sink_window(self, sinks, window, incoming=1, mode="text"):
        """Attention sinks (StreamingLLM, Xiao et al. 2023): makes room for ``incoming`` tokens
        in a cache kept as the first ``sinks`` tokens plus a window of the last ``window``,
        dropping the oldest non-sink tokens (as few as needed).

        Args:
            sinks: the first tokens always kept, >= 0.
            window: the last tokens kept, >= 1; sinks + window <= capacity.
            incoming: the tokens about to be appended, in [1, window].
            mode: "text" keeps positions as in the text; "cache" shifts the window down to cache
                slots (StreamingLLM's choice; keys re-rotated).

        Returns:
            The number of tokens dropped.

        Raises:
            posenc.Error: counts out of range or a bad mode.
        """
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
    kv_heads = property(lambda self: self._cache.kv_heads, doc="Key/value heads.")
    head_dim = property(lambda self: self._cache.head_dim, doc="Features of a key head.")
    value_dim = property(lambda self: self._cache.value_dim, doc="Features of a value head.")
    rope = property(lambda self: self._cache.rope, doc="The posenc.Rope, or None.")
    mrope = property(lambda self: self._cache.mrope, doc="The posenc.MRope, or None.")

    def __len__(self):
        return self._cache.size

    def __repr__(self):
        return repr(self._cache)


class KVCacheBatch:
    """A batch of sequences of different lengths, for batched generation on
    the CPU (``posenc.KVCacheBatch`` on torch tensors): row b is a cache of
    its own (``KVCache``'s rules: keys rotated once on append, LongRoPE's
    switch), with its own length and positions.

    A step passes k, v [batch, n, kv_heads, dim] and q [batch, n, heads,
    dim], and a mask [batch, n] (Hugging Face's attention_mask columns of the
    step, bool or int; nonzero: a real token) whose real tokens form one run
    per row: a left-padded prompt, one decode token per row, or none (a
    finished row). Pads never enter a cache and their outputs are zero.
    Default positions continue each row from its last cached position + 1
    (0 when empty) over its real tokens, as Hugging Face numbers a
    left-padded batch (cumsum(attention_mask) - 1). Hugging Face's
    key_states [batch, kv_heads, n, dim] pass as ``key_states.transpose(1,
    2)``. Inference only; every problem raises ``posenc.Error`` before any
    row changes, naming the row.

    Batched decode::

        cache = KVCacheBatch.from_hf_config(config, batch=4, capacity=4096, layer=0)
        cache.append(k, v, mask=attention_mask)   # left-padded prompts
        out = cache.attend(q, mask=attention_mask)
        for step in range(steps):
            cache.append(k1, v1, mask=alive)       # one token per live row
            out = cache.attend(q1, mask=alive)

    Args:
        batch: the rows, an int in [1, 2^20].
        capacity: the slots of each row, an int >= 1.
        kv_heads: as in ``KVCache``.
        head_dim: as in ``KVCache``.
        value_dim: as in ``KVCache``; None: head_dim.
        rope: as in ``KVCache`` (no M-RoPE: one KVCache per such sequence).
        long_rope: as in ``KVCache``.
        long_rope_threshold: as in ``KVCache``.
        crossing: as in ``KVCache``.
        dtype: as in ``KVCache``: torch.float32 or torch.bfloat16.

    Raises:
        posenc.Error: a bad size, dtype, rotation or crossing, named.
    """

    def __init__(
        self,
        batch,
        capacity,
        kv_heads,
        head_dim,
        *,
        value_dim=None,
        rope=None,
        long_rope=None,
        long_rope_threshold=0,
        crossing="recompute",
        dtype=torch.float32,
    ):
        _check_int("kv_cache_batch", "batch", batch)
        for name, value in (
            ("capacity", capacity),
            ("kv_heads", kv_heads),
            ("head_dim", head_dim),
        ):
            _check_int("kv_cache_batch", name, value)
        _check_int("kv_cache_batch", "value_dim", value_dim, allow_none=True)
        if dtype not in _ATTENTION_DTYPES:
            raise _error(
                "kv_cache_batch",
                "dtype",
                "be float32 or bfloat16",
                _dtype_name(dtype) if isinstance(dtype, torch.dtype) else repr(dtype),
            )
        self._cache = _core.KVCacheBatch(
            batch,
            capacity,
            kv_heads,
            head_dim,
            value_dim=value_dim,
            rope=rope,
            long_rope=long_rope,
            long_rope_threshold=long_rope_threshold,
            crossing=crossing,
            bfloat16=dtype == torch.bfloat16,
        )
        self.dtype = dtype

    @classmethod
    def from_hf_config(
        cls,
        config,
        batch,
        capacity,
        layer=None,
        *,
        dtype=torch.float32,
        crossing="recompute",
        **kwargs,
    ):
        """A batch cache for one layer of a Hugging Face model, with
        ``KVCache.from_hf_config``'s rotation (LongRoPE's two factor sets included).

        Args:
            config: as in ``KVCache.from_hf_config``.
            batch: the rows, an int in [1, 2^20].
            capacity: the slots of each row.
            layer: as in ``KVCache.from_hf_config``.
            dtype: torch.float32 or torch.bfloat16.
            crossing: as in ``KVCache.from_hf_config``.
            **kwargs: as in ``KVCache.from_hf_config``.

        Returns:
            A ``KVCacheBatch``.

        Raises:
            posenc.Error: as ``KVCache.from_hf_config``, or an M-RoPE config (one KVCache per
                sequence).
        """
        kv_heads, head_dim, rotation = _cache_rotation(
            config, layer, crossing, kwargs, allow_mrope=False
        )
        return cls(batch, capacity, kv_heads, head_dim, dtype=dtype, **rotation)

    def _mask_and_positions(self, n, mask, positions):
        batch = self._cache.batch
        if mask is None:
            mask = np.ones((batch, n), dtype=bool)
        else:
            if not isinstance(mask, torch.Tensor) or mask.dtype.is_floating_point:
                raise _error(
                    "kv_cache_batch",
                    "mask",
                    "be a bool or integer tensor [batch, tokens]",
                    type(mask).__name__
                    if not isinstance(mask, torch.Tensor)
                    else _dtype_name(mask.dtype),
                )
            mask = mask.detach().cpu().numpy()
        if positions is None:
            starts = np.array(
                [p[-1] + 1 if p else 0 for p in map(self._cache.positions, range(batch))],
                dtype=np.int64,
            )
            real = np.asarray(mask) != 0
            positions = starts[:, None] + np.maximum(np.cumsum(real, axis=1) - 1, 0)
        else:
            positions = _positions("kv_cache_batch", positions)
        return mask, positions

    def append(self, k, v, positions=None, *, mask=None):
        """Appends each row's real tokens to that row's cache.

        Args:
            k: the keys, un-rotated, of the cache's dtype.
            v: the values, of the cache's dtype.
            positions: int64 [batch, n]; None: each row continues from its last cached
                position + 1 over its real tokens.
            mask: bool or integer [batch, n] (nonzero: a real token), one run of real tokens per
                row; None: all real.

        Shapes:
            k: [batch, n, kv_heads, head_dim].
            v: [batch, n, kv_heads, value_dim].

        Raises:
            posenc.Error: a bad argument, naming the row, before any row changes.
        """
        k = k.contiguous() if isinstance(k, torch.Tensor) else k
        v = v.contiguous() if isinstance(v, torch.Tensor) else v
        k_array = _kv_tensor(self, "k", k)
        v_array = _kv_tensor(self, "v", v)
        n = k.shape[1] if k.dim() == 4 else 0
        mask, positions = self._mask_and_positions(n, mask, positions)
        self._cache.append(positions, mask, k_array, v_array)

    def attend(
        self,
        q,
        positions=None,
        *,
        mask=None,
        causal=True,
        alibi=None,
        scale=None,
        window=0,
        chunk_size=0,
        softcap=0.0,
        sinks=None,
        out_dtype=None,
    ):
        """Each row's real queries against that row's cache; zero at pads.

        Args:
            q: the queries, un-rotated, of the cache's dtype.
            positions: int64 [batch, n]; None: those of each row's last appended tokens.
            mask: bool or integer [batch, n] (nonzero: a real query); None: all real.
            causal: as in ``KVCache.attend``.
            alibi: as in ``KVCache.attend``.
            scale: as in ``KVCache.attend``; None: 1 / sqrt(head_dim).
            window: as in ``KVCache.attend``.
            chunk_size: as in ``KVCache.attend``.
            softcap: as in ``KVCache.attend``.
            sinks: as in ``KVCache.attend``.
            out_dtype: the output's dtype; None: the cache's.

        Shapes:
            q: [batch, n, heads, head_dim].

        Returns:
            [batch, n, heads, value_dim] in the cache's dtype (or out_dtype), zero at pads.

        Raises:
            posenc.Error: a bad argument, naming the row; None positions for a row with more
                queries than cached tokens.
        """
        q = q.contiguous() if isinstance(q, torch.Tensor) else q
        q_array = _kv_tensor(self, "q", q)
        n = q.shape[1] if q.dim() == 4 else 0
        if sinks is not None:
            _check_softcap_sinks(softcap, sinks, q, q.shape[-2] if q.dim() else 0, "kv_cache_batch")
            sinks = sinks.detach().to(torch.float32).contiguous().numpy()
        if out_dtype is None:
            out_dtype = self.dtype
        _float_dtype("kv_cache_batch", "out_dtype", out_dtype)
        if positions is None:
            mask_array = (
                np.ones((self._cache.batch, n), dtype=bool)
                if mask is None
                else mask.detach().cpu().numpy()
            )
            positions = np.zeros((self._cache.batch, n), dtype=np.int64)
            for b in range(self._cache.batch):
                real = np.flatnonzero(np.asarray(mask_array[b]) != 0)
                cached = self._cache.positions(b)
                if len(real) > len(cached):
                    raise _error(
                        "kv_cache_batch",
                        "positions",
                        f"be given when row {b} has more queries than cached "
                        f"tokens ({len(cached)})",
                        f"None for {len(real)} tokens",
                    )
                positions[b, real] = cached[len(cached) - len(real) :]
        mask, positions = self._mask_and_positions(n, mask, positions)
        out = self._cache.attend(
            q_array,
            positions,
            mask,
            causal=causal,
            alibi=alibi,
            scale=scale,
            window=window,
            chunk_size=chunk_size,
            softcap=softcap,
            sinks=sinks,
        )
        return torch.from_numpy(out).to(out_dtype)

    def clear(self, row):
        """Empties one row (before appending its recomputed sequence).

        Args:
            row: the row, in [0, batch).
        """
        self._cache.clear(row)

    @property
    def sizes(self):
        """Tokens cached in each row (a list)."""
        return self._cache.sizes

    def positions(self, row):
        """The positions cached in one row.

        Args:
            row: the row, in [0, batch).

        Returns:
            int64 [size of the row], a copy.
        """
        return torch.tensor(self._cache.positions(row), dtype=torch.int64)
