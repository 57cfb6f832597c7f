"""Paired A/B statistics, acceptance policies and verdicts (pure functions).

``compare_samples`` turns two arms' ``samples.jsonl`` records into a typed
:class:`Comparison` (paired quality, speed, diagnostic and MDE statistics);
``load_policy`` reads an acceptance policy (the shipped default when no path is
given); ``decide`` applies it and returns a :class:`Verdict` (ACCEPT / REJECT /
INCONCLUSIVE, with every gate's evidence). The result models are in
:mod:`abgate.records.comparison`; JSON only at the edges (``to_json``). See
``docs/statistics.md``.
"""

from abgate.compare.paired import compare_samples
from abgate.compare.policy import (
    DiagnosticsPolicy,
    LosslessPolicy,
    Policy,
    QualityPolicy,
    SpeedPolicy,
    load_policy,
)
from abgate.compare.verdict import decide
from abgate.records.comparison import Comparison, Verdict
from abgate.records.result import Gate

__all__ = [
    "Comparison",
    "DiagnosticsPolicy",
    "Gate",
    "LosslessPolicy",
    "Policy",
    "QualityPolicy",
    "SpeedPolicy",
    "Verdict",
    "compare_samples",
    "decide",
    "load_policy",
]
