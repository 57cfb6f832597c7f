"""Today's local schedules behind the :class:`~abgate.ab.schedule.ScheduleStrategy` seam:
interleaved (every arm resident), blocks (one arm at a time) and, in
``ab.sequential``, interleaved with anytime-valid looks. ``ab.run.schedule_for`` picks
one."""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass

from abgate.ab import phases, schedule
from abgate.ab.schedule import ArmSessions
from abgate.ab.state import RunState
from abgate.runner.session import EngineSession


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

