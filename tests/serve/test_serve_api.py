"""posenc serve, started on a free port: its API against the lesson's numbers and the formulas,
its rules for bad requests, a load of 8 concurrent clients, and a clean stop on Ctrl-C."""

import collections
import json
import math
import pathlib
import re
import threading
import time
import urllib.error
import urllib.request

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def get(url, path, body=None, content_type="application/json"):
    """(status, parsed JSON body) of a GET, or of a POST when body is given."""
    request = urllib.request.Request(url + path)
    if body is not None:
        request = urllib.request.Request(
            url + path, data=body, method="POST", headers={"Content-Type": content_type}
        )
    try:
        with urllib.request.urlopen(request, timeout=20) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_stretching_a_bundled_llama_3_1(server):
    """As posenc inspect reports it: pairs 0-28 kept, 29-34 blended, 35-63 divided by 8."""
    status, data = get(server, "api/stretch?config=llama3.1-8b")
    assert status == 200 and data["rope_type"] == "llama3" and data["source"] == "llama3.1-8b"
    classes = data["pair_class"]
    assert classes == ["extrapolated"] * 29 + ["blended"] * 6 + ["interpolated"] * 29
    for before, after, kind in zip(data["original_wavelength"], data["wavelength"], classes):
        if kind == "interpolated":
            assert after == pytest.approx(8 * before, rel=1e-6)
    assert "llama3.1-8b" in data["bundled"]


def test_stretching_an_uploaded_config_matches_the_reference(server):
    golden = json.loads(
        (ROOT / "tests/golden/hf_rope/phi3_128k_longrope__seq4096.json").read_text()
    )
    body = (ROOT / "tests/configs/phi3-128k-longrope.json").read_bytes()
    status, data = get(server, "api/stretch", body)
    assert status == 200 and data["source"] == "uploaded" and data["rope_type"] == "longrope"
    assert data["attention_factor"] == pytest.approx(golden["attention_factor"], rel=1e-12)
    assert data["inv_freq"] == pytest.approx(golden["inv_freq_hf_f32"], rel=0, abs=0)


def test_stretching_a_synthetic_model(server):
    status, data = get(server, "api/stretch?rope_type=linear&factor=4&original=2048&head_dim=64")
    assert status == 200 and data["rope_type"] == "linear"
    assert collections.Counter(data["pair_class"]) == {"interpolated": 32}
    for before, after in zip(data["original_wavelength"], data["wavelength"]):
        assert after == pytest.approx(4 * before, rel=1e-6)
    status, yarn = get(server, "api/stretch?rope_type=yarn&factor=4&original=4096")
    assert yarn["attention_factor"] == pytest.approx(0.1 * math.log(4) + 1, rel=1e-12)
    status, bloom = get(server, "api/stretch", (ROOT / "tests/configs/bloom.json").read_bytes())
    assert status == 200 and bloom["scheme"] == "alibi" and "pair_class" not in bloom


def test_waves_are_the_lesson_formula(server):
    status, data = get(server, "api/waves?d=16&base=10000&position=7&columns=0,3")
    assert status == 200 and data["d"] == 16
    for pair in data["pairs"]:
        i = pair["pair"]
        w = 10000.0 ** (-2 * i / 16)
        assert pair["wavelength"] == pytest.approx(2 * math.pi / w, rel=1e-12)
        angle = math.atan2(math.sin(7 * w), math.cos(7 * w))
        assert pair["angle"] == pytest.approx(angle, abs=1e-12)
    assert data["positions"][0] == 7 and data["positions"][-1] == 107
    column0, column3 = data["curves"]
    for p, a, b in zip(data["positions"], column0["values"], column3["values"]):
        assert a == pytest.approx(math.sin(p), abs=1e-12)  # PE(p, 0) = sin(p)
        assert b == pytest.approx(math.cos(p * 10000.0 ** (-2 / 16)), abs=1e-12)


def test_similarity_puts_the_neighbours_of_20_first(server):
    status, data = get(server, "api/similarity")
    assert status == 200 and (data["positions"], data["d"], data["query"]) == (64, 32, 20)
    top = data["most_similar"]
    assert top[0] == 20 and set(top[1:3]) == {19, 21} and set(top[3:5]) == {18, 22}
    assert data["dots"][20] == pytest.approx(16.0, rel=1e-12)  # 16 pairs of sin^2 + cos^2
    assert data["dots"][19] == pytest.approx(data["dots"][21], abs=1e-12)
    assert len(data["table"]) == 64 and len(data["table"][0]) == 32
    assert data["table"][1][0] == pytest.approx(math.sin(1.0), abs=1e-7)


