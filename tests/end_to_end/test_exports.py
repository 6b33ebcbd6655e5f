"""The exports of the call stacks (docs/exports.md): pprof read back by `go tool
pprof` (-top per sample type, -traces), speedscope validated against its
published schema (tests/data/), folded stacks, the Firefox Profiler's processed
format, and `pyrometer view` converting a saved profile.

The ground truth is a profile whose stacks are written here (the contract of
docs/profile-schema.md, "call_stacks"): every export must show exactly its
figures, per metric, with the synthetic leaf frames where the contract puts
them.  A real run is exported too, its totals compared with the profile's."""

from __future__ import annotations

import copy
import gzip
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from synthetic import make_profile

from pyrometer import model
from pyrometer.render import collapsed, firefox, pprof, speedscope
from pyrometer.render.frames import METRICS, ExportError, Stacks, metrics

DATA = Path(__file__).resolve().parent.parent / "data"
GO = shutil.which("go")
needs_go = pytest.mark.skipif(GO is None, reason="go is not installed (apt-get install golang-go; .ci/run "
                                                 "installs it): the pprof export is read back by go tool pprof")
MB = 1 << 20

A, B = "/home/someone/project/app.py", "/home/someone/project/odd;dir/ünï.py"
FRAMES = [
    {"filename": A, "function": "main", "first_lineno": 1, "lineno": 5},            # 0
    {"filename": A, "function": "work", "first_lineno": 10, "lineno": 12},          # 1
    {"filename": A, "function": "work", "first_lineno": 10, "lineno": 14},          # 2
    {"filename": A, "function": "helper", "first_lineno": 20, "lineno": 22},        # 3
    {"filename": B, "function": "Class.method", "first_lineno": 3, "lineno": 7},    # 4
]


def _stack(path, python=0.0, native=0.0, system=0.0, gil=0.0, cpu=0.0, malloc=0, copy_bytes=0, samples=1):
    s = {"python_sec": python, "native_sec": native, "system_sec": system, "gil_wait_sec": gil,
         "cpu_wait_sec": cpu, "samples": samples, "malloc_bytes": malloc, "python_malloc_bytes": malloc // 2,
         "free_bytes": 0, "copy_bytes": copy_bytes}
    if path is not None:
        s["path"] = path
    return s


STACKS = [
    _stack([0], python=0.1),
    _stack([0, 1], python=0.5, native=0.2, samples=70),
    _stack([0, 2], system=0.3, malloc=4 * MB, copy_bytes=1 * MB, samples=30),
    _stack([0, 2, 3], python=0.25, gil=0.05, cpu=0.02, samples=32),
    _stack([0, 4], native=0.4, malloc=2 * MB + 123, samples=40),
    _stack([], python=0.01, native=0.02, samples=3),
]
OTHER = _stack(None, python=0.03, malloc=4096, samples=3)
FIELDS = {"python": "python_sec", "native": "native_sec", "system": "system_sec", "gil_wait": "gil_wait_sec",
          "cpu_wait": "cpu_wait_sec", "alloc": "malloc_bytes", "copy": "copy_bytes"}


def truth(metric: str) -> float:
    """The metric summed over the stacks of the ground truth (and "other")."""
    if metric == "time":
        return sum(truth(m) for m in ("python", "native", "system", "gil_wait", "cpu_wait"))
    return sum(s[FIELDS[metric]] for s in [*STACKS, OTHER])


def stacked_profile(memory: bool = True) -> dict:
    """A small synthetic profile (tests/synthetic.py) with the stacks above, its
    header's totals those of the stacks, checked by the model as a saved one is."""
    profile = make_profile(n_files=2, lines_per_file=30, memory=memory, elapsed=2.5)
    stacks = copy.deepcopy(STACKS + [OTHER])
    if not memory:
        for s in stacks:
            for k in ("malloc_bytes", "python_malloc_bytes", "free_bytes", "copy_bytes"):
                del s[k]
    profile["call_stacks"] = {"frames": copy.deepcopy(FRAMES), "stacks": stacks[:-1], "other": stacks[-1],
                              "cap": 20000, "max_depth": 128}
    profile["cpu_time_sec"] = {"python": truth("python"), "native": truth("native"), "system": truth("system"),
                               "gil_wait": truth("gil_wait"), "cpu_wait": truth("cpu_wait")}
    return model.check(json.loads(json.dumps(profile)))


