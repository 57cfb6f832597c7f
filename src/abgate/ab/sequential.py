"""The sequential (anytime-valid) A/B schedule: interleaved, with a look after every
``look_every`` items (and the last) that stops once every candidate's verdict is
decided; each look is recorded in ``ab.json``'s ``sequential`` section."""

from __future__ import annotations

import logging
import time
from contextlib import ExitStack

from abgate.ab import evidence, phases, schedule
from abgate.ab.analyze import arm_samples, sequential_for
from abgate.ab.schedule import ArmSessions
from abgate.ab.state import Key, RunState
from abgate.ab.strategies import after_interleaved, resident
from abgate.records import documents as docs
from abgate.runner.session import EngineSession

log = logging.getLogger("abgate.ab")


def capped(keys: list[Key], cap: int | None) -> list[Key]:
    """The keys a sequential A/B may run: those of its first ``cap`` items."""
    items = list(dict.fromkeys(item.id for item, _ in keys))
    allowed = set(items[:cap] if cap is not None else items)
    return [(item, seed) for item, seed in keys if item.id in allowed]


class SequentialLooks:
    name = "sequential"

    def run(self, state: RunState, sessions: ArmSessions) -> None:
        with ExitStack() as stack:
            loaded = resident(state, sessions, stack)
            run_sequential(state, loaded)
            after_interleaved(state, loaded)


def run_sequential(state: RunState, sessions: dict[str, EngineSession]) -> None:
    """Interleaved, with a look after every ``look_every`` items (and the last)."""
    exp, doc = state.exp, state.doc
    keys = capped(state.keys(), exp.schedule.max_items)
    looks = doc.sequential.looks if doc.sequential else []
    doc.sequential = docs.AbSequential(look_every=exp.schedule.look_every,
                                       max_items=len({item.id for item, _ in keys}),
                                       looks=looks, stopped_at=None)
    order = schedule.interleaved(keys, state.arms)
    n_items = 0
    for i, (arm, (item, seed)) in enumerate(order):
        phases.run_one(state, arm, sessions[arm], item, seed)
        if i + 1 < len(order) and order[i + 1][1][0].id == item.id:
            continue  # the item is complete when the next entry is another item's
        n_items += 1
        last = i + 1 == len(order)
        if (n_items % exp.schedule.look_every == 0 or last) and look(
                state, sessions, n_items):
            return


def look(state: RunState, sessions: dict[str, EngineSession], n_items: int) -> bool:
    """Score what is new (distribution gates need it), evaluate every gate of every
    candidate, record the look; True when every candidate's verdict is decided."""
    exp, out, doc = state.exp, state.out, state.doc
    ev, base = exp.evidence, exp.baseline
    if ev.agreement:
        evidence.agreement_pass(out, doc, base, sessions,
                                evidence.prompt_from(sessions[base]), ev.agreement_tokens)
    samples = {arm: arm_samples(out, arm) for arm in exp.arms}
    decisions = {arm: sequential_for(out, doc, arm, base, state.policy, samples)
                 for arm in exp.candidates}
    seq = doc.sequential
    assert seq is not None
    seq.looks = [lk for lk in seq.looks if lk.n_items != n_items]
    # On resume the records may hold items past this look: the section's stop counts
    # only if it is at or before this look (it uses the first n_items items only).
    stops = {a: d.stopped_at is not None and d.stopped_at <= n_items
             for a, d in decisions.items()}
    seq.looks.append(docs.SequentialLook(n_items=n_items, at=time.time(), decisions={
        a: d.decision if stops[a] else "INCONCLUSIVE" for a, d in decisions.items()}))
    done = all(stops.values())
    if done:
        seq.stopped_at = n_items
        log.info("sequential: every verdict decided after %d items: %s", n_items,
                 seq.looks[-1].decisions)
    state.save()
    return done
