"""Issue 33's measurements on a real GPU, prepared to run as one command on
the lent GPU machine (no network there, about 15 minutes of device time a
session, the machine's start included: see /work/.library/device/).

Here, once (downloads and builds what the GPU machine lacks, into
build/gpu-carry, which git ignores):

    python3 bench/gpu/check.py --prepare

There, through the device tool's `run` with carry ["build/gpu-carry"] (the
machine's python3 is the one with PyTorch, JAX and CuPy):

    PYTHONUNBUFFERED=1 python3 bench/gpu/check.py --out $OUT --budget 540

A session's 15 minutes of device time hold two such calls, each paying the
machine's start (a minute or two; a machine is kept only 30 s after a call,
so the second starts bare and runs setup again): first the default parts
(setup, gpu-tests, truth, libraries: some 7 minutes as estimated here), then
`--parts setup,overhead --rounds 5` (some 5 minutes); `suite` when a third
call can be had.  Estimates, not yet measured there: each part's real time
is in results.json ("part_sec") for the next plan.

Parts, in the order given by --parts (default: setup,gpu-tests,truth,
libraries; also overhead, and suite: the whole test suite), each skipped
with a note when the budget left is less than it needs, and each going on
to the next should it fail (its error written where its results would be):

- setup: the carried wheels the machine lacks (never one it has: its
  PyTorch's numpy stays), pyrometer built there against its own meson
  (--no-build-isolation), else the wheel built here; versions, the driver,
  and where CUPTI is.
- gpu-tests: tests/end_to_end/test_gpu.py and test_gpu_kernels.py (the test
  doubles, beside a real GPU).  suite: the whole suite, spread over the cores.
- truth: torch_phases.py, jax_phases.py and cupy_phases.py, each bare, under
  pyrometer's NVML tier (--gpu), its kernel tier (--gpu --gpu-kernels) and
  Scalene (run --gpu), and torch's under torch.profiler; each profile held to
  the issue's bars (GPU time on the busy phases' lines, on idle lines, memory
  per line, kernel time per line, copies by direction).
- libraries: torch_libraries.py (cuDNN, CUDA graphs, torch.compile's Triton
  kernels, the caching allocator; again with expandable segments) bare, under
  the default profile (the memory library attached beside cuDNN's loading)
  and under the kernel tier: what each line launched.
- overhead: train_loop.py and launch_loop.py, every tool once a round in a
  shuffled order, medians of the loops' own times and of the commands' wall
  times, as ratios to bare in the same round.

Results go to --out as they come (a run cut short keeps what it had):
summary.md (the figures, bars met or not), results.json, log.txt (every
command, its status and the end of its output) and profiles.tar.gz (every
profile and truth file).  The GPU machine returns at most 8 files.
"""
from __future__ import annotations

import argparse
import ast
import glob
import importlib.metadata
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
CARRY = REPO / "build" / "gpu-carry"
WHEELS = CARRY / "wheels"
PY = "3.12"  # the GPU machine's CPython (/opt/torch/.venv), and the carried wheels'
PLATFORMS = ["manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_28_x86_64", "manylinux_2_34_x86_64"]
# What the GPU machine's image lacks (its package list, KINDS.md): Scalene and
# its pydantic, meson-python for building pyrometer there, and the test extras
# its image has not (the Jupyter ones are skipped by the suite when absent).
CARRIED = ["scalene==2.4.0", "pydantic", "pydantic-core", "annotated-types", "typing-inspection",
           "typing-extensions", "meson-python", "pyproject-metadata", "pytest-rerunfailures", "jsonschema",
           "jsonschema-specifications", "referencing", "rpds-py"]

PARTS = ("setup", "gpu-tests", "truth", "libraries", "overhead", "suite")
# Seconds each part needs at least, to be started (measured figures replace
# these guesses once it has run on a GPU).
NEEDS = {"setup": 90, "gpu-tests": 60, "truth": 150, "libraries": 90, "overhead": 120, "suite": 300}

