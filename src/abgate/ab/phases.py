"""The phases of an A/B, each a small function over the run state (``ab.state``):
loading an arm, warmup, writing one sample (the ONE writer path every schedule, local
or remote, hands its results to), bench cases, evidence and host-load snapshots."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager

from abgate import host_load
from abgate.ab import declared, evidence, schedule
from abgate.ab.runtime_weights import weights_evidence
from abgate.ab.state import RunState
from abgate.engines.base import GenerationResult
from abgate.errors import AbgateError
from abgate.model_check import ModelChanged
from abgate.provenance import ContractViolation
from abgate.records.engine import LoadedEngine
from abgate.records.load_snapshots import AbHostLoad
from abgate.records.samples import WARMUP_PREFIX, Sample, ids_sha256, sample_key
from abgate.records.side_documents import AbBenchDocument
from abgate.runner.documents import write_record
from abgate.runner.provenance import record_after_load
from abgate.runner.session import EngineSession, loaded
from abgate.suites import Item


def check_prompt(state: RunState, arm: str, session: EngineSession) -> None:
    """Before any sample: every arm must build the same prompt tokens."""
    item = state.keys()[0][0]
    with session.env():
        sha = ids_sha256(session.engine.render_prompt(
            state.checked.prepared[arm].messages(item)))
    first = state.prompt_sha.setdefault("__first_prompt__", sha or "")
    if sha != first:
        raise AbgateError(f"prompt mismatch: arm {arm!r} renders item {item.id} to tokens "
                          f"with SHA {sha[:12] if sha else None}, another arm to "
                          f"{first[:12]}; the arms are not matched (tokenizer or template "
                          "differs)")


def check_loaded(state: RunState) -> None:
    """After a load: the candidates compared with the baseline (``ab.declared``); an
    undeclared difference stops the A/B before that arm's first sample."""
    provenance = {arm: r.doc.provenance for arm, r in state.recorders.items()}
    engines = {arm: r.doc.engine.described() for arm, r in state.recorders.items()}
    refusal = declared.loaded_differences(state.exp, state.doc, engines, provenance,
                                          state.out)
    if refusal is not None:
        state.save()
        raise declared.UndeclaredDifference(refusal)


def warmup(state: RunState, arm: str, session: EngineSession) -> None:
    rec_ = state.recorders[arm]
    for i, (item, seed) in enumerate(state.keys()[: state.exp.schedule.warmup]):
        with session.env():
            result = session.engine.generate([rec_.request(item, seed)])[0]
        rec_.record(item, seed, result, warmup=True)
        rec_.done.discard(WARMUP_PREFIX + sample_key(item.id, seed))
        rec_.done.add(f"warmup{state.session}-{i}")


def generate(state: RunState, arm: str, session: EngineSession, item: Item,
             seed: int) -> GenerationResult:
    """One measured request of ``arm``, raw (a remote replica returns this)."""
    with session.env():
        return session.engine.generate([state.recorders[arm].request(item, seed)])[0]


def write_sample(state: RunState, arm: str, item: Item, seed: int,
                 result: GenerationResult) -> Sample:
    """The one writer path of a measured sample: the prompt checked against the other
    arms', the sample appended to the arm's records, the order noted in ``ab.json``."""
    key = sample_key(item.id, seed)
    sha = ids_sha256(result.prompt_token_ids)
    if sha is not None:
        first = state.prompt_sha.setdefault(key, sha)
        if first != sha:
            raise AbgateError(f"prompt SHA mismatch for {key} in arm {arm!r}: "
                              f"{sha[:12]} vs {first[:12]}; aborting (arms not matched)")
    sample = state.recorders[arm].record(item, seed, result)
    state.doc.schedule.executed.append(f"{arm}:{key}")
    if state.progress:
        state.progress(sample)
    return sample


def run_one(state: RunState, arm: str, session: EngineSession, item: Item,
            seed: int) -> None:
    if not state.is_done(arm, item, seed):
        write_sample(state, arm, item, seed, generate(state, arm, session, item, seed))


