"""Starts and stops the C measuring core with the options of a run."""

from __future__ import annotations

import functools
import os
import site
import sys
import sysconfig
import time

from .. import _core
from . import focus
from ..installed import PACKAGE_DIR
from ..settings import Options



def _with_sep(path: str) -> str:
    return path.rstrip(os.sep) + os.sep


def own_prefixes() -> list[str]:
    """pyrometer's own files, never reported (a new list each call: _own_prefixes)."""
    return list(_own_prefixes())


@functools.lru_cache(maxsize=1)
def _own_prefixes() -> tuple[str, ...]:
    """Worked out once per process, like _installation_directories: each call
    makes some 10 stat calls (realpath, isfile), once per test under pytest
    --pyrometer.  pyrometer's own files, never reported: its package, and runpy's module
    where it is a file (3.10; 3.11 and later freeze it, "<frozen runpy>", a
    pseudo-file the core never reports).  `python -m pyrometer` runs through
    runpy, below every frame of the run: with --profile-all, a sample that met
    only pyrometer's frames above it (as the run starts or ends) was charged to
    runpy's line on 3.10 (tests/end_to_end/test_cli.py, test_own_files_never_reported)."""
    import runpy  # imported already by the launcher and by `python -m`
    own = {_with_sep(PACKAGE_DIR), _with_sep(os.path.realpath(PACKAGE_DIR))}
    path = getattr(runpy, "__file__", None)
    if path and os.path.isfile(path):
        own.update({os.path.abspath(path), os.path.realpath(path)})
    # The `pyrometer` console script this process was started by: it sits in
    # venv/bin beside the console script of a program it runs (gunicorn).
    argv = getattr(sys, "orig_argv", [])
    if len(argv) > 1 and os.path.basename(argv[1]) == "pyrometer" and os.path.isfile(argv[1]):
        own.update({os.path.abspath(argv[1]), os.path.realpath(argv[1])})
    return tuple(sorted(own))


@functools.lru_cache(maxsize=1)
def _installation_directories() -> list[str]:
    """Where the standard library and installed packages live: not the program.
    Worked out once per process: a process that starts the core many times (a
    profile per test under pytest --pyrometer) would spend a millisecond each."""
    dirs = set()
    paths = sysconfig.get_paths()  # each call expands the whole scheme again
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        path = paths.get(key)
        if path:
            dirs.add(path)
    try:
        dirs.update(site.getsitepackages())
    except AttributeError:  # some virtualenvs ship a site.py without it
        pass
    user = site.getusersitepackages() if hasattr(site, "getusersitepackages") else None
    if user:
        dirs.add(user)
    out = set()
    for d in dirs:
        out.add(_with_sep(os.path.abspath(d)))
        out.add(_with_sep(os.path.realpath(d)))
    return sorted(out)


def reported_directories(program_directory: str) -> list[str]:
    """See _reported_directories; the working directory read at each call."""
    try:
        here = os.getcwd()
    except OSError:  # the working directory was removed
        here = None
    return list(_reported_directories(program_directory, here))


@functools.lru_cache(maxsize=8)
def _reported_directories(program_directory: str, here: str | None) -> tuple[str, ...]:
    """The code a user calls theirs, reported by default: the files under the
    program's directory and under the working directory pyrometer started in
    (a server started through a console script, `pyrometer gunicorn app:app`,
    has its program in venv/bin and its application where the user stands),
    never the standard library or installed packages (_installation_directories,
    which win).  The root as working directory would be everything: left out."""
    dirs = {program_directory}
    if here is not None and os.path.dirname(here) != here:
        dirs.add(here)
    return tuple(sorted({_with_sep(p) for d in dirs for p in (os.path.abspath(d), os.path.realpath(d))}))


def gpu_mode(gpu: bool | None, kernels: bool = False) -> int:
    """The core's gpu setting: 0 off (--no-gpu, --cpu-only), 1 when a GPU is
    found (the default), 2 asked for (--gpu: its absence is then a notice);
    plus 4 for the kernel tier (--gpu-kernels)."""
    if gpu is False:
        return 0
    return (2 if gpu else 1) | (4 if kernels else 0)


# Where CUPTI lies in pip's CUDA packages, under a directory of sys.path: CUDA
# 13's wheels put every library in nvidia/cu13/lib, 12's (and 11's) CUPTI in
# nvidia/cuda_cupti/lib.  And in the CUDA toolkit, under its root.
PIP_CUPTI_DIRS = (os.path.join("nvidia", "cu13", "lib"), os.path.join("nvidia", "cuda_cupti", "lib"))
_TOOLKIT_CUPTI_DIR = os.path.join("extras", "CUPTI", "lib64")


