"""Today's local schedules behind the :class:`~abgate.ab.schedule.ScheduleStrategy` seam:
interleaved (every arm resident), blocks (one arm at a time) and sequential (interleaved,
with a look after every ``look_every`` items, and the last, that stops once every
candidate's verdict is decided; each look is recorded in ``ab.json``'s ``sequential``
section). :func:`schedule_for` picks one."""

from __future__ import annotations

import logging
import time
from contextlib import ExitStack
from dataclasses import dataclass

from abgate.ab import evidence, phases, schedule
from abgate.ab.analyze import arm_samples, sequential_for
from abgate.ab.schedule import ArmSessions, ScheduleStrategy
from abgate.ab.state import Key, RunState
from abgate.records import documents as docs
from abgate.runner.session import EngineSession

log = logging.getLogger("abgate.ab")


@dataclass(frozen=True)
class LocalSessions:
    """Arms loaded in this process (``ab.phases.load_arm``)."""

    state: RunState

    def open(self, arm: str, stack: ExitStack, warm: bool = True) -> EngineSession:
        return phases.load_arm(self.state, arm, stack, warm)


def after_interleaved(state: RunState, sessions: dict[str, EngineSession]) -> None:
    """What follows the samples with every arm resident: bench cases, evidence."""
    phases.host_load_snapshot(state, "interleaved end")
    if not phases.bench_done(state):
        phases.bench_cases(state, sessions)
    phases.gather_evidence(state, sessions)


def resident(state: RunState, provider: ArmSessions, stack: ExitStack
             ) -> dict[str, EngineSession]:
    sessions = {arm: provider.open(arm, stack) for arm in state.arms}
    phases.host_load_snapshot(state, "interleaved start")
    state.save()
    return sessions


class Interleaved:
    name = "interleave"

    def run(self, state: RunState, sessions: ArmSessions) -> None:
        with ExitStack() as stack:
            loaded = resident(state, sessions, stack)
            for arm, (item, seed) in schedule.interleaved(state.keys(), state.arms):
                phases.run_one(state, arm, loaded[arm], item, seed)
            after_interleaved(state, loaded)


class Blocks:
    name = "blocks"

    def run(self, state: RunState, sessions: ArmSessions) -> None:
        exp = state.exp
        n = exp.schedule.block_size * len(
            state.checked.prepared[exp.baseline].config.seeds)
        for arm, chunk in schedule.blocks(state.keys(), state.arms, n):
            if all(state.is_done(arm, i, s) for i, s in chunk):
                continue
            with ExitStack() as stack:
                session = sessions.open(arm, stack)
                phases.host_load_snapshot(state, f"{arm} block start")
                for item, seed in chunk:
                    phases.run_one(state, arm, session, item, seed)
                phases.host_load_snapshot(state, f"{arm} block end")
            state.save()
        if exp.bench.input_len and not phases.bench_done(state):
            for arm in exp.arms:  # each arm loaded once more, one after the other
                with ExitStack() as stack:
                    phases.bench_cases(state, {arm: sessions.open(arm, stack)})
        evidence_blocks(state, sessions)


def evidence_blocks(state: RunState, sessions: ArmSessions) -> None:
    """Blocks mode: the baseline loaded beside one candidate at a time."""
    exp = state.exp
    if not (exp.evidence.agreement or exp.evidence.probes):
        return
    with ExitStack() as stack:
        base = sessions.open(exp.baseline, stack, warm=False)
        for arm in exp.candidates:
            with ExitStack() as inner:
                phases.gather_evidence(state, {exp.baseline: base,
                                               arm: sessions.open(arm, inner, warm=False)})


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


def schedule_for(state: RunState) -> ScheduleStrategy:
    """The local schedule the experiment's mode and stopping rule ask for."""
    if state.checked.mode != "interleave":
        return Blocks()
    return SequentialLooks() if state.exp.schedule.sequential else Interleaved()
