"""Child processes: every Python child (os.fork, the fork, spawn and forkserver
start methods, Pool, ProcessPoolExecutor, subprocess and exec of a Python) is
profiled with the parent's options and merged into one profile with a
per-process table; a child that is not Python is listed; --no-children profiles
the first process only.

The workers' truth is what they measure themselves: each writes the CPU time of
its marked line (the thread CPU clock around a C spin, _groundtruth.spin_gil)
to a file named truth-*, and the profile's figure for that line, summed over
every process, must be within 10% of the sum of those files."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest

from conftest import program_env, write_program

pytestmark = pytest.mark.accuracy

WORKER = """
import os, sys, time, _groundtruth

def worker(ms):
    start, end = _groundtruth.spin_gil(ms)  # WORKER LINE
    with open("truth-%d-%d" % (os.getpid(), time.monotonic_ns()), "w") as f:
        f.write(repr(end - start))
    return end - start
"""

KINDS = {
    # Processes of each start method, two at a time.
    "process-fork": ("fork", """
    ps = [mp.Process(target=worker, args=(300,)) for _ in range(2)]
    for p in ps: p.start()
    for p in ps: p.join()  # PARENT WAITS
    """),
    "process-spawn": ("spawn", """
    ps = [mp.Process(target=worker, args=(300,)) for _ in range(2)]
    for p in ps: p.start()
    for p in ps: p.join()  # PARENT WAITS
    """),
    "process-forkserver": ("forkserver", """
    ps = [mp.Process(target=worker, args=(300,)) for _ in range(2)]
    for p in ps: p.start()
    for p in ps: p.join()  # PARENT WAITS
    """),
    "pool-fork": ("fork", """
    with mp.Pool(2) as pool:
        pool.map(worker, [150] * 4, chunksize=1)  # PARENT WAITS
    """),
    "pool-spawn": ("spawn", """
    with mp.Pool(2) as pool:
        pool.map(worker, [150] * 4, chunksize=1)  # PARENT WAITS
    """),
    "executor": ("fork", """
    import concurrent.futures as cf
    with cf.ProcessPoolExecutor(2, mp_context=mp.get_context()) as ex:
        list(ex.map(worker, [150] * 4))  # PARENT WAITS
    """),
}


def _program(kind: str) -> str:
    method, body = KINDS[kind]
    body_lines = body.strip("\n").splitlines()
    base = len(body_lines[0]) - len(body_lines[0].lstrip())
    lines = "\n".join("    " + line[base:] for line in body_lines)
    return WORKER + f"""
