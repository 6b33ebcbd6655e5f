"""In-process profiling and Jupyter: profile_this outside notebooks, and the
%pyrometer / %%pyrometer magics in real kernels (nbclient executing a
notebook), both in a plain python3 kernel (CPU only, with a note) and in the
kernel that `pyrometer kernel install` installs (CPU and memory, native too)."""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import program_env

MB = 1048576
# A 50 MiB numpy array is one allocation bigger than the sampling window, so it
# is a sample of its own size: the line's allocation is that exactly, plus what
# Python allocates on the way (a few KiB).  The tolerance covers a window either way.
ALLOCATED_MB = 50
ALLOCATED_TOLERANCE_MB = 3

BUSY_CELL = """\
%%pyrometer
import time

def busy(seconds):
    start, total = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        total += sum(i * i for i in range(500))  # busy line
    return total

busy(0.6)
"""

ALLOC_CELL = """\
%%pyrometer --cli
import numpy as np
keep = np.ones(50 * 1048576 // 8)  # alloc line
"""

LINE_MAGIC = "%pyrometer --cli busy(0.3)"

# profile_this in a notebook: the function of another cell is the program's too.
# The line is picked by how it ends: this cell is the program's as well, and
# when a sample lands in profile_this itself (before or after the call) the cell's
# line that called it is charged, and the whole cell listed, this line among them.
PROFILE_THIS_CELL = """\
import json, pyrometer
result, profile = pyrometer.profile_this(busy, 0.3)
print(json.dumps([[l["line"], l["n_cpu_percent_python"] + l["n_cpu_percent_c"]]
                  for f in profile["files"].values() for l in f["lines"] if l["line"].endswith("# busy line")]))
"""

# The user's own module, in the notebook's folder: the program's too.
HELPER = """\
import time

def spin(seconds):
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        sum(i * i for i in range(500))  # helper line
"""
HELPER_CELL = """\
%%pyrometer --cli
import helper
helper.spin(0.3)
"""

# What the magic leaves in the namespace, read back as one line of JSON.
INSPECT_CELL = """\
import json
print(json.dumps({"memory": _pyrometer_profile["memory"], "notices": _pyrometer_profile["notices"],
                  "lines": [l for f in _pyrometer_profile["files"].values() for l in f["lines"]
                            if "alloc line" in l["line"]]}))
"""


def _notebook(cells: list[str]):
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    return nb


def _execute(nb, kernel_name: str, cwd: Path):
    nbclient = pytest.importorskip("nbclient")
    (cwd / "helper.py").write_text(HELPER)
    client = nbclient.NotebookClient(nb, kernel_name=kernel_name, timeout=120,
                                     resources={"metadata": {"path": str(cwd)}})
    client.execute()
    return nb


def _outputs(cell, mime: str) -> list[str]:
    out = []
    for o in cell.outputs:
        if o.output_type in ("display_data", "execute_result") and mime in o.get("data", {}):
            out.append(o["data"][mime])
        elif mime == "text/plain" and o.output_type == "stream":
            out.append(o["text"])
    return out


def _row(text: str, marker: str) -> str:
    rows = [line for line in text.splitlines() if marker in line]
    assert rows, f"no row with {marker!r} in:\n{text}"
    return rows[0]


def _check_busy_cell(cell) -> None:
    (page,) = _outputs(cell, "text/html")
    # The web report, self-contained, in a sandboxed frame: scripts run in an
    # opaque origin, and nothing is fetched.
    match = re.fullmatch(r'<iframe srcdoc="([^"]*)" sandbox="allow-scripts" [^>]*></iframe>', page)
    assert match, page[:300]
    document = html.unescape(match.group(1))
    assert document.startswith("<!DOCTYPE html>")
    assert "default-src 'none'" in document
    assert not re.search(r"<script[^>]*\bsrc=|<link\b|\b(?:src|href)=[\"']?(?:https?:)?//", document)
    assert "busy line" in document  # the cell's source is in the page
    # The text report beside it, for plain frontends, charges the loop; then
    # the cell's last expression's value, as a cell shows it.
    text, value = _outputs(cell, "text/plain")
    assert re.search(r"\d+%", _row(text, "# busy line")), text
    assert cell.outputs[-1].output_type == "execute_result" and int(value) > 0
    assert 'pre>pyrometer: In [' in document  # the text report, where the script cannot draw


def _check_helper_cell(cell) -> None:
    text = "".join(_outputs(cell, "text/plain"))
    assert "helper.py" in text and re.search(r"\d+%", _row(text, "# helper line")), text


@pytest.fixture(scope="module")
def jupyter_ready():
    for name in ("ipykernel", "jupyter_client", "nbclient", "nbformat", "IPython", "numpy"):
        pytest.importorskip(name)


