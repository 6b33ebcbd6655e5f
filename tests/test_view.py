"""pyrometer view: a saved profile rendered again, as text, JSON or the web page,
also when it was made on another machine; and one clear line, exit status 2
and no traceback for anything that is not a profile this version can show."""

from __future__ import annotations

import json
import os
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
    assert proc.returncode == 0 and proc.stdout == "" and proc.stderr == "", proc
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
    assert str((tmp_path / "pyrometer-profile.html").resolve()) in proc.stdout, proc.stdout


def test_web_while_profiling_without_a_browser(tmp_path, run_pyrometer):
    (tmp_path / "prog.py").write_text("print('ran')\n")
    env = {k: "" for k in ("DISPLAY", "WAYLAND_DISPLAY", "BROWSER")}
    proc = run_pyrometer(["--web", "prog.py"], cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("ran\n")
    assert "pyrometer-profile.html" in proc.stdout and (tmp_path / "pyrometer-profile.html").exists()


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
