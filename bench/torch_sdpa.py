"""posenc.torch's attention against PyTorch 2's own CPU attention,
torch.nn.functional.scaled_dot_product_attention (SDPA: a fused flash-attention kernel on CPU), in
one process, same torch, same threads.

Cases (each side in its own native layout, contiguous: posenc tokens first [T, heads, d], SDPA
[1, heads, T, d]; same values):
- prefill, forward only and forward + backward (out.backward(d_out)), float32 and bfloat16,
  causal, and causal with ALiBi: posenc's fused ALiBi (posenc.Alibi) against SDPA with the bias
  as an additive mask tensor [1, heads, T, T] in the inputs' dtype (bias and -inf above the
  diagonal, built before the clock, as a model would cache it);
- decode: one query against a KV cache of several lengths, float32 and bfloat16, no mask.
Query heads share KV heads (GQA, Llama 3's 4 to 1): posenc takes them as they are, SDPA with
enable_gqa=True. Which SDPA kernel ran (flash, or math: composed matmuls and softmax) is read
from the aten operations the call dispatched (a TorchDispatchMode) and printed.

Before anything is timed, every case's output (and for forward + backward the gradients of q, k
and v) is checked on both sides against a float64 reference written here in plain torch ops
(q k^T x scale + bias + causal mask, softmax, x v, autograd): within 1e-4 of the reference's
largest magnitude for float32 inputs, 2e-2 for bfloat16 (the errors are printed). A failed check
stops the run with exit status 1 before any timing.

Timing follows `posenc bench` (docs/PERFORMANCE.md, "Reading posenc bench"): every case runs once
per round on both sides, one after the other (the order flips every round), each sample the mean
of enough calls to last about 20 ms; the speed-up is SDPA's time over posenc's in the same round,
reported as the median of the rounds with its min-max. WARNING lines at the top and the bottom
say when not to believe it: SDPA's time of a case (the baseline) moved more than 1.25x between
rounds, or the machine was busy. The CPU is named through the posenc CLI (CPUID) where it is
found ($POSENC_CLI or the build tree's tools/posenc), else from /proc/cpuinfo.

Threads: torch.set_num_threads(--threads) (default: torch's own count); posenc's OpenMP regions
run on the same OpenMP runtime, whose thread count that sets; both counts are printed.

--model adds a whole transformers model (a shrunken Llama 3.1: head_dim 128, 8 query over 2 KV
heads, 4 layers, random weights), attn_implementation="posenc" (posenc.transformers) against
"sdpa", same weights: its prefill (the last position's logits, as generate() asks for them), and
one decode step (one token after a DynamicCache of the prompt, cut back after each step), timed
the same way; checked against the same model in float64 with "eager" attention (logits within
1e-4 of their largest magnitude in float32, 2e-1 in bfloat16, where every matmul rounds).

usage: PYTHONPATH=build/python python bench/torch_sdpa.py [--threads 2] [--rounds 10] [--model]
       [--cases TEXT]   (only the cases whose name contains TEXT)
       [--tiny]         (tiny shapes, one round: a smoke test of the checks, not a measurement)
(python: one with torch >= 2, e.g. the project's virtual environment.)
"""

import argparse
import copy
import ctypes
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import round_stats
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import posenc
import posenc.torch as pt

TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 2e-2}
# A whole model in bfloat16 rounds every matmul and norm, on both sides alike: the 4-layer Llama
# below is 0.07 (prefill) and 0.10 (decode) off its float64 self with either attention.
MODEL_TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 2e-1}
SAMPLE_SECONDS = 0.02  # each timed sample: enough calls to last this long
DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16"}


def alibi_slopes(heads):
    """ALiBi's slopes as the paper defines them for a power-of-two head count: 2^(-8 h / heads),
    h = 1 .. heads (the reference's own, not posenc's)."""
    return torch.tensor(
        [2.0 ** (-8.0 * (h + 1) / heads) for h in range(heads)], dtype=torch.float64
    )


