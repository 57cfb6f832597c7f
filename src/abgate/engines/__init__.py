"""Engines behind one base class, registered by name (:mod:`abgate.engines.registry`).

An engine is an :class:`~abgate.engines.base.Engine` subclass; the registry maps a name
to the class, imported only when that engine is asked for (:func:`engine_class`), so
importing :mod:`abgate.engines` imports no engine library. Built-in and out-of-tree
engines register the same way: an entry point in group ``abgate.engines``
(docs/engines.md).
"""

from __future__ import annotations

from abgate.engines.registry import engine_class, engine_names, engine_sources

__all__ = ["engine_class", "engine_names", "engine_sources"]
