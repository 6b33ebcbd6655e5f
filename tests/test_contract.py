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