def test_plain_kernel_profiles_cpu_and_memory(jupyter_ready, tmp_path):
    """A kernel started without pyrometer: the first magic attaches the memory
    library to it (preload.attach), so memory is profiled, native included."""
    nb = _execute(_notebook(["%load_ext pyrometer", BUSY_CELL, LINE_MAGIC, ALLOC_CELL, INSPECT_CELL,
                             PROFILE_THIS_CELL, HELPER_CELL]), "python3", tmp_path)
    _check_busy_cell(nb.cells[1])
    line_text = "".join(_outputs(nb.cells[2], "text/plain"))
    assert "busy line" in line_text and "text/html" not in str(nb.cells[2].outputs)
    alloc_text = "".join(_outputs(nb.cells[3], "text/plain"))
    assert "memory was not profiled" not in alloc_text and "alloc line" in alloc_text
    facts = json.loads(_outputs(nb.cells[4], "text/plain")[0])
    assert facts["memory"] is True, facts
    (line,) = facts["lines"]
    assert abs(line["n_malloc_mb"] - ALLOCATED_MB) <= ALLOCATED_TOLERANCE_MB, line
    ((line, cpu),) = json.loads(_outputs(nb.cells[5], "text/plain")[0])
    assert line.endswith("# busy line") and cpu > 0
    _check_helper_cell(nb.cells[6])


