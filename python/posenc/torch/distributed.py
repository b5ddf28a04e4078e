"""posenc.torch.distributed: context-parallel (ring) attention over a
torch.distributed process group.

A long sequence is cut into shards, one per rank; each rank holds q, k and v
of its own tokens and their GLOBAL positions. ``context_parallel_attention``
passes the K/V blocks around the ring (the next block travels while the
current one is attended) and merges the partial outputs by their
log-sum-exp, so every rank ends with the exact attention of its queries over
the whole sequence. Every position rule reads the global positions: RoPE
rotates by them, ALiBi biases by global distances, causal and window masks
follow global order. The backward pass runs the ring again: dq accumulates
locally, and the other ranks' shares of each block's dk and dv travel with
the block, summed on the way, until they reach its owner (a fixed summation
order: the same bits on every run).

Soft-capping applies to every block's scores. An attention sink is one more
term of each row's softmax denominator, not of any block: it joins the rank's
own block only (the first step of the ring), whose log-sum-exp then carries
it through the merge, so that it is counted once per row, not once per rank.

``shard_positions`` gives the global positions a rank holds: "zigzag" (rank r
holds chunks r and 2 * world - 1 - r of 2 * world, so that causal work is
balanced across ranks) or "contiguous".

Example (torchrun --nproc_per_node 2 script.py, gloo on CPU)::

    import torch, torch.distributed as dist
    import posenc.torch as pt

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    pos = pt.distributed.shard_positions(4096, world, rank)       # [2048]
    q = torch.randn(len(pos), 8, 64, requires_grad=True)         # this rank's shard
    k = torch.randn(len(pos), 8, 64, requires_grad=True)
    v = torch.randn(len(pos), 8, 64, requires_grad=True)
    out = pt.distributed.context_parallel_attention(q, k, v, pos, causal=True, qkv_format="bshd")
    out.sum().backward()
"""

import time

import torch
import torch.distributed as dist
from torch.autograd.function import once_differentiable

from posenc import _core
from posenc.torch._tensors import (
    _check_cpu,
    _check_positions,
    _check_tensor,
    _dtype_name,
    _empty,
    _error,
    _item_size,
    _numpy,
    _qkv_format,
    _tokens_first,
)
from posenc.torch.attention import (
    _ATTENTION_DTYPES,
    _check_options,
    _check_softcap_sinks,
    _kernel_options,
)

__all__ = ["context_parallel_attention", "shard_positions"]

_FN = "context_parallel_attention"
_SCHEMES = ("zigzag", "contiguous")
# Message tags: K/V blocks and dk/dv accumulators travel between the same
# pair of ranks in the backward pass; the tags keep the two streams apart.
_TAG_KV = 11
_TAG_GRAD = 12


def _check_int(function, name, value, rule, ok):
    if isinstance(value, bool) or not isinstance(value, int):
        raise _error(function, name, "be an int", type(value).__name__)
    if not ok(value):
        raise _error(function, name, rule, value)


