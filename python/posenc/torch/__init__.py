"""posenc.torch: posenc for PyTorch tensors, thin over the C++ library.

Plain CPU tensors are handed to the library as numpy views of their own memory
(no copies where the layout allows): float32, bfloat16 and float16 (the
library's kernels: float32 arithmetic, one rounding to the storage type) and
float64 (a double-precision twin of the reference, which makes
``torch.autograd.gradcheck`` meaningful). RoPE, M-RoPE and attention also run
on any other tensor (CUDA, meta, FakeTensor) through the same definitions in
PyTorch operations (posenc._torch_reference; docs/PYTHON.md says which path
runs where). A bad argument raises ``posenc.Error`` (a ``ValueError``).
Activations are posenc's [..., tokens, heads, head_dim] (``qkv_format="bshd"``)
or Hugging Face's [..., heads, tokens, head_dim] (``qkv_format="bhsd"``); every
call that takes them says which (there is no default: a [b, 8, 8, d] tensor
reads either way).

Modules and functions: ``RotaryEmbedding`` (``from_hf_config(config,
layer=i)`` for a model's layer i; a NoPE layer is an error),
``SinusoidalPositions``, ``LearnedPositions``, ``apply_rope`` (and in place,
``apply_rope_``), ``rope_cos_sin`` (Hugging Face's cos and sin tables),
``attention``, ``self_extend_attention`` and ``dual_chunk_attention`` (two
ways to read past the trained context), and the biases added to the attention
scores: ``alibi_slopes`` and ``alibi_bias`` (ALiBi's fixed linear bias) and
``RelativePositionBias`` (T5's learned bias: buckets of key - query position
from posenc, a trainable [num_buckets, num_heads] table looked up in torch).
Multimodal RoPE: ``MultimodalRotaryEmbedding`` (Qwen-VL's M-RoPE,
``from_hf_config``, called with Hugging Face's position_ids [3, batch, seq]),
``VisionRotaryEmbedding`` (the 2-D RoPE of vision towers), ``apply_mrope`` and
``get_rope_index`` (Qwen-VL's positions and rope deltas). ``KVCache``: one
layer's KV cache for a decode loop (keys rotated once on append; context
shifts and attention sinks); ``KVCacheBatch``: a batch of sequences of
different lengths. ``posenc.torch.distributed``: context-parallel (ring)
attention over a torch.distributed process group.

Each public call's docstring lists its arguments (Args), tensor shapes
(Shapes), result (Returns) and errors (Raises): ``help(posenc.torch.attention)``.

Example::

    import torch
    import posenc.torch as pt

    rope = pt.RotaryEmbedding(head_dim=64, qkv_format="bshd")
    # [batch, tokens, heads, head_dim]
    q = torch.randn(2, 16, 8, 64, requires_grad=True)
    k = torch.randn(2, 16, 2, 64, requires_grad=True)   # fewer kv heads (GQA)
    q_rot, k_rot = rope(q, k)                             # positions 0 .. 15
    (q_rot * k_rot.repeat_interleave(4, dim=2)).sum().backward()
"""

import torch
import torch.fx

# posenc.torch is tested on the pinned torch 2 of python/requirements.txt; 2.4 is the oldest
# release with the torch.library custom-op API (posenc.torch._ops) that torch.compile needs.
_REQUIRED_TORCH = (2, 4)
if tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2]) < _REQUIRED_TORCH:
    raise ImportError(
        "posenc.torch requires torch >= 2.4 (tested with the pins of python/requirements.txt); "
        f"the installed torch is {torch.__version__}"
    )

import posenc._arguments
from posenc import rope_from_hf_config
from posenc.torch import distributed
from posenc.torch.absolute import LearnedPositions, SinusoidalPositions

# The name `attention` is the function: binding it replaces the package attribute that importing
# the module posenc.torch.attention set (the module itself stays in sys.modules).
from posenc.torch.attention import attention, dual_chunk_attention, self_extend_attention
from posenc.torch.biases import RelativePositionBias, alibi_bias, alibi_slopes
from posenc.torch.kv_cache import KVCache, KVCacheBatch
from posenc.torch.mrope import (
    MultimodalRotaryEmbedding,
    VisionRotaryEmbedding,
    apply_mrope,
    get_rope_index,
)
from posenc.torch.rope import RotaryEmbedding, apply_rope, apply_rope_, rope_cos_sin

__all__ = [
    "KVCache",
    "KVCacheBatch",
    "LearnedPositions",
    "MultimodalRotaryEmbedding",
    "RelativePositionBias",
    "RotaryEmbedding",
    "SinusoidalPositions",
    "VisionRotaryEmbedding",
    "alibi_bias",
    "alibi_slopes",
    "apply_mrope",
    "apply_rope",
    "apply_rope_",
    "attention",
    "distributed",
    "dual_chunk_attention",
    "get_rope_index",
    "rope_cos_sin",
    "rope_from_hf_config",
    "self_extend_attention",
]

# torch.fx records calls through this package's names (pt.attention(...)) as one node each; the
# defining modules wrap their own names for the calls made inside them.
torch.fx.wrap("attention")
torch.fx.wrap("self_extend_attention")
torch.fx.wrap("dual_chunk_attention")

# posenc's classes check that an instance was constructed (posenc/_arguments.py) through a
# binding, which Dynamo cannot trace into; the answer cannot change while a graph runs.
torch.compiler.assume_constant_result(posenc._arguments._constructed)