FRAMEWORKS = {"torch": "torch_phases.py", "jax": "jax_phases.py", "cupy": "cupy_phases.py"}
TOOLS = {
    "bare": [],
    "nvml": ["pyrometer", "--gpu"],
    "kernels": ["pyrometer", "--gpu", "--gpu-kernels"],
    "scalene": ["scalene", "--gpu"],
}
# Which lines each phase's GPU time belongs to: every line of the functions
# that run the GPU phases, and the line where the main thread waits for the
# worker (the NVML tier charges a worker thread's GPU time to the main
# thread's line, JOIN; the kernel tier to the worker's, WORKER); and every line
# of the functions that leave the GPU idle.
GPU_FUNCTIONS, GPU_MARKERS = ("busy", "worker", "copies"), ("JOIN",)
IDLE_FUNCTIONS, IDLE_MARKERS = ("settle", "python_only", "hold"), ("TAIL",)
SHOWN_MARKERS = ("BUSY_LAUNCH", "BUSY_WAIT", "JOIN", "WORKER", "COPY_HTOD", "COPY_DTOH", "SETTLE", "IDLE",
                 "HOLD", "TAIL")
BARS = {"on_gpu_lines": 0.85, "on_idle_lines": 0.05, "memory": 0.10, "kernel": 0.05}


class Run:
    """The results so far, written out after every step."""

    def __init__(self, out: Path, budget: float):
        self.out = out
        self.deadline = time.monotonic() + budget
        self.results: dict = {"started": time.strftime("%Y-%m-%d %H:%M:%S"), "parts": {}}
        self.summary: list[str] = ["# Issue 33 on a GPU: bench/gpu/check.py", ""]
        self.work = out / "work"
        self.work.mkdir(parents=True, exist_ok=True)
        self.log = open(out / "log.txt", "a")

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def say(self, line: str = "") -> None:
        print(line, flush=True)
        self.summary.append(line)
        self.save()

    def save(self) -> None:
        (self.out / "summary.md").write_text("\n".join(self.summary) + "\n")
        (self.out / "results.json").write_text(json.dumps(self.results, indent=1, default=str))

    def command(self, cmd: list[str], *, timeout: float, env: dict | None = None, cwd: Path | None = None,
                name: str = "") -> tuple[int, float, str]:
        """(status, wall seconds, output); 124 when cut at timeout."""
        timeout = max(5.0, min(timeout, self.left() - 5))
        t = time.perf_counter()
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd or self.work,
                               env={**os.environ, **(env or {})})
            status, output = p.returncode, p.stdout + p.stderr
        except OSError as e:  # no such program
            status, output = 127, str(e)
        except subprocess.TimeoutExpired as e:
            status = 124
            output = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
            output += f"\n[cut at {timeout:.0f} s]"
        wall = time.perf_counter() - t
        self.log.write(f"\n$ {' '.join(map(str, cmd))}\n[{name} status {status}, {wall:.2f} s]\n{output[-4000:]}\n")
        self.log.flush()
        return status, wall, output

    def pack(self) -> None:
        with tarfile.open(self.out / "profiles.tar.gz", "w:gz") as tar:
            tar.add(self.work, arcname="work")


def python() -> str:
    return sys.executable


def tool_command(tool: str, program: Path, profile: Path, args: list[str]) -> list[str]:
    if tool == "bare":
        return [python(), str(program), *args]
    if tool == "scalene":
        return [python(), "-m", "scalene", "run", *TOOLS[tool][1:], "-o", str(profile), str(program), "---", *args]
    return [python(), "-m", "pyrometer", "--quiet", "--json", "--outfile", str(profile), *TOOLS[tool][1:],
            str(program), *args]


# ---- setup ---------------------------------------------------------------------------


def installed(project: str) -> bool:
    try:
        importlib.metadata.version(project)
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


