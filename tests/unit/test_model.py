"""The model at its own level: hand-made raw documents (core/document.py)
fed to the build, the merge of processes, the process table, the rules,
the verdict and diff, with every figure known exactly and no profiled
program.  What only a run can show is in tests/end_to_end/."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pyrometer import model
from pyrometer.core import document
from pyrometer.model import processes, stacks
from pyrometer.model.diff import compare
from pyrometer.run import children
from pyrometer.settings import Options

NS = 1e9
PROGRAM = "/src/app.py"
SOURCE = "def work():\n    a = 1\n    b = 2\n    return a + b\n\nwork()\n"


def raw_doc(records: list, unattributed=None, **fields) -> dict:
    """A collection with these CPU records (CpuLine: filename, lineno,
    qualname, first line, CpuSums) and nothing else measured."""
    raw = {"records": records, "unattributed": unattributed or document.cpu_sums(), "memory": None, "gpu": None,
           "start_wall_ns": 0, "stop_wall_ns": int(NS), "snapshots": 100, "main_snapshots": 100, "spreads": 0,
           "spread_peeks": 0, "threads_seen": 1, "process_cpu_ns": int(NS), "sampler_cpu_ns": 0,
           "untracked_native_ns": 0, "periodic_cpu_ns": 0, "mean_interval_ns": 1e7, "n_cpus": 2,
           "code_objects": 1, "profiler_memory_bytes": 0, "code_objects_seen": 1, "functions_overflowed": 0,
           "paused_ns": 0, "paused_at_end_ns": 0, "process_cpu_at_pause_ns": 0, "profiled_functions": []}
    raw.update(fields)
    return raw


def line(lineno: int, **sums):
    return document.cpu_line(PROGRAM, lineno, "work", 1, document.cpu_sums(**sums))


def build(raw: dict, **kw) -> dict:
    options = Options(cpu_only=True).as_profile_options()
    return model.build(raw, program=PROGRAM, argv=[PROGRAM], options=options, elapsed=1.0, start_time=0.0,
                       exit_status=0, sources={PROGRAM: SOURCE}, **kw)


def entry(profile: dict, lineno: int) -> dict:
    return next(e for e in profile["files"][PROGRAM]["lines"] if e["lineno"] == lineno)


# ---- the build -------------------------------------------------------------------


def test_a_lines_kinds_of_time_are_its_records_in_seconds_and_shares():
    profile = build(raw_doc([line(2, python_ns=0.3 * NS, native_ns=0.1 * NS, samples=40),
                             line(3, system_ns=0.2 * NS, gil_wait_ns=0.3 * NS, cpu_wait_ns=0.1 * NS, samples=60)]))
    a, b = entry(profile, 2), entry(profile, 3)
    assert (a["n_cpu_python_sec"], a["n_cpu_native_sec"], a["n_samples"]) == (pytest.approx(0.3), pytest.approx(0.1), 40)
    assert b["n_sys_sec"] == pytest.approx(0.2) and b["n_gil_wait_sec"] == pytest.approx(0.3)
    # Shares are of all the time charged: 1.0 s.
    assert profile["total_time_sec"] == pytest.approx(1.0)
    assert model.time_share(a) == pytest.approx(40.0) and model.time_share(b) == pytest.approx(60.0)
    assert model.wait_share(b)[0] == pytest.approx(40.0)
    # The function holds both lines.
    function = next(f for f in profile["files"][PROGRAM]["functions"] if f["line"].startswith("work"))
    assert model.time_share(function) == pytest.approx(100.0)
    assert sum(profile["cpu_time_sec"].values()) == pytest.approx(profile["total_time_sec"])
    model.check(json.loads(json.dumps(profile)))  # the schema accepts it


def test_a_lines_stated_error_is_its_variance_as_a_95_percent_interval():
    var = (0.01 * NS) ** 2  # a standard deviation of 10 ms
    profile = build(raw_doc([line(2, python_ns=0.5 * NS, python_var=var, time_var=var, samples=50),
                             line(3, python_ns=0.5 * NS, samples=50)]))
    e = entry(profile, 2)
    assert e["n_time_percent_error"] == pytest.approx(1.96 * 0.01 * 100, rel=1e-6)
    assert e["n_cpu_percent_python_error"] == pytest.approx(e["n_time_percent_error"])
    assert entry(profile, 3)["n_time_percent_error"] == 0.0


def test_unattributed_cpu_is_in_the_total_and_not_on_a_line():
    profile = build(raw_doc([line(2, python_ns=0.6 * NS, samples=60)],
                            unattributed=document.cpu_sums(native_ns=0.4 * NS)))
    assert profile["total_time_sec"] == pytest.approx(1.0)
    assert model.time_share(entry(profile, 2)) == pytest.approx(60.0)
    assert profile["unattributed"]["native_sec"] == pytest.approx(0.4)


# ---- the document and the merge --------------------------------------------------


def test_a_merge_adds_the_processes_records_by_line():
    top = raw_doc([line(2, python_ns=0.2 * NS, samples=2)])
    child = document.plain(raw_doc([line(2, python_ns=0.3 * NS, samples=3), line(3, native_ns=0.5 * NS, samples=5)],
                                   unattributed=document.cpu_sums(native_ns=0.1 * NS), process_cpu_ns=7))
    merger = children.Merger(top, 0.0)
    merger.add(json.loads(json.dumps({"raw": child, "start_time": 0.0})))
    merged = merger.result()
    by_line = {r.lineno: r.cpu for r in merged["records"]}
    assert by_line[2].python_ns == pytest.approx(0.5 * NS) and by_line[2].samples == 5
    assert by_line[3].native_ns == pytest.approx(0.5 * NS)
    assert merged["unattributed"].native_ns == pytest.approx(0.1 * NS)
    profile = build(merged)
    assert profile["total_time_sec"] == pytest.approx(1.1)


def test_a_child_written_in_another_layout_is_not_merged():
    merger = children.Merger(raw_doc([line(2, python_ns=1.0)]), 0.0)
    child = document.plain(raw_doc([line(2, python_ns=1.0)]))
    child["document"] = dict(child["document"], format=document.FORMAT + 1)
    with pytest.raises(ValueError):
        merger.add({"raw": child})
    assert merger.result()["records"][0].cpu.python_ns == 1.0  # nothing of it added


def test_the_merge_lists_a_child_it_could_not_read_and_goes_on(tmp_path: Path):
    good = document.plain(raw_doc([line(2, python_ns=0.3 * NS, samples=3)]))
    bad = dict(good, document={"format": 0, "cpu_sums": []})
    for pid, raw in ((11, good), (12, bad)):
        record = {"pid": pid, "ppid": 1, "command": ["python"], "started_by": "fork", "start_time": 0.0,
                  "wall_sec": 0.5, "cpu_sec": 0.3, "peak_mb": None, "exit_status": 0, "ended_by": "exit",
                  "raw": raw, "spawned": [], "reaped": {}}
        (tmp_path / f"p-{pid}-0.json").write_text(json.dumps(record))
    top = processes.row(pid=1, started_by="command", wall_sec=1.0)
    raw, table, count, notes = children.merge(str(tmp_path), raw_doc([]), top, 0.0, [], {})
    assert count == 3 and [r["pid"] for r in table] == [1, 11, 12]
    assert table[1]["profiled"] and not table[2]["profiled"] and "not merged" in table[2]["note"]
    assert any("could not be merged" in n for n in notes)
    assert raw["records"][0].cpu.python_ns == pytest.approx(0.3 * NS)


# ---- the call stacks ----------------------------------------------------------------

# main() (its def at line 5) calling work() (its def at line 1) from line 6.
MAIN, WORK = (PROGRAM, "main", 5, 6), (PROGRAM, "work", 1, 2)
# The figures of main -> work in stack_doc, each its own, and of the stacks past the cap.
WORK_FIGURES = {"python_sec": 1.0, "native_sec": 2.0, "system_sec": 3.0, "gil_wait_sec": 4.0, "cpu_wait_sec": 5.0,
                "samples": 6, "malloc_bytes": 900, "python_malloc_bytes": 500, "free_bytes": 600, "copy_bytes": 50,
                "gpu_sec": 7.0}
OTHER_FIGURES = {"python_sec": 10.0, "native_sec": 0.0, "system_sec": 0.0, "gil_wait_sec": 0.0, "cpu_wait_sec": 0.0,
                 "samples": 11, "malloc_bytes": 9, "python_malloc_bytes": 0, "free_bytes": 0, "copy_bytes": 4,
                 "gpu_sec": 8.0}


def stack_doc() -> dict:
    """A collection whose one charged stack, main -> work, has every figure
    different: the CPU sums the stacks keep and others they do not, bytes with
    churn in them (100), GPU time; and the bucket past the cap its own."""
    work = document.cpu_sums(python_ns=1 * NS, native_ns=2 * NS, system_ns=3 * NS, gil_wait_ns=4 * NS,
                             cpu_wait_ns=5 * NS, samples=6, busy_ns=70 * NS, loop_idle_ns=80 * NS, await_ns=90 * NS,
                             python_var=100, time_var=110)
    table = {"frames": [MAIN, WORK], "cap": 20000, "max_depth": 128,
             "nodes": [document.stack_node(-1, -1, None), document.stack_node(0, 0, None),
                       document.stack_node(1, 1, work)],
             "other": document.cpu_sums(python_ns=10 * NS, samples=11, busy_ns=12 * NS)}
    bytes_of_work = document.memory_stack_sums(alloc_bytes=1000, python_bytes=600, free_bytes=700, copy_bytes=50,
                                               churn_bytes=100)
    memory = {"stacks": [(2, bytes_of_work), (stacks.OTHER_ID, document.memory_stack_sums(alloc_bytes=9))],
              "other_stacks": document.memory_stack_sums(copy_bytes=4)}
    gpu = {"status": "ok", "stacks": [(2, 7 * NS), (stacks.OTHER_ID, 8 * NS)]}
    return raw_doc([], stacks=table, memory=memory, gpu=gpu)


def figures_of(entry: dict) -> dict:
    return {name: value for name, value in entry.items() if name != "path"}


def test_a_stacks_figures_are_its_records_fields_each_in_its_own_place():
    profiled = stacks.call_stacks(stack_doc(), memory=True, gpu=True)
    assert profiled["frames"] == [{"filename": PROGRAM, "function": "main", "first_lineno": 5, "lineno": 6},
                                  {"filename": PROGRAM, "function": "work", "first_lineno": 1, "lineno": 2}]
    # main alone was charged nothing: only main -> work is listed, its
    # figures in the schema's order.
    [entry] = profiled["stacks"]
    assert entry["path"] == [0, 1] and list(entry) == ["path", *WORK_FIGURES]
    assert figures_of(entry) == pytest.approx(WORK_FIGURES)
    assert profiled["other"] == pytest.approx(OTHER_FIGURES)
    assert (profiled["cap"], profiled["max_depth"]) == (20000, 128)
    cpu_only = stacks.call_stacks(stack_doc(), memory=False, gpu=False)
    assert list(figures_of(cpu_only["stacks"][0])) == [*stacks.TIME_FIGURES, "samples"]


def test_merged_stacks_add_up_by_their_frames_and_are_written_back_by_name():
    """A child's stacks (as its file carries them: the frames lists) add to
    the same stack; written back (children.Merger) and read again, every
    figure is twice the one run's, none moved to another."""
    mine, theirs = stacks.StackSums(), stacks.StackSums()
    mine.add_raw(stack_doc())
    theirs.add_raw(document.named(json.loads(json.dumps(document.plain(stack_doc())))))
    mine.merge(theirs)
    merged = {"memory": {"lines": []}, "gpu": {"status": "ok"}}
    mine.to_raw(merged)
    assert merged["stacks"]["frames"] == [MAIN, WORK]
    profiled = stacks.call_stacks(merged, memory=True, gpu=True)
    [entry] = profiled["stacks"]
    assert entry["path"] == [0, 1]
    assert figures_of(entry) == pytest.approx({name: 2 * value for name, value in WORK_FIGURES.items()})
    assert profiled["other"] == pytest.approx({name: 2 * value for name, value in OTHER_FIGURES.items()})


