"""GPU profiling through NVML, tested against a fake libnvidia-ml.so.1
(tests/gpu/fake_nvml.c) that replays NVML's measured behaviour: 200 ms
utilisation windows published 30 ms late with their own timestamps, NOT_FOUND
when nothing is new, per-process lists and per-process utilisation.  The
profiled programs drive it through ctypes (the same library handle pyrometer's
dlopen got): they mark when "the GPU" is busy and how much memory they hold, so
the truth of every line is known.

No test here needs a GPU; on a machine that has NVIDIA's real library, the
tests that need its absence are skipped.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys

import pytest

from pyrometer import model
from pyrometer.render import html, text

MIB = 1 << 20

# The phase program of the issue, with the GPU work marked for the double.  The
# busy phase lasts 2 s (the measured program ran its matmuls for 3 s):
# a utilisation window straddling a phase edge can only be spread over its
# lines in proportion to their time (the GPU says how much of the window was
# busy, not when), which puts at most a quarter of one 200 ms window, 50 ms,
# on the neighbouring line: 2.5% of 2 s, inside the 5% bar with room to spare.
PHASES = """
import ctypes, sys, time
nv = ctypes.CDLL("libnvidia-ml.so.1")
nv.fake_nvml_memory.argtypes = [ctypes.c_int, ctypes.c_ulonglong]
DEVICE = int(sys.argv[1]) if len(sys.argv) > 1 else 0

def settle():
    time.sleep(0.5)                                    # SETTLE

def gpu_wait(seconds):
    nv.fake_nvml_busy(DEVICE, 1)
    time.sleep(seconds)                                # BUSY
    nv.fake_nvml_busy(DEVICE, 0)

def python_work(seconds):
    end = time.time() + seconds
    x = 0
    while time.time() < end:                           # IDLE
        x += 1
    return x

def hold(seconds):
    nv.fake_nvml_memory(DEVICE, 4 << 30)
    time.sleep(seconds)                                # HOLD
    nv.fake_nvml_memory(DEVICE, 0)

settle()
gpu_wait(2.0)
python_work(1.0)
hold(1.0)
"""

GPU_LINE_FIELDS = ("n_gpu_percent", "n_gpu_sec", "n_gpu_avg_memory_mb", "n_gpu_peak_memory_mb")


def _real_nvml_present() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


@pytest.fixture
def gpu_env(fake_nvml_dir):
    """gpu_env(**FAKE_NVML_settings): the environment that makes the profiled
    program (and pyrometer in it) load the double."""
    def env(**settings) -> dict[str, str]:
        previous = os.environ.get("LD_LIBRARY_PATH")
        path = str(fake_nvml_dir) + (os.pathsep + previous if previous else "")
        return {"LD_LIBRARY_PATH": path, **{f"FAKE_NVML_{k.upper()}": str(v) for k, v in settings.items()}}
    return env


def _gpu_figures(run, *markers) -> str:
    p = run.profile
    parts = [f"gpu_time_sec={p.get('gpu_time_sec')} unattributed={p.get('gpu_unattributed_sec')} "
             f"source={p.get('gpu_utilization_source')} notices={p['notices']}"]
    for m in markers:
        e = run.line(m)
        parts.append(f"{m}: " + " ".join(f"{k}={e.get(k, 0.0):.3f}" for k in GPU_LINE_FIELDS))
    return "\n  ".join(parts)


def _check_phases(run) -> None:
    why = _gpu_figures(run, "SETTLE", "BUSY", "IDLE", "HOLD")
    p = run.profile
    assert p["gpu"] is True, why
    # The GPU was busy 2.0 s in all: what is reported is that time.
    assert p["gpu_time_sec"] == pytest.approx(2.0, rel=0.10), why
    busy, idle, hold = run.line("BUSY"), run.line("IDLE"), run.line("HOLD")
    assert busy["n_gpu_percent"] >= 85.0, why
    assert idle["n_gpu_percent"] <= 5.0, why
    assert hold["n_gpu_percent"] <= 5.0, why
    assert run.function("gpu_wait")["n_gpu_percent"] >= 85.0, why
    # 4 GiB held on the sleeping line: its average and peak, within 10%.
    assert hold["n_gpu_avg_memory_mb"] == pytest.approx(4096.0, rel=0.10), why
    assert hold["n_gpu_peak_memory_mb"] == pytest.approx(4096.0, rel=0.10), why
    assert busy["n_gpu_avg_memory_mb"] < 0.1 * 4096, why
    assert idle["n_gpu_avg_memory_mb"] < 0.1 * 4096, why
    assert p["gpu_peak_memory_mb"] == pytest.approx(4096.0, rel=0.10), why
    model.check(json.loads(json.dumps(p)))


@pytest.mark.accuracy
def test_phase_program_time_aligned(profile_program, gpu_env):
    """The ground truth: the GPU time goes to the line that waited for the GPU,
    not to the Python line or the sleep that run when NVML publishes it; the
    held memory goes to the line that held it.  NVML's call cost (1.7 ms) is
    replayed."""
    run = profile_program(PHASES, env=gpu_env(call_us=1700))
    _check_phases(run)
    p = run.profile
    assert p["gpu_utilization_source"] == "device"
    assert p["gpu_device"] == "Fake H100 80GB HBM3 #0"
    assert [d["name"] for d in p["gpu_devices"]] == ["Fake H100 80GB HBM3 #0"]
    assert p["notices"] == []
    print(_gpu_figures(run, "SETTLE", "BUSY", "IDLE", "HOLD"))


@pytest.mark.accuracy
def test_shared_device_counts_only_this_process(profile_program, gpu_env):
    """Another process keeps the device 40% busy all along: counted, it would
    put 40% on every line (the idle Python line and the sleep too).  The
    process list shows it, so this process's own share is read instead."""
    run = profile_program(PHASES, env=gpu_env(other_pid=999999, other_busy=40))
    _check_phases(run)
    assert run.profile["gpu_utilization_source"] == "process"
    assert run.profile["gpu_devices"][0]["shared"] is True


