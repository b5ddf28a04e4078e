"""A Llama-style decoder block written the Hugging Face way, then on posenc.torch.

The first block is what modeling_llama.py does, in plain PyTorch: q, k and v
as [batch, heads, seq, head_dim]; cos and sin from inv_freq and position_ids;
rotate_half; repeat_kv for grouped heads; an additive causal and padding mask;
softmax(q k^T / sqrt(d)) v.

The second block is the same weights on posenc.torch: RoPE from the config
(``RotaryEmbedding.from_hf_config``, in Hugging Face's layout), attention with
the causal mask, grouped heads and the padding mask inside, and a decode loop
through ``KVCache``, which rotates each key once, when it is appended.

    PYTHONPATH=build/python .venv/bin/python examples/llama_block.py

prints both blocks' outputs, gradients and greedily generated tokens side by
side (python/tests/test_example_llama_block.py checks them).
"""

import math

import torch

import posenc.torch as pt

CONFIG = {
    "model_type": "llama",
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "max_position_embeddings": 256,
    "rope_theta": 500000.0,
    "rms_norm_eps": 1e-5,
    "vocab_size": 50,
}


class Weights(torch.nn.Module):
    """One decoder block and a tiny language-model head: the parameters both
    versions share."""

    def __init__(self, config, seed=0):
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        hidden = config["hidden_size"]
        self.heads = config["num_attention_heads"]
        self.kv_heads = config["num_key_value_heads"]
        self.head_dim = hidden // self.heads

        def weight(rows, cols):
            w = torch.randn(rows, cols, generator=generator) / math.sqrt(cols)
            return torch.nn.Parameter(w)

        self.embed = weight(config["vocab_size"], hidden)
        self.wq = weight(self.heads * self.head_dim, hidden)
        self.wk = weight(self.kv_heads * self.head_dim, hidden)
        self.wv = weight(self.kv_heads * self.head_dim, hidden)
        self.wo = weight(hidden, self.heads * self.head_dim)
        self.w_gate = weight(config["intermediate_size"], hidden)
        self.w_up = weight(config["intermediate_size"], hidden)
        self.w_down = weight(hidden, config["intermediate_size"])
        self.eps = config["rms_norm_eps"]

    def norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def qkv(self, hidden):
        """q, k, v as Hugging Face holds them: [batch, heads, seq, head_dim]."""
        b, s, _ = hidden.shape
        x = self.norm(hidden)
        q = (x @ self.wq.T).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = (x @ self.wk.T).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        v = (x @ self.wv.T).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        return q, k, v

    def finish(self, hidden, attn):
        """Output projection, residual, MLP and logits from attn [batch, heads,
        seq, head_dim]."""
        b, _, s, _ = attn.shape
        hidden = hidden + attn.transpose(1, 2).reshape(b, s, -1) @ self.wo.T
        x = self.norm(hidden)
        mlp = (torch.nn.functional.silu(x @ self.w_gate.T) * (x @ self.w_up.T)) @ self.w_down.T
        return (hidden + mlp) @ self.embed.T


# ---------------------------------------------------------------------------
# The Hugging Face way.


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def hf_cos_sin(config, head_dim, position_ids):
    base = config["rope_theta"]
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    freqs = position_ids[..., None].float() * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def hf_block(w, input_ids, attention_mask):
    """Logits [batch, seq, vocab] of a left-padded batch."""
    hidden = w.embed[input_ids]
    q, k, v = w.qkv(hidden)
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    cos, sin = hf_cos_sin(CONFIG, w.head_dim, position_ids)
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
    group = w.heads // w.kv_heads
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = input_ids.shape[1]
    allowed = torch.ones(s, s, dtype=torch.bool).tril() & attention_mask.bool()[:, None, None, :]
    scores = q @ k.transpose(-1, -2) / math.sqrt(w.head_dim)
    scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
    attn = scores.softmax(-1) @ v
    return w.finish(hidden, attn)


# ---------------------------------------------------------------------------
# The same block on posenc.torch.


ROTARY = pt.RotaryEmbedding.from_hf_config(CONFIG, qkv_format="bhsd")


def posenc_block(w, input_ids, attention_mask):
    hidden = w.embed[input_ids]
    q, k, v = w.qkv(hidden)
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    q, k = ROTARY(q, k, position_ids)
    attn = pt.attention(
        q, k, v, position_ids, causal=True, attention_mask=attention_mask, qkv_format="bhsd"
    )
    return w.finish(hidden, attn)


def hf_generate(w, prompt, steps):
    """Greedy decoding by recomputing the whole sequence each step (what a
    model without a cache does)."""
    ids = prompt.clone()
    for _ in range(steps):
        logits = hf_block(w, ids[None], torch.ones(1, ids.shape[0], dtype=torch.int64))
        ids = torch.cat((ids, logits[0, -1].argmax()[None]))
    return ids[prompt.shape[0] :]


def posenc_generate(w, prompt, steps):
    """Greedy decoding through a KV cache: each step appends one key and
    value (the key rotated once) and attends one query."""
    cache = pt.KVCache.from_hf_config(CONFIG, capacity=prompt.shape[0] + steps)
    ids, new = prompt.clone(), prompt
    for _ in range(steps + 1):
        hidden = w.embed[new][None]
        q, k, v = (t[0].transpose(0, 1) for t in w.qkv(hidden))  # [tokens, heads, dim]
        cache.append(k, v)
        attn = cache.attend(q)  # the new tokens at their cached positions
        logits = w.finish(hidden, attn.transpose(0, 1)[None])
        new = logits[0, -1].argmax()[None]
        ids = torch.cat((ids, new))
    return ids[prompt.shape[0] : -1]


def main():
    torch.manual_seed(0)
    w = Weights(CONFIG)
    input_ids = torch.randint(0, CONFIG["vocab_size"], (2, 12))
    mask = torch.ones(2, 12, dtype=torch.int64)
    mask[1, :4] = 0  # the second row is left-padded
    hf_logits = hf_block(w, input_ids, mask)
    hf_logits[mask.bool()].sum().backward()
    hf_grads = [p.grad.clone() for p in w.parameters()]
    w.zero_grad()
    logits = posenc_block(w, input_ids, mask)
    logits[mask.bool()].sum().backward()
    worst_logit = (logits - hf_logits)[mask.bool()].abs().max().item()
    worst_grad = max((p.grad - g).abs().max().item() for p, g in zip(w.parameters(), hf_grads))
    print(f"logits: largest difference {worst_logit:.2e} (of {hf_logits.abs().max():.2f})")
    print(f"weight gradients: largest difference {worst_grad:.2e}")
    with torch.no_grad():
        prompt = input_ids[0, :5]
        print("generated, Hugging Face way:", hf_generate(w, prompt, 8).tolist())
        print("generated, posenc.torch:    ", posenc_generate(w, prompt, 8).tolist())


if __name__ == "__main__":
    main()