# ---- the process table --------------------------------------------------------------


def test_a_process_row_has_the_schemas_fields_and_defaults():
    row = processes.row(pid=5, started_by="subprocess", profiled=False)
    assert set(row) == set(processes.PROCESS.fields)
    assert row["command"] == [] and row["wall_sec"] is None and row["note"] is None
    with pytest.raises(TypeError):
        processes.row(pid=5, wall_seconds=1.0)  # not a field: an error, not a column lost
    with pytest.raises(TypeError):
        processes.row(started_by="fork")  # the pid is required
    mine = processes.this_process(raw_doc([], process_cpu_ns=int(0.25 * NS), paused_ns=int(0.5 * NS)), 2.0, "command")
    assert (mine["cpu_sec"], mine["paused_sec"], mine["wall_sec"], mine["peak_mb"]) == (0.25, 0.5, 2.0, None)


# ---- the rules ------------------------------------------------------------------------


def test_the_wait_column_shows_from_one_percent_of_the_run():
    quiet = build(raw_doc([line(2, python_ns=0.995 * NS, gil_wait_ns=0.005 * NS)]))
    waiting = build(raw_doc([line(2, python_ns=0.9 * NS, cpu_wait_ns=0.1 * NS)]))
    assert not model.shows_waits(quiet) and model.shows_waits(waiting)
    share, error = model.wait_share({"n_gil_wait_percent": 3.0, "n_cpu_wait_percent": 1.0,
                                     "n_gil_wait_percent_error": 0.3, "n_cpu_wait_percent_error": 0.4})
    assert share == 4.0 and error == pytest.approx(0.5)
    assert model.TIME_KINDS[0] == ("n_cpu_percent_python", "n_cpu_python_sec") and len(model.TIME_KINDS) == 5