# ---- the model of the exports (render/frames.py) ----

def test_weighted_stacks_put_each_kind_under_its_leaf_frame():
    stacks = Stacks(stacked_profile())
    names = [f.function for f in stacks.frames]
    got = {tuple(names[f] for f in path): value for path, value in stacks.weighted(METRICS["time"])}
    assert got[("main", "work", "[native]")] == 0.2
    assert got[("main", "work")] == 0.5
    assert got[("main", "work", "[system]")] == 0.3
    assert got[("main", "work", "helper", "[GIL wait]")] == 0.05
    assert got[("main", "work", "helper", "[CPU wait]")] == 0.02
    assert got[("[unattributed]",)] == 0.01 and got[("[unattributed]", "[native]")] == 0.02
    assert got[("[other stacks]",)] == 0.03
    assert sum(got.values()) == pytest.approx(truth("time"))
    for m in ("python", "native", "system", "gil_wait", "cpu_wait", "alloc", "copy"):
        assert stacks.total(METRICS[m]) == pytest.approx(truth(m)), m
    assert [m.name for m in metrics(stacked_profile(memory=False))] == [
        "time", "python", "native", "system", "gil_wait", "cpu_wait"]


def test_a_damaged_path_is_refused():
    profile = stacked_profile()
    profile["call_stacks"]["stacks"][1]["path"] = [0, -1]
    with pytest.raises(ExportError, match="damaged"):
        Stacks(profile)


def test_a_frame_without_a_file_name_is_the_programs():
    """A frame whose file name is "" (code compiled with that name; the fuzzer
    made one named "main") is a frame of the profile, not one of the synthetic
    frames the exports add: the flame graph and the Firefox export once looked
    its name up among those and failed."""
    from pyrometer.render import html
    profile = stacked_profile()
    profile["call_stacks"]["frames"][0]["filename"] = ""
    stacks = Stacks(profile)
    assert not stacks.frames[0].synthetic
    assert all(f.synthetic for f in stacks.frames[len(FRAMES):])
    flame = html.flame_data(profile)
    assert flame["frames"][0] == ["main", "", 5, html.FLAME_KINDS[None]]
    thread = firefox.document(profile)["threads"][0]
    assert thread["funcTable"]["isJS"][thread["frameTable"]["func"][0]] is True


# ---- pprof ----

def go_pprof(*args: str) -> str:
    proc = subprocess.run([GO, "tool", "pprof", *args], capture_output=True, text=True, timeout=300,
                          env={"HOME": "/tmp", "PATH": "/usr/bin:/bin", "GOCACHE": "/tmp/go-cache",
                               "GOFLAGS": "-mod=mod", "PPROF_TMPDIR": "/tmp"})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def pprof_total(path: Path, sample_type: str, unit: str) -> float:
    """The total go tool pprof -top gives for a sample type, in the given unit."""
    out = go_pprof("-top", f"-sample_index={sample_type}", f"-unit={unit}", str(path))
    found = re.search(r"of ([0-9.e+]+)([a-zA-Z]*) total", out)
    assert found, out
    return float(found.group(1))


@needs_go
def test_pprof_totals_per_sample_type_are_the_profiles(tmp_path):
    profile = stacked_profile()
    path = tmp_path / "profile.pb.gz"
    path.write_bytes(pprof.render(profile))
    assert path.read_bytes()[:2] == b"\x1f\x8b"  # gzipped
    for m, sample_type in pprof.SAMPLE_TYPES.items():
        if m == "gpu":
            continue
        unit = "ns" if METRICS[m].unit == "seconds" else "B"
        expected = truth(m) * (1e9 if unit == "ns" else 1)
        # -unit=ns / B: whole numbers, exact to the nanosecond (each stack's share rounded)
        assert pprof_total(path, sample_type, unit) == pytest.approx(expected, abs=len(STACKS) + 1), sample_type