def additive_bias(heads, tq, tk, alibi):
    """[heads, tq, tk] float64: -slope x (query position - key position) with ALiBi, 0 without,
    -inf where the key comes after the query (queries at the last tq of tk positions)."""
    distance = (torch.arange(tk - tq, tk)[:, None] - torch.arange(tk)[None, :]).double()
    bias = torch.zeros(heads, tq, tk, dtype=torch.float64)
    if alibi:
        bias -= alibi_slopes(heads)[:, None, None] * distance
    return bias.masked_fill(distance < 0, -math.inf)


def reference(q, k, v, bias, d_out):
    """Attention in float64 torch ops, tokens-first q [T, heads, d], k and v [Tk, kv_heads, d],
    bias [heads, T, Tk] with -inf for hidden keys: (out, dq, dk, dv) with d_out, or (out,)."""
    q, k, v = (x.double().requires_grad_(d_out is not None) for x in (q, k, v))
    group = q.shape[1] // k.shape[1]
    kk, vv = (x.repeat_interleave(group, dim=1) for x in (k, v))
    scores = torch.einsum("qhd,khd->hqk", q, kk) / math.sqrt(q.shape[-1]) + bias
    out = torch.einsum("hqk,khd->qhd", torch.softmax(scores, dim=-1), vv)
    if d_out is None:
        return (out.detach(),)
    out.backward(d_out.double())
    return out.detach(), q.grad, k.grad, v.grad


def relative_error(got, want):
    """max |got - want| over the reference's largest magnitude (at least 1)."""
    want = want.double()
    return float((got.double() - want).abs().max() / max(1.0, float(want.abs().max())))


class _AtenOps(TorchDispatchMode):
    """Records the names of the aten operations that reach the kernels."""

    def __init__(self):
        super().__init__()
        self.names = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.add(func.name())
        return func(*args, **(kwargs or {}))


def sdpa_kernel_name(call):
    """The SDPA kernel a call ran: 'flash' (aten::_scaled_dot_product_flash_attention_for_cpu),
    or 'math' where SDPA composed it of matmuls and a softmax."""
    with _AtenOps() as ops:
        call()
    fused = sorted(
        n.removeprefix("aten::_scaled_dot_product_")
        .removesuffix("_for_cpu")
        .removesuffix("_attention")
        for n in ops.names
        if n.startswith("aten::_scaled_dot_product_") and "backward" not in n
    )
    return "+".join(fused) or "math"


class Side:
    """One side of a comparison: the call that is timed, and what runs before each call outside
    the clock (clearing gradients, cutting a KV cache back); grad: the call records for
    autograd."""

    def __init__(self, call, reset=lambda: None, grad=False):
        self.call, self.reset, self.grad = call, reset, grad

    def run(self):
        self.reset()
        with torch.enable_grad() if self.grad else torch.no_grad():
            return self.call()

    def seconds(self, calls):
        """Mean time of `calls` calls."""
        total = 0.0
        with torch.enable_grad() if self.grad else torch.no_grad():
            for _ in range(calls):
                self.reset()
                start = time.perf_counter()
                self.call()
                total += time.perf_counter() - start
        return total / calls


class Comparison:
    """The same work on both sides (posenc, SDPA), checked against a float64 reference, then
    timed round by round. Subclasses set name, sides, expected (float64 tensors), tolerance and
    results(side) (the tensors to hold against expected, in the same order)."""

    def check(self):
        """Both sides against the reference; returns failures (empty: all within tolerance)."""
        self.kernel = sdpa_kernel_name(self.sides[1].run)
        self.errors = [
            max(relative_error(g, w) for g, w in zip(self.results(side), self.expected))
            for side in (0, 1)
        ]
        self.seconds = ([], [])  # posenc, SDPA: one sample per round
        return [
            f"{self.name}: {who} differs from the float64 reference by {e:.2e} of its "
            f"largest magnitude (tolerance {self.tolerance:.0e})"
            for who, e in zip(("posenc", "SDPA"), self.errors)
            if not e <= self.tolerance
        ]

    def warm_up(self, sample_seconds):
        """One call of each side (page faults, thread start), then the calls per sample."""
        fastest = min(side.seconds(1) for side in self.sides)
        self.calls = max(1, math.ceil(sample_seconds / max(fastest, 1e-6)))

    def time_round(self, r):
        for side in (0, 1) if r % 2 == 0 else (1, 0):
            self.seconds[side].append(self.sides[side].seconds(self.calls))

    def row(self):
        ratios = [s / p for p, s in zip(*self.seconds)]
        median, lo, hi = round_stats.summarize(ratios)
        tp, ts = (round_stats.summarize(s)[0] * 1e3 for s in self.seconds)
        return (
            f"| {self.name} | {tp:.3f} | {ts:.3f} | **{median:.2f}x** ({lo:.2f}-{hi:.2f}) | "
            f"{round_stats.drift(self.seconds[1]):.2f}x | {self.kernel} | "
            f"{self.errors[0]:.1e} / {self.errors[1]:.1e} |"
        )


