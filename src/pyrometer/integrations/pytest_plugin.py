"""The pytest plugin: `pytest --pyrometer` profiles each test.

Installed with the package (the `pytest11` entry point "pyrometer"), so pytest
loads this module in every run of every suite: without --pyrometer it adds its
options and registers its marker, and does nothing else.  Nothing here imports
the measuring core, the model or the renderers until --pyrometer asks for them.

What is profiled: each test's call phase (the test function's body), one
in-process profile per test (inprocess.InProcessRun, the measuring core of the
command).  Not setup and teardown: a fixture of module or session scope is set
up in the first test that asks for it and torn down after the last, so its
cost would be charged to whichever test happened to come first or last.

Memory needs pyrometer's memory library in the process (preload.py), which is
attached before pytest reads a conftest or captures output; where it cannot be,
`pytest --pyrometer` re-executes itself with the library preloaded.  The library
counts nothing until a test's profile starts it.  Where neither can be done
(--pyrometer-no-memory; a library that cannot be attached, with pytest.main()
called from another program) the profiles are CPU-only and the summary says why
in one line.

pytest-xdist: each worker (it attaches the library itself, or inherits it
preloaded from the controller) profiles its own tests; a budgeted test's
figures travel to the controller on its report, the other tests' (built in
batches) and the worker's aggregates in its workeroutput when it finishes; the
controller writes the summary and the merged profile.

Budgets: @pytest.mark.pyrometer_limit(cpu_seconds=, memory_mb=, allocated_mb=)
fails a test whose call phase used more CPU time (Python + native, as
sampled: not system time, which pyrometer counts as time off CPU in native
code), reached a higher peak of memory (live bytes, from the start of
its call), or allocated more, naming the lines responsible.  Without
--pyrometer the marker does nothing."""

from __future__ import annotations

import os
import sys
from typing import Any

import pytest

MARKER = "pyrometer_limit"
# Budget name -> (what it limits, unit), in the order messages list them.
LIMITS = {"cpu_seconds": ("CPU time", "s"), "memory_mb": ("peak memory", "MB"),
          "allocated_mb": ("memory allocated", "MB")}
MEMORY_LIMITS = ("memory_mb", "allocated_mb")
DEFAULT_JSON = "pyrometer-pytest.json"
DEFAULT_SUMMARY = "pyrometer-pytest.txt"
TOP_LINES = 3  # lines named per test, and per exceeded budget
BATCH = 64  # tests without a budget whose figures are built together (Profiling._build_pending)
_NO_MEMORY_COMMAND = ("memory was not profiled: {}, and pytest was not started as a command (pytest.main() "
                      "from another program), so it could not be re-executed with pyrometer's memory "
                      "library preloaded; run `pytest --pyrometer` or `python -m pytest --pyrometer`")


def _not_rewritten() -> None:
    """pytest rewrites the asserts of every module of a distribution with a
    pytest11 entry point (all of pyrometer's), importing each through its own
    loader, which parses the source and writes its own cached bytecode.  Where
    no bytecode is written (PYTHONDONTWRITEBYTECODE, common in containers and
    CI), every run parsed pyrometer's modules again: 60-90 ms of a run with one
    test (`--assert=plain`: 7 ms), a sixth of what the plugin cost a test on
    more-itertools' 664.  pyrometer holds no tests, so its package is taken out
    of the hook's names to rewrite (a private set: with a pytest that has none,
    nothing changes but the time).  Called before any of pyrometer's modules
    but this one and its parents are imported."""
    for finder in sys.meta_path:
        names = getattr(finder, "_must_rewrite", None)
        if isinstance(names, set):
            names.discard(__name__.partition(".")[0])


