"""Known GPU phases through JAX (issue 33's ground truth): as
torch_phases.py, with JAX's own ways (a jitted matmul and block_until_ready;
device_put and np.asarray for the transfers).  JAX would take 75% of the GPU's
memory at its first use: preallocation is turned off so that HOLD's 4 GiB is
the phase's own.  XLA launches from its own threads, which have no Python
state: the kernel tier charges their kernels to the line the main thread
stood on (the one waiting for them).

    python3 jax_phases.py TRUTH.json
"""
import json
import os
import sys
import threading
import time

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from nvml_reading import nvml_process_mb  # noqa: E402

MIB = 1 << 20


@jax.jit
def matmul(a, b):
    return a @ b


def settle():
    time.sleep(0.8)                                                    # SETTLE


def busy(a, b, seconds):
    end = time.time() + seconds
    n = 0
    while time.time() < end:
        matmul(a, b).block_until_ready()                               # BUSY_LAUNCH
        n += 1
    return n


def python_only(seconds):
    end = time.time() + seconds
    n = 0
    while time.time() < end:                                           # IDLE
        n += 1
    return n


def hold(seconds, truth):
    held = jnp.zeros((1 << 30,), dtype=jnp.float32).block_until_ready()  # HOLD_ALLOC
    time.sleep(seconds / 2)                                            # HOLD
    truth["hold_nvml_mb"] = nvml_process_mb()
    time.sleep(seconds / 2)                                            # HOLD_MORE
    held.delete()


def worker(a, b, seconds):
    end = time.time() + seconds
    while time.time() < end:
        matmul(a, b).block_until_ready()                               # WORKER


def copies(truth):
    host = np.ones(256 * MIB, dtype=np.uint8)
    device = jax.device_put(host).block_until_ready()                  # COPY_HTOD
    back = np.asarray(device[:64 * MIB])                               # COPY_DTOH
    truth["copy_htod_mb"], truth["copy_dtoh_mb"] = 256.0, 64.0
    return back


def main(truth_path):
    truth = {"jax": jax.__version__, "device": str(jax.devices()[0])}
    key = jax.random.PRNGKey(0)
    a = jax.random.normal(key, (8192, 8192), dtype=jnp.float32)
    b = jax.random.normal(key, (8192, 8192), dtype=jnp.float32)
    matmul(a, b).block_until_ready()  # compiled before the phases
    truth["base_nvml_mb"] = nvml_process_mb()
    phases = {}
    t = time.time(); settle(); phases["settle"] = (t, time.time())
    t = time.time(); truth["busy_matmuls"] = busy(a, b, 3.0); phases["busy"] = (t, time.time())
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
