"""Paired A/B statistics, acceptance policies and verdicts (pure functions).

``compare_samples`` turns two arms' ``samples.jsonl`` records into paired quality,
speed, diagnostic and MDE statistics; ``load_policy`` reads an acceptance policy
(the shipped default when no path is given); ``decide`` applies it and returns a
:class:`Verdict` (ACCEPT / REJECT / INCONCLUSIVE, with every gate's evidence).
See ``docs/statistics.md``.
"""

from abgate.compare.gates import Gate
from abgate.compare.paired import compare_samples
from abgate.compare.policy import (
    DiagnosticsPolicy,
    LosslessPolicy,
    Policy,
    QualityPolicy,
    SpeedPolicy,
    load_policy,
)
from abgate.compare.verdict import Verdict, decide

__all__ = [
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