def part_setup(run: Run) -> dict:
    r: dict = {}
    names = {}
    for wheel in sorted(WHEELS.glob("*.whl")):
        names[wheel.name.split("-")[0].replace("_", "-").lower()] = wheel
    missing = [n for n in names if not installed(n)]
    r["wheels_installed"] = [names[n].name for n in missing]
    if missing:
        # With their dependencies resolved against what is installed and the
        # carried wheels (a too old typing-extensions is upgraded from them);
        # else each alone.
        status, _, out = run.command([python(), "-m", "pip", "install", "--no-index", "--find-links", str(WHEELS),
                                      "--quiet", *missing], timeout=120, name="wheels")
        if status != 0:
            status, _, out = run.command([python(), "-m", "pip", "install", "--no-index", "--no-deps", "--quiet",
                                          *(str(names[n]) for n in missing)], timeout=120, name="wheels alone")
        r["wheels_status"] = status
    status, wall, out = run.command([python(), "-m", "pip", "install", "--no-build-isolation", "--no-deps",
                                     "--quiet", str(REPO)], timeout=240, cwd=REPO, name="build")
    r["built_there"] = status == 0
    r["build_sec"] = round(wall, 1)
    if status != 0:
        r["build_failure"] = out[-1500:]
        carried = sorted(CARRY.glob("pyrometer-*.whl"))
        if carried:
            status, _, out = run.command([python(), "-m", "pip", "install", "--no-deps", "--force-reinstall",
                                          "--quiet", str(carried[-1])], timeout=120, name="wheel")
            r["carried_wheel"] = {"file": carried[-1].name, "status": status}
    status, _, out = run.command([python(), "-m", "pyrometer", "--version"], timeout=60, name="version")
    r["pyrometer"] = out.strip()[-200:] if status == 0 else f"not installed: {out[-500:]}"
    _, _, smi = run.command(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                            timeout=30, name="smi")
    r["gpu"] = smi.strip()
    probe = ("import importlib.metadata as m, sys\n"
             "for n in ('torch','jax','jaxlib','cupy-cuda13x','scalene','numpy','nvidia-ml-py','triton'):\n"
             "    try: print(n, m.version(n))\n"
             "    except Exception: print(n, '-')\n"
             "from pyrometer.core.session import kernel_library_dirs\n"
             "print('cupti_dirs', kernel_library_dirs())\n"
             "print('python', sys.version.split()[0])\n")
    _, _, out = run.command([python(), "-c", probe], timeout=60, name="versions")
    r["versions"] = out.strip().splitlines()
    run.say(f"- GPU: {r['gpu']}; pyrometer {'built there' if r['built_there'] else 'from the carried wheel'} "
            f"({r['build_sec']} s); {' '.join(r['versions'])}")
    return r


# ---- tests ---------------------------------------------------------------------------


def pytest_counts(output: str) -> str:
    found = re.findall(r"=+ (.*?(?:passed|failed|error|skipped).*?) in [\d.]+s", output)
    return found[-1] if found else output.strip().splitlines()[-1][:200] if output.strip() else "no output"


def part_gpu_tests(run: Run) -> dict:
    cmd = [python(), "-m", "pytest", "-p", "no:benchmark", "-p", "no:cacheprovider", "-q", "-rfER",
           "tests/end_to_end/test_gpu.py", "tests/end_to_end/test_gpu_kernels.py"]
    status, wall, out = run.command(cmd, timeout=300, cwd=REPO, name="gpu-tests")
    r = {"status": status, "sec": round(wall, 1), "counts": pytest_counts(out),
         "failures": [l for l in out.splitlines() if l.startswith(("FAILED", "ERROR", "RERUN"))][:40]}
    run.say(f"- GPU tests (test_gpu.py, test_gpu_kernels.py): {r['counts']} ({r['sec']} s)")
    return r


