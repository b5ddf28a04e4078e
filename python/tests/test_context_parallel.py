"""posenc.torch.distributed: ring attention over gloo on loopback against
single-process posenc.torch.attention over the whole sequence (soft-capping
and attention sinks included), and a rank that dies mid-ring. Nothing here
depends on how long a step takes: the ranks' waits are bounded only by the
process group's timeout, a guard against a hang, never reached by a run that
works."""

import datetime
import os
import queue
import socket
import time
import traceback

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)

import posenc  # noqa: E402
import posenc.torch as pt  # noqa: E402
import posenc.torch.distributed as cp  # noqa: E402

T = 48  # a multiple of 2 * world for world 1, 2 and 4 (zigzag needs that)
HEADS, KV_HEADS, DIM = 4, 2, 16
OFFSET = 5  # global positions start here: nothing may assume they start at 0
ROPE = posenc.Rope.default(DIM, 500.0)

CASES = {
    "causal": dict(causal=True),
    "causal_alibi": dict(causal=True, alibi=posenc.Alibi(HEADS)),
    "causal_rope": dict(causal=True, rope=ROPE),
    "causal_window_alibi_rope": dict(
        causal=True, window=7, alibi=posenc.Alibi(HEADS), rope=ROPE, scale=0.3
    ),
    "full_rope_batched": dict(rope=ROPE, batch=2),
    "window_not_causal": dict(window=5),
    "bfloat16_causal_alibi": dict(causal=True, alibi=posenc.Alibi(HEADS), dtype=torch.bfloat16),
    "rope_module_bhsd": dict(
        causal=True,
        rope=pt.RotaryEmbedding(DIM, layout="interleaved", qkv_format="bshd"),
        qkv_format="bhsd",
    ),
}
# Ring attention with soft-capping and sinks (a tensor of the given dtype, drawn from the seed):
# the sinks count once per row whatever the number of ranks, and each rank's gradient of them is
# its queries' share.
SOFTCAP_SINKS_CASES = {
    "softcap_causal": dict(causal=True, softcap=1.5),
    "sinks_causal": dict(causal=True, sinks=torch.float32),
    "softcap_sinks_window_alibi_rope": dict(
        causal=True,
        window=7,
        alibi=posenc.Alibi(HEADS),
        rope=ROPE,
        scale=0.3,
        softcap=0.8,
        sinks=torch.float32,
    ),
    "sinks_float64_full_batched_bhsd": dict(
        sinks=torch.float64, softcap=2.0, batch=2, qkv_format="bhsd"
    ),
    "bfloat16_sinks_causal_alibi": dict(
        causal=True, alibi=posenc.Alibi(HEADS), sinks=torch.float32, dtype=torch.bfloat16
    ),
}
TABLES = {"base": CASES, "softcap_sinks": SOFTCAP_SINKS_CASES}
# The process group's timeout: a rank whose peer hangs raises after it. A guard, not a measure:
# spawning the ranks and the ring itself may take long on a busy machine.
TIMEOUT_S = 600


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def full_inputs(case, seed):
    """q, k, v and the output gradient of the whole sequence, the same on
    every rank (a fixed seed)."""
    g = torch.Generator().manual_seed(seed)
    batch = (case["batch"],) if "batch" in case else ()
    q = torch.randn(*batch, T, HEADS, DIM, generator=g)
    k = torch.randn(*batch, T, KV_HEADS, DIM, generator=g)
    v = torch.randn(*batch, T, KV_HEADS, DIM, generator=g)
    d_out = torch.randn(*batch, T, HEADS, DIM, generator=g)
    dtype = case.get("dtype", torch.float32)
    sinks = None
    if "sinks" in case:  # about the scores' size, so that the sinks take a real share
        sinks = (torch.randn(HEADS, generator=g) * 2).to(case["sinks"])
    return q.to(dtype), k.to(dtype), v.to(dtype), d_out.to(dtype), sinks


def options_of(case):
    options = {key: value for key, value in case.items() if key not in ("batch", "dtype", "sinks")}
    return dict({"qkv_format": "bshd"}, **options)


def tokens_dim(case):
    return 1 if "batch" in case else 0


def to_format(t, case):
    return t.transpose(-2, -3) if case.get("qkv_format") == "bhsd" else t


