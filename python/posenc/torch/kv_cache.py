"""KVCache: one attention layer's KV cache for a decode loop on torch tensors."""

import numpy as np
import torch

from posenc import _core
from posenc import model_positions, mrope_from_hf_config, rope_from_hf_config
from posenc.torch._tensors import (
    _check_activations,
    _check_int,
    _dtype_name,
    _error,
    _float_dtype,
    _numpy,
    _positions,
)
from posenc.torch.attention import _ATTENTION_DTYPES, _check_softcap_sinks


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