def shard_positions(seq_len, world, rank, scheme="zigzag"):
    """The global positions a rank holds when a sequence is split over the ranks of a group.

    "zigzag": the sequence is cut into 2 * world equal chunks and rank r holds chunks r and
    2 * world - 1 - r (an early and a late chunk: under a causal mask every rank then has the
    same work). "contiguous": rank r holds chunk r of world equal chunks. Add an offset for
    sequences that do not start at 0; the positions index the rank's rows of q, k and v.

    Args:
        seq_len: the tokens of the whole sequence, positions 0 .. seq_len - 1: a positive
            multiple of 2 * world ("zigzag") or of world ("contiguous"), seq_len - 1 <= 2^32.
        world: the number of ranks, an int >= 1.
        rank: this rank, an int in [0, world).
        scheme: "zigzag" or "contiguous".

    Returns:
        An int64 tensor [seq_len / world], the rank's global positions in increasing order.

    Raises:
        posenc.Error: a bad world, rank, scheme or seq_len, named.
    """
    fn = "shard_positions"
    _check_int(fn, "world", world, "be >= 1", lambda w: w >= 1)
    _check_int(fn, "rank", rank, f"be in [0, world) = [0, {world})", lambda r: 0 <= r < world)
    if scheme not in _SCHEMES:
        raise _error(fn, "scheme", "be 'zigzag' or 'contiguous'", repr(scheme))
    chunks = 2 * world if scheme == "zigzag" else world
    _check_int(
        fn,
        "seq_len",
        seq_len,
        f"be a positive multiple of {chunks} ({'2 * world' if scheme == 'zigzag' else 'world'}"
        f" for scheme {scheme!r}, world {world})",
        lambda n: n > 0 and n % chunks == 0,
    )
    # The positions every other API takes, within the size cap, before anything is allocated.
    _core.validate_positions(fn, seq_len - 1, "seq_len - 1")
    chunk = seq_len // chunks
    held = chunks // world  # chunks per rank: 2 for zigzag
    positions = _empty(fn, (held * chunk,), torch.int64, name="positions.shape")
    torch.arange(held * chunk, out=positions)
    positions += rank * chunk
    if scheme == "zigzag":  # the late chunk, 2 * world - 1 - rank
        positions[chunk:] += (2 * world - 2 - 2 * rank) * chunk
    return positions


class _Ring:
    """The ring of a process group: this rank, its neighbours as global ranks
    (isend/irecv address global ranks), and what the calls measured."""

    def __init__(self, group, stats):
        self.group = group
        self.rank = dist.get_rank(group)
        self.world = dist.get_world_size(group)
        self.next = self._global((self.rank + 1) % self.world)
        self.prev = self._global((self.rank - 1) % self.world)
        self.stats = stats

    def _global(self, group_rank):
        if self.group is None or self.group is dist.GroupMember.WORLD:
            return group_rank
        return dist.distributed_c10d._get_global_rank(self.group, group_rank)

    def send(self, tensor, tag):
        self._count("bytes_sent", tensor.numel() * tensor.element_size())
        return ("send", dist.isend(tensor, self.next, group=self.group, tag=tag))

    def recv(self, tensor, tag):
        return ("recv", dist.irecv(tensor, self.prev, group=self.group, tag=tag))

    def wait(self, requests, step, what):
        """Waits for the transfers; a peer that left (its sockets closed) or
        stalled past the group's timeout is an error naming the step and the
        neighbour, never a silent hang."""
        start = time.perf_counter()
        for kind, request in requests:
            try:
                request.wait()
            except RuntimeError as error:
                peer = f"to rank {self.next}" if kind == "send" else f"from rank {self.prev}"
                raise RuntimeError(
                    f"[{_FN}] ring step {step} of {self.world} on rank {self.rank}: "
                    f"{kind} of {what} {peer} failed: a rank of the group left or stalled "
                    f"past the group's timeout ({error})"
                ) from error
        self._count("wait_s", time.perf_counter() - start)

    def _count(self, key, amount):
        if self.stats is not None:
            self.stats[key] = self.stats.get(key, 0) + amount


def _pack(positions, k, v):
    """One uint8 buffer holding positions, k and v: one message per ring
    step instead of three. Positions come first so that every part starts at
    a multiple of its element size (the views back need that)."""
    parts = [t.contiguous().reshape(-1).view(torch.uint8) for t in (positions, k, v)]
    return torch.cat(parts)


def _unpack(buffer, layout):
    """Views of (positions, k, v) into a buffer made by _pack."""
    views, offset = [], 0
    for shape, dtype in layout:
        count = 1
        for n in shape:
            count *= n
        size = count * _item_size(dtype)
        views.append(buffer[offset : offset + size].view(dtype).view(shape))
        offset += size
    return views


def _layout(positions, k, v):
    return [(tuple(t.shape), t.dtype) for t in (positions, k, v)]


