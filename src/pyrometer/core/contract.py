"""What the measuring core hands over as positional sums, named once: the
order of each call stack's memory sums and of each line's GPU sums
(csrc/records.c, `_core.MEMORY_STACK_SUMS`, `_core.GPU_LINE_SUMS`);
tests/unit/test_contract.py checks that each pair agrees, and that the records'
fields are those csrc/records.c names (`_core.MEMORY_LINE_FIELDS`,
`MEMORY_RUN_FIELDS`, `GPU_RUN_FIELDS`, ...), which the model reads by name.
The CPU sums are named records of their own (`_core.CpuSums`,
core/document.py), read by their fields' names, with no positions here."""

from __future__ import annotations

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
