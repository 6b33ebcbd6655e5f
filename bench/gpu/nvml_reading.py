"""What NVML says this process holds on a GPU: the ground-truth programs'
own reading of it (nvidia-ml-py, the package NVIDIA publishes), taken beside
the profiler's, for GPU memory per line."""
import os

MIB = 1 << 20


def nvml_process_mb(device: int = 0):
    """This process's GPU memory on device, in MiB, as NVML lists it; None
    when NVML or the process cannot be read."""
    try:
        import pynvml
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(device)
        for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
            if p.pid == os.getpid():
                return p.usedGpuMemory / MIB
    except Exception:
        return None
    return None
