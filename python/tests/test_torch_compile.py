"""posenc's torch ops (namespace posenc, posenc.torch._ops): torch.library.opcheck of every op,
forward and backward, in float32 and bfloat16; torch.compile(fullgraph=True) of the Llama block
of examples/llama_block.py with no graph break, eager's outputs and gradients, and posenc's ops
in the graph; the same with the inductor backend; a torch.export round trip."""

import importlib.util
import io
import pathlib

import pytest
import torch
from torch._dynamo.backends.common import aot_autograd
from torch._dynamo.utils import counters
from torch._functorch.aot_autograd import make_boxed_func

import posenc
import posenc.torch as pt
from posenc.torch import _ops

ROOT = pathlib.Path(__file__).resolve().parents[2]


def load_example():
    path = ROOT / "examples" / "llama_block.py"
    spec = importlib.util.spec_from_file_location("llama_block", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


EXAMPLE = load_example()
HEADS, KV_HEADS, DIM = 4, 2, 16
DTYPES = [torch.float32, torch.bfloat16]


def randn(*shape, dtype=torch.float32, seed=0, grad=False):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=generator).to(dtype).requires_grad_(grad)


# ---------------------------------------------------------------------------
# opcheck: schema, autograd registration, fake kernels against the real ones, and AOT dispatch
# (the backward formula included) for each op.

ROPES = {
    "half_split": posenc.Rope.default(DIM, 500.0),
    "interleaved_partial": posenc.Rope.default(
        DIM, 10000.0, posenc.RopeLayout.INTERLEAVED, 8, rotary_offset=4
    ),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rope", ROPES.values(), ids=ROPES.keys())
@pytest.mark.parametrize("inverse", [False, True])
def test_opcheck_rope(dtype, rope, inverse):
    ints, floats = _ops.rope_fields(rope)
    x = randn(2, 5, HEADS, DIM, dtype=dtype, grad=True)
    torch.library.opcheck(_ops.rope, (x, torch.arange(3, 8), ints, floats, inverse))
    # Hugging Face's layout as a posenc view (strided), with batched positions.
    view = randn(2, HEADS, 5, DIM, dtype=dtype, grad=True).transpose(1, 2)
    positions = torch.tensor([[0, 1, 2, 3, 4], [7, 8, 9, 10, 11]])
    torch.library.opcheck(_ops.rope, (view, positions, ints, floats, inverse))


@pytest.mark.parametrize("dtype", DTYPES)
def test_opcheck_mrope(dtype):
    mrope = posenc.MRope.sections(posenc.Rope.default(DIM), [2, 3, 3], False)
    ints, floats = _ops.rope_fields(mrope.rope)
    x = randn(2, 5, HEADS, DIM, dtype=dtype, grad=True)
    streams = torch.randint(0, 40, (3, 2, 5), generator=torch.Generator().manual_seed(1))
    for positions in (streams, streams[:, 0]):
        args = (x, positions, ints, floats, list(mrope.pair_stream), False)
        torch.library.opcheck(_ops.mrope, args)


@pytest.mark.parametrize("dtype", DTYPES)
def test_opcheck_rope_in_place(dtype):
    ints, floats = _ops.rope_fields(ROPES["half_split"])
    q, k = randn(5, HEADS, DIM, dtype=dtype), randn(5, KV_HEADS, DIM, dtype=dtype, seed=1)
    torch.library.opcheck(_ops.rope_, (q, k, torch.arange(5), ints, floats))
    torch.library.opcheck(_ops.rope_, (q, None, torch.arange(5), ints, floats))


def attention_cases():
    """(name, batch, query_positions, key_positions, key_mask, sinks, options) per case."""
    every = dict(
        causal=True,
        alibi=posenc.Alibi(HEADS),
        rope=ROPES["interleaved_partial"],
        scale=0.3,
        window=4,
        softcap=2.5,
    )
    plain = dict(causal=False, alibi=None, rope=None, scale=None, window=0, softcap=0.0)
    causal = dict(plain, causal=True, rope=ROPES["half_split"])
    positions = torch.arange(6)
    # A padding mask ([batch, 1, kv_tokens]): element 0 keeps every key, 1 the last four (left
    # padding), 2 keys that are not one interval, 3 none.
    padding = torch.tensor(
        [[1] * 6, [0, 0, 1, 1, 1, 1], [1, 0, 1, 1, 0, 1], [0] * 6], dtype=torch.bool
    )[:, None, :]
    # A 4-D mask's rows ([batch, q_tokens, kv_tokens]), one interval of keys per query: causal
    # after two pads (queries 0 and 1 see no key), and intervals in no causal order.
    causal_rows = torch.ones(6, 6).tril().bool() & (torch.arange(6) >= 2)
    other_rows = torch.tensor([[0, 3], [0, 3], [2, 6], [2, 6], [1, 2], [4, 5]])
    other_rows = (torch.arange(6) >= other_rows[:, :1]) & (torch.arange(6) < other_rows[:, 1:])
    rows = torch.stack([causal_rows, other_rows])
    batched = torch.arange(6).repeat(4, 1)
    return [
        ("plain", (), positions, positions, None, None, plain),
        ("everything", (2,), positions, positions, None, "sinks", every),
        ("decode", (2,), positions[-1:], positions, None, None, causal),
        ("mask", (4,), batched, batched, padding, None, causal),
        ("mask_sinks", (4,), batched, batched, padding, "sinks", every),
        ("rows", (2,), batched[:2], batched[:2], rows, "sinks", dict(plain, rope=causal["rope"])),
    ]


def attention_args(case, dtype, grad):
    name, batch, qpos, kpos, mask, sinks, options = case
    q = randn(*batch, qpos.shape[-1], HEADS, DIM, dtype=dtype, grad=grad)
    k = randn(*batch, 6, KV_HEADS, DIM, dtype=dtype, seed=1, grad=grad)
    v = randn(*batch, 6, KV_HEADS, DIM, dtype=dtype, seed=2, grad=grad)
    if sinks is not None:
        sinks = randn(HEADS, seed=3, grad=grad)
    return (q, k, v, qpos, kpos, mask, sinks, *_ops.attention_options(**options))


CASES = {case[0]: case for case in attention_cases()}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CASES.keys())
def test_opcheck_attention(dtype, case):
    torch.library.opcheck(_ops.attention, attention_args(CASES[case], dtype, False))
    # Training: the backward formula (posenc::attention_backward) runs under AOT dispatch.
    torch.library.opcheck(_ops.attention_forward, attention_args(CASES[case], dtype, True))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", ["everything", "mask_sinks", "rows"])
