"""A launch-heavy loop (issue 33's overhead): tiny element-wise kernels, one
launch each, as fast as Python issues them (the case where a per-launch cost
shows most).  Prints the loop's own time as `loop_sec=S`.

    python3 launch_loop.py [LAUNCHES]
"""
import sys
import time

import torch


def main(launches):
    x = torch.zeros(1024, device="cuda")
    for _ in range(1000):
        x.add_(1.0)
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(launches):
        x.add_(1.0)
    torch.cuda.synchronize()
    print(f"loop_sec={time.perf_counter() - t:.4f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000)