def pytest_addoption(parser: pytest.Parser) -> None:
    _not_rewritten()
    group = parser.getgroup("pyrometer", "profiling each test with pyrometer")
    group.addoption("--pyrometer", action="store_true", default=False,
                    help="profile each test's call phase (CPU time, Python and native; system time; peak "
                         "and allocated memory; the top lines), print a summary per test, write it to a file with "
                         "one merged profile, and enforce @pytest.mark.pyrometer_limit budgets")
    group.addoption("--pyrometer-json", metavar="FILE", default=None,
                    help=f"where the merged profile of all tests goes (default: {DEFAULT_JSON}; "
                         "read it with `pyrometer view FILE`)")
    group.addoption("--pyrometer-summary", metavar="FILE", default=None,
                    help=f"where the per-test summary goes (default: {DEFAULT_SUMMARY}; "
                         "a name ending in .json gets it as JSON)")
    group.addoption("--pyrometer-show", metavar="N", type=int, default=10,
                    help="how many tests the terminal summary lists, most CPU first (default: 10; "
                         "0: all); the file lists all")
    group.addoption("--pyrometer-no-memory", action="store_true", default=False,
                    help="profile CPU only (pyrometer's memory library is not loaded)")


def _is_worker() -> bool:
    return "PYTEST_XDIST_WORKER" in os.environ


def _started_as_pytest(config: pytest.Config) -> bool:
    """Whether this process is the pytest command itself (`pytest ...`,
    `python -m pytest ...`), which can be run again as it is; not pytest.main()
    called by another program, which re-executing would run from its start."""
    args = tuple(str(a) for a in config.invocation_params.args)
    script = os.path.basename(sys.argv[0]) if sys.argv else ""
    command = (script.startswith(("pytest", "py.test"))
               or (script == "__main__.py" and os.path.basename(os.path.dirname(sys.argv[0])) == "pytest"))
    return command and args == tuple(sys.argv[1:])


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]):
    """Before output capture starts and any conftest runs: the memory library
    into this process when memory is to be profiled: attached, or else, for the
    pytest command itself, by re-executing it with the library preloaded (this
    returns only where neither can be done, with the reason kept for the
    summary)."""
    ns = early_config.known_args_namespace
    if getattr(ns, "pyrometer", False) and not getattr(ns, "pyrometer_no_memory", False):
        from ..messages import interpreter_problem
        if interpreter_problem(force_version=False) is not None:
            pass  # pytest_configure says why, as a usage error
        else:
            from ..core.preload import attach, ensure_memhooks_loaded
            command = _started_as_pytest(early_config) and not _is_worker()
            problem = attach()
            if problem is not None and command:
                problem = ensure_memhooks_loaded()  # re-executes; returns only where it cannot
            notice = None
            if problem is not None:
                # The command's words name its own option; this one is pytest's.
                problem = problem.replace("--no-memory", "--pyrometer-no-memory")
                notice = (f"memory was not profiled: {problem}" if command or _is_worker()
                          else _NO_MEMORY_COMMAND.format(problem))
            early_config.stash[_preload_problem] = notice
    yield


_preload_problem = pytest.StashKey[Any]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{MARKER}(cpu_seconds=None, memory_mb=None, allocated_mb=None): under pytest --pyrometer, "
                   "fail the test when its call phase uses more CPU seconds, reaches a higher peak of memory "
                   "(MB) or allocates more memory (MB) than given")
    if not config.getoption("pyrometer"):
        return
    plugin = Profiling(config)
    config.pluginmanager.register(plugin, "pyrometer-profiling")


class Budget:
    """A test's budgets: each name of LIMITS given by its nearest marker (the
    function's, then its class's, module's...)."""

    def __init__(self, item: pytest.Item):
        self.limits: dict[str, float] = {}
        for marker in item.iter_markers(MARKER):
            if marker.args:
                raise ValueError(f"takes keyword arguments only ({', '.join(LIMITS)}), "
                                 f"not {', '.join(repr(a) for a in marker.args)}")
            if not marker.kwargs:
                raise ValueError(f"names no budget: give one or more of {', '.join(LIMITS)}")
            for name, value in marker.kwargs.items():
                if name not in LIMITS:
                    raise ValueError(f"unknown budget {name}=: the budgets are {', '.join(LIMITS)}")
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 \
                        or value == float("inf"):
                    raise ValueError(f"{name} must be a positive number ({LIMITS[name][1]}), not {value!r}")
                self.limits.setdefault(name, float(value))


