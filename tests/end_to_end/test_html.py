"""The web report in a real browser: Debian's chromium, headless, opening the page
from file:// with every network path closed (tests/browser.py).  Checked from
the DOM: the run summary, the per-line columns, bars and sparklines, hovering,
sorting, collapsing, the reduced view and the function view; that no request
left the page; and that a profile of 200 files and 50k lines opens quickly."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from browser import Browser, chromium
from synthetic import STRING_FIELDS, make_profile

from pyrometer.render import html

# once: the page's scripts in a browser, the same page whichever CPython wrote
# it (tests/pythons.py runs them in one suite; test_cli.py and others check the
# page every suite writes).
pytestmark = [pytest.mark.once, pytest.mark.skipif(
    chromium() is None,
    reason="chromium is not installed (apt-get install chromium; .ci/run installs it): "
           "the web report's browser tests need it")]

PROGRAM = """
import time

def python_hot():
    total = 0
    start = time.perf_counter()
    while time.perf_counter() - start < 0.6:
        for i in range(2000): total += i * i   # @hot
    return total

def allocate():
    keep = []
    for i in range(60):
        keep.append(bytearray(1 << 20))       # @alloc
        sum(range(3000))
    return keep

cold = 1                                      # @cold
python_hot()
kept = allocate()
time.sleep(0.1)                               # @sleep
"""


def lineno(marker: str) -> int:
    lines = PROGRAM.lstrip("\n").splitlines()
    return next(i + 1 for i, line in enumerate(lines) if marker in line)


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    with Browser(tmp_path_factory.mktemp("chromium")) as b:
        yield b


@pytest.fixture(scope="module")
def report(tmp_path_factory, groundtruth_dir):
    """The program profiled with --html: (page path, JSON profile of the same kind of run)."""
    from conftest import program_env  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415
    d = tmp_path_factory.mktemp("html")
    (d / "prog.py").write_text(PROGRAM.lstrip("\n"))
    proc = subprocess.run([sys.executable, "-m", "pyrometer", "--html", "--malloc-threshold", "20", "prog.py"],
                          cwd=d, capture_output=True, text=True, env=program_env(groundtruth_dir), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "", proc.stdout
    assert proc.stderr == "pyrometer: web report written to pyrometer-profile.html (view: open it in a browser)\n", (
        proc.stderr)
    page = d / "pyrometer-profile.html"
    assert page.exists(), "--html did not write pyrometer-profile.html"
    return page


@pytest.fixture
def page(browser, report):
    p = browser.open(report)
    p.settle()
    return p


def rows(page, selector: str = "#F0 .prof.lines") -> list[dict]:
    """The rows of a table, as the reader sees them: line number, class and cell texts."""
    return page.eval(f"""Array.from(document.querySelectorAll({json.dumps(selector)} + " .r")).map(function (r) {{
        return {{cls: r.className, cells: Array.from(r.children).map(function (c) {{ return c.textContent; }}),
                 spark: !!r.querySelector("svg.spark polyline"), bar: !!r.querySelector(".bar i")}}; }})""")


def headers(page, selector: str = "#F0 .prof.lines") -> list[str]:
    return page.eval(f"Array.from(document.querySelectorAll({json.dumps(selector)} + ' .h span'))"
                     ".map(function (h) {{ return h.textContent; }})")


def row_of(page, marker: str) -> dict:
    n = lineno(marker)
    for r in rows(page):
        if r["cells"][0] == str(n):
            return r
    raise AssertionError(f"line {n} ({marker}) not in the table")


def test_page_is_self_contained(report, browser):
    html = report.read_text()
    for pattern in (r"<script[^>]+src=", r"<link\b", r"@import", r"url\(", r"https?://(?!www\.w3\.org/2000/svg)"):
        assert not re.search(pattern, html), f"the page refers to something outside it: {pattern}"
    assert "Content-Security-Policy" in html
    page = browser.open(report)
    page.settle()
    assert page.requests() == [page.url], f"requests left the page: {page.requests()}"
    assert page.errors() == [], page.errors()
    assert page.eval("document.documentElement.dataset.ready") == "1"


def test_summary(page):
    meta = page.eval("document.getElementById('run-meta').textContent")
    assert re.search(r"elapsed \d+\.\d+ s", meta) and re.search(r"\d+ samples", meta), meta
    assert "CPU + memory" in page.eval("document.getElementById('run-options').textContent")
    split = page.eval("Array.from(document.querySelectorAll('#time-split i')).map(function (i) {"
                      " return [i.className, parseFloat(i.style.width)]; })")
    # The wait segment (GIL and CPU) is there when the run waited at all.
    assert [c for c, _ in split] in (["py", "na", "sy"], ["py", "na", "sy", "wt"]), split
    assert abs(sum(w for _, w in split) - 100) < 0.5, split
    # Mostly Python of the time it ran (a busy machine adds wait, which is not
    # the program's doing).
    ran = sum(w for c, w in split if c != "wt")
    assert split[0][1] > 0.3 * ran, f"the run is mostly Python, the chart says {split}"
    memory = page.eval("document.getElementById('card-memory').textContent")
    assert re.search(r"peak \d+\.\d MB", memory), memory
    assert page.eval("document.querySelector('#footprint path.area').getAttribute('d').length") > 20
    top = page.eval("document.getElementById('card-top').textContent")
    assert f"prog.py:{lineno('@alloc')}" in top, top
    assert "Possible leaks" in page.eval("document.getElementById('card-leaks').textContent")


def test_verdict_first(page, report):
    """The verdict (the model's field, tests/accuracy/test_verdict.py) heads the page,
    before the run's figures, its lines linked to their rows."""
    assert page.eval("!!document.getElementById('verdict')"), "no verdict on the page"
    first = page.eval("document.getElementById('verdict').compareDocumentPosition("
                      "document.getElementById('run-meta')) & Node.DOCUMENT_POSITION_FOLLOWING")
    assert first, "the verdict is not above the run's figures"
    summary = page.eval("JSON.parse(document.getElementById('pyrometer-data').textContent).summary.verdict.summary")
    shown = page.eval("document.getElementById('verdict').firstChild.nextSibling.textContent")
    assert shown == " " + summary, (shown, summary)
    links = page.eval("Array.from(document.querySelectorAll('#verdict a[data-goto]')).map(function (a) {"
                      " return a.textContent; })")
    assert f"prog.py:{lineno('@hot')}" in links, links


def test_footprint_hover(page):
    page.hover("#footprint")
    text = page.eval("document.getElementById('tip').textContent")
    assert re.search(r"at \d+\.\d+ s: footprint -?\d+\.\d MB", text), text


def test_line_columns_bars_and_sparklines(page):
    assert headers(page)[:1] == ["Line"]
    for column in ("Time Python", "native", "system", "Memory Python", "peak", "timeline", "%", "Copy MB/s",
                   "source"):
        assert column in headers(page), f"column {column!r} missing: {headers(page)}"
    assert "GPU" not in headers(page)
    hot = row_of(page, "@hot")
    assert "hot" in hot["cls"].split(), hot
    assert re.fullmatch(r"\d+%", hot["cells"][1]), f"Time Python of the hot line: {hot['cells']}"
    assert hot["bar"]
    assert "# @hot" in hot["cells"][-1]
    alloc = row_of(page, "@alloc")
    assert alloc["spark"], f"no sparkline on the allocating line: {alloc}"
    assert re.fullmatch(r"\d+ MB", alloc["cells"][headers(page).index("peak")]), alloc["cells"]
    assert "warm" in alloc["cls"].split() or "hot" in alloc["cls"].split(), alloc
    cold = row_of(page, "@cold")
    assert cold["cls"] == "r" and set(cold["cells"][1:-1]) <= {""}, cold
    # The churn column (the run churned: @hot's ints): tiny temporaries on the
    # arithmetic line, none on the line of 1 MiB bytearrays.
    churn = headers(page).index("churn")
    assert re.fullmatch(r"\d+ MB", hot["cells"][churn]), hot["cells"]
    assert alloc["cells"][churn] == "", alloc["cells"]


@pytest.mark.parametrize("width", [800, 1400])
def test_source_in_view_in_a_narrow_window(width, browser, report):
    """In a window 800 px wide every column is still there, all of them in
    view with the start of the source beside them (not scrolled off to the
    right); the column names are short there, their full names unchanged in
    the page (and the tooltip)."""
    page = browser.open(report)
    browser.send("Emulation.setDeviceMetricsOverride",
                 {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": False}, page.session)
    page.settle()
    n = lineno("@hot")
    geometry = page.eval(f"""(function () {{
        var row = Array.from(document.querySelectorAll("#F0 .prof.lines .r")).find(function (r) {{
            return r.children[0].textContent === "{n}"; }});
        row.scrollIntoView({{block: "center"}});
        return {{view: document.documentElement.clientWidth,
                 cells: Array.from(row.children).map(function (c) {{
                     var b = c.getBoundingClientRect(); return [b.left, b.right, c.className]; }}),
                 shown: Array.from(document.querySelectorAll("#F0 .prof.lines .h > span")).map(function (h) {{
                     return getComputedStyle(h, "::before").content; }})}}; }})()""")
    view, cells = geometry["view"], geometry["cells"]
    assert view <= width
    assert "Memory Python" in headers(page) and "Copy MB/s" in headers(page), headers(page)
    *figures, (src_left, _, cls) = cells
    assert cls == "src"
    for left, right, _ in figures:
        assert right <= view + 0.5, f"a figure column is out of view at {width} px: {cells}"
    assert src_left + 200 <= view, f"the source starts at {src_left} px of {view}: out of view"
    if width == 800:
        assert '"Py"' in geometry["shown"], geometry["shown"]


def test_hover_shows_figures(page):
    n = lineno("@hot")
    page.hover(f"#L0-{n} .bar")
    text = page.eval("document.getElementById('tip').textContent")
    assert f"prog.py:{n}" in text and re.search(r"Python +\d+\.\d%  \(\d+\.\d{3} s\)", text), text
    assert not page.eval("document.getElementById('tip').hidden")
    n = lineno("@alloc")
    page.hover(f"#L0-{n} svg.spark")
    text = page.eval("document.getElementById('tip').textContent")
    assert re.search(r"allocated \d+\.\d MB in \d+ samples", text) and "peak" in text, text


def test_sorting(page):
    column = headers(page).index("Time Python")
    page.click(f"#F0 .prof.lines .h [data-c='{column}']")
    values = [float(r["cells"][column].rstrip("%") or 0) for r in rows(page)]
    assert values == sorted(values, reverse=True), values
    assert rows(page)[0]["cells"][0] == str(lineno("@hot"))
    page.click(f"#F0 .prof.lines .h [data-c='{column}']")
    values = [float(r["cells"][column].rstrip("%") or 0) for r in rows(page)]
    assert values == sorted(values), values
    source = headers(page).index("source")
    page.click(f"#F0 .prof.lines .h [data-c='{source}']")
    texts = [r["cells"][source] for r in rows(page)]
    assert texts == sorted(texts)
    page.click("#F0 .prof.lines .h [data-c='0']")
    numbers = [int(r["cells"][0]) for r in rows(page)]
    assert numbers == sorted(numbers) and len(numbers) == len(PROGRAM.strip("\n").splitlines())


def test_the_page_marks_and_keeps_what_the_model_says(browser, tmp_path, groundtruth_dir):
    """The rule of which lines reach the thresholds (the reduced view keeps
    them) and of how each is marked (hot, warm) is the model's: the page shows
    its decisions, as the terminal does.  Its script had a copy of both, which
    left out GPU time: a GPU-only line kept by --reduced-profile was missing
    from the page.  Made here: the run's @cold line given a GPU share only."""
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415
    from conftest import program_env  # noqa: PLC0415
    from pyrometer import model  # noqa: PLC0415
    from pyrometer.render import html as html_render, text  # noqa: PLC0415
    (tmp_path / "prog.py").write_text(PROGRAM.lstrip("\n"))
    proc = subprocess.run([sys.executable, "-m", "pyrometer", "--quiet", "--json", "--malloc-threshold", "20",
                           "prog.py"], cwd=tmp_path, capture_output=True, text=True,
                          env=program_env(groundtruth_dir), timeout=120)
    assert proc.returncode == 0, proc.stderr
    profile = json.loads((tmp_path / "pyrometer-profile.json").read_text())
    profile["options"]["reduced_profile"] = True
    profile["gpu"] = True
    profile["cpu_samples"] = 7  # few: the shares are rough, the model says, and so must both reports
    assert model.sampling(profile) == "few"
    (f,) = profile["files"].values()
    cold = next(e for e in f["lines"] if "@cold" in e["line"])
    cold["n_gpu_percent"] = 40.0
    limits = model.thresholds(profile)
    kept = {e["lineno"]: model.mark(e, *limits) for e in f["lines"] if model.significant(e, *limits)}
    assert cold["lineno"] in kept and len(kept) >= 3, kept
    page_file = tmp_path / "page.html"
    page_file.write_text(html_render.render(profile))
    page = browser.open(page_file)
    page.settle()
    shown = {int(r["cells"][0]): r["cls"].split()[1:] for r in rows(page)}
    assert shown == {n: [m] if m else [] for n, m in kept.items()}, (shown, kept)
    report = text.render(profile, width=200)
    listed = [line.split("│")[0].strip() for line in report.splitlines() if "│" in line]
    assert {int(n) for n in listed if n.isdigit()} >= set(kept), listed
    # Each line's share of the time (its bar, the order by time) is the model's.
    data = html_render.page_data(profile)["files"][0]["lines"]
    with_rows = {r[0] for r in data["rows"]}
    assert data["shares"] == {str(i): html_render._round(model.time_share(e)) for i, e in enumerate(f["lines"])
                              if i in with_rows and model.time_share(e)}
    assert "Only 7 samples were taken" in report
    assert page.eval("!!document.getElementById('note-few')")


def test_reduced_toggle(page):
    every = [r["cells"][0] for r in rows(page)]
    assert str(lineno("@cold")) in every
    page.click("#reduced")
    page.settle()
    reduced = [r["cells"][0] for r in rows(page)]
    assert str(lineno("@cold")) not in reduced and str(lineno("@hot")) in reduced, reduced
    assert str(lineno("@alloc")) in reduced, "an allocating line over --malloc-threshold is not shown"
    assert len(reduced) < len(every)
    page.click("#reduced")
    page.settle()
    assert [r["cells"][0] for r in rows(page)] == every


def test_files_collapse_and_function_view(page):
    assert page.eval("document.getElementById('F0').classList.contains('open')")
    page.click("#F0 .file-head")
    assert not page.eval("document.getElementById('F0').classList.contains('open')")
    assert page.eval("getComputedStyle(document.querySelector('#F0 .file-body')).display") == "none"
    page.click("#F0 .file-head")
    assert page.eval("document.getElementById('F0').classList.contains('open')")
    page.click("#tab-functions")
    page.settle()
    names = [r["cells"][0] for r in rows(page, "#all-functions")]
    assert "python_hot" in names and "allocate" in names, names
    assert page.eval("document.getElementById('view-lines').hidden")
    # a function's name leads to its line
    page.click("#all-functions a[data-goto]")
    assert not page.eval("document.getElementById('view-lines').hidden")


def test_large_profile_opens_fast(tmp_path, browser, run_pyrometer):
    """200 files, 50k lines: size of the page and time to draw it, then to open
    every file (filled in chunks: no task may hold the page for long)."""
    saved = tmp_path / "big.json"
    saved.write_text(json.dumps(make_profile(200, 250)))
    out = tmp_path / "big.html"
    start = time.perf_counter()
    proc = run_pyrometer(["view", saved, "--html", "-o", out], cwd=tmp_path, timeout=120)
    render_s = time.perf_counter() - start
    assert proc.returncode == 0, proc.stderr
    size = out.stat().st_size
    assert size < 12 << 20, f"page of {size} bytes for 50k lines"
    page = browser.open(out)
    first_ms = page.eval("window.pyrometer.renderMs")
    page.eval("window.__long = []; new PerformanceObserver(function (l) { l.getEntries().forEach(function (e) {"
              " window.__long.push(e.duration); }); }).observe({type: 'longtask'});")
    start = time.perf_counter()
    page.click("#expand-all")
    page.settle(timeout=120)
    expand_s = time.perf_counter() - start
    longest = page.eval("Math.max.apply(null, [0].concat(window.__long))")
    assert page.eval("document.querySelectorAll('.prof.lines .r').length") == 50_000
    print(f"\n50k lines: page {size / 1e6:.1f} MB, written in {render_s:.1f} s; first drawing {first_ms:.0f} ms "
          f"(load {page.load_seconds:.2f} s); every file opened in {expand_s:.1f} s, longest task {longest:.0f} ms")
    assert first_ms < 3000, f"first drawing took {first_ms:.0f} ms"
    assert longest < 2000, f"the page froze for {longest:.0f} ms while opening every file"
    assert page.errors() == []


def test_saved_profile_from_elsewhere_escapes_source_and_shows_gpu(tmp_path, browser, run_pyrometer):
    """A profile from another machine (its files do not exist here), with hostile
    source text and GPU columns: the page shows the JSON's source as text."""
    profile = make_profile(2, 30, seed=3)
    profile["gpu"] = True
    name = next(iter(profile["files"]))
    first = profile["files"][name]["lines"][0]
    first["line"] = "x = '</script><script>document.title = \"pwned\"</script><!--'  # <b>not bold</b>"
    first.update(n_cpu_percent_python=50.0, n_gpu_percent=42.0, n_gpu_peak_memory_mb=512.0)
    saved = tmp_path / "elsewhere.json"
    saved.write_text(json.dumps(profile))
    out = tmp_path / "elsewhere.html"
    proc = run_pyrometer(["view", saved, "--html", "-o", out], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    page = browser.open(out)
    page.settle()
    assert page.eval("document.title") == "pyrometer: synthetic.py"
    assert page.errors() == []
    fi = page.eval(f"Array.from(document.querySelectorAll('.file .name')).findIndex(function (n) {{"
                   f" return n.title === {json.dumps(name)}; }})")
    page.click(f"#F{fi} .file-head") if not page.eval(f"document.getElementById('F{fi}').classList.contains('open')") \
        else None
    cells = page.eval(f"Array.from(document.getElementById('L{fi}-1').children).map(function (c) {{"
                      " return c.textContent; })")
    assert cells[-1] == first["line"]
    assert page.eval(f"document.getElementById('L{fi}-1').querySelector('b')") is None
    heads = headers(page, f"#F{fi} .prof.lines")
    assert "GPU" in heads and cells[heads.index("GPU")] == "42%", (heads, cells)
    assert page.requests() == [page.url]


def test_gpu_kernel_columns(tmp_path, browser, run_pyrometer):
    """With the kernel tier's figures (gpu_kernel_tier "on"): the GPU kernel,
    GPU copy (its tooltip by direction) and GPU alloc columns; without, none."""
    profile = make_profile(1, 20, seed=5)
    profile.update(gpu=True, gpu_kernel_tier="on", gpu_kernels=4, gpu_copies=2, gpu_memsets=0, gpu_allocations=1,
                   gpu_kernel_time_sec=0.24, gpu_kernel_unattributed_sec=0.0, gpu_copy_htod_mb=64.0,
                   gpu_copy_dtoh_mb=16.0, gpu_copy_dtod_mb=0.0, gpu_kernel_records_lost=0)
    name = next(iter(profile["files"]))
    for e in profile["files"][name]["lines"]:
        e.update(n_gpu_percent=0.0, n_gpu_peak_memory_mb=0.0, n_gpu_kernel_sec=0.0, n_gpu_kernels=0,
                 n_gpu_copy_mb=0.0, n_gpu_copy_htod_mb=0.0, n_gpu_copy_dtoh_mb=0.0, n_gpu_copy_dtod_mb=0.0,
                 n_gpu_memset_mb=0.0, n_gpu_alloc_mb=0.0)
    first = profile["files"][name]["lines"][0]
    first.update(n_cpu_percent_python=50.0, n_gpu_kernel_sec=0.24, n_gpu_kernels=4, n_gpu_copy_mb=80.0,
                 n_gpu_copy_htod_mb=64.0, n_gpu_copy_dtoh_mb=16.0, n_gpu_alloc_mb=256.0)
    saved = tmp_path / "kernels.json"
    saved.write_text(json.dumps(profile))
    out = tmp_path / "kernels.html"
    proc = run_pyrometer(["view", saved, "--html", "-o", out], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    page = browser.open(out)
    page.settle()
    assert page.errors() == []
    if not page.eval("document.getElementById('F0').classList.contains('open')"):
        page.click("#F0 .file-head")
    heads = headers(page, "#F0 .prof.lines")
    cells = page.eval("Array.from(document.getElementById('L0-1').children).map(function (c) {"
                      " return c.textContent; })")
    assert cells[heads.index("GPU kernel")] == "240ms", (heads, cells)
    assert cells[heads.index("GPU copy")] == "80 MB", (heads, cells)
    assert cells[heads.index("GPU alloc")] == "256 MB", (heads, cells)
    tip = page.eval("document.getElementById('L0-1').children[%d].querySelector('span').title"
                    % heads.index("GPU copy"))
    assert tip == "HtoD 64.0 MB, DtoH 16.0 MB, DtoD 0.0 MB", tip
    profile["gpu_kernel_tier"] = "busy"
    saved.write_text(json.dumps(profile))
    assert run_pyrometer(["view", saved, "--html", "-o", out], cwd=tmp_path).returncode == 0
    page = browser.open(out)
    page.settle()
    assert "GPU kernel" not in headers(page, "#F0 .prof.lines") and "GPU" in headers(page, "#F0 .prof.lines")


# Markup that, put into the page as markup, adds elements a test can find: a
# form posting to an outside address (what the issue saw), an image (a request),
# a bold word.
MARKUP = ('<form action="http://evil.example/" class="pwn"><input name="q" class="pwn"></form>'
          '<img src="x.png" class="pwn"><b class="pwn">bold</b>')
INJECTED = "document.querySelectorAll('.pwn, form, img, iframe, b').length"


def open_everything(page) -> None:
    """Every table the page can draw, drawn: every file open, the function view."""
    page.settle()
    page.click("#expand-all")
    page.click("#tab-functions")
    page.settle()
    page.click("#tab-lines")


@pytest.mark.parametrize("field", sorted(STRING_FIELDS))
def test_markup_in_any_string_of_the_profile_stays_text(field, tmp_path, browser, run_pyrometer):
    """pyrometer view --html of a profile with markup in one string field: the
    page shows it as text, and no element of it exists in the page."""
    profile = make_profile(2, 30, seed=3)
    STRING_FIELDS[field](profile, MARKUP)
    saved = tmp_path / "crafted.json"
    saved.write_text(json.dumps(profile))
    out = tmp_path / "crafted.html"
    proc = run_pyrometer(["view", saved, "--html", "-o", out], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    page = browser.open(out)
    open_everything(page)
    assert page.eval(INJECTED) == 0, f"{field}: markup from the profile became elements"
    if field == "file name":  # shown relative and normalised ("//" is "/"); in full as the title
        assert page.eval("Array.from(document.querySelectorAll('.file .name')).some(function (n) {"
                         f" return n.title === {json.dumps(MARKUP)}; }})"), "the file name is not shown"
    elif field not in ("python_allocator", "a field of a newer pyrometer"):  # not shown by the page
        assert page.eval(f"document.body.textContent.indexOf({json.dumps(MARKUP)}) >= 0"), \
            f"{field}: not shown as text"
    assert page.requests() == [page.url]
    assert page.errors() == []


def test_page_escapes_even_what_check_refuses(tmp_path, browser):
    """The page does not rely on model.check: markup where the profile has
    numbers (line numbers, the exit status) or line-number keys (leaks) is
    still shown as text, by the page script itself."""
    profile = make_profile(1, 30, seed=3)
    f = next(iter(profile["files"].values()))
    f["lines"][0].update(lineno=MARKUP, n_cpu_percent_python=60.0)
    f["functions"][0]["lineno"] = MARKUP
    f["leaks"] = {MARKUP: {"likelihood": 0.99, "velocity_mb_s": 0.5, "growth_mb": 30.0}}
    profile["exit_status"] = MARKUP
    profile["max_footprint_where"]["lineno"] = MARKUP
    profile["top_allocations"][0].update(filename="/elsewhere.py", lineno=MARKUP)
    out = tmp_path / "unchecked.html"
    out.write_text(html.render(profile))
    page = browser.open(out)
    open_everything(page)
    assert page.eval(INJECTED) == 0, "markup in a number field became elements"
    text = page.eval("document.body.textContent")
    for where in ("exit status " + MARKUP, "at module_000.py:" + MARKUP, "/elsewhere.py:" + MARKUP,
                  "possible leak at line " + MARKUP):
        assert where in text, where
    assert page.requests() == [page.url]
