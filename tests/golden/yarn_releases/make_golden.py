"""Writes tests/golden/yarn_releases/<config>__transformers-<version>.json: the float32 YaRN inverse
frequencies and attention factor that one transformers release's own `_compute_yarn_parameters`
(ROPE_INIT_FUNCTIONS["yarn"]) computes for the YaRN configs of tests/configs/.

Documentation only: the tests never run this, and it never imports posenc. Run it once per
release, with that release importable first on the path (outside the repository), e.g.

    pip install --target /tmp/tf4503 transformers==4.50.3 --no-deps
    PYTHONPATH=/tmp/tf4503 python tests/golden/yarn_releases/make_golden.py

(4.50.3 and 4.51.0 import with huggingface-hub 0.30.2 and tokenizers 0.21.1 on the path too.)

The config object is the release's own class for the model_type when the release has it (so its
rope_scaling standardization runs: legacy "type" copied to "rope_type"; in transformers 5 the
`rope_parameters` form), else Qwen2Config with the same keys and the model's rotary head_dim
passed as `head_dim` (deepseek_v3 and qwen3 are not models of 4.50.3; the function reads only
rope_theta, head_dim, max_position_embeddings and the scaling dict).
"""

import json
import os

import torch
import transformers
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIGS = os.path.join(HERE, "..", "..", "configs")
FILES = [
    "qwen2.5-7b-instruct-yarn",
    "qwen2.5-7b-instruct-yarn-128k",
    "qwen3-8b-yarn",
    "deepseek-v3",
]
# The rotary width of models whose head_dim key is not the rotated part.
ROTARY_HEAD_DIM = {"deepseek_v3": ("qk_rope_head_dim", 64)}


def config_object(keys):
    model_type = keys["model_type"]
    args = {k: v for k, v in keys.items() if k not in ("model_type", "transformers_version")}
    if model_type in CONFIG_MAPPING:
        return CONFIG_MAPPING[model_type](**args), CONFIG_MAPPING[model_type].__name__
    if model_type in ROTARY_HEAD_DIM:
        args["head_dim"] = keys[ROTARY_HEAD_DIM[model_type][0]]
    return CONFIG_MAPPING["qwen2"](**args), "Qwen2Config (no " + model_type + " in this release)"


def main():
    version = transformers.__version__
    for name in FILES:
        keys = json.load(open(os.path.join(CONFIGS, name + ".json")))
        cfg, cls = config_object(keys)
        inv_freq, attention_factor = ROPE_INIT_FUNCTIONS["yarn"](cfg, torch.device("cpu"))
        out = {
            "name": name,
            "config_file": name + ".json",
            "transformers_version": version,
            "config_class": cls,
            "inv_freq_f32": [float(x) for x in inv_freq.to(torch.float32).tolist()],
            "attention_factor": float(attention_factor),
        }
        path = os.path.join(HERE, f"{name}__transformers-{version}.json")
        with open(path, "w") as f:
            json.dump(out, f, indent=None, separators=(",", ":"))
            f.write("\n")
        print(path, cls, out["attention_factor"])


if __name__ == "__main__":
    main()
