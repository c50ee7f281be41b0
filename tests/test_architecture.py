"""ARCHITECTURE.md's layer table is the package: every module is in it, and imports go down.

The table lists each layer's modules as backticked names; a package is written ``pkg/`` followed
by its modules in parentheses. A module may import from its own layer and the layers below it
(later rows), never from a layer above, whether the import is at the top of the file or inside a
function. Sizes: no module over 700 lines and at most five functions over 80 lines, each with a
comment saying why (issue 27).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "hawkes_cli"
_PACKAGE_CELL = re.compile(r"`(\w+)/`\s*\(([^)]*)\)")
MAX_MODULE_LINES = 700
MAX_FUNCTION_LINES = 80
MAX_LONG_FUNCTIONS = 5
#: A long function must carry this comment (with its reason) in its first lines.
LONG_FUNCTION_MARK = "# long:"


def layer_table() -> list[tuple[str, set[str]]]:
    """``(layer, module names)`` from the top layer down (dotted names below the package)."""
    text = (REPO / "ARCHITECTURE.md").read_text()
    start = text.index("| layer |")
    rows = [line for line in text[start:].splitlines()[2:] if line.startswith("|")]
    layers = []
    for line in rows:
        name, cell = (c.strip() for c in line.strip("|").split("|")[:2])
        found: set[str] = set()
        for match in _PACKAGE_CELL.finditer(cell):
            found.add(match.group(1))
            found.update(f"{match.group(1)}.{sub}" for sub in re.findall(r"`(\w+)`", match[2]))
        found.update(re.findall(r"`(\w+)`", _PACKAGE_CELL.sub("", cell)))
        layers.append((name, found))
    return layers


def package_modules() -> dict[str, Path]:
    """Dotted module name (below ``hawkes_cli``) -> file; a package is its ``__init__``."""
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts and parts != ["__main__"]:
            out[".".join(parts)] = path
    return out


def _rank(layers: list[tuple[str, set[str]]]) -> dict[str, tuple[int, str]]:
    """Module -> (height, layer name); the top layer is highest."""
    return {m: (len(layers) - i, name) for i, (name, mods) in enumerate(layers) for m in mods}


def _layer_of(module: str, rank: dict[str, tuple[int, str]]) -> tuple[int, str] | None:
    while module:
        if module in rank:
            return rank[module]
        module = module.rpartition(".")[0]
    return None


def _imported(module: str, path: Path) -> list[tuple[str, int]]:
    """The package modules ``module`` imports (dotted, below the package), with line numbers."""
    here = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            base = here[: len(here) - node.level + 1]
        elif (node.module or "").split(".")[0] == "hawkes_cli":
            base = []
        else:
            continue
        name = node.module or ""
        if not node.level:
            name = name.removeprefix("hawkes_cli").lstrip(".")
        if name:
            out.append((".".join([*base, name]), node.lineno))
        else:
            out.extend((".".join([*base, a.name]), node.lineno) for a in node.names)
    return out


def test_every_module_is_in_the_layer_table():
    listed = set().union(*(mods for _, mods in layer_table()))
    missing = sorted(set(package_modules()) - listed)
    assert missing == [], f"add these modules to ARCHITECTURE.md's layer table: {missing}"
    stale = sorted(m for m in listed if m not in package_modules())
    assert stale == [], f"ARCHITECTURE.md lists modules that do not exist: {stale}"


def test_imports_never_go_up_a_layer():
    rank = _rank(layer_table())
    upward = []
    for module, path in sorted(package_modules().items()):
        mine = _layer_of(module, rank)
        for target, line in _imported(module, path):
            theirs = _layer_of(target, rank)
            if mine and theirs and theirs[0] > mine[0]:
                upward.append(
                    f"{path.relative_to(REPO)}:{line} ({mine[1]}) -> {target} ({theirs[1]})"
                )
    assert upward == []


def test_the_checker_sees_an_upward_import(tmp_path):
    """The walk is not vacuous: it reads relative and absolute imports, at any depth."""
    rank = _rank(layer_table())
    fake = tmp_path / "vocab.py"
    fake.write_text(
        "def f():\n    from .runner import run_chain\n    from hawkes_cli.cli import x\n"
    )
    found = _imported("vocab", fake)
    assert found == [("runner", 2), ("cli", 3)]
    assert all(_layer_of(t, rank)[0] > _layer_of("vocab", rank)[0] for t, _ in found)
    inner = _imported("config.load", package_modules()["config.load"])
    assert any(t.startswith("config.") for t, _ in inner)  # relative imports inside a package


def _long_functions() -> list[tuple[str, int, bool]]:
    out = []
    for path in PACKAGE.rglob("*.py"):
        lines = path.read_text().splitlines()
        for node in ast.walk(ast.parse("\n".join(lines))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    head = "\n".join(lines[node.lineno - 1 : node.lineno + 15])
                    where = f"{path.relative_to(REPO)}:{node.lineno} {node.name} ({length} lines)"
                    out.append((where, length, LONG_FUNCTION_MARK in head))
    return out


@pytest.mark.parametrize("limit", [MAX_MODULE_LINES])
def test_modules_and_functions_stay_small(limit):
    big = sorted(
        f"{p.relative_to(REPO)} ({n} lines)"
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > limit
    )
    assert big == []
    long = _long_functions()
    assert [w for w, _, marked in long if not marked] == []
    assert len(long) <= MAX_LONG_FUNCTIONS, long
