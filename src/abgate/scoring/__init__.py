"""Scoring: exact answer extraction and output-health metrics, as pure functions."""

from __future__ import annotations

from abgate.scoring.extract import Extraction, extract_integer, reference_answer
from abgate.scoring.health import (
    Outlier,
    aggregate_health,
    clustered_accuracy,
    find_outliers,
    sample_health,
    seq_rep_n,
)

__all__ = [
    "Extraction",
    "Outlier",
    "aggregate_health",
    "clustered_accuracy",
    "extract_integer",
    "find_outliers",
    "reference_answer",
    "sample_health",
    "seq_rep_n",
]
