"""Count the module crossings of following an experiment through
``abgate.ab.workflow.run_experiment`` (issue 36's second figure: "crosses modules about
half as often as today"), statically, so the figure is reproducible.

What it counts. Starting at ``run_experiment`` (depth 0), every call site in the body
of a followed function is resolved, through ``ast`` only, to a function, method or class
of ``src/abgate`` where it can be:

- a bare name: a function or class of the same module, or one the module imports (any
  ``import``/``from ... import`` in the module, function-local ones included; a
  re-export is followed to the module that defines it);
- ``module.name`` where ``module`` is an imported abgate module;
- ``Class.name`` where ``Class`` resolves to an abgate class (a classmethod, a static
  method, an explicit ``Class.method(obj)``);
- ``self.name`` / ``cls.name`` inside a method: the method of that class or of its abgate
  base classes (the first found, bases in order).

A call to a class is a call to its constructor: it lands in the class's module and
follows the class's own ``__init__`` and ``__post_init__`` where it defines them.
Calls on any other receiver (an object whose type ``ast`` cannot know: ``doc.seal()``,
``session.engine.generate()``), calls into the standard library or other packages, and
``super()`` calls are not resolved: the figure is a lower bound of the calls made.
The call that makes the exception of a ``raise`` (``raise UsageError(...)``) is not
counted: raising an error is no step of the experiment. Nested functions and lambdas
count as part of the function that defines them.

A **crossing** is a resolved call site whose callee is defined in another module than
the calling function. Each function is followed once (the first time it is reached,
breadth first), up to ``--depth`` calls away from ``run_experiment`` (a call site at the
limit is still counted; its callee is not followed). Printed beside it: the distinct
modules the crossings call into, and the functions followed and the distinct modules
they are defined in (``ab/workflow.py`` included).

    python -m tests.tools.crossings              # the figure at the default depth
    python -m tests.tools.crossings --depth 2 -v # each crossing, caller -> callee
    python -m tests.tools.crossings --src OTHER/src/abgate   # another checkout
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "abgate"
START = ("abgate.ab.workflow", "run_experiment")
DEPTH = 2
Func = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass
class Module:
    name: str
    functions: dict[str, Func] = field(default_factory=dict)
    classes: dict[str, ast.ClassDef] = field(default_factory=dict)
    imports: dict[str, str] = field(default_factory=dict)  # local name -> dotted target


@dataclass(frozen=True)
class Target:
    """A resolved callee: ``kind`` is "function" (``qual`` a name or ``Class.method``),
    "class" or "module"."""

    kind: str
    module: str
    qual: str = ""


def _module_name(src: Path, path: Path) -> str:
    parts = ["abgate", *path.relative_to(src).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(tree: ast.Module, name: str, is_package: bool) -> dict[str, str]:
    out: dict[str, str] = {}
    package = name if is_package else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                out[a.asname or a.name.split(".")[0]] = a.name if a.asname else \
                    a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            for a in node.names:
                out[a.asname or a.name] = f"{base}.{a.name}"
    return out


def index(src: Path = SRC) -> dict[str, Module]:
    """Every module of ``src`` (a ``src/abgate``): its functions, classes and imports."""
    mods: dict[str, Module] = {}
    for path in sorted(src.rglob("*.py")):
        name = _module_name(src, path)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        mod = Module(name, imports=_imports(tree, name, path.name == "__init__.py"))
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                mod.functions[node.name] = node
            elif isinstance(node, ast.ClassDef):
                mod.classes[node.name] = node
        mods[name] = mod
    return mods


class Resolver:
    def __init__(self, mods: dict[str, Module]) -> None:
        self.mods = mods

    def symbol(self, module: str, name: str, hops: int = 0) -> Target | None:
        """What ``name`` means in ``module`` (a re-export followed to its definition)."""
        mod = self.mods.get(module)
        if mod is None or hops > 20:
            return None
        if name in mod.functions:
            return Target("function", module, name)
        if name in mod.classes:
            return Target("class", module, name)
        dotted = mod.imports.get(name)
        if dotted is None or not dotted.startswith("abgate"):
            return None
        if dotted in self.mods:
            return Target("module", dotted)
        owner, _, attr = dotted.rpartition(".")
        return self.symbol(owner, attr, hops + 1)

    def method(self, cls: Target, name: str, hops: int = 0) -> Target | None:
        """``cls.name``: a method of the class or of its abgate bases."""
        node = self.mods[cls.module].classes[cls.qual]
        for item in node.body:
            if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and item.name == name:
                return Target("function", cls.module, f"{cls.qual}.{name}")
        for base in node.bases:
            found = self.expr(cls.module, base, None)
            if found is not None and found.kind == "class" and hops < 20:
                hit = self.method(found, name, hops + 1)
                if hit is not None:
                    return hit
        return None

    def expr(self, module: str, node: ast.expr, owner: str | None) -> Target | None:
        """What the expression ``node`` names, in ``module`` (``owner``: the class of the
        method it is in)."""
        if isinstance(node, ast.Name):
            if node.id in ("self", "cls") and owner is not None:
                return Target("class", module, owner)
            return self.symbol(module, node.id)
        if isinstance(node, ast.Attribute):
            base = self.expr(module, node.value, owner)
            if base is None:
                return None
            if base.kind == "module":
                dotted = f"{base.module}.{node.attr}"
                return Target("module", dotted) if dotted in self.mods else \
                    self.symbol(base.module, node.attr)
            if base.kind == "class":
                return self.method(base, node.attr)
        return None

    def function(self, target: Target) -> Func | None:
        mod = self.mods[target.module]
        cls, _, name = target.qual.rpartition(".")
        if not cls:
            return mod.functions.get(name)
        for item in mod.classes[cls].body:
            if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and item.name == name:
                return item
        return None


@dataclass
class Walk:
    crossings: list[tuple[str, str]] = field(default_factory=list)  # (caller, callee)
    visited: list[Target] = field(default_factory=list)

    @property
    def modules(self) -> set[str]:
        """The modules the followed functions are defined in."""
        return {t.module for t in self.visited}

    @property
    def entered(self) -> set[str]:
        """The modules the crossings call into."""
        return {callee.partition(":")[0] for _, callee in self.crossings}


def _callees(r: Resolver, at: Target, target: Target) -> list[Target]:
    """The functions a call to ``target`` runs that this walk follows."""
    if target.kind == "function":
        return [target]
    if target.kind == "class":
        return [m for name in ("__init__", "__post_init__")
                if (m := r.method(target, name)) is not None and m.module == target.module
                and m.qual.startswith(f"{target.qual}.")]
    return []


def _raised(fn: Func) -> set[int]:
    """The calls that make the exception of a ``raise`` (``raise UsageError(...)``)."""
    return {id(n.exc) for n in ast.walk(fn)
            if isinstance(n, ast.Raise) and isinstance(n.exc, ast.Call)}


def walk(mods: dict[str, Module], depth: int = DEPTH, start: tuple[str, str] = START) -> Walk:
    """Follow the calls from ``start`` (module, function) up to ``depth`` (module doc)."""
    r = Resolver(mods)
    first = Target("function", *start)
    out, seen = Walk(), {first}
    todo: deque[tuple[Target, int]] = deque([(first, 0)])
    while todo:
        at, d = todo.popleft()
        fn = r.function(at)
        if fn is None:
            continue
        out.visited.append(at)
        owner = at.qual.rpartition(".")[0] or None
        raised = _raised(fn)
        for node in ast.walk(fn):
            if not isinstance(node, ast.Call) or id(node) in raised:
                continue
            target = r.expr(at.module, node.func, owner)
            if target is None or target.kind == "module":
                continue
            if target.module != at.module:
                out.crossings.append((f"{at.module}.{at.qual}",
                                      f"{target.module}:{target.qual}"))
            for callee in _callees(r, at, target):
                if d < depth and callee not in seen:
                    seen.add(callee)
                    todo.append((callee, d + 1))
    return out


def main(argv: list[str] | None = None) -> int:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--depth", type=int, default=DEPTH,
                      help=f"calls away from run_experiment to follow (default {DEPTH})")
    args.add_argument("--src", type=Path, default=SRC, help="the src/abgate to follow")
    args.add_argument("-v", "--verbose", action="store_true", help="list each crossing")
    ns = args.parse_args(argv)
    found = walk(index(ns.src), ns.depth)
    print(f"run_experiment, depth {ns.depth}: {len(found.crossings)} module crossings into "
          f"{len(found.entered)} modules; {len(found.visited)} functions followed in "
          f"{len(found.modules)} modules")
    if ns.verbose:
        for caller, callee in found.crossings:
            print(f"  {caller} -> {callee}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
