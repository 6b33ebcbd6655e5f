#!/usr/bin/env python3
"""The sanitizer job: pyrometer built with AddressSanitizer and
UndefinedBehaviorSanitizer (the extension and the preloaded memory library),
then the ground-truth programs and the stress test run under it; any sanitizer
report fails the job.

    python3 tests/sanitized.py [--keep] [-- PYTEST ARGS]

Run with an interpreter that has pytest and numpy (CI: the 3.12 venv that
tests/pythons.py made); meson-python comes from that interpreter if it has it,
else pip fetches it (build isolation).  Everything goes under build/sanitized/.

Choices, and why:
- The build: `-Db_sanitize=address,undefined` with `-fno-sanitize-recover=all`
  (undefined behaviour aborts, as ASan's errors do) and `-Db_lundef=false`
  (an extension module cannot link the sanitizer runtimes into python).
- The order in LD_PRELOAD: the memory library *before* ASan's runtime.  ASan
  interposes malloc & co. itself; first in the list, its malloc is the one every
  call binds to and the library's hooks never see one (nothing of the memory
  side would run).  Second, the program's calls reach the hooks and the hooks'
  dlsym(RTLD_NEXT) reaches ASan's allocator and interceptors, which check every
  block.  ASan then has to be told not to insist on coming first
  (verify_asan_link_order=0), and the hooks' entry points that ASan's own
  start-up reaches are left uninstrumented (EARLY in csrc/memhooks/hooks.c).
  The pyrometer command puts the library first itself (preload.py); this
  script preloads ASan's runtime for every process (python does not link it).
- detect_leaks=0: CPython does not free everything at exit, by design.
- Reports go to files (log_path) as well as failing the process, so a report in
  a process whose exit status a test expects to be non-zero, or whose stderr it
  swallows, still fails the job.
- The ground-truth extension is built with the same sanitizers (CC).
- First a self-check: a scratch copy of the tree with a one-byte heap overflow
  injected into the Python allocator wrapper (csrc/memory/pyalloc.c) must be
  reported, or the job fails: a job that cannot fail proves nothing.
- Known blind spot: the profiler's own tables and arenas come from mmap
  (csrc/common/arena.c), which ASan does not watch.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BUILD = REPO / "build" / "sanitized"
# The ground-truth programs and the stress test; the CPU accuracy tests measure
# timing, which the sanitizers' overhead changes, so only their hardening part.
DEFAULT_TESTS = ["tests/accuracy/test_accuracy_memory.py", "tests/end_to_end/test_hardening.py", "tests/end_to_end/test_fork.py",
                 "tests/end_to_end/test_stress.py", "tests/accuracy/test_accuracy_cpu.py::test_charged_cpu_never_exceeds_process_cpu",
                 "tests/accuracy/test_accuracy_cpu.py::test_threads_get_their_own_cpu",
                 # Frames that returned between the request and the answer:
                 # codes proven alive through the caller's module.
                 "tests/accuracy/test_accuracy_cpu.py::test_native_operator_in_a_returned_function_keeps_its_line",
                 # ... through the constants of the running codes (a lambda), and
                 # through the program's module once all its frames returned.
                 "tests/accuracy/test_accuracy_cpu.py::test_native_operator_in_a_returned_lambda_or_closure_keeps_its_line",
                 "tests/accuracy/test_accuracy_cpu.py::test_native_work_that_ends_the_program_keeps_its_line",
                 # A code's file read from its frame's dictionary (cloudpickle's
                 # "<dynamic-code>"), in spawned workers.
                 "tests/end_to_end/test_children.py::test_a_function_sent_by_value_to_workers_keeps_its_lines",
                 # Where each thread was started from (origins.c), its CPU there.
                 "tests/accuracy/test_accuracy_cpu.py::test_threads_that_run_no_program_code_charge_the_line_that_started_them",
                 # Also the new bounded tests (an exec loop's code objects come
                 # and go: the weak references' callbacks under ASan).
                 "tests/end_to_end/test_bounded.py",
                 # The GPU kernel tier: its callbacks run inside the program's
                 # CUDA calls, on the program's threads (the CUPTI test double).
                 "tests/end_to_end/test_gpu_kernels.py",
                 # Loops' jumps back decoded from the bytecode; a waiting
                 # thread's CPU, an unmet t0 and a blocked main thread's CPU
                 # charged to positions read at a request.
                 "tests/accuracy/test_accuracy_cpu.py::test_a_loops_jump_back_is_the_loops_line",
                 "tests/accuracy/test_accuracy_cpu.py::test_a_thread_waiting_for_the_gil_keeps_its_cpu_where_it_ran",
                 "tests/accuracy/test_accuracy_cpu.py::test_a_recursion_that_unwinds_keeps_its_lines",
                 "tests/accuracy/test_accuracy_cpu.py::test_freeing_before_a_sleep_is_not_the_sleeps",
                 # Peeks in turn, the GIL holder's peek, held CPU placed later
                 # (thread tracks read after the snapshot's loop), a peeked kind.
                 "tests/accuracy/test_accuracy_cpu.py::test_many_threads_keep_their_cpu_where_it_ran",
                 "tests/accuracy/test_accuracy_cpu.py::test_a_worker_is_python_where_it_ran_bytecode",
                 # The kernel's word on a peeked thread (its syscall file: asleep
                 # on the GIL), a holder's CPU clock around its peek.
                 "tests/accuracy/test_accuracy_cpu.py::test_a_native_thread_beside_a_python_thread",
                 "tests/accuracy/test_accuracy_cpu.py::test_gil_contention_is_gil_wait[builtin_call]",
                 # A child's __main__ code followed from a profile function.
                 "tests/end_to_end/test_children.py::test_a_short_childs_module_level_memory_is_on_its_line",
                 # The library attached to a running interpreter (got.c), the
                 # blocks Python made before it freed after; and preloaded.
                 "tests/end_to_end/test_attach.py", "tests/end_to_end/test_preload.py", "tests/end_to_end/test_native_libraries.py",
                 # A code's lines read in one pass over its line table, beside
                 # one at a time, on every instruction of many codes.
                 "tests/end_to_end/test_lines.py"]
STRESS_SECONDS = "8"
INJECTED = (
    "csrc/memory/pyalloc.c",
    "    void *p = d->original.malloc(d->original.ctx, size);\n    t->python_depth--;\n",
    "    void *p = d->original.malloc(d->original.ctx, size);\n    t->python_depth--;\n"
    "    if (p != NULL) {\n        ((volatile char *)p)[size] = 0; /* injected: one byte past the block */\n    }\n",
)


def say(text: str) -> None:
    print(f"[sanitized] {text}", flush=True)


def asan_runtime() -> str:
    path = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    if not os.path.isabs(path) or not os.path.exists(path):
        sys.exit("[sanitized] gcc has no libasan.so (Debian: apt-get install libasan8)")
    return os.path.realpath(path)


def build(source: Path, target: Path) -> None:
    for made in ("site", "meson"):
        shutil.rmtree(target / made, ignore_errors=True)
    # The interpreter's own meson-python when it has one (and ninja); else pip
    # fetches the build requirements into an isolated environment.
    have_tools = importlib.util.find_spec("mesonpy") is not None and (
        shutil.which("ninja") is not None or importlib.util.find_spec("ninja") is not None)
    isolation = ["--no-build-isolation"] if have_tools else []
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *isolation,
           "--no-deps", "--target", str(target / "site"),
           "-Csetup-args=-Db_sanitize=address,undefined", "-Csetup-args=-Db_lundef=false",
           "-Csetup-args=-Dbuildtype=debugoptimized",
           "-Csetup-args=-Dc_args=-fno-sanitize-recover=all -fno-omit-frame-pointer",
           f"-Cbuild-dir={target / 'meson'}", str(source)]
    say("$ " + " ".join(cmd))
    if subprocess.run(cmd).returncode != 0:
        sys.exit("[sanitized] the sanitized build failed")


def sanitizer_env(site: Path, logs: Path, asan: str) -> dict[str, str]:
    shutil.rmtree(logs, ignore_errors=True)
    logs.mkdir(parents=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site), *filter(None, [env.get("PYTHONPATH")])])
    env["LD_PRELOAD"] = asan
    env["ASAN_OPTIONS"] = f"detect_leaks=0:verify_asan_link_order=0:halt_on_error=1:log_path={logs}/asan"
    env["UBSAN_OPTIONS"] = f"print_stacktrace=1:halt_on_error=1:log_path={logs}/ubsan"
    env["CC"] = "gcc -fsanitize=address,undefined -fno-sanitize-recover=all"
    env["PYROMETER_STRESS_SECONDS"] = STRESS_SECONDS
    return env


def reports(logs: Path) -> list[Path]:
    return sorted(p for p in logs.iterdir() if p.is_file())


def self_check(asan: str) -> None:
    """A build with a one-byte heap overflow must be caught."""
    scratch = BUILD / "selfcheck"
    source = scratch / "src"
    shutil.rmtree(scratch, ignore_errors=True)
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True,
                           check=True).stdout.split("\0")
    for name in filter(None, files):
        if (REPO / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    path, old, new = INJECTED
    text = (source / path).read_text()
    if text.count(old) != 1:
        sys.exit(f"[sanitized] the self-check's injection point in {path} has changed: update INJECTED")
    (source / path).write_text(text.replace(old, new))
    build(source, scratch)
    logs = scratch / "logs"
    env = sanitizer_env(scratch / "site", logs, asan)
    program = scratch / "overflow.py"
    # Blocks over pymalloc's 512 bytes through PyObject_Malloc, where the bug is
    # injected: a repeated bytes object (bytes(n) would come from calloc, and
    # the check would then rest on the profiler's own allocations reaching it).
    program.write_text('data = [b"x" * (1000 + i % 7) for i in range(1000)]\nprint(len(data))\n')
    proc = subprocess.run([sys.executable, "-m", "pyrometer", "--json", "--outfile", str(scratch / "p.json"),
                           str(program)], env=env, capture_output=True, text=True, timeout=120)
    found = "".join(p.read_text(errors="replace") for p in reports(logs))
    if proc.returncode == 0 or "heap-buffer-overflow" not in found:
        sys.exit(f"[sanitized] self-check FAILED: the injected overflow was not reported "
                 f"(exit {proc.returncode}; reports: {found[:2000] or 'none'}; stderr: {proc.stderr[-2000:]})")
    say("self-check: the injected one-byte heap overflow was reported")


def main(argv: list[str]) -> int:
    pytest_args = argv[argv.index("--") + 1:] if "--" in argv else DEFAULT_TESTS
    started = time.monotonic()
    asan = asan_runtime()
    self_check(asan)
    build(REPO, BUILD)
    logs = BUILD / "logs"
    env = sanitizer_env(BUILD / "site", logs, asan)
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *pytest_args]
    say("$ " + " ".join(cmd))
    proc = subprocess.run(cmd, cwd=REPO, env=env)
    found = reports(logs)
    for report in found:
        say(f"--- {report.name} ---")
        print(report.read_text(errors="replace")[-20000:], flush=True)
    say(f"{len(found)} sanitizer report(s); pytest exit status {proc.returncode}; "
        f"{time.monotonic() - started:.0f} s")
    return 1 if found or proc.returncode != 0 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