@needs_go
def test_pprof_traces_are_the_stacks_leaf_first(tmp_path):
    path = tmp_path / "profile.pb.gz"
    path.write_bytes(pprof.render(stacked_profile()))
    traces = go_pprof("-traces", "-sample_index=native_cpu", str(path))
    # after a header, each trace: its value and the leaf frame, then the callers
    shown = []
    for block in traces.split("-----------+-------------------------------------------------------")[1:]:
        lines = [line.strip() for line in block.strip().splitlines() if line.strip()]
        if not lines:
            continue
        value, leaf = lines[0].split(None, 1)
        if value != "0":  # a stack with other kinds of figures only
            shown.append([leaf, *lines[1:]])
    assert ["[native]", "work", "main"] in shown, traces
    assert ["[native]", "Class.method", "main"] in shown, traces
    assert ["[native]", "[unattributed]"] in shown, traces
    assert len(shown) == 3, traces  # the stacks with native time, no other
    # lines as locations: the file and line of each frame
    listing = go_pprof("-traces", "-lines", "-sample_index=alloc_space", str(path))
    assert "app.py:14" in listing and "ünï.py:7" in listing, listing


def test_pprof_encoder_varints():
    assert pprof.varint(0) == b"\x00"
    assert pprof.varint(1) == b"\x01"
    assert pprof.varint(300) == b"\xac\x02"
    assert pprof.varint(-1) == b"\xff" * 9 + b"\x01"  # an int64 -1: ten bytes
    assert gzip.decompress(pprof.render(stacked_profile())) == pprof.encode(stacked_profile())


# ---- speedscope ----

def test_speedscope_is_valid_against_the_published_schema():
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema (the test extra) validates the file")
    schema = json.loads((DATA / "speedscope-file-format-schema.json").read_text())
    for memory in (True, False):
        doc = json.loads(speedscope.render(stacked_profile(memory)))
        jsonschema.validate(doc, schema)
    # the schema is not toothless: a file without its frames is refused
    broken = dict(doc, shared={})
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema)


def test_speedscope_one_profile_per_metric_with_the_profiles_figures():
    doc = json.loads(speedscope.render(stacked_profile()))
    frames = doc["shared"]["frames"]
    assert frames[2] == {"name": "work", "file": A, "line": 14}
    by_name = {p["name"].split(": ", 1)[1]: p for p in doc["profiles"]}
    assert list(by_name) == [m.label for m in METRICS.values() if m.name != "gpu"]
    for m in METRICS.values():
        if m.name == "gpu":
            continue
        p = by_name[m.label]
        assert p["type"] == "sampled" and p["unit"] == m.unit
        assert len(p["samples"]) == len(p["weights"])
        assert sum(p["weights"]) == pytest.approx(truth(m.name)) == pytest.approx(p["endValue"])
    time = by_name[METRICS["time"].label]
    stacks = [[frames[i]["name"] for i in s] for s in time["samples"]]
    assert ["main", "work", "helper", "[GIL wait]"] in stacks


# ---- folded stacks ----

def parse_folded(text: str) -> dict[str, int]:
    out = {}
    for line in text.splitlines():
        stack, value = line.rsplit(" ", 1)
        out[stack] = int(value)
    return out


def test_collapsed_one_metric_per_file():
    profile = stacked_profile()
    time = parse_folded(collapsed.render(profile))
    assert sum(time.values()) == pytest.approx(truth("time") * 1e9, abs=len(time))
    assert time["main (app.py:5);work (app.py:12);[native]"] == 200_000_000
    # a ";" in a file name would split the frame: it is written as ","
    assert any("odd,dir/ünï.py:7" in s for s in time), time
    assert all(s.count(";") == len(s.split(";")) - 1 for s in time)
    alloc = parse_folded(collapsed.render(profile, "alloc"))
    assert sum(alloc.values()) == truth("alloc")
    assert alloc["[other stacks]"] == 4096
    assert all("[native]" not in s for s in alloc)  # memory is the leaf line's own
    with pytest.raises(ExportError, match="memory was not profiled"):
        collapsed.render(stacked_profile(memory=False), "alloc")