class Profiling:
    """--pyrometer's hooks, registered only then."""

    def __init__(self, config: pytest.Config):
        from ..messages import interpreter_problem, unwritable
        problem = interpreter_problem(force_version=False)  # before the core is imported: it may refuse to load
        if problem is not None:
            raise pytest.UsageError(f"pytest --pyrometer: {problem}")
        from .. import _core
        from .inprocess import default_options, memory_available
        if _core.running():
            raise pytest.UsageError("pytest --pyrometer cannot run under the pyrometer command, which profiles "
                                    "the whole run already: run `pytest --pyrometer` by itself")
        self.config = config
        self.worker = hasattr(config, "workerinput")
        if config.getoption("pyrometer_show") < 0:
            raise pytest.UsageError(f"pytest --pyrometer: --pyrometer-show must be 0 (all) or more, "
                                    f"not {config.getoption('pyrometer_show')}")
        # Relative to where pytest was started, whatever the tests do with the current directory.
        here = str(config.invocation_params.dir)
        from ..render.json_out import chosen_name
        self.summary_path = os.path.join(here, config.getoption("pyrometer_summary") or DEFAULT_SUMMARY)
        self.profile_path = os.path.join(here, config.getoption("pyrometer_json") or DEFAULT_JSON)
        if not config.getoption("pyrometer_summary"):
            chosen_name(self.summary_path)
        if not config.getoption("pyrometer_json"):
            chosen_name(self.profile_path)
        for path in () if self.worker else (self.summary_path, self.profile_path):
            problem = unwritable(path)  # said before the tests run, not after
            if problem is not None:
                raise pytest.UsageError(f"pytest --pyrometer: {problem}")
        self.options = default_options()
        self.notices: list[str] = []
        if config.getoption("pyrometer_no_memory"):
            self.options.memory = False
        elif memory_available():
            self._unpreload(config)
        else:
            self.options.memory = False
            self.notices.append(config.stash.get(_preload_problem, None)
                                or "memory was not profiled: pyrometer's memory library is not preloaded in "
                                   "this pytest worker")
        self.budget_errors: dict[str, str] = {}
        self.merger = None
        self.first_start = 0.0
        self.profiled_sec = 0.0
        self.threads = 0  # the most threads any one test's profile saw (Merger would add them up)
        self.ran_here = False  # tests ran in this process (not an xdist controller)
        self.processes: list[dict[str, Any]] = []
        self.results: list[dict[str, Any]] = []  # per test: summary()'s dict, in the order they ended
        # Tests without a budget whose figures are not built yet: (nodeid, run,
        # raw), built BATCH at a time (_build_pending says why).
        self.pending: list[tuple[str, Any, dict[str, Any]]] = []
        self.built_here: list[dict[str, Any]] = []  # an xdist worker's, sent at its end

    def _unpreload(self, config: pytest.Config) -> None:
        """The library is loaded in this process; out of LD_PRELOAD, so that the
        processes the tests start do not load it too, except where pytest-xdist
        is about to start workers, which must have it."""
        from ..core.preload import MEMHOOKS_LIBRARY, remove_private_link
        import atexit
        atexit.register(remove_private_link)
        if not self.worker and (getattr(config.option, "numprocesses", None) or getattr(config.option, "tx", None)):
            return
        preload = [p for p in os.environ.get("LD_PRELOAD", "").split(":") if p and not p.endswith(MEMHOOKS_LIBRARY)]
        if preload:
            os.environ["LD_PRELOAD"] = ":".join(preload)
        else:
            os.environ.pop("LD_PRELOAD", None)

    # ---- budgets, read once per test at collection ------------------------------------

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            try:
                item.stash[_limits_key] = Budget(item).limits
            except ValueError as e:
                self.budget_errors[item.nodeid] = f"@pytest.mark.{MARKER}: {e}"

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        if item.nodeid in self.budget_errors:
            pytest.fail(self.budget_errors[item.nodeid], pytrace=False)

    # ---- one profile per test --------------------------------------------------------

    @pytest.hookimpl(hookwrapper=True, trylast=True)
    def pytest_runtest_call(self, item: pytest.Item):
        from .inprocess import InProcessRun
        run = InProcessRun(self.options, item.nodeid, notices=self.notices,
                           program_directory=str(self.config.rootpath))
        run.start()
        try:
            yield
        finally:
            # The sampler's thread is kept for the next test (a thread made
            # and ended per test was a third of the core's start and stop),
            # and ended before any fork (the core's fork guard) and after the
            # last test (pytest_runtest_teardown, pytest_sessionfinish).
            raw = run.collect(keep_thread=True)
            self.ran_here = True
            limits = item.stash.get(_limits_key, {})
            if limits:  # the verdict is the test's outcome: now
                item.stash[_result_key] = summary(run.build(raw, listing="data"), limits, self.options.memory)
            else:
                self.pending.append((item.nodeid, run, raw))
            self._merge(raw, run.session.start_time, run.session.elapsed)

    def pytest_runtest_logfinish(self, nodeid: str, location: Any) -> None:
        """After a test's last report: a full batch is built here, outside the
        phases whose durations pytest reports."""
        if len(self.pending) >= BATCH:
            self._build_pending()

    def _build_pending(self) -> None:
        """The figures of the tests without a budget, built together: between
        two tests, pyrometer's code and data are out of the caches, and one
        test's profile took 0.2 ms there against 0.06-0.09 ms in a loop
        (more-itertools, 664 raw aggregates).  Their figures go to the summary
        here, or, in an xdist worker, to the controller at the worker's end
        (the budgeted tests' go on their reports)."""
        built = [dict(summary(run.build(raw, listing="data"), {}, self.options.memory), nodeid=nodeid)
                 for nodeid, run, raw in self.pending]
        self.pending.clear()
        (self.built_here if self.worker else self.results).extend(built)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_teardown(self, item: pytest.Item, nextitem: pytest.Item | None) -> None:
        """After the last test (before its fixtures' teardown), the sampler's
        thread kept between tests ends: the process has no thread of pyrometer's
        from here on.  A session stopped early (-x, an interrupt) ends it in
        pytest_sessionfinish."""
        if nextitem is None:
            from .. import _core
            _core.end_kept_thread()

    def _merge(self, raw: dict[str, Any], start_time: float, elapsed: float) -> None:
        from ..run.children import Merger
        if self.merger is None:
            self.merger = Merger(raw, start_time)
            self.first_start = start_time
        else:
            self.merger.add({"raw": raw, "start_time": start_time})
        self.profiled_sec += elapsed
        self.threads = max(self.threads, raw["threads_seen"])

    def _merged_raw(self) -> dict[str, Any]:
        return dict(self.merger.result(), threads_seen=self.threads)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        outcome = yield
        report = outcome.get_result()
        result = item.stash.get(_result_key, None) if call.when == "call" else None
        if result is None:
            return
        report.pyrometer = result  # a plain dict: pytest-xdist carries it to the controller
        over = result["over_budget"]
        if over and report.passed:
            report.outcome = "failed"
            report.longrepr = "\n".join(over)
        elif over:
            report.sections.append(("pyrometer budget", "\n".join(over)))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        result = getattr(report, "pyrometer", None)
        if report.when == "call" and isinstance(result, dict):
            self.results.append(dict(result, nodeid=report.nodeid))

    # ---- the merged profile ---------------------------------------------------------

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        from .. import _core
        from ..core import document
        from .inprocess import process_row
        _core.end_kept_thread()
        self._build_pending()
        if self.ran_here:
            raw = self._merged_raw()
            started_by = f"pytest-xdist worker {self.config.workerinput['workerid']}" if self.worker else "pytest"
            self.processes.append(process_row(raw, self.profiled_sec, started_by))
        if self.worker:
            if self.ran_here:
                self.config.workeroutput["pyrometer"] = {"raw": document.plain(raw), "start_time": self.first_start,
                                                         "tests": self.built_here,
                                                         "elapsed": self.profiled_sec,
                                                         "process": self.processes[-1]}
            return
        self.exitstatus = int(exitstatus)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """pytest-xdist: a worker finished; its aggregates join the controller's."""
        part = getattr(node, "workeroutput", {}).get("pyrometer")
        if part is None:
            return
        self._merge(part["raw"], part["start_time"], part["elapsed"])
        self.processes.append(part["process"])
        self.results.extend(part["tests"])

    def merged_profile(self) -> dict[str, Any] | None:
        from .. import model
        if self.merger is None:
            return None
        raw = self._merged_raw()
        args = [str(a) for a in self.config.invocation_params.args]
        return model.build(raw, program="pytest", argv=["pytest", *args], options=self.options.as_profile_options(),
                           elapsed=self.profiled_sec, start_time=self.first_start,
                           exit_status=min(max(getattr(self, "exitstatus", 0), 0), 255), ended_by="exit",
                           notices=[*self.notices, f"pytest --pyrometer: the call phases of "
                                    f"{_tests(len(self.results))}, merged (setup and teardown are not profiled)"],
                           processes=self.processes, process_count=len(self.processes), listing="around")

    # ---- the report ------------------------------------------------------------------

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.worker:
            return
        from ..render.json_out import write_report
        from ..render import report
        lines = summary_lines(self.results, self.options.memory, self.notices)
        show = self.config.getoption("pyrometer_show")
        terminalreporter.write_sep("=", "pyrometer: per-test profile")
        for line in summary_lines(self.results, self.options.memory, self.notices, show):
            terminalreporter.write_line(line)
        summary_shown = self.config.getoption("pyrometer_summary") or DEFAULT_SUMMARY
        profile_shown = self.config.getoption("pyrometer_json") or DEFAULT_JSON
        written = []
        try:
            if self.summary_path.endswith(".json"):
                import json
                text = json.dumps({"memory": self.options.memory, "notices": self.notices,
                                   "tests": self.results}, indent=1) + "\n"
            else:
                text = "\n".join(lines) + "\n"
            write_report(self.summary_path, text)
            written.append(f"summary written to {summary_shown}")
            profile = self.merged_profile()
            if profile is not None:
                write_report(self.profile_path, report(profile, "json"))
                written.append(f"merged profile to {profile_shown} (view: pyrometer view {profile_shown})")
        except OSError as e:
            terminalreporter.write_line(f"pyrometer: error: cannot write {e.filename}: {e.strerror or e}", red=True)
        if written:
            terminalreporter.write_line("pyrometer: " + "; ".join(written))


