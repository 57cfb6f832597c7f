"""``summary.json``: computed from the samples alone, so it can always be rebuilt."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from abgate.metrics import distribution
from abgate.records.documents import SCHEMA_VERSIONS, Summary
from abgate.records.sections import Distribution, QualitySummary
from abgate.scoring.health import aggregate_health

SPEED_FIELDS = ("steady_decode_tps", "tpot_ms", "ttft_s", "prefill_tps", "e2e_s", "output_tps")
__all__ = ["SPEED_FIELDS", "Summary", "health_rows", "summarize"]


def health_rows(samples: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"item_id": s["item_id"], "seed": s["seed"], **s["health"]} for s in samples]


def summarize(samples: Sequence[dict[str, Any]], status: str | None = None) -> Summary:
    """The summary of ``samples`` (sample lines as read), with ``status`` when given."""
    measured = [s for s in samples if not s.get("warmup")]
    quality = aggregate_health(health_rows(measured))
    speed = {f: distribution([s["timing"][f] for s in measured]) for f in SPEED_FIELDS}
    extra = {"status": status} if status is not None else {}
    return Summary(schema_version=SCHEMA_VERSIONS["summary"], n=len(measured),
                   n_warmup=len(samples) - len(measured),
                   quality=QualitySummary.model_validate(quality),
                   speed={k: Distribution.model_validate(v) for k, v in speed.items()},
                   **extra)
