"""The settings of a run (Options: what the command line, a %pyrometer magic,
pytest --pyrometer or pyrometer.profiling() ask for) and the defaults of the
options a profile records, said once.  The command line (options.py parses
into Options), the profile's schema (a profile written before a field existed
is read with its default: model/schema.py) and so every report take them from
here; the page's script reads the options the profile holds, never a default of
its own."""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: importing typing costs every run 5-9 ms
if TYPE_CHECKING:
    from typing import Any

from .structs import record


OPTION_DEFAULTS = {
    "cpu_percent_threshold": 1.0,  # percent of the run's time: significant (model/rules.py)
    "malloc_threshold": 100.0,  # MB allocated: significant when memory is profiled
    "cpu_sampling_rate": 0.01,  # seconds between CPU samples, on average
    "allocation_sampling_window": 1 << 20,  # bytes between native memory samples, on average
}

EXPORT_OPTIONS = ("pprof", "speedscope", "collapsed", "firefox")  # render.EXPORTS, each an option


@record
class Options:
    outfile: str | None = None
    json: bool = False
    cli: bool = False
    html: bool = False
    web: bool = False
    profile_interval: float | None = None
    cpu_only: bool = False
    profile_all: bool = False
    profile_only: list[str] = []  # a new list for each (structs.py)
    profile_exclude: list[str] = []  # a new list for each (structs.py)
    use_virtual_time: bool = False
    cpu_percent_threshold: float = OPTION_DEFAULTS["cpu_percent_threshold"]
    cpu_sampling_rate: float = OPTION_DEFAULTS["cpu_sampling_rate"]
    reduced_profile: bool = False
    memory: bool = True
    gpu: bool | None = None  # None: when a GPU is found (not with --cpu-only)
    # The kernel tier (CUPTI): off by default until its overhead is measured on
    # a GPU (docs/how-it-works.md, "GPU").
    gpu_kernels: bool = False
    malloc_threshold: float = OPTION_DEFAULTS["malloc_threshold"]
    allocation_sampling_window: int = OPTION_DEFAULTS["allocation_sampling_window"]
    leak_detector: bool = True
    children: bool = True
    force_version: bool = False
    quiet: bool = False
    live: bool = False  # pyrometer top: the live view while the program runs (run/top.py)
    off: bool = False  # start paused (pyrometer.start() or --on --pid resumes)
    on: bool = False   # with pid: resume that program
    pid: int | None = None  # pause (--off) or resume (--on) that running program
    # -- exports of the call stacks (docs/exports.md): the file of each, or None
    pprof: str | None = None
    speedscope: str | None = None
    collapsed: str | None = None
    collapsed_metric: str = "time"
    firefox: str | None = None
    # -- end of exports
    module: str | None = None
    command: str | None = None  # -c CODE
    program: list[str] = []  # a new list for each (structs.py)

    @property
    def format(self) -> str:
        """The report's format: "json", "html" (also for --web) or "text"."""
        return "json" if self.json else "html" if (self.html or self.web) else "text"

    def exports(self) -> dict[str, str]:
        """The exports asked for: format (render.EXPORTS) -> file (checked
        when the command line was parsed: options.exports_of)."""
        return {fmt: getattr(self, fmt) for fmt in EXPORT_OPTIONS if getattr(self, fmt) is not None}

    def as_profile_options(self) -> dict[str, Any]:
        """What the profile records about how it was taken."""
        return {
            "cpu_only": self.cpu_only,
            "profile_all": self.profile_all,
            "profile_only": self.profile_only,
            "profile_exclude": self.profile_exclude,
            "use_virtual_time": self.use_virtual_time,
            "cpu_percent_threshold": self.cpu_percent_threshold,
            "cpu_sampling_rate": self.cpu_sampling_rate,
            "reduced_profile": self.reduced_profile,
            "memory": self.memory,
            "gpu": self.gpu,
            "gpu_kernels": self.gpu_kernels,
            "malloc_threshold": self.malloc_threshold,
            "allocation_sampling_window": self.allocation_sampling_window,
            "leak_detector": self.leak_detector and self.memory,
            "profile_interval": self.profile_interval,
            "children": self.children,
            "off": self.off,
        }
