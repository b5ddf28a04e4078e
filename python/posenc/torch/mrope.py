"""Multi-stream RoPE on torch tensors: apply_mrope, MultimodalRotaryEmbedding (Qwen-VL's
M-RoPE), VisionRotaryEmbedding (the 2-D RoPE of vision towers) and get_rope_index."""

import torch
import torch.fx

from posenc import (
    _core,
    model_positions,
    mrope_from_hf_config,
    vision_rope_from_hf_config,
)
from posenc import get_rope_index as _numpy_get_rope_index
from posenc.torch._tensors import (
    _check_cpu,
    _check_instance,
    _check_int,
    _check_number,
    _check_pair,
    _check_positions_device,
    _check_tensor,
    _error,
    _int_list,
    _int_tensor_numpy,
    _position_range,
    _position_tensor,
    _qkv_format,
    _tokens_first,
)
from posenc.torch.rope import _rotate_views, _rotate_with


def _stream_positions(function, mrope, q, positions, name, text_form, qkv_format="bshd"):
    """positions as the int64 tensor [streams, *batch, tokens] the rotation
    reads, for q [*batch, tokens, heads, head_dim] (or bhsd). With text_form
    (Hugging Face's position_ids), [*batch, tokens] is every stream's and None
    means 0 .. tokens - 1 in every stream (expanded views, no copy); without
    it, [streams, tokens] is shared by the batch."""
    _check_tensor(function, "q", q)
    view = _tokens_first(function, "q", q, _qkv_format(function, qkv_format))
    batch, tokens = tuple(view.shape[:-3]), view.shape[-3]
    full = (mrope.num_streams,) + batch + (tokens,)
    if positions is None and text_form:
        return _position_range(function, tokens, name).expand(full)
    positions = _position_tensor(function, positions, name)
    _check_positions_device(function, positions, q, name)
    shape = tuple(positions.shape)
    if shape == full:
        return positions
    if text_form and shape == batch + (tokens,):
        return positions.expand(full)
    if not text_form and shape == full[:1] + full[-1:]:
        return positions
    rule = f"be (streams, *batch, tokens) = {full}"
    if text_form:
        rule += (
            f" or (*batch, tokens) = {batch + (tokens,)} (text: the same position in every stream)"
        )
    elif batch:
        rule += f" or (streams, tokens) = {full[:1] + full[-1:]}"
    raise _error(function, f"{name}.shape", rule, shape)


def apply_mrope(mrope, positions, q, k=None, *, qkv_format=None):
    """Rotates q (and k) by multi-stream RoPE at their position streams; differentiable.

    Pair i turns by the position of stream mrope.pair_stream[i] (posenc/mrope.h); the rotation
    is otherwise ``apply_rope``'s. Backward: the transpose, by the same kernel. Plain CPU tensors
    (float32, float64, bfloat16, float16) run the kernels; others the PyTorch definition.

    Args:
        mrope: a ``posenc.MRope`` (M-RoPE sections, a vision tower's 2-D RoPE; a
            ``MultimodalRotaryEmbedding``'s is its ``.mrope``).
        positions: int64 [streams, ..., tokens] (Hugging Face's position_ids [3, batch, seq]) or
            [streams, tokens] (shared by the batch), each in [0, 2^32], read where it lies (any
            strides, no copy).
        q: the queries: float32, float64, bfloat16 or float16.
        k: the keys, of q's dtype; None rotates q alone.
        qkv_format: "bshd" or "bhsd" (Hugging Face's, no copy), as in ``apply_rope``; required.

    Shapes:
        q: [..., tokens, num_heads, head_dim] for "bshd"; [..., num_heads, tokens, head_dim] for
            "bhsd".
        k: [..., tokens, num_kv_heads, head_dim] for "bshd"; [..., num_kv_heads, tokens,
            head_dim] for "bhsd".

    Returns:
        q_rot, or (q_rot, k_rot) when k is given, of the inputs' shapes and dtype.

    Raises:
        posenc.Error: a bad mrope, positions (shape, dtype, range) or tensor, named.
    """
    _check_instance(
        "mrope",
        "mrope",
        mrope,
        _core.MRope,
        "a posenc.MRope (of a MultimodalRotaryEmbedding: its .mrope)",
    )
    positions = _position_tensor("mrope", positions)
    _check_positions_device("mrope", positions, q)
    return _rotate_streams(mrope, positions, q, k, qkv_format)