def _block_forward(q, k, v, qpos, kpos, options):
    """attention_forward of the local queries over one K/V block: (out, lse)
    float32 tensors, lse -inf for rows that see nothing of the block. A
    module-level function so that a test can make a rank fail mid-ring."""
    out, lse = _core.attention_forward(
        _numpy(q),
        _numpy(k),
        _numpy(v),
        qpos.numpy(),
        kpos.numpy(),
        bfloat16=q.dtype is torch.bfloat16,
        **options,
    )
    return torch.from_numpy(out), torch.from_numpy(lse)


def _block_backward(q, k, v, qpos, kpos, out, lse, d_out, options):
    """The block's exact share of the gradients: with the GLOBAL out and lse
    (the sink inside lse), P = exp(S - lse) is the block's slice of the global
    softmax, so dq is this block's term of the sum over keys and dk, dv are
    the local queries' terms of the block's gradients. With sinks in options,
    also d_sinks [heads], the local queries' -sum_i exp(sink - lse_i) (do_i .
    o_i), which reads only the global out and lse (None without sinks)."""
    dq, dk, dv, *d_sinks = _core.attention_backward(
        _numpy(q),
        _numpy(k),
        _numpy(v),
        qpos.numpy(),
        kpos.numpy(),
        out=out.numpy(),
        lse=lse.numpy(),
        d_out=d_out.numpy(),
        bfloat16=q.dtype is torch.bfloat16,
        **options,
    )
    d_sinks = torch.from_numpy(d_sinks[0]) if d_sinks else None
    return torch.from_numpy(dq), torch.from_numpy(dk), torch.from_numpy(dv), d_sinks


def _merge(out, lse, block_out, block_lse):
    """(out, lse) of the union of two disjoint key sets from each one's
    normalised output and log-sum-exp. Rows that saw no key in either keep
    lse -inf and out 0 (a plain logsumexp would give NaN weights there)."""
    top = torch.maximum(lse, block_lse)
    top = torch.where(torch.isinf(top), torch.zeros_like(top), top)
    a, b = torch.exp(lse - top), torch.exp(block_lse - top)
    total = a + b
    new_lse = top + torch.log(total)
    norm = torch.where(total > 0, total, torch.ones_like(total))
    new_out = (out * a.unsqueeze(-1) + block_out * b.unsqueeze(-1)) / norm.unsqueeze(-1)
    return new_out, new_lse


def _step_options(options, step):
    """The options of ring step `step`: the sinks join one block of each
    row's softmax, the rank's own (step 0), and no other."""
    return options if step == 0 else dict(options, sinks=None)


def _ring_forward(q, k, v, positions, ring, options):
    """out and lse of the local queries over all ranks' keys. Step s attends
    the block of rank (rank - s) mod world while the next one travels. The
    sinks go into step 0's log-sum-exp only: the merge keeps them in the sum
    of every later step, once."""
    layout = _layout(positions, k, v)
    current = _pack(positions, k, v)
    spare = torch.empty_like(current) if ring.world > 1 else None
    out = lse = None
    for step in range(ring.world):
        requests = []
        if step < ring.world - 1:
            requests = [ring.send(current, _TAG_KV), ring.recv(spare, _TAG_KV)]
        kpos, kb, vb = _unpack(current, layout)
        start = time.perf_counter()
        block_out, block_lse = _block_forward(
            q, kb, vb, positions, kpos, _step_options(options, step)
        )
        if out is None:
            out, lse = block_out, block_lse
        else:
            out, lse = _merge(out, lse, block_out, block_lse)
        ring._count("compute_s", time.perf_counter() - start)
        ring.wait(requests, step, "a K/V block")
        # The sent buffer is free once its send completed: it receives next.
        current, spare = spare, current
    return out, lse


