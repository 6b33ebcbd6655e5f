"""What the measuring core hands over, named once: the order of each record's
CPU sums (csrc/module.c, sums_tuple, builds them in this order and names them
in `_core.CPU_SUMS`; tests/test_contract.py checks that the two agree).  The
model, the merge of processes and the call stacks read the sums through these
positions, never by their own unpacking."""

from __future__ import annotations

CPU_SUMS = ("python_ns", "native_ns", "system_ns", "busy_ns", "samples", "gil_wait_ns", "cpu_wait_ns",
            "loop_idle_ns", "await_ns")
PYTHON, NATIVE, SYSTEM, BUSY, SAMPLES, GIL_WAIT, CPU_WAIT, LOOP_IDLE, AWAIT = range(len(CPU_SUMS))


def no_cpu() -> list[float]:
    """Zero CPU sums, to add into."""
    return [0.0] * len(CPU_SUMS)
