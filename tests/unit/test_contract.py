"""The contract between the measuring core and the Python side: each
record's fields are named once, in csrc/records.c's tables, and the Python
side reads them by those names.  The sums are named record types
(_core.CpuSums, MemoryStackSums, GpuLineSums) whose fields are the tables'
names (exported as _core.CPU_SUMS, MEMORY_STACK_SUMS, GPU_LINE_SUMS), and
travel in a document (core/document.py) that carries those names.  A
figure read by a name the core does not give fails here, not as numbers
read into the wrong figure."""

from __future__ import annotations

import json
import marshal
import os
import time

import pytest

from pyrometer import _core
from pyrometer.core import document
from pyrometer.integrations.inprocess import InProcessRun, default_options


def test_the_sums_are_records_named_as_the_core_names_them():
    assert _core.CpuSums.__match_args__ == _core.CPU_SUMS
    assert _core.MemoryStackSums.__match_args__ == _core.MEMORY_STACK_SUMS
    assert _core.GpuLineSums.__match_args__ == _core.GPU_LINE_SUMS
    # The records of a place and its sums, and the stack node (model/build.py,
    # model/stacks.py and the merge read these names).
    assert _core.CpuLine.__match_args__ == ("filename", "lineno", "qualname", "first_lineno", "cpu")
    assert _core.GpuLine.__match_args__ == ("filename", "lineno", "qualname", "first_lineno", "gpu")
    assert _core.StackNode.__match_args__ == ("parent", "frame", "cpu")
    # The names the model reads (model/build.py, model/stacks.py, the merge).
    assert {"memory_peak_bytes", "kernel_ns", "busy_ns", "memory_sum_bytes"} <= set(_core.GPU_LINE_SUMS)
    assert set(_core.MEMORY_STACK_SUMS) == {"alloc_bytes", "python_bytes", "free_bytes", "copy_bytes",
                                            "churn_bytes"}
    sums = document.cpu_sums(python_ns=2.0, samples=3)
    assert (sums.python_ns, sums.samples, sums.native_ns) == (2.0, 3, 0)
    with pytest.raises(TypeError):
        document.cpu_sums(pyhton_ns=1.0)  # a misspelt field is an error, not a figure lost
    assert document.add(sums, sums).samples == 6
    stack = document.memory_stack_sums(alloc_bytes=5, free_bytes=2)
    both = document.add(stack, document.memory_stack_sums(alloc_bytes=3, free_bytes=7), largest=("free_bytes",))
    assert (both.alloc_bytes, both.free_bytes) == (8, 7)  # added, and the larger of the two


def _spin(seconds: float) -> int:
    """Runs for `seconds` of this thread's CPU time (not wall time: with tests
    beside it on the machine, a wall-time loop got half a core).  The clock is
    a system call: read between sums of 2,000 numbers, not of 20, whose loop
    was a third system time on a loaded machine (90 ms of 0.3 s)."""
    end, n = time.thread_time() + seconds, 0
    while time.thread_time() < end:
        n += sum(range(2000))
    return n


def _run_collection() -> dict:
    run = InProcessRun(default_options(memory=False), "t", program_directory=os.path.dirname(__file__))
    run.start()
    _spin(0.3)
    return run.collect()


def test_records_hold_the_cpu_sums():
    """A real run's records: CpuSums records, the CPU time (Python and native:
    the loop calls sum() and thread_time()) where the loop ran, and its
    sample count a whole number."""
    raw = _run_collection()
    mine = [r.cpu for r in raw["records"] if r.filename == __file__]
    assert mine, raw["records"]
    assert all(isinstance(r, _core.CpuLine) and isinstance(r.cpu, _core.CpuSums) for r in raw["records"])
    nodes = raw["stacks"]["nodes"] if raw.get("stacks") else []
    assert nodes, "no call stacks collected"
    assert all(isinstance(n, _core.StackNode) for n in nodes) and (nodes[0].parent, nodes[0].frame) == (-1, -1)
    assert all(n.cpu is None or isinstance(n.cpu, _core.CpuSums) for n in nodes)
    assert all(0 <= n.parent < i and 0 <= n.frame < len(raw["stacks"]["frames"]) for i, n in enumerate(nodes) if i)
    assert isinstance(raw["unattributed"], _core.CpuSums)
    on_cpu = sum(cpu.python_ns + cpu.native_ns for cpu in mine) * 1e-9
    assert 0.15 < on_cpu < 0.6, mine
    assert sum(cpu.system_ns for cpu in mine) * 1e-9 < 0.05, mine
    assert all(isinstance(cpu.samples, int) for cpu in mine)
    assert sum(cpu.samples for cpu in mine) >= 10, mine