def _ring_backward(q, k, v, positions, out, lse, d_out, ring, options):
    """(dq, dk, dv, d_sinks) of the local shard. The K/V blocks go round as
    in the forward pass. The owner keeps its own queries' share of its
    block's dk and dv; from the next rank on, the block carries a float32
    accumulator to which each rank adds its share (in ring order: a fixed
    summation order) and which reaches the owner after the last step: world
    - 1 hops, a ring reduce-scatter's minimum. d_sinks (None without sinks):
    the local queries' share, formed once, at step 0."""
    layout = _layout(positions, k, v)
    current = _pack(positions, k, v)
    spare = torch.empty_like(current) if ring.world > 1 else None
    kv_numel = k.numel() + v.numel()
    dq = own = d_sinks = None
    grad_in = None  # the pending receive of the next block's accumulator
    sends = []
    for step in range(ring.world):
        requests = []
        if step < ring.world - 1:
            requests = [ring.send(current, _TAG_KV), ring.recv(spare, _TAG_KV)]
        kpos, kb, vb = _unpack(current, layout)
        start = time.perf_counter()
        dq_b, dk_b, dv_b, d_sinks_b = _block_backward(
            q, kb, vb, positions, kpos, out, lse, d_out, _step_options(options, step)
        )
        if step == 0:
            d_sinks = d_sinks_b
        dq = dq_b if dq is None else dq + dq_b
        share = torch.cat([dk_b.reshape(-1), dv_b.reshape(-1)])
        ring._count("compute_s", time.perf_counter() - start)
        if step == 0:
            own = share
        else:
            accumulator = share
            if step > 1:
                ring.wait([grad_in[0]], step, "a dk/dv accumulator")
                start = time.perf_counter()
                accumulator = grad_in[1] + share  # the upstream sum first: a fixed order
                ring._count("compute_s", time.perf_counter() - start)
            # At most one accumulator in flight: holding every sent one until the end
            # would cost world - 1 float32 shards of memory.
            ring.wait(sends, step, "a dk/dv accumulator")
            sends = [ring.send(accumulator, _TAG_GRAD)]
            buffer = torch.empty(kv_numel, dtype=torch.float32)
            grad_in = (ring.recv(buffer, _TAG_GRAD), buffer)
        ring.wait(requests, step, "a K/V block")
        current, spare = spare, current
    if ring.world > 1:
        # The other ranks' shares of this rank's block arrive, summed, from the previous rank.
        ring.wait([grad_in[0]] + sends, ring.world, "a dk/dv accumulator")
        own = own + grad_in[1]
    dk = own[: k.numel()].view(k.shape)
    dv = own[k.numel() :].view(v.shape)
    return dq, dk, dv, d_sinks


class _RingAttention(torch.autograd.Function):
    """Ring attention with its ring backward pass; q, k, v tokens-first
    [..., tokens, heads, dim] CPU views, out float32. sinks: None or the
    tensor [heads] whose gradient is this rank's share (its queries' terms);
    options hold their float32 copy for the kernel."""

    @staticmethod
    def forward(ctx, q, k, v, positions, sinks, ring, options):
        out, lse = _ring_forward(q, k, v, positions, ring, options)
        # The merged float32 out and the global lse: the backward pass's
        # P = exp(S - lse) then matches the forward pass exactly.
        ctx.save_for_backward(q, k, v, positions, out, lse)
        ctx.ring, ctx.options = ring, options
        ctx.sinks_dtype = None if sinks is None else sinks.dtype
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, d_out):
        q, k, v, positions, out, lse = ctx.saved_tensors
        d_out = d_out.to(torch.float32).contiguous()
        dq, dk, dv, d_sinks = _ring_backward(
            q, k, v, positions, out, lse, d_out, ctx.ring, ctx.options
        )
        if d_sinks is not None:
            d_sinks = d_sinks.to(ctx.sinks_dtype)
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, d_sinks, None, None


