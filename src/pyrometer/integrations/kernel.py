"""A Jupyter kernel with memory profiling: ipykernel started under pyrometer's
memory library, which (like the command, preload.py) must be in the process
from its first allocation and so cannot be loaded into a running kernel.

`pyrometer kernel install` writes a kernelspec whose argv is
`python -m pyrometer.integrations.kernel -f {connection_file}`; that loads the library into
itself (preload.ensure_memhooks_loaded: attached, or else re-executed with it
in LD_PRELOAD), then runs ipykernel.  The library counts nothing until the core starts it, so the kernel
runs at full speed until a %pyrometer magic profiles a cell, with memory.

pyrometer does not depend on Jupyter: jupyter_client installs the kernelspec
where it is there; else kernel.json is written where Jupyter looks
(jupyter_core's paths, the same rules)."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile

from ..messages import error
from ..options import UsageError

DEFAULT_NAME = "pyrometer"
# What every kernelspec of ours runs: how list and uninstall tell ours from others.
LAUNCHER_MODULE = "pyrometer.integrations.kernel"
# What kernelspecs written before the package was grouped run (a module that
# is gone): still ours, so that list shows them and install or uninstall
# replaces them.
OLD_LAUNCHER_MODULES = ("pyrometer.kernel",)


# ---- where kernelspecs live --------------------------------------------------------

def _user_data_dir() -> str:
    """jupyter_core.paths.jupyter_data_dir(), for where jupyter_core is absent."""
    if os.environ.get("JUPYTER_DATA_DIR"):
        return os.environ["JUPYTER_DATA_DIR"]
    home = os.path.expanduser("~")
    if sys.platform == "darwin":
        return os.path.join(home, "Library", "Jupyter")
    if sys.platform == "win32":
        return os.path.join(os.environ.get("APPDATA", home), "jupyter")
    return os.path.join(os.environ.get("XDG_DATA_HOME") or os.path.join(home, ".local", "share"), "jupyter")


def _kernel_dirs() -> list[str]:
    """Every directory Jupyter looks for kernelspecs in, first to last."""
    try:
        from jupyter_core.paths import jupyter_path
        return jupyter_path("kernels")
    except ImportError:
        pass
    dirs = [p for p in os.environ.get("JUPYTER_PATH", "").split(os.pathsep) if p]
    dirs += [_user_data_dir(), os.path.join(sys.prefix, "share", "jupyter"),
             "/usr/local/share/jupyter", "/usr/share/jupyter"]
    return [os.path.join(d, "kernels") for d in dict.fromkeys(dirs)]


def _install_dir(user: bool, prefix: str | None) -> str:
    if prefix is not None:
        return os.path.join(prefix, "share", "jupyter", "kernels")
    if user:
        return os.path.join(_user_data_dir(), "kernels")
    return "/usr/local/share/jupyter/kernels"  # jupyter_core's SYSTEM_JUPYTER_PATH[0] on Unix


def kernelspec(display_name: str) -> dict:
    return {
        "argv": [sys.executable, "-m", LAUNCHER_MODULE, "-f", "{connection_file}"],
        "display_name": display_name,
        "language": "python",
        "metadata": {"pyrometer": True},
    }


def install(name: str = DEFAULT_NAME, display_name: str | None = None, *, user: bool = True,
            prefix: str | None = None) -> str:
    """Install the kernelspec; returns its directory.  prefix wins over user;
    neither: the system-wide directory."""
    if not re.fullmatch(r"[A-Za-z0-9._-]+", name):
        raise UsageError(f"kernel name {name!r}: only letters, digits, '.', '_' and '-' (Jupyter's rule)")
    v = sys.version_info
    spec = kernelspec(display_name or f"Python {v.major}.{v.minor} (pyrometer)")
    with tempfile.TemporaryDirectory(prefix="pyrometer-kernelspec-") as staging:
        with open(os.path.join(staging, "kernel.json"), "w", encoding="utf-8") as f:
            json.dump(spec, f, indent=1)
        try:
            from jupyter_client.kernelspec import KernelSpecManager
        except ImportError:
            destination = os.path.join(_install_dir(user, prefix), name.lower())
            if os.path.isdir(destination):
                shutil.rmtree(destination)
            os.makedirs(os.path.dirname(destination), exist_ok=True)
            shutil.copytree(staging, destination)
            return destination
        return KernelSpecManager().install_kernel_spec(staging, name, user=user and prefix is None,
                                                       prefix=prefix)


def installed() -> dict[str, str]:
    """pyrometer's kernelspecs that Jupyter sees: name -> directory (the first of
    a name, as Jupyter picks it)."""
    out: dict[str, str] = {}
    for d in _kernel_dirs():
        try:
            names = sorted(os.listdir(d))
        except OSError:
            continue
        for name in names:
            path = os.path.join(d, name)
            if name.lower() in out or not _is_ours(path):
                continue
            out[name.lower()] = path
    return out


def _is_ours(path: str) -> bool:
    try:
        with open(os.path.join(path, "kernel.json"), encoding="utf-8") as f:
            argv = json.load(f).get("argv", [])
    except (OSError, ValueError, AttributeError):
        return False
    return isinstance(argv, list) and any(m in argv for m in (LAUNCHER_MODULE, *OLD_LAUNCHER_MODULES))


# ---- the kernel itself -------------------------------------------------------------

def launch() -> None:
    """Run ipykernel with the memory library loaded: the kernelspec's argv.
    Where the library cannot be loaded the kernel still starts, and its
    profiles say that memory was not profiled."""
    from ..core.preload import MEMHOOKS_LIBRARY, ensure_memhooks_loaded, remove_private_link
    problem = ensure_memhooks_loaded()  # returns once it is in
    if problem is not None:
        print(f"pyrometer kernel: {problem}; this kernel profiles CPU only", file=sys.stderr, flush=True)
    else:
        import atexit
        atexit.register(remove_private_link)
    # The library is loaded now; in LD_PRELOAD (re-executed) it would also go to every process
    # the notebook starts (!pip, subprocess), which are not being profiled.
    preload = [p for p in os.environ.get("LD_PRELOAD", "").split(":") if p and not p.endswith(MEMHOOKS_LIBRARY)]
    if preload:
        os.environ["LD_PRELOAD"] = ":".join(preload)
    else:
        os.environ.pop("LD_PRELOAD", None)
    # As ipykernel_launcher: the current directory off sys.path while ipykernel
    # loads (a notebook's folder may hold a module named like one of its
    # imports); the shell puts it back for the notebook.
    if sys.path and sys.path[0] in ("", os.getcwd()):
        del sys.path[0]
    try:
        from ipykernel import kernelapp
    except ImportError:
        sys.exit(f"pyrometer kernel: ipykernel is not installed for {sys.executable} (pip install ipykernel)")
    kernelapp.launch_new_instance()


# ---- pyrometer kernel install | uninstall | list ------------------------------------

class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        raise UsageError(message)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="pyrometer kernel", description="Jupyter kernels with pyrometer's memory profiling: "
                "ipykernel started under pyrometer's memory library, where %pyrometer profiles memory too.")
    sub = p.add_subparsers(dest="action", metavar="{install,uninstall,list}")
    inst = sub.add_parser("install", help="install the kernelspec", description="Install a kernelspec "
                          f"that runs {sys.executable} with ipykernel under pyrometer's memory library.")
    inst.add_argument("--name", default=DEFAULT_NAME, help=f"the kernel's name (default: {DEFAULT_NAME})")
    inst.add_argument("--display-name", default=None,
                      help="the name shown in Jupyter (default: Python X.Y (pyrometer))")
    where = inst.add_mutually_exclusive_group()
    where.add_argument("--user", action="store_true", help="for this user (the default)")
    where.add_argument("--sys-prefix", action="store_true",
                       help=f"into this Python's prefix ({sys.prefix}): for a virtual environment or conda")
    where.add_argument("--prefix", metavar="PREFIX", default=None, help="into PREFIX/share/jupyter/kernels")
    where.add_argument("--system", action="store_true", help="for every user (/usr/local/share/jupyter)")
    rm = sub.add_parser("uninstall", help="remove a pyrometer kernelspec")
    rm.add_argument("--name", default=DEFAULT_NAME, help=f"the kernel's name (default: {DEFAULT_NAME})")
    sub.add_parser("list", help="list the pyrometer kernelspecs Jupyter sees")
    for parser in (inst, rm):
        parser.error = p.error  # one line, exit status 2
    return p


def command(argv: list[str]) -> int:
    """`pyrometer kernel ...`; the exit status."""
    parser = _parser()
    try:
        ns = parser.parse_args(argv)
    except UsageError as e:
        return error(str(e))
    if ns.action is None:
        parser.print_help()
        return 2
    if ns.action == "list":
        for name, path in installed().items():
            print(f"{name}\t{path}")
        return 0
    if ns.action == "uninstall":
        path = installed().get(ns.name.lower())
        if path is None:
            return error(f"no pyrometer kernel named {ns.name} (pyrometer kernel list shows them)", 1)
        try:
            shutil.rmtree(path)
        except OSError as e:
            return error(f"cannot remove {path}: {e.strerror or e}", 1)
        print(f"pyrometer: removed the kernel {ns.name} from {path}", file=sys.stderr)
        return 0
    import importlib.util
    if importlib.util.find_spec("ipykernel") is None:
        return error(f"ipykernel is not installed for {sys.executable}: pip install ipykernel, then "
                      "install the kernel again", 1)
    prefix = sys.prefix if ns.sys_prefix else ns.prefix
    try:
        path = install(ns.name, ns.display_name, user=not ns.system, prefix=prefix)
    except UsageError as e:
        return error(str(e))
    except OSError as e:
        return error(f"cannot install the kernelspec: {e.strerror or e}" +
                      (" (--user installs it for you alone)" if ns.system else ""), 1)
    print(f"pyrometer: installed the kernel {ns.name} in {path}; choose \"{_display(path)}\" in Jupyter, "
          "then %load_ext pyrometer and %%pyrometer over a cell", file=sys.stderr)
    return 0


def _display(path: str) -> str:
    try:
        with open(os.path.join(path, "kernel.json"), encoding="utf-8") as f:
            return json.load(f)["display_name"]
    except (OSError, ValueError, KeyError):
        return os.path.basename(path)


if __name__ == "__main__":
    launch()
