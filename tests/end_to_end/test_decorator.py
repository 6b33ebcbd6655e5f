"""@profile: a builtin while pyrometer runs the program, `from pyrometer import
profile` everywhere (a decorator that does nothing without pyrometer).  When
any function carries it, the report holds only the decorated functions and
their lines (code written inside them included), in every format and in
`pyrometer view`, while the header's totals stay the whole run's."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import PROGRAM_TIMEOUT_S, program_env, write_program

# Three busy functions of the same cost and a busy module level; each loop runs
# for a fixed time, so that each gets about a quarter of the run.
BUSY = """
import time

def burn(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end: pass  # burn line

{deco_a}
def alpha():
    end = time.perf_counter() + 0.25
    total = 0
    while time.perf_counter() < end: total += 1  # alpha hot
    return total

{deco_b}
def beta():
    end = time.perf_counter() + 0.25
    total = 0
    while time.perf_counter() < end: total += 2  # beta hot
    return total

{deco_c}
def gamma():
    end = time.perf_counter() + 0.25
    total = 0
    while time.perf_counter() < end: total += 3  # gamma hot
    return total

alpha(); beta(); gamma()
end = time.perf_counter() + 0.25
while time.perf_counter() < end: pass  # module hot
print("done")
"""


def busy(a="@profile", b="", c="@profile") -> str:
    return BUSY.format(deco_a=a, deco_b=b, deco_c=c)


def cpu(entry) -> float:
    return entry["n_cpu_python_sec"] + entry["n_cpu_native_sec"] + entry["n_sys_sec"]


def test_only_the_decorated_functions_and_their_lines(profile_program):
    p = profile_program(busy(), options=["--cpu-only"])
    prof = p.profile
    assert p.proc.stdout == "done\n"
    assert list(prof["files"]) == [str(p.program)], list(prof["files"])
    f = p.file()
    names = {e["line"] for e in f["functions"]}
    assert names == {"alpha", "gamma"}, names
    shown = {e["lineno"] for e in f["lines"]}
    spans = [(e["lineno"], e["end_lineno"]) for e in prof["profiled_functions"]]
    assert [e["function"] for e in prof["profiled_functions"]] == ["alpha", "gamma"]
    for lineno in shown:
        assert any(lo <= lineno <= hi for lo, hi in spans), (lineno, spans)
    for marker in ("alpha hot", "gamma hot", "def alpha(", "def gamma("):
        assert p.lineno(marker) in shown, marker
    for marker in ("beta hot", "module hot", "burn line", "alpha(); beta(); gamma()"):
        assert p.lineno(marker) not in shown, marker
    assert p.line("alpha hot")["n_samples"] >= 5, p.describe("alpha hot")
    assert p.line("gamma hot")["n_samples"] >= 5, p.describe("gamma hot")
    # The header is the whole run's (four equal parts, two of them shown); the
    # shares are of it, so each decorated function has about a quarter, not a half.
    # Waits for the CPU count on both sides: on a loaded machine they are a
    # large part of the run, spread over all four parts alike.
    whole = sum(prof["cpu_time_sec"].values())
    shown_time = sum(cpu(e) + e["n_gil_wait_sec"] + e["n_cpu_wait_sec"] for e in f["lines"])
    assert abs(whole - prof["total_time_sec"]) < 0.01, p.describe()
    assert 0.3 < shown_time / whole < 0.7, p.describe()
    # The file's total is its shown lines' (the decorated functions'), not the whole file's.
    assert abs(f["cpu_time_sec"] - sum(cpu(e) + e["n_gil_wait_sec"] + e["n_cpu_wait_sec"]
                                       for e in f["lines"])) < 1e-6
    assert 30 < f["percent_cpu_time"] < 70, f["percent_cpu_time"]
    assert p.line("alpha hot")["n_cpu_percent_python"] < 40, p.describe("alpha hot")
    assert any(n.startswith("@profile: only the 2 decorated functions") for n in prof["notices"]), prof["notices"]


def test_the_spans_are_the_functions_source(profile_program):
    p = profile_program(busy(), options=["--cpu-only"])
    first, last = [(e["lineno"], e["end_lineno"]) for e in p.profile["profiled_functions"]][0]
    assert first == p.lineno("def alpha(") - 1  # the decorator's line: co_firstlineno
    assert last == p.lineno("def alpha(") + 4  # its return
    assert p.profile["profiled_functions"][0]["filename"] == str(p.program)


def test_without_the_decorator_everything_is_reported(profile_program):
    p = profile_program(busy("", "", ""), options=["--cpu-only"])
    prof = p.profile
    assert prof["profiled_functions"] == []
    names = {e["line"] for e in p.file()["functions"]}
    assert {"alpha", "beta", "gamma", "<module>"} <= names, names
    shown = {e["lineno"] for e in p.file()["lines"]}
    for marker in ("alpha hot", "beta hot", "gamma hot", "module hot"):
        assert p.lineno(marker) in shown
    assert p.line("beta hot")["n_samples"] >= 5, p.describe("beta hot")
    assert not any("@profile" in n for n in prof["notices"])


def test_text_json_and_html_agree_and_view_shows_the_same(profile_program, run_pyrometer, tmp_path):
    p = profile_program(busy(), options=["--cpu-only"])
    saved = tmp_path / "profile.json"
    text = run_pyrometer(["view", saved], cwd=tmp_path)
    assert text.returncode == 0, text.stderr
    page = tmp_path / "page.html"
    html = run_pyrometer(["view", "--html", "-o", page, saved], cwd=tmp_path)
    assert html.returncode == 0, html.stderr
    again = run_pyrometer(["view", "--json", saved], cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["files"] == p.profile["files"]
    assert json.loads(again.stdout)["profiled_functions"] == p.profile["profiled_functions"]
    html_text = page.read_text()
    for marker in ("# alpha hot", "# gamma hot"):
        assert marker in text.stdout, text.stdout
        assert marker in html_text
    for marker in ("# beta hot", "# module hot", "# burn line"):
        assert marker not in text.stdout, text.stdout
        assert marker not in html_text
    assert "notice: @profile: only the 2 decorated functions" in text.stdout
    # The report printed by the run itself is the same as the saved one's view.
    direct = run_pyrometer(["--cpu-only", p.program], cwd=tmp_path)
    assert direct.returncode == 0, direct.stderr
    assert "# alpha hot" in direct.stdout and "# beta hot" not in direct.stdout, direct.stdout


def test_from_pyrometer_import_profile_under_pyrometer_and_plain_python(profile_program, run_bare):
    source = "from pyrometer import profile\n" + busy() + (
        "import pyrometer, builtins\n"
        "print(profile is pyrometer.profile, profile(alpha) is alpha, profile(len) is len)\n")
    p = profile_program(source, options=["--cpu-only"])
    assert {e["line"] for e in p.file()["functions"]} == {"alpha", "gamma"}
    bare = run_bare(source)
    assert bare.returncode == 0, bare.stderr
    assert bare.stdout == p.proc.stdout == "done\nTrue True True\n"
    assert bare.stderr == ""


NO_OP = """
import asyncio, functools
from pyrometer import profile

@profile
def f(x): return x + 1
class C:
    @profile
    def m(self): return 1
    @profile
    @staticmethod
    def s(): return 2
    @classmethod
    @profile
    def k(cls): return 3
@profile
def gen(): yield 1; yield 2
@profile
async def co(): return 5
@profile
class D:
    def m(self): return 6
g = functools.partial(f, 1)
print(profile(g) is g, profile(f) is f, f(1), C().m(), C.s(), C.k(), list(gen()), asyncio.run(co()),
      D().m(), D.__name__, f.__name__, C.__dict__["s"].__class__.__name__, C.__dict__["k"].__class__.__name__)
import builtins
print(hasattr(builtins, "profile"))
"""


def test_the_decorator_changes_nothing_without_pyrometer(run_bare, profile_program):
    bare = run_bare(NO_OP)
    assert bare.returncode == 0, bare.stderr
    assert bare.stdout == ("True True 2 1 2 3 [1, 2] 5 6 D f staticmethod classmethod\nFalse\n"), bare.stdout
    p = profile_program(NO_OP, options=["--cpu-only"])
    assert p.proc.stdout == bare.stdout.replace("False\n", "True\n")


KINDS = """
import asyncio, time

def burn(seconds):
    end = time.perf_counter() + seconds
    total = 0
    while time.perf_counter() < end:
        total += 1
    return total

class Shapes:
    @profile
    def method(self):
        end = time.perf_counter() + 0.12
        while time.perf_counter() < end: pass  # method hot

    @profile
    @staticmethod
    def static_first():
        end = time.perf_counter() + 0.12
        while time.perf_counter() < end: pass  # static hot

    @classmethod
    @profile
    def class_last(cls):
        end = time.perf_counter() + 0.12
        while time.perf_counter() < end: pass  # class hot

    def undecorated(self):
        end = time.perf_counter() + 0.12
        while time.perf_counter() < end: pass  # undecorated hot

@profile
class Marked:
    def member(self):
        end = time.perf_counter() + 0.12
        while time.perf_counter() < end: pass  # member hot

@profile
def generator():
    end = time.perf_counter() + 0.12
    while time.perf_counter() < end:
        yield 1  # generator hot

@profile
async def coroutine():
    end = time.perf_counter() + 0.12
    while time.perf_counter() < end: pass  # coroutine hot
    await asyncio.sleep(0)

@profile
def outer():
    def inner():
        end = time.perf_counter() + 0.12
        while time.perf_counter() < end: pass  # inner hot
    inner()
    return [x * x for x in range(300_000)]  # comprehension hot

s = Shapes()
s.method(); Shapes.static_first(); Shapes.class_last(); s.undecorated(); Marked().member()
sum(generator()); asyncio.run(coroutine()); outer()
"""


def qualified(name: str) -> str:
    """A function's name as the profile gives it: 3.10's code objects carry no
    qualified name, and the profile keys functions by what they carry."""
    return name if sys.version_info >= (3, 11) else name.rpartition(".")[2]


def test_methods_generators_coroutines_classes_and_nested_code(profile_program):
    p = profile_program(KINDS, options=["--cpu-only", "--cpu-sampling-rate", "0.002"])
    decorated = {e["function"] for e in p.profile["profiled_functions"]}
    assert decorated == {qualified(n) for n in ("Shapes.method", "Shapes.static_first", "Shapes.class_last",
                                                "Marked.member", "generator", "coroutine", "outer")}, decorated
    for marker in ("method hot", "static hot", "class hot", "member hot", "generator hot", "coroutine hot",
                   "inner hot"):
        assert p.line(marker)["n_samples"] > 0, p.describe(marker)
    shown = {e["lineno"] for e in p.file()["lines"]}
    assert p.lineno("undecorated hot") not in shown
    assert p.lineno("def burn(") not in shown
    names = {e["line"] for e in p.file()["functions"]}
    # Code defined inside a decorated function is its own: listed too.
    assert qualified("outer.<locals>.inner") in names, names
    assert qualified("Shapes.undecorated") not in names and "<module>" not in names, names


MEMORY = """
import time

@profile
def copies():
    big = bytearray(40 * 1048576)
    for _ in range(5):
        b = bytes(big)  # copy line
        del b
    return len(big)

def hoards():
    kept = [bytearray(1048576) for _ in range(150)]  # hoard line
    time.sleep(0.05)
    return len(kept)

copies()
hoards()
"""


def test_memory_and_copy_volume_of_the_decorated_functions_only(profile_program):
    p = profile_program(MEMORY)
    prof = p.profile
    assert prof["memory"] is True
    shown = {e["lineno"] for e in p.file()["lines"]}
    assert p.lineno("hoard line") not in shown
    line = p.line("copy line")
    assert line["n_malloc_mb"] > 100 and line["n_copy_mb_s"] > 0, line
    # The run's peak is the undecorated function's 150 MB: the header is the whole run's.
    assert prof["max_footprint_mb"] > 120, prof["max_footprint_mb"]
    for top in prof["top_allocations"]:
        assert top["lineno"] != p.lineno("hoard line"), prof["top_allocations"]


OWN_NAME = """
import builtins
profile = 3
def f():
    return profile
print(f(), "profile" in dir(builtins))
"""

CPROFILE = """
import cProfile
profile = cProfile.Profile
def busy():
    return sum(i for i in range(200_000))
print(profile.__name__, busy())
"""


def test_a_program_with_its_own_profile_keeps_it(profile_program, run_bare):
    for source in (OWN_NAME, CPROFILE):
        p = profile_program(source, options=["--cpu-only"])
        bare = run_bare(source)
        assert p.proc.stdout.replace("True", "False") == bare.stdout, (p.proc.stdout, bare.stdout)
        assert p.profile["profiled_functions"] == []


CHILD = """
import time

@profile
def child_work():
    end = time.perf_counter() + 0.3
    while time.perf_counter() < end: pass  # child hot

def child_other():
    end = time.perf_counter() + 0.2
    while time.perf_counter() < end: pass  # child other

child_work(); child_other()
"""

PARENT = """
import subprocess, sys, time
end = time.perf_counter() + 0.2
while time.perf_counter() < end: pass  # parent hot
subprocess.run([sys.executable, "child.py"], check=True)
"""


def test_a_childs_decorated_functions_are_merged(profile_program, tmp_path):
    child = write_program(tmp_path, CHILD, "child.py")
    p = profile_program(PARENT, options=["--cpu-only"])
    assert p.profile["process_count"] == 2, p.profile["processes"]
    assert [e["function"] for e in p.profile["profiled_functions"]] == ["child_work"]
    assert list(p.profile["files"]) == [str(child)], list(p.profile["files"])
    lines = {e["lineno"]: e for e in p.file(child)["lines"]}
    text = child.read_text().splitlines()
    hot = next(i + 1 for i, t in enumerate(text) if "child hot" in t)
    other = next(i + 1 for i, t in enumerate(text) if "child other" in t)
    assert lines[hot]["n_samples"] >= 5, lines[hot]
    assert other not in lines
    # The header counts both processes, the parent's loop and the child's other function too.
    assert p.profile["total_time_sec"] > 0.55, p.profile["total_time_sec"]


def test_a_damaged_profiled_functions_field_is_one_line(profile_program, run_pyrometer, tmp_path):
    p = profile_program(busy(), options=["--cpu-only"])
    bad = dict(p.profile, profiled_functions=[{"filename": "x.py", "function": "f", "lineno": "1",
                                                "end_lineno": 2}])
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(bad))
    proc = run_pyrometer(["view", path], cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"pyrometer: error: {path} is damaged: profiled_functions[0].lineno has the wrong type (string): "
        "it must be a whole number from 0 to 2147483647"], proc.stderr


def test_plain_python_import_does_not_load_the_core(groundtruth_dir, tmp_path):
    """`from pyrometer import profile` in a program run without pyrometer must stay
    cheap and harmless: no measuring core, nothing marked."""
    prog = write_program(tmp_path, """
        import sys
        from pyrometer import profile
        from pyrometer.core import focus
        @profile
        def f(): pass
        print("pyrometer._core" in sys.modules, focus._sites)
    """)
    proc = subprocess.run([sys.executable, str(prog)], capture_output=True, text=True, cwd=tmp_path,
                          env=program_env(groundtruth_dir), timeout=PROGRAM_TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "False {}\n"


FORKED = """
import os, time

def parent_work():
    end = time.perf_counter() + 0.2
    while time.perf_counter() < end: pass  # parent hot

pid = os.fork()
if pid == 0:
    @profile
    def forked_work():
        end = time.perf_counter() + 0.25
        while time.perf_counter() < end: pass  # forked hot
    forked_work()
    os._exit(0)
parent_work()
os.waitpid(pid, 0)
"""


def test_a_function_decorated_in_a_forked_child_is_merged(profile_program):
    p = profile_program(FORKED, options=["--cpu-only"])
    assert p.profile["process_count"] == 2, p.profile["processes"]
    assert [e["function"] for e in p.profile["profiled_functions"]] == [qualified("forked_work")]
    shown = {e["lineno"] for e in p.file()["lines"]}
    assert p.lineno("parent hot") not in shown
    assert p.line("forked hot")["n_samples"] >= 5, p.describe("forked hot")


def test_the_decorator_called_with_parentheses_or_other_profilers_options(profile_program, run_bare):
    """@profile(), and memory_profiler's @profile(precision=4), mark the function
    as @profile does (the options are ignored); `from pyrometer import profile`
    written so runs unchanged under plain python."""
    source = busy(a="@profile()", c="@profile(precision=4)")
    p = profile_program(source, options=["--cpu-only"])
    assert p.proc.stdout == "done\n", p.proc.stderr
    assert [e["function"] for e in p.profile["profiled_functions"]] == ["alpha", "gamma"]
    assert {e["line"] for e in p.file()["functions"]} == {"alpha", "gamma"}
    plain = run_bare("from pyrometer import profile\n" + source)
    assert plain.returncode == 0 and plain.stdout == "done\n", plain.stderr


# A program written for kernprof (line_profiler), which makes `profile` a
# builtin LineProfiler and lets the program use it as one.
KERNPROF_CALLS = """\
import helper
profile.add_function(beta)
print(profile.add_module(helper))
with profile:
    alpha()
profile.enable_by_count()
beta()
profile.disable_by_count()
print(profile.runcall(gamma) > 0)
helper.spin(0.25)
profile.enable(); profile.disable()
profile.print_stats()
profile.dump_stats("prog.lprof")"""

HELPER = """
import time

def spin(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end: pass  # helper hot
"""


def test_a_program_written_for_kernprof_runs_and_marks_what_it_names(profile_program, tmp_path):
    """add_function, add_module and runcall mark what they are given as
    @profile does; `with profile:`, enable_by_count and the rest run and change
    nothing (before: `profile` was a function, and the program ended on an
    AttributeError); print_stats and dump_stats write nothing."""
    write_program(tmp_path, HELPER, "helper.py")
    source = busy(a="@profile", b="", c="").replace("alpha(); beta(); gamma()", KERNPROF_CALLS)
    p = profile_program(source, options=["--cpu-only"])
    assert p.proc.stdout == "1\nTrue\ndone\n", p.proc.stderr
    assert sorted(e["function"] for e in p.profile["profiled_functions"]) == ["alpha", "beta", "gamma", "spin"]
    assert {e["line"] for e in p.file()["functions"]} == {"alpha", "beta", "gamma"}
    helper_lines = {e["lineno"]: e for e in p.file(tmp_path / "helper.py")["lines"]}
    hot = next(i + 1 for i, t in enumerate(HELPER.lstrip("\n").splitlines()) if "helper hot" in t)
    assert helper_lines[hot]["n_samples"] >= 5, helper_lines
    assert p.lineno("module hot") not in {e["lineno"] for e in p.file()["lines"]}
    assert not (tmp_path / "prog.lprof").exists()