def _rotate_streams(mrope, positions, q, k, qkv_format="bshd"):
    """apply_mrope with positions already an int64 tensor; k may be None
    (q_rot alone is returned)."""
    _check_pair("mrope", q, k)
    qkv_format = _qkv_format("mrope", qkv_format)
    views = tuple(
        _tokens_first("mrope", name, t, qkv_format)
        for name, t in (("q", q), ("k", k))
        if t is not None
    )
    outs = _rotate_views("mrope", mrope, positions, views)
    if qkv_format == "bhsd":
        outs = tuple(o.transpose(-2, -3) for o in outs)
    return outs[0] if k is None else outs


def _module_mrope(module, q, k, position_ids, qkv_format):
    """MultimodalRotaryEmbedding.forward, as a function torch.fx records as one node."""
    qkv_format = _qkv_format(
        "mrope", qkv_format or module.qkv_format, " here or to MultimodalRotaryEmbedding"
    )
    positions = _stream_positions(
        "mrope", module.mrope, q, position_ids, "position_ids", True, qkv_format
    )
    return _rotate_streams(module.mrope, positions, q, k, qkv_format)


def _module_vision_rope(module, q, k, positions):
    """VisionRotaryEmbedding.forward, as a function torch.fx records as one node."""
    positions = _stream_positions("mrope", module.mrope, q, positions, "positions", False)
    return _rotate_streams(module.mrope, positions, q, k)


torch.fx.wrap("_module_mrope")
torch.fx.wrap("_module_vision_rope")


