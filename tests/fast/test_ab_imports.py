"""ab/ has no import circle (imports under TYPE_CHECKING and inside functions count)
and every module of it is at most 400 lines. At 37e458d this failed: ab.run imported
ab.sequential, which imported ab.run (the AbRunner it reached into)."""

from __future__ import annotations

import ast
from pathlib import Path

import abgate.ab

AB = Path(abgate.ab.__file__).parent


def ab_imports(path: Path) -> set[str]:
    """The ``abgate.ab.*`` modules ``path`` imports, anywhere in the file."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "abgate.ab":
                found.update(f"abgate.ab.{a.name}" for a in node.names)
            elif node.module.startswith("abgate.ab."):
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("abgate.ab."))
    return found


def graph() -> dict[str, set[str]]:
    mods = {f"abgate.ab.{p.stem}": p for p in AB.glob("*.py") if p.stem != "__init__"}
    return {m: ab_imports(p) & set(mods) - {m} for m, p in mods.items()}


def cycle(g: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        path.append(m)
        for n in sorted(g[m]):
            if state.get(n) == 1:
                return path[path.index(n):] + [n]
            if n not in state and (found := visit(n)):
                return found
        state[m] = 2
        path.pop()
        return None

    for m in sorted(g):
        if m not in state and (found := visit(m)):
            return found
    return None


def test_ab_has_no_import_circle() -> None:
    assert cycle(graph()) is None, cycle(graph())


def test_the_cycle_finder_finds_one() -> None:
    assert cycle({"a": {"b"}, "b": {"a"}}) == ["a", "b", "a"]


def test_every_ab_module_is_at_most_400_lines() -> None:
    long = {p.name: n for p in AB.glob("*.py")
            if (n := len(p.read_text().splitlines())) > 400}
    assert not long, long