def test_rope_scores_depend_only_on_the_distance(server):
    status, data = get(server, "api/rope?position=5&pair=0")
    assert status == 200
    scores = [p["score"] for p in data["pairs"]]  # (5, 2), (105, 102), (1005, 1002)
    assert [(p["m"], p["n"]) for p in data["pairs"]] == [(5, 2), (105, 102), (1005, 1002)]
    assert max(scores) - min(scores) < 1e-9
    at_three = data["scores"][data["distances"].index(3)]
    assert at_three == pytest.approx(scores[0], abs=1e-9)
    assert data["theta"] == 1.0  # pair 0 turns one radian per position
    assert data["arrow"]["angle"] == pytest.approx(5 - 2 * math.pi, abs=1e-12)


def test_the_rope_arrow_turns_by_position_times_theta(server):
    for start, position, pair in ((0.5, 5, 0), (-2.0, 300, 3), (3.0, 1000, 31)):
        _, data = get(server, f"api/rope?start={start}&position={position}&pair={pair}")
        turn = start + position * 10000.0 ** (-2 * pair / 64)
        assert data["arrow"]["x"] == pytest.approx(math.cos(turn), abs=1e-9)
        assert data["arrow"]["y"] == pytest.approx(math.sin(turn), abs=1e-9)
        assert data["start"]["angle"] == start


def test_dynamic_ntk_is_shown_stretched(server):
    _, data = get(server, "api/stretch?rope_type=dynamic&factor=4&original=4096&head_dim=64")
    assert data["seq_len"] == 16384 and data["rope_type"] == "dynamic"
    # theta' = theta (s L / M - (s - 1))^(d / (d - 2)) with L = s M: every pair slows but one.
    scale = (4 * 4 - 3) ** (64 / 62)
    assert data["wavelength"][1] == pytest.approx(
        data["original_wavelength"][1] * scale ** (2 / 64), rel=1e-5
    )
    assert data["pair_class"][0] == "extrapolated"


def test_alibi_slopes_follow_the_paper(server):
    status, data = get(server, "api/alibi?heads=8&tokens=4")
    assert status == 200
    assert data["slopes"] == [2.0**-k for k in range(1, 9)]
    bias = data["bias"][0]
    assert bias[3] == [-1.5, -1.0, -0.5, 0.0] and bias[0][1:] == [None, None, None]
    _, twelve = get(server, "api/alibi?heads=12")
    # Not a power of two: the 8-head slopes, then every other one of the 16-head series.
    assert twelve["slopes"] == pytest.approx(
        [2.0**-k for k in range(1, 9)] + [2.0 ** -(k - 0.5) for k in range(1, 5)], rel=1e-15
    )


def test_the_heatmaps_are_described_by_the_api(server):
    """Each heatmap's axes (title, cell count, ticks on round steps) and colour scale (what it
    means, the range of the numbers drawn, round values within it, what a masked cell is)."""
    _, data = get(server, "api/similarity")
    scale = data["heatmap"]
    assert scale["y"] == {"title": "position t", "cells": 64, "ticks": list(range(0, 64, 8))}
    assert scale["x"] == {
        "title": "column j of the table",
        "cells": 32,
        "ticks": list(range(0, 32, 4)),
    }
    values = [v for row in data["table"] for v in row]
    colour = scale["colour"]
    assert colour["title"] == "PE(t, j): sin for even j, cos for odd j"
    assert (colour["min"], colour["max"]) == (min(values), max(values))
    assert colour["ticks"] == [-1.0, -0.5, 0.0, 0.5, 1.0]  # (53, 7) is -1 in float32
    assert colour["masked"] is None

    _, alibi = get(server, "api/alibi?heads=8&head=3&tokens=12")
    assert alibi["head"] == 3
    scale = alibi["heatmap"]
    assert scale["y"] == {"title": "query position i", "cells": 12, "ticks": [0, 2, 4, 6, 8, 10]}
    assert scale["x"] == {"title": "key position j", "cells": 12, "ticks": [0, 2, 4, 6, 8, 10]}
    colour = scale["colour"]
    assert colour["title"] == "bias added to the score: -slope (i - j)"
    assert colour["min"] == -11 * 2.0**-4 and colour["max"] == 0.0  # head 3: slope 1/16
    assert colour["ticks"] == [-0.6, -0.4, -0.2, 0.0]
    assert colour["masked"] == "key after the query (causal mask)"
    _, one = get(server, "api/alibi?heads=1&tokens=1")
    assert one["heatmap"]["colour"] == {
        "title": colour["title"],
        "min": 0.0,
        "max": 0.0,
        "ticks": [0.0],
        "masked": colour["masked"],
    }
    _, wide = get(server, "api/similarity?positions=512&d=256")
    assert wide["heatmap"]["y"]["ticks"] == list(range(0, 512, 64))
    assert wide["heatmap"]["x"]["ticks"] == list(range(0, 256, 32))