class AttentionCase(Comparison):
    """posenc.torch.attention against SDPA on one shape: forward, or forward + backward."""

    def __init__(self, name, tq, tk, heads, kv_heads, d, dtype, alibi, backward, seed):
        self.name = name
        g = torch.Generator().manual_seed(seed)
        # The same values on both sides: drawn in float32, rounded once to the dtype.
        q, k, v = (
            torch.randn(t, h, d, generator=g).to(dtype)
            for t, h in ((tq, heads), (tk, kv_heads), (tk, kv_heads))
        )
        d_out = torch.randn(tq, heads, d, generator=g).to(dtype) if backward else None
        bias = additive_bias(heads, tq, tk, alibi)
        self.expected = reference(q, k, v, bias, d_out)
        self.tolerance = TOLERANCE[dtype]

        qpos, kpos = torch.arange(tk - tq, tk), torch.arange(tk)
        spec = posenc.Alibi(heads) if alibi else None
        posenc_leaves = [x.clone().requires_grad_(backward) for x in (q, k, v)]
        sdpa_leaves = [
            x.permute(1, 0, 2).unsqueeze(0).contiguous().requires_grad_(backward) for x in (q, k, v)
        ]
        # SDPA's mask: None for causal (is_causal) or decode; ALiBi as a 4-D additive mask in the
        # inputs' dtype ([1, heads, T, T] keeps SDPA on its flash kernel; a 3-D one does not).
        mask = bias.to(dtype).unsqueeze(0) if alibi else None
        causal = tq > 1 and not alibi

        def run_posenc():
            return pt.attention(
                *posenc_leaves, qpos, kpos, causal=True, alibi=spec, qkv_format="bshd"
            )

        def run_sdpa():
            out = F.scaled_dot_product_attention(
                *sdpa_leaves, attn_mask=mask, is_causal=causal, enable_gqa=True
            )
            return out[0].permute(1, 0, 2)  # a view: the same [T, heads, d] as posenc's

        self.leaves, self.d_out = (posenc_leaves, sdpa_leaves), d_out
        if backward:
            self.sides = [
                Side(lambda f=f: f().backward(d_out), lambda ls=ls: self._clear(ls), True)
                for f, ls in ((run_posenc, posenc_leaves), (run_sdpa, sdpa_leaves))
            ]
            self.forwards = (run_posenc, run_sdpa)
        else:
            self.sides = [Side(run_posenc), Side(run_sdpa)]
            self.forwards = None

    @staticmethod
    def _clear(leaves):
        for x in leaves:
            x.grad = None

    def results(self, side):
        if self.forwards is None:
            return [self.sides[side].run()]
        self._clear(self.leaves[side])
        with torch.enable_grad():
            out = self.forwards[side]()
            out.backward(self.d_out)
        grads = [
            x.grad[0].permute(1, 0, 2) if x.grad.dim() == 4 else x.grad for x in self.leaves[side]
        ]
        return [out.detach(), *grads]


