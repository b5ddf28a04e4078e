"""Writes tests/golden/hf_rope_v5/*.json: the inverse frequencies and attention factors that
transformers 5's own rotary-embedding classes compute for the configs of tests/configs/ and
tests/configs/real/, rewritten in transformers 5's form (`rope_parameters`).

Documentation only: the tests never run this, and it never imports posenc. Run it with an
environment holding transformers 5.23.0 and torch (not the repository's runtime):

    python tests/golden/hf_rope_v5/make_golden.py

For each config: the transformers 5 config class of its model_type is built from the file's keys
(CONFIG_MAPPING[model_type](**keys)); the text config's standardized `rope_parameters` replace
the legacy keys it was built from (`rope_scaling`, `rope_theta`, and any of `rotary_pct`,
`rotary_emb_base`, `rope_local_base_freq`, `global_rope_theta`, `local_rope_theta`,
`partial_rotary_factor` that the class no longer keeps), giving the v5-form config stored in the
golden file; the model's own text RotaryEmbedding module (e.g. LlamaRotaryEmbedding,
Gemma3RotaryEmbedding with one buffer per layer type) is instantiated from the config class and
its `inv_freq` / `<layer_type>_inv_freq` and `attention_scaling` are kept. The length-dependent
types are also evaluated at given lengths through ROPE_INIT_FUNCTIONS[rope_type](config,
seq_len=L), as the module's dynamic_rope_update does.
"""

import glob
import importlib
import inspect
import json
import os

import torch
import transformers
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIGS = os.path.join(HERE, "..", "..", "configs")
LEGACY = (
    "rotary_pct",
    "rotary_emb_base",
    "rope_local_base_freq",
    "global_rope_theta",
    "local_rope_theta",
    "partial_rotary_factor",
)
# Inputs transformers 5.23.0 refuses as written, and the smallest change that it accepts.
FIXES = {
    # Strict dataclass validation: attn_temperature_tuning is a bool in 5.x (the printed 4.51
    # config says 4; later revisions of the published file say true).
    "llama4-scout-17b-16e": (
        "text_config.attn_temperature_tuning 4 -> true",
        lambda d: d["text_config"].update(attn_temperature_tuning=True),
    ),
    # The April-2024 Phi-3 file's `"type": "su"` is renamed to longrope only after
    # standardize_rope_params() ran, so original_max_position_embeddings is never moved into
    # rope_parameters and validation fails (KeyError: Missing required keys in
    # `rope_parameters` for 'rope_type'='longrope': {'original_max_position_embeddings'}).
    # The later published form (`"type": "longrope"`) loads.
    "phi3-128k-longrope": (
        "rope_scaling.type su -> longrope",
        lambda d: d["rope_scaling"].update(type="longrope"),
    ),
}
SEQ_LENS = {"dynamic": [2048, 4096, 8192], "longrope": [4096, 4097]}


def rotary_class(text_cfg):
    module = importlib.import_module(
        type(text_cfg).__module__.replace(".configuration_", ".modeling_")
    )
    names = [
        n
        for n, c in inspect.getmembers(module, inspect.isclass)
        if n.endswith("RotaryEmbedding") and "Vision" not in n and c.__module__ == module.__name__
    ]
    assert len(names) == 1, (module.__name__, names)
    return getattr(module, names[0])


def v5_form(original, cfg):
    out = json.loads(json.dumps(original))
    text_cfg = cfg.get_text_config()
    where = out["text_config"] if text_cfg is not cfg and "text_config" in out else out
    kept = text_cfg.to_dict()
    for key in ("rope_scaling", "rope_theta"):
        where.pop(key, None)
    for key in LEGACY:
        if key in where and key not in kept:
            where.pop(key)
    where["rope_parameters"] = text_cfg.rope_parameters
    return out


def f32(t):
    return [float(x) for x in t.to(torch.float32).tolist()]


def main():
    paths = sorted(
        glob.glob(os.path.join(CONFIGS, "*.json"))
        + glob.glob(os.path.join(CONFIGS, "real", "*.json"))
    )
    index = {"transformers_version": transformers.__version__, "files": [], "skipped": []}
    for path in paths:
        rel = os.path.relpath(path, CONFIGS)
        name = os.path.basename(path)[:-5]
        original = json.load(open(path))
        model_type = original.get("model_type")
        if model_type not in CONFIG_MAPPING:
            index["skipped"].append(
                {
                    "config": rel,
                    "why": f"model_type {model_type} is not a "
                    "transformers 5.23.0 model (remote code)",
                }
            )
            continue
        fixed = json.loads(json.dumps(original))
        fix = FIXES.get(name)
        if fix:
            fix[1](fixed)
        cfg = CONFIG_MAPPING[model_type](**{k: v for k, v in fixed.items() if k != "model_type"})
        text_cfg = cfg.get_text_config()
        if getattr(text_cfg, "rope_parameters", None) is None:
            index["skipped"].append({"config": rel, "why": "no rope_parameters (not RoPE)"})
            continue
        cls = rotary_class(text_cfg)
        rot = cls(text_cfg)
        layers = {}
        if hasattr(rot, "layer_types"):
            for lt in rot.layer_types:
                if not hasattr(rot, f"{lt}_inv_freq"):
                    continue
                layers[lt] = {
                    "rope_type": rot.rope_type[lt],
                    "inv_freq_f32": f32(getattr(rot, f"{lt}_inv_freq")),
                    "attention_factor": float(getattr(rot, f"{lt}_attention_scaling")),
                }
        else:
            layers[None] = {
                "rope_type": rot.rope_type,
                "inv_freq_f32": f32(rot.inv_freq),
                "attention_factor": float(rot.attention_scaling),
            }
        for lt, entry in layers.items():
            lengths = SEQ_LENS.get(entry["rope_type"], [])
            entry["by_seq_len"] = []
            for n in lengths:
                inv, att = ROPE_INIT_FUNCTIONS[entry["rope_type"]](
                    text_cfg, None, seq_len=n, **({} if lt is None else {"layer_type": lt})
                )
                entry["by_seq_len"].append(
                    {"seq_len": n, "inv_freq_f32": f32(inv), "attention_factor": float(att)}
                )
        out = {
            "name": name,
            "config_file": rel,
            "transformers_version": transformers.__version__,
            "config_class": type(cfg).__name__,
            "rotary_class": f"{cls.__module__}.{cls.__qualname__}",
            "input_fix": None if not fix else fix[0],
            "config_v5": v5_form(fixed, cfg),
            "rope_parameters": text_cfg.rope_parameters,
            "layer_types": [{"layer_type": lt, **e} for lt, e in layers.items()],
        }
        with open(os.path.join(HERE, f"{name}.json"), "w") as f:
            json.dump(out, f, indent=None, separators=(",", ":"))
            f.write("\n")
        index["files"].append(
            {
                "file": f"{name}.json",
                "config": rel,
                "rope_types": sorted({e["rope_type"] for e in layers.values()}),
                "layer_types": [lt for lt in layers],
                "input_fix": out["input_fix"],
            }
        )
    with open(os.path.join(HERE, "index.json"), "w") as f:
        json.dump(index, f, indent=1)
        f.write("\n")
    print(json.dumps(index, indent=1))


if __name__ == "__main__":
    main()