def part_suite(run: Run) -> dict:
    workers = str(max(2, (os.cpu_count() or 4) - 2))
    r = {}
    for name, marks, n in (("spread", "not accuracy", workers), ("alone", "accuracy", "4")):
        cmd = [python(), "-m", "pytest", "-p", "no:benchmark", "-p", "no:cacheprovider", "-q", "-rfER",
               "-m", marks, "-n", n, "tests"]
        status, wall, out = run.command(cmd, timeout=run.left() - 10, cwd=REPO, name=f"suite-{name}")
        r[name] = {"status": status, "sec": round(wall, 1), "counts": pytest_counts(out),
                   "failures": [l for l in out.splitlines() if l.startswith(("FAILED", "ERROR", "RERUN"))][:60]}
        run.say(f"- whole suite, {name} part (-m '{marks}' -n {n}): {r[name]['counts']} ({r[name]['sec']} s)")
        if run.left() < 60:
            break
    return r


# ---- reading profiles ----------------------------------------------------------------


def markers(program: Path) -> dict[str, int]:
    """MARKER -> line number, for every line ending in `# MARKER`."""
    found = {}
    for i, line in enumerate(program.read_text().splitlines(), 1):
        m = re.search(r"#\s*([A-Z][A-Z_]*)\s*$", line)
        if m:
            found[m.group(1)] = i
    return found


def function_lines(program: Path, names) -> list[int]:
    """Every line number of the program's top-level functions so named."""
    tree = ast.parse(program.read_text())
    return [n for f in tree.body if isinstance(f, ast.FunctionDef) and f.name in names
            for n in range(f.lineno, f.end_lineno + 1)]


def program_lines(profile: dict, program: Path) -> dict[int, dict]:
    """lineno -> the profile's entry for the program's file (pyrometer's and
    Scalene's JSON both have files -> {path: {lines: [...]}})."""
    for name, entry in (profile.get("files") or {}).items():
        if os.path.basename(name) == program.name:
            return {int(e["lineno"]): e for e in entry.get("lines", [])}
    return {}


def field_sum(lines: dict[int, dict], numbers, field: str) -> float:
    return sum(float(lines.get(n, {}).get(field) or 0.0) for n in numbers)


def within(value, truth, bar) -> bool | None:
    if value is None or not truth:
        return None
    return abs(value - truth) <= bar * truth


