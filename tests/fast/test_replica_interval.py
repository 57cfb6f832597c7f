"""The replica as a cluster in the speed interval (issue 33, item 2 and acceptance (d)):
replicas that agree leave the speed interval about as the items give it; one replica
whose B/A differs (a slower host, declared) widens it to cover both, and the decision
interval with it. Quality stays paired by item."""

from __future__ import annotations

from typing import Any

import numpy as np

from abgate.compare import compare_samples
from abgate.compare.replicas import replica_bootstrap
from tests.support.compare import make_arm

METRIC = "steady_decode_tps"


def _speedup(arm: list[dict[str, Any]], factor: dict[int, float]) -> list[dict[str, Any]]:
    for i, s in enumerate(arm):
        s["timing"][METRIC] *= factor.get(i % 2, 1.0)
    return arm


def _width(ci: Any) -> float:
    return float(ci[1] - ci[0])


def _fleet(slow_factor: float) -> Any:
    a = make_arm(40, tps=100.0, noise=0.05, rng_seed=1)
    b = _speedup(make_arm(40, tps=120.0, noise=0.05, rng_seed=2), {1: slow_factor})
    replicas = {s["item_id"]: str(i % 2) for i, s in enumerate(a)}
    plain = compare_samples(a, b, n_boot=400).speed[METRIC]
    fleet = compare_samples(a, b, n_boot=400, replicas=replicas).speed[METRIC]
    return plain, fleet


def test_alike_replicas_give_about_the_item_interval() -> None:
    plain, fleet = _fleet(1.0)
    assert fleet.log_ratio.n_replicas == 2 and plain.log_ratio.ci_replicas is None
    assert _width(fleet.log_ratio.ci) < 1.5 * _width(plain.log_ratio.ci)


def test_a_slower_replica_widens_the_clustered_interval() -> None:
    plain, fleet = _fleet(1.0 / 1.2)  # B's gain gone on replica 1 (its host differs)
    lr = fleet.log_ratio
    assert _width(lr.ci_replicas) > 2 * _width(plain.log_ratio.ci)
    assert _width(lr.ci) >= _width(lr.ci_replicas) > 0
    low, high = lr.ci_replicas
    assert low < 0.02 and high > np.log(1.2) - 0.02  # it covers both replicas' B/A
    assert fleet.ratio.ci == (np.exp(lr.ci[0]), np.exp(lr.ci[1]))


def test_quality_stays_paired_by_item() -> None:
    a = make_arm(40, accuracy=0.5)
    b = make_arm(40, accuracy=0.6)
    replicas = {s["item_id"]: str(i % 2) for i, s in enumerate(a)}
    assert (compare_samples(a, b, n_boot=100, replicas=replicas).quality ==
            compare_samples(a, b, n_boot=100).quality)


def test_one_replica_gives_no_replica_interval() -> None:
    result = replica_bootstrap(np.array([0.1, 0.2, 0.3]), ["0", "0", "0"], seed=0,
                               n_boot=50, confidence=0.95)
    assert result.n_items == 1 and np.isnan(result.low)