def test_a_document_carries_the_records_by_marshal_and_json():
    """plain() is what marshal (periodic reports) and JSON (children's files)
    carry; named() gives back the same records, and refuses a document of
    other fields (a child run by another pyrometer)."""
    raw = _run_collection()
    for carried in (marshal.loads(marshal.dumps(document.plain(raw))),
                    json.loads(json.dumps(document.plain(raw)))):
        back = document.named(carried)
        assert back["records"] == raw["records"] and back["unattributed"] == raw["unattributed"]
        assert all(isinstance(r, _core.CpuLine) and isinstance(r.cpu, _core.CpuSums) for r in back["records"])
        if raw.get("stacks"):
            assert back["stacks"]["nodes"] == raw["stacks"]["nodes"]
            assert all(isinstance(n, _core.StackNode) for n in back["stacks"]["nodes"])
        other = dict(carried, document=dict(carried["document"], stack_node=["frame", "parent", "cpu"]))
        with pytest.raises(ValueError):
            document.named(other)
        other = dict(carried, document=dict(carried["document"], cpu_sums=carried["document"]["cpu_sums"][:-1]))
        with pytest.raises(ValueError):
            document.named(other)
    with pytest.raises(ValueError):
        document.named({k: v for k, v in json.loads(json.dumps(document.plain(raw))).items() if k != "document"})


# Profiles memory in a process of its own (the memory library attached to it
# for good) and prints what the core's memory record holds.
MEMORY_RECORDS = """
import json, os, sys
from pyrometer import _core
from pyrometer.integrations.inprocess import InProcessRun, default_options
run = InProcessRun(default_options(), "t", program_directory=os.path.dirname(os.path.abspath(__file__)))
run.start()
kept = [bytearray(1 << 20) for _ in range(8)]  # a line with memory
objects = [str(i) for i in range(200_000)]  # and one of Python's small objects
memory = run.collect()["memory"]
print(json.dumps({
    "run": sorted(memory), "lines": [sorted(line) for line in memory["lines"]],
    "stacks": sorted({(len(s), type(s[1]).__name__) for s in memory["stacks"]}),
    "other": type(memory["other_stacks"]).__name__,
    "kept": [line["net_bytes"] for line in memory["lines"] if line["lineno"] == int(sys.argv[1])],
    "line_fields": _core.MEMORY_LINE_FIELDS, "run_fields": _core.MEMORY_RUN_FIELDS}))
"""


def test_memory_records_hold_the_fields_the_core_names(tmp_path):
    """A real run's memory record: its keys, each line's and each stack's, are
    those the core's tables name (csrc/records.c), and the figures are where
    their names say (the line keeping 8 MiB keeps 8 MiB)."""
    import json
    import subprocess
    import sys
    program = tmp_path / "memory_records.py"
    program.write_text(MEMORY_RECORDS)
    kept_line = next(n for n, text in enumerate(MEMORY_RECORDS.splitlines(), 1) if "# a line with memory" in text)
    proc = subprocess.run([sys.executable, str(program), str(kept_line)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout.splitlines()[-1])
    assert seen["run"] == sorted(seen["run_fields"])
    assert seen["lines"] and all(keys == sorted(seen["line_fields"]) for keys in seen["lines"])
    assert seen["stacks"] == [[2, "MemoryStackSums"]] and seen["other"] == "MemoryStackSums"
    # On 3.10 and 3.11 the list comprehension is a function of its own: the
    # line has a record in each (in no set order), the comprehension's keeping.
    assert seen["kept"] and 8 << 20 <= sum(seen["kept"]) <= 9 << 20, seen["kept"]


# Profiles a program with both GPU tiers on the test doubles, in a process of
# its own, and prints what the core's GPU record holds.
GPU_RECORDS = """
import json, os, time
from pyrometer import _core
from pyrometer.integrations.inprocess import InProcessRun, default_options
run = InProcessRun(default_options(memory=False, gpu=True, gpu_kernels=True), "t",
                   program_directory=os.path.dirname(os.path.abspath(__file__)))
run.start()
end = time.monotonic() + 0.6
while time.monotonic() < end:
    pass
gpu = run.collect()["gpu"]
print(json.dumps({"run": sorted(gpu), "status": gpu["status"], "devices": [sorted(d) for d in gpu["devices"]],
                  "kernels": sorted(gpu["kernels"] or {}), "lines": sorted({(len(l), type(l[4]).__name__) for l in gpu["lines"]}),
                  "run_fields": _core.GPU_RUN_FIELDS, "device_fields": _core.GPU_DEVICE_FIELDS,
                  "kernels_fields": _core.GPU_KERNELS_FIELDS}))
"""


def test_gpu_records_hold_the_fields_the_core_names(tmp_path, fake_nvml_dir, fake_cupti_dir):
    """The GPU record of a real run on the test doubles (both tiers): its keys,
    each device's and the kernel tier's, are those the core's tables name, and
    each line is its place and its GpuLineSums."""
    import json
    import subprocess
    import sys
    program = tmp_path / "gpu_records.py"
    program.write_text(GPU_RECORDS)
    env = dict(os.environ, LD_LIBRARY_PATH=os.pathsep.join(
        [str(fake_nvml_dir), str(fake_cupti_dir), *filter(None, [os.environ.get("LD_LIBRARY_PATH")])]))
    proc = subprocess.run([sys.executable, str(program)], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout.splitlines()[-1])
    assert seen["status"] == "ok", seen
    assert seen["run"] == sorted(seen["run_fields"])
    assert seen["devices"] and all(keys == sorted(seen["device_fields"]) for keys in seen["devices"])
    assert seen["kernels"] == sorted(seen["kernels_fields"])
    assert seen["lines"] == [[5, "GpuLineSums"]], seen