def test_shared_device_without_per_process_samples_says_so(profile_program, gpu_env):
    run = profile_program(PHASES, env=gpu_env(other_pid=999999, other_busy=40, no_process_util=1))
    p = run.profile
    assert p["gpu"] is True and p["gpu_utilization_source"] == "device"
    assert len(p["notices"]) == 1 and "shared with other processes" in p["notices"][0], p["notices"]
    # The other process's 40% is then charged to the program's lines: said, not
    # hidden.  The Python phase's two lines share it by their time (the main
    # thread's line is noted for the GPU's windows at every peek: 1 ms), so
    # the phase's function is held to it, 40% of its 1 s.
    assert run.function("python_work")["n_gpu_sec"] > 0.2, _gpu_figures(run, "IDLE")


def test_several_devices(profile_program, gpu_env):
    """Work on two GPUs: each line gets its device's busy time; the devices are
    listed by name, each with its own total."""
    source = """
import ctypes, time
nv = ctypes.CDLL("libnvidia-ml.so.1")
time.sleep(0.3)
nv.fake_nvml_busy(0, 1); time.sleep(1.2); nv.fake_nvml_busy(0, 0)   # FIRST
time.sleep(0.3)
nv.fake_nvml_busy(1, 1); time.sleep(1.2); nv.fake_nvml_busy(1, 0)   # SECOND
time.sleep(0.3)
"""
    run = profile_program(source, env=gpu_env(devices=2))
    p = run.profile
    why = _gpu_figures(run, "FIRST", "SECOND")
    assert p["gpu_device"] == "Fake H100 80GB HBM3 #0, Fake H100 80GB HBM3 #1", why
    busy = [d["busy_sec"] for d in p["gpu_devices"]]
    assert busy == [pytest.approx(1.2, rel=0.1), pytest.approx(1.2, rel=0.1)], why
    assert run.line("FIRST")["n_gpu_sec"] == pytest.approx(1.2, rel=0.1), why
    assert run.line("SECOND")["n_gpu_sec"] == pytest.approx(1.2, rel=0.1), why
    assert p["gpu_time_sec"] == pytest.approx(2.4, rel=0.1), why