def gather_sinks_grads(grad, world):
    """Every rank's gradient of the sinks (its queries' share), in float64 (exact)."""
    shares = [torch.empty_like(grad, dtype=torch.float64) for _ in range(world)]
    dist.all_gather(shares, grad.double())
    return shares


def sink_term_sizes(q, k, v, d_out, out, sinks, case, held):
    """Per head, the sum over the queries held (token indices) of the size
    of their terms of d sinks, p_sink |d_out . out|: the scale of float32's
    rounding in such a sum (its terms cancel: the sum itself can be far
    smaller). The sink's softmax weight p_sink is 1 minus the keys' weight,
    the output of attention with every value 1."""
    ones = torch.ones_like(to_format(v, case))
    positions = torch.arange(T, dtype=torch.int64) + OFFSET
    keys = pt.attention(
        to_format(q, case),
        to_format(k, case),
        ones,
        positions,
        positions,
        sinks=sinks,
        **options_of(case),
    )
    p_sink = 1 - to_format(keys, case)[..., 0].double()
    sizes = p_sink * (d_out.double() * out.double()).sum(-1).abs()
    return sizes.index_select(tokens_dim(case), held).reshape(-1, HEADS).sum(0)


def run_case(name, case, scheme, rank, world, seed):
    """This rank's shard through the ring, forward and backward; on rank 0
    the gathered results against the single-process attention: the largest
    differences relative to each tensor's scale."""
    q, k, v, d_out, sinks = full_inputs(case, seed)
    index = cp.shard_positions(T, world, rank, scheme)
    dim = tokens_dim(case)
    shard = [to_format(t.index_select(dim, index), case) for t in (q, k, v, d_out)]
    qs, ks, vs = (t.clone().requires_grad_() for t in shard[:3])
    sinks_here = None if sinks is None else sinks.clone().requires_grad_()
    out = cp.context_parallel_attention(
        qs, ks, vs, index + OFFSET, sinks=sinks_here, **options_of(case)
    )
    out.backward(shard[3])
    results = [out.detach(), qs.grad, ks.grad, vs.grad]
    assert all(t.dtype == q.dtype for t in results), [t.dtype for t in results]
    shares = None
    if sinks is not None:
        assert sinks_here.grad.dtype == sinks.dtype, sinks_here.grad.dtype
        shares = gather_sinks_grads(sinks_here.grad, world)
    # Back to tokens-first; float32 (exact for bfloat16), which gloo's all_gather takes.
    results = [to_format(t, case).float().contiguous() for t in results]
    gathered = []
    for t in results:
        parts = [torch.empty_like(t) for _ in range(world)]
        dist.all_gather(parts, t)
        gathered.append(parts)
    if rank != 0:
        return None
    # Reassemble the whole sequence from every rank's shard.
    full = []
    for parts, like in zip(gathered, (d_out, q, k, v)):
        whole = torch.empty_like(like, dtype=torch.float32)
        for r, part in enumerate(parts):
            whole.index_copy_(dim, cp.shard_positions(T, world, r, scheme), part)
        full.append(whole)
    # The reference: one process, the whole sequence.
    qr, kr, vr = (to_format(t, case).clone().requires_grad_() for t in (q, k, v))
    sinks_ref = None if sinks is None else sinks.clone().requires_grad_()
    positions = torch.arange(T, dtype=torch.int64) + OFFSET
    ref = pt.attention(qr, kr, vr, positions, positions, sinks=sinks_ref, **options_of(case))
    ref.backward(to_format(d_out, case), retain_graph=sinks is not None)
    want = [to_format(t, case) for t in (ref.detach(), qr.grad, kr.grad, vr.grad)]
    labels = ["out", "dq", "dk", "dv"]
    scales = [float(t.float().abs().max()) or 1.0 for t in want]
    if sinks is not None:
        # The whole gradient is the sum of the ranks' shares; rank r's share is the reference's
        # gradient with d_out kept on r's queries only. Each against the size of its terms.
        out_ref = to_format(ref.detach(), case)
        every = torch.arange(T)
        full.append(sum(shares))
        want.append(sinks_ref.grad)
        labels.append("d_sinks")
        scales.append(sink_term_sizes(q, k, v, d_out, out_ref, sinks, case, every))
        for r, share in enumerate(shares):
            kept = torch.zeros_like(d_out)
            held = cp.shard_positions(T, world, r, scheme)
            kept.index_copy_(dim, held, d_out.index_select(dim, held))
            (expect,) = torch.autograd.grad(
                ref, sinks_ref, to_format(kept, case), retain_graph=True
            )
            full.append(share)
            want.append(expect)
            labels.append(f"d_sinks of rank {r}'s queries")
            scales.append(sink_term_sizes(q, k, v, d_out, out_ref, sinks, case, held))
    errors = {}
    for label, got, expect, scale in zip(labels, full, want, scales):
        error = float(((got.double() - expect.double()).abs() / scale).max())
        # bfloat16 results are float32 ones rounded once: the two sides may round apart by
        # one bfloat16 step (2^-8 relative); scaled here to compare with float32's tolerance.
        errors[label] = error * TOLERANCE / 2**-7 if "dtype" in case else error
    return errors