def llama_config(tiny):
    """Llama 3.1 8B's attention and RoPE (head_dim 128, 4 query heads per KV head, llama3 RoPE
    scaling), shrunk: 8 query heads over 2 KV heads, 4 layers, hidden 1024, MLP 3584 (8B's
    ratio 3.5), vocabulary 32000."""
    from transformers import LlamaConfig

    big = dict(
        hidden_size=1024,
        intermediate_size=3584,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=2,
        head_dim=128,
        vocab_size=32000,
    )
    small = dict(
        hidden_size=64,
        intermediate_size=224,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        vocab_size=256,
    )
    return LlamaConfig(
        **(small if tiny else big),
        max_position_embeddings=131072,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        rope_parameters={
            "rope_type": "llama3",
            "rope_theta": 500000.0,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
    )


class ModelCase(Comparison):
    """A transformers model with attn_implementation "posenc" against "sdpa" (same weights):
    prefill of `tokens` (the last position's logits, as generate() asks), or one decode step of
    one token after a KV cache of `tokens` (the cache cut back after each step). Checked against
    the same model in float64 with "eager" attention: all positions' logits of the prefill, the
    step's logits of the decode."""

    def __init__(self, name, models, reference_model, tokens, decode, seed):
        from transformers import DynamicCache

        self.name = name
        self.tolerance = MODEL_TOLERANCE[models[0].dtype]
        g = torch.Generator().manual_seed(seed)
        ids = torch.randint(0, models[0].config.vocab_size, (1, tokens + decode), generator=g)
        prompt, step = ids[:, :tokens], ids[:, tokens:]

        def prepared(model):
            """(the timed call, its reset, the checked call) for one model."""
            if not decode:
                return (
                    lambda: model(prompt, use_cache=False, logits_to_keep=1).logits,
                    lambda: None,
                    lambda: model(prompt, use_cache=False).logits,
                )
            cache = DynamicCache(config=model.config)
            model(prompt, past_key_values=cache, use_cache=True)
            call = lambda: model(step, past_key_values=cache, use_cache=True).logits

            def reset():  # crop(-n) removes the last n tokens
                if cache.get_seq_length() > tokens:
                    cache.crop(tokens - cache.get_seq_length())

            return call, reset, call

        with torch.no_grad():
            self.expected = [prepared(reference_model)[2]()]
            self.prepared = [prepared(model) for model in models]
        self.sides = [Side(call, reset) for call, reset, _ in self.prepared]

    def results(self, side):
        _, reset, checked = self.prepared[side]
        reset()
        with torch.no_grad():
            return [checked()]


def model_cases(tiny, only):
    import transformers
    from transformers import LlamaForCausalLM

    try:
        import posenc.transformers
    except ImportError as e:
        sys.exit(f"--model needs posenc.transformers (attn_implementation='posenc'): {e}")
    posenc.transformers.register()
    config = llama_config(tiny)
    torch.manual_seed(0)
    base = LlamaForCausalLM(config).eval()
    reference_model = copy.deepcopy(base).double()
    reference_model.set_attn_implementation("eager")
    prompt, cached = (24, 40) if tiny else (512, 1024)
    cases = []
    for dtype in (torch.float32, torch.bfloat16):
        kind = DTYPE_NAMES[dtype]
        specs = [
            (f"Llama prefill {prompt} tokens {kind}", prompt, 0),
            (f"Llama decode 1 token, {cached} cached, {kind}", cached, 1),
        ]
        specs = [spec for spec in specs if only in spec[0]]
        if not specs:
            continue
        models = [copy.deepcopy(base).to(dtype) for _ in range(2)]
        for model, implementation in zip(models, ("posenc", "sdpa")):
            model.set_attn_implementation(implementation)
        cases += [
            ModelCase(name, models, reference_model, tokens, decode, 100 + decode)
            for name, tokens, decode in specs
        ]
    shape = (
        f"model: LlamaForCausalLM of transformers {transformers.__version__}, "
        f"{config.num_hidden_layers} layers, hidden {config.hidden_size}, MLP "
        f"{config.intermediate_size}, {config.num_attention_heads} query heads over "
        f"{config.num_key_value_heads} KV heads of {config.head_dim}, llama3 RoPE, "
        f"vocabulary {config.vocab_size}, random weights"
    )
    return cases, shape


def attention_cases(tiny, only):
    """The attention cases whose name contains `only`, and a line describing their shapes."""
    heads, kv_heads, d = (4, 1, 16) if tiny else (8, 2, 128)
    lengths = (16, 33) if tiny else (512, 2048)
    cache_lengths = (40,) if tiny else (1024, 4096, 8192)
    dec_heads, dec_kv = (4, 2) if tiny else (32, 8)
    specs = []  # (name, tq, tk, heads, kv_heads, dtype, alibi, backward)
    for backward in (False, True):
        for t in lengths:
            for dtype in (torch.float32, torch.bfloat16):
                for alibi in (False, True):
                    name = (
                        f"prefill {'fwd+bwd' if backward else 'fwd'} T={t} "
                        f"{DTYPE_NAMES[dtype]} causal{' ALiBi' if alibi else ''}"
                    )
                    specs.append((name, t, t, heads, kv_heads, dtype, alibi, backward))
    for keys in cache_lengths:
        for dtype in (torch.float32, torch.bfloat16):
            specs.append(
                (
                    f"decode {keys} keys {DTYPE_NAMES[dtype]}",
                    1,
                    keys,
                    dec_heads,
                    dec_kv,
                    dtype,
                    False,
                    False,
                )
            )
    cases = [
        AttentionCase(name, tq, tk, h, kvh, d, dtype, alibi, backward, seed)
        for seed, (name, tq, tk, h, kvh, dtype, alibi, backward) in enumerate(specs)
        if only in name
    ]
    shapes = (
        f"prefill {heads} query heads over {kv_heads} KV heads, head_dim {d}; decode "
        f"{dec_heads} over {dec_kv}, head_dim {d}"
    )
    return cases, shapes


def omp_threads():
    """The OpenMP runtime's thread count as posenc's kernels see it (libgomp, loaded by torch)."""
    try:
        return ctypes.CDLL("libgomp.so.1").omp_get_max_threads()
    except (OSError, AttributeError):
        return "?"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument(
        "--model",
        action="store_true",
        help="also a transformers model, attn_implementation posenc vs sdpa",
    )
    parser.add_argument(
        "--tiny",
        action="store_true",
        help="tiny shapes, one round: a smoke test, not a measurement",
    )
    parser.add_argument("--posenc-cli", help="the posenc CLI, to name the CPU by CPUID")
    parser.add_argument(
        "--cases",
        default="",
        help="only the cases whose name contains this text (e.g. 'fwd T=2048')",
    )
    args = parser.parse_args()
    if torch.__version__ < "2.5":  # torch.__version__ compares as a version
        sys.exit(
            f"bench/torch_sdpa.py needs torch >= 2.5 (scaled_dot_product_attention with "
            f"enable_gqa); this is torch {torch.__version__}"
        )
    torch.set_num_threads(args.threads)
    rounds = 1 if args.tiny else args.rounds
    sample = 0.0 if args.tiny else SAMPLE_SECONDS

    cpu = round_stats.cpu_name(args.posenc_cli)
    cases, shapes = attention_cases(args.tiny, args.cases)
    failures = [f for case in cases for f in case.check()]
    if args.model:
        model_list, model_shapes = model_cases(args.tiny, args.cases)
        failures += [f for case in model_list for f in case.check()]
        cases += model_list
    for f in failures:
        print("CHECK FAILED:", f)
    if failures:
        sys.exit(1)

    watch = round_stats.MachineWatch()
    for case in cases:
        case.warm_up(sample)
    for r in range(rounds):
        for case in cases:
            case.time_round(r)
    watch.stop()

    warnings = watch.warnings({f"SDPA {c.name}": c.seconds[1] for c in cases})
    header = [f"WARNING: {w}" for w in warnings]
    print("\n".join(header))
    print(f"cpu: {cpu}")
    print(
        f"torch {torch.__version__}, posenc {posenc.__version__}; threads: "
        f"torch.get_num_threads() {torch.get_num_threads()}, OpenMP {omp_threads()}"
    )
    print(f"machine: {watch.describe()}")
    print(f"{rounds} round(s); {shapes}")
    if args.model:
        print(model_shapes)
    print(
        "all outputs, gradients and logits within tolerance of the float64 reference, of its "
        "largest magnitude: float32 1e-4; bfloat16 2e-2 (attention), 2e-1 (a whole model)"
    )
    print()
    print(
        "| case | posenc ms | SDPA ms | posenc speed-up (SDPA time / posenc time), median "
        "(min-max) | SDPA drift | SDPA kernel | error vs float64: posenc / SDPA |"
    )
    print("|---|---:|---:|---:|---:|---|---:|")
    for case in cases:
        print(case.row())
    if header:
        print()
        print("\n".join(header))


if __name__ == "__main__":
    main()