def test_the_page_gets_the_rules_outcomes_in_its_data():
    from pyrometer.render import html
    profile = build(raw_doc([line(2, python_ns=0.5 * NS), line(3, python_ns=0.3 * NS, gil_wait_ns=0.2 * NS)]))
    data = html.page_data(profile)
    assert data["columns"] == {"waits": True, "awaits": False, "churn": False}
    assert data["shown_from"] == model.SHOWN_FROM
    lines = data["files"][0]["lines"]
    index = 2  # line 3: the page's lines are the listing's, from line 1
    assert lines["waits"][str(index)] == [pytest.approx(20.0), 0]
    assert lines["shares"][str(index)] == pytest.approx(50.0)


# ---- verdict and diff --------------------------------------------------------------------


def test_the_verdict_names_the_lines_that_bound_a_python_bound_run():
    profile = build(raw_doc([line(2, python_ns=0.9 * NS, samples=90), line(3, python_ns=0.1 * NS, samples=10)]))
    verdict = profile["verdict"]
    assert verdict["bound"] == "python_cpu", verdict
    assert verdict["evidence"]["python_percent"] == pytest.approx(100.0)
    assert [(x["lineno"], x["percent"]) for x in verdict["lines"]] == [(2, pytest.approx(90.0)),
                                                                          (3, pytest.approx(10.0))]
    waiting = build(raw_doc([line(2, python_ns=0.2 * NS, samples=20), line(3, system_ns=0.8 * NS, samples=80)]))
    assert waiting["verdict"]["bound"] == "system", waiting["verdict"]
    assert [x["lineno"] for x in waiting["verdict"]["lines"]] == [3]


def test_diff_finds_the_line_that_became_slower_and_not_the_one_that_did_not():
    before = build(raw_doc([line(2, python_ns=0.5 * NS, samples=50), line(3, python_ns=0.5 * NS, samples=50)]))
    after = build(raw_doc([line(2, python_ns=1.5 * NS, samples=150), line(3, python_ns=0.5 * NS, samples=50)]))
    result = compare(before, after)
    lines = [f for f in result["findings"] if f["kind"] == "line"]
    assert [(f["lineno_after"], f["direction"], f["ratio"]) for f in lines] == [(2, "slower", pytest.approx(3.0))]
    time = next(t for t in result["totals"] if t["figure"] == "time_sec")
    assert (time["before"], time["after"], time["significant"]) == (pytest.approx(1.0), pytest.approx(2.0), True)
    assert not [f for f in compare(before, before)["findings"]]
