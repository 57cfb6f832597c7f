"""Health probes of two arms side by side (pure): which probe regressed.

Each arm's ``probes.json`` is ``{"probes": [{"name", "passed", "reason"}, ...]}``.
:func:`compare_probes` pairs them by name. A probe that passes in the baseline and
fails in the candidate is a **regression** (a failing gate, ``probe_<name>``); one
that passes in both is a passing gate; one that fails in both is reported and decides
nothing (the model cannot do it, whatever the switch).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from abgate.records.comparison import ProbeRow, Probes

__all__ = ["REGRESSION", "ProbeEntry", "compare_probes", "probe_entries", "probe_results"]

REGRESSION, BOTH_PASS, BOTH_FAIL, FIXED = "regression", "passes in both", "fails in both", "fixed"
ONLY_BASE, ONLY_CAND = "baseline only", "candidate only"


class ProbeEntry(BaseModel):
    """One entry of ``probes.json``'s ``probes`` list (``bench.probes.ProbeResult``):
    what the comparison reads of it (the other fields are kept, unread)."""

    model_config = ConfigDict(frozen=True, extra="allow")

    name: str = Field(strict=True)
    passed: bool = Field(strict=True)
    reason: Any = None


class _ProbesList(BaseModel):
    """The part of a ``probes.json`` document the comparison reads."""

    model_config = ConfigDict(extra="ignore")

    probes: list[Any] = Field(strict=True)


def probe_entries(doc: Any) -> list[ProbeEntry] | str:
    """The entries of a ``probes.json`` document as :class:`ProbeEntry`, or what is
    wrong with it (one line)."""
    try:
        probes = _ProbesList.model_validate(doc).probes
    except ValidationError:
        return "no 'probes' list"
    try:
        return [ProbeEntry.model_validate(entry) for entry in probes]
    except ValidationError:
        return "a probe entry lacks a string 'name' or a boolean 'passed'"


def probe_results(doc: Any) -> dict[str, tuple[bool, str]] | str:
    """``{name: (passed, reason)}`` from a ``probes.json`` document, or what is wrong."""
    entries = probe_entries(doc)
    if isinstance(entries, str):
        return entries
    out: dict[str, tuple[bool, str]] = {}
    for entry in entries:
        out.setdefault(entry.name, (entry.passed, str(entry.reason or "")))
    return out


def _status(base: tuple[bool, str] | None, cand: tuple[bool, str] | None) -> str:
    if base is None:
        return ONLY_CAND
    if cand is None:
        return ONLY_BASE
    if base[0]:
        return BOTH_PASS if cand[0] else REGRESSION
    return FIXED if cand[0] else BOTH_FAIL


def compare_probes(base: Any, cand: Any, *, base_missing: str | None = None,
                   cand_missing: str | None = None) -> Probes:
    """The probes section of a comparison. ``base``/``cand`` are ``probes.json``
    documents, or None with the reason in ``*_missing``."""
    parsed = []
    for arm, doc, missing in (("baseline", base, base_missing), ("candidate", cand,
                                                                   cand_missing)):
        found = probe_results(doc) if doc is not None else (missing or "no probes.json")
        if isinstance(found, str):
            return Probes(measured=False, reason=f"{arm}: {found}")
        parsed.append(found)
    base_res, cand_res = parsed
    rows = []
    for name in sorted(set(base_res) | set(cand_res)):
        b, c = base_res.get(name), cand_res.get(name)
        rows.append(ProbeRow(name=name, baseline=None if b is None else b[0],
                             candidate=None if c is None else c[0],
                             baseline_reason=None if b is None else b[1],
                             candidate_reason=None if c is None else c[1],
                             status=_status(b, c)))
    return Probes(measured=True, rows=tuple(rows),
                  n_regressions=sum(1 for r in rows if r.status == REGRESSION))
