"""The web report's flame graph in a real browser (chromium headless, tests/browser.py):
drawn from the profile's call stacks with the page's own code, CPU/time and
allocated memory, click to zoom in and out, the search marking frames.  The
profile is the ground truth of tests/end_to_end/test_exports.py, so every width and total
is known."""

from __future__ import annotations

import json

import pytest

from browser import Browser, chromium
from test_exports import MB, PROGRAM, stacked_profile, truth

from pyrometer.render import html

# once: the page's scripts in a browser, the same page whichever CPython wrote
# it (tests/pythons.py runs them in one suite; test_cli.py and others check the
# page every suite writes).
pytestmark = [pytest.mark.once, pytest.mark.skipif(
    chromium() is None,
    reason="chromium is not installed (apt-get install chromium; .ci/run installs it): "
           "the web report's browser tests need it")]


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    with Browser(tmp_path_factory.mktemp("chromium")) as b:
        yield b


@pytest.fixture
def page(browser, tmp_path):
    path = tmp_path / "flame.html"
    path.write_text(html.render(stacked_profile()))
    p = browser.open(path)
    p.settle()
    assert p.errors() == [], p.errors()
    assert p.requests() == [p.url], p.requests()
    return p


def boxes(page) -> list[dict]:
    """The flame graph's boxes as drawn: text, width in % of the graph, row, marked or not."""
    return page.eval("""Array.from(document.querySelectorAll('#flame .fb')).map(function (b) {
        var g = document.getElementById('flame').getBoundingClientRect(), r = b.getBoundingClientRect();
        return {text: b.textContent, width: r.width / g.width * 100, row: Math.round((r.top - g.top) / 18),
                match: b.classList.contains('match'), cls: b.className}; })""")


def box(page, text: str) -> dict:
    found = [b for b in boxes(page) if b["text"] == text]
    assert len(found) == 1, (text, boxes(page))
    return found[0]


def click_box(page, text: str) -> None:
    page.eval(f"""Array.from(document.querySelectorAll('#flame .fb'))
        .filter(function (b) {{ return b.textContent === {json.dumps(text)}; }})[0].click()""")


def search(page, text: str) -> None:
    page.eval(f"""(function () {{ var s = document.getElementById('flame-search'); s.value = {json.dumps(text)};
        s.dispatchEvent(new Event('input', {{bubbles: true}})); }})()""")


def test_flame_graph_of_time(page):
    state = page.eval("window.pyrometer.flame()")
    assert state["metric"] == "time" and state["zoom"] == "all"
    assert state["total"] == pytest.approx(truth("time"), rel=1e-3)
    root = box(page, "all")
    assert root["row"] == 0 and root["width"] == pytest.approx(100, abs=0.5)
    main = box(page, "main (app.py:5)")
    assert main["row"] == 1
    # main's share: every stack but the unattributed ones and the other stacks
    assert main["width"] == pytest.approx((truth("time") - 0.03 - 0.03) / truth("time") * 100, abs=0.5)
    native = [b for b in boxes(page) if b["text"] == "[native]"]
    assert len(native) == 3 and all("k-native" in b["cls"] for b in native)
    assert box(page, "[GIL wait]")["row"] == 4  # all (row 0), main, work:14, helper, then the wait


def test_click_zooms_in_and_out(page):
    click_box(page, "work (app.py:14)")
    state = page.eval("window.pyrometer.flame()")
    assert state["zoom"] == "work (app.py:14)"
    view = 0.3 + 0.25 + 0.05 + 0.02  # its own system time and helper's stack
    assert state["view"] == pytest.approx(view, rel=1e-3)
    assert box(page, "work (app.py:14)")["width"] == pytest.approx(100, abs=0.5)
    assert box(page, "helper (app.py:22)")["width"] == pytest.approx(0.32 / view * 100, abs=0.5)
    assert all(b["text"] != "work (app.py:12)" for b in boxes(page))  # a sibling is out of the view
    assert "zoomed into all › main (app.py:5) › work (app.py:14)" in page.eval(
        "document.getElementById('flame-path').textContent")
    click_box(page, "main (app.py:5)")  # a box above: zoom out to it
    assert page.eval("window.pyrometer.flame()")["zoom"] == "main (app.py:5)"
    page.click("#flame-reset")
    assert page.eval("window.pyrometer.flame()")["zoom"] == "all"
    assert box(page, "work (app.py:12)")["width"] > 0


def test_search_marks_matches(page):
    search(page, "HELPER")
    marked = [b["text"] for b in boxes(page) if b["match"]]
    assert marked == ["helper (app.py:22)"]
    share = 0.32 / truth("time") * 100
    assert f"({share:.1f}% of the view)" in page.eval("document.getElementById('flame-match').textContent")
    search(page, "ünï.py")  # the file's name matches too
    assert [b["text"] for b in boxes(page) if b["match"]] == ["Class.method (ünï.py:7)"]
    search(page, "")
    assert not any(b["match"] for b in boxes(page))
    assert page.eval("document.getElementById('flame-match').textContent") == ""


def test_memory_flame_graph(page):
    page.click("#flame-section [data-metric='1']")
    state = page.eval("window.pyrometer.flame()")
    assert state["metric"] == "alloc"
    assert state["total"] == pytest.approx(truth("alloc"), rel=1e-3)
    texts = [b["text"] for b in boxes(page)]
    assert "[native]" not in texts and "[system]" not in texts  # memory is the lines' own
    assert box(page, "work (app.py:14)")["width"] == pytest.approx(4 * MB / truth("alloc") * 100, abs=0.5)
    assert page.eval("document.querySelector(\"[data-metric='1']\").getAttribute('aria-pressed')") == "true"


def test_a_profile_without_stacks_says_so(browser, tmp_path):
    profile = stacked_profile()
    del profile["call_stacks"]
    path = tmp_path / "old.html"
    path.write_text(html.render(profile))
    p = browser.open(path)
    p.settle()
    assert p.errors() == []
    assert "no call stacks" in p.eval("document.getElementById('flame-none').textContent")
    assert p.eval("window.pyrometer.flame()") is None


def test_flame_graph_of_a_run(browser, tmp_path, run_pyrometer):
    """A real run's page: the program's own call path, the sleep as [system] under its line."""
    (tmp_path / "prog.py").write_text(PROGRAM.lstrip("\n"))
    proc = run_pyrometer(["--html", "--quiet", "prog.py"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    p = browser.open(tmp_path / "pyrometer-profile.html")
    p.settle()
    assert p.errors() == []
    texts = [b["text"] for b in boxes(p)]
    assert "outer (prog.py:10)" in texts and "python_work (prog.py:6)" in texts, texts
    search(p, "python_work")
    marked = [b["text"] for b in boxes(p) if b["match"]]
    assert "python_work (prog.py:6)" in marked and all(t.startswith("python_work (") for t in marked), marked
    click_box(p, "outer (prog.py:11)")
    assert p.eval("window.pyrometer.flame()")["zoom"] == "outer (prog.py:11)"
    assert "[system]" in [b["text"] for b in boxes(p)]