class MultimodalRotaryEmbedding(torch.nn.Module):
    """Multimodal RoPE as a module: ``forward(q, k=None, position_ids=None, *, qkv_format=None)``
    -> q_rot, or (q_rot, k_rot) when k is given.

    M-RoPE of Qwen2-VL and Qwen2.5-VL (``mrope_section`` pairs per stream in blocks) and Qwen3-VL
    (``interleaved=True``): each token has a time, a height and a width position, and each
    rotary pair turns by one of them. Built from a Hugging Face config (``from_hf_config``), from
    head_dim, mrope_section and base (plain RoPE frequencies), from a ready ``posenc.Rope`` and
    mrope_section, or from a ``posenc.MRope``. Autograd: the backward pass is the inverse
    rotation. The module has no parameters.

    Args:
        head_dim: the features of a head; required unless rope or mrope is given.
        mrope_section: the pairs of each stream (time, height, width), a sequence of ints adding
            up to rotary_dim / 2 (e.g. Qwen2-VL's [16, 24, 24]); required unless mrope is given.
        base: theta of the plain frequencies, when built from head_dim.
        interleaved: False: the sections in blocks (Qwen2-VL, Qwen2.5-VL); True: the streams
            take turns pair by pair, t h w t h w ... (Qwen3-VL).
        rope: a ready ``posenc.Rope`` whose pairs the sections share out (its frequencies,
            layout, scaling and offset kept); None: plain RoPE of head_dim and base.
        mrope: a ready ``posenc.MRope``; the arguments above are then not read.
        qkv_format: "bshd" or "bhsd" (Hugging Face's), given here or per call (one of them is
            required); None: each call says.

    Raises:
        posenc.Error: a missing or bad argument (sections that do not add up to the pairs, a
            bad size, base, rope, mrope or qkv_format), named.
    """

    def __init__(
        self,
        head_dim=None,
        mrope_section=None,
        base=10000.0,
        *,
        interleaved=False,
        rope=None,
        mrope=None,
        qkv_format=None,
    ):
        super().__init__()
        self.qkv_format = None if qkv_format is None else _qkv_format("mrope", qkv_format)
        if mrope is None:
            if mrope_section is None:
                raise _error("mrope", "mrope_section", "be given when mrope is not", None)
            sections = _int_list(mrope_section)
            if sections is None:
                raise _error(
                    "mrope",
                    "mrope_section",
                    "be a sequence of ints",
                    repr(mrope_section),
                )
            if rope is None:
                if head_dim is None:
                    raise _error(
                        "mrope",
                        "head_dim",
                        "be given when rope and mrope are not",
                        None,
                    )
                _check_int("mrope", "head_dim", head_dim)
                _check_number("mrope", "base", base)
                rope = _core.Rope.default(head_dim, float(base))
            _check_instance("mrope", "rope", rope, _core.Rope, "a posenc.Rope")
            mrope = _core.MRope.sections(rope, sections, bool(interleaved))
        _check_instance("mrope", "mrope", mrope, _core.MRope, "a posenc.MRope")
        self.mrope = mrope

    @classmethod
    def from_hf_config(cls, config, layer=None, *, qkv_format=None, **kwargs):
        """The M-RoPE of a Hugging Face Qwen2-VL, Qwen2.5-VL or Qwen3-VL config:
        ``posenc.mrope_from_hf_config`` (the language model's RoPE with its ``mrope_section``, in
        blocks or interleaved as the model lays them).

        Args:
            config: a dict, its JSON text or a config.json path (or a transformers
                ``PretrainedConfig``).
            layer: a layer index or type, as in ``rope_from_hf_config``; None: the config's
                first RoPE setting.
            qkv_format: "bshd" or "bhsd" for the module's calls; None: each call says.
            **kwargs: the other keywords of ``rope_from_hf_config`` (layer_type, seq_len,
                precision, yarn_rules).

        Returns:
            A ``MultimodalRotaryEmbedding``.

        Raises:
            posenc.Error: a config without M-RoPE (naming its model type), or a bad key.
        """
        mrope = mrope_from_hf_config(config, layer=layer, **kwargs)
        if mrope.num_streams == 1:
            model = model_positions(config)
            raise _error(
                "mrope",
                "config",
                "describe a model with M-RoPE (rope_scaling.mrope_section: "
                "Qwen2-VL, Qwen2.5-VL, Qwen3-VL)",
                f"{model.model_type} ({model.scheme}, no mrope_section)",
            )
        return cls(mrope=mrope, qkv_format=qkv_format)

    @property
    def rope(self):
        """The underlying ``posenc.Rope`` (layout, frequencies, scaling)."""
        return self.mrope.rope

    @property
    def inv_freq(self):
        """float64 [rotary_dim / 2]: the inverse frequencies."""
        return torch.tensor(self.mrope.rope.inv_freq, dtype=torch.float64)

    def forward(self, q, k=None, position_ids=None, *, qkv_format=None):
        """Rotates q (and k) by the module's M-RoPE; differentiable (``apply_mrope``).

        Args:
            q: the queries: float32, float64, bfloat16 or float16.
            k: the keys, of q's dtype; None rotates q alone.
            position_ids: Hugging Face's int64 [3, batch, tokens] (``get_rope_index``), or
                [batch, tokens] for text (the same position in each stream: then M-RoPE is 1-D
                RoPE exactly), or None for 0 .. tokens - 1 in every stream.
            qkv_format: "bshd" or "bhsd"; None: the module's (one of them is required).

        Shapes:
            q: [..., tokens, heads, head_dim] for "bshd"; [..., heads, tokens, head_dim] for
                "bhsd".
            k: [..., tokens, kv_heads, head_dim] for "bshd"; [..., kv_heads, tokens, head_dim]
                for "bhsd".

        Returns:
            q_rot, or (q_rot, k_rot) when k is given, of the inputs' shapes and dtype.

        Raises:
            posenc.Error: as ``apply_mrope``, or no qkv_format here nor on the module.
        """
        return _rotate_with(_module_mrope, self, q, k, position_ids, qkv_format)

    def extra_repr(self):
        """The module's line in ``print(model)``: its ``posenc.MRope`` and qkv_format when set.

        Returns:
            str.
        """
        text = repr(self.mrope)
        if self.qkv_format is not None:
            text += f", qkv_format={self.qkv_format!r}"
        return text


_VISION_KINDS = {
    "qwen2_vl": _core.MRope.qwen_vision,
    "qwen2_5_vl": _core.MRope.qwen_vision,
    "qwen3_vl": _core.MRope.qwen_vision,
    "pixtral": _core.MRope.pixtral,
    "llama4": _core.MRope.llama4_vision,
}


