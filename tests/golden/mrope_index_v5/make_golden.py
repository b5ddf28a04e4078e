"""Writes tests/golden/mrope_index_v5/*.json by running transformers 5's own get_rope_index.

Documentation only: the tests never run this, and it never imports posenc. Run it with an
environment holding transformers 5.23.0 and torch (not the repository's runtime):

    python tests/golden/mrope_index_v5/make_golden.py

Inputs: every case of tests/golden/mrope_index/ (the 4.x golden files; only their inputs are
read) plus the cases in NEW_CASES below. For each, mm_token_type_ids is built as transformers 5's
processors build it (ProcessorMixin.create_mm_token_type_ids: 1 where the id is image_token_id,
2 where it is video_token_id, else 0), and the real model class (Qwen2VLModel,
Qwen2_5_VLModel, Qwen3VLModel) is instantiated from a tiny random config with the golden
files' token ids and vision sizes, then its get_rope_index is called.
"""

import glob
import json
import os
import sys

import torch
import transformers
from transformers import Qwen2_5_VLConfig, Qwen2VLConfig, Qwen3VLConfig
from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLModel
from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLModel
from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLModel

HERE = os.path.dirname(os.path.abspath(__file__))
OLD = os.path.join(HERE, "..", "mrope_index")

IMG, VID, VS, VE, PAD = 151655, 151656, 151652, 151653, 151643

TEXT = dict(
    vocab_size=151936,
    hidden_size=16,
    intermediate_size=16,
    num_hidden_layers=1,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=8,
)
VISION = dict(
    depth=1,
    hidden_size=16,
    intermediate_size=16,
    num_heads=2,
    out_hidden_size=16,
    embed_dim=16,
    spatial_merge_size=2,
)


def model_for(model, tokens_per_second):
    ids = dict(
        image_token_id=IMG, video_token_id=VID, vision_start_token_id=VS, vision_end_token_id=VE
    )
    if model == "qwen2_vl":
        cfg = Qwen2VLConfig(
            text_config=dict(
                TEXT,
                rope_parameters=dict(rope_type="default", mrope_section=[2, 1, 1], rope_theta=1e6),
            ),
            vision_config=dict(VISION),
            **ids,
        )
        cls = Qwen2VLModel
    elif model == "qwen2_5_vl":
        cfg = Qwen2_5_VLConfig(
            text_config=dict(
                TEXT,
                rope_parameters=dict(rope_type="default", mrope_section=[2, 1, 1], rope_theta=1e6),
            ),
            vision_config=dict(VISION, tokens_per_second=tokens_per_second),
            **ids,
        )
        cls = Qwen2_5_VLModel
    else:
        cfg = Qwen3VLConfig(
            text_config=dict(
                TEXT,
                rope_parameters=dict(
                    rope_type="default",
                    mrope_section=[2, 1, 1],
                    mrope_interleaved=True,
                    rope_theta=5e6,
                ),
            ),
            vision_config=dict(VISION),
            **ids,
        )
        cls = Qwen3VLModel
    torch.manual_seed(0)
    m = cls(cfg).eval()
    assert m.config.vision_config.spatial_merge_size == 2
    return m


def mm_token_type_ids(input_ids):
    t = torch.zeros_like(input_ids)
    t[input_ids == IMG] = 1
    t[input_ids == VID] = 2
    return t


def run(case):
    m = model_for(case["model"], case["config"].get("tokens_per_second"))
    ids = torch.tensor(case["input_ids"], dtype=torch.long)
    mask = case.get("attention_mask")
    mask = None if mask is None else torch.tensor(mask, dtype=torch.long)
    img = case.get("image_grid_thw") or None
    vid = case.get("video_grid_thw") or None
    kw = dict(
        input_ids=ids,
        mm_token_type_ids=mm_token_type_ids(ids),
        image_grid_thw=None if img is None else torch.tensor(img, dtype=torch.long),
        video_grid_thw=None if vid is None else torch.tensor(vid, dtype=torch.long),
        attention_mask=mask,
    )
    if case["model"] == "qwen2_5_vl":
        s = case.get("second_per_grid_ts")
        # As the processor returns it: a list of Python floats made a (float32) tensor.
        kw["second_per_grid_ts"] = None if s is None else torch.tensor(s, dtype=torch.float32)
    with torch.no_grad():
        pos, deltas = m.get_rope_index(**kw)
    fn = type(m).get_rope_index
    return {
        "model": case["model"],
        "release": case["model"] + "_transformers5",
        "source": {
            "package": "transformers",
            "version": transformers.__version__,
            "function": f"{fn.__module__}.{fn.__qualname__}",
        },
        "config": {
            k: case["config"].get(k)
            for k in (
                "image_token_id",
                "video_token_id",
                "vision_start_token_id",
                "spatial_merge_size",
                "tokens_per_second",
            )
        },
        "input_ids": case["input_ids"],
        "mm_token_type_ids": kw["mm_token_type_ids"].tolist(),
        "attention_mask": case.get("attention_mask"),
        "image_grid_thw": case.get("image_grid_thw") or [],
        "video_grid_thw": case.get("video_grid_thw") or [],
        "second_per_grid_ts": case.get("second_per_grid_ts"),
        "position_ids": pos.tolist(),
        "rope_deltas": deltas.tolist(),
    }


def cfg(tps=None):
    return {
        "image_token_id": IMG,
        "video_token_id": VID,
        "vision_start_token_id": VS,
        "spatial_merge_size": 2,
        "tokens_per_second": tps,
    }