def _check_inputs(q, k, v, positions, qkv_format):
    for name, tensor in (("q", q), ("k", k), ("v", v)):
        _check_cpu(_FN, name, tensor)
        _check_tensor(_FN, name, tensor, _ATTENTION_DTYPES)
    if not (q.dtype == k.dtype == v.dtype):
        raise _error(
            _FN,
            "k and v",
            f"have q's dtype ({_dtype_name(q.dtype)})",
            f"{_dtype_name(k.dtype)} and {_dtype_name(v.dtype)}",
        )
    views = []
    for name, tensor in (("q", q), ("k", k), ("v", v)):
        if tensor.dim() not in (3, 4):
            layout = "[tokens, heads, dim] or [batch, tokens, heads, dim]"
            if qkv_format == "bhsd":
                layout = "[heads, tokens, dim] or [batch, heads, tokens, dim]"
            raise _error(_FN, f"{name}.shape", f"be {layout}", tuple(tensor.shape))
        views.append(_tokens_first(_FN, name, tensor, qkv_format))
    if not isinstance(positions, torch.Tensor):
        raise _error(_FN, "positions", "be a torch.Tensor", type(positions).__name__)
    if positions.dtype != torch.int64 or positions.dim() != 1 or not positions.is_cpu:
        raise _error(
            _FN,
            "positions",
            "be a 1-D int64 CPU tensor (the shard's global positions)",
            f"{_dtype_name(positions.dtype)} {tuple(positions.shape)} on {positions.device}",
        )
    for name, view in zip(("q", "k", "v"), views):
        if view.shape[-3] != positions.shape[0]:
            raise _error(
                _FN,
                f"{name}.shape",
                f"have len(positions) = {positions.shape[0]} tokens (one shard holds q, k "
                "and v of the same tokens)",
                tuple(view.shape),
            )
    return views


def _agree(ring, q, k, v, positions, sinks):
    """Every rank must send blocks of one shape and dtype (the receives are
    sized from the local block) and hold positions within the position rule
    and finite sinks; one small all_gather checks them before the ring
    starts, so that every rank raises together (none is left waiting in the
    ring), and gives the global largest position (a length-dependent RoPE
    rule reads it)."""
    # A fixed length (shapes padded to 4 dims with -1): all_gather needs equal sizes.
    dims = [q.dim()]
    for t in (q, k, v):
        dims += [-1] * (4 - t.dim()) + list(t.shape)
    finite_sinks = sinks is None or bool(torch.isfinite(sinks).all())
    valid = bool(((positions >= 0) & (positions <= _core.MAX_POSITION)).all())
    largest = int(positions.max()) if len(positions) else -1
    info = torch.tensor(
        dims + [_ATTENTION_DTYPES.index(q.dtype), finite_sinks, valid, largest],
        dtype=torch.int64,
    )
    gathered = [torch.empty_like(info) for _ in range(ring.world)]
    dist.all_gather(gathered, info, group=ring.group)
    for rank, other in enumerate(gathered):
        if not torch.equal(other[:-3], info[:-3]):
            raise _error(
                _FN,
                "q, k, v",
                f"have the same shapes and dtype on every rank of the group (rank {rank}: "
                f"{other[:-3].tolist()}, this rank {ring.rank}: {info[:-3].tolist()} as "
                "[q.dim(), q.shape, k.shape, v.shape (each padded to 4 dims by -1), dtype])",
                "different shards",
            )
    for name, column, rule, got in (
        ("sinks", -3, "be finite", "non-finite sinks"),
        ("positions", -2, "be in [0, 2^32] (kMaxPosition)", "positions outside"),
    ):
        invalid = [rank for rank, other in enumerate(gathered) if not other[column]]
        if not invalid:
            continue
        # The rank holding a bad value names it as every other API does.
        if name == "positions":
            _check_positions(_FN, positions)
        elif not info[column]:
            head = int(torch.nonzero(~torch.isfinite(sinks))[0])
            raise _error(_FN, f"sinks[{head}]", "be finite", float(sinks[head]))
        raise _error(
            _FN,
            name,
            f"{rule} on every rank of the group",
            f"{got} on rank {', '.join(map(str, invalid))}",
        )
    return max(int(other[-1]) for other in gathered)


