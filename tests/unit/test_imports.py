"""The import arrows of docs/code-map.md are the code's: derived from the source, compared both ways.

A unit is a top-level module of ``nmtk/`` or one of its folders; ``decode/search`` (the searches over
ids) is a unit of its own, so the cut between tensor searches and text-level translators is checked
too. Every import counts, at module level or inside a function (a lazy import is still a dependency),
so the page cannot drift from the code.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "nmtk"
ARROW = re.compile(r"^(\S+)\s+──►\s+(.+)$")


def modules() -> dict[str, Path]:
    """``nmtk.decode.search.beam`` → its file, ``nmtk.decode`` → its ``__init__.py``."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The nmtk modules ``module`` imports (a name imported from a package counts as the package,
    unless it is a module of it)."""
    out = set()
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[: len(package) - node.level + 1]) if node.level else ""
            source = ".".join(p for p in (base, node.module or "") if p)
            targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in known else source for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target.startswith("nmtk") and target != module:
                out.add(target)
    return out


SUB_UNITS = ("decode.search",)


def unit(module: str) -> str:
    parts = module.split(".")[1:]
    for sub in SUB_UNITS:
        if ".".join(parts[:2]) == sub:
            return sub
    return parts[0] if parts else "nmtk"


def real_arrows() -> dict[str, set[str]]:
    known = modules()
    arrows: dict[str, set[str]] = defaultdict(set)
    for module, path in known.items():
        for target in imported(module, path, known):
            if unit(target) not in (unit(module), "nmtk"):  # `from nmtk import __version__`: no arrow
                arrows[unit(module)].add(unit(target))
    return arrows


def listed_arrows() -> tuple[dict[str, set[str]], set[str]]:
    """The arrows of the code map's import block, and the units any unit may import (``any ──► …``)."""
    page = (ROOT / "docs" / "code-map.md").read_text()
    block = page.split("## Which way imports go", 1)[1].split("```", 2)[1]
    arrows: dict[str, set[str]] = {}
    for line in block.splitlines():
        if match := ARROW.match(line.strip()):
            arrows[match[1]] = {name.strip() for name in match[2].split(",") if name.strip()}
    return arrows, arrows.pop("any", set())


def test_every_import_arrow_is_listed_and_every_listed_arrow_exists() -> None:
    listed, anywhere = listed_arrows()
    real = real_arrows()
    unlisted = sorted(f"{a} ──► {b}" for a, targets in real.items() for b in targets - anywhere - listed.get(a, set()))
    stale = sorted(f"{a} ──► {b}" for a, targets in listed.items() for b in targets - real.get(a, set()))
    assert not unlisted, f"imports docs/code-map.md does not allow: {unlisted}"
    assert not stale, f"arrows docs/code-map.md lists that the code no longer has: {stale}"


def test_no_module_imports_itself_through_others() -> None:
    """No cycle among modules (Tarjan's strongly connected components)."""
    known = modules()
    edges = {m: imported(m, p, known) for m, p in known.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = stack[stack.index(v):]
            del stack[stack.index(v):]
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(known):
        if module not in index:
            visit(module)
    assert not cycles, f"import cycles: {cycles}"