def evaluate(profile: dict, program: Path, truth: dict, tool: str) -> dict:
    marks = markers(program)
    lines = program_lines(profile, program)
    gpu_lines = function_lines(program, GPU_FUNCTIONS) + [marks[m] for m in GPU_MARKERS]
    idle_lines = function_lines(program, IDLE_FUNCTIONS) + [marks[m] for m in IDLE_MARKERS]
    all_percent = sum(float(e.get("n_gpu_percent") or 0.0) for e in lines.values())
    e: dict = {"lines_in_profile": len(lines), "gpu_percent_total": round(all_percent, 2)}
    if tool != "scalene":
        e["gpu_time_sec"] = profile.get("gpu_time_sec")
        e["gpu_unattributed_sec"] = profile.get("gpu_unattributed_sec")
        e["gpu_status"] = profile.get("gpu_status")
        e["notices"] = profile.get("notices")
    # Shares of the run's GPU time.  pyrometer's n_gpu_percent is one: of the
    # whole run's, so time charged to no line, or to another file, counts
    # against the program's lines.  Scalene's (2.4, scalene_json.py) is the
    # mean GPU load read while the line ran: a line's GPU time is that load
    # times the line's time (its CPU and system percentages, the samples the
    # loads were read at), and its share is of the sum over the file's lines.
    if tool == "scalene":
        weight = {n: float(x.get("n_gpu_percent") or 0.0) / 100.0
                  * sum(float(x.get(k) or 0.0) for k in ("n_cpu_percent_python", "n_cpu_percent_c", "n_sys_percent"))
                  for n, x in lines.items()}
        total = sum(weight.values()) or 1e-9
        e["on_gpu_lines"] = round(sum(weight.get(n, 0.0) for n in set(gpu_lines)) / total, 4)
        e["on_idle_lines"] = round(sum(weight.get(n, 0.0) for n in set(idle_lines)) / total, 4)
        e["share_method"] = "Scalene: mean load x the line's time, of the file's lines"
    else:
        e["on_gpu_lines"] = round(field_sum(lines, gpu_lines, "n_gpu_percent") / 100.0, 4)
        e["on_idle_lines"] = round(field_sum(lines, idle_lines, "n_gpu_percent") / 100.0, 4)
    e["per_marker_gpu_percent"] = {m: round(field_sum(lines, [marks[m]], "n_gpu_percent"), 2)
                                   for m in SHOWN_MARKERS if m in marks}
    e["on_gpu_lines_ok"] = e["on_gpu_lines"] >= BARS["on_gpu_lines"]
    e["on_idle_lines_ok"] = e["on_idle_lines"] <= BARS["on_idle_lines"]
    hold = [marks[m] for m in ("HOLD", "HOLD_MORE") if m in marks]
    held = [float(lines[n]["n_gpu_avg_memory_mb"]) for n in hold if lines.get(n, {}).get("n_gpu_avg_memory_mb")]
    e["hold_memory_mb"] = round(statistics.mean(held), 1) if held else None
    e["hold_memory_truth_mb"] = truth.get("hold_nvml_mb")
    e["memory_ok"] = within(e["hold_memory_mb"], truth.get("hold_nvml_mb"), BARS["memory"])
    if tool == "kernels":
        e["kernel_tier"] = profile.get("gpu_kernel_tier")
        e["kernel_library"] = profile.get("gpu_kernel_library")
        busy = field_sum(lines, [marks["BUSY_LAUNCH"]], "n_gpu_kernel_sec")
        e["busy_kernel_sec"] = round(busy, 4)
        e["busy_kernel_truth_sec"] = truth.get("busy_event_sec")  # none for JAX: no event timing there
        e["kernel_ok"] = within(busy, truth.get("busy_event_sec"), BARS["kernel"])
        e["worker_kernel_sec"] = round(field_sum(lines, [marks["WORKER"]], "n_gpu_kernel_sec"), 4)
        e["kernels_elsewhere_sec"] = round(sum(float(x.get("n_gpu_kernel_sec") or 0.0) for n, x in lines.items()
                                               if n not in (marks["BUSY_LAUNCH"], marks["WORKER"])), 4)
        htod = field_sum(lines, [marks["COPY_HTOD"]], "n_gpu_copy_htod_mb")
        dtoh = field_sum(lines, [marks["COPY_DTOH"]], "n_gpu_copy_dtoh_mb")
        e["copies_mb"] = {"htod": htod, "dtoh": dtoh}
        e["copies_ok"] = htod == truth.get("copy_htod_mb") and dtoh == truth.get("copy_dtoh_mb")
        for k in ("gpu_kernel_time_sec", "gpu_kernel_unattributed_sec", "gpu_kernels", "gpu_copy_htod_mb",
                  "gpu_copy_dtoh_mb", "gpu_kernel_records_lost"):
            e[k] = profile.get(k)
    return e


