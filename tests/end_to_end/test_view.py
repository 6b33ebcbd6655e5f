"""pyrometer view: a saved profile rendered again, as text, JSON or the web page,
also when it was made on another machine; and one clear line, exit status 2
and no traceback for anything that is not a profile this version can show."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

import pytest

from synthetic import make_profile

PROGRAM = """
import time
cold = 1  # cold line
start, total = time.perf_counter(), 0
while time.perf_counter() - start < 0.4:
    for i in range(2000): total += i * i  # hot line
"""


@pytest.fixture(scope="module")
def saved(tmp_path_factory, groundtruth_dir) -> Path:
    """A real profile, saved with --json, of a program that is then deleted: the
    report must come from the JSON alone."""
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415
    from conftest import program_env  # noqa: PLC0415
    d = tmp_path_factory.mktemp("view")
    (d / "prog.py").write_text(PROGRAM.lstrip("\n"))
    proc = subprocess.run([sys.executable, "-m", "pyrometer", "--json", "--outfile", "p.json", "prog.py"],
                          cwd=d, capture_output=True, text=True, env=program_env(groundtruth_dir), timeout=60)
    assert proc.returncode == 0, proc.stderr
    (d / "prog.py").unlink()
    return d / "p.json"


def one_line_error(proc) -> str:
    assert proc.returncode == 2, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    lines = proc.stderr.strip("\n").splitlines()
    assert len(lines) == 1, f"expected one line on stderr:\n{proc.stderr}"
    assert lines[0].startswith("pyrometer: error:") and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stdout == ""
    return lines[0]


def test_view_text_from_the_json_alone(saved, tmp_path, run_pyrometer):
    proc = run_pyrometer(["view", saved], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    out = proc.stdout
    assert out.startswith("pyrometer: prog.py\n"), out[:200]
    for text in ("Time Python", "# hot line", "# cold line", "options: CPU + memory"):
        assert text in out, f"{text!r} missing:\n{out}"
    assert run_pyrometer(["view", "--cli", saved], cwd=tmp_path).stdout == out


def test_view_reduced_profile(saved, tmp_path, run_pyrometer):
    proc = run_pyrometer(["view", saved, "--reduced-profile"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "# hot line" in proc.stdout and "# cold line" not in proc.stdout, proc.stdout
    proc = run_pyrometer(["view", saved, "--json", "--reduced-profile"], cwd=tmp_path)
    profile = json.loads(proc.stdout)
    (f,) = profile["files"].values()
    assert profile["options"]["reduced_profile"] is True
    assert [e for e in f["lines"] if "cold line" in e["line"]] == []


def test_view_json_round_trip(saved, tmp_path, run_pyrometer):
    proc = run_pyrometer(["view", saved, "--json", "-o", tmp_path / "again.json"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "again.json").read_text()) == json.loads(saved.read_text())


def test_view_html_default_file_and_outfile(saved, tmp_path, run_pyrometer):
    proc = run_pyrometer(["view", saved, "--html"], cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == "", proc
    assert proc.stderr == "pyrometer: web report written to pyrometer-profile.html (view: open it in a browser)\n"
    page = (tmp_path / "pyrometer-profile.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "# hot line" in page
    proc = run_pyrometer(["view", saved, "--html", "-o", tmp_path / "x.html"], cwd=tmp_path)
    assert proc.returncode == 0 and (tmp_path / "x.html").exists()


def test_view_web_opens_a_browser(saved, tmp_path, run_pyrometer):
    record = tmp_path / "opened.txt"
    browser = tmp_path / "fake-browser"
    browser.write_text(f"#!/bin/sh\necho \"$1\" > {record}\n")
    browser.chmod(browser.stat().st_mode | stat.S_IXUSR)
    proc = run_pyrometer(["view", saved, "--web"], cwd=tmp_path, env={"BROWSER": str(browser)})
    assert proc.returncode == 0, proc.stderr
    page = tmp_path / "pyrometer-profile.html"
    assert page.exists()
    assert record.read_text().strip() == page.resolve().as_uri()


def test_view_web_without_a_browser_prints_the_path(saved, tmp_path, run_pyrometer):
    env = {k: "" for k in ("DISPLAY", "WAYLAND_DISPLAY", "BROWSER")}
    proc = run_pyrometer(["view", saved, "--web"], cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    # Said on standard error, where pyrometer's words go: standard output is the report's or the program's.
    assert proc.stdout == ""
    assert str((tmp_path / "pyrometer-profile.html").resolve()) in proc.stderr, proc.stderr
    assert "no browser" in proc.stderr


def test_web_while_profiling_without_a_browser(tmp_path, run_pyrometer):
    (tmp_path / "prog.py").write_text("print('ran')\n")
    env = {k: "" for k in ("DISPLAY", "WAYLAND_DISPLAY", "BROWSER")}
    proc = run_pyrometer(["--web", "prog.py"], cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "ran\n", "pyrometer wrote into the program's standard output"
    assert "pyrometer-profile.html" in proc.stderr and (tmp_path / "pyrometer-profile.html").exists()


def _write(tmp_path: Path, content: str | bytes, name: str = "bad.json") -> Path:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


def _newer(saved: Path) -> str:
    profile = json.loads(saved.read_text())
    profile["pyrometer_schema"] = 99
    return json.dumps(profile)


def _damaged(saved: Path) -> str:
    profile = json.loads(saved.read_text())
    del profile["files"]
    return json.dumps(profile)


def _bad_line(saved: Path) -> str:
    profile = json.loads(saved.read_text())
    (f,) = profile["files"].values()
    f["lines"][0]["n_cpu_percent_python"] = "lots"
    return json.dumps(profile)


@pytest.mark.parametrize("case,content,expected", [
    ("truncated", lambda s: s.read_text()[: len(s.read_text()) // 2], r"truncated"),
    ("not JSON", lambda s: "this is not a profile\n", r"not valid JSON"),
    ("empty", lambda s: "", r"empty"),
    ("binary", lambda s: bytes(range(256)) * 4, r"not a pyrometer profile|not valid JSON"),
    ("other JSON", lambda s: json.dumps({"hello": "world"}), r"not a pyrometer profile"),
    ("a list", lambda s: "[1, 2, 3]", r"not a pyrometer profile"),
    ("Scalene's JSON", lambda s: json.dumps({"elapsed_time_sec": 1.0, "files": {}}), r"Scalene"),
    ("newer schema", _newer, r"newer pyrometer.*schema 99.*upgrade"),
    ("bad schema", lambda s: json.dumps({"pyrometer_schema": "one"}), r"not a pyrometer profile"),
    ("damaged", _damaged, r"damaged: files is missing"),
    ("wrong type", _bad_line, r"damaged: .*n_cpu_percent_python has the wrong type"),
], ids=lambda v: v if isinstance(v, str) and not v.startswith(("r", "(")) else "")
def test_view_errors(saved, tmp_path, run_pyrometer, case, content, expected):
    import re  # noqa: PLC0415
    path = _write(tmp_path, content(saved))
    for fmt in ([], ["--html"]):
        proc = run_pyrometer(["view", path, *fmt], cwd=tmp_path)
        line = one_line_error(proc)
        assert re.search(expected, line), f"{case}: {line}"
    assert not (tmp_path / "pyrometer-profile.html").exists()


def test_view_usage_errors(saved, tmp_path, run_pyrometer):
    one_line_error(run_pyrometer(["view"], cwd=tmp_path))
    one_line_error(run_pyrometer(["view", saved, "--html", "--cli"], cwd=tmp_path))
    one_line_error(run_pyrometer(["view", saved, "--bogus"], cwd=tmp_path))
    assert "No such file" in one_line_error(run_pyrometer(["view", tmp_path / "missing.json"], cwd=tmp_path))
    assert "directory" in one_line_error(run_pyrometer(["view", saved, "--html", "-o", tmp_path], cwd=tmp_path))


def test_view_of_a_synthetic_profile_from_another_machine(tmp_path, run_pyrometer):
    """Files that do not exist here, a width to respect, a brief run."""
    profile = make_profile(3, 40, seed=5)
    path = _write(tmp_path, json.dumps(profile), "other.json")
    proc = run_pyrometer(["view", path], cwd=tmp_path, env={"COLUMNS": "70"})
    assert proc.returncode == 0, proc.stderr
    assert "/home/someone/project/" in proc.stdout and "# <b>&" in proc.stdout
    brief = dict(profile, cpu_samples=0)
    proc = run_pyrometer(["view", _write(tmp_path, json.dumps(brief), "brief.json")], cwd=tmp_path)
    assert "too briefly to be sampled" in proc.stdout
    assert os.path.exists(path)


MARKUP = '<form action="http://evil.example/" class="pwn"><input name="q"></form>'


def _first_file(p: dict) -> dict:
    return next(iter(p["files"].values()))


def _set(path: str, value):
    """A mutation of a synthetic profile: the field at path ("a.b[0].c") set to value."""
    def mutate(p: dict) -> None:
        *parents, last = path.replace("[", ".[").split(".")
        obj = p
        for part in parents:
            obj = _first_file(p) if part == "FILE" else obj[int(part[1:-1])] if part.startswith("[") else obj[part]
        obj[int(last[1:-1]) if last.startswith("[") else last] = value
    return mutate


def _leak_key(key: str):
    def mutate(p: dict) -> None:
        _first_file(p)["leaks"] = {key: {"likelihood": 0.99, "velocity_mb_s": 0.5, "growth_mb": 30.0}}
    return mutate


# Fields that the renderers would put into markup or onto the terminal as they
# are, numbers out of range, values JSON allows but no renderer can write back
# (NaN, Infinity), and structure where a renderer expects another.
REFUSED = [
    ("exit_status markup", _set("exit_status", MARKUP), r"exit_status has the wrong type \(string\)"),
    ("exit_status range", _set("exit_status", 256), r"exit_status is out of range \(256\)"),
    ("line lineno markup", _set("FILE.lines[0].lineno", MARKUP), r"lines\[0\]\.lineno has the wrong type"),
    ("function lineno", _set("FILE.functions[0].lineno", -1), r"functions\[0\]\.lineno is out of range"),
    ("max_footprint_where.lineno", _set("max_footprint_where.lineno", MARKUP),
     r"max_footprint_where\.lineno has the wrong type"),
    ("max_footprint_where", _set("max_footprint_where", "<b>x</b>"), r"max_footprint_where has the wrong type"),
    ("top_allocations lineno", _set("top_allocations[0].lineno", "1<img src=x>"),
     r"top_allocations\[0\]\.lineno has the wrong type"),
    ("leak key markup", _leak_key(MARKUP), r"leaks has the key '<form.*: its keys must be line numbers"),
    ("leak key escape", _leak_key("1\x1b[2J"), r"leaks has the key '1\\x1b\[2J': its keys"),
    ("leak key not ASCII digits", _leak_key("\u0661\u0662"), r"leaks has the key"),
    ("leak likelihood", lambda p: _first_file(p).update(leaks={"3": {"likelihood": 2, "velocity_mb_s": 1,
                                                                      "growth_mb": 1}}),
     r"leaks\['3'\]\.likelihood is out of range \(2\)"),
    ("NaN", _set("FILE.lines[1].n_peak_mb", float("nan")), r"n_peak_mb is out of range \(nan\)"),
    ("Infinity", _set("elapsed_time_sec", float("inf")), r"elapsed_time_sec is out of range \(inf\)"),
    ("boolean for a count", _set("cpu_samples", True), r"cpu_samples has the wrong type \(boolean\)"),
    ("negative count", _set("threads", -3), r"threads is out of range \(-3\)"),
    ("huge count", _set("FILE.lines[2].n_samples", 1 << 70), r"n_samples is out of range"),
    ("fraction over 1", _set("FILE.lines[3].n_python_fraction", 1.5), r"n_python_fraction is out of range"),
    ("string in args", _set("args", ["ok", 3]), r"args\[1\] has the wrong type \(number\)"),
    ("program", _set("program", ["a"]), r"program has the wrong type \(list\)"),
    ("notice", _set("notices", [{"x": 1}]), r"notices\[0\] has the wrong type \(object\)"),
    ("option list", _set("options.profile_only", "pkg"), r"options\.profile_only has the wrong type"),
    ("option flag", _set("options.reduced_profile", "yes"), r"options\.reduced_profile has the wrong type"),
    ("memory flag", _set("memory", 1), r"memory has the wrong type \(number\)"),
    ("footprint timeline", _set("samples", [[0.1, 2.0], [0.2]]), r"samples\[1\] has 1 items: it must have 2"),
    ("line timeline", _set("FILE.lines[4].memory_samples", [[0.1, "2"]]),
     r"memory_samples\[0\]\[1\] has the wrong type"),
    ("file not an object", lambda p: p["files"].update({"/x.py": [1]}), r"files\['/x\.py'\] has the wrong type"),
    ("entry not an object", _set("FILE.functions[0]", "f"), r"functions\[0\] has the wrong type"),
    ("unknown field not finite", _set("newer_field", {"a": [float("-inf")]}), r"newer_field holds -inf"),
    ("unknown field too deep", _set("newer_field", json.loads("[" * 40 + "]" * 40)),
     r"newer_field is nested more than 32 levels deep"),
    ("unknown key shown escaped", _set("\x1b]0;x\x07", float("nan")), r"'\\x1b\]0;x\\x07' holds nan"),
]


@pytest.mark.parametrize("case,mutate,expected", REFUSED, ids=[case for case, _, _ in REFUSED])
def test_view_refuses_what_pyrometer_does_not_write(tmp_path, run_pyrometer, case, mutate, expected):
    """A crafted or damaged field: one line naming it, exit status 2, nothing
    written, for the terminal and for the web page alike."""
    import re  # noqa: PLC0415
    profile = make_profile(2, 30, seed=11)
    mutate(profile)
    path = _write(tmp_path, json.dumps(profile))
    for fmt in ([], ["--html"], ["--json"]):
        proc = run_pyrometer(["view", path, *fmt], cwd=tmp_path)
        line = one_line_error(proc)
        assert re.search(r"bad\.json is damaged: (files\[.*\]\.)?" + expected, line), f"{case}: {line}"
        assert "\x1b" not in line and "\x07" not in line
    assert not (tmp_path / "pyrometer-profile.html").exists()


def test_view_takes_fields_of_a_newer_pyrometer_and_fills_in_an_older_ones(tmp_path, run_pyrometer):
    """What check allows: fields it does not know (plain JSON), and optional
    fields missing (they get their defaults)."""
    profile = make_profile(2, 30, seed=11)
    profile["newer_field"] = {"nested": [1, 2.5, None, "text", {"deep": [True]}]}
    _first_file(profile)["lines"][0]["n_gpu_percent"] = 12.0
    _first_file(profile)["lines"][1]["newer_entry_field"] = [1, 2]
    for name in ("exit_status", "threads", "native_threads"):
        del profile[name]
    del _first_file(profile)["functions"]
    path = _write(tmp_path, json.dumps(profile))
    proc = run_pyrometer(["view", path, "--json"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    again = json.loads(proc.stdout)
    assert again["newer_field"] == profile["newer_field"]
    assert again["exit_status"] is None and again["threads"] == 0 and again["notices"] == []
    assert _first_file(again)["functions"] == [] and _first_file(again)["lines"][1]["newer_entry_field"] == [1, 2]
    for fmt in ([], ["--html"]):
        assert run_pyrometer(["view", path, *fmt], cwd=tmp_path).returncode == 0


def test_scalene_names_checked_and_given_to_older_profiles():
    """max_footprint_fname/_lineno say what max_footprint_where says: an older
    profile without them gets them, one where they disagree is refused;
    growth_rate must be a number."""
    from pyrometer import model  # noqa: PLC0415
    older = make_profile(1, 10)
    for name in ("growth_rate", "max_footprint_fname", "max_footprint_lineno"):
        older.pop(name, None)
    where = older["max_footprint_where"]
    checked = model.check(json.loads(json.dumps(older)))
    assert (checked["max_footprint_fname"], checked["max_footprint_lineno"]) == (where["filename"], where["lineno"])
    assert "growth_rate" not in checked  # not made up where the profile cannot tell it
    for name, value, message in (("max_footprint_fname", "/elsewhere.py", "max_footprint_fname is '/elsewhere.py'"),
                                 ("max_footprint_lineno", where["lineno"] + 1, "max_footprint_lineno is"),
                                 ("max_footprint_lineno", 0, "max_footprint_lineno is out of range"),
                                 ("growth_rate", "12", "growth_rate has the wrong type")):
        bad = dict(json.loads(json.dumps(older)), **{name: value})
        with pytest.raises(model.ProfileError, match=re.escape(message)):
            model.check(bad)
