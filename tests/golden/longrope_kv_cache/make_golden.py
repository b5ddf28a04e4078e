"""Writes tests/golden/longrope_kv_cache/phi3.5-mini-shrunk.json: what transformers' own Phi-3 does
to layer 0's keys when a generation crosses LongRoPE's original_max_position_embeddings.

Documentation only: the tests never run this, and it never imports posenc. Run it with
transformers 5.23.0 and torch (outside the repository):

    python tests/golden/longrope_kv_cache/make_golden.py

The model is Phi3ForCausalLM built from tests/configs/phi3.5-mini-instruct-longrope.json with the
published LongRoPE factor lists and theta, shrunk: one layer, 2 query heads and 1 key-value head
of head_dim 96 (the lists' 48 pairs), original_max_position_embeddings 16 and
max_position_embeddings 512 (the published ratio 32), random weights (seed 0), float32, eager
attention.
Two runs over the same 24 tokens:

- "generate": model.generate() from a 12-token prompt, greedy, 12 new tokens. When the sequence
  reaches 17 tokens with 16 cached, Phi3ForCausalLM.prepare_inputs_for_generation drops the cache
  and the whole sequence is recomputed (long factors for every key).
- "forward": the same tokens fed one call at a time to model(..., past_key_values=cache), as a
  hand-written loop does: the cache keeps the keys rotated with the short factors, and only the
  new keys turn with the long ones.

Each call of layer 0's attention is recorded: the positions, the query, key and value states
before RoPE (split from qkv_proj's output: q [n, 2, 96], k and v [n, 1, 96]), and the attention
output before o_proj [n, 2, 96], each float32 value in 9 significant digits.
"""

import json
import os

import torch
import transformers
from transformers import Phi3Config, Phi3ForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIG = os.path.join(HERE, "..", "..", "configs", "phi3.5-mini-instruct-longrope.json")
SHRINK = {
    "hidden_size": 192,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "num_hidden_layers": 1,
    "intermediate_size": 64,
    "vocab_size": 96,
    "original_max_position_embeddings": 16,
    "max_position_embeddings": 512,
    "sliding_window": None,
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 95,
}
PROMPT, NEW = 12, 12


def main():
    published = json.load(open(CONFIG))
    keys = {**{k: v for k, v in published.items() if k != "model_type"}, **SHRINK}
    config = Phi3Config(**keys)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = Phi3ForCausalLM(config).eval()
    attn = model.model.layers[0].self_attn
    heads, kv, hd = config.num_attention_heads, config.num_key_value_heads, attn.head_dim
    calls = []

    def on_qkv(module, args, output):
        x = output[0].detach()
        n = x.shape[0]
        calls.append(
            {
                "q": x[:, : heads * hd].reshape(n, heads, hd),
                "k": x[:, heads * hd : (heads + kv) * hd].reshape(n, kv, hd),
                "v": x[:, (heads + kv) * hd :].reshape(n, kv, hd),
            }
        )

    def on_o_proj(module, args):
        x = args[0][0].detach()
        calls[-1]["out"] = x.reshape(x.shape[0], heads, hd)

    runs = {}
    attn.qkv_proj.register_forward_hook(on_qkv)
    attn.o_proj.register_forward_pre_hook(on_o_proj)
    prompt = torch.randint(2, 90, (1, PROMPT), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        tokens = model.generate(prompt, max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False)
        runs["generate"] = calls[:]
        calls.clear()
        out = model(tokens[:, :PROMPT], use_cache=True)
        cache = out.past_key_values
        for t in range(PROMPT, tokens.shape[1]):
            out = model(tokens[:, t : t + 1], past_key_values=cache, use_cache=True)
            cache = out.past_key_values
        runs["forward"] = calls[:]

    def short(tensor):
        # float32 values in 9 significant digits: each reads back to the same float32.
        return json.loads(
            json.dumps(tensor.tolist(), default=str),
            parse_float=lambda text: float(f"{float(text):.9g}"),
        )

    def record(run):
        steps, cached = [], 0
        for c in run:
            n = c["q"].shape[0]
            # Positions as the model numbers them: a call of n tokens after `cached` cached ones.
            if n > 1 and cached > 0:  # the recompute: the cache was dropped
                cached = 0
            steps.append(
                {
                    "positions": list(range(cached, cached + n)),
                    **{key: short(c[key]) for key in ("q", "k", "v", "out")},
                }
            )
            cached += n
        return steps

    result = {
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "config_file": "phi3.5-mini-instruct-longrope.json",
        "shrink": SHRINK,
        "config": {**published, **SHRINK},
        "tokens": tokens[0].tolist(),
        "head_dim": hd,
        "runs": {name: record(run) for name, run in runs.items()},
    }
    with open(os.path.join(HERE, "phi3.5-mini-shrunk.json"), "w") as f:
        json.dump(result, f, separators=(",", ":"))
        f.write("\n")
    for name, run in result["runs"].items():
        print(name, [(s["positions"][0], len(s["positions"])) for s in run])


if __name__ == "__main__":
    main()