def kernel_library_dirs() -> str:
    """Where the kernel tier looks for CUPTI, in order, before the library
    search path's other places (':' between them): LD_LIBRARY_PATH's
    directories (the user's choice, as the search path would honour it), then
    the pip packages PyTorch's and JAX's CUDA wheels depend on, in sys.path's
    order (the copy the framework loads, but only once imported, after the
    tier has started; else a system CUDA's, on the search path, would be
    taken first and lent to the framework by its soname), the environment's
    own lib (conda's), then the toolkit's ($CUDA_HOME, $CUDA_PATH,
    /usr/local/cuda).  Each directory is tried for CUDA 13's, then 12's: an
    environment with both pip packages (JAX's cu13 beside a cu12 PyTorch) gets
    13's, and PyTorch loads its own 12 beside it."""
    places = os.environ.get("LD_LIBRARY_PATH", "").split(":")
    places += [os.path.join(entry, sub) for entry in sys.path if entry for sub in PIP_CUPTI_DIRS]
    places.append(os.path.join(sys.prefix, "lib"))  # conda's cuda-cupti package
    places += [os.path.join(root, _TOOLKIT_CUPTI_DIR)
               for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda") if root]
    return ":".join(dict.fromkeys(p for p in places if p and ":" not in p and os.path.isdir(p)))


def start_core(settings: dict, *, exclude: list[str], own: list[str], program_codes: list = (),
               control_file: str | None = None, **replaced) -> None:
    """_core.start with a run's core settings (Session.core_settings: this
    process's, or those a child process was handed), the one place its
    arguments are spelled out; replaced: settings this process decides for
    itself (a child's include, memory window, GPU, pause state)."""
    s = dict(settings, **replaced)
    _core.start(
        interval=s["interval"],
        virtual_time=s["virtual_time"],
        include=s["include"],
        exclude=exclude,
        own=own,
        only=s["only"],
        exclude_substrings=s["exclude_substrings"],
        profile_all=s["profile_all"],
        memory_window=s["memory_window"],
        leak_detector=s["leak_detector"],
        program=s.get("program", []),
        program_codes=list(program_codes),
        gpu=s["gpu"],
        start_off=int(s.get("start_off", False)),
        control_file=control_file,
        gpu_library_dirs=kernel_library_dirs() if s["gpu"] & 4 else None,
    )


class Session:
    """One profiled run: wall-clock bounds plus the C core's aggregates."""

    def __init__(self, options: Options, program_directory: str, program_prefixes: list[str] = (),
                 program_codes: list = ()):
        self.options = options
        self.program_directory = program_directory
        self.program_prefixes = list(program_prefixes)  # what the user named, wherever it lives
        self.program_codes = list(program_codes)  # -c: the code objects compiled from it
        self.start_time = 0.0
        self.elapsed = 0.0
        # Where a pause or resume from outside is recorded for the run's later
        # children (children.CONTROL_FILE in the run directory), or None.
        self.control_file: str | None = None

    def core_settings(self) -> dict:
        """What the core starts with, as plain data: also what the run's child
        processes start theirs with (children.py), less what each works out
        for itself (the installation's directories, pyrometer's own)."""
        o = self.options
        return {
            "interval": o.cpu_sampling_rate,
            "virtual_time": o.use_virtual_time,
            "include": reported_directories(self.program_directory),
            "only": o.profile_only,
            "exclude_substrings": o.profile_exclude,
            "profile_all": o.profile_all,
            "memory_window": o.allocation_sampling_window if o.memory else 0,
            "leak_detector": o.leak_detector,
            "program": self.program_prefixes,  # -m's package, a script wherever it lives: children's too
            "start_off": o.off,
            "gpu": gpu_mode(o.gpu, o.gpu_kernels),
        }

    def start(self) -> None:
        s = self.core_settings()
        _core.reset()
        self.start_time = time.time()
        self.t0 = time.perf_counter()
        start_core(s, exclude=_installation_directories(), own=own_prefixes(), program_codes=self.program_codes,
                   control_file=self.control_file)

    def stop(self, keep_thread: bool = False, asked_ns: int | None = None) -> None:
        """keep_thread: the sampler's thread is parked for the next run in
        this process instead of ended (_core.stop; the pytest plugin, which
        ends it with _core.end_kept_thread() after the last test).  asked_ns:
        when the stop was asked for (time.monotonic_ns(), the core's clock;
        None: now), where the run's last window ends: what runs after it is
        the stop's own path, not the program's."""
        asked_ns = time.monotonic_ns() if asked_ns is None else asked_ns
        if _core.running():
            _core.stop(keep_thread=keep_thread, asked=asked_ns)
            self.elapsed = time.perf_counter() - self.t0

    def elapsed_now(self) -> float:
        """The run's wall time so far, or in all once stopped."""
        return time.perf_counter() - self.t0 if _core.running() else self.elapsed

    def collect(self) -> dict:
        return focus.collect_into(_core.collect())