class VisionRotaryEmbedding(torch.nn.Module):
    """The 2-D RoPE of a vision tower as a module: ``forward(q, k=None, positions=None)`` ->
    q_rot, or (q_rot, k_rot) when k is given; and ``positions(...)``, the patch positions the
    tower rotates by.

    Two streams, patch row and patch column, each over half the pairs (posenc/mrope.h).
    Autograd: the backward pass is the inverse rotation. The module has no parameters.

    Args:
        kind: "qwen2_vl", "qwen2_5_vl", "qwen3_vl" (the Qwen towers: pairs [0, head_dim / 4) by
            the patch row, the rest by the column, at theta^(-2j / (head_dim / 2))), "pixtral"
            (rows at the even, columns at the odd frequencies of theta^(-2j / head_dim)) or
            "llama4" (interleaved pairs; positions (column + 1, row + 1), the class token
            (0, 0)); required unless mrope is given.
        head_dim: the tower's head width, a multiple of 4.
        theta: the base of the frequencies.
        mrope: a ready ``posenc.MRope``; head_dim and theta are then not read (kind still picks
            the order of ``positions``).
        spatial_merge_size: s of the Qwen towers' spatial merge (s x s patches form one merged
            token), for ``positions`` and ``window_order``.
        window_units: Qwen2.5-VL's windows, window_units x window_units merged tokens
            (window_size / s / patch_size: 112 / 2 / 14 = 4), for ``positions`` and
            ``window_order``.
        patches_per_side: Llama 4's patches per image side, for ``positions``; None: not
            known.

    Raises:
        posenc.Error: a bad kind, size or mrope, named.
    """

    def __init__(
        self,
        kind=None,
        head_dim=None,
        theta=10000.0,
        *,
        mrope=None,
        spatial_merge_size=2,
        window_units=4,
        patches_per_side=None,
    ):
        super().__init__()
        if mrope is None:
            if kind not in _VISION_KINDS:
                raise _error(
                    "mrope",
                    "kind",
                    "be one of " + ", ".join(repr(k) for k in _VISION_KINDS),
                    repr(kind),
                )
            _check_int("mrope", "head_dim", head_dim)
            _check_number("mrope", "theta", theta)
            mrope = _VISION_KINDS[kind](head_dim, float(theta))
        _check_instance("mrope", "mrope", mrope, _core.MRope, "a posenc.MRope")
        _check_int("mrope", "spatial_merge_size", spatial_merge_size, True)
        _check_int("mrope", "window_units", window_units, True)
        _check_int("mrope", "patches_per_side", patches_per_side, True)
        self.kind = kind
        self.mrope = mrope
        self.spatial_merge_size = spatial_merge_size
        self.window_units = window_units
        self.patches_per_side = patches_per_side

    @classmethod
    def from_hf_config(cls, config):
        """The vision tower of a Hugging Face config: Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Pixtral
        (llava / mistral3) or Llama 4 (``posenc.vision_rope_from_hf_config``), with its patch
        grid (spatial_merge_size, window_units, patches_per_side).

        Args:
            config: a dict, its JSON text or a config.json path (or a transformers
                ``PretrainedConfig``).

        Returns:
            A ``VisionRotaryEmbedding``.

        Raises:
            posenc.Error: a config without such a tower.
        """
        mrope = vision_rope_from_hf_config(config)
        tower = model_positions(config).vision_rope
        return cls(
            tower["kind"],
            mrope=mrope,
            spatial_merge_size=tower["spatial_merge_size"],
            window_units=tower["window_units"],
            patches_per_side=tower["patches_per_side"],
        )

    def positions(self, grids=None, *, window_order=None):
        """The patch positions the tower rotates by, in its token order.

        Qwen kinds: patches in merge-block order, and for "qwen2_5_vl" in window order.
        "pixtral": row-major per image, images one after another. "llama4": the
        patches_per_side^2 patches, then the class token.

        Args:
            grids: Qwen kinds: image_grid_thw or video_grid_thw, int [n, 3] rows (t, h, w);
                "pixtral": [n, 2] rows (patch rows, patch columns) per image; "llama4": None (no
                grids).
            window_order: Qwen kinds: True for Qwen2.5-VL's window order, False for
                rot_pos_emb's order; None: window order for "qwen2_5_vl" only.

        Returns:
            int64 [2, tokens]: stream 0 and stream 1 of each patch.

        Raises:
            posenc.Error: grids of the wrong form for the kind, or "llama4" without
                patches_per_side.
        """
        kind = self.kind
        if kind == "llama4":
            if grids is not None or self.patches_per_side is None:
                raise _error(
                    "mrope",
                    "grids",
                    "be None for llama4 (its tower has patches_per_side^2 "
                    "patches, from the config)",
                    "a grid" if grids is not None else "no patches_per_side",
                )
            out = _core.llama4_vision_positions(self.patches_per_side)
        elif kind == "pixtral":
            out = _core.pixtral_vision_positions(_int_tensor_numpy("mrope", "grids", grids))
        elif kind in ("qwen2_vl", "qwen2_5_vl", "qwen3_vl"):
            grid = _int_tensor_numpy("mrope", "grids", grids)
            windows = kind == "qwen2_5_vl" if window_order is None else window_order
            _check_int("mrope", "spatial_merge_size", self.spatial_merge_size)
            if windows:
                _check_int("mrope", "window_units", self.window_units)
                out = _core.qwen_vision_positions_in_window_order(
                    grid, self.spatial_merge_size, self.window_units
                )
            else:
                out = _core.qwen_vision_positions(grid, self.spatial_merge_size)
        else:
            raise _error(
                "mrope",
                "kind",
                "be one of " + ", ".join(repr(k) for k in _VISION_KINDS) + " for positions",
                repr(kind),
            )
        return torch.from_numpy(out)

    def window_order(self, grids):
        """Qwen2.5-VL's window order, as its get_window_index gives it (without repeated
        offsets): merged token window_index[k] goes to slot k, and window attention stays inside
        each range of cu_window_seqlens.

        Args:
            grids: image_grid_thw or video_grid_thw, int [n, 3] rows (t, h, w).

        Returns:
            (window_index, cu_window_seqlens), int64 tensors.

        Raises:
            posenc.Error: bad grids, spatial_merge_size or window_units.
        """
        index, offsets = _core.qwen_vision_window_order(
            _int_tensor_numpy("mrope", "grids", grids),
            self.spatial_merge_size,
            self.window_units,
        )
        return torch.from_numpy(index), torch.from_numpy(offsets)

    def forward(self, q, k=None, positions=None):
        """Rotates q (and k) by the tower's 2-D RoPE at the patch positions; differentiable.

        Args:
            q: the queries, CPU float32, bfloat16, float16 or float64.
            k: the keys, of q's dtype; None rotates q alone.
            positions: int64 [2, tokens] (stream 0, stream 1 of each patch; shared by the batch)
                or [2, batch, tokens] (``positions`` gives them); required (None is refused).

        Shapes:
            q: [tokens, heads, head_dim] (as the Qwen towers hold them) or [batch, tokens,
                heads, head_dim].
            k: as q, with its own heads.

        Returns:
            q_rot, or (q_rot, k_rot) when k is given, of the inputs' shapes and dtype.

        Raises:
            posenc.Error: a bad tensor or positions (shape, dtype, range), named.
        """
        return _rotate_with(_module_vision_rope, self, q, k, positions)

    def extra_repr(self):
        """The module's line in ``print(model)``: its kind and ``posenc.MRope``.

        Returns:
            str.
        """
        return (f"kind={self.kind!r}, " if self.kind else "") + repr(self.mrope)


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
    """Hugging Face's Qwen-VL ``get_rope_index`` on CPU tensors, with Hugging Face's values
    (``posenc.get_rope_index`` on numpy arrays).

    Text tokens count on in all three streams; image and video tokens carry (frame, row, column)
    of their grid. position_ids goes straight into ``MultimodalRotaryEmbedding``.

    Args:
        config: a Qwen2-VL, Qwen2.5-VL or Qwen3-VL config (a dict, its JSON text or a
            config.json path) or a ``posenc.QwenVlTokens``.
        input_ids: int [batch, seq_len].
        image_grid_thw: int [n, 3] rows (t, h, w) of the images; None: no images.
        video_grid_thw: int [n, 3] rows (t, h, w) of the videos; None: no videos.
        second_per_grid_ts: [videos], float32 as the Qwen2.5-VL processor gives it; None: none.
        attention_mask: [batch, seq_len] of 0 and 1 (int or bool); None: every token.
        rules: the video numbering (``posenc.MropeIndexRules`` or its name, e.g.
            "qwen2_5_vl_int_seconds"); None: the config's model as released.

    Returns:
        (position_ids, rope_deltas): int64 [3, batch, seq_len] and int64 [batch, 1].

    Raises:
        posenc.Error: a bad config, tensor or rule, named.
    """
    fn = "mrope_index"
    seconds = second_per_grid_ts
    if isinstance(seconds, torch.Tensor):
        _check_cpu(fn, "second_per_grid_ts", seconds)
        seconds = seconds.detach().numpy()
    positions, deltas = _numpy_get_rope_index(
        config,
        _int_tensor_numpy(fn, "input_ids", input_ids),
        _int_tensor_numpy(fn, "image_grid_thw", image_grid_thw),
        _int_tensor_numpy(fn, "video_grid_thw", video_grid_thw),
        seconds,
        _int_tensor_numpy(fn, "attention_mask", attention_mask),
        rules=rules,
    )
    return torch.from_numpy(positions), torch.from_numpy(deltas)
