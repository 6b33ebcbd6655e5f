"""The GPU kernel tier (--gpu-kernels, csrc/gpu/cupti.c and launches.c), tested
against a fake libcupti.so.13 (tests/gpu/fake_cupti.c) that replays CUPTI's
semantics: the launch callback on the launching thread with a correlation id,
asynchronous work on a serial device, activity records of CUDA 12.9's layouts
delivered later (a full buffer, from the double's own thread; or at a flush,
from the flushing one), one subscriber per process.  The NVML double
(fake_nvml.c) runs beside it, as the NVML tier always does.

The programs drive the double through ctypes: each line says what it launched
(so many kernels of so many microseconds, copies of so many bytes), which is
the truth the profile is held to.  No test here needs a GPU.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import sys

import pytest

from pyrometer import model
from pyrometer.core.session import PIP_CUPTI_DIRS, kernel_library_dirs
from pyrometer.render import html, text

MIB = 1 << 20

# ctypes.PyDLL keeps the GIL through the call, as PyTorch's launches do;
# NOGIL (ctypes.CDLL) releases it, as CuPy's and JAX's may.
PRELUDE = """
import ctypes, threading, time
cu = ctypes.PyDLL("libcupti.so.13")
NOGIL = ctypes.CDLL("libcupti.so.13")
NOGIL.fake_cupti_launch.argtypes = [ctypes.c_uint64]
for name in ("fake_cupti_launch", "fake_cupti_launch_driver", "fake_cupti_memset", "fake_cupti_malloc"):
    getattr(cu, name).argtypes = [ctypes.c_uint64]
cu.fake_cupti_memcpy.argtypes = [ctypes.c_int, ctypes.c_uint64]
HTOD, DTOH, DTOD = 1, 2, 8
"""

# Truth: MANY launches 4000 kernels of 25 us (0.1 s of device time), FEW 4 of
# 60 ms (0.24 s), DRIVER 50 of 1 ms through the driver API (0.05 s); COPY_IN
# copies 64 MiB host to device and 16 MiB back, DTOD 8 MiB on the device; MEMSET
# sets 4 MiB; ALLOC allocates 256 MiB; IDLE runs Python only.
PROGRAM = PRELUDE + """
def many_short():
    for _ in range(4000):
        cu.fake_cupti_launch(25_000)                           # MANY

def few_long():
    for _ in range(4):
        cu.fake_cupti_launch(60_000_000)                       # FEW

def driver_only():
    for _ in range(50):
        cu.fake_cupti_launch_driver(1_000_000)                 # DRIVER

def copies():
    cu.fake_cupti_memcpy(HTOD, 64 << 20)                       # COPY_IN
    cu.fake_cupti_memcpy(DTOH, 16 << 20)                       # COPY_OUT
    cu.fake_cupti_memcpy(DTOD, 8 << 20)                        # COPY_ON
    cu.fake_cupti_memset(4 << 20)                              # SET_MEM

def allocate():
    cu.fake_cupti_malloc(256 << 20)                            # ALLOCATE

def python_work(seconds):
    end = time.time() + seconds
    x = 0
    while time.time() < end:                                   # IDLE
        x += 1
    return x

