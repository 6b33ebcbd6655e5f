"""Servers as their users start them, end to end: from the application's
directory, through the server's console script (`pyrometer gunicorn -w 2
app:app`, `pyrometer uvicorn app:app`) or the project's manage.py (Django's
runserver, its autoreloader's child included), requests over the loopback,
then Ctrl-C (SIGINT to the whole process group, as a terminal sends it).
The application's lines must be in the profile with the workers' CPU and
memory, every process merged, and the server's exit status and output what
they are without pyrometer.

The servers come from the `corpus` extra (tests/pythons.py installs it on
CORPUS_VERSIONS and sets PYROMETER_REQUIRE_CORPUS=1 there)."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import program_env

REQUESTS = 30
# The work of one request: a loop the samples find, and 2,000,000 bytes kept
# per request (57.2 MiB over the run: blocks over the 1 MiB window, each its
# own exact sample) on the line marked @keep.
WORK = """
KEPT = []

def work(n):
    total = 0
    for i in range(n):                           # @loop
        total += i * i % 7
    KEPT.append(bytearray(2_000_000))            # @keep
    return total
"""

FLASK_APP = WORK + """
from flask import Flask
app = Flask(__name__)

@app.route("/")
def index():
    return str(work(500_000))
"""

ASGI_APP = WORK + """
async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    body = str(work(500_000)).encode()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": body})
"""

DJANGO_MANAGE = """
import os, sys
if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "site_settings")
    from django.core.management import execute_from_command_line
    execute_from_command_line(sys.argv)
"""
DJANGO_SETTINGS = """
SECRET_KEY = "test"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
ROOT_URLCONF = "site_urls"
INSTALLED_APPS = []
MIDDLEWARE = []
DATABASES = {}
USE_TZ = True
"""
DJANGO_URLS = WORK + """
from django.http import HttpResponse
from django.urls import path

def index(request):
    return HttpResponse(str(work(500_000)))