def context_parallel_attention(
    q,
    k,
    v,
    positions,
    group=None,
    *,
    causal=False,
    alibi=None,
    rope=None,
    window=0,
    scale=None,
    softcap=0.0,
    sinks=None,
    qkv_format=None,
    stats=None,
):
    """Attention of this rank's queries over the keys of every rank of ``group``, by ring
    attention.

    Every rank holds its shard's q, k and v and their global positions; the K/V blocks travel
    round the ring and the partial outputs merge by their log-sum-exp, so each rank gets the
    exact attention of its queries over the whole sequence. Every position rule reads the global
    positions. All ranks must call it together, with the same shapes and options; a rank that
    leaves mid-ring makes the others raise RuntimeError (at the latest after the group's
    timeout). Autograd records through it: the backward pass runs the ring again (a collective
    call: every rank must call backward).

    Args:
        q: this rank's queries: float32 or bfloat16, on the CPU.
        k: this rank's keys, of q's dtype; grouped heads as ``posenc.torch.attention``.
        v: this rank's values, of q's dtype.
        positions: int64 [tokens] on the CPU: the shard's global positions
            (``shard_positions``), each in [0, 2^32].
        group: the torch.distributed process group; None: the default one.
        causal: as ``posenc.torch.attention``, at the global positions.
        alibi: a ``posenc.Alibi`` as ``posenc.torch.attention``, at global distances.
        rope: a ``posenc.Rope`` or a ``RotaryEmbedding`` (a length-dependent rule reads the
            global largest position), rotating q and k at their global positions.
        window: a sliding window as ``posenc.torch.attention``, in global order; 0: none.
        scale: the score scale; None: 1 / sqrt(head_dim).
        softcap: soft-capping as ``posenc.torch.attention``, applied to every block's scores;
            0: off.
        sinks: a floating tensor [heads], one logit per query head in every row's softmax
            denominator, counted once per row however many ranks hold keys (it joins the
            rank's own block only, at the ring's first step). Its gradient on each rank is that
            rank's queries' share, as for any weight that every rank of the group holds: the sum
            over the group's ranks (the data-parallel reduction of the model's other weights) is
            the whole sequence's gradient. None: none.
        qkv_format: "bshd" as the shapes below, or "bhsd" (heads before tokens, in and out);
            required, no default.
        stats: a dict to which the call adds compute_s (kernel and merge time), wait_s (time
            blocked on transfers) and bytes_sent, forward and backward; None: nothing counted.

    Shapes:
        q: [tokens, heads, head_dim] or [batch, tokens, heads, head_dim] ("bhsd": heads before
            tokens); the same on every rank.
        k: [(batch,) tokens, kv_heads, head_dim], heads a multiple of kv_heads.
        v: [(batch,) tokens, kv_heads, value_dim].

    Returns:
        This shard's output [(batch,) tokens, heads, value_dim] ("bhsd": heads before tokens)
        in q's dtype (computed in float32).

    Raises:
        posenc.Error: a bad argument, named, or no initialized process group. Shapes, dtype,
            positions and sinks are compared across the group before the ring starts, so that
            every rank raises together.
        RuntimeError: a rank of the group left or stalled past the group's timeout, naming the
            ring step and the neighbour.
    """
    qkv_format = _qkv_format(_FN, qkv_format)
    q_view, k_view, v_view = _check_inputs(q, k, v, positions, qkv_format)
    _check_options(scale, window, alibi, rope, causal, function=_FN)
    _check_softcap_sinks(softcap, sinks, q, q_view.shape[-2], function=_FN)
    if not (dist.is_available() and dist.is_initialized()):
        raise _error(
            _FN,
            "group",
            "belong to an initialized torch.distributed process group "
            "(call torch.distributed.init_process_group first)",
            "none initialized",
        )
    ring = _Ring(group, stats)
    largest = _agree(ring, q_view, k_view, v_view, positions, sinks)
    if rope is not None and not isinstance(rope, _core.Rope):
        rope = rope.rope_at(torch.tensor([max(largest, 0)], dtype=torch.int64))
    options = _kernel_options(
        dict(
            causal=causal,
            alibi=alibi,
            rope=rope,
            window=window,
            scale=scale,
            softcap=float(softcap),
            sinks=sinks,
        )
    )
    out = _RingAttention.apply(q_view, k_view, v_view, positions, sinks, ring, options)
    if qkv_format == "bhsd":
        out = out.transpose(-2, -3)
    return out if q.dtype is torch.float32 else out.to(q.dtype)
