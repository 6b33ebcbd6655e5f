"""The contract between the measuring core and the Python side: the order of
each record's CPU sums is named once (src/pyrometer/contract.py) and must be
the order the core builds them in (csrc/module.c, sums_tuple, which names them
in _core.CPU_SUMS).  Adding a figure on one side only fails here, not as
numbers read into the wrong figure."""

from __future__ import annotations

import os
import time

from pyrometer import _core, contract
from pyrometer.inprocess import InProcessRun, default_options


def test_the_core_names_its_cpu_sums_as_the_contract_does():
    assert _core.CPU_SUMS == contract.CPU_SUMS


def _spin(seconds: float) -> int:
    end, n = time.perf_counter() + seconds, 0
    while time.perf_counter() < end:
        n += sum(range(20))
    return n


def test_records_hold_the_contracts_sums():
    """A real run's records: one CPU sum per named position, the CPU time
    (Python and native: the loop calls sum() and perf_counter()) where the loop
    ran, and its sample count a whole number."""
    run = InProcessRun(default_options(memory=False), "t", program_directory=os.path.dirname(__file__))
    run.start()
    _spin(0.3)
    raw = run.collect()
    mine = [cpu for filename, _, _, _, cpu in raw["records"] if filename == __file__]
    assert mine, raw["records"]
    assert all(len(cpu) == len(contract.CPU_SUMS) for _, _, _, _, cpu in raw["records"])
    assert len(raw["unattributed"]) == len(contract.CPU_SUMS)
    on_cpu = sum(cpu[contract.PYTHON] + cpu[contract.NATIVE] for cpu in mine) * 1e-9
    assert 0.15 < on_cpu < 0.6, mine
    assert sum(cpu[contract.SYSTEM] for cpu in mine) * 1e-9 < 0.05, mine
    assert all(isinstance(cpu[contract.SAMPLES], int) for cpu in mine)
    assert sum(cpu[contract.SAMPLES] for cpu in mine) >= 10, mine


def test_the_core_names_its_memory_stack_sums_as_the_contract_does():
    assert _core.MEMORY_STACK_SUMS == contract.MEMORY_STACK_SUMS


# Profiles memory in a process of its own (the memory library attached to it
# for good) and prints what the core's memory record holds.
MEMORY_RECORDS = """
import json, os, sys
from pyrometer import _core
from pyrometer.inprocess import InProcessRun, default_options
run = InProcessRun(default_options(), "t", program_directory=os.path.dirname(os.path.abspath(__file__)))
run.start()
kept = [bytearray(1 << 20) for _ in range(8)]  # a line with memory
objects = [str(i) for i in range(200_000)]  # and one of Python's small objects
memory = run.collect()["memory"]
print(json.dumps({
    "run": sorted(memory), "lines": [sorted(line) for line in memory["lines"]],
    "stack_lengths": sorted({len(s) for s in memory["stacks"]}), "other": len(memory["other_stacks"]),
    "kept": [line["net_bytes"] for line in memory["lines"] if line["lineno"] == 7],
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
    proc = subprocess.run([sys.executable, str(program)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout.splitlines()[-1])
    assert seen["run"] == sorted(seen["run_fields"])
    assert seen["lines"] and all(keys == sorted(seen["line_fields"]) for keys in seen["lines"])
    assert seen["stack_lengths"] == [1 + len(contract.MEMORY_STACK_SUMS)]
    assert seen["other"] == len(contract.MEMORY_STACK_SUMS)
    assert seen["kept"] and 8 << 20 <= seen["kept"][0] <= 9 << 20, seen["kept"]