_result_key = pytest.StashKey[dict]()
_limits_key = pytest.StashKey[dict]()


# ---- figures from a test's profile (the model's; nothing re-derived) -------------------

def _line_cpu(entry: dict[str, Any]) -> float:
    """A line's time on CPU.  Not its system time, which is time off CPU in
    native code (sleeping, blocked in I/O or on a lock: docs/how-it-works.md)."""
    return entry["n_cpu_python_sec"] + entry["n_cpu_native_sec"]


def _top(profile: dict[str, Any], key, n: int = TOP_LINES) -> list[tuple[float, str, int, dict[str, Any]]]:
    """The n lines with the most of key(entry), most first: (figure, file, line, entry)."""
    rows = [(key(e), filename, e["lineno"], e) for filename, f in profile["files"].items() for e in f["lines"]]
    return sorted((r for r in rows if r[0] > 0), key=lambda r: (-r[0], r[1], r[2]))[:n]


def _where(filename: str, lineno: int) -> str:
    from ..model.units import display_name
    return f"{display_name(filename)}:{lineno}"


def summary(profile: dict[str, Any], limits: dict[str, float], memory: bool) -> dict[str, Any]:
    """One test's figures (plain data: it travels on the test's report), with
    the messages of the budgets it went over."""
    cpu = profile["cpu_time_sec"]
    out: dict[str, Any] = {
        "wall_sec": profile["elapsed_time_sec"],
        "cpu_sec": cpu["python"] + cpu["native"],  # on CPU; system is off CPU (see _line_cpu)
        "python_sec": cpu["python"], "native_sec": cpu["native"], "system_sec": cpu["system"],
        "peak_mb": profile["max_footprint_mb"] if memory else None,
        "allocated_mb": profile["allocated_mb"] if memory else None,
        "top_cpu": [{"where": _where(f, n), "cpu_sec": _line_cpu(e), "python_sec": e["n_cpu_python_sec"],
                     "native_sec": e["n_cpu_native_sec"], "system_sec": e["n_sys_sec"], "line": e["line"].strip()}
                    for v, f, n, e in _top(profile, lambda e: _line_cpu(e) + e["n_sys_sec"])],
        "top_memory": [{"where": _where(f, n), "peak_mb": e["n_peak_mb"], "allocated_mb": e["n_malloc_mb"],
                        "line": e["line"].strip()}
                       for v, f, n, e in _top(profile, lambda e: max(e["n_peak_mb"], e["n_malloc_mb"]))]
        if memory else [],
        "limits": limits,
        "over_budget": [],
        "unchecked": [],
    }
    figure = {"cpu_seconds": out["cpu_sec"], "memory_mb": out["peak_mb"], "allocated_mb": out["allocated_mb"]}
    for name, limit in limits.items():
        what, unit = LIMITS[name]
        value = figure[name]
        if value is None:
            out["unchecked"].append(name)
            continue
        if value <= limit:
            continue
        if name == "cpu_seconds":
            lines = [f"{_where(f, n)} {v:.3f} s (Python {e['n_cpu_python_sec']:.3f}, native "
                     f"{e['n_cpu_native_sec']:.3f}): {e['line'].strip()}"
                     for v, f, n, e in _top(profile, _line_cpu)]
        else:
            field = "n_peak_mb" if name == "memory_mb" else "n_malloc_mb"
            lines = [f"{_where(f, n)} {e['n_peak_mb']:.1f} MB peak, {e['n_malloc_mb']:.1f} MB allocated: "
                     f"{e['line'].strip()}" for v, f, n, e in _top(profile, lambda e: e[field])]
        message = f"pyrometer_limit: {what} {value:.3f} {unit} is over the budget {name}={limit:g}"
        message += "; the lines responsible:\n  " + "\n  ".join(lines) if lines else \
            " (no line of the program's files was sampled: the time or memory is in code outside them)"
        out["over_budget"].append(message)
    return out