def test_opcheck_attention_backward(dtype, case):
    q, k, v, qpos, kpos, mask, sinks, *options = attention_args(CASES[case], dtype, False)
    out, lse = _ops.attention_forward(q, k, v, qpos, kpos, mask, sinks, *options)
    d_out = randn(*out.shape, seed=4)
    args = (q, k, v, qpos, kpos, mask, sinks, out, lse, d_out, *options)
    torch.library.opcheck(_ops.attention_backward, args)


def test_attention_ops_equal_the_pytorch_definition():
    """The ops against posenc._torch_reference, masks per row included: out and the gradients
    of q, k, v and the sinks."""
    for case in CASES.values():
        q, k, v, qpos, kpos, mask, sinks, *options = attention_args(case, torch.float32, True)
        out = _ops.attention_forward(q, k, v, qpos, kpos, mask, sinks, *options)[0]
        leaves = [t for t in (q, k, v, sinks) if t is not None]
        d_out = randn(*out.shape, seed=5)
        got = torch.autograd.grad(out, leaves, d_out)
        wide = [t.detach().double().requires_grad_() for t in leaves]
        want_out = posenc._torch_reference.attention(
            *wide[:3],
            qpos,
            kpos,
            key_mask=mask,
            sinks=wide[3] if sinks is not None else None,
            **case[-1],
        )
        want = torch.autograd.grad(want_out, wide, d_out.double())
        torch.testing.assert_close(out.double(), want_out, rtol=1e-5, atol=1e-5)
        for g, w in zip(got, want):
            torch.testing.assert_close(g.double(), w, rtol=1e-4, atol=1e-5)


def test_attention_backward_is_not_differentiated_twice():
    q, k, v, qpos, kpos, mask, sinks, *options = attention_args(CASES["plain"], torch.float32, True)
    out = _ops.attention_forward(q, k, v, qpos, kpos, mask, sinks, *options)[0]
    (dq,) = torch.autograd.grad(out.pow(2).sum(), q, create_graph=True)
    with pytest.raises(RuntimeError, match="differentiate twice"):
        dq.sum().backward()


# ---------------------------------------------------------------------------
# torch.compile and torch.export of model code.


class LlamaBlock(torch.nn.Module):
    """examples/llama_block.py's posenc block: RotaryEmbedding (Hugging Face's layout) and
    attention with the causal and padding masks inside."""

    def __init__(self, seed):
        super().__init__()
        self.weights = EXAMPLE.Weights(EXAMPLE.CONFIG, seed=seed)

    def forward(self, input_ids, attention_mask):
        return EXAMPLE.posenc_block(self.weights, input_ids, attention_mask)


def padded_batch(seed):
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(0, EXAMPLE.CONFIG["vocab_size"], (3, 10), generator=generator)
    mask = torch.ones(3, 10, dtype=torch.int64)
    mask[1, :3] = 0
    mask[2, :9] = 0
    return input_ids, mask