def test_child_process_samples_its_own_gpu(profile_program, gpu_env, tmp_path):
    """A Python child started by subprocess profiles its own GPU use, and the
    merged profile adds it up (the parent, waiting, gets none)."""
    (tmp_path / "child.py").write_text(
        "import ctypes, time\n"
        "nv = ctypes.CDLL('libnvidia-ml.so.1')\n"
        "time.sleep(0.3)\n"
        "nv.fake_nvml_busy(0, 1); time.sleep(1.5); nv.fake_nvml_busy(0, 0)   # CHILD_BUSY\n"
        "time.sleep(0.3)\n")
    source = """
import subprocess, sys
subprocess.run([sys.executable, "child.py"], check=True)   # PARENT_WAITS
"""
    run = profile_program(source, env=gpu_env())
    p = run.profile
    assert p["process_count"] == 2, p["processes"]
    assert p["gpu"] is True
    child = run.file(tmp_path / "child.py")
    n = 4
    entry = next(e for e in child["lines"] if e["lineno"] == n)
    why = f"child line: {entry} top: gpu_time_sec={p['gpu_time_sec']}"
    assert entry["n_gpu_sec"] == pytest.approx(1.5, rel=0.1), why
    assert entry["n_gpu_percent"] >= 85.0, why
    assert run.line("PARENT_WAITS")["n_gpu_percent"] <= 5.0, why


# ---------------------------------------------------------------------------
# No GPU: no columns, at most one line, never a failure.
# ---------------------------------------------------------------------------

def _assert_no_gpu_columns(profile) -> None:
    assert profile["gpu"] is False
    for f in profile["files"].values():
        for e in [*f["lines"], *f["functions"]]:
            assert not any(k in e for k in GPU_LINE_FIELDS), e
    page = html.page_data(profile)
    assert not any(k in page["fields"] for k in GPU_LINE_FIELDS)
    report = text.render(profile, width=200)
    assert "GPU" not in report.replace("GPU not profiled", ""), report


def test_the_gpu_threads_allocations_are_the_profilers(profile_program, gpu_env):
    """What the vendor library allocates on pyrometer's GPU thread (NVML's
    init: 64 MiB here) is the profiler's, never the program's: not in the
    memory of threads without Python state, nor anywhere else in the profile."""
    run = profile_program("import time\ntime.sleep(0.5)\n", env=gpu_env(init_alloc=64 << 20))
    p = run.profile
    assert p["gpu"] is True and p["memory"] is True, p["notices"]
    assert p["native_threads"]["malloc_mb"] < 8, p["native_threads"]
    assert p["allocated_mb"] < 8, p["allocated_mb"]


@pytest.mark.skipif(_real_nvml_present(), reason="NVIDIA's library is installed here")
@pytest.mark.parametrize("asked", [True, False])
def test_no_library(profile_program, asked):
    run = profile_program("import time\ntime.sleep(0.2)\n", options=["--gpu"] if asked else [])
    p = run.profile
    _assert_no_gpu_columns(p)
    assert "no NVIDIA library" in p["gpu_status"]
    if asked:  # --gpu: the one line that says why there are no GPU columns
        assert len(p["notices"]) == 1 and p["notices"][0].startswith("GPU not profiled: no NVIDIA library"), p
    else:  # the default on a machine without NVIDIA: nothing to say
        assert p["notices"] == []


