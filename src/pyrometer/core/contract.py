"""What the measuring core hands over, named once: the order of each record's
CPU sums (csrc/module.c, sums_tuple, builds them in this order and names them
in `_core.CPU_SUMS`), of each call stack's memory sums and of each line's
GPU sums (csrc/records.c, `_core.MEMORY_STACK_SUMS`, `_core.GPU_LINE_SUMS`);
tests/unit/test_contract.py checks that each pair agrees, and that the records'
fields are those csrc/records.c names (`_core.MEMORY_LINE_FIELDS`,
`MEMORY_RUN_FIELDS`, `GPU_RUN_FIELDS`, ...), which the model reads by name.
The model, the merge of processes and the call stacks read the sums through
these positions, never by their own unpacking."""

from __future__ import annotations

CPU_SUMS = ("python_ns", "native_ns", "system_ns", "busy_ns", "samples", "gil_wait_ns", "cpu_wait_ns",
            "loop_idle_ns", "await_ns",
            # The sampling variance (ns^2) of the five kinds and of their total
            # (csrc/profile/line_stats.h, CPU_VARS): added up, like the sums.
            "python_var", "native_var", "system_var", "gil_wait_var", "cpu_wait_var", "time_var")
(PYTHON, NATIVE, SYSTEM, BUSY, SAMPLES, GIL_WAIT, CPU_WAIT, LOOP_IDLE, AWAIT,
 PYTHON_VAR, NATIVE_VAR, SYSTEM_VAR, GIL_WAIT_VAR, CPU_WAIT_VAR, TIME_VAR) = range(len(CPU_SUMS))


def no_cpu() -> list[float]:
    """Zero CPU sums, to add into."""
    return [0.0] * len(CPU_SUMS)


# A call stack's memory sums, after its id in the memory record's "stacks",
# alone in its "other_stacks" (the stacks past the cap).
MEMORY_STACK_SUMS = ("alloc_bytes", "python_bytes", "free_bytes", "copy_bytes", "churn_bytes")
ALLOC, PYTHON_ALLOC, FREED, COPIED, CHURN = range(len(MEMORY_STACK_SUMS))

# A line's GPU sums, after its place (filename, lineno, function,
# function_lineno) in the GPU record's "lines": the NVML tier's, then from
# GPU_KERNEL_NS on the kernel tier's.  Added up across processes, but for
# the peak, the largest.
GPU_LINE_SUMS = ("busy_ns", "memory_sum_bytes", "memory_samples", "memory_peak_bytes", "kernel_ns", "kernels",
                 "copy_htod_bytes", "copy_dtoh_bytes", "copy_dtod_bytes", "copy_other_bytes", "memset_bytes",
                 "alloc_bytes")
GPU_BUSY, GPU_MEMORY_SUM, GPU_MEMORY_SAMPLES, GPU_PEAK, GPU_KERNEL_NS = range(5)
