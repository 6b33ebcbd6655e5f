"""Both halves of pyrometer are built in layers (docs/how-it-works.md,
Layout).  The measuring core: no folder of csrc/ includes a header of a
folder that includes one of its own, directly or through others; each folder
includes only from its layer and those below (C_LAYERS), and no collector
another's; the memory library is seen from the extension through its public
header only.  The Python package: no module imports one that imports it back,
directly or through others, at the top or inside a function; each imports
only from its layer and those below (PACKAGE_LAYERS).  These read the sources:
a change that closes a cycle or reaches up fails here, not as a design nobody
can follow any more."""

from __future__ import annotations

import ast
import re
from pathlib import Path

CSRC = Path(__file__).resolve().parents[2] / "csrc"
PACKAGE = Path(__file__).resolve().parents[2] / "src" / "pyrometer"
# Modules of the package that are not Python sources: they import none of it.
EXTENSIONS = {"pyrometer._core"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)

# The memory library's internals the extension may read, each with its reason.
MEMHOOKS_INTERNALS_SEEN = {
    # The free fast path looks a block up in pymalloc's arenas and reads its
    # pool's size class inline (two loads), with no call into the library.
    ("memory/pyalloc.c", "memhooks/pymalloc_arenas.h"),
}


def _includes() -> list[tuple[Path, Path]]:
    """(including file, included file), both resolved, for every quoted include
    of a project header."""
    pairs = []
    for source in sorted(CSRC.rglob("*.[ch]")):
        for name in INCLUDE.findall(source.read_text()):
            target = (source.parent / name).resolve()
            if target.is_relative_to(CSRC) and target.exists():
                pairs.append((source, target))
    return pairs


