"""Coroutines: time a task spends suspended at an await is charged to the
awaiting line as await time (n_await_sec; n_await_percent is the line's share
of all await time, Scalene's meaning), and an event loop's idle time in its
selector is no line's system time (docs/how-it-works.md, "Coroutines").

The truth is measured by each program itself: how long every await really took
(time.perf_counter() around it) and how much CPU the computing task used
(time.thread_time()).
"""

from __future__ import annotations

import json
import sys

import pytest

from pyrometer import model
from pyrometer.render import html, text

pytestmark = pytest.mark.accuracy

GATHER = """
import asyncio, json, sys, time

took = {}


async def slow():
    t = time.perf_counter()
    await asyncio.sleep(1.2)  # @slow
    took["slow"] = time.perf_counter() - t


async def quick():
    t = time.perf_counter()
    await asyncio.sleep(0.6)  # @quick
    took["quick"] = time.perf_counter() - t


async def compute():
    t, w = time.thread_time(), time.perf_counter()
    end = w + 0.8
    while time.perf_counter() < end:  # @compute
        pass
    took["compute_cpu"] = time.thread_time() - t
    took["compute_wall"] = time.perf_counter() - w


async def main():
    t = time.perf_counter()
    await asyncio.gather(slow(), quick(), compute())  # @gather
    took["gather"] = time.perf_counter() - t


asyncio.run(main())  # @run
with open(sys.argv[1], "w") as f:
    json.dump(took, f)
"""


def await_summary(run, *markers: str) -> str:
    parts = [f"await_time_sec={run.profile['await_time_sec']:.3f} "
             f"event_loop_idle_sec={run.profile['event_loop_idle_sec']:.3f} "
             f"unattributed await={run.profile['unattributed'].get('await_sec', 0):.3f}"]
    for m in markers:
        e = run.line(m)
        parts.append(f"{m}: await {e['n_await_sec']:.3f}s {e['n_await_percent']:.1f}% "
                     f"py {e['n_cpu_python_sec']:.3f}s c {e['n_cpu_native_sec']:.3f}s sys {e['n_sys_sec']:.3f}s")
    return "\n  ".join(parts)


def test_gathered_sleeps_and_computation(profile_program, tmp_path):
    truth_file = tmp_path / "truth.json"
    run = profile_program(GATHER, options=["--cpu-only"], args=[str(truth_file)])
    truth = json.loads(truth_file.read_text())
    info = await_summary(run, "@slow", "@quick", "@gather", "@compute", "@run") + f"\n  truth: {truth}"

    # Each awaiting line's share of all await time, against the time its task
    # really spent suspended there.
    waited = {"@slow": truth["slow"], "@quick": truth["quick"], "@gather": truth["gather"]}
    all_waited = sum(waited.values())
    for marker, seconds in waited.items():
        share = run.line(marker)["n_await_percent"]
        true_share = seconds / all_waited * 100
        print(f"{marker}: await share {share:.1f}% (truth {true_share:.1f}%), "
              f"{run.line(marker)['n_await_sec']:.3f}s (truth {seconds:.3f}s)")
        assert abs(share - true_share) <= 5.0, (
            f"{marker}'s await share {share:.1f}% is more than 5 points from the true {true_share:.1f}%:\n  {info}")
    assert run.profile["await_time_sec"] == pytest.approx(all_waited, rel=0.10), info

    # The computing task never awaits: its line keeps its CPU, as without asyncio.
    compute = run.line("@compute")
    assert compute["n_await_sec"] == 0.0, info
    charged = compute["n_cpu_python_sec"] + compute["n_cpu_native_sec"]
    assert charged == pytest.approx(truth["compute_cpu"], rel=0.20), info

    # The loop idled while only the sleeps were pending (after the computation):
    # that is no longer the system time of the asyncio.run line.
    idle_truth = truth["gather"] - truth["compute_wall"]
    assert idle_truth > 0.3, f"calibration: the loop had nothing to idle for:\n  {info}"
    assert run.profile["event_loop_idle_sec"] == pytest.approx(idle_truth, abs=0.1), info
    assert run.line("@run")["n_sys_sec"] < 0.05, info
    assert run.line("@run")["n_await_sec"] == 0.0, info
    # Nor anyone else's: what system time there is belongs to the computing line
    # (a busy machine keeps it off the CPU between its clock calls).
    elsewhere = sum(e["n_sys_sec"] for e in run.file()["lines"] if e["lineno"] != compute["lineno"])
    assert elsewhere < 0.05, info

    # Functions add up their lines' await time.
    assert run.function("slow")["n_await_sec"] == pytest.approx(run.line("@slow")["n_await_sec"]), info