def test_collapsed_bounds_a_hostile_stack():
    """One 4 KB function name in a stack 65,536 frames deep (what the schema
    allows) wrote 263 MB of folded text: each frame's text and each stack's
    depth are bounded, the value and both ends of the stack kept."""
    profile = stacked_profile()
    depth = 1 << 16
    long_name = "f" * 4096
    profile["call_stacks"]["frames"].append({"filename": A, "function": long_name, "first_lineno": 30,
                                             "lineno": 31})
    deep = _stack([0, *[len(FRAMES)] * (depth - 2), 3], python=0.5, samples=50)
    profile["call_stacks"]["stacks"].append(deep)
    profile["call_stacks"]["max_depth"] = depth
    profile["cpu_time_sec"]["python"] += 0.5
    profile = model.check(json.loads(json.dumps(profile)))
    text = collapsed.render(profile)
    assert len(text) < 400_000, len(text)
    folded = parse_folded(text)
    (stack,) = [s for s in folded if "frames left out" in s]
    frames = stack.split(";")
    assert len(frames) == collapsed.STACK_FRAMES_MAX
    assert frames[0] == "main (app.py:5)" and frames[-1] == "helper (app.py:22)"
    assert f"[{depth - collapsed.STACK_FRAMES_MAX + 1} frames left out]" in frames
    assert max(len(f) for f in frames) <= collapsed.FRAME_TEXT_MAX
    assert folded[stack] == 500_000_000
    assert sum(folded.values()) == pytest.approx((truth("time") + 0.5) * 1e9, abs=len(folded))


def test_frame_labels():
    """Files relative to the directory all are under: the same wherever the export is made."""
    labels = Stacks(stacked_profile()).labels()
    assert labels[:5] == ["main (app.py:5)", "work (app.py:12)", "work (app.py:14)", "helper (app.py:22)",
                          "Class.method (odd;dir/ünï.py:7)"]
    assert labels[5:] == ["[native]", "[system]", "[GIL wait]", "[CPU wait]", "[unattributed]", "[other stacks]"]


# ---- Firefox Profiler ----

def firefox_stacks(doc: dict, thread: dict) -> dict[tuple[str, ...], float]:
    """Each sample's stack (root first, function names) with its weight, read
    back through the stack, frame, function and string tables."""
    strings = doc["shared"]["stringArray"]
    st, ft, fn = thread["stackTable"], thread["frameTable"], thread["funcTable"]
    out: dict[tuple[str, ...], float] = {}
    for s, w in zip(thread["samples"]["stack"], thread["samples"]["weight"]):
        names = []
        while s is not None:
            names.append(strings[fn["name"][ft["func"][st["frame"][s]]]])
            s = st["prefix"][s]
        key = tuple(reversed(names))
        out[key] = out.get(key, 0) + w
    return out


def test_firefox_processed_profile():
    doc = json.loads(firefox.render(stacked_profile()))
    assert doc["meta"]["preprocessedProfileVersion"] == firefox.PROCESSED_VERSION
    threads = {t["name"]: t for t in doc["threads"]}
    assert list(threads) == [METRICS[m].label for m in ("time", "alloc", "copy")]
    for t in doc["threads"]:
        for table in ("samples", "stackTable", "frameTable", "funcTable", "resourceTable"):
            columns = {k: v for k, v in t[table].items() if isinstance(v, list)}
            assert all(len(v) == t[table]["length"] for v in columns.values()), (t["name"], table)
        assert all(p is None or p < i for i, p in enumerate(t["stackTable"]["prefix"]))
    time = threads[METRICS["time"].label]
    assert time["samples"]["weightType"] == "tracing-ms"
    got = firefox_stacks(doc, time)
    assert got[("main", "work", "[system]")] == pytest.approx(300.0)
    assert sum(got.values()) == pytest.approx(truth("time") * 1e3)
    alloc = threads[METRICS["alloc"].label]
    assert alloc["samples"]["weightType"] == "bytes"
    assert sum(firefox_stacks(doc, alloc).values()) == truth("alloc")
    # the category of a stack is its frame's: the category graph shows the split
    categories = [c["name"] for c in doc["meta"]["categories"]]
    st, ft = time["stackTable"], time["frameTable"]
    strings = doc["shared"]["stringArray"]
    assert doc["meta"]["categories"][0]["color"] == "grey"  # the default category, which version 53 needs
    for s in range(st["length"]):
        frame = st["frame"][s]
        name = strings[time["funcTable"]["name"][ft["func"][frame]]]
        want = {"[native]": "Native", "[system]": "System", "[GIL wait]": "Waiting", "[CPU wait]": "Waiting",
                "[unattributed]": "Other", "[other stacks]": "Other"}.get(name, "Python")
        assert categories[ft["category"][frame]] == want, name
    # version 57's columns, no more (CHANGELOG-formats.md: 45, 53 and 54 removed some)
    assert set(st) == {"frame", "prefix", "length"}
    assert not {"implementation", "optimizations"} & set(ft)


