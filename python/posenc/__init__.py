"""posenc: position encodings for transformers, over the posenc C++ library.

numpy API (this module): float32 arrays in and out without copies where the
layout allows, int64 positions, ``posenc.Error`` (a ``ValueError``) carrying
the library's message. Activations are ``[..., tokens, heads, head_dim]`` with
a contiguous last dim; the other strides are free. An array posenc allocates
for a result is at most ``MAX_OUTPUT_BYTES`` (16 GiB); a larger one is refused
before allocation (pass ``out=`` where offered to use memory of your own).

Models: ``rope_from_hf_config(config, layer=i)`` builds the ``Rope`` of a
Hugging Face config.json (a layer index or a layer type); ``model_positions``
describes the config layer by layer (RoPE or NoPE, windows, chunks, query
scales). Biases added to the scores: ``alibi_bias`` (ALiBi's linear bias),
and T5's learned relative bias, whose buckets ``relative_position_bucket``
computes (the table is a trained weight: ``posenc.torch.RelativePositionBias``
looks it up).

Multimodal RoPE: ``MRope`` turns each rotary pair by one of several position
streams (Qwen-VL's M-RoPE over time, height and width; the 2-D RoPE of vision
towers over patch rows and columns), applied by ``apply_mrope`` to positions
[streams, ..., tokens]; ``get_rope_index`` builds Qwen-VL's positions as
Hugging Face's ``get_rope_index`` does.

KV cache: ``KVCache`` is one layer's cache of one sequence: keys rotated once
on ``append``, ``attend`` rotating only the new queries, and the position
moves of a live cache (``context_shift``, ``roll_sink_window`` for attention
sinks) re-rotating the moved keys exactly; LongRoPE's two factor sets with
``long_rope=`` (Phi-3's switch at original_max_position_embeddings).
``KVCacheBatch`` holds a batch of sequences of different lengths (a
left-padded prefill, then decode steps), one ``KVCache`` per row.

Training: ``attention_forward`` returns attention's output with each row's
log-sum-exp, and ``attention_backward`` turns the gradient of that output
into the gradients of q, k and v (``posenc.torch.attention`` runs both as
its autograd Function).

PyTorch API: ``posenc.torch`` (imported on demand, so numpy users do not pay
for torch).

Example::

    import numpy as np
    import posenc

    rope = posenc.Rope.default(64)  # base 10000, half-split pairs
    # [batch, tokens, heads, head_dim] and int64 positions [tokens]
    q = np.random.randn(2, 16, 8, 64).astype(np.float32)
    q_rot = posenc.apply_rope(rope, np.arange(16), q)
"""

import json
import os
import sys

from posenc import _core
from posenc._arguments import ArgumentTypeError, checked_types
from posenc._core import (
    MAX_OUTPUT_BYTES,
    Alibi,
    Error,
    KVCache,
    KVCacheBatch,
    LearnedPositions,
    MRope,
    MropeIndexRules,
    QwenVlTokens,
    Rope,
    RopeDirection,
    RopeLayout,
    RopePrecision,
    Sinusoidal,
    alibi_bias,
    alibi_slopes,
    apply_mrope,
    apply_mrope_inplace,
    apply_mrope_qk,
    apply_mrope_qk_inplace,
    apply_rope,
    apply_rope_inplace,
    apply_rope_qk,
    apply_rope_qk_inplace,
    attention,
    attention_backward,
    attention_forward,
    default_inv_freq,
    dual_chunk_attention,
    embed_tokens,
    llama4_vision_positions,
    pixtral_vision_positions,
    qwen_vision_positions,
    qwen_vision_positions_in_window_order,
    qwen_vision_window_order,
    relative_position_bucket,
    rope_angle,
    self_extend_attention,
    sinusoidal,
    sinusoidal_table,
)


def _pretrained_config_dict(config):
    """config.to_dict() of a transformers PretrainedConfig, else None. An
    object of that class means transformers is loaded: it is looked up, never
    imported here."""
    transformers = sys.modules.get("transformers")
    config_class = getattr(transformers, "PretrainedConfig", None) if transformers else None
    if config_class is not None and isinstance(config, config_class):
        return config.to_dict()
    return None