class GraphRecorder:
    """A torch.compile backend that keeps Dynamo's graphs and compiles them with aot_eager
    (AOT autograd, forward and backward graphs run by eager PyTorch)."""

    def __init__(self):
        self.graphs = []

    def __call__(self, graph_module, example_inputs):
        self.graphs.append(graph_module)
        return aot_autograd(fw_compiler=run_as_is, bw_compiler=run_as_is)(
            graph_module, example_inputs
        )

    def targets(self):
        return [str(n.target) for g in self.graphs for n in g.graph.nodes]


def run_as_is(graph_module, example_inputs):
    return make_boxed_func(graph_module.forward)


def loss_and_grads(block, input_ids, mask):
    logits = block(input_ids, mask)
    logits[mask.bool()].sum().backward()
    grads = [p.grad.clone() for p in block.parameters()]
    block.zero_grad()
    return logits.detach(), grads


def test_compile_llama_block_fullgraph_matches_eager():
    torch._dynamo.reset()
    counters.clear()
    block = LlamaBlock(seed=3)
    recorder = GraphRecorder()
    compiled = torch.compile(block, fullgraph=True, backend=recorder)
    for seed in (1, 2):  # the second batch reuses the compiled graph
        input_ids, mask = padded_batch(seed)
        want, want_grads = loss_and_grads(block, input_ids, mask)
        got, got_grads = loss_and_grads(compiled, input_ids, mask)
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
        for g, w in zip(got_grads, want_grads):
            torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-6)
    assert len(recorder.graphs) == 1 and not counters["graph_break"]
    targets = recorder.targets()
    assert targets.count("posenc.rope.default") == 2  # q and k
    assert "posenc.attention_forward.default" in targets
    # Inference: the op without a log-sum-exp.
    with torch.no_grad():
        got = compiled(*padded_batch(1))
    assert "posenc.attention.default" in recorder.targets()
    torch.testing.assert_close(got, block(*padded_batch(1)), rtol=1e-6, atol=1e-6)


def test_compile_llama_block_with_inductor_matches_eager():
    """The default backend (inductor: generated C++ around posenc's ops, which stay calls into
    the library): outputs and gradients as eager's within float32 reassociation of the code it
    fuses around posenc."""
    torch._dynamo.reset()
    counters.clear()
    block = LlamaBlock(seed=3)
    compiled = torch.compile(block, fullgraph=True)
    for seed in (1, 2):
        input_ids, mask = padded_batch(seed)
        want, want_grads = loss_and_grads(block, input_ids, mask)
        got, got_grads = loss_and_grads(compiled, input_ids, mask)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        for g, w in zip(got_grads, want_grads):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)
    assert not counters["graph_break"]


def test_explain_counts_no_graph_break():
    torch._dynamo.reset()
    explained = torch._dynamo.explain(LlamaBlock(seed=4))(*padded_batch(1))
    assert explained.graph_count == 1 and explained.graph_break_count == 0


def test_compile_mrope_and_in_place_rope():
    """M-RoPE (Qwen2-VL's module) and apply_rope_ in a compiled function."""
    torch._dynamo.reset()
    rotary = pt.MultimodalRotaryEmbedding(DIM, [2, 3, 3], qkv_format="bhsd")
    rope = ROPES["half_split"]

    def step(q, k, position_ids, positions):
        q, k = rotary(q, k, position_ids)
        q, k = q.clone(), k.clone()
        pt.apply_rope_(rope, positions, q, k, qkv_format="bhsd")
        return q, k

    q, k = randn(2, HEADS, 5, DIM), randn(2, KV_HEADS, 5, DIM, seed=1)
    position_ids = torch.randint(0, 40, (3, 2, 5), generator=torch.Generator().manual_seed(2))
    positions = torch.arange(7, 12)
    recorder = GraphRecorder()
    got = torch.compile(step, fullgraph=True, backend=recorder)(q, k, position_ids, positions)
    want = step(q, k, position_ids, positions)
    for g, w in zip(got, want):
        assert torch.equal(g, w)
    targets = recorder.targets()
    assert "posenc.mrope.default" in targets and "posenc.rope_.default" in targets


def test_export_round_trip():
    block = LlamaBlock(seed=5)
    with torch.no_grad():
        program = torch.export.export(block, padded_batch(1))
        targets = [str(n.target) for n in program.graph.nodes]
        assert targets.count("posenc.rope.default") == 2
        assert "posenc.attention.default" in targets
        buffer = io.BytesIO()
        torch.export.save(program, buffer)
        buffer.seek(0)
        loaded = torch.export.load(buffer)
        for seed in (1, 2):
            batch = padded_batch(seed)
            want = block(*batch)
            torch.testing.assert_close(program.module()(*batch), want, rtol=1e-6, atol=1e-6)
            torch.testing.assert_close(loaded.module()(*batch), want, rtol=1e-6, atol=1e-6)