@pytest.mark.skipif(_real_nvml_present(), reason="NVIDIA's library is installed here")
def test_library_loaded_by_its_path_after_a_profile(tmp_path, fake_nvml_dir):
    """Profiles made one after another in one process (pytest --pyrometer makes
    one per test) search the library path for NVML once; a copy the program
    loads by its path later (as torch loads its own) is still found."""
    import subprocess  # noqa: PLC0415
    source = f"""
import ctypes, json, time
from pyrometer import profile_this
first = profile_this(time.sleep, 0.05).profile["gpu_status"]
second = profile_this(time.sleep, 0.05).profile["gpu_status"]
nv = ctypes.CDLL({str(fake_nvml_dir / "libnvidia-ml.so.1")!r})
third = profile_this(time.sleep, 0.3).profile
print(json.dumps([first, second, third["gpu_status"], third["gpu"]]))
"""
    proc = subprocess.run([sys.executable, "-c", source], capture_output=True, text=True, timeout=60,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    first, second, third, gpu = json.loads(proc.stdout)
    assert "no NVIDIA library" in first and "no NVIDIA library" in second, (first, second)
    assert "no NVIDIA library" not in third and gpu, (third, gpu)


def test_library_whose_init_fails(profile_program, gpu_env, tmp_path, run_pyrometer):
    """NVML installed, its init failing (no driver loaded): one notice, with
    NVML's reason, even without --gpu; the program runs and exits as usual."""
    env = gpu_env(init_error=9)
    run = profile_program("import time\ntime.sleep(0.2)\n", env=env)
    p = run.profile
    _assert_no_gpu_columns(p)
    assert p["notices"] == ["GPU not profiled: NVML's initialisation (nvmlInit) failed: "
                            "Driver Not Loaded (NVML error 9)"], p["notices"]
    proc = run_pyrometer([run.program], cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("GPU not profiled") == 1, proc.stdout
    assert "│ GPU" not in proc.stdout


def test_no_device(profile_program, gpu_env):
    run = profile_program("import time\ntime.sleep(0.2)\n", env=gpu_env(devices=0))
    _assert_no_gpu_columns(run.profile)
    assert run.profile["notices"] == []
    assert run.profile["gpu_status"] == "no NVIDIA GPU found"


def test_calls_that_fail_mid_run(profile_program, gpu_env):
    """nvmlDeviceGetSamples failing from its fourth call on: sampling stops with
    one notice, the run goes on and the profile is written."""
    run = profile_program(PHASES, env=gpu_env(fail_after=3))
    p = run.profile
    assert p["gpu"] is True
    assert len(p["notices"]) == 1 and "utilisation sampling stopped after 5 failed polls" in p["notices"][0], p["notices"]
    # Memory is read by another call, which still works.
    assert run.line("HOLD")["n_gpu_avg_memory_mb"] == pytest.approx(4096.0, rel=0.10)


@pytest.mark.parametrize("option", ["--no-gpu", "--cpu-only"])
def test_gpu_off(profile_program, gpu_env, option):
    run = profile_program("import time\ntime.sleep(0.2)\n", options=[option], env=gpu_env())
    _assert_no_gpu_columns(run.profile)
    assert run.profile["gpu_status"] == "off"
    assert run.profile["notices"] == []


def test_gpu_contradicts_no_gpu(tmp_path, run_pyrometer):
    (tmp_path / "prog.py").write_text("print('should not run')\n")
    proc = run_pyrometer(["--gpu", "--no-gpu", "prog.py"], cwd=tmp_path)
    assert proc.returncode == 2 and "--gpu contradicts --no-gpu" in proc.stderr
    assert "should not run" not in proc.stdout


# ---------------------------------------------------------------------------
# The reports show the GPU columns with a GPU.
# ---------------------------------------------------------------------------

def test_reports_show_gpu_columns(profile_program, gpu_env, tmp_path, run_pyrometer):
    source = """
import ctypes, time
nv = ctypes.CDLL("libnvidia-ml.so.1")
nv.fake_nvml_memory.argtypes = [ctypes.c_int, ctypes.c_ulonglong]
nv.fake_nvml_memory(0, 512 << 20)
time.sleep(0.4)
nv.fake_nvml_busy(0, 1); time.sleep(1.0); nv.fake_nvml_busy(0, 0)   # BUSY
time.sleep(0.4)
"""
    run = profile_program(source, env=gpu_env())
    p = run.profile
    entry = run.line("BUSY")
    assert all(k in entry for k in GPU_LINE_FIELDS), entry
    assert entry["n_gpu_peak_memory_mb"] == pytest.approx(512.0), entry
    page = html.page_data(p)
    assert all(k in page["fields"] for k in GPU_LINE_FIELDS)
    report = text.render(p, width=200)
    header = next(line for line in report.splitlines() if line.startswith("Line"))
    assert "│ GPU │ GPU memory │" in header, report
    row = next(line for line in report.splitlines() if "# BUSY" in line)
    cells = [c.strip() for c in row.split("│")]
    gpu_cell = cells[header.split("│").index(" GPU ")]
    assert gpu_cell.endswith("%") and int(gpu_cell[:-1]) >= 85, report
    assert "512M" in cells, report
    assert "GPU: Fake H100 80GB HBM3 #0 · busy 1.0" in report, report
    # The web page from the CLI (the script is checked in test_html.py).
    out = tmp_path / "page.html"
    proc = run_pyrometer(["--html", "--outfile", out, run.program], cwd=tmp_path, env=gpu_env())
    assert proc.returncode == 0, proc.stderr
    assert "n_gpu_percent" in out.read_text()


def test_a_program_that_never_used_the_gpu_gets_no_gpu_columns(profile_program, gpu_env):
    """On a machine with a GPU (measured by default), a program that never
    touched it: the run's GPU line says the device was measured and idle, and
    no line gets columns of zeros (they pushed the source out of an 800 px
    page).  The kernel tier's columns follow the same rule."""
    source = "import time\ntotal = sum(range(3_000_000))                      # WORK\ntime.sleep(0.3)\n"
    for options in ([], ["--gpu-kernels"]):
        run = profile_program(source, options=options, env=gpu_env())
        p = run.profile
        assert p["gpu"] is True and p["gpu_time_sec"] == 0.0 and p["gpu_peak_memory_mb"] == 0.0, p
        assert model.gpu_columns(p) == (False, False)
        report = text.render(p, width=200)
        header = next(line for line in report.splitlines() if line.startswith("Line"))
        assert "GPU" not in header, report
        assert "GPU: Fake H100 80GB HBM3 #0 · busy 0.0" in report, report
        page = html.page_data(p)
        assert not any(f.startswith("n_gpu") for f in page["fields"]), page["fields"]
    # Memory held, or a line's share: the columns are back (the kernel tier's
    # with them where a real CUPTI put the tier on).
    kernels = p["gpu_kernel_tier"] == "on"
    p["gpu_peak_memory_mb"] = 300.0
    assert model.gpu_columns(p) == (True, kernels)
    p["gpu_peak_memory_mb"] = 0.0
    run.line("WORK")["n_gpu_percent"] = 5.0
    assert model.gpu_columns(p) == (True, kernels)


# ---------------------------------------------------------------------------
# The schema.
# ---------------------------------------------------------------------------

def _minimal_gpu_profile() -> dict:
    from synthetic import make_profile  # tests/synthetic.py
    p = make_profile(1, 3, memory=False)
    p.update(gpu=True, gpu_device="X", gpu_utilization_source="device", gpu_time_sec=1.0)
    for f in p["files"].values():
        for e in f["lines"]:
            e.update(n_gpu_percent=10.0, n_gpu_sec=0.1, n_gpu_avg_memory_mb=1.0, n_gpu_peak_memory_mb=2.0)
    return p


def test_check_validates_gpu_fields():
    sys.path.insert(0, os.path.dirname(__file__))
    try:
        model.check(_minimal_gpu_profile())
        bad = _minimal_gpu_profile()
        next(iter(bad["files"].values()))["lines"][0]["n_gpu_percent"] = 150.0
        with pytest.raises(model.ProfileError, match="n_gpu_percent"):
            model.check(bad)
        bad = _minimal_gpu_profile()
        bad["gpu_utilization_source"] = "guessed"
        with pytest.raises(model.ProfileError, match="gpu_utilization_source"):
            model.check(bad)
        bad = _minimal_gpu_profile()
        next(iter(bad["files"].values()))["lines"][0]["n_gpu_sec"] = -1.0
        with pytest.raises(model.ProfileError, match="n_gpu_sec"):
            model.check(bad)
    finally:
        sys.path.remove(os.path.dirname(__file__))


def test_fork_while_sampling_the_gpu(profile_program, gpu_env):
    """A fork while the GPU thread polls: the child runs and is profiled without
    the GPU (NVML's state is not usable after a fork), nothing hangs, the
    parent's GPU figures are whole, and the fork is silent: the GPU thread is
    ended before each fork and started again after it (on 3.12+ a thread alive
    at a fork is a DeprecationWarning, here an error)."""
    source = """
import ctypes, os, time
nv = ctypes.CDLL("libnvidia-ml.so.1")
time.sleep(0.3)
nv.fake_nvml_busy(0, 1)
for _ in range(5):
    pid = os.fork()
    if pid == 0:
        time.sleep(0.05)
        os._exit(0)
    os.waitpid(pid, 0)                                  # FORKS
time.sleep(1.0)                                         # BUSY
nv.fake_nvml_busy(0, 0)
time.sleep(0.4)
"""
    run = profile_program(source, env=gpu_env(call_us=1700), timeout=60,
                          python_args=["-W", "error::DeprecationWarning"])
    assert run.proc.stderr == "", run.proc.stderr
    p = run.profile
    assert p["process_count"] == 6, p["processes"]
    assert p["gpu"] is True
    why = _gpu_figures(run, "FORKS", "BUSY")
    assert run.line("FORKS")["n_gpu_sec"] + run.line("BUSY")["n_gpu_sec"] == pytest.approx(
        p["gpu_time_sec"], rel=0.1), why
    assert p["gpu_time_sec"] >= 0.95 * 1.0, why  # busy 1 s after the forks, and while they ran