def _tests(n: int) -> str:
    return f"{n} test" if n == 1 else f"{n} tests"


def summary_lines(results: list[dict[str, Any]], memory: bool, notices: list[str], show: int = 0) -> list[str]:
    """The per-test summary as text: the tests with the most CPU first (show
    of them, 0: all), each with its top lines."""
    ordered = sorted(results, key=lambda r: -r["cpu_sec"])
    out = [f"{_tests(len(results))} profiled (call phase only; CPU sampled, memory "
           f"{'sampled' if memory else 'not profiled'})"]
    out += [f"notice: {n}" for n in notices]
    unchecked = sum(1 for r in results if r["unchecked"])
    if unchecked:
        out.append(f"notice: the memory budgets of {_tests(unchecked)} were not checked: memory was not profiled")
    for r in ordered[:show or None]:
        head = (f"{r['nodeid']}  CPU {r['cpu_sec']:.3f} s (Python {r['python_sec']:.3f}, native "
                f"{r['native_sec']:.3f})  system {r['system_sec']:.3f} s")
        if memory:
            head += f"  peak {r['peak_mb']:.1f} MB  allocated {r['allocated_mb']:.1f} MB"
        if r["over_budget"]:
            head += "  OVER BUDGET"
        out.append(head)
        for t in r["top_cpu"]:
            # A line's system time too (a sleep, I/O), as the test's line above
            # says the test's: a sleeping test's line read "0.000 s" under
            # "system 0.200 s".
            waited = f"  system {t['system_sec']:.3f} s" if t.get("system_sec", 0.0) >= 0.0005 else ""
            out.append(f"    {t['where']}  {t['cpu_sec']:.3f} s{waited}  {t['line'][:60]}")
        for t in r["top_memory"]:
            out.append(f"    {t['where']}  {t['peak_mb']:.1f} MB peak  {t['allocated_mb']:.1f} MB allocated  "
                       f"{t['line'][:60]}")
    if show and len(ordered) > show:
        out.append(f"... and {len(ordered) - show} more (all of them in the summary file)")
    return out