def worker(rank, world, port, scheme_list, seed, results, die_rank, table):
    """A rank: joins the gloo group, runs every case of TABLES[table] (or,
    with die_rank, dies mid-ring on that rank) and reports to results."""
    try:
        dist.init_process_group(
            "gloo",
            init_method=f"tcp://127.0.0.1:{port}",
            rank=rank,
            world_size=world,
            timeout=datetime.timedelta(seconds=TIMEOUT_S),
        )
        if die_rank in ("mismatch", "bad_position", "bad_sinks"):
            # Rank 1 holds fewer tokens, a position past the limit or an infinite sink: every
            # rank must refuse before the ring starts.
            tokens = 8 if rank == 1 and die_rank == "mismatch" else 12
            q = torch.randn(tokens, HEADS, DIM)
            kv = torch.randn(tokens, KV_HEADS, DIM)
            positions = torch.arange(tokens) + rank * 12
            sinks = torch.zeros(HEADS) if die_rank == "bad_sinks" else None
            if rank == 1 and die_rank == "bad_position":
                positions[3] = 2**33
            if rank == 1 and die_rank == "bad_sinks":
                sinks[2] = float("inf")
            cp.context_parallel_attention(q, kv, kv, positions, sinks=sinks, qkv_format="bshd")
            results.put((rank, "finished", None))
            return
        if die_rank is not None:
            if rank == die_rank:
                real = cp._block_forward
                calls = [0]

                def dying(*args, **kwargs):
                    calls[0] += 1
                    if calls[0] == 2:  # after the first block: mid-ring
                        os._exit(3)
                    return real(*args, **kwargs)

                cp._block_forward = dying
            case = CASES["causal"]
            q, k, v, _, _ = full_inputs(case, seed)
            index = cp.shard_positions(T, world, rank)
            q, k, v = (t.index_select(0, index).requires_grad_() for t in (q, k, v))
            # The forward and backward rings: a rank downstream of the dead one may have
            # received all it needs for the forward pass before the death, never the backward.
            cp.context_parallel_attention(
                q, k, v, index, causal=True, qkv_format="bshd"
            ).sum().backward()
            results.put((rank, "finished", None))
            return
        report = {}
        for scheme in scheme_list:
            for name, case in TABLES[table].items():
                errors = run_case(name, case, scheme, rank, world, seed)
                if errors is not None:
                    report[f"{scheme}/{name}"] = errors
        results.put((rank, "ok", report))
    except BaseException as error:  # reported to the parent, which fails the test
        results.put((rank, "error", f"{type(error).__name__}: {error}\n{traceback.format_exc()}"))
    finally:
        if dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception:
                pass


def run_ranks(world, schemes=("zigzag", "contiguous"), die_rank=None, table="base"):
    """Starts world ranks and collects one report per rank that reports;
    every process has ended when it returns. No clock decides the outcome: a
    rank left waiting on a peer that died or hung raises (the peer's closed
    sockets, at the latest the group's timeout) and reports that; only a
    process still there twice that timeout after its start is killed."""
    context = torch.multiprocessing.get_context("spawn")
    results = context.Queue()
    port = free_port()
    processes = [
        context.Process(
            target=worker,
            args=(rank, world, port, schemes, 1234, results, die_rank, table),
            daemon=True,
        )
        for rank in range(world)
    ]
    for p in processes:
        p.start()
    reports = {}
    guard = time.monotonic() + 2 * TIMEOUT_S
    try:
        expected = world - isinstance(die_rank, int)
        while len(reports) < expected and time.monotonic() < guard:
            try:
                rank, kind, payload = results.get(timeout=0.5)
            except queue.Empty:
                if all(not p.is_alive() for p in processes) and results.empty():
                    break
                continue
            reports[rank] = (kind, payload)
        for p in processes:
            p.join(timeout=max(guard - time.monotonic(), 1.0))
    finally:
        for p in processes:
            if p.is_alive():
                p.kill()
                p.join(timeout=5)
    return reports, processes