NESTED = """
import asyncio, json, sys, time


async def leaf():
    await asyncio.sleep(0.8)  # @leaf


async def middle():
    await leaf()  # @middle


async def main():
    t = time.perf_counter()
    await middle()  # @main
    return time.perf_counter() - t


took = asyncio.run(main())  # @run
with open(sys.argv[1], "w") as f:
    json.dump({"took": took}, f)
"""


def test_nested_coroutines_charge_the_innermost_awaiting_line(profile_program, tmp_path):
    truth_file = tmp_path / "truth.json"
    run = profile_program(NESTED, options=["--cpu-only"], args=[str(truth_file)])
    took = json.loads(truth_file.read_text())["took"]
    info = await_summary(run, "@leaf", "@middle", "@main", "@run") + f"\n  truth: {took:.3f}s"
    # One task, suspended the whole time in leaf(), by way of middle() and main():
    # only the innermost awaiting line is charged.
    leaf = run.line("@leaf")
    assert leaf["n_await_percent"] >= 95.0, info
    assert leaf["n_await_sec"] == pytest.approx(took, rel=0.10), info
    assert run.line("@middle")["n_await_sec"] == 0.0, info
    assert run.line("@main")["n_await_sec"] == 0.0, info
    assert run.line("@run")["n_sys_sec"] < 0.05, info


TO_THREAD = """
import asyncio, json, sys, time

took = {}


def work():
    t = time.thread_time()
    end = time.perf_counter() + 0.6
    while time.perf_counter() < end:  # @work
        pass
    took["work_cpu"] = time.thread_time() - t


async def main():
    t = time.perf_counter()
    await asyncio.to_thread(work)  # @to_thread
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, time.sleep, 0.4)  # @executor
    took["main"] = time.perf_counter() - t


asyncio.run(main())  # @run
with open(sys.argv[1], "w") as f:
    json.dump(took, f)
"""


def test_work_in_a_thread_is_awaited_and_keeps_its_cpu(profile_program, tmp_path):
    truth_file = tmp_path / "truth.json"
    run = profile_program(TO_THREAD, options=["--cpu-only"], args=[str(truth_file)])
    truth = json.loads(truth_file.read_text())
    info = await_summary(run, "@to_thread", "@executor", "@work", "@run") + f"\n  truth: {truth}"
    # main() waits on the worker for about 0.6 s, then on the executor for 0.4 s.
    to_thread, executor = run.line("@to_thread"), run.line("@executor")
    assert to_thread["n_await_sec"] + executor["n_await_sec"] == pytest.approx(truth["main"], rel=0.10), info
    assert abs(to_thread["n_await_percent"] - 60.0) <= 7.0, info
    assert abs(executor["n_await_percent"] - 40.0) <= 7.0, info
    # The worker thread's line is charged its CPU, as any thread's.
    work = run.line("@work")
    assert work["n_cpu_python_sec"] + work["n_cpu_native_sec"] == pytest.approx(truth["work_cpu"], rel=0.20), info
    assert work["n_await_sec"] == 0.0, info
    # The main thread only waited in its event loop.
    assert run.line("@run")["n_sys_sec"] < 0.05, info


PLAIN = """
import time
end = time.perf_counter() + 0.3
while time.perf_counter() < end:  # @spin
    pass
time.sleep(0.2)  # @sleep
"""


def header(report: str) -> str:
    return next(line for line in report.splitlines() if line.startswith("Line"))


def test_program_without_coroutines_has_no_await_column(profile_program):
    run = profile_program(PLAIN, options=["--cpu-only"])
    assert run.profile["await_time_sec"] == 0.0
    assert run.profile["event_loop_idle_sec"] == 0.0
    # A blocking call outside any event loop is still system time.
    assert run.line("@sleep")["n_sys_sec"] == pytest.approx(0.2, abs=0.05), run.describe("@sleep")
    report = text.render(run.profile)
    assert "await" not in header(report) and "coroutines" not in report, report
    assert "n_await_percent" not in html.page_data(run.profile)["fields"]


