"""Reference outputs a later build must reproduce token for token.

``record`` stores, for fixed greedy cases (fixed-length prompts and health probes),
the complete output token IDs and their SHA-256, the prompt SHA, the speed figures,
the engine's top-k candidates along the output (where the engine can give them) and
the provenance. ``check`` re-runs the same cases on the current build and reports an
exact match or the first diverging position with both tokens, speed against the
recorded per-repeat figures within a tolerance, noise-aware (``compare/speed_check.py``:
a slowdown that the runs' own spread cannot resolve is "inconclusive", not a failure),
and probe health.
"""

from abgate.baseline.core import check_baseline, record_baseline
from abgate.baseline.report import CheckReport

__all__ = ["CheckReport", "check_baseline", "record_baseline"]