def _config_call(config, from_text, from_file, **options):
    """Calls from_text with the JSON text of a dict, a transformers
    PretrainedConfig or a JSON string, or from_file with a path."""
    config = _pretrained_config_dict(config) or config
    if isinstance(config, dict):
        return from_text(json.dumps(config), **options)
    if isinstance(config, str) and config.lstrip().startswith("{"):
        return from_text(config, **options)
    if isinstance(config, (str, os.PathLike)):
        return from_file(os.fspath(config), **options)
    raise Error(
        "[hf_config] config must be a dict, a transformers PretrainedConfig or a "
        "config.json path (or its JSON text), got " + type(config).__name__
    )


def rope_from_hf_config(
    config,
    *,
    layer_type=None,
    layer=None,
    seq_len=None,
    precision=RopePrecision.REFERENCE,
    yarn_rules=None,
):
    """The ``Rope`` of a Hugging Face model config.

    The rope type, theta, head_dim and rotary width (and rotary_offset: DeepSeek's 64 rotated
    features sit after 128 unrotated ones of a 192-wide head), scaling rule (linear, dynamic,
    YaRN, LongRoPE, Llama 3, ...) and pair layout are read as transformers standardizes them
    (posenc/hf_config.h). With neither ``layer`` nor ``layer_type``, the config's first RoPE
    setting, as ``posenc inspect`` without ``--layer`` (docs/MODELS.md, "Choosing a layer": its
    only one, else the first in rope_parameters' sorted keys, or the full layers' of Gemma 3 and
    ModernBERT).

    Args:
        config: a transformers ``PretrainedConfig`` (read as its ``to_dict()``), a dict (a
            parsed config.json), its JSON text, or the path of a config.json.
        layer_type: one of a per-layer config's types (e.g. "sliding_attention"); None: see
            above.
        layer: a layer index (see ``model_positions``), or a layer type as a string.
        seq_len: the length L of the length-dependent rules (dynamic, longrope):
            max(position_ids) + 1; None: the config's own length.
        precision: ``RopePrecision.REFERENCE`` reproduces the float32 frequencies the models
            were trained with; ``EXACT`` is double throughout.
        yarn_rules: the YaRN of a transformers release (docs/MODELS.md, "YaRN by release"):
            "transformers5" (4.56.2 and later, the paper's), "transformers4_50" (4.45-4.50: the
            correction range over max_position_embeddings, no mscale) or "transformers4_51"
            (4.51.0-4.56.1: factor M / L0); None: the release that wrote the config (its
            transformers_version: before 4.51, transformers4_50), else transformers5.

    Returns:
        posenc.Rope.

    Raises:
        posenc.Error: a config that is not RoPE, a bad key (named as written in the file), or a
            layer that does not rotate (Llama 4's and SmolLM3's NoPE layers), named.
    """
    return _layer_config_call(
        config,
        _core.rope_from_hf_config_text,
        _core.rope_from_hf_config_file,
        layer,
        layer_type,
        seq_len=seq_len,
        precision=precision,
        yarn_rules=yarn_rules,
    )


def _layer_config_call(config, from_text, from_file, layer, layer_type, **options):
    """_config_call for a reader of one layer (rope_from_hf_config,
    mrope_from_hf_config): layer is an index or None, or a string, which
    means a layer type."""
    if isinstance(layer, str):
        if layer_type is not None:
            raise Error(
                f"[hf_config] layer must be an index when layer_type is given, got {layer!r}"
            )
        layer, layer_type = None, layer
    elif layer is not None and (isinstance(layer, bool) or not isinstance(layer, int)):
        raise Error(
            "[hf_config] layer must be a layer index (int) or a layer type "
            f"(str), got {type(layer).__name__}"
        )
    return _config_call(
        config,
        from_text,
        from_file,
        layer_type=layer_type,
        layer=layer,
        **options,
    )


def mrope_from_hf_config(
    config,
    *,
    layer_type=None,
    layer=None,
    seq_len=None,
    precision=RopePrecision.REFERENCE,
    yarn_rules=None,
):
    """The language model's RoPE of a Hugging Face config as an ``MRope``.

    For a Qwen2-VL, Qwen2.5-VL or Qwen3-VL config, M-RoPE over ``rope_from_hf_config``'s pairs
    with the config's mrope_section (in blocks, or interleaved for mrope_interleaved, as Hugging
    Face's apply_interleaved_mrope lays them, also where a stream gets fewer pairs than its
    section); for any other RoPE config, one stream. Streams: time, height, width.

    Args:
        config: as ``rope_from_hf_config``.
        layer_type: as ``rope_from_hf_config``.
        layer: as ``rope_from_hf_config``.
        seq_len: as ``rope_from_hf_config``.
        precision: as ``rope_from_hf_config``.
        yarn_rules: as ``rope_from_hf_config``.

    Returns:
        posenc.MRope.

    Raises:
        posenc.Error: as ``rope_from_hf_config``.
    """
    return _layer_config_call(
        config,
        _core.mrope_from_hf_config_text,
        _core.mrope_from_hf_config_file,
        layer,
        layer_type,
        seq_len=seq_len,
        precision=precision,
        yarn_rules=yarn_rules,
    )