# ---- pyrometer view ----

def view(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pyrometer", "view", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120)


def test_view_converts_a_saved_profile(tmp_path):
    (tmp_path / "p.json").write_text(json.dumps(stacked_profile()))
    proc = view("p.json", "--pprof", "p.pb.gz", "--speedscope", "p.speedscope.json", "--collapsed", "p.folded",
                "--collapsed-metric", "copy", "--firefox", "p.firefox.json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""  # only the exports were asked for: no report
    assert "pprof profile written to p.pb.gz (view: go tool pprof -http=: p.pb.gz)" in proc.stderr
    assert len(proc.stderr.splitlines()) == 4, proc.stderr
    assert gzip.decompress((tmp_path / "p.pb.gz").read_bytes()) == pprof.encode(stacked_profile())
    assert parse_folded((tmp_path / "p.folded").read_text()) == {
        "main (app.py:5);work (app.py:14)": MB}
    assert json.loads((tmp_path / "p.speedscope.json").read_text())["profiles"]
    assert json.loads((tmp_path / "p.firefox.json").read_text())["threads"]
    # with a report format named, the report too
    proc = view("p.json", "--cli", "--collapsed", "t.folded", "--quiet", cwd=tmp_path)
    assert proc.returncode == 0 and "synthetic.py" in proc.stdout and proc.stderr == "", proc.stderr
    assert (tmp_path / "t.folded").exists()


def test_view_of_a_profile_without_stacks_says_so(tmp_path):
    profile = stacked_profile()
    del profile["call_stacks"]
    (tmp_path / "old.json").write_text(json.dumps(profile))
    for option in ("--pprof", "--speedscope", "--collapsed", "--firefox"):
        proc = view("old.json", option, "out", cwd=tmp_path)
        assert proc.returncode == 1, proc.stderr
        assert proc.stderr == (f"pyrometer: error: {option}: old.json has no call stacks (it was made by an "
                               "older pyrometer): profile the program again with this one to export its stacks\n")
        assert not (tmp_path / "out").exists()


def test_export_usage_errors(tmp_path):
    (tmp_path / "p.json").write_text(json.dumps(stacked_profile(memory=False)))
    for args, message in (
            (["--collapsed-metric", "alloc"], "--collapsed-metric needs --collapsed FILE"),
            (["--collapsed", "x", "--collapsed-metric", "nope"], "--collapsed-metric: invalid choice"),
            (["--pprof", "x", "--firefox", "x"], "--pprof and --firefox both write x"),
            (["--pprof", str(tmp_path)], "it is a directory")):
        proc = view("p.json", *args, cwd=tmp_path)
        assert proc.returncode == 2 and message in proc.stderr and len(proc.stderr.splitlines()) == 1, proc.stderr
    proc = view("p.json", "--collapsed", "x", "--collapsed-metric", "alloc", cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr == ("pyrometer: error: --collapsed: p.json has no allocated bytes: memory was not "
                           "profiled in that run\n")


# ---- a real run ----

PROGRAM = """
import time

def python_work():
    total = 0
    for i in range(4_000_000):
        total += i
    return total

def outer():
    python_work()
    time.sleep(0.3)
    return [bytearray(1 << 20) for _ in range(40)]

kept = outer()
"""


def test_a_run_exports_its_stacks(tmp_path, run_pyrometer):
    (tmp_path / "prog.py").write_text(PROGRAM.lstrip("\n"))
    proc = run_pyrometer(["--json", "--outfile", "p.json", "--pprof", "p.pb.gz", "--collapsed", "p.folded",
                          "--speedscope", "p.ss.json", "--firefox", "p.ff.json", "prog.py"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    profile = json.loads((tmp_path / "p.json").read_text())
    for line in ("pyrometer: pprof profile written to p.pb.gz (view: go tool pprof -http=: p.pb.gz)",
                 "pyrometer: folded stacks written to p.folded (view: flamegraph.pl p.folded > flame.svg)",
                 "pyrometer: speedscope profile written to p.ss.json (view: open it at https://www.speedscope.app)",
                 "pyrometer: Firefox Profiler profile written to p.ff.json "
                 "(view: load it at https://profiler.firefox.com)"):
        assert line in proc.stderr.splitlines(), proc.stderr
    stacks = Stacks(profile)
    # The exports of the run are those of its saved profile.
    assert gzip.decompress((tmp_path / "p.pb.gz").read_bytes()) == pprof.encode(profile)
    assert (tmp_path / "p.folded").read_text() == collapsed.render(profile)
    assert json.loads((tmp_path / "p.ss.json").read_text()) == json.loads(speedscope.render(profile))
    # The stacks' totals are the header's (the contract's invariant), and the folded
    # stacks put the loop's Python time under outer, the sleep as [system] under its line.
    cpu, unattributed = profile["cpu_time_sec"], profile["unattributed"]
    assert stacks.total(METRICS["python"]) == pytest.approx(cpu["python"], abs=1e-3)
    assert stacks.total(METRICS["native"]) == pytest.approx(cpu["native"], abs=1e-3)
    assert stacks.total(METRICS["system"]) == pytest.approx(cpu["system"] + unattributed["system_sec"], abs=1e-3)
    folded = parse_folded((tmp_path / "p.folded").read_text())
    python_time = {s: v for s, v in folded.items() if not s.endswith("]")}  # no synthetic leaf: Python's own
    hottest = max(python_time, key=python_time.get)
    assert re.fullmatch(r"<module> \(prog\.py:\d+\);outer \(prog\.py:\d+\);python_work \(prog\.py:\d+\)", hottest), folded
    assert any(s.endswith(";[system]") and "outer (prog.py:11)" in s for s in folded), folded
    if GO is not None:
        for m in ("time", "python", "system", "alloc"):
            unit = "ns" if METRICS[m].unit == "seconds" else "B"
            expected = stacks.total(METRICS[m]) * (1e9 if unit == "ns" else 1)
            got = pprof_total(tmp_path / "p.pb.gz", pprof.SAMPLE_TYPES[m], unit)
            assert got == pytest.approx(expected, abs=len(stacks.entries) + 1), m
        assert stacks.total(METRICS["alloc"]) >= 30 * MB


def test_a_run_refuses_an_export_it_could_not_write(tmp_path, run_pyrometer):
    """Checked before the program runs, as the report's file is."""
    (tmp_path / "prog.py").write_text("print('ran')\n")
    proc = run_pyrometer(["--pprof", "nowhere/p.pb.gz", "prog.py"], cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout
    assert proc.stderr == (f"pyrometer: error: cannot write the --pprof export to nowhere/p.pb.gz: no directory "
                           f"{tmp_path / 'nowhere'}\n")
    proc = run_pyrometer(["--collapsed-metric", "alloc", "prog.py"], cwd=tmp_path)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == "pyrometer: error: --collapsed-metric needs --collapsed FILE\n"
    for flags, message in ((["--cpu-only"], "--collapsed-metric copy: --cpu-only does not measure it"),
                           (["--no-memory"], "--collapsed-metric copy: --no-memory does not measure it"),
                           (["--no-gpu"], "--collapsed-metric gpu: --no-gpu does not measure it")):
        metric = message.split()[1].rstrip(":")
        proc = run_pyrometer([*flags, "--collapsed", "f", "--collapsed-metric", metric, "prog.py"], cwd=tmp_path)
        assert (proc.returncode, proc.stdout) == (2, "")
        assert proc.stderr == f"pyrometer: error: {message}\n"