def _folder(path: Path) -> str:
    return path.parent.relative_to(CSRC).as_posix()


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one folder (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return groups


def test_the_folders_include_one_way():
    edges: dict[str, set[str]] = {}
    why: dict[tuple[str, str], list[str]] = {}
    for source, target in _includes():
        a, b = _folder(source), _folder(target)
        if a != b:
            edges.setdefault(a, set()).add(b)
            why.setdefault((a, b), []).append(f"{source.relative_to(CSRC)} -> {target.relative_to(CSRC)}")
    cycles = _cycles(edges)
    assert not cycles, "\n".join(
        f"cycle {group}: " + "; ".join(line for a in group for b in group for line in why.get((a, b), []))
        for group in cycles)


# The measuring core's layers, lowest first (docs/how-it-works.md, "Layout"):
# a folder includes only from its own layer and those below it, and no
# collector includes another's headers (the sampler reaches the memory, GPU
# and asyncio sides through what module.c registers with it: sampler.h).
C_LAYERS = [
    ("floor", {"common", "memhooks"}),  # the memory library: the floor of its own process too
    ("CPython's layouts", {"cpython"}),
    ("the program's calls seen unseen", {"unseen"}),
    ("the profiler's threads around forks", {"forks"}),
    ("stores", {"profile"}),
    ("collectors", {"sampler", "memory", "gpu", "asyncio"}),
    ("run control", {"control", "ending", "periodic"}),
    ("the Python boundary", {"."}),
]
# The sampler's thread is also the run's conductor: it carries out pauses
# (control), endings and periodic reports where it takes its samples.  Those
# includes point up; splitting the conductor from the CPU collector is open.
C_CONDUCTOR_INCLUDES = {
    ("sampler/sampler.c", "control/control.h"),
    ("sampler/sampler.c", "ending/ending.h"),
    ("sampler/sampler.c", "periodic/periodic.h"),
}


def _c_layer(folder: str) -> int:
    for i, (_, folders) in enumerate(C_LAYERS):
        if folder in folders:
            return i
    raise AssertionError(f"csrc/{folder} is in no layer of C_LAYERS: say where it belongs")


def test_the_folders_are_layered():
    against, conducting = [], set()
    for source, target in _includes():
        a, b = _folder(source), _folder(target)
        pair = (source.relative_to(CSRC).as_posix(), target.relative_to(CSRC).as_posix())
        collectors = a != b and _c_layer(a) == _c_layer(b) == _c_layer("sampler")
        if _c_layer(b) > _c_layer(a) or collectors:
            if pair in C_CONDUCTOR_INCLUDES:
                conducting.add(pair)
            else:
                against.append(" -> ".join(pair))
    assert not against, "includes against the layers:\n" + "\n".join(sorted(against))
    assert conducting == C_CONDUCTOR_INCLUDES  # one taken away: take it out of the list


def test_the_cycle_finder_finds_a_cycle():
    """The check above, on a graph that has one (and one that has none)."""
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": {"c"}, "d": {"a"}}) == []


def test_the_memory_library_is_seen_through_its_public_header():
    seen = set()
    for source, target in _includes():
        inside = _folder(source) == "memhooks"
        if not inside and _folder(target) == "memhooks" and target.name != "memhooks.h":
            seen.add((source.relative_to(CSRC).as_posix(), target.relative_to(CSRC).as_posix()))
    assert seen == MEMHOOKS_INTERNALS_SEEN


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports() -> dict[str, set[str]]:
    """Module -> the package's modules it imports, wherever the import stands
    (an import inside a function is a dependency all the same; only its time
    differs).  `from . import name` is of the module pkg.name where there is
    one, else of the package itself (its __init__)."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    edges: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.ImportFrom):
                base = package.split(".")[:len(package.split(".")) - node.level + 1] if node.level else []
                source = ".".join(base + ([node.module] if node.module else []))
                targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in modules | dict.fromkeys(EXTENSIONS)
                           else source for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            for target in targets:
                if target in modules and target != name:
                    edges.setdefault(name, set()).add(target)
    return edges


def test_the_package_imports_one_way():
    edges = _imports()
    # The reader sees imports at the top and inside functions (inprocess
    # imports the model only where a profile is built).
    assert "pyrometer.options" in edges["pyrometer.cli"]
    assert "pyrometer.model" in edges["pyrometer.integrations.inprocess"]
    cycles = _cycles(edges)
    assert not cycles, "\n".join(
        f"cycle {group}: " + "; ".join(f"{a} -> {b}" for a in group for b in sorted(edges.get(a, ())) if b in group)
        for group in cycles)


# The package's layers, lowest first (docs/how-it-works.md, "Layout"): a
# module imports only from its own layer and those below it.  Each layer is a
# folder, but for the base and the command line, which are modules of the
# package's own folder.
PACKAGE_LAYERS = [
    ("base", {"pyrometer.installed", "pyrometer.settings", "pyrometer.structs", "pyrometer.private_files",
              "pyrometer.visible", "pyrometer.messages"}),
    ("core", "pyrometer.core"),
    ("model", "pyrometer.model"),
    ("render", "pyrometer.render"),
    ("options", {"pyrometer.options"}),
    ("run", "pyrometer.run"),
    ("integrations", "pyrometer.integrations"),
    ("command", {"pyrometer.cli", "pyrometer.__main__", "pyrometer"}),
]


def _layer(module: str) -> int:
    for i, (_, members) in enumerate(PACKAGE_LAYERS):
        if isinstance(members, set) and module in members:
            return i
        if isinstance(members, str) and (module == members or module.startswith(members + ".")):
            return i
    raise AssertionError(f"{module} is in no layer of PACKAGE_LAYERS: say where it belongs")


def test_the_package_is_layered():
    edges = _imports()
    modules = {_module_name(p) for p in PACKAGE.rglob("*.py")}
    upward = sorted(f"{a} ({PACKAGE_LAYERS[_layer(a)][0]}) -> {b} ({PACKAGE_LAYERS[_layer(b)][0]})"
                    for a in modules for b in edges.get(a, ()) if _layer(b) > _layer(a))
    assert not upward, "imports against the layers:\n" + "\n".join(upward)
    # Every layer holds something (a layer emptied by a move is taken out).
    assert all(any(_layer(m) == i for m in modules) for i in range(len(PACKAGE_LAYERS)))