def vision_rope_from_hf_config(config):
    """The 2-D RoPE of a config's vision tower as an ``MRope``.

    Streams: patch row and column (Llama 4: column + 1, row + 1). Qwen2-VL, Qwen2.5-VL and
    Qwen3-VL (``MRope.qwen_vision``), Pixtral (llava / mistral3 with a pixtral vision_config:
    ``MRope.pixtral``) and Llama 4 (``MRope.llama4_vision``), head_dim and theta from
    vision_config with the config classes' defaults. The tower's patch grid (patch_size,
    spatial_merge_size, window_units, patches_per_side) is ``model_positions(config).vision_rope``;
    the positions come from ``qwen_vision_positions``, ``qwen_vision_positions_in_window_order``,
    ``pixtral_vision_positions`` and ``llama4_vision_positions``.

    Args:
        config: as ``rope_from_hf_config``.

    Returns:
        posenc.MRope.

    Raises:
        posenc.Error: a config without such a tower, or a bad key, named.
    """
    return _config_call(
        config,
        _core.vision_rope_from_hf_config_text,
        _core.vision_rope_from_hf_config_file,
    )


class LayerPositions:
    """What one layer does with positions (posenc/model_positions.h).

    Attributes (the keys of ``posenc inspect --json``'s layers): ``index``;
    ``scheme``: "rope", "nope", "alibi", "relative_bias", "learned" or
    "none" (no attention: Mamba, MLP); ``layer_type`` (the config's name or
    None); ``rope_theta`` and ``rope_type`` (RoPE layers, else None);
    ``sliding_window`` (keys within that many positions, or None);
    ``attention_chunk_size`` (Llama 4's chunks, or None); ``query_scale``
    (None, or a dict rule, beta, floor_scale, offset: q is scaled by
    1 + beta ln(1 + floor((p + offset) / floor_scale))); ``causal``;
    ``symmetric_window`` (ModernBERT: the window reaches both ways).

    Args:
        data: one layer of ``posenc inspect --json``'s "layers" (a dict with the keys above);
            ``model_positions`` makes them.
    """

    _FIELDS = (
        "index",
        "scheme",
        "layer_type",
        "rope_theta",
        "rope_type",
        "sliding_window",
        "attention_chunk_size",
        "query_scale",
        "causal",
        "symmetric_window",
    )

    def __init__(self, data):
        for name in self._FIELDS:
            setattr(self, name, data[name])

    def to_dict(self):
        """The layer as ``posenc inspect --json`` writes it.

        Returns:
            dict: one key per attribute.
        """
        return {name: getattr(self, name) for name in self._FIELDS}

    def __eq__(self, other):
        return isinstance(other, LayerPositions) and self.to_dict() == other.to_dict()

    def __repr__(self):
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._FIELDS)
        return f"LayerPositions({fields})"