def test_await_fields_are_checked_and_shown(profile_program, tmp_path):
    run = profile_program(NESTED, options=["--cpu-only"], args=[str(tmp_path / "truth.json")])
    profile = json.loads(json.dumps(run.profile))
    model.check(profile)
    report = text.render(profile)
    assert "await" in header(report), report
    leaf = next(line for line in report.splitlines() if "# @leaf" in line)
    assert "100%" in leaf or "99%" in leaf, report
    assert "coroutines suspended at awaits" in report
    assert "n_await_percent" in html.page_data(profile)["fields"]
    assert "time-await" in html.render(profile)

    entry = run.line("@leaf")
    for field, bad in (("n_await_percent", 100.5), ("n_await_percent", "5"), ("n_await_sec", -1.0),
                       ("n_await_sec", None)):
        damaged = json.loads(json.dumps(profile))
        line = next(e for e in damaged["files"][str(run.program)]["lines"] if e["lineno"] == entry["lineno"])
        line[field] = bad
        with pytest.raises(model.ProfileError, match=field):
            model.check(damaged)
    for field in ("await_time_sec", "event_loop_idle_sec"):
        damaged = json.loads(json.dumps(profile))
        damaged[field] = "1"
        with pytest.raises(model.ProfileError, match=field):
            model.check(damaged)
    # A profile written before await time existed reads as one without any.
    old = json.loads(json.dumps(profile))
    del old["await_time_sec"], old["event_loop_idle_sec"]
    for f in old["files"].values():
        for e in f["lines"] + f["functions"]:
            del e["n_await_percent"], e["n_await_sec"]
    model.check(old)
    assert old["await_time_sec"] == 0.0
    assert "await" not in header(text.render(old))


MANY = """
import asyncio, sys

if sys.argv[1] == "eager":
    FACTORY = asyncio.eager_task_factory  # 3.12+: a task runs its first step at once


async def one():
    await asyncio.sleep(1.0)  # @one


async def other():
    await asyncio.sleep(1.0)  # @other


async def main():
    if sys.argv[1] == "eager":
        asyncio.get_running_loop().set_task_factory(FACTORY)
    n = int(sys.argv[2])
    await asyncio.gather(*[one() for _ in range(n * 6 // 10)], *[other() for _ in range(n * 4 // 10)])  # @gather


asyncio.run(main())
"""


@pytest.mark.parametrize("tasks, count", [("plain", 1000), pytest.param("eager", 1000, marks=pytest.mark.skipif(
    sys.version_info < (3, 12), reason="eager tasks are new in 3.12")), ("plain", 9000)])
def test_more_tasks_than_a_snapshot_examines(profile_program, tasks, count):
    """More tasks than the 256 a snapshot reads: a rotating slice stands for
    all of them and the shares stay right (60% of the tasks at one line, 40%
    at the other, all a second long; main's gather line waits as long, once).
    9,000 tasks are more than 3.14+ lists at every snapshot (2,048): there
    the list is made every fifth snapshot, its slice charged five windows."""
    run = profile_program(MANY, options=["--cpu-only"], args=[tasks, str(count)])
    info = await_summary(run, "@one", "@other", "@gather")
    one, other = run.line("@one")["n_await_sec"], run.line("@other")["n_await_sec"]
    assert one + other == pytest.approx(count * 1.0, rel=0.15), info
    assert abs(one / (one + other) * 100 - 60.0) <= 5.0, info


# A module still being imported stands in sys.modules: here a stand-in for
# asyncio.tasks, as it stands while `import asyncio` runs; meanwhile the
# program imports small modules for 2.5 s, each through importlib's module
# lock (about 1,200 snapshots at 2 ms).
IMPORTS_DURING_SNAPSHOTS = """
import importlib, os, sys, time, types

saved = sys.modules.get("asyncio.tasks")
initializing = types.ModuleType("asyncio.tasks")
initializing.__spec__ = types.SimpleNamespace(name="asyncio.tasks", _initializing=True)
sys.modules["asyncio.tasks"] = initializing
folder = os.path.abspath("modules")  # in the test's own folder
os.makedirs(folder)
sys.path.insert(0, folder)
for i in range(100):
    with open(os.path.join(folder, f"m{i}.py"), "w") as f:
        f.write("x = 1\\n")
importlib.invalidate_caches()
imports, deadline = 0, time.perf_counter() + 2.5
while time.perf_counter() < deadline:
    name = f"m{imports % 100}"
    sys.modules.pop(name, None)
    importlib.import_module(name)
    imports += 1
if saved is None:
    del sys.modules["asyncio.tasks"]
else:
    sys.modules["asyncio.tasks"] = saved
print("imports done:", imports > 0)
"""


def test_snapshots_during_an_import_leave_it_alone(profile_program):
    """A snapshot looks for asyncio's task registry in sys.modules without
    importlib: asking importlib (PyImport_GetModule) for a module still being
    imported runs its module lock's Python code inside the snapshot, and on the
    main thread, inside the program's own acquire of another module's lock, the
    nested acquire removed the outer one's entry: `import asyncio` failed with
    a KeyError under the profiler (3.10 and 3.11; this program failed so in 10
    runs of 10 before the fix, on 3.10)."""
    run = profile_program(IMPORTS_DURING_SNAPSHOTS, options=["--cpu-only", "--cpu-sampling-rate", "0.002"])
    assert "imports done: True" in run.proc.stdout, run.proc.stderr
