"""An experiment file's tables as the user wrote them (its TOML, ``tomlfile.read_toml``),
read before its model (``ab.experiment.ExperimentFile``, ``ab.revisions.SourceTable``)
checks them: the arms' tables, their declared ``changes``, ``allow_differences``,
``[evidence] log_patterns`` (checked first, in their own one-line errors) and
``[source]``. The user's TOML, not abgate's records (``tests/tools/key_reads.py`` names
this module apart)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def arms_table(data: Any) -> Any:
    """The ``[arms]`` table (None when the file has none, or is not a table)."""
    return data.get("arms") if isinstance(data, Mapping) else None


def declared_changes(arms: Mapping[str, Any]) -> dict[str, Any]:
    """Each arm's ``changes`` as written, for the arms that declare them."""
    return {n: t["changes"] for n, t in arms.items()
            if isinstance(t, Mapping) and "changes" in t}


def allow_differences(data: Mapping[str, Any]) -> Any:
    """``allow_differences`` as written (None when absent)."""
    return data.get("allow_differences")


def log_patterns(data: Mapping[str, Any]) -> Any:
    """``[evidence] log_patterns`` as written (None when absent)."""
    evidence = data.get("evidence")
    return evidence.get("log_patterns") if isinstance(evidence, Mapping) else None


def source_table(data: Mapping[str, Any]) -> Any:
    """``[source]`` as written (None when absent)."""
    return data.get("source")
