"""Known GPU phases through CuPy (issue 33's ground truth): as
torch_phases.py, with CuPy's ways (cuBLAS matmul, Device.synchronize,
cp.asarray and cp.asnumpy for the transfers, its memory pool for HOLD).

    python3 cupy_phases.py TRUTH.json
"""
import json
import sys
import threading
import time

import cupy as cp
import numpy as np
from nvml_reading import nvml_process_mb

GIB = 1 << 30
MIB = 1 << 20


def settle():
    time.sleep(0.8)                                                    # SETTLE


def busy(a, b, seconds, truth):
    kernel_ms = 0.0
    end = time.time() + seconds
    while time.time() < end:
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        c = a @ b                                                      # BUSY_LAUNCH
        stop.record()
        cp.cuda.Device().synchronize()                                 # BUSY_WAIT
        kernel_ms += cp.cuda.get_elapsed_time(start, stop)
    truth["busy_event_sec"] = kernel_ms / 1e3
    return c


def python_only(seconds):
    end = time.time() + seconds
    n = 0
    while time.time() < end:                                           # IDLE
        n += 1
    return n


def hold(seconds, truth):
    held = cp.empty(4 * GIB, dtype=cp.uint8)                           # HOLD_ALLOC
    cp.cuda.Device().synchronize()
    truth["hold_pool_mb"] = cp.get_default_memory_pool().total_bytes() / MIB
    time.sleep(seconds / 2)                                            # HOLD
    truth["hold_nvml_mb"] = nvml_process_mb()
    time.sleep(seconds / 2)                                            # HOLD_MORE
    del held
    cp.get_default_memory_pool().free_all_blocks()


def worker(a, b, seconds):
    end = time.time() + seconds
    while time.time() < end:
        a @ b                                                          # WORKER
        cp.cuda.Device().synchronize()


def copies(truth):
    host = np.ones(256 * MIB, dtype=np.uint8)
    device = cp.asarray(host)                                          # COPY_HTOD
    back = cp.asnumpy(device[:64 * MIB])                               # COPY_DTOH
    truth["copy_htod_mb"], truth["copy_dtoh_mb"] = 256.0, 64.0
    return back


def main(truth_path):
    truth = {"cupy": cp.__version__, "device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode()}
    a = cp.random.standard_normal((8192, 8192), dtype=cp.float32)
    b = cp.random.standard_normal((8192, 8192), dtype=cp.float32)
    (a @ b).sum()
    cp.cuda.Device().synchronize()
    truth["base_nvml_mb"] = nvml_process_mb()
    phases = {}
    t = time.time(); settle(); phases["settle"] = (t, time.time())
    t = time.time(); busy(a, b, 3.0, truth); phases["busy"] = (t, time.time())
    t = time.time(); python_only(2.0); phases["idle"] = (t, time.time())
    t = time.time(); hold(1.6, truth); phases["hold"] = (t, time.time())
    t = time.time()
    thread = threading.Thread(target=worker, args=(a, b, 1.5))
    thread.start()
    thread.join()                                                      # JOIN
    phases["thread"] = (t, time.time())
    t = time.time(); copies(truth); phases["copies"] = (t, time.time())
    python_only(0.6)                                                   # TAIL
    truth["phases"] = phases
    with open(truth_path, "w") as f:
        json.dump(truth, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