class ModelPositions:
    """A model's positions layer by layer (posenc/model_positions.h), from
    ``posenc.model_positions(config)``.

    ``scheme``: the main scheme, "rope" (also for a model with some NoPE
    layers), "alibi", "learned", "relative_bias" or "none". ``layers``: one
    ``LayerPositions`` per layer (empty when the config gives no layer
    count). ``notes``: the defaults taken. The model-level data are
    attributes too, by scheme: RoPE ``head_dim`` (the full q/k head),
    ``rotary_dim``, ``rotary_offset``, ``layout``, ``mrope_section`` (None
    for 1-D RoPE; image and video tokens need 3-D positions),
    ``num_attention_heads``, ``num_key_value_heads``, ``layer_types``,
    ``softmax_scale``, ...; relative_bias ``num_heads``, ``num_buckets``,
    ``max_distance``, ``bidirectional`` (the encoder's), ``encoder_layers``,
    ``decoder_layers``; learned ``max_positions``, ``dim``, ``offset`` (OPT:
    2); alibi ``num_heads``, ``max_bias``. ``to_dict()`` gives all of it.

    Args:
        data: the dict of ``posenc inspect --json``; ``model_positions`` makes it.
        summary: the lines of ``summary()``.
    """

    def __init__(self, data, summary=()):
        self._data = dict(data)
        self._summary = list(summary)
        self.layers = [LayerPositions(layer) for layer in data["layers"]]
        self._data["layers"] = self.layers

    def __getattr__(self, name):
        data = self.__dict__.get("_data", {})
        if name in data:
            return data[name]
        raise AttributeError(
            f"{type(self).__name__} of a {data.get('scheme')} model has no attribute {name!r}"
        )

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self._data))

    def to_dict(self):
        """The model as ``posenc inspect --json`` writes it.

        Returns:
            dict: the model-level keys and "layers", one dict per layer.
        """
        out = dict(self._data)
        out["layers"] = [layer.to_dict() for layer in self.layers]
        return out

    def summary(self):
        """The layers run-length coded, as ``posenc inspect`` prints them.

        Returns:
            list of str: ["all 32 layers: RoPE theta 1e4 [full_attention]"] or
            ["layers 0-2, 4-6, ..., 44-46 (36): ...", ...].
        """
        return list(self._summary)

    def __repr__(self):
        skip = {"layers", "notes", "layer_types", "config_prefix"}
        fields = [f"scheme={self.scheme!r}", f"model_type={self.model_type!r}"]
        # The multimodal objects by their one-line summary (to_dict() has them whole).
        brief = {"mrope": "pairs", "vision_rope": "pairs"}
        fields += [
            f"{key}={(value[brief[key]] if key in brief else value)!r}"
            for key, value in self._data.items()
            if key not in skip | {"scheme", "model_type"} and value is not None
        ]
        lines = [f"ModelPositions({', '.join(fields)})"]
        lines += [f"  {line}" for line in self.summary()]
        return "\n".join(lines)


def model_positions(config):
    """A Hugging Face config's positions, layer by layer.

    Each layer says whether it rotates (RoPE, with its theta and rope type) or not (NoPE: Llama 4
    and SmolLM3 every 4th layer; none: Mamba layers), its sliding window (Gemma 2/3, gpt-oss,
    Cohere 2, ...), chunked attention (Llama 4), query scale (Llama 4's NoPE temperature,
    Ministral 3), and whether it is causal. T5 gives its relative-position buckets
    (``relative_position_bucket``, ``posenc.torch.RelativePositionBias``). Example::

        model = posenc.model_positions("Llama-4-Scout/config.json")
        model.scheme                  # "rope"
        model.layers[3].scheme        # "nope"
        model.layers[3].query_scale   # {"rule": "llama4_attn_temperature", ...}
        rope = posenc.rope_from_hf_config(config, layer=0)

    Args:
        config: as ``rope_from_hf_config``; a multimodal config's language model is read from
            ``text_config``.

    Returns:
        ModelPositions.

    Raises:
        posenc.Error: a bad key, named.
    """
    text, summary = _config_call(config, _core.model_positions_text, _core.model_positions_file)
    data = json.loads(text)
    if data.get("layout") == "half-split":
        data["layout"] = "half_split"  # RopeLayout's spelling, as elsewhere in Python
    return ModelPositions(data, summary)


