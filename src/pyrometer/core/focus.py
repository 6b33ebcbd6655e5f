"""@profile: the functions a program marks to narrow its report to them.

While pyrometer runs a program, `profile` is a builtin (install_builtin, from
the launcher and in every profiled child process) and `from pyrometer import
profile` gives the same decorator; without pyrometer the import gives a
decorator that does nothing.  Decorating never changes the program: the
decorator returns what it was given, the very object, and only notes the site
of the code it decorates: (file name, qualified name, first line), the key the
measuring core gives every function (csrc/profile/sites.h), and the last line
of its source.  The notes go into the raw aggregates (collect_into) and the
profile model keeps only those functions' lines (model.build).

Nothing here may import the measuring core: a program run without pyrometer
imports this module through `from pyrometer import profile`.
"""

from __future__ import annotations

import sys
import types

TYPE_CHECKING = False  # not typing's: importing typing costs every run 5-9 ms
if TYPE_CHECKING:
    from typing import Any

# site -> last line of its source: (co_filename, qualified name, co_firstlineno)
# as the core keys functions (3.10 code objects carry no qualified name: the
# core uses co_name there, and so does site()).  A plain dict: assignment and
# list(items()) are atomic under the GIL, so threads may decorate while the
# sampler's periodic payload reads it.  Kept across the core's reset(): a child
# made by fork has its parent's decorated functions, which run in it too.
_sites: dict[tuple[str, str, int], int] = {}
_active = False

# A chain of __wrapped__ longer than this is a cycle or a mistake: stop there.
_UNWRAP_MAX = 100


class Profile:
    """`profile`: marks a function (or the methods of a class) for the report,
    while pyrometer profiles the program, and returns it itself, unchanged.
    Also as @profile() and with other profilers' options (memory_profiler's
    @profile(precision=4)), which are ignored: called without a function, it
    returns itself, the decorator.

    A program written for kernprof (line_profiler) uses the same builtin as an
    object: add_function, add_module, runcall and wrap_function mark as the
    decorator does; enable_by_count, disable_by_count, enable, disable and
    `with profile:` are accepted and change nothing (pyrometer measures the
    whole run; the marks narrow the report); print_stats and dump_stats write
    nothing (pyrometer's report is written when the run ends)."""

    __slots__ = ()

    def __call__(self, obj: Any = None, /, **options: Any) -> Any:
        if obj is None:
            return self
        _note(obj)
        return obj

    def __repr__(self) -> str:
        return "<pyrometer.profile>"

    # line_profiler's LineProfiler, as kernprof makes it the builtin `profile`.
    def add_function(self, func: Any) -> None:
        _note(func)

    def add_module(self, module: types.ModuleType) -> int:
        """Marks the functions and classes the module defines; how many."""
        name = getattr(module, "__name__", None)
        found = [v for v in list(vars(module).values())
                 if isinstance(v, (types.FunctionType, type)) and getattr(v, "__module__", None) == name]
        for value in found:
            _note(value)
        return len(found)

    def wrap_function(self, func: Any) -> Any:
        _note(func)
        return func

    def runcall(self, func: Any, /, *args: Any, **kwargs: Any) -> Any:
        _note(func)
        return func(*args, **kwargs)

    def runctx(self, cmd: Any, globals: dict[str, Any] | None, locals: Any) -> Profile:
        exec(cmd, globals, locals)
        return self

    def run(self, cmd: Any) -> Profile:
        import __main__
        return self.runctx(cmd, __main__.__dict__, __main__.__dict__)

    def enable_by_count(self, *args: Any, **kwargs: Any) -> None:
        pass

    disable_by_count = enable = disable = print_stats = dump_stats = enable_by_count

    def __enter__(self) -> Profile:
        return self

    def __exit__(self, *exc: Any) -> bool:
        return False  # an exception goes on


def _note(obj: Any) -> None:
    if _active:
        try:
            _mark(obj, 0)
        except Exception:
            pass  # marking is a note for the report: it must never break the program


profile = Profile()


def _mark(obj: Any, depth: int) -> None:
    if depth > 2:  # a class's method's wrapper's function: deep enough
        return
    if isinstance(obj, (staticmethod, classmethod, types.MethodType)):
        # Either order of @profile and @staticmethod/@classmethod, and bound methods.
        _mark(obj.__func__, depth)
    elif isinstance(obj, property):
        for f in (obj.fget, obj.fset, obj.fdel):
            if f is not None:
                _mark(f, depth + 1)
    elif isinstance(obj, type):
        for member in list(vars(obj).values()):
            if isinstance(member, (types.FunctionType, staticmethod, classmethod, property)):
                _mark(member, depth + 1)
    else:
        code = _innermost_code(obj)
        if code is not None:
            key = site(code)
            if key not in _sites:  # a function decorated each time it is made: measured once
                _sites[key] = _last_line(code)


def _innermost_code(obj: Any) -> types.CodeType | None:
    """The code of the function the user wrote: under a functools.wraps wrapper
    (@profile above @lru_cache or a decorator of the program's own), the
    wrapped function, whose lines are the ones the user marked."""
    code = None
    for _ in range(_UNWRAP_MAX):
        c = getattr(obj, "__code__", None)
        if isinstance(c, types.CodeType):
            code = c
        inner = getattr(obj, "__wrapped__", None)
        if inner is None or inner is obj:
            break
        obj = inner
    return code


def site(code: types.CodeType) -> tuple[str, str, int]:
    """A code object's site, as the measuring core keys it."""
    return (code.co_filename, getattr(code, "co_qualname", code.co_name), code.co_firstlineno)


def _last_line(code: types.CodeType) -> int:
    """The last source line of a function, nested code included: the end of
    its last instruction's source span (3.11+: a closing bracket on a line of
    its own is the function's), else the last line with an instruction."""
    last = code.co_firstlineno
    stack = [code]
    while stack:
        c = stack.pop()
        if sys.version_info >= (3, 11):
            for _, end, _, _ in c.co_positions():
                if end is not None and end > last:
                    last = end
        else:
            for _, _, line in c.co_lines():
                if line is not None and line > last:
                    last = line
        stack.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
    return last


def activate() -> None:
    """From now on, @profile notes what it decorates (this process is profiled)."""
    global _active
    _active = True


def install_builtin() -> None:
    """`profile` as a builtin, for the profiled program: a program's own global
    `profile` (cProfile's, line_profiler's, `profile = 3`) hides it as any
    global hides a builtin, so such a program keeps its own."""
    import builtins
    activate()
    builtins.profile = profile


def collect_into(raw: dict[str, Any]) -> dict[str, Any]:
    """The raw aggregates with the decorated functions:
    [[filename, qualname, first line, last line], ...]."""
    raw["profiled_functions"] = [[f, q, first, last] for (f, q, first), last in list(_sites.items())]
    return raw