# float32 rounding: the merge by log-sum-exp and the blockwise sums reorder
# float32 additions; differences are a few ulps of each tensor's scale.
TOLERANCE = 4e-6


@pytest.mark.parametrize("world", [1, 2, 4])
def test_ring_matches_single_process(world):
    reports, processes = run_ranks(world)
    failures = {r: payload for r, (kind, payload) in reports.items() if kind != "ok"}
    assert not failures, failures
    assert sorted(reports) == list(range(world)), reports
    report = reports[0][1]
    assert len(report) == 2 * len(CASES)
    worst = {case: max(errors.values()) for case, errors in report.items()}
    assert all(e < TOLERANCE for e in worst.values()), report
    assert all(p.exitcode == 0 for p in processes), [p.exitcode for p in processes]


def test_ring_with_softcap_and_sinks_matches_single_process():
    reports, processes = run_ranks(2, table="softcap_sinks")
    failures = {r: payload for r, (kind, payload) in reports.items() if kind != "ok"}
    assert not failures, failures
    assert sorted(reports) == [0, 1], reports
    report = reports[0][1]
    assert len(report) == 2 * len(SOFTCAP_SINKS_CASES)
    for case, errors in report.items():
        expected = ["out", "dq", "dk", "dv"]
        if "sinks" in SOFTCAP_SINKS_CASES[case.split("/")[1]]:
            expected += ["d_sinks", "d_sinks of rank 0's queries", "d_sinks of rank 1's queries"]
        assert sorted(errors) == sorted(expected), (case, errors)
    worst = {case: max(errors.values()) for case, errors in report.items()}
    assert all(e < TOLERANCE for e in worst.values()), report
    assert all(p.exitcode == 0 for p in processes), [p.exitcode for p in processes]


def test_rank_dying_mid_ring_fails_the_others():
    world, die = 4, 1
    reports, processes = run_ranks(world, die_rank=die)
    assert processes[die].exitcode == 3
    survivors = [r for r in range(world) if r != die]
    assert sorted(reports) == survivors, reports
    for r in survivors:
        kind, message = reports[r]
        assert kind == "error", (r, kind, message)
        assert "context_parallel_attention" in message or "gloo" in message.lower(), message
    assert all(not p.is_alive() for p in processes)


def test_ranks_with_different_shards_refuse():
    reports, processes = run_ranks(2, die_rank="mismatch")
    assert sorted(reports) == [0, 1], reports
    for kind, message in reports.values():
        assert kind == "error", message
        assert message.startswith(
            "Error: [context_parallel_attention] q, k, v must have the same shapes and dtype on "
            "every rank of the group"
        ), message
    assert all(not p.is_alive() for p in processes)


# Rank 1 holds a bad value; the rank that holds it names it as every other API does, the other
# names the rank.
BAD_VALUES = {
    "bad_position": {
        0: "Error: [context_parallel_attention] positions must be in [0, 2^32] (kMaxPosition) "
        "on every rank of the group, got positions outside on rank 1",
        1: "Error: [context_parallel_attention] positions[3] must be <= 2^32 = 4294967296 "
        "(kMaxPosition, where float32 RoPE stops being accurate), got 8589934592",
    },
    "bad_sinks": {
        0: "Error: [context_parallel_attention] sinks must be finite on every rank of the group, "
        "got non-finite sinks on rank 1",
        1: "Error: [context_parallel_attention] sinks[2] must be finite, got inf",
    },
}