def qwen_vl_tokens(config, rules=None):
    """The token ids and sizes Qwen-VL's ``get_rope_index`` reads, from a Qwen2-VL, Qwen2.5-VL or
    Qwen3-VL config: ids at the top level or in text_config, spatial_merge_size and
    tokens_per_second in vision_config, the config classes' defaults otherwise.

    Args:
        config: as ``rope_from_hf_config``, or a ``QwenVlTokens`` (returned as is, or with
            ``rules`` in place of its own).
        rules: None for the model's release rules, or a ``MropeIndexRules`` (or its name, e.g.
            "qwen2_5_vl_int_seconds", or "qwen2_vl_transformers5" for transformers 5's
            numbering) of the same model.

    Returns:
        posenc.QwenVlTokens.

    Raises:
        posenc.Error: a config that is not Qwen-VL's, or rules of another model, named.
    """
    if isinstance(config, QwenVlTokens):
        if rules is None:
            return config
        return QwenVlTokens(
            image_token_id=config.image_token_id,
            video_token_id=config.video_token_id,
            vision_start_token_id=config.vision_start_token_id,
            spatial_merge_size=config.spatial_merge_size,
            tokens_per_second=config.tokens_per_second,
            rules=rules,
        )
    return _config_call(
        config,
        QwenVlTokens.from_config_text,
        QwenVlTokens.from_config_file,
        rules=rules,
    )


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
    """Hugging Face's Qwen-VL ``get_rope_index``: the M-RoPE positions of a batch of prompts,
    the values Hugging Face returns (posenc/mrope_positions.h; tested against its outputs in
    tests/golden/mrope_index/).

    Feed position_ids to ``apply_mrope`` with an ``MRope`` from the same config; a decoded token
    after the prompt is at cache_position + rope_deltas in every stream.

    Args:
        config: a Qwen-VL config (as ``rope_from_hf_config``) or a ``QwenVlTokens``.
        input_ids: int64 [batch, seq_len].
        image_grid_thw: int [n, 3] rows (t, h, w) of the images before merging, consumed in
            order across the batch; None: no images.
        video_grid_thw: int [n, 3] rows (t, h, w) of the videos, likewise; None: no videos.
        second_per_grid_ts: one number per video (Qwen2.5-VL rules); None: 1.0 each.
        attention_mask: int64 [batch, seq_len] of 0 and 1; None: all ones. Padded slots get
            position 1, as in Hugging Face.
        rules: the numbering of video frames (``MropeIndexRules`` or its name); None: the
            config's model as released.

    Returns:
        (position_ids, rope_deltas): int64 [3, batch, seq_len] (time, height, width) and int64
        [batch, 1].

    Raises:
        posenc.Error: a bad config, array or rule, named.
    """
    return _core.qwen_vl_rope_index_of_tokens(
        qwen_vl_tokens(config, rules),
        input_ids,
        image_grid_thw,
        video_grid_thw,
        second_per_grid_ts,
        attention_mask,
    )


__version__ = _core.__version__

__all__ = [
    "MAX_OUTPUT_BYTES",
    "Alibi",
    "ArgumentTypeError",
    "Error",
    "KVCache",
    "KVCacheBatch",
    "LayerPositions",
    "LearnedPositions",
    "MRope",
    "ModelPositions",
    "MropeIndexRules",
    "QwenVlTokens",
    "Rope",
    "RopeDirection",
    "RopeLayout",
    "RopePrecision",
    "Sinusoidal",
    "alibi_bias",
    "alibi_slopes",
    "apply_mrope",
    "apply_mrope_inplace",
    "apply_mrope_qk",
    "apply_mrope_qk_inplace",
    "apply_rope",
    "apply_rope_inplace",
    "apply_rope_qk",
    "apply_rope_qk_inplace",
    "attention",
    "attention_backward",
    "attention_forward",
    "default_inv_freq",
    "dual_chunk_attention",
    "embed_tokens",
    "get_rope_index",
    "llama4_vision_positions",
    "model_positions",
    "mrope_from_hf_config",
    "pixtral_vision_positions",
    "qwen_vision_positions",
    "qwen_vision_positions_in_window_order",
    "qwen_vision_window_order",
    "qwen_vl_tokens",
    "relative_position_bucket",
    "rope_angle",
    "rope_from_hf_config",
    "self_extend_attention",
    "sinusoidal",
    "sinusoidal_table",
    "vision_rope_from_hf_config",
]

# A wrong argument type is a posenc.Error naming the function, as every other
# bad argument is (_arguments.py): the bindings exported above, wrapped once.
checked_types(
    sys.modules[__name__],
    [name for name in __all__ if getattr(_core, name, None) is globals()[name]],
)

# Names of an earlier release, one per concept now: each still works, with a DeprecationWarning
# naming its replacement (the same spelling as posenc.torch's).
_RENAMED = {
    "KvCache": "KVCache",
    "KvCacheBatch": "KVCacheBatch",
    "qwen_vl_rope_index": "get_rope_index",
}


def __getattr__(name):
    if name in _RENAMED:
        import warnings

        warnings.warn(
            f"posenc.{name} is now posenc.{_RENAMED[name]}",
            DeprecationWarning,
            stacklevel=2,
        )
        return globals()[_RENAMED[name]]
    raise AttributeError(f"module 'posenc' has no attribute {name!r}")