# A layer the page's layer field names that the config cannot give: the message names the
# field's parameter (`layer`), never the CLI's --layer.
BAD_LAYERS = {
    "a NoPE layer": (
        "config=smollm3-3b-base&layer=3",
        "[serve] layer must pick a RoPE layer (layer 3 is nope, full_attention: it does not "
        "rotate q and k), got 3",
    ),
    "an index past the layers": (
        "config=smollm3-3b-base&layer=99",
        "[serve] layer must be a layer index in [0, 36) or a layer type, got 99",
    ),
    "an unknown type": (
        "config=smollm3-3b-base&layer=foo",
        "[serve] layer must be a layer index or one of the config's RoPE layer types "
        "(full_attention), got foo",
    ),
    "a type of layers that do not rotate": (
        "config=llama4-scout-17b-16e&layer=full_attention",
        "[serve] layer must name a type of RoPE layers (the full_attention layers do not rotate "
        "q and k); RoPE layer types: chunked_attention, got full_attention",
    ),
    "an index without a layer count": (
        "config=deepseek-v3&layer=0",
        "[serve] layer must be a layer type: this config gives no layer count "
        "(num_hidden_layers), so its layers have no index, got 0",
    ),
    "a type where every layer is alike": (
        "config=qwen2.5-7b-instruct-yarn&layer=sliding_attention",
        "[serve] layer must be left out: this config has one RoPE setting for every layer (no "
        "layer_types), got sliding_attention",
    ),
}


@pytest.mark.parametrize("query, message", BAD_LAYERS.values(), ids=BAD_LAYERS.keys())
def test_layer_errors_name_the_layer_parameter(server, query, message):
    assert get(server, "api/stretch?" + query) == (400, {"error": message})


def test_no_answer_names_a_command_line_flag(server):
    """Every bundled config with layers that each rule refuses, and an uploaded one: each error
    is the serve's, with no `--flag` in it."""
    _, names = get(server, "api/stretch")
    for name in names["bundled"]:
        for layer in ("0", "3", "99", "foo", "full_attention", "9" * 20):
            status, body = get(server, f"api/stretch?config={name}&layer={layer}")
            if status != 200:
                assert status == 400 and body["error"].startswith("[serve] layer must"), body
                assert not re.search(r"--[a-z]", body["error"]), body
    body = (ROOT / "tests/configs/qwen2.5-7b-instruct-yarn.json").read_bytes()
    status, answer = get(server, "api/stretch?layer=7", body)
    assert status == 400 and answer["error"].startswith("[serve] layer must be a layer type")


def test_order_blindness_of_a_sentence(server):
    status, data = get(server, "api/order?tokens=the,cat,sat,on,the,mat&order=3,0,4,1,5,2")
    assert status == 200
    assert data["shuffled_tokens"] == ["on", "the", "the", "cat", "mat", "sat"]
    blind = {r["scheme"]: r["order_blind"] for r in data["schemes"]}
    assert blind == {
        "no positions": True,
        "causal mask": False,
        "sinusoidal": False,
        "learned": False,
        "RoPE": False,
        "ALiBi": False,
    }
    plain = data["schemes"][0]
    for t, i in enumerate(data["order"]):  # without positions the outputs only move
        assert plain["shuffled"][t] == pytest.approx(plain["attention"][i], abs=1e-6)
    # The same word has the same vector: "the" at 0 and 4 reads the same attention.
    assert plain["attention"][0] == pytest.approx(plain["attention"][4], abs=1e-6)
    _, reverse = get(server, "api/order?tokens=a,b,c")
    assert reverse["order"] == [2, 1, 0]


