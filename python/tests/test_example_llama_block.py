"""examples/llama_block.py: the Hugging Face way and posenc.torch agree on
logits, weight gradients and greedily generated tokens."""

import importlib.util
import pathlib

import torch

ROOT = pathlib.Path(__file__).resolve().parents[2]


def load_example():
    spec = importlib.util.spec_from_file_location(
        "llama_block", ROOT / "examples" / "llama_block.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


EXAMPLE = load_example()


def batch():
    torch.manual_seed(1)
    input_ids = torch.randint(0, EXAMPLE.CONFIG["vocab_size"], (3, 10))
    mask = torch.ones(3, 10, dtype=torch.int64)
    mask[1, :3] = 0
    mask[2, :9] = 0  # one token left
    return input_ids, mask


def test_forward_and_backward_equal_the_hugging_face_block():
    w = EXAMPLE.Weights(EXAMPLE.CONFIG, seed=3)
    input_ids, mask = batch()
    kept = mask.bool()
    want = EXAMPLE.hf_block(w, input_ids, mask)
    want[kept].sum().backward()
    want_grads = [p.grad.clone() for p in w.parameters()]
    w.zero_grad()
    got = EXAMPLE.posenc_block(w, input_ids, mask)
    got[kept].sum().backward()
    torch.testing.assert_close(got[kept], want[kept], rtol=0, atol=1e-5)
    for p, g in zip(w.parameters(), want_grads):
        torch.testing.assert_close(p.grad, g, rtol=1e-4, atol=1e-4)
    with torch.no_grad():  # inference: the fused kernel
        fused = EXAMPLE.posenc_block(w, input_ids, mask)
    torch.testing.assert_close(fused[kept], want[kept], rtol=0, atol=1e-5)


def test_decode_loop_generates_the_same_tokens():
    w = EXAMPLE.Weights(EXAMPLE.CONFIG, seed=4)
    prompt = batch()[0][0, :6]
    with torch.no_grad():
        want = EXAMPLE.hf_generate(w, prompt, 10)
        got = EXAMPLE.posenc_generate(w, prompt, 10)
    assert got.tolist() == want.tolist()