allocate()
many_short()
few_long()
driver_only()
copies()
cu.fake_cupti_synchronize()                                    # SYNC
python_work(0.3)
"""

# Device time per line within this of what the double ran: the double's
# records are exact, so only a lost or misplaced record could miss it.
KERNEL_TOLERANCE = 0.01


CUPTI_NAMES = ("libcupti.so.13", "libcupti.so.12", "libcupti.so.11.8", "libcupti.so")


def _real_cupti_present() -> bool:
    """Whether pyrometer's search finds a CUPTI library here without the
    double's directory: on the search path, or where pip's CUDA packages or
    the toolkit keep it (a GPU machine's PyTorch brings one)."""
    for name in CUPTI_NAMES:
        try:
            ctypes.CDLL(name)
        except OSError:
            continue
        return True
    return any(os.path.exists(os.path.join(d, name))
               for d in kernel_library_dirs().split(":") if d for name in CUPTI_NAMES)


@pytest.fixture
def kernel_env(fake_nvml_dir, fake_cupti_dir):
    """kernel_env(cupti=True, **FAKE_CUPTI_settings): the environment that makes
    the program (and pyrometer in it) load the doubles; cupti=False: the NVML
    double only, no CUPTI library anywhere on the path."""
    def env(cupti: bool = True, **settings) -> dict[str, str]:
        dirs = [str(fake_nvml_dir)] + ([str(fake_cupti_dir)] if cupti else [])
        previous = os.environ.get("LD_LIBRARY_PATH")
        if previous:
            dirs.append(previous)
        return {"LD_LIBRARY_PATH": os.pathsep.join(dirs),
                **{f"FAKE_CUPTI_{k.upper()}": str(v) for k, v in settings.items()}}
    return env


def _figures(run, *markers) -> str:
    p = run.profile
    top = {k: v for k, v in p.items() if k.startswith("gpu_")}
    parts = [f"{top} notices={p['notices']}"]
    for m in markers:
        e = run.line(m)
        parts.append(f"{m}: " + " ".join(f"{k}={v}" for k, v in e.items() if k.startswith("n_gpu")))
    return "\n  ".join(parts)


def _check_truth(run) -> None:
    p = run.profile
    why = _figures(run, "MANY", "FEW", "DRIVER", "COPY_IN", "COPY_OUT", "COPY_ON", "SET_MEM", "ALLOCATE", "IDLE", "SYNC")
    assert p["gpu"] is True and p["gpu_kernel_tier"] == "on", why
    assert os.path.basename(p["gpu_kernel_library"]) == "libcupti.so.13", why
    many, few, driver = run.line("MANY"), run.line("FEW"), run.line("DRIVER")
    assert many["n_gpu_kernels"] == 4000, why
    assert many["n_gpu_kernel_sec"] == pytest.approx(0.1, rel=KERNEL_TOLERANCE), why
    assert few["n_gpu_kernels"] == 4, why
    assert few["n_gpu_kernel_sec"] == pytest.approx(0.24, rel=KERNEL_TOLERANCE), why
    assert driver["n_gpu_kernels"] == 50, why
    assert driver["n_gpu_kernel_sec"] == pytest.approx(0.05, rel=KERNEL_TOLERANCE), why
    # Copies per direction: exact.
    assert run.line("COPY_IN")["n_gpu_copy_htod_mb"] == 64.0, why
    assert run.line("COPY_IN")["n_gpu_copy_dtoh_mb"] == 0.0, why
    assert run.line("COPY_OUT")["n_gpu_copy_dtoh_mb"] == 16.0, why
    assert run.line("COPY_ON")["n_gpu_copy_dtod_mb"] == 8.0, why
    assert run.line("COPY_IN")["n_gpu_copy_mb"] == 64.0, why
    assert run.line("SET_MEM")["n_gpu_memset_mb"] == 4.0, why
    assert run.function("copies")["n_gpu_copy_mb"] == 88.0, why
    assert run.line("ALLOCATE")["n_gpu_alloc_mb"] == 256.0, why
    # Lines that launched nothing: nothing.
    for marker in ("IDLE", "SYNC"):
        e = run.line(marker)
        assert e["n_gpu_kernel_sec"] == 0.0 and e["n_gpu_copy_mb"] == 0.0 and e["n_gpu_alloc_mb"] == 0.0, why
    # The run's totals: every record counted, none lost.
    assert p["gpu_kernels"] == 4054, why
    assert p["gpu_copies"] == 3 and p["gpu_memsets"] == 1 and p["gpu_allocations"] == 1, why
    assert p["gpu_kernel_time_sec"] == pytest.approx(0.39, rel=KERNEL_TOLERANCE), why
    assert p["gpu_kernel_unattributed_sec"] == 0.0, why
    assert p["gpu_kernel_records_lost"] == 0, why
    assert (p["gpu_copy_htod_mb"], p["gpu_copy_dtoh_mb"], p["gpu_copy_dtod_mb"]) == (64.0, 16.0, 8.0), why
    model.check(json.loads(json.dumps(p)))


def test_kernel_time_copies_and_allocations_per_launching_line(profile_program, kernel_env):
    run = profile_program(PROGRAM, options=["--gpu-kernels"], env=kernel_env())
    _check_truth(run)
    print(_figures(run, "MANY", "FEW", "IDLE"))


def test_records_delivered_by_the_librarys_thread(profile_program, kernel_env):
    """Small buffers (50 records): most records come back full, from the
    double's own thread, while the program runs, rather than at a flush."""
    run = profile_program(PROGRAM, options=["--gpu-kernels"], env=kernel_env(buffer_records=50))
    _check_truth(run)


def test_launches_from_a_thread_go_to_its_line(profile_program, kernel_env):
    source = PRELUDE + """
def worker():
    for _ in range(20):
        cu.fake_cupti_launch(5_000_000)                        # WORKER

t = threading.Thread(target=worker)
t.start()
t.join()                                                       # JOIN
for _ in range(10):
    cu.fake_cupti_launch(2_000_000)                            # MAIN
cu.fake_cupti_synchronize()
"""
    run = profile_program(source, options=["--gpu-kernels"], env=kernel_env())
    why = _figures(run, "WORKER", "JOIN", "MAIN")
    assert run.line("WORKER")["n_gpu_kernels"] == 20, why
    assert run.line("WORKER")["n_gpu_kernel_sec"] == pytest.approx(0.1, rel=KERNEL_TOLERANCE), why
    assert run.line("MAIN")["n_gpu_kernel_sec"] == pytest.approx(0.02, rel=KERNEL_TOLERANCE), why
    assert run.line("JOIN")["n_gpu_kernel_sec"] == 0.0, why


def test_launches_without_the_gil(profile_program, kernel_env):
    """A launch made without the GIL cannot read the profiler's tables: its
    thread's frames are queued and placed at the next snapshot.  A function
    still running then (LOOP: 0.2 s of launches, with Python between them as
    a framework's ops have: a bare ctypes loop launches 300,000 a second, past
    the 16,384 notes the queue holds between two snapshots on a loaded
    machine) gets its own launches; one
    that the profiler never met and that has returned by then (ONCE) goes to
    the nearest caller still known (CALLER), as docs/how-it-works.md says.
    (A note is placed at the next snapshot: one that comes only after the
    program has ended finds no frame of it alive, and charges no line.)"""
    source = PRELUDE + """
def loop():
    end = time.time() + 0.2
    n = 0
    while time.time() < end:
        NOGIL.fake_cupti_launch(10_000)                        # LOOP
        n += 1
        sum(range(3000))  # ~20 us of Python a launch, as a framework's op
    return n

def once():
    NOGIL.fake_cupti_launch(3_000_000)                         # ONCE

n = loop()
once()                                                         # CALLER
NOGIL.fake_cupti_synchronize()       # without the GIL, as torch.cuda.synchronize
time.sleep(0.1)                      # a snapshot places the notes while the caller runs
open("n.txt", "w").write(str(n))
"""
    run = profile_program(source, options=["--gpu-kernels"], env=kernel_env())
    n = int((run.program.parent / "n.txt").read_text())
    why = _figures(run, "LOOP", "ONCE", "CALLER")
    assert run.line("LOOP")["n_gpu_kernels"] == n, why
    assert run.line("LOOP")["n_gpu_kernel_sec"] == pytest.approx(n * 1e-5, rel=KERNEL_TOLERANCE), why
    once, caller = run.line("ONCE")["n_gpu_kernel_sec"], run.line("CALLER")["n_gpu_kernel_sec"]
    assert once + caller == pytest.approx(0.003, rel=KERNEL_TOLERANCE), why
    assert run.profile["gpu_kernel_unattributed_sec"] == 0.0, why


def test_launches_from_a_native_thread_go_to_the_main_threads_line(profile_program, kernel_env):
    """A thread without Python state (PyTorch's autograd threads) launches: its
    kernels go to the line the main thread is on, the line waiting for them."""
    source = PRELUDE + """
NOGIL.fake_cupti_launch_on_native_thread.argtypes = [ctypes.c_int, ctypes.c_uint64, ctypes.c_uint]
time.sleep(0.1)
NOGIL.fake_cupti_launch_on_native_thread(20, 2_000_000, 100)   # NATIVE
cu.fake_cupti_synchronize()
time.sleep(0.1)                                                # AFTER
"""
    run = profile_program(source, options=["--gpu-kernels"], env=kernel_env())
    why = _figures(run, "NATIVE", "AFTER")
    assert run.line("NATIVE")["n_gpu_kernels"] == 20, why
    assert run.line("NATIVE")["n_gpu_kernel_sec"] == pytest.approx(0.04, rel=KERNEL_TOLERANCE), why
    assert run.line("AFTER")["n_gpu_kernel_sec"] == 0.0, why


def test_a_refusing_cupti_leaves_the_nvml_tier(profile_program, kernel_env):
    """cuptiSubscribe fails (CUPTI_ERROR_UNKNOWN, as the real library does
    without a driver): the NVML tier goes on; one notice says why."""
    run = profile_program(PROGRAM, options=["--gpu-kernels"], env=kernel_env(subscribe_error=999))
    p = run.profile
    why = _figures(run, "MANY")
    assert p["gpu"] is True and p["gpu_kernel_tier"] == "failed", why
    assert len(p["notices"]) == 1 and "cuptiSubscribe failed" in p["notices"][0], why
    assert "n_gpu_kernel_sec" not in run.line("MANY"), why
    model.check(json.loads(json.dumps(p)))


@pytest.mark.skipif(not _real_cupti_present(), reason="no real CUPTI library here")
def test_the_real_cupti_library_never_crashes(profile_program, kernel_env):
    """NVIDIA's own libcupti (here, probably with no GPU or driver): the run
    ends normally; the tier is on, or off with one notice."""
    run = profile_program(NVML_ONLY, options=["--gpu-kernels"], env=kernel_env(cupti=False))
    p = run.profile
    assert p["gpu"] is True and p["gpu_kernel_tier"] in ("on", "failed", "busy"), _figures(run)
    assert run.line("BUSY")["n_gpu_sec"] > 0.3, _figures(run, "BUSY")
    assert len(p["notices"]) == (0 if p["gpu_kernel_tier"] == "on" else 1), p["notices"]
    model.check(json.loads(json.dumps(p)))


def test_another_subscriber_leaves_the_nvml_tier(profile_program, kernel_env):
    """torch.profiler (here: the double's other subscriber) holds CUPTI: the
    kernel tier falls back to NVML's utilisation, and the profile says so."""
    run = profile_program(PROGRAM, options=["--gpu-kernels"], env=kernel_env(other_subscriber=1))
    p = run.profile
    why = _figures(run, "MANY")
    assert p["gpu"] is True and p["gpu_kernel_tier"] == "busy", why
    assert len(p["notices"]) == 1 and "holds CUPTI" in p["notices"][0], why
    assert "n_gpu_kernel_sec" not in run.line("MANY") and "n_gpu_sec" in run.line("MANY"), why
    model.check(json.loads(json.dumps(p)))


def test_the_program_cannot_subscribe_while_pyrometer_does(profile_program, kernel_env, tmp_path):
    """The one-subscriber rule, both ways: while pyrometer holds CUPTI, the
    program's own subscription (the double's, as torch.profiler's would) is
    refused with CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED; without
    --gpu-kernels it is not."""
    out = tmp_path / "rc.txt"
    source = PRELUDE + f"""
open({str(out)!r}, "a").write(str(cu.fake_cupti_subscribe()) + "\\n")
"""
    profile_program(source, options=["--gpu-kernels"], env=kernel_env())
    profile_program(source, env=kernel_env())
    assert out.read_text().split() == ["39", "0"]


# A program that uses the NVML double only (its GPU busy 0.6 s on BUSY).
NVML_ONLY = """
import ctypes, time
nv = ctypes.CDLL("libnvidia-ml.so.1")
nv.fake_nvml_busy(0, 1); time.sleep(0.6); nv.fake_nvml_busy(0, 0)   # BUSY
"""


@pytest.mark.skipif(_real_cupti_present(), reason="a real CUPTI library is installed here")
def test_no_cupti_library_leaves_the_nvml_tier(profile_program, kernel_env):
    run = profile_program(NVML_ONLY, options=["--gpu-kernels"], env=kernel_env(cupti=False))
    p = run.profile
    why = _figures(run, "BUSY")
    assert p["gpu"] is True and p["gpu_kernel_tier"] == "absent", why
    assert len(p["notices"]) == 1 and "no CUPTI library" in p["notices"][0], why
    assert run.line("BUSY")["n_gpu_sec"] > 0.3, why
    assert "n_gpu_kernel_sec" not in run.line("BUSY"), why


# Where CUPTI lies when nothing puts it on the library search path: pip's CUDA
# 13 packages (PyTorch's and JAX's wheels depend on them), CUDA 12's, and the
# CUDA toolkit.  The program loads it by its path, as PyTorch does once
# imported: the same file, so the same library as pyrometer's.  Those places
# come before the search path's (where this machine may have a real CUPTI of
# a system CUDA: the framework's own copy is the one to share).
OFF_THE_SEARCH_PATH = """
import ctypes, sys
cu = ctypes.PyDLL(sys.argv[1])
cu.fake_cupti_launch.argtypes = [ctypes.c_uint64]
cu.fake_cupti_memcpy.argtypes = [ctypes.c_int, ctypes.c_uint64]
for _ in range(10):
    cu.fake_cupti_launch(2_000_000)                            # LAUNCH
cu.fake_cupti_memcpy(1, 8 << 20)                               # COPY_IN
cu.fake_cupti_synchronize()
"""


@pytest.mark.parametrize("layout", ["pip-cuda13", "pip-cuda12", "toolkit"])
def test_cupti_found_where_pip_and_the_toolkit_put_it(profile_program, fake_nvml_dir, fake_cupti_dir, tmp_path,
                                                      layout):
    place, name, env = {
        "pip-cuda13": ("site/nvidia/cu13/lib", "libcupti.so.13", {"PYTHONPATH": str(tmp_path / "site")}),
        "pip-cuda12": ("site/nvidia/cuda_cupti/lib", "libcupti.so.12", {"PYTHONPATH": str(tmp_path / "site")}),
        "toolkit": ("cuda/extras/CUPTI/lib64", "libcupti.so.13", {"CUDA_HOME": str(tmp_path / "cuda")}),
    }[layout]
    if layout == "toolkit" and any(os.path.exists(os.path.join(entry, sub, n)) for entry in sys.path if entry
                                   for sub in PIP_CUPTI_DIRS for n in CUPTI_NAMES):
        pytest.skip("pip's CUPTI is installed here, and comes before the toolkit's")
    library = tmp_path / place / name
    library.parent.mkdir(parents=True)
    shutil.copy(fake_cupti_dir / "libcupti.so.13", library)
    # LD_LIBRARY_PATH only the NVML double's: none of this machine's own.
    run = profile_program(OFF_THE_SEARCH_PATH, options=["--gpu-kernels"], args=[str(library)],
                          env={"LD_LIBRARY_PATH": str(fake_nvml_dir), **env})
    p = run.profile
    why = _figures(run, "LAUNCH", "COPY_IN")
    assert p["gpu_kernel_tier"] == "on", why
    assert os.path.samefile(p["gpu_kernel_library"], library), why
    assert run.line("LAUNCH")["n_gpu_kernels"] == 10, why
    assert run.line("LAUNCH")["n_gpu_kernel_sec"] == pytest.approx(0.02, rel=KERNEL_TOLERANCE), why
    assert run.line("COPY_IN")["n_gpu_copy_htod_mb"] == 8.0, why
    assert p["notices"] == [], why


def test_kernel_tier_off_by_default(profile_program, kernel_env):
    run = profile_program(PROGRAM, env=kernel_env())
    p = run.profile
    assert p["gpu"] is True and p["gpu_kernel_tier"] == "off"
    assert "n_gpu_kernel_sec" not in run.line("MANY")
    assert p["notices"] == []


def test_reports_show_kernel_columns_only_when_present(profile_program, kernel_env):
    run = profile_program(PROGRAM, options=["--gpu-kernels"], env=kernel_env())
    shown = text.render(run.profile, color=False)
    assert "GPU kernel" in shown and "copy" in shown.lower(), shown
    # FEW's kernels ran 0.24 s on the device: in the kernel column as 240ms
    # (the process table's seconds, "0.240", once took the name of its helper).
    # Found by its number: the source may be cut short (a line that allocated
    # adds the memory columns, and the table keeps to 132 columns).
    few = [row for row in shown.splitlines() if row.split("│")[0].strip() == str(run.lineno("FEW"))]
    assert few and re.search(r"\b240ms\b", few[0]) and not re.search(r"\b0\.\d{3}\b", few[0]), shown
    page = html.render(run.profile)
    assert "n_gpu_kernel_sec" in page
    off = profile_program(PROGRAM, env=kernel_env())
    assert "GPU kernel" not in text.render(off.profile, color=False)


# The child launches through ctypes, which releases the GIL, so its launches'
# notes wait for a drain with their frames' code objects unreferenced.  The
# snapshots drain every 10 ms; a child that ends before one used to lose its
# line (its module's code gone by the final drain: about 1 run in 50 with the
# default rate, every run with the 1 s rate of the second case).  Now a note
# queued without the GIL asks the main thread for a drain at once.
@pytest.mark.parametrize("rate", [None, "1"], ids=["default-rate", "no-snapshot-in-the-child"])
def test_child_process_kernels_are_merged(profile_program, kernel_env, tmp_path, rate):
    (tmp_path / "child.py").write_text(
        "import ctypes\n"
        "cu = ctypes.CDLL('libcupti.so.13')\n"
        "cu.fake_cupti_launch.argtypes = [ctypes.c_uint64]\n"
        "for _ in range(30): cu.fake_cupti_launch(1_000_000)\n"
        "cu.fake_cupti_synchronize()\n")
    source = PRELUDE + """
import subprocess, sys
subprocess.run([sys.executable, "child.py"], check=True)       # PARENT_WAITS
for _ in range(10):
    cu.fake_cupti_launch(1_000_000)                            # PARENT_LAUNCHES
cu.fake_cupti_synchronize()
"""
    options = ["--gpu-kernels"] + (["--cpu-sampling-rate", rate] if rate else [])
    run = profile_program(source, options=options, env=kernel_env())
    p = run.profile
    why = _figures(run, "PARENT_LAUNCHES", "PARENT_WAITS")
    assert p["process_count"] == 2, why
    child = run.file(tmp_path / "child.py")
    entry = next(e for e in child["lines"] if e["lineno"] == 4)
    assert entry["n_gpu_kernels"] == 30, (entry, why)
    assert entry["n_gpu_kernel_sec"] == pytest.approx(0.03, rel=KERNEL_TOLERANCE), (entry, why)
    assert run.line("PARENT_LAUNCHES")["n_gpu_kernels"] == 10, why
    assert p["gpu_kernels"] == 40, why


def test_usage_errors(run_pyrometer, tmp_path):
    prog = tmp_path / "p.py"
    prog.write_text("pass\n")
    for args, said in ((["--gpu-kernels", "--no-gpu-kernels"], "--gpu-kernels contradicts --no-gpu-kernels"),
                       (["--gpu-kernels", "--no-gpu"], "--gpu-kernels contradicts --no-gpu"),
                       (["--gpu-kernels", "--cpu-only"], "--gpu-kernels contradicts --cpu-only")):
        proc = run_pyrometer([*args, prog])
        assert proc.returncode != 0 and said in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    # --cpu-only --gpu profiles the GPU (tests/end_to_end/test_control.py): the kernel tier may join it.
    proc = run_pyrometer(["--cpu-only", "--gpu", "--gpu-kernels", "--json", "--outfile", tmp_path / "o.json", prog])
    assert proc.returncode == 0, proc.stderr


def test_launches_while_paused_are_not_charged(profile_program, kernel_env):
    source = PRELUDE + """
import pyrometer
for _ in range(10):
    cu.fake_cupti_launch(1_000_000)                            # PROFILED
pyrometer.stop()
for _ in range(10):
    cu.fake_cupti_launch(1_000_000)                            # PAUSED
pyrometer.start()
cu.fake_cupti_synchronize()
"""
    run = profile_program(source, options=["--gpu-kernels"], env=kernel_env())
    p = run.profile
    why = _figures(run, "PROFILED", "PAUSED")
    assert run.line("PROFILED")["n_gpu_kernels"] == 10, why
    assert run.line("PAUSED")["n_gpu_kernels"] == 0, why
    assert p["gpu_kernels"] == 10 and p["gpu_kernel_unattributed_sec"] == 0.0, why
