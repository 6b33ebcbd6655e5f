"""Known GPU phases through PyTorch (issue 33's ground truth), each on lines
that a marker comment names: the GPU idle while the program settles; a matmul
loop that waits on the GPU (BUSY_*); Python alone with the GPU idle (IDLE);
4 GiB held (HOLD); matmuls launched from a worker thread (WORKER, the main
thread waiting in JOIN); a known transfer each way (COPY_*).

    python3 torch_phases.py TRUTH.json [--torch-profiler]

Writes what it measured itself into TRUTH.json: each phase's wall-clock
bounds, the busy phase's kernel time by CUDA events, the memory the process
held during HOLD as NVML reports it (read here, beside the profiler), the
caching allocator's figures.  --torch-profiler: the whole run under
torch.profiler, whose kernel total is written too (a separate run: CUPTI
takes one subscriber, so it cannot run beside pyrometer's kernel tier).
"""
import contextlib
import json
import sys
import threading
import time

import torch
from nvml_reading import nvml_process_mb

GIB = 1 << 30
MIB = 1 << 20


def settle():
    time.sleep(0.8)                                                    # SETTLE


def busy(a, b, seconds, truth):
    kernel_ms = 0.0
    end = time.time() + seconds
    while time.time() < end:
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        c = a @ b                                                      # BUSY_LAUNCH
        stop.record()
        torch.cuda.synchronize()                                       # BUSY_WAIT
        kernel_ms += start.elapsed_time(stop)
    truth["busy_event_sec"] = kernel_ms / 1e3
    return c


def python_only(seconds):
    end = time.time() + seconds
    n = 0
    while time.time() < end:                                           # IDLE
        n += 1
    return n


def hold(seconds, truth):
    held = torch.empty(4 * GIB, dtype=torch.uint8, device="cuda")     # HOLD_ALLOC
    torch.cuda.synchronize()
    truth["hold_reserved_mb"] = torch.cuda.memory_reserved() / MIB
    time.sleep(seconds / 2)                                            # HOLD
    truth["hold_nvml_mb"] = nvml_process_mb(torch.cuda.current_device())
    time.sleep(seconds / 2)                                            # HOLD_MORE
    del held
    torch.cuda.empty_cache()


def worker(a, b, seconds):
    end = time.time() + seconds
    while time.time() < end:
        a @ b                                                          # WORKER
        torch.cuda.synchronize()


def copies(truth):
    host = torch.empty(256 * MIB, dtype=torch.uint8).pin_memory()
    device = host.to("cuda")                                           # COPY_HTOD
    back = device[:64 * MIB].cpu()                                     # COPY_DTOH
    torch.cuda.synchronize()
    truth["copy_htod_mb"], truth["copy_dtoh_mb"] = 256.0, 64.0
    return back


def main(truth_path, with_torch_profiler):
    truth = {"torch": torch.__version__, "device": torch.cuda.get_device_name()}
    a = torch.randn(8192, 8192, device="cuda")
    b = torch.randn(8192, 8192, device="cuda")
    torch.cuda.synchronize()
    truth["base_nvml_mb"] = nvml_process_mb(torch.cuda.current_device())
    phases = {}
    profiler = contextlib.nullcontext()
    if with_torch_profiler:
        from torch.profiler import ProfilerActivity, profile
        profiler = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
    with profiler as prof:
        t = time.time(); settle(); phases["settle"] = (t, time.time())
        t = time.time(); busy(a, b, 3.0, truth); phases["busy"] = (t, time.time())
        t = time.time(); python_only(2.0); phases["idle"] = (t, time.time())
        t = time.time(); hold(1.6, truth); phases["hold"] = (t, time.time())
        t = time.time()
        thread = threading.Thread(target=worker, args=(a, b, 1.5))
        thread.start()
        thread.join()                                                  # JOIN
        phases["thread"] = (t, time.time())
        t = time.time(); copies(truth); phases["copies"] = (t, time.time())
        python_only(0.6)                                               # TAIL
    if with_torch_profiler:
        # The device's own events (kernels; copies and memsets apart, as
        # pyrometer's kernel time has them apart), each once: not the CPU ops'
        # device totals, which count their kernels again.
        from torch.autograd import DeviceType
        kernel_us = copy_us = 0.0
        for e in prof.events():
            if e.device_type != DeviceType.CUDA:
                continue
            if e.name.startswith(("Memcpy", "Memset")):
                copy_us += e.time_range.elapsed_us()
            else:
                kernel_us += e.time_range.elapsed_us()
        truth["torch_profiler_kernel_sec"] = kernel_us / 1e6
        truth["torch_profiler_copy_sec"] = copy_us / 1e6
    truth["phases"] = phases
    with open(truth_path, "w") as f:
        json.dump(truth, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1], "--torch-profiler" in sys.argv[2:])