def load(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


# ---- truth ---------------------------------------------------------------------------


def importable(module: str) -> bool:
    return subprocess.run([python(), "-c", f"import {module}"], capture_output=True).returncode == 0


def part_truth(run: Run, frameworks: list[str]) -> dict:
    r: dict = {}
    have_scalene = importable("scalene")
    for fw in frameworks:
        if not importable(fw):
            r[fw] = {"skipped": f"{fw} does not import"}
            run.say(f"- {fw}: not run ({fw} does not import)")
            continue
        program = HERE / FRAMEWORKS[fw]
        r[fw] = {}
        tools = [t for t in TOOLS if t != "scalene" or have_scalene]
        if fw == "torch":
            tools.append("torch-profiler")
        for tool in tools:
            if run.left() < 40:
                r[fw][tool] = {"skipped": "out of time"}
                continue
            truth_path = run.work / f"truth-{fw}-{tool}.json"
            profile_path = run.work / f"profile-{fw}-{tool}.json"
            if tool == "torch-profiler":
                cmd = [python(), str(program), str(truth_path), "--torch-profiler"]
            else:
                cmd = tool_command(tool, program, profile_path, [str(truth_path)])
            status, wall, out = run.command(cmd, timeout=120, name=f"{fw}/{tool}")
            entry: dict = {"status": status, "wall_sec": round(wall, 2)}
            truth = load(truth_path) or {}
            entry["truth"] = {k: v for k, v in truth.items() if k != "phases"}
            profile = load(profile_path) if tool not in ("bare", "torch-profiler") else None
            if status != 0:
                entry["output"] = out[-1500:]
            if profile is not None:
                entry.update(evaluate(profile, program, truth, tool))
            r[fw][tool] = entry
            run.results["parts"]["truth"] = r
            run.save()
        run.say(truth_lines(fw, r[fw]))
    return r


def truth_lines(fw: str, r: dict) -> str:
    out = [f"- {fw}:"]
    for tool, e in r.items():
        if "skipped" in e:
            out.append(f"  - {tool}: skipped ({e['skipped']})")
            continue
        parts = [f"exit {e['status']}, {e['wall_sec']} s"]
        if "on_gpu_lines" in e:
            parts.append(f"GPU time on the GPU phases' lines {e['on_gpu_lines']:.1%} (bar >= 85%), "
                         f"on idle lines {e['on_idle_lines']:.1%} (bar <= 5%)")
            parts.append(f"HOLD memory {e['hold_memory_mb']} MB against NVML's {e['hold_memory_truth_mb']}")
        if "busy_kernel_sec" in e:
            parts.append(f"tier {e['kernel_tier']}, busy line's kernels {e['busy_kernel_sec']} s against "
                         f"CUDA events' {e['busy_kernel_truth_sec']}, worker {e['worker_kernel_sec']} s, "
                         f"elsewhere {e['kernels_elsewhere_sec']} s, copies {e['copies_mb']} "
                         f"(exact: {e['copies_ok']}), run total {e.get('gpu_kernel_time_sec')} s")
        if "torch_profiler_kernel_sec" in e.get("truth", {}):
            parts.append(f"torch.profiler's device total {e['truth']['torch_profiler_kernel_sec']:.4f} s")
        out.append(f"  - {tool}: " + "; ".join(parts))
    return "\n".join(out)


# ---- libraries -----------------------------------------------------------------------


def part_libraries(run: Run) -> dict:
    r: dict = {}
    if not importable("torch"):
        run.say("- libraries: not run (torch does not import)")
        return {"skipped": "torch does not import"}
    program = HERE / "torch_libraries.py"
    marks = markers(program)
    cases = [("bare", {}, "bare"), ("default-profile", {}, "full"), ("kernels", {}, "kernels"),
             ("kernels-expandable", {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, "kernels")]
    for name, env, tool in cases:
        if run.left() < 45:
            r[name] = {"skipped": "out of time"}
            continue
        truth_path = run.work / f"truth-libraries-{name}.json"
        profile_path = run.work / f"profile-libraries-{name}.json"
        if tool == "bare":
            cmd = [python(), str(program), str(truth_path)]
        elif tool == "full":  # pyrometer's default: CPU, memory (the library attached), NVML
            cmd = [python(), "-m", "pyrometer", "--quiet", "--json", "--outfile", str(profile_path), str(program),
                   str(truth_path)]
        else:
            cmd = tool_command("kernels", program, profile_path, [str(truth_path)])
        status, wall, out = run.command(cmd, timeout=180, env=env, name=f"libraries/{name}")
        entry: dict = {"status": status, "wall_sec": round(wall, 2), "truth": load(truth_path)}
        if status != 0:
            entry["output"] = out[-1500:]
        profile = load(profile_path)
        if profile is not None:
            lines = program_lines(profile, program)
            entry["notices"] = profile.get("notices")
            entry["kernel_tier"] = profile.get("gpu_kernel_tier")
            entry["totals"] = {k: profile.get(k) for k in ("gpu_kernels", "gpu_kernel_time_sec",
                                                           "gpu_kernel_unattributed_sec", "gpu_allocations",
                                                           "gpu_kernel_records_lost", "max_footprint_mb")}
            entry["lines"] = {m: {k: v for k, v in lines.get(n, {}).items()
                                  if k.startswith("n_gpu") or k in ("n_malloc_mb", "n_cpu_percent_python")}
                              for m, n in marks.items()}
        r[name] = entry
        run.results["parts"]["libraries"] = r
        run.save()
        kinds = ""
        if entry.get("lines"):
            kinds = "; ".join(f"{m} {v.get('n_gpu_kernels', 0)} kernels {v.get('n_gpu_kernel_sec', 0):.4f} s"
                              f" alloc {v.get('n_gpu_alloc_mb', 0)} MB" for m, v in entry["lines"].items()
                              if m in ("CONV", "GRAPH_REPLAY", "TRITON", "GROW"))
        run.say(f"- libraries, {name}: exit {status}, {wall:.1f} s{'; ' + kinds if kinds else ''}")
    return r


# ---- overhead ------------------------------------------------------------------------


OVERHEAD_TOOLS = {
    "bare": None,
    "pyrometer-cpu+nvml": ["--cpu-only", "--gpu"],
    "pyrometer-cpu+kernels": ["--cpu-only", "--gpu", "--gpu-kernels"],
    "pyrometer-full": ["--gpu"],
    "pyrometer-full+kernels": ["--gpu", "--gpu-kernels"],
    "scalene": ["run", "--gpu"],
}


def part_overhead(run: Run, rounds: int) -> dict:
    if not importable("torch"):
        run.say("- overhead: not run (torch does not import)")
        return {"skipped": "torch does not import"}
    have_scalene = importable("scalene")
    programs = {"train_loop": ["300"], "launch_loop": ["50000"]}
    times: dict = {p: {t: [] for t in OVERHEAD_TOOLS} for p in programs}
    walls: dict = {p: {t: [] for t in OVERHEAD_TOOLS} for p in programs}
    rng = random.Random(33)
    for k in range(rounds):
        for prog, args in programs.items():
            order = [t for t in OVERHEAD_TOOLS if t != "scalene" or have_scalene]
            rng.shuffle(order)
            for tool in order:
                if run.left() < 30:
                    break
                program = HERE / f"{prog}.py"
                profile = run.work / f"overhead-{prog}-{tool}-{k}.json"
                if tool == "bare":
                    cmd = [python(), str(program), *args]
                elif tool == "scalene":
                    cmd = [python(), "-m", "scalene", *OVERHEAD_TOOLS[tool], "-o", str(profile), str(program),
                           "---", *args]
                else:
                    cmd = [python(), "-m", "pyrometer", "--quiet", "--json", "--outfile", str(profile),
                           *OVERHEAD_TOOLS[tool], str(program), *args]
                status, wall, out = run.command(cmd, timeout=90, name=f"overhead/{prog}/{tool}")
                profile.unlink(missing_ok=True)  # its time is the point, not its figures
                m = re.search(r"loop_sec=([\d.]+)", out)
                if status == 0 and m:
                    times[prog][tool].append((k, float(m.group(1))))
                    walls[prog][tool].append((k, wall))
    r: dict = {}
    for prog in programs:
        r[prog] = {}
        for label, series in (("loop", times[prog]), ("wall", walls[prog])):
            bare = dict(series["bare"])
            for tool, values in series.items():
                ratios = [v / bare[k] for k, v in values if k in bare and bare[k] > 0]
                r[prog].setdefault(tool, {})[label] = {
                    "median_sec": round(statistics.median([v for _, v in values]), 4) if values else None,
                    "median_ratio": round(statistics.median(ratios), 4) if ratios else None,
                    "ratios": [round(x, 4) for x in ratios]}
        shown = ", ".join(f"{t} {v['loop']['median_ratio']}x loop / {v['wall']['median_ratio']}x wall"
                          for t, v in r[prog].items() if t != "bare")
        run.say(f"- overhead, {prog} ({len(times[prog]['bare'])} rounds): {shown}")
    r["bars"] = "NVML tier <= 1.05x, kernel tier <= 1.10x (the loops' own time)"
    return r


# ---- preparing the carry, here -------------------------------------------------------


def prepare() -> int:
    """Downloads the carried wheels (CPython 3.12, manylinux x86-64, no
    dependencies: the list is the closure of what the GPU machine lacks) and
    builds pyrometer's own wheel for 3.12, the fallback should the build
    there fail."""
    WHEELS.mkdir(parents=True, exist_ok=True)
    platforms = [a for p in PLATFORMS for a in ("--platform", p)]
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
           "--python-version", PY, *platforms, "-d", str(WHEELS), *CARRIED]
    if subprocess.run(cmd).returncode != 0:
        print("downloading the carried wheels failed", file=sys.stderr)
        return 1
    versions = Path(os.path.expanduser("~/.pyenv/versions"))
    py312 = sorted(glob.glob(str(versions / f"{PY}*" / "bin" / "python3")))
    if not py312:
        print(f"no CPython {PY} here to build pyrometer's fallback wheel with", file=sys.stderr)
        return 1
    for old in CARRY.glob("pyrometer-*.whl"):
        old.unlink()
    if subprocess.run([py312[-1], "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(CARRY),
                       str(REPO)]).returncode != 0:
        print("building pyrometer's wheel failed", file=sys.stderr)
        return 1
    size = sum(f.stat().st_size for f in CARRY.rglob("*") if f.is_file())
    print(f"{CARRY}: {len(list(WHEELS.glob('*.whl')))} wheels and "
          f"{', '.join(w.name for w in CARRY.glob('pyrometer-*.whl'))}, {size / 2**20:.1f} MiB")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prepare", action="store_true", help="here: fill build/gpu-carry")
    ap.add_argument("--out", type=Path, help="where the results go (the device tool's $OUT)")
    ap.add_argument("--parts", default="setup,gpu-tests,truth,libraries")
    ap.add_argument("--frameworks", default="torch,jax,cupy")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--budget", type=float, default=540.0, help="seconds for the whole command")
    a = ap.parse_args()
    if a.prepare:
        return prepare()
    if a.out is None:
        ap.error("--out is needed (or --prepare)")
    parts = [p.strip() for p in a.parts.split(",") if p.strip()]
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        ap.error(f"unknown parts {unknown}: choose from {', '.join(PARTS)}")
    frameworks = [f.strip() for f in a.frameworks.split(",") if f.strip()]
    if any(f not in FRAMEWORKS for f in frameworks):
        ap.error(f"--frameworks: choose from {', '.join(FRAMEWORKS)}")
    if a.rounds < 1:
        ap.error("--rounds must be at least 1")
    a.out.mkdir(parents=True, exist_ok=True)
    run = Run(a.out, a.budget)
    try:
        for part in parts:
            if run.left() < NEEDS[part] and part != "setup":
                run.say(f"- {part}: not run ({run.left():.0f} s left, it needs about {NEEDS[part]} s)")
                continue
            t = time.monotonic()
            run.say(f"## {part}")
            try:
                if part == "setup":
                    result = part_setup(run)
                elif part == "gpu-tests":
                    result = part_gpu_tests(run)
                elif part == "suite":
                    result = part_suite(run)
                elif part == "truth":
                    result = part_truth(run, frameworks)
                elif part == "libraries":
                    result = part_libraries(run)
                else:
                    result = part_overhead(run, a.rounds)
            except Exception as e:  # the next part may still tell something
                import traceback
                result = {"error": traceback.format_exc()[-3000:]}
                run.say(f"- {part} failed: {type(e).__name__}: {e}")
            result["part_sec"] = round(time.monotonic() - t, 1)
            run.results["parts"][part] = result
            run.save()
    finally:
        run.save()
        run.pack()
        shutil.rmtree(run.work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