def img_run(h, w, t=1):
    return [VS] + [IMG] * (t * (h // 2) * (w // 2)) + [VE]


def vid_run(t, h, w):
    return [VS] + [VID] * (t * (h // 2) * (w // 2)) + [VE]


def left_pad(rows):
    n = max(len(r) for r in rows)
    return (
        [[PAD] * (n - len(r)) + r for r in rows],
        [[0] * (n - len(r)) + [1] * len(r) for r in rows],
    )


def right_pad(rows):
    n = max(len(r) for r in rows)
    return (
        [r + [PAD] * (n - len(r)) for r in rows],
        [[1] * len(r) + [0] * (n - len(r)) for r in rows],
    )


def new_cases():
    """Cases aimed at what transformers 5 changed: where text resumes after a run (videos whose
    time span passes their rows and columns), the delta of padded rows, padded slots, rows of
    unequal length, right padding."""
    out = {}
    # Text after a long video: t = 6 frames of 1 x 2 (time passes rows and columns).
    ids = [10, 11] + vid_run(6, 2, 4) + [12, 13, 14]
    for model, tps, s in (
        ("qwen2_vl", None, None),
        ("qwen2_5_vl", 2, None),
        ("qwen2_5_vl", 25, [0.5]),
    ):
        name = (
            "text_after_long_video"
            + ("" if tps is None else f"_tps{tps}")
            + ("" if s is None else "_sec0.5")
        )
        out[(model, name)] = dict(
            model=model,
            config=cfg(tps),
            input_ids=[ids],
            attention_mask=None,
            image_grid_thw=[],
            video_grid_thw=[[6, 2, 4]],
            second_per_grid_ts=s,
        )
    # Unequal rows, left padding: row 0 image then video then text, row 1 text only, row 2 video.
    rows = [
        [10] + img_run(4, 6) + [11] + vid_run(4, 2, 4) + [12, 13],
        [20, 21, 22],
        [30, 31] + vid_run(2, 4, 4) + [32],
    ]
    ids, mask = left_pad(rows)
    for model, tps, s in (("qwen2_vl", None, None), ("qwen2_5_vl", 2, [1.0, 0.5])):
        out[(model, "unequal_left_padding")] = dict(
            model=model,
            config=cfg(tps),
            input_ids=ids,
            attention_mask=mask,
            image_grid_thw=[[1, 4, 6]],
            video_grid_thw=[[4, 2, 4], [2, 4, 4]],
            second_per_grid_ts=s,
        )
    # The same rows right-padded.
    ids, mask = right_pad(rows)
    for model, tps, s in (("qwen2_vl", None, None), ("qwen2_5_vl", 2, [1.0, 0.5])):
        out[(model, "unequal_right_padding")] = dict(
            model=model,
            config=cfg(tps),
            input_ids=ids,
            attention_mask=mask,
            image_grid_thw=[[1, 4, 6]],
            video_grid_thw=[[4, 2, 4], [2, 4, 4]],
            second_per_grid_ts=s,
        )
    # Text only, left-padded rows of unequal length (no grid: no mask branch in transformers 5).
    ids, mask = left_pad([[10, 11, 12, 13], [20], [30, 31]])
    for model in ("qwen2_vl", "qwen2_5_vl", "qwen3_vl"):
        out[(model, "text_only_unequal")] = dict(
            model=model,
            config=cfg(2 if model == "qwen2_5_vl" else None),
            input_ids=ids,
            attention_mask=mask,
            image_grid_thw=[],
            video_grid_thw=[],
            second_per_grid_ts=None,
        )
    # Qwen2.5-VL: an image grid with t = 2 (transformers 5 steps its time by 1, 4.49 keeps 0).
    out[("qwen2_5_vl", "image_t2")] = dict(
        model="qwen2_5_vl",
        config=cfg(2),
        input_ids=[[10] + img_run(4, 4, t=2) + [11]],
        attention_mask=None,
        image_grid_thw=[[2, 4, 4]],
        video_grid_thw=[],
        second_per_grid_ts=None,
    )
    # Qwen3-VL: unequal rows, left padding, frames of a video as runs with timestamps between.
    frames = []
    for f in range(3):
        frames += [40 + f, 50 + f] + vid_run(1, 4, 4)
    rows = [[10] + frames + [11, 12], [20, 21] + img_run(4, 6) + [22]]
    ids, mask = left_pad(rows)
    out[("qwen3_vl", "unequal_left_padding")] = dict(
        model="qwen3_vl",
        config=cfg(None),
        input_ids=ids,
        attention_mask=mask,
        image_grid_thw=[[1, 4, 6]],
        video_grid_thw=[[3, 4, 4]],
        second_per_grid_ts=None,
    )
    # Qwen3-VL: frames of 1 x 4 (wider than tall) and text after.
    frames = []
    for f in range(4):
        frames += [40 + f] + vid_run(1, 2, 8)
    out[("qwen3_vl", "wide_frames")] = dict(
        model="qwen3_vl",
        config=cfg(None),
        input_ids=[[10] + frames + [11, 12]],
        attention_mask=None,
        image_grid_thw=[],
        video_grid_thw=[[4, 2, 8]],
        second_per_grid_ts=None,
    )
    return out


def main():
    cases = {}
    for path in sorted(glob.glob(os.path.join(OLD, "*.json"))):
        g = json.load(open(path))
        name = os.path.basename(path)[:-5].split("-", 1)[1]
        cases[(g["model"], name)] = g  # qwen2_5_vl and its int_seconds twin share inputs
    cases.update(new_cases())
    written = []
    for (_model, name), case in sorted(cases.items()):
        out = run(case)
        path = os.path.join(HERE, f"{out['release']}-{name}.json")
        with open(path, "w") as f:
            json.dump(out, f, separators=(",", ":"))
            f.write("\n")
        written.append(os.path.basename(path))
    print("\n".join(written))


if __name__ == "__main__":
    sys.exit(main())
