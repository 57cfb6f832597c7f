"""The engine registry: typed adapters made lazily by name, the package check before
load, and the engine layer's import rules (no adapter imports another, no circle)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from abgate.engines import engine_class, engine_names
from abgate.engines.fake import FakeEngine
from abgate.errors import UsageError

ENGINES = Path(__file__).resolve().parents[2] / "src" / "abgate" / "engines"
# an adapter's modules may import its own, the seam's and the shared ones, never another's
ADAPTERS = {"llamacpp", "openai", "transformers", "vllm", "fake"}


def test_names_and_close_matches() -> None:
    assert set(engine_names()) == {"llamacpp", "openai", "vllm", "transformers", "fake"}
    with pytest.raises(UsageError, match="did you mean 'llamacpp'"):
        engine_class("llamacp")
    assert engine_class("fake") is engine_class("fake") is FakeEngine
    assert engine_class("llamacpp").in_process and not engine_class("openai").in_process
    assert all(engine_class(n).name == n for n in ("llamacpp", "openai", "transformers", "fake"))


def test_lookup_imports_no_engine_library() -> None:
    code = ("import sys; from abgate.engines import engine_class; "
            "[engine_class(n) for n in ('llamacpp', 'openai', 'transformers', 'fake')]; "
            "print(sorted(m for m in ('llama_cpp', 'torch', 'transformers', 'vllm') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120).stdout
    assert out.strip() == "[]"


def test_missing_package_is_one_line_before_load() -> None:
    class Needy(FakeEngine):
        name = "needy"
        packages = (("no_such_package_abgate", "pip install it"),)

    with pytest.raises(UsageError, match="needs the package 'no_such_package_abgate'"):
        Needy.check_packages()
    with pytest.raises(UsageError, match="takes no engine options"):
        Needy.check_options({"endpoint": "x"})


def _modules() -> dict[str, Path]:
    """Every module of abgate.engines by its dotted name below it (``openai.stream``)."""
    out = {}
    for path in ENGINES.rglob("*.py"):
        parts = list(path.relative_to(ENGINES).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts) or "__init__"] = path
    return out


def _imports(path: Path, known: set[str]) -> set[str]:
    """The abgate.engines modules ``path`` imports (dotted, below abgate.engines)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        found.update(n.removeprefix("abgate.engines.") for n in names
                     if n.startswith("abgate.engines."))
    return found & known


def _owner(module: str) -> str | None:
    """The adapter a module belongs to (``openai.stream``, ``openai_stream``: openai);
    None for the seam and the shared modules."""
    head = module.split(".")[0].split("_")[0]
    return head if head in ADAPTERS else None


def test_no_adapter_imports_another_and_no_circle() -> None:
    modules = _modules()
    graph = {m: _imports(p, set(modules)) - {m} for m, p in modules.items()}
    del graph["__init__"]  # the registry's lazy factories name every adapter
    for module, deps in graph.items():
        owner = _owner(module)
        for dep in deps:
            other = _owner(dep)
            assert other is None or other == owner, f"{module} imports {dep} ({other})"

    def reach(start: str) -> set[str]:
        seen: set[str] = set()
        todo = list(graph.get(start, ()))
        while todo:
            m = todo.pop()
            if m not in seen:
                seen.add(m)
                todo.extend(graph.get(m, ()))
        return seen

    assert [m for m in graph if m in reach(m)] == []