def test_quick_checks_are_the_lesson_claims(server):
    status, data = get(server, "api/checks")
    assert status == 200
    claims = [c for s in data["sections"] for c in s["claims"]]
    assert len(claims) == 31 and all(c["holds"] for c in claims)
    assert [s["id"] for s in data["sections"]] == list("abcdefghijk")


BAD = {
    "odd d": ("api/waves?d=7", "[serve] d must be even (sin and cos pairs), got 7"),
    "text d": ("api/waves?d=abc", "[serve] d must be an integer in [2, 1024], got 'abc'"),
    "position past the slider": (
        "api/waves?position=100001",
        "[serve] position must be an integer in [0, 100000], got '100001'",
    ),
    "negative position": (
        "api/rope?position=-1",
        "[serve] position must be an integer in [0, 1000000], got '-1'",
    ),
    "infinite base": (
        "api/waves?base=inf",
        "[serve] base must be a number in [1.0001, 1e+09], got 'inf'",
    ),
    "empty list item": (
        "api/waves?columns=1,,3",
        "[serve] columns must be an integer in [0, 63], got ''",
    ),
    "too many columns": (
        "api/waves?columns=0,1,2,3,4,5,6,7,8",
        "[serve] columns must hold at most 8 values, got '0,1,2,3,4,5,6,7,8'",
    ),
    "unknown parameter": (
        "api/alibi?slope=3",
        "[serve] query must name only parameters of this endpoint, got 'slope'",
    ),
    "a head past the head count": (
        "api/alibi?heads=4&head=4",
        "[serve] head must be an integer in [0, 3], got '4'",
    ),
    "repeated parameter": (
        "api/alibi?heads=3&heads=4",
        "[serve] query must name each parameter once, got 'heads' twice",
    ),
    "zero heads": ("api/alibi?heads=0", "[serve] heads must be an integer in [1, 128], got '0'"),
    "m and n apart": (
        "api/rope?m=1,2&n=1",
        "[serve] n must hold as many positions as m (2), got 1",
    ),
    "unknown endpoint": (
        "api/stretching",
        "[serve] endpoint must be one of waves, similarity, order, rope, stretch, alibi, checks, "
        "got 'stretching'",
    ),
    "unknown bundled config": (
        "api/stretch?config=../../etc/passwd",
        "[serve] config must be a bundled config (llama2-7b, llama3.1-8b, "
        "qwen2.5-7b-instruct-yarn, phi3-128k-longrope, nomic-embed-text-v1.5-dynamic, "
        "deepseek-v3, gpt-neox-20b, llama4-scout-17b-16e, smollm3-3b-base, "
        "qwen2_5_vl-qwen2.5-vl-7b-instruct), got '../../etc/passwd'",
    ),
    "unknown rope type": (
        "api/stretch?rope_type=longrope",
        "[serve] rope_type must be one of default, linear, dynamic, yarn, llama3, got 'longrope'",
    ),
    "a shuffle that is not one": (
        "api/order?tokens=a,b&order=0,0",
        "[order] permutation must hold each of 0 .. tokens - 1 once, got a repeated or missing "
        "index",
    ),
    "not words": (
        "api/order?tokens=a;b",
        "[serve] tokens must be words of 1 to 16 letters, comma-separated, got 'a;b'",
    ),
    "control characters are not echoed": (
        "api/waves?d=%1b%5b31m",
        "[serve] d must be an integer in [2, 1024], got '?[31m'",
    ),
}


@pytest.mark.parametrize("path, message", BAD.values(), ids=BAD.keys())
def test_bad_requests_are_400_with_the_message(server, path, message):
    assert get(server, path) == (400, {"error": message})


