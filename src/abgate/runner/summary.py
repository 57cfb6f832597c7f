"""``summary.json``: computed from the samples alone, so it can always be rebuilt."""

from __future__ import annotations

from collections.abc import Sequence

from abgate.compare.pairing import SampleLike
from abgate.metrics import distribution
from abgate.records.samples import Sample
from abgate.records.sections import Distribution
from abgate.records.side_documents import Summary
from abgate.scoring.health import aggregate_health

SPEED_FIELDS = ("steady_decode_tps", "tpot_ms", "ttft_s", "prefill_tps", "e2e_s", "output_tps")
__all__ = ["SPEED_FIELDS", "Summary", "summarize"]


def summarize(samples: Sequence[SampleLike], status: str | None = None) -> Summary:
    """The summary of ``samples`` (the models, or sample lines as read), with ``status``
    when given."""
    typed = [Sample.of(s) for s in samples]
    measured = [s for s in typed if not s.warmup]
    quality = aggregate_health(measured)
    speed = {f: distribution([s.timing.figure(f) for s in measured]) for f in SPEED_FIELDS}
    extra = {"status": status} if status is not None else {}
    return Summary.new(n=len(measured),
                       n_warmup=len(typed) - len(measured),
                       quality=quality,
                       speed={k: Distribution.model_validate(v) for k, v in speed.items()},
                       **extra)
