"""A tiny out-of-tree engine distribution, built on disk: a module and a real
``*.dist-info`` whose ``entry_points.txt`` registers engines in group ``abgate.engines``
(tests/fast/test_engine_plugins.py, tests/test_adapter_contract.py)."""

from __future__ import annotations

from pathlib import Path

PLUGIN = '''
import dataclasses

from abgate.engines.base import EngineInfo
from abgate.engines.fake import FakeEngine


class MyEngine(FakeEngine):
    """An out-of-tree engine: the fake model under another name."""

    name = "myengine"

    def describe(self) -> EngineInfo:
        return dataclasses.replace(super().describe(), name=self.name)


class NotAnEngine:
    name = "notengine"
'''


def make_dist(root: Path, dist: str, entries: dict[str, str]) -> Path:
    """A minimal installed distribution ``dist`` 0.1 under ``root``: its module
    ``{dist}_pkg`` and a dist-info with ``entries`` in group abgate.engines."""
    pkg = root / f"{dist}_pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(PLUGIN)
    info = root / f"{dist}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    lines = "".join(f"{k} = {v}\n" for k, v in entries.items())
    (info / "entry_points.txt").write_text(f"[abgate.engines]\n{lines}")
    return root