BAD_BODIES = {
    "malformed JSON": (
        "api/stretch",
        b'{"model_type": "llama", "rope_scaling": 5',
        "application/json",
        400,
        "[hf_config] config must be valid JSON, got [json.exception.parse_error.101] "
        "parse error at line 1, column 42: syntax error while parsing object - unexpected end "
        "of input; expected '}'",
    ),
    "a form instead of JSON": (
        "api/stretch",
        b"rope_type=yarn",
        "application/x-www-form-urlencoded",
        415,
        "[serve] body must be sent as application/json (a config.json)",
    ),
    "a body where none is read": (
        "api/waves",
        b"{}",
        "application/json",
        400,
        "[serve] body must be empty (only stretch reads one: a config.json), got 2 bytes",
    ),
    "two sources": (
        "api/stretch?config=llama2-7b",
        b"{}",
        "application/json",
        400,
        "[serve] config must come from one place: the body, config= or rope_type=, "
        "got more than one",
    ),
}


@pytest.mark.parametrize(
    "path, body, kind, status, message", BAD_BODIES.values(), ids=BAD_BODIES.keys()
)
def test_bad_bodies_are_refused_with_the_message(server, path, body, kind, status, message):
    assert get(server, path, body, kind) == (status, {"error": message})


def test_paths_outside_the_api_are_404_and_no_file_is_read(server):
    for path in ("../../etc/passwd", "%2e%2e/%2e%2e/etc/passwd", "api/", "static/chart.js"):
        status, body = get(server, path)
        assert status == 404 and "path must be" in body["error"]


def test_a_large_body_is_refused_and_the_server_goes_on(server):
    request = urllib.request.Request(
        server + "api/stretch",
        data=b"x" * (2 << 20),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with pytest.raises(urllib.error.HTTPError) as error:
        urllib.request.urlopen(request, timeout=20)
    assert error.value.code == 413
    assert get(server, "api/alibi?heads=2")[0] == 200


def test_the_page_and_chart_js_are_served(server):
    with urllib.request.urlopen(server, timeout=20) as response:
        page = response.read().decode()
    assert "posenc explorer" in page and 'src="/chart.js"' in page
    # Nothing outside the server: no absolute URL anywhere in the page.
    assert not re.search(r"(https?:)?//[a-z0-9.-]+\.[a-z]", page, re.IGNORECASE)
    with urllib.request.urlopen(server + "chart.js", timeout=20) as response:
        assert b"Chart" in response.read()


def test_eight_concurrent_clients(server):
    paths = [f"api/waves?position={i}" for i in range(25)] + ["api/alibi?heads=16"] * 25
    latencies, failures = [], []
    lock = threading.Lock()

    def client(k):
        for path in paths[k::8] * 4:
            start = time.perf_counter()
            status, _ = get(server, path)
            with lock:
                latencies.append(time.perf_counter() - start)
                if status != 200:
                    failures.append((path, status))

    threads = [threading.Thread(target=client, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures and len(latencies) == 200
    latencies.sort()
    print(
        f"\n200 requests from 8 clients: p50 {latencies[100] * 1e3:.1f} ms, "
        f"p99 {latencies[197] * 1e3:.1f} ms"
    )


def test_random_queries_never_break_the_server(server):
    """300 queries of random names and values (bytes percent-encoded) on every endpoint: each
    answer is 200 or a 4xx with a JSON error, and the server goes on."""
    import random
    import urllib.parse

    rng = random.Random(20261201)
    names = [
        "d",
        "base",
        "position",
        "columns",
        "span",
        "samples",
        "positions",
        "query",
        "pair",
        "start",
        "m",
        "n",
        "distance",
        "heads",
        "tokens",
        "order",
        "max_bias",
        "config",
        "rope_type",
        "factor",
        "original",
        "head_dim",
        "seq_len",
        "layer",
        "x" * 50,
    ]
    alphabet = [chr(c) for c in range(256)] + ["1", "-", ",", ".", "e", "9"] * 20
    endpoints = ["waves", "similarity", "order", "rope", "stretch", "alibi", "checks"]
    for _ in range(300):
        query = urllib.parse.urlencode(
            [
                (
                    rng.choice(names),
                    "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 24))),
                )
                for _ in range(rng.randint(0, 3))
            ]
        )
        status, body = get(server, f"api/{rng.choice(endpoints)}?{query}")
        assert status == 200 or (400 <= status < 500 and body["error"].startswith("[")), body
        assert status == 200 or not re.search(r"--[a-z]", body["error"]), body
    assert get(server, "api/alibi")[0] == 200
