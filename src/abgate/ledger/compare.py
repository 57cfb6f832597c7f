"""``abgate compare A B``: any two recorded runs or arms, re-paired by key and judged
with the statistics and policy of ``abgate ab`` (:func:`abgate.ab.analyze.compare_arm`;
there is no second statistics path).

A reference is a run directory, ``ABDIR:ARM`` (one arm of an A/B), an imported file
(lm-eval ``samples_*.jsonl``, a ``vllm bench serve`` JSON), or ``@ID`` / ``@ID:ARM``
(a ledger record id prefix). Two arms of one A/B were interleaved by its schedule; the
baseline against a candidate of the same A/B gets exactly the A/B's own comparison
(agreement and probes included). Anything else was recorded at different times and
the result carries :data:`SEQUENTIAL_WARNING`'s figures.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from abgate.ab.analyze import arm_extras, arm_samples, compare_arm, random_weights
from abgate.compare import load_policy
from abgate.compare.agreement import not_measured
from abgate.compare.drift import configuration, drift
from abgate.compare.pairing import SampleLike
from abgate.compare.verdict import EXIT_CODES
from abgate.errors import AbgateError, UsageError
from abgate.ledger.imports import import_samples, read_import
from abgate.ledger.store import Ledger
from abgate.records.comparison import Comparison, Verdict
from abgate.records.documents import AbRecord, RunRecord
from abgate.records.policy import Policy
from abgate.records.result import Result
from abgate.records.samples import Sample
from abgate.runner import records as rec
from abgate.runner.documents import read_record
from abgate.runner.samples import load_samples

# The measured figures of docs/statistics.md ("Sequential A/A"), quoted, not re-derived.
SEQUENTIAL_AA = (
    "docs/statistics.md measured two sequential runs of one identical configuration "
    "(A/A) on a 2-core host whose load changed: compared directly they got a false ACCEPT "
    "(\"244% faster\"); resampling that recorded pair kept the confounding in 83% (30 "
    "items) to 100% (100 items) of trials, under every policy. Only when the arms are "
    "exchanged at random (the exact null, no load change between them) does the default "
    "policy's false-decision rate stay at 3.7-5.4% (30-100 items). abgate has no figure "
    "for how often such a change happens between your runs.")
SEQUENTIAL_WARNING = (
    "NOT INTERLEAVED: {a} and {b} were recorded separately ({when}). Any change of "
    "machine load, clocks or background work between them is credited to the "
    "difference, and no statistic computed from the samples can remove it. "
    + SEQUENTIAL_AA + " Treat a speed decision as a hint and confirm it with an "
    "interleaved `abgate ab`.")


@dataclass
class Ref:
    """One side of a comparison, resolved."""

    label: str
    path: Path
    arm: str | None = None
    ab: AbRecord | None = None
    samples: list[SampleLike] = field(default_factory=list)  # an import's: foreign lines
    started_at: float | None = None
    ended_at: float | None = None
    record: RunRecord | None = None  # run.json (a run's, an arm's): its configuration


def _split(text: str) -> tuple[str, str | None]:
    if Path(text).exists() or ":" not in text:
        return text, None
    head, arm = text.rsplit(":", 1)
    return head, arm or None


def resolve(text: str, ledger: Ledger | None = None) -> Ref:
    """A reference as typed on the command line, read from disk. A record that cannot
    be read is bad input (exit 2): compare's exit 1 means REJECT."""
    try:
        return _resolve(text, ledger)
    except UsageError:
        raise
    except AbgateError as exc:
        raise UsageError(str(exc)) from None


def _resolve(text: str, ledger: Ledger | None) -> Ref:
    head, arm = _split(text)
    if head.startswith("@"):
        if ledger is None:
            raise UsageError(f"{text}: a ledger id needs the ledger")
        record = ledger.find(head[1:])
        path = Path(record.path)
        if not path.exists():
            raise UsageError(f"{text}: recorded at {path}, which is missing (moved or "
                             "deleted; see abgate ledger check)")
    else:
        path = Path(head)
    if path.is_file():
        if arm is not None:
            raise UsageError(f"{text}: an imported file has no arms")
        entry = read_import(path)
        return Ref(text, path, samples=list(import_samples(path)), started_at=entry.started_at)
    if (path / "ab.json").exists():
        ab = read_record(path / "ab.json", "ab", model=AbRecord)
        arms = list(ab.experiment.arms)
        if arm is None or arm not in arms:
            what = "name an arm" if arm is None else f"no arm {arm!r}"
            raise UsageError(f"{text}: {what} of this A/B: "
                             + ", ".join(f"{head}:{a}" for a in arms))
        doc = read_record(path / "arms" / arm / rec.RUN_FILE, model=RunRecord)
        return Ref(text, path, arm, ab, list(arm_samples(path, arm)), doc.started_at,
                   doc.ended_at, doc)
    if (path / rec.RUN_FILE).exists():
        if arm is not None:
            raise UsageError(f"{text}: {path} is a run, not an A/B; drop ':{arm}'")
        run = read_record(path / rec.RUN_FILE)
        if not isinstance(run, RunRecord) or run.kind != "run":
            raise UsageError(f"{text}: a {run.kind} directory has no paired samples to "
                             "compare (compare runs, A/B arms or imported samples)")
        samples: list[SampleLike] = [s for s in load_samples(path / rec.SAMPLES_FILE)
                                     if not s.warmup]
        return Ref(text, path, samples=samples, started_at=run.started_at,
                   ended_at=run.ended_at, record=run)
    raise UsageError(f"{text}: not a run directory, ABDIR:ARM, lm-eval samples file or "
                     "vllm bench result")


