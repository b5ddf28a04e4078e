"""posenc: position encodings for transformers, over the posenc C++ library.

numpy API (this module): float32 arrays in and out without copies where the
layout allows, int64 positions, ``posenc.Error`` (a ``ValueError``) carrying
the library's message. Activations are ``[..., tokens, heads, head_dim]`` with
a contiguous last dim; the other strides are free. An array posenc allocates
for a result is at most ``MAX_OUTPUT_BYTES`` (16 GiB); a larger one is refused
before allocation (pass ``out=`` where offered to use memory of your own).

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

from posenc._core import (
    MAX_OUTPUT_BYTES,
    Alibi,
    Error,
    LearnedPositions,
    Rope,
    RopeDirection,
    RopeLayout,
    RopePrecision,
    Sinusoidal,
    alibi_bias,
    alibi_slopes,
    apply_rope,
    apply_rope_inplace,
    apply_rope_qk,
    apply_rope_qk_inplace,
    attention,
    default_inv_freq,
    embed_tokens,
    rope_angle,
    sinusoidal,
    sinusoidal_table,
)
from posenc import _core


def rope_from_hf_config(
    config, *, layer_type=None, seq_len=None, precision=RopePrecision.REFERENCE
):
    """The ``Rope`` of a Hugging Face model config: a dict
    (``config.to_dict()``, a parsed config.json) or the path of a config.json.

    The rope type, theta, head_dim and rotary width, scaling rule (linear,
    dynamic, YaRN, LongRoPE, Llama 3, ...) and pair layout are read as
    transformers standardizes them (posenc/hf_config.h). layer_type picks one
    of a per-layer config's types (e.g. "sliding_attention"); seq_len is the
    length L of the length-dependent rules (dynamic, longrope):
    max(position_ids) + 1. precision REFERENCE reproduces the float32
    frequencies the models were trained with; EXACT is double throughout. A
    config that is not RoPE, or a bad key, raises ``posenc.Error`` naming the
    key as written in the file.
    """
    options = dict(layer_type=layer_type, seq_len=seq_len, precision=precision)
    if isinstance(config, dict):
        return _core.rope_from_hf_config_text(json.dumps(config), **options)
    if isinstance(config, (str, os.PathLike)):
        return _core.rope_from_hf_config_file(os.fspath(config), **options)
    raise Error(
        "[hf_config] config must be a dict or a config.json path, got "
        + type(config).__name__
    )


__all__ = [
    "MAX_OUTPUT_BYTES",
    "Alibi",
    "Error",
    "LearnedPositions",
    "Rope",
    "RopeDirection",
    "RopeLayout",
    "RopePrecision",
    "Sinusoidal",
    "alibi_bias",
    "alibi_slopes",
    "apply_rope",
    "apply_rope_inplace",
    "apply_rope_qk",
    "apply_rope_qk_inplace",
    "attention",
    "default_inv_freq",
    "embed_tokens",
    "rope_angle",
    "rope_from_hf_config",
    "sinusoidal",
    "sinusoidal_table",
]