@pytest.fixture()
def pyrometer_kernel(jupyter_ready, tmp_path, monkeypatch) -> str:
    """`pyrometer kernel install` into a temporary prefix, which Jupyter then searches."""
    prefix = tmp_path / "prefix"
    proc = subprocess.run([sys.executable, "-m", "pyrometer", "kernel", "install", "--name", "pyrometer-test",
                           "--prefix", str(prefix)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    monkeypatch.setenv("JUPYTER_PATH", str(prefix / "share" / "jupyter"))
    listed = subprocess.run([sys.executable, "-m", "pyrometer", "kernel", "list"], capture_output=True,
                            text=True, timeout=60)
    assert "pyrometer-test\t" in listed.stdout
    return "pyrometer-test"


def test_pyrometer_kernel_profiles_memory_native_too(pyrometer_kernel, tmp_path):
    nb = _execute(_notebook(["%load_ext pyrometer", BUSY_CELL, LINE_MAGIC, ALLOC_CELL, INSPECT_CELL,
                             "import os; print(os.environ.get('LD_PRELOAD', ''))", HELPER_CELL]),
                  pyrometer_kernel, tmp_path)
    _check_busy_cell(nb.cells[1])
    alloc_text = "".join(_outputs(nb.cells[3], "text/plain"))
    assert "memory was not profiled" not in alloc_text
    assert "Memory" in alloc_text and "peak" in alloc_text  # the memory columns
    assert "alloc line" in alloc_text
    facts = json.loads(_outputs(nb.cells[4], "text/plain")[0])
    assert facts["memory"] is True
    (line,) = facts["lines"]
    # numpy's buffer comes from malloc: native memory, which only the preloaded library sees.
    assert abs(line["n_malloc_mb"] - ALLOCATED_MB) <= ALLOCATED_TOLERANCE_MB, line
    assert abs(line["n_peak_mb"] - ALLOCATED_MB) <= ALLOCATED_TOLERANCE_MB, line
    # The notebook's own processes (!pip, subprocess) do not inherit the library.
    assert "pyrometer_memhooks" not in "".join(_outputs(nb.cells[5], "text/plain"))
    _check_helper_cell(nb.cells[6])


def test_kernel_uninstall(pyrometer_kernel):
    proc = subprocess.run([sys.executable, "-m", "pyrometer", "kernel", "uninstall", "--name", pyrometer_kernel],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    again = subprocess.run([sys.executable, "-m", "pyrometer", "kernel", "uninstall", "--name", pyrometer_kernel],
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 1 and again.stderr.count("\n") == 1, again.stderr


PROFILE_THIS = """
import pyrometer
from pyrometer.render import report

def busy(seconds):
    import time
    start, total = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        total += sum(i * i for i in range(500))  # busy line
    return total

result, profile = pyrometer.profile_this(busy, 0.4)
assert result > 0
text = report(profile, "text", width=200)
print(text)
assert "<html" in report(profile, "html") and report(profile, "json").startswith("{")
try:
    pyrometer.profile_this(lambda: 1 / 0)
except ZeroDivisionError:
    print("raised through")
"""


def test_profile_this_outside_notebooks(tmp_path, groundtruth_dir):
    (tmp_path / "prog.py").write_text(PROFILE_THIS)
    proc = subprocess.run([sys.executable, "prog.py"], cwd=tmp_path, capture_output=True, text=True,
                          env=program_env(groundtruth_dir), timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"\d+%", _row(proc.stdout, "# busy line")), proc.stdout
    # The memory library is attached to the running program: memory profiled too,
    # the busy line's ints (above 256: made and freed at once) seen as churn,
    # on every version (on 3.14 and 3.15 nothing else is allocated: no top
    # allocating lines there).
    assert "memory was not profiled" not in proc.stdout, proc.stdout
    churn = proc.stdout.split("Churn of tiny temporaries", 1)
    assert len(churn) == 2 and "prog.py:9:" in churn[1], proc.stdout
    assert "raised through" in proc.stdout


TWO_RUNS = """
import pyrometer
keep = []
def first():
    keep.append([bytearray(1 << 20) for _ in range(30)])
def second():
    keep.append([bytearray(1 << 20) for _ in range(40)])
def third():
    keep.clear()  # frees the 70 MiB the runs before kept
    return [bytearray(1 << 20) for _ in range(20)]
for f in (first, second, third):
    _, p = pyrometer.profile_this(f)
    print(f.__name__, p["memory"], p["max_footprint_mb"], p["footprint_mb"])
"""


def test_each_run_counts_its_footprint_from_its_start(tmp_path, groundtruth_dir):
    """Several profiles in one process (profile_this, the pytest plugin's one per
    test): each one's footprint is net bytes since it started, not since the
    first.  The library's counter ran on across them: the second run read a peak
    of 70 MiB for its 40, and, after a run that freed what earlier runs kept, a
    later run's peak read 0 for what it allocated and kept (the pytest plugin's
    xdist workers)."""
    from pyrometer.core.preload import memhooks_library  # noqa: PLC0415
    (tmp_path / "prog.py").write_text(TWO_RUNS)
    env = program_env(groundtruth_dir, {"LD_PRELOAD": memhooks_library()})
    proc = subprocess.run([sys.executable, "prog.py"], cwd=tmp_path, capture_output=True, text=True,
                          env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    runs = {name: (memory, float(peak), float(end)) for name, memory, peak, end in
            (line.split() for line in proc.stdout.splitlines())}
    assert all(memory == "True" for memory, _, _ in runs.values()), proc.stdout
    # Each block a window or more: sampled exactly (1 MiB; the lists add a little).
    assert runs["first"][1] == pytest.approx(30, abs=1) and runs["first"][2] == pytest.approx(30, abs=1)
    assert runs["second"][1] == pytest.approx(40, abs=1) and runs["second"][2] == pytest.approx(40, abs=1)
    # 70 MiB freed, 20 kept: net -50 since it started, so no peak above its start.
    assert runs["third"][1] == pytest.approx(0, abs=1) and runs["third"][2] == pytest.approx(-50, abs=1)


def test_profile_this_under_the_command_is_refused(tmp_path, groundtruth_dir):
    (tmp_path / "prog.py").write_text(textwrap.dedent("""
        import pyrometer
        try:
            pyrometer.profile_this(print, "x")
        except RuntimeError as e:
            print("refused:", e)
    """))
    proc = subprocess.run([sys.executable, "-m", "pyrometer", "--cpu-only", "prog.py"], cwd=tmp_path,
                          capture_output=True, text=True, env=program_env(groundtruth_dir), timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "refused: pyrometer is already profiling this process" in proc.stdout


def test_magic_options_split_like_the_command():
    pytest.importorskip("IPython")
    from pyrometer.integrations.jupyter import split_options
    assert split_options("--cli --cpu-sampling-rate 0.001 f(x,  'a b')") == (
        ["--cli", "--cpu-sampling-rate", "0.001"], "f(x,  'a b')")
    assert split_options("--profile-only=foo -x + 1") == (["--profile-only=foo"], "-x + 1")
    assert split_options("-- --cli") == ([], "--cli")
    assert split_options("--cli\tf()") == (["--cli"], "f()")
    from IPython.core.error import UsageError
    with pytest.raises(UsageError):
        split_options("--cpu-onyl f()")


# Jupyter's server sends no script policy by default (frame-ancestors only), so
# the frame runs as in a page without one; a frontend with a strict policy of
# its own is checked too, with what the report needs there said below.
HOST_POLICIES = {"jupyter-default": "", "no-inline-scripts":
                 "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'self'; script-src 'self'\">"}


def _frame_session(browser, page) -> tuple[str, dict]:
    """A debugger session in the page's iframe, and its target.  Chromium runs a
    sandboxed frame (an opaque origin) in a process of its own: it is reached
    as a target of its own, which the host page's script cannot enter."""
    browser.send("Target.setAutoAttach", {"autoAttach": True, "waitForDebuggerOnStart": False, "flatten": True},
                 page.session)
    event = browser.wait_event("Target.attachedToTarget", page.session)
    session = event["params"]["sessionId"]
    browser.send("Runtime.enable", {}, session)
    return session, event["params"]["targetInfo"]


def test_framed_report_draws_in_a_browser_with_no_network(tmp_path):
    browser_module = pytest.importorskip("browser")
    if browser_module.chromium() is None:
        pytest.skip("chromium is not installed (tests/browser.py)")
    pytest.importorskip("IPython")
    from pyrometer.integrations import inprocess
    from pyrometer.integrations.jupyter import frame
    from pyrometer.render import report

    def busy():
        start = time.perf_counter()
        while time.perf_counter() - start < 0.3:
            sum(i * i for i in range(500))  # busy line

    _, profile = inprocess.profile_this(busy)
    framed = frame(report(profile, "html"), report(profile, "text"))
    for name, policy in HOST_POLICIES.items():
        (tmp_path / f"{name}.html").write_text(f"<!DOCTYPE html><html><head>{policy}</head><body>{framed}</body></html>")
    with browser_module.Browser(tmp_path / "chromium") as b:
        page = b.open(tmp_path / "jupyter-default.html")
        frame_session, target = _frame_session(b, page)
        assert target["type"] == "iframe"
        drawn = b.send("Runtime.evaluate", {
            "expression": "new Promise(function (done) { (function poll() {"
                          " if (window.pyrometer && window.pyrometer.pending() === 0) done(document.body.innerText);"
                          " else setTimeout(poll, 10); })(); })",
            "returnByValue": True, "awaitPromise": True}, frame_session)
        shown = drawn["result"]["value"]  # the first rows only: long files are drawn as they scroll
        assert "charged to the program" in shown and "test_jupyter.py\n100.0%" in shown, shown[:2000]
        # The sandbox: the host page cannot reach into the report, nor it out.
        assert page.eval("(function () { try { return !!document.querySelector('iframe').contentDocument; }"
                         " catch (e) { return false; } })()") is False
        assert [u for u in page.requests() if not u.startswith("file:")] == []
        assert page.errors() == []
        # A frontend whose policy forbids inline scripts forbids them in the
        # frame too: the frame shows the text report then, not a blank page.
        strict = b.open(tmp_path / "no-inline-scripts.html")
        frame_session, _ = _frame_session(b, strict)
        shown = b.send("Runtime.evaluate", {"expression": "document.body.innerText", "returnByValue": True},
                       frame_session)["result"]["value"]
        assert "# busy line" in shown and "function summary" in shown


def test_cell_names_of_either_shell():
    pytest.importorskip("IPython")
    from pyrometer.integrations.cells import cell_prefixes

    class Compiler:
        def __init__(self, name):
            self.get_code_name = lambda raw, transformed, number: name

    class Shell:
        def __init__(self, name):
            self.compile = Compiler(name)

    assert cell_prefixes(Shell("/tmp/ipykernel_12/3456.py")) == ["/tmp/ipykernel_12/"]
    assert cell_prefixes(Shell("<ipython-input-0-5f2a9c1b>")) == ["<ipython-input-"]


def test_top_level_await_is_refused_in_one_line():
    pytest.importorskip("IPython")
    from IPython.core.error import UsageError
    from pyrometer.integrations.jupyter import _compiled
    with pytest.raises(UsageError, match="top-level await"):
        _compiled("import asyncio\nawait asyncio.sleep(0)\n", "<cell>", 0)
    body, last = _compiled("async def f():\n    await g()\nf\n", "<cell>", 0)
    assert last is not None


def test_kernelspec_written_without_jupyter(tmp_path, monkeypatch):
    """pyrometer does not depend on Jupyter: without jupyter_client and
    jupyter_core the kernelspec is written, and found, where Jupyter looks."""
    from pyrometer.integrations import kernel
    monkeypatch.setitem(sys.modules, "jupyter_client.kernelspec", None)  # import fails
    monkeypatch.setitem(sys.modules, "jupyter_core.paths", None)
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "elsewhere"))
    path = kernel.install("My-Kernel", user=True)
    assert path == str(tmp_path / "data" / "kernels" / "my-kernel")
    spec = json.loads((Path(path) / "kernel.json").read_text())
    assert spec["argv"] == [sys.executable, "-m", "pyrometer.integrations.kernel", "-f", "{connection_file}"]
    assert spec["language"] == "python"
    assert kernel.installed() == {"my-kernel": path}
    prefixed = kernel.install("p", prefix=str(tmp_path / "prefix"))
    assert prefixed == str(tmp_path / "prefix" / "share" / "jupyter" / "kernels" / "p")
    # Another kernel of the same name is not ours: never listed, never removed.
    other = tmp_path / "elsewhere" / "kernels" / "python3"
    other.mkdir(parents=True)
    (other / "kernel.json").write_text(json.dumps({"argv": ["python", "-m", "ipykernel_launcher"]}))
    assert "python3" not in kernel.installed()
    assert kernel.command(["uninstall", "--name", "python3"]) == 1 and other.exists()