def load_arm(state: RunState, arm: str, stack: ExitStack,
             warm: bool = True) -> EngineSession:
    """Load ``arm`` for the life of ``stack`` (closed, with cleanup recorded, when
    the stack unwinds), record its provenance, check its prompt, warm it up."""
    rec_ = state.recorders[arm]
    stack.enter_context(arm_named(arm))  # a changed model: which arm's load saw it
    session = stack.enter_context(loaded(state.checked.prepared[arm].engine,
                                         state.arm_dir(arm), rec_.doc))
    state.doc.engines[arm] = LoadedEngine.of(session.described)  # its facets: the arm's run.json
    try:
        record_after_load(state.checked.provenance, state.checked.contracts[arm], session,
                          rec_.doc)
    except ContractViolation as exc:
        raise AbgateError(f"arm {arm!r}: {exc}") from None
    finally:
        rec_.save()
    check_loaded(state)
    if state.exp.evidence.weights:  # the weights as loaded, before any request
        weights_evidence(state.weights, arm, state.exp.baseline,
                         state.checked.prepared[arm].engine, session.described,
                         session.engine.loaded_weights(), state.out)
    check_prompt(state, arm, session)
    if state.exp.evidence.agreement:
        evidence.scoring_preflight(arm, session)
        session.engine.keep_prompt_states()  # the scoring pass then restores prompts
    if warm:
        warmup(state, arm, session)
    return session


@contextmanager
def arm_named(arm: str) -> Iterator[None]:
    """A :class:`ModelChanged` from ``arm``'s load (or its close) says which arm."""
    try:
        yield
    except ModelChanged as exc:
        if exc.arm is not None:  # named by the arm whose load found it
            raise
        raise ModelChanged(f"arm {arm!r}: {exc}", arm) from None


def host_load_snapshot(state: RunState, label: str) -> None:
    """A host-load snapshot (``abgate.host_load``) into ``ab.json``."""
    found = state.doc.host_load or AbHostLoad()
    state.doc.host_load = found.model_copy(
        update={"snapshots": [*found.snapshots, host_load.snapshot(label)]})


def bench_done(state: RunState) -> bool:
    return all((state.arm_dir(arm) / "bench.json").exists() for arm in state.exp.arms)


def bench_cases(state: RunState, sessions: dict[str, EngineSession]) -> None:
    """Fixed-length speed cases, case by case with the arm order alternating
    (A B | B A ...), each arm's results in ``arms/<arm>/bench.json``."""
    plan = state.exp.bench
    if not plan.input_len:
        return
    from abgate.bench import BenchCase, CaseResult, run_bench

    results: dict[str, list[CaseResult]] = {arm: [] for arm in sessions}
    cases = [BenchCase(n, plan.output_len) for n in plan.input_len]
    for arm, case in schedule.interleaved(cases, list(sessions)):
        with sessions[arm].env():
            res = run_bench(sessions[arm].engine, [case], warmup=plan.warmup,
                            repeats=plan.repeats)
        results[arm].extend(res.cases)
    shas = {arm: [c.prompt_sha256 for c in cs] for arm, cs in results.items()}
    if len({tuple(v) for v in shas.values()}) > 1:
        raise AbgateError(f"bench prompts differ between arms: {shas}")
    for arm, cs in results.items():
        write_record(state.arm_dir(arm) / "bench.json", AbBenchDocument.new(
            plan=vars(plan) | {"input_len": list(plan.input_len)},
            cases=[c.bench_case() for c in cs]))


def gather_evidence(state: RunState, sessions: dict[str, EngineSession],
                    shards: Sequence[Mapping[str, EngineSession]] = ()
                    ) -> evidence.ScoredBy:
    """Distribution agreement of every loaded candidate with the baseline (which
    must be among ``sessions``), then the probes of every loaded arm. ``shards``: more
    places with every arm loaded (a fleet's other replicas) that the agreement pass is
    spread over (``evidence.agreement_pass``); the probes run on ``sessions``. Returns
    where the agreement pass ran (0: ``sessions``)."""
    ev, base = state.exp.evidence, state.exp.baseline
    scored_by = evidence.ScoredBy()
    if ev.agreement and len(sessions) > 1:
        scored_by = evidence.agreement_pass(
            state.out, state.doc, base, sessions, evidence.prompt_from(sessions[base]),
            ev.agreement_tokens, on_start=state.on_phase, on_step=state.progress,
            shards=shards)
        state.save()
    if ev.probes:
        for arm, session in sessions.items():
            evidence.probes_pass(state.out, arm, session, ev.probe_len)
    return scored_by