if __name__ == "__main__":
    import multiprocessing as mp
    mp.set_start_method({method!r})
{lines}
"""


def _truth(directory: Path) -> tuple[float, int]:
    files = glob.glob(str(directory / "truth-*"))
    return sum(float(Path(f).read_text()) for f in files), len(files)


def _line_of(p, marker: str, path: Path) -> dict:
    """The entry of the line of another file (a child's script) holding marker."""
    n = next(i + 1 for i, text in enumerate(path.read_text().splitlines()) if marker in text)
    entry = next((e for e in p.file(path)["lines"] if e["lineno"] == n), None)
    assert entry is not None, p.describe()
    return entry


def _cpu(entry: dict) -> float:
    return entry["n_cpu_python_sec"] + entry["n_cpu_native_sec"]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_worker_cpu_is_on_the_workers_line(profile_program, tmp_path, kind):
    for f in glob.glob(str(tmp_path / "truth-*")):
        os.unlink(f)
    p = profile_program(_program(kind), options=["--cpu-only", "--cpu-sampling-rate", "0.005"])
    truth, workers = _truth(tmp_path)
    assert workers in (2, 4), workers
    line = p.line("WORKER LINE")
    # Tolerance: 10% of the workers' own measurement (1.2 s of CPU in all,
    # sampled every 5 ms: about 240 samples).
    assert abs(_cpu(line) - truth) <= 0.10 * truth, (kind, truth, p.describe("WORKER LINE", "PARENT WAITS"))
    # The parent's waiting line is the parent's waiting: off CPU, never the
    # workers' CPU.
    waits = p.line("PARENT WAITS")
    assert _cpu(waits) < 0.1 * truth, p.describe("PARENT WAITS")
    rows = p.profile["processes"]
    assert p.profile["process_count"] == len(rows) >= 1 + workers // (2 if kind.startswith(("pool", "exec")) else 1)
    assert rows[0]["started_by"] == "command" and rows[0]["pid"] == rows[1]["ppid"] or any(
        r["ppid"] == rows[0]["pid"] for r in rows[1:])
    profiled = [r for r in rows[1:] if r["profiled"] and r["cpu_sec"] is not None]
    expected = "fork" if KINDS[kind][0] != "spawn" else "exec"
    assert sum(1 for r in profiled if r["started_by"] == expected) >= 2, rows
    # Each child's own CPU, as measured by its profile, covers its work.
    assert sum(r["cpu_sec"] for r in profiled) >= 0.9 * truth, rows
    assert p.profile["options"]["children"] is True


def test_worker_memory_is_on_the_workers_line(profile_program):
    source = """
import multiprocessing as mp

def worker(n):
    block = bytearray(n)  # ALLOCATES
    return len(block)

if __name__ == "__main__":
    mp.set_start_method("fork")
    keep = bytearray(1 << 20)  # PARENT KEEPS
    with mp.Pool(2) as pool:
        pool.map(worker, [20 << 20] * 4, chunksize=1)
"""
    p = profile_program(source)
    line = p.line("ALLOCATES")
    # 4 x 20 MB, each a block far over the 1 MB sampling window: exact to a
    # window each.
    assert abs(line["n_malloc_mb"] - 80) <= 8, p.describe("ALLOCATES")
    assert line["n_python_fraction"] > 0.9
    assert p.line("PARENT KEEPS")["n_malloc_mb"] < 4  # the parent's own, not the workers'
    children = [r for r in p.profile["processes"][1:] if r["peak_mb"] is not None]
    assert children and max(r["peak_mb"] for r in children) >= 19, p.profile["processes"]


def test_spawn_pool_costs_at_most_two_seconds(profile_program, run_bare, tmp_path):
    source = _program("pool-spawn")
    started = time.perf_counter()
    bare = run_bare(source)
    bare_s = time.perf_counter() - started
    assert bare.returncode == 0, bare.stderr
    started = time.perf_counter()
    p = profile_program(source)
    profiled_s = time.perf_counter() - started
    assert profiled_s <= bare_s + 2.0, (bare_s, profiled_s)
    assert sum(1 for r in p.profile["processes"] if r["started_by"] == "exec" and r["cpu_sec"]) >= 2


OTHER = """
import sys, _groundtruth
_groundtruth.spin_gil(200)  # OTHER LINE
sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
"""


def test_exec_of_another_python_script(profile_program, tmp_path):
    sub = tmp_path / "elsewhere"
    sub.mkdir()
    other = write_program(sub, OTHER, "other.py")
    source = f"""
import os, sys
pid = os.fork()
if pid == 0:
    os.execv(sys.executable, [sys.executable, {str(other)!r}, "5"])
_, status = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(status))
"""
    p = profile_program(source, options=["--cpu-only"])
    assert p.proc.stdout == "5\n"
    entry = _line_of(p, "OTHER LINE", other)
    assert abs(_cpu(entry) - 0.2) <= 0.05, p.describe()
    rows = p.profile["processes"]
    forked = [r for r in rows if r["started_by"] == "fork"]
    execd = [r for r in rows if r["started_by"] == "exec"]
    assert len(forked) == 1 and forked[0]["ended_by"] == "exec", rows
    assert len(execd) == 1 and execd[0]["pid"] == forked[0]["pid"] and execd[0]["exit_status"] == 5, rows
    assert str(other) in execd[0]["command"]


def test_a_short_childs_module_level_memory_is_on_its_line(profile_program, tmp_path):
    """A child run by Python itself (not by the launcher) whose top level
    allocates without the GIL and ends before any snapshot: its samples named
    a code object freed before the child's last drain, and its 32 MB were
    unattributed.  The child follows its __main__ code from its start now
    (children._follow_main_code).  --cpu-sampling-rate 1: no snapshot in the
    child.  Tolerance: a window (1 MB) a block."""
    child = write_program(tmp_path, """
import _groundtruth as gt
kept = [gt.malloc_bytes_nogil(8 << 20) for _ in range(4)]  # CHILD ALLOCATES
""", "child.py")
    source = f"""
import subprocess, sys
subprocess.run([sys.executable, {str(child)!r}], check=True)
"""
    p = profile_program(source, options=["--cpu-sampling-rate", "1"])
    line = _line_of(p, "CHILD ALLOCATES", child)
    assert abs(line["n_malloc_mb"] - 32) <= 4, (line, p.profile["unattributed_memory"])
    assert p.profile["unattributed_memory"]["malloc_mb"] < 8, p.profile["unattributed_memory"]


# A function sent to workers by value, as cloudpickle sends the program's own
# functions (joblib's loky workers, dask, ray): its code object comes back with
# the file "<dynamic-code>", its first line and line table unchanged, and its
# module dictionary with the original's __file__.
SHIPPED_BY_VALUE = """
import builtins, marshal, multiprocessing as mp, os, sys, time, types

def spin(seconds):
    end = time.thread_time() + seconds
    while time.thread_time() < end:  # SHIPPED LOOP
        kept = [bytes(100) for _ in range(50)]  # SHIPPED BODY

def run_shipped(payload):
    code, path = marshal.loads(payload)
    f = types.FunctionType(code, {"__file__": path, "__name__": "__main__", "__builtins__": builtins,
                                  "time": time})
    return f(0.2), f.__code__.co_filename

def renamed(code):
    # The code as cloudpickle rebuilds it, nested codes (3.10-3.11's list
    # comprehension) too.
    return code.replace(co_filename="<dynamic-code>",
                        co_consts=tuple(renamed(c) if isinstance(c, types.CodeType) else c for c in code.co_consts))

if __name__ == "__main__":
    payload = marshal.dumps((renamed(spin.__code__), os.path.abspath(__file__)))
    with mp.get_context("spawn").Pool(2) as pool:
        print(pool.map(run_shipped, [payload] * 4, chunksize=1))
"""


@pytest.mark.parametrize("options", [["--cpu-only"], []], ids=["cpu-only", "full"])
def test_a_function_sent_by_value_to_workers_keeps_its_lines(profile_program, options):
    """Before: the workers' 0.8 s of CPU in `spin` was on no line (loky's
    workers running a function of the script through joblib: 0 s on its lines,
    the time found only with --profile-all, on joblib's own).  The code's file
    is taken from its module dictionary's __file__ where it is cloudpickle's
    "<dynamic-code>".  Each task makes the function again, and its code dies
    with it; with memory on, a memory sample may register a code before a
    frame's dictionary tells its file (its facts' block kept its size as the
    code became reported: the first version gave it back larger).  Tolerance:
    the loop's lines hold at least 70% of the workers' 0.8 s of CPU in them."""
    p = profile_program(SHIPPED_BY_VALUE, options=options)
    assert "<dynamic-code>" in p.proc.stdout, p.proc.stdout
    seconds = sum(p.line(m)["n_cpu_python_sec"] + p.line(m)["n_cpu_native_sec"]
                  for m in ("SHIPPED LOOP", "SHIPPED BODY"))
    assert seconds >= 0.7 * 0.8, (p.describe("SHIPPED LOOP", "SHIPPED BODY"), p.profile["processes"])
    assert not any(name.startswith("<") for name in p.profile["files"]), list(p.profile["files"])


def test_a_childs_library_threads_charge_the_line_that_started_them(profile_program, tmp_path):
    """A child's pool threads, which run no code of the program: their CPU goes
    to the child's line that started them, as in the first process
    (test_threads_that_run_no_program_code_charge_the_line_that_started_them);
    a child started by python itself watches thread starts the same way
    (the start's audit event, or before 3.12 the _thread.start_new_thread
    stand-in: module.c, see_thread_starts).
    Truth: 0.6 s of CPU in two C calls.  Tolerance: at least 85% of it on the
    child's line, as native time."""
    child = write_program(tmp_path, """
from concurrent.futures import ThreadPoolExecutor
import _groundtruth as gt
with ThreadPoolExecutor(2) as pool:
    list(pool.map(gt.spin_nogil, [300, 300]))  # CHILD MAP
""", "child.py")
    source = f"""
import subprocess, sys
subprocess.run([sys.executable, {str(child)!r}], check=True)
"""
    p = profile_program(source, options=["--cpu-only"])
    line = _line_of(p, "CHILD MAP", child)
    assert line["n_cpu_native_sec"] >= 0.85 * 0.6, (line, p.profile["unattributed"])


def test_subprocess_run_of_python(profile_program, tmp_path):
    other = write_program(tmp_path, OTHER, "other.py")
    source = f"""
import subprocess, sys
print(subprocess.run([sys.executable, {str(other)!r}, "7"]).returncode)  # RUNS OTHER
"""
    p = profile_program(source, options=["--cpu-only"])
    assert p.proc.stdout == "7\n"
    assert abs(_cpu(_line_of(p, "OTHER LINE", other)) - 0.2) <= 0.05, p.describe()
    assert _cpu(p.line("RUNS OTHER")) < 0.05  # the parent waited
    rows = p.profile["processes"]
    assert len(rows) == 2 and rows[1]["started_by"] == "exec" and rows[1]["exit_status"] == 7, rows
    assert rows[1]["ppid"] == rows[0]["pid"] and rows[1]["profiled"]


@pytest.mark.parametrize("imported", ["by-the-program", "before-the-run"])
def test_non_python_child_is_listed(profile_program, tmp_path, imported):
    """subprocess is wrapped when the program imports it (children.py), or at
    the start when it was imported before (here by a sitecustomize)."""
    source = """
import subprocess
subprocess.run(["/bin/sh", "-c", "exit 3"])
subprocess.run("echo '<b>\\x1b[31m' > /dev/null", shell=True)
"""
    env = None
    if imported == "before-the-run":
        site_dir = tmp_path / "site"
        site_dir.mkdir()
        (site_dir / "sitecustomize.py").write_text("import subprocess\n")
        env = {"PYTHONPATH": str(site_dir)}
    p = profile_program(source, options=["--cpu-only"], env=env)
    rows = p.profile["processes"]
    assert len(rows) == 3 and p.profile["process_count"] == 3, rows
    sh = rows[1]
    assert sh["command"] == ["/bin/sh", "-c", "exit 3"] and sh["exit_status"] == 3
    assert sh["profiled"] is False and sh["started_by"] == "subprocess" and sh["pid"] > 0
    assert rows[2]["command"][:2] == ["/bin/sh", "-c"] and "\x1b" in rows[2]["command"][2]


def test_a_crashed_child_is_named_and_listed(profile_program):
    """A multiprocessing child dies of SIGSEGV and the parent carries on: the
    line on stderr names the child (its pid) and its own profile, not the run's,
    as lost; the run's profile is written, and its row says what it died of.
    The line is the top's, once (the child's own stderr is the program's: the
    child's crash handler says nothing there).
    Before: "the program crashed (SIGSEGV): the profile is lost", above a
    profile that was written, and a row that said "still running ... or
    killed"."""
    source = """
import ctypes, multiprocessing as mp, sys

def bad():
    ctypes.string_at(0)

if __name__ == "__main__":
    p = mp.Process(target=bad)
    p.start()
    p.join()
    print("exit code", p.exitcode)
"""
    p = profile_program(source, options=["--cpu-only"])
    assert p.proc.stdout == "exit code -11\n", p.proc.stderr
    rows = p.profile["processes"]
    crashed = [r for r in rows if r["exit_status"] == 128 + 11]
    assert len(crashed) == 1 and crashed[0]["note"] == "no profile: it died of SIGSEGV", rows
    said = [line for line in p.proc.stderr.splitlines() if "crashed" in line]
    assert said == [f"pyrometer: the program's child process {crashed[0]['pid']} crashed (SIGSEGV): its own "
                    f"profile is lost, a crashed process cannot write it (the run's profile lists it)"], p.proc.stderr


def test_a_crashed_childs_own_stderr_has_no_line_of_ours(profile_program):
    """CPython's test_subprocess reads a crashing child's stderr as the
    program's own output: nothing of pyrometer's may be in it (before, the
    child's crash handler wrote its line there)."""
    source = """
import subprocess, sys
r = subprocess.run([sys.executable, "-c", "import os; os.abort()"], capture_output=True, text=True)
print("status", r.returncode, "stderr", repr(r.stderr))
"""
    p = profile_program(source, options=["--cpu-only"])
    assert p.proc.stdout == "status -6 stderr ''\n", p.proc.stderr
    said = [line for line in p.proc.stderr.splitlines() if "crashed" in line]
    assert len(said) == 1 and "crashed (SIGABRT)" in said[0], p.proc.stderr


def test_a_forked_workers_crash_reaches_its_pool_after_faulthandler_is_off(profile_program):
    """A forked worker inherits faulthandler's handler; the worker turns it off
    (faulthandler.disable() puts back what it found: the handler of ours the
    worker inherited too) and crashes.  The worker's own crash handler of
    pyrometer's chained to faulthandler's, now off, which returned: the
    SIGSEGV was lost, the task returned None and the pool never broke
    (CPython 3.10's test_concurrent_futures, ProcessPoolForkExecutorDeadlockTest;
    3.12 the same).  A child has no crash handler of its own now."""
    source = """
import concurrent.futures as cf, faulthandler, multiprocessing as mp

def crash():
    faulthandler.disable()
    faulthandler._sigsegv()

if __name__ == "__main__":
    faulthandler.enable()
    with cf.ProcessPoolExecutor(2, mp_context=mp.get_context("fork")) as ex:
        try:
            ex.submit(crash).result(timeout=60)
            print("returned")
        except Exception as e:
            print(type(e).__name__)
"""
    for options in (["--cpu-only"], []):
        p = profile_program(source, options=options)
        assert p.proc.stdout == "BrokenProcessPool\n", (options, p.proc.stderr)


def test_many_short_children_merge_quickly(profile_program):
    source = """
import multiprocessing as mp

def square(x):
    return x * x

if __name__ == "__main__":
    mp.set_start_method("fork")
    with mp.Pool(4, maxtasksperchild=1) as pool:
        assert sum(pool.map(square, range(500), chunksize=1)) == sum(x * x for x in range(500))
"""
    p = profile_program(source, options=["--cpu-only"], timeout=120)
    assert p.profile["process_count"] >= 501
    assert len(p.profile["processes"]) == p.profile["process_count"]
    assert p.profile["children_merge_sec"] < 1.0, p.profile["children_merge_sec"]


def _partial(directory: Path, n: int, lines: int) -> None:
    """n children's partial profiles, each with the same `lines` lines."""
    from pyrometer.core import document
    cpu = document.cpu_sums(python_ns=1e6, native_ns=2e6, system_ns=3e6, busy_ns=0.5e6, samples=1)
    records = [[f"/src/module_{i % 50}.py", i, f"function_{i // 20}", i - i % 20, cpu] for i in range(lines)]
    memory_lines = [{"filename": f"/src/module_{i % 50}.py", "lineno": i, "function": f"function_{i // 20}",
                     "function_lineno": i - i % 20, "alloc_bytes": 1 << 20, "python_bytes": 1 << 19,
                     "free_bytes": 1 << 20, "copy_bytes": 0, "alloc_samples": 1, "free_samples": 1,
                     "copy_samples": 0, "net_bytes": 0, "peak_bytes": 1 << 20, "watched": 1, "watched_freed": 1,
                     "watched_evicted": 0, "timeline": [[0.001 * k, 0.5] for k in range(5)]}
                    for i in range(lines)]
    for k in range(n):
        raw = {"records": records, "unattributed": document.cpu_sums(), "snapshots": 10, "main_snapshots": 10,
               "threads_seen": 1, "process_cpu_ns": 1000, "memory": {
                   "lines": memory_lines, "max_footprint_bytes": 1 << 20, "max_footprint_where": None,
                   "max_footprint_time_sec": 0.0, "python_memory_profiled": True}}
        record = {"pid": 1000 + k, "ppid": 1, "command": ["python", "-c", "pass"], "started_by": "fork",
                  "start_time": 0.0, "wall_sec": 0.01, "cpu_sec": 0.001, "peak_mb": 1.0, "exit_status": 0,
                  "ended_by": "os._exit", "raw": document.plain(raw), "spawned": [], "reaped": {}}
        (directory / f"p-{1000 + k}-0.json").write_text(json.dumps(record))


def _merge(directory: Path) -> int:
    """Merges the partial profiles in directory: the peak of the bytes traced."""
    from pyrometer.core import document
    from pyrometer.run import children
    top_raw = {"records": [], "unattributed": document.cpu_sums(), "memory": {
        "lines": [], "max_footprint_bytes": 0, "max_footprint_where": None, "max_footprint_time_sec": 0.0}}
    top = {"pid": 1, "ppid": 0, "command": [], "started_by": "command", "profiled": True, "wall_sec": 1.0,
           "cpu_sec": 1.0, "peak_mb": 0.0, "exit_status": 0, "ended_by": "exit", "note": None}
    tracemalloc.start()
    try:
        raw, table, count, _ = children.merge(str(directory), top_raw, top, 0.0, [], {})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(raw["records"]) == 200 and count == len(table)
    assert raw["records"][0][4].python_ns == pytest.approx(1e6 * (count - 1))
    assert raw["memory"]["lines"][0]["alloc_bytes"] == (count - 1) << 20
    return peak


def test_merge_memory_follows_lines_not_children(tmp_path):
    """200 children of the same 200 lines take no more memory to merge than 20
    do, beyond their rows in the process table: the merge adds each child's
    partial profile into sums keyed by line, one file at a time."""
    few, many = tmp_path / "few", tmp_path / "many"
    few.mkdir()
    many.mkdir()
    _partial(few, 20, 200)
    _partial(many, 200, 200)
    few_peak = _merge(few)
    many_peak = _merge(many)
    # One child's partial profile here is ~0.3 MB once parsed: kept, 200 of
    # them would be ~60 MB.  The 180 more rows of the table cost well under 1 MB.
    assert many_peak < few_peak + (1 << 20), (few_peak, many_peak)


def test_no_children_profiles_the_first_process_only(profile_program, tmp_path):
    source = WORKER + """
if __name__ == "__main__":
    import multiprocessing as mp
    mp.set_start_method("fork")
    with mp.Pool(2) as pool:
        pool.map(worker, [150] * 2, chunksize=1)  # PARENT WAITS
"""
    p = profile_program(source, options=["--cpu-only", "--no-children"])
    assert p.profile["process_count"] == 1 and len(p.profile["processes"]) == 1
    assert p.profile["options"]["children"] is False
    assert any("--no-children" in n for n in p.profile["notices"]), p.profile["notices"]
    assert _cpu(p.line("WORKER LINE")) == 0.0


def test_users_sitecustomize_still_runs_and_run_directory_goes(run_pyrometer, tmp_path):
    """The bootstrap hides the user's sitecustomize and runs it; the run
    directory is gone when the command ends, also when it ends by os._exit."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import os\nos.environ['USER_SITECUSTOMIZE'] = 'ran'\n")
    other = write_program(tmp_path, "import os, sys\nprint(os.environ.get('USER_SITECUSTOMIZE'))\n"
                                    "print(any(p.endswith('boot') for p in sys.path))\n"
                                    "open(sys.argv[1], 'w').write(os.environ['PYTHONPATH'].split(os.pathsep)[0])\n",
                          "other.py")
    prog = write_program(tmp_path, f"""
import os, subprocess, sys
subprocess.run([sys.executable, {str(other)!r}, {str(tmp_path / "boot.txt")!r}])
os._exit(0)
""")
    temp = tmp_path / "temp"
    temp.mkdir()
    env = {"PYTHONPATH": os.pathsep.join([str(site), program_env(None).get("PYTHONPATH", "")]),
           "TMPDIR": str(temp)}
    proc = run_pyrometer(["--cpu-only", "--json", "--outfile", tmp_path / "p.json", prog], cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "ran\nFalse\n"
    assert not list(temp.glob("pyrometer-run-*"))
    # The run directory is gone, and was made where only this user may write:
    # a path left in a surviving child's PYTHONPATH cannot be taken over.
    boot = (tmp_path / "boot.txt").read_text()
    run_dir = os.path.dirname(boot)
    assert os.path.basename(run_dir).startswith("pyrometer-run-") and not os.path.exists(run_dir), boot
    parent = os.stat(os.path.dirname(run_dir))
    assert parent.st_uid == os.getuid() and not parent.st_mode & 0o022, oct(parent.st_mode)
    rows = json.loads((tmp_path / "p.json").read_text())["processes"]
    assert len(rows) == 2 and rows[1]["profiled"], rows


def test_process_table_is_checked_and_escaped(tmp_path):
    from pyrometer import model
    from pyrometer.render import text
    from synthetic import make_profile
    profile = make_profile(2, 5, memory=False)
    profile["process_count"] = 2
    profile["processes"] = [
        {"pid": 10, "ppid": 1, "command": ["python", "prog.py"], "started_by": "command", "profiled": True,
         "wall_sec": 1.0, "cpu_sec": 0.5, "peak_mb": None, "exit_status": 0, "ended_by": "exit", "note": None},
        {"pid": 11, "ppid": 10, "command": ["/bin/sh", "-c", "echo \x1b]0;title\x07 \u202e"], "started_by": "subprocess",
         "profiled": False, "wall_sec": None, "cpu_sec": None, "peak_mb": None, "exit_status": 3,
         "ended_by": None, "note": "not profiled"}]
    checked = model.loads(json.dumps(profile).encode())
    out = text.render(checked, width=200)
    assert "Processes: 2" in out and "\x1b" not in out and "\u202e" not in out and "\\x1b" in out
    for field, value in (("pid", "11"), ("command", "sh"), ("exit_status", 300), ("cpu_sec", -1.0),
                         ("profiled", 1)):
        bad = json.loads(json.dumps(profile))
        bad["processes"][1][field] = value
        with pytest.raises(model.ProfileError, match=rf"processes\[1\]\.{field}"):
            model.loads(json.dumps(bad).encode())
    old = json.loads(json.dumps(profile))
    del old["processes"], old["process_count"]
    assert model.loads(json.dumps(old).encode())["process_count"] == 1


def test_process_table_on_the_web_page_is_text(tmp_path):
    """The web report shows the process table, every command line as text: a
    command holding markup adds no element to the page."""
    from browser import Browser, chromium
    if chromium() is None:
        pytest.skip("chromium is not installed: the web report's browser tests need it")
    from pyrometer.render import html
    from synthetic import make_profile
    profile = make_profile(2, 5, memory=False)
    profile["process_count"] = 3
    hostile = "<img src=x onerror=\"document.title='pwned'\"></td></tr><script>document.title='pwned'</script>"
    profile["processes"] = [
        {"pid": 10, "ppid": 1, "command": ["python", "prog.py"], "started_by": "command", "profiled": True,
         "wall_sec": 1.0, "cpu_sec": 0.5, "peak_mb": 3.0, "exit_status": 0, "ended_by": "exit", "note": None},
        {"pid": 11, "ppid": 10, "command": ["python", "-c", hostile], "started_by": "exec", "profiled": True,
         "wall_sec": 0.5, "cpu_sec": 0.4, "peak_mb": None, "exit_status": 143, "ended_by": "SIGTERM",
         "note": None},
        {"pid": 12, "ppid": None, "command": ["/bin/sh", "-c", "exit 3"], "started_by": "subprocess",
         "profiled": False, "wall_sec": None, "cpu_sec": None, "peak_mb": None, "exit_status": 3,
         "ended_by": None, "note": "not profiled: <b>not Python</b>"}]
    out = tmp_path / "p.html"
    out.write_text(html.render(profile))
    with Browser(tmp_path / "chromium") as browser:
        page = browser.open(out)
        assert page.eval("document.querySelectorAll('#processes tbody tr').length") == 3
        assert hostile in page.eval("document.querySelector('#processes tbody tr:nth-child(2) .cmd').textContent")
        assert page.eval("document.querySelectorAll('#processes img, #processes script, #processes b').length") == 0
        assert page.eval("document.title") != "pwned"
        assert "3 processes" in page.eval("document.getElementById('run-meta').textContent")
        assert page.errors() == []


def _start_ticks(pid: int) -> str:
    with open(f"/proc/{pid}/stat", "rb") as f:
        stat_line = f.read()
    return stat_line[stat_line.rfind(b")") + 2:].split()[19].decode()


def test_run_directories_of_killed_runs_are_swept(tmp_path, start_pyrometer, run_pyrometer):
    """A run killed with SIGKILL leaves its private run directory (nothing of
    pyrometer runs then); the next run removes it, and every other directory
    whose owner has ended, and leaves alone those whose owner still runs (the
    same pid with another start time is another process) and those it cannot
    judge."""
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    env = {"XDG_RUNTIME_DIR": str(runtime)}
    (tmp_path / "sleeper.py").write_text("import time\nopen('started', 'w').close()\ntime.sleep(30)\n")
    proc = start_pyrometer(["--json", "--outfile", "out.json", "sleeper.py"], cwd=tmp_path, env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "started").exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the sleeper never started"
            time.sleep(0.02)
    finally:
        proc.kill()
        proc.wait()
    killed = [p for p in runtime.iterdir() if p.name.startswith("pyrometer-run-")]
    assert len(killed) == 1, f"the killed run left {killed}"
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    stale = runtime / "pyrometer-run-stale"
    reused_pid = runtime / "pyrometer-preload-reused"
    alive = runtime / "pyrometer-run-alive"
    unknown = runtime / "pyrometer-run-unknown"
    for d, owner in ((stale, f"{gone.pid} 12345"), (reused_pid, f"{os.getpid()} 1"),
                     (alive, f"{os.getpid()} {_start_ticks(os.getpid())}"), (unknown, None)):
        d.mkdir(mode=0o700)
        if owner is not None:
            (d / ".owner").write_text(owner + "\n")
    (tmp_path / "prog.py").write_text("print('ran')\n")
    done = run_pyrometer(["--json", "--outfile", "out.json", "prog.py"], cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    left = sorted(p.name for p in runtime.iterdir())
    assert left == ["pyrometer-run-alive", "pyrometer-run-unknown"], left
