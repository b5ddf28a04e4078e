"""The explorer in a real browser: Debian's Chromium, headless, driven through Selenium. It opens
the page, moves the waves slider and reads the chart's data back, uploads a real config and finds
its pair classes, reads each heatmap's labels and colours back, and fails on any JavaScript
console error. Screenshots go into the build folder (serve-explorer.png, and serve-page.png,
serve-similarity.png and serve-alibi.png beside the posenc binary's folder); with
POSENC_UPDATE_SCREENSHOT=1 the whole page also goes to docs/serve.png."""

import json
import math
import os
import pathlib

import pytest
from conftest import POSENC
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(POSENC).resolve().parent.parent
SCREENSHOT = BUILD / "serve-explorer.png"


@pytest.fixture(scope="module")
def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--window-size=1400,1700",
        "--disable-dev-shm-usage",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    driver.set_script_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def wait_for(driver, script, timeout=20):
    """Waits until the JavaScript expression is truthy, and returns its value."""
    return WebDriverWait(driver, timeout).until(lambda d: d.execute_script("return " + script))


def console_errors(driver):
    return [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def colour(t):
    """The page's colour of a value at fraction t of its scale, as rgb."""
    return [round(40 + 200 * t), round(70 + 60 * (1 - abs(2 * t - 1))), round(240 - 200 * t)]


def check_heatmap(browser, figure, rows, scale, size):
    """The figure shows the API's axis titles and ticks (each under the middle of its cell),
    the colour bar's range at its ends, the colour's meaning, and cells coloured by the bar."""
    shown = browser.execute_script(
        "const f = document.getElementById(arguments[0]);"
        "const texts = s => [...f.querySelectorAll(s)].map(e => e.textContent);"
        "const box = f.querySelector('canvas.cells').getBoundingClientRect();"
        "const centres = (s, side) => [...f.querySelectorAll(s)].map(e => {"
        "  const r = e.getBoundingClientRect();"
        "  return side === 'x' ? (r.left + r.right) / 2 - box.left"
        "                      : (r.top + r.bottom) / 2 - box.top; });"
        "return {x: texts('.x-title')[0], y: texts('.y-title')[0], xticks: texts('.x-ticks span'),"
        "        yticks: texts('.y-ticks span'), bar: texts('.colour-bar span'),"
        "        caption: texts('figcaption')[0], xat: centres('.x-ticks span', 'x'),"
        "        yat: centres('.y-ticks span', 'y'), width: box.width, height: box.height};",
        figure,
    )
    assert (shown["x"], shown["y"]) == (scale["x"]["title"], scale["y"]["title"])
    assert shown["xticks"] == [str(k) for k in scale["x"]["ticks"]]
    assert shown["yticks"] == [str(k) for k in scale["y"]["ticks"]]
    cells = shown["width"] - 2  # a 1-pixel border each side
    for k, at in zip(scale["x"]["ticks"], shown["xat"]):
        assert at == pytest.approx(1 + (k + 0.5) * cells / scale["x"]["cells"], abs=1.5)
    for k, at in zip(scale["y"]["ticks"], shown["yat"]):
        assert at == pytest.approx(1 + (k + 0.5) * cells / scale["y"]["cells"], abs=1.5)
    lo, hi = scale["colour"]["min"], scale["colour"]["max"]
    top, bottom = float(shown["bar"][0]), float(shown["bar"][1])
    assert top == pytest.approx(hi, rel=1e-3, abs=1e-9)
    assert bottom == pytest.approx(lo, rel=1e-3, abs=1e-9)
    between = [float(t) for t in shown["bar"][2:]]
    assert between and all(lo < t < hi and t in scale["colour"]["ticks"] for t in between)
    caption = "colour: " + scale["colour"]["title"]
    if scale["colour"]["masked"]:
        caption += " " + scale["colour"]["masked"]  # after a line break and a grey swatch
    assert shown["caption"] == caption
    # Cells: the middle pixel of a few cells, coloured by the value's place on the scale; a
    # masked cell is grey. The colour bar's top is the highest colour, its bottom the lowest.
    n, m = scale["y"]["cells"], scale["x"]["cells"]
    probes = [(i, j) for i in (0, n // 3, n - 1) for j in (0, 1, m // 2, m - 1)]
    pixels = browser.execute_script(
        "const f = document.getElementById(arguments[0]);"
        "const c = f.querySelector('canvas.cells').getContext('2d');"
        "const b = f.querySelector('.colour-bar canvas').getContext('2d');"
        "const px = (ctx, x, y) => [...ctx.getImageData(x, y, 1, 1).data.slice(0, 3)];"
        "const at = (i, j) => px(c, Math.floor((j + 0.5) * arguments[2] / arguments[4]),"
        "                           Math.floor((i + 0.5) * arguments[2] / arguments[3]));"
        "return {cells: arguments[1].map(([i, j]) => at(i, j)),"
        "        top: px(b, 5, 0), bottom: px(b, 5, arguments[2] - 1)};",
        figure,
        probes,
        size,
        n,
        m,
    )
    assert pixels["top"] == colour(1) and pixels["bottom"] == colour(0)
    for (i, j), got in zip(probes, pixels["cells"]):
        v = rows[i][j]
        want = [238, 238, 238] if v is None else colour((v - lo) / (hi - lo))
        assert all(abs(a - b) <= 1 for a, b in zip(got, want)), (figure, i, j, v, got, want)


def test_the_explorer_in_a_browser(server, browser):
    browser.get(server)
    # Every panel drawn from the library's answers; how long that took after navigation.
    ready_ms = browser.execute_async_script(
        "const done = arguments[0]; window.posenc.ready.then(() => done(performance.now()));"
    )
    print(f"\npage ready {ready_ms:.0f} ms after navigation")
    assert browser.find_element(By.CSS_SELECTOR, "#similarity-top").text.startswith("20, ")

    # Both heatmaps labelled as the API describes them, their cells coloured by their scale.
    similarity = browser.execute_script("return window.posenc.answers.similarity;")
    check_heatmap(browser, "similarity-heatmap", similarity["table"], similarity["heatmap"], 256)
    browser.execute_script(
        "const s = document.getElementById('alibi-head'); s.value = 3;"
        "s.dispatchEvent(new Event('input'));"
    )
    wait_for(browser, "window.posenc.answers.alibi.head === 3 && window.posenc.pending === 0")
    alibi = browser.execute_script("return window.posenc.answers.alibi;")
    assert alibi["heatmap"]["colour"]["min"] == -11 * alibi["slopes"][3]
    check_heatmap(browser, "alibi-heatmap", alibi["bias"][3], alibi["heatmap"], 240)

    # Move the waves slider: the chart must show the library's numbers for the new position.
    browser.execute_script(
        "const s = document.getElementById('waves-position'); s.value = 12345;"
        "s.dispatchEvent(new Event('input'));"
    )
    wait_for(browser, "window.posenc.answers.waves.position === 12345")
    chart = browser.execute_script(
        "const c = window.posenc.charts['waves-chart'];"
        "return {labels: c.data.labels, data: c.data.datasets.map(d => d.data),"
        "        names: c.data.datasets.map(d => d.label)};"
    )
    answer = browser.execute_script("return window.posenc.answers.waves;")
    assert chart["labels"] == answer["positions"] and chart["labels"][0] == 12345
    assert chart["data"] == [c["values"] for c in answer["curves"]]
    assert chart["names"][0] == "column 0"
    for p, value in zip(chart["labels"], chart["data"][0]):
        assert value == pytest.approx(math.sin(p), abs=1e-9)  # PE(p, 0) = sin(p)
    shown = browser.find_element(By.ID, "waves-position-out").text
    assert shown == "12345"

    # Upload a real config: Llama 3.1 keeps pairs 0-28, blends 29-34, interpolates 35-63.
    upload = browser.find_element(By.ID, "stretch-file")
    upload.send_keys(str(ROOT / "tests/configs/llama3.1-8b.json"))
    wait_for(browser, "window.posenc.answers.stretch.source === 'uploaded'")
    classes = browser.execute_script("return window.posenc.answers.stretch.pair_class;")
    assert classes == ["extrapolated"] * 29 + ["blended"] * 6 + ["interpolated"] * 29
    facts = browser.find_element(By.ID, "stretch-facts").text
    assert "rope type llama3" in facts and "29 extrapolated, 6 blended, 29 interpolated" in facts
    colors = browser.execute_script(
        "return window.posenc.charts['stretch-chart'].data.datasets[1].pointBackgroundColor;"
    )
    assert colors[0] != colors[30] != colors[63]

    # A bad value reaches the page as the library's message, not as a broken panel.
    browser.execute_script(
        "const b = document.getElementById('waves-base'); b.value = 1;"
        "b.dispatchEvent(new Event('input'));"
    )
    message = wait_for(browser, "document.getElementById('waves-error').textContent")
    assert message == "[serve] base must be a number in [1.0001, 1e+09], got '1'"
    browser.execute_script(
        "const b = document.getElementById('waves-base'); b.value = 10000;"
        "b.dispatchEvent(new Event('input'));"
    )
    wait_for(browser, "document.getElementById('waves-error').textContent === ''")

    # A layer the config cannot give: the message names the page's layer field, not a flag.
    browser.execute_script(
        "const s = document.getElementById('stretch-source'); s.value = 'smollm3-3b-base';"
        "const l = document.getElementById('stretch-layer'); l.value = '3';"
        "l.dispatchEvent(new Event('input'));"
    )
    message = wait_for(
        browser,
        "window.posenc.pending === 0 && document.getElementById('stretch-error').textContent",
    )
    assert message == (
        "[serve] layer must pick a RoPE layer (layer 3 is nope, full_attention: "
        "it does not rotate q and k), got 3"
    )
    browser.execute_script(
        "const l = document.getElementById('stretch-layer'); l.value = '4';"
        "l.dispatchEvent(new Event('input'));"
    )
    wait_for(
        browser,
        "window.posenc.pending === 0 && "
        "document.getElementById('stretch-error').textContent === ''",
    )
    assert browser.execute_script("return window.posenc.answers.stretch.layer;") == 4
    browser.execute_script(
        "const l = document.getElementById('stretch-layer'); l.value = '';"
        "l.dispatchEvent(new Event('input'));"
    )
    wait_for(browser, "window.posenc.pending === 0 && window.posenc.answers.stretch.layer === null")

    # Order: a new sentence and a shuffle; only "no positions" is blind to it.
    sentence = browser.find_element(By.ID, "order-tokens")
    sentence.clear()
    sentence.send_keys("a dog bites the man")
    wait_for(browser, "window.posenc.answers.order.tokens.length === 5")
    browser.find_element(By.ID, "order-shuffle").click()
    rows = wait_for(
        browser,
        "document.querySelectorAll('#order-table tr').length === 7 && "
        "[...document.querySelectorAll('#order-table tr')].map(r => r.innerText)",
    )
    assert "yes" in rows[1] and all("no: outputs change" in r for r in rows[2:])

    # Quick checks: a guess, then the library's answer.
    first = browser.find_element(By.CSS_SELECTOR, "#checks-list .check button")
    first.click()
    revealed = browser.find_element(By.CSS_SELECTOR, "#checks-list .check .reveal").text
    assert revealed.startswith("right: it holds") and "no positions" in revealed

    # Every control, moved to its ends and middle (every option of each list): the panels
    # redraw from the library with no error.
    controls = browser.execute_script(
        "return [...document.querySelectorAll('input[type=range], select')].map(e => e.id);"
    )
    assert len(controls) == 11
    for control in controls:
        settings = browser.execute_script(
            "const e = document.getElementById(arguments[0]);"
            "if (e.tagName === 'SELECT') return [...e.options].map(o => o.value);"
            "const lo = Number(e.min), hi = Number(e.max);"
            "return [lo, hi, Math.round((lo + hi) / 2)].map(String);",
            control,
        )
        for setting in settings:
            browser.execute_script(
                "const e = document.getElementById(arguments[0]); e.value = arguments[1];"
                "e.dispatchEvent(new Event(e.tagName === 'SELECT' ? 'change' : 'input'));"
                "e.dispatchEvent(new Event('input'));",
                control,
                setting,
            )
            wait_for(browser, "window.posenc.pending === 0")
            errors = browser.execute_script(
                "return [...document.querySelectorAll('.error')].map(e => e.textContent)"
                ".filter(t => t);"
            )
            assert errors == [], (control, setting, errors)

    browser.save_screenshot(str(SCREENSHOT))
    # The 400 the bad base drew is logged by Chromium as a failed resource; anything else is a
    # JavaScript error.
    errors = [e for e in console_errors(browser) if "400 (Bad Request)" not in e["message"]]
    assert errors == []


HOSTILE_TEXT = [
    "<img src=x onerror=\"document.title='pwned'\">",
    "<script>document.title='pwned'</script>",
    "<svg onload=\"document.title='pwned'\"></svg>",
    "&lt;b&gt; & <b>bold</b>",
]


def test_text_from_a_config_is_shown_as_text(server, browser):
    """Configs whose model_type (and a rope_scaling value that reaches an error message) hold
    HTML, pasted into the Stretching panel: no script runs, no element is made, and the text is
    shown literally."""
    browser.get(server)
    browser.execute_async_script(
        "const done = arguments[0]; window.posenc.ready.then(() => done());"
    )
    browser.execute_script("document.title = 'explorer';")
    for text in HOSTILE_TEXT:
        config = {
            "model_type": text,
            "hidden_size": 512,
            "num_attention_heads": 8,
            "rope_theta": 10000.0,
        }
        bad = dict(config, rope_scaling={"rope_type": text, "factor": 2.0})
        for pasted, where in ((config, "stretch-facts"), (bad, "stretch-error")):
            browser.execute_script(
                "const t = document.getElementById('stretch-text'); t.value = arguments[0];"
                "document.getElementById('stretch-source').value = 'pasted';"
                "t.dispatchEvent(new Event('input'));",
                json.dumps(pasted),
            )
            shown = wait_for(
                browser,
                f"window.posenc.pending === 0 && document.getElementById('{where}').textContent",
            )
            # The error message quotes the value with its quotes escaped: up to the first quote.
            assert (text if where == "stretch-facts" else text.split('"')[0]) in shown, shown
            assert browser.title == "explorer"
            made = browser.execute_script(
                "return document.querySelectorAll('main img, main script, main svg').length;"
            )
            assert made == 0
    assert [e for e in console_errors(browser) if "pwned" in e["message"]] == []


def test_screenshots(server, browser):
    """The whole page as it opens, and each heatmap's panel, into the build folder; the whole
    page also to docs/serve.png when POSENC_UPDATE_SCREENSHOT=1 (the image docs/SERVE.md shows).
    The window is first made as tall as the page and the page loaded again at that size, so
    that nothing is drawn while the window changes."""
    browser.get(server)
    browser.execute_async_script(
        "const done = arguments[0]; window.posenc.ready.then(() => done());"
    )
    height = browser.execute_script("return document.documentElement.scrollHeight;")
    chrome = browser.execute_script("return window.outerHeight - window.innerHeight;")
    browser.set_window_size(1400, height + chrome)
    try:
        browser.get(server)
        browser.execute_async_script(
            "const done = arguments[0]; window.posenc.ready.then(() => done());"
        )
        assert browser.execute_script(
            "return window.innerHeight >= document.documentElement.scrollHeight;"
        )
        errors = browser.execute_script(
            "return [...document.querySelectorAll('.error')].map(e => e.textContent)"
            ".filter(t => t);"
        )
        assert errors == []
        page = BUILD / "serve-page.png"
        browser.save_screenshot(str(page))
        if os.environ.get("POSENC_UPDATE_SCREENSHOT") == "1":
            (ROOT / "docs/serve.png").write_bytes(page.read_bytes())
        for panel in ("similarity", "alibi"):
            browser.find_element(By.ID, panel).screenshot(str(BUILD / f"serve-{panel}.png"))
    finally:
        browser.set_window_size(1400, 1700)