@pytest.mark.parametrize("bad", BAD_VALUES)
def test_a_rank_with_a_bad_value_fails_every_rank_before_the_ring(bad):
    reports, processes = run_ranks(2, die_rank=bad)
    assert sorted(reports) == [0, 1], reports
    messages = {rank: message.split("\n")[0] for rank, (_, message) in reports.items()}
    assert all(kind == "error" for kind, _ in reports.values()), reports
    assert messages == BAD_VALUES[bad]
    assert all(not p.is_alive() for p in processes)


def test_shard_positions():
    assert cp.shard_positions(8, 2, 0).tolist() == [0, 1, 6, 7]
    assert cp.shard_positions(8, 2, 1).tolist() == [2, 3, 4, 5]
    assert cp.shard_positions(8, 2, 1, "contiguous").tolist() == [4, 5, 6, 7]
    assert cp.shard_positions(6, 1, 0).tolist() == list(range(6))
    for world in (1, 2, 3, 4):
        for scheme in ("zigzag", "contiguous"):
            every = torch.cat([cp.shard_positions(24, world, r, scheme) for r in range(world)])
            assert sorted(every.tolist()) == list(range(24))
    with pytest.raises(
        posenc.Error,
        match=r"\[shard_positions\] seq_len must be a positive "
        r"multiple of 4 .*got 6",
    ):
        cp.shard_positions(6, 2, 0)
    with pytest.raises(posenc.Error, match=r"\[shard_positions\] rank must be in \[0, world\)"):
        cp.shard_positions(8, 2, 2)
    with pytest.raises(posenc.Error, match=r"\[shard_positions\] scheme must be"):
        cp.shard_positions(8, 2, 0, "striped")
    with pytest.raises(posenc.Error, match=r"\[shard_positions\] world must be an int"):
        cp.shard_positions(8, 2.0, 0)


def test_arguments_checked_before_the_ring():
    q = torch.randn(4, 2, 8)
    pos = torch.arange(4)
    with pytest.raises(posenc.Error, match=r"\[context_parallel_attention\] positions must be"):
        cp.context_parallel_attention(q, q, q, pos.to(torch.int32), qkv_format="bshd")
    with pytest.raises(posenc.Error, match=r"\[context_parallel_attention\] k.shape must have"):
        cp.context_parallel_attention(q, q[:3], q[:3], pos, qkv_format="bshd")
    with pytest.raises(posenc.Error, match=r"\[context_parallel_attention\] q must have dtype"):
        cp.context_parallel_attention(q.double(), q, q, pos, qkv_format="bshd")
    # softcap and sinks as posenc.torch.attention takes them, named for this function.
    with pytest.raises(
        posenc.Error,
        match=r"^\[context_parallel_attention\] softcap must be a "
        r"finite number >= 0 \(0: off\), got -1.0$",
    ):
        cp.context_parallel_attention(q, q, q, pos, softcap=-1.0, qkv_format="bshd")
    with pytest.raises(
        posenc.Error,
        match=r"^\[context_parallel_attention\] softcap must be a "
        r"finite number >= 0 \(0: off\), got str$",
    ):
        cp.context_parallel_attention(q, q, q, pos, softcap="1", qkv_format="bshd")
    with pytest.raises(
        posenc.Error,
        match=r"^\[context_parallel_attention\] sinks.shape must be "
        r"\(2,\) \(one logit per query head\), got \(3,\)$",
    ):
        cp.context_parallel_attention(q, q, q, pos, sinks=torch.zeros(3), qkv_format="bshd")
    with pytest.raises(
        posenc.Error,
        match=r"^\[context_parallel_attention\] sinks must have a "
        r"floating dtype, got int64$",
    ):
        cp.context_parallel_attention(
            q, q, q, pos, sinks=torch.zeros(2, dtype=torch.int64), qkv_format="bshd"
        )
    with pytest.raises(
        posenc.Error,
        match=r"^\[context_parallel_attention\] sinks must be None "
        r"or a torch.Tensor \[num_heads\], got list$",
    ):
        cp.context_parallel_attention(q, q, q, pos, sinks=[0.0, 0.0], qkv_format="bshd")
    if not dist.is_initialized():
        with pytest.raises(posenc.Error, match=r"\[context_parallel_attention\] group must"):
            cp.context_parallel_attention(q, q, q, pos, qkv_format="bshd")


def test_names():
    assert pt.distributed is cp
    assert cp.context_parallel_attention.__module__ == "posenc.torch.distributed"