def _prompt_mismatches(a: Sequence[SampleLike], b: Sequence[SampleLike]) -> list[str]:
    """Keys whose recorded prompt (token SHA-256, or token count) differs."""
    by_key = {s.key: s for s in map(Sample.of, b)}
    bad = []
    for s in map(Sample.of, a):
        other = by_key.get(s.key)
        if other is None:
            continue
        for x, y in ((s.prompt.sha256, other.prompt.sha256),
                     (s.prompt.tokens, other.prompt.tokens)):
            if x is not None and y is not None and x != y:
                bad.append(str(s.key))
                break
    return bad


def _when(ref: Ref) -> str:
    if ref.started_at is None:
        return "time unknown"
    return dt.datetime.fromtimestamp(ref.started_at, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def _same_ab(a: Ref, b: Ref) -> bool:
    return (a.ab is not None and b.ab is not None
            and a.path.resolve() == b.path.resolve())


def _effective(ref: Ref) -> dict[str, Any] | None:
    """The ref's effective configuration from its run.json (``engine.effective``; a v1
    record is migrated on read), None without one."""
    engine = ref.record.engine if ref.record is not None else None
    return engine.effective if engine is not None and engine.loaded else None


def configuration_drift(a: Ref, b: Ref, allow: Sequence[str] = ()) -> dict[str, Any]:
    """B's recorded configuration against A's ("exact match except ..."), or why it
    cannot be compared (an imported file records none)."""
    if a.record is None or b.record is None:
        which = a.label if a.record is None else b.label
        return {"available": False, "reason": f"{which} is an imported file: it records no "
                "engine configuration", "allow": list(allow)}
    return {"available": True, **drift(configuration(a.record), configuration(b.record),
                                       allow).to_dict()}


class LedgerComparison(Result):
    """What ``abgate compare -o`` writes: the two references, how they were recorded,
    the policy and the configuration drift, then the arm's comparison and verdict."""

    kind: str = "ledger-compare"
    a: str
    b: str
    arm_names: list[str]
    interleaved: str
    warning: str | None = None
    policy: Policy
    configuration: dict[str, Any]
    comparison: Comparison
    verdict: Verdict
    decision: str
    exit_code: int


def compare(a: Ref, b: Ref, policy_path: str | None = None, seed: int = 0,
            n_boot: int = 2000, allow_diff: Sequence[str] = ()) -> LedgerComparison:
    """B against A (A is the baseline): paired statistics, a verdict, and the
    configuration drift between them (reported; the verdict is the statistics')."""
    bad = _prompt_mismatches(a.samples, b.samples)
    if bad:
        raise UsageError(f"{a.label} and {b.label} ran different prompts under the same key "
                         f"({len(bad)}: {', '.join(bad[:3])}); they cannot be paired")
    names = (a.arm, b.arm) if a.arm and b.arm and a.arm != b.arm else ("A", "B")
    warning = None
    if _same_ab(a, b):
        assert a.ab is not None and a.arm is not None and b.arm is not None
        ab = a.ab
        exp = ab.experiment
        policy = load_policy(policy_path if policy_path is not None else exp.policy)
        interleaved = f"yes: arms of one A/B ({ab.schedule.mode} schedule)"
        if a.arm == exp.baseline:
            extras = arm_extras(a.path, ab, b.arm, a.arm, policy.speed.confidence,
                                {a.arm: a.samples, b.arm: b.samples})
        else:
            extras = {"expect": exp.expects,
                      "speed_only": random_weights(ab, a.arm, a.samples, _effective(a))
                      or random_weights(ab, b.arm, b.samples, _effective(b)),
                      "agreement": not_measured(f"agreement is scored against the A/B's "
                                                f"baseline {exp.baseline!r} only")}
    else:
        policy = load_policy(policy_path)
        interleaved = "no: recorded separately"
        warning = SEQUENTIAL_WARNING.format(a=a.label, b=b.label,
                                            when=f"A {_when(a)}, B {_when(b)}")
        flagged = [r.label for r in (a, b)
                   if any(Sample.of(s).random_weights for s in r.samples)]
        extras = {"expect": "lossy",
                  "speed_only": (f"{flagged[0]} runs random weights (its samples say so), "
                                 "speed only") if flagged else None,
                  "agreement": not_measured("separately recorded runs: no teacher-forced "
                                            "scoring of one by the other")}
    try:
        result = compare_arm(a.samples, b.samples, policy, names, extras, seed=seed,
                             n_boot=n_boot)
    except AbgateError as exc:  # unpairable input: exit 2, never 1 (which means REJECT)
        raise UsageError(f"{a.label} vs {b.label}: {exc}") from None
    decision = str(result.verdict.decision)
    return LedgerComparison(
        kind="ledger-compare", a=a.label, b=b.label, arm_names=list(names),
        interleaved=interleaved, warning=warning, policy=policy,
        configuration=configuration_drift(a, b, allow_diff), comparison=result.comparison,
        verdict=result.verdict, decision=decision, exit_code=EXIT_CODES[decision])