urlpatterns = [path("", index)]
"""


def _needs(*modules: str) -> None:
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        if os.environ.get("PYROMETER_REQUIRE_CORPUS") == "1":
            pytest.fail(f"{', '.join(missing)} missing: the corpus extra was to install it")
        pytest.skip(f"{', '.join(missing)} not installed (pip install .[corpus])")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(cmd: list[str], cwd: Path, port: int) -> tuple[int, str, str]:
    """Starts cmd in a session of its own, sends REQUESTS requests once it
    answers, then SIGINT to its process group; (exit status, stdout, stderr)."""
    env = program_env(None, {"PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")})
    out, err = cwd / "server.out", cwd / "server.err"
    with open(out, "w") as o, open(err, "w") as e:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=o, stderr=e, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as r:
                    r.read()
                break
            except OSError:
                assert proc.poll() is None, f"{cmd[:4]}: the server ended ({proc.returncode}):\n{err.read_text()[-3000:]}"
                assert time.monotonic() < deadline, f"{cmd[:4]}: the server never answered:\n{err.read_text()[-3000:]}"
                time.sleep(0.2)
        for _ in range(REQUESTS - 1):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=30) as r:
                assert r.status == 200
                r.read()
        os.killpg(proc.pid, signal.SIGINT)
        status = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        _wait_port_free(port, proc.pid)
    return status, out.read_text(), err.read_text()


def _wait_port_free(port: int, group: int) -> None:
    """Returns once the port can be listened on again.  The command's process
    can end before the process that serves: Django's autoreloader, on Ctrl-C,
    waits a quarter second for its child (subprocess.run) and leaves, while
    the child, the server, still listens as it ends (under pyrometer, writing
    its profile); the next run of the same test, on the same port, then ended
    with "That port is already in use" (the whole suite, 1 run in several).
    After 30 s the group is killed; after 30 more the test fails."""
    start = time.monotonic()
    killed = False
    while True:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
                return
            except OSError:
                pass
        waited = time.monotonic() - start
        if waited > 30 and not killed:
            try:
                os.killpg(group, signal.SIGKILL)
            except ProcessLookupError:
                pass
            killed = True
        assert waited < 60, f"port {port} still in use 60 s after the server's command ended"
        time.sleep(0.05)


def _check(profile: dict, app: Path, processes: int) -> str:
    why = json.dumps({"files": {f: [(e["lineno"], round(e.get("n_cpu_python_sec", 0) + e.get("n_cpu_native_sec", 0), 3),
                                     round(e.get("n_malloc_mb", 0), 1)) for e in v["lines"]]
                                for f, v in profile["files"].items()},
                      "processes": profile["process_count"], "notices": profile["notices"]})[:4000]
    assert profile["process_count"] >= processes, why
    lines = {e["lineno"]: e for f, v in profile["files"].items() if Path(f) == app for e in v["lines"]}
    source = app.read_text().splitlines()
    loop = next(i for i, t in enumerate(source, 1) if t.rstrip().endswith("# @loop"))
    keep = next(i for i, t in enumerate(source, 1) if t.rstrip().endswith("# @keep"))
    assert lines, why
    cpu = {n: e.get("n_cpu_python_sec", 0) + e.get("n_cpu_native_sec", 0) for n, e in lines.items()}
    total = sum(e.get("n_cpu_python_sec", 0) + e.get("n_cpu_native_sec", 0)
                for v in profile["files"].values() for e in v["lines"])
    # 30 requests of about 40-100 ms of loop each: at least 0.5 s, and the
    # loop's lines hold most of the CPU the report shows.
    assert cpu.get(loop, 0) + cpu.get(loop + 1, 0) >= 0.5, why
    assert cpu.get(loop, 0) + cpu.get(loop + 1, 0) >= 0.5 * total, why
    # 30 x 2,000,000 bytes kept: each block its own sample, exact.
    assert lines.get(keep, {}).get("n_malloc_mb", 0) == pytest.approx(REQUESTS * 2_000_000 / 2**20, rel=0.02), why
    return why


def _profiled(tmp_path: Path, args: list[str], bare: list[str], port: int, *, same_stdout: bool = True) -> dict:
    """The server run under pyrometer, then bare: the same exit status (and
    standard output, where it holds no time of day); the profile."""
    out = tmp_path / "profile.json"
    status, stdout, _ = _serve([sys.executable, "-m", "pyrometer", "--quiet", "--json", "--outfile", str(out),
                                *args], tmp_path, port)
    bare_status, bare_stdout, _ = _serve(bare, tmp_path, port)
    assert status == bare_status, (status, bare_status)
    if same_stdout:
        assert stdout == bare_stdout
    profile = json.loads(out.read_text())
    assert profile["exit_status"] == bare_status
    return profile


def test_gunicorn_workers(tmp_path):
    _needs("flask", "gunicorn")
    app = tmp_path / "app.py"
    app.write_text(FLASK_APP)
    port = _free_port()
    common = ["-w", "2", "-b", f"127.0.0.1:{port}", "app:app"]
    profile = _profiled(tmp_path, ["gunicorn", *common], [str(Path(sys.executable).parent / "gunicorn"), *common], port)
    _check(profile, app, processes=3)


def test_console_script_notice(tmp_path):
    """The notice says what the report of a console script leaves out."""
    _needs("flask", "gunicorn")
    app = tmp_path / "app.py"
    app.write_text(FLASK_APP)
    port = _free_port()
    out = tmp_path / "profile.json"
    _serve([sys.executable, "-m", "pyrometer", "--quiet", "--cpu-only", "--json", "--outfile", str(out),
            "gunicorn", "-w", "1", "-b", f"127.0.0.1:{port}", "app:app"], tmp_path, port)
    (notice,) = json.loads(out.read_text())["notices"]
    assert notice.startswith("gunicorn is a console script") and "--profile-all" in notice, notice


def test_uvicorn_asgi_app(tmp_path):
    _needs("uvicorn")
    app = tmp_path / "app.py"
    app.write_text(ASGI_APP)
    port = _free_port()
    common = ["app:app", "--host", "127.0.0.1", "--port", str(port), "--no-access-log", "--lifespan", "on"]
    profile = _profiled(tmp_path, ["uvicorn", *common], [str(Path(sys.executable).parent / "uvicorn"), *common], port)
    _check(profile, app, processes=1)


def test_django_runserver_with_its_autoreloader(tmp_path):
    """manage.py runserver: the autoreloader runs the server in a child
    process of its own (RUN_MAIN), profiled and merged."""
    _needs("django")
    (tmp_path / "manage.py").write_text(DJANGO_MANAGE)
    (tmp_path / "site_settings.py").write_text(DJANGO_SETTINGS)
    app = tmp_path / "site_urls.py"
    app.write_text(DJANGO_URLS)
    port = _free_port()
    args = ["manage.py", "runserver", f"127.0.0.1:{port}"]
    # Its standard output holds the time of day it started.
    profile = _profiled(tmp_path, args, [sys.executable, *args], port, same_stdout=False)
    _check(profile, app, processes=2)
