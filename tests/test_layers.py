"""The measuring core's folders point one way (docs/how-it-works.md, Layout):
no folder of csrc/ includes a header of a folder that includes one of its own,
directly or through others, and the memory library is seen from the extension
through its public header only; no module of the Python package imports one
that imports it back, directly or through others, at the top or inside a
function.  These read the sources: a change that closes a cycle fails here,
not as a design nobody can follow any more."""

from __future__ import annotations

import ast
import re
from pathlib import Path

CSRC = Path(__file__).resolve().parent.parent / "csrc"
PACKAGE = Path(__file__).resolve().parent.parent / "src" / "pyrometer"
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
    assert "pyrometer.model" in edges["pyrometer.inprocess"]
    cycles = _cycles(edges)
    assert not cycles, "\n".join(
        f"cycle {group}: " + "; ".join(f"{a} -> {b}" for a in group for b in sorted(edges.get(a, ())) if b in group)
        for group in cycles)
