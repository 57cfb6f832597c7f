"""Execute an A/B experiment: matched arms, a balanced schedule, per-arm records.

Layout of an A/B directory::

    ab.json                    experiment (as given, and resolved), schedule, status, engines
    arms/<arm>/run.json        the same records as ``abgate run`` (kind "ab-arm")
    arms/<arm>/samples.jsonl
    arms/<arm>/summary.json
    comparison.json            statistics and verdict (from saved samples only)
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from abgate import host_load
from abgate.ab import declared, evidence, schedule, sequential, switches
from abgate.ab.checks import Checked, check_experiment
from abgate.ab.directory import AB_FILE, open_ab_dir
from abgate.ab.experiment import Experiment
from abgate.errors import AbgateError
from abgate.model_check import ModelChanged
from abgate.provenance import ContractViolation
from abgate.runner import documents as docs
from abgate.runner import records as rec
from abgate.runner.documents import source_state, write_record
from abgate.runner.execute import RunRecorder, Status, end_record, fail_if_all_errors, tracked
from abgate.runner.outdir import claimed
from abgate.runner.provenance import ProvenanceOptions, input_hashes, record_after_load
from abgate.runner.samples import WARMUP_PREFIX, Sample, ids_sha256, load_samples, sample_key
from abgate.runner.sections import ArmDifferences, EngineRecord
from abgate.runner.session import EngineSession, loaded
from abgate.suites import Item

Progress = Callable[[Sample | dict[str, Any]], None]  # a sample, or a scoring step
log = logging.getLogger("abgate.ab")
OnPhase = evidence.OnStart  # (done, total, phase): a later phase (the scoring pass) begins


@dataclass(frozen=True)
class AbOutcome:
    out: Path
    status: str
    arms: dict[str, dict[str, Any]]  # arm -> summary


class AbRunner:
    """Holds the per-arm recorders and runs requests in schedule order."""

    def __init__(self, checked: Checked, out: Path, doc: docs.AbRecord, resume: bool,
                 progress: Progress | None, on_phase: OnPhase | None = None) -> None:
        git = doc.git_for_arms()  # one for all arms
        exp, prepared, provenance = checked.exp, checked.prepared, checked.provenance
        self.exp, self.prepared, self.out, self.doc = exp, prepared, out, doc
        self.policy, self.provenance = checked.policy, provenance
        # Every arm is held to the contract; only its own declared switch is exempt.
        self.contracts = checked.contracts
        self.progress, self.on_phase = progress, on_phase
        self.previous = doc.resumes[-1].from_status if resume and doc.resumes else None
        # an arm without run.json yet (killed right after ab.json) starts afresh
        self.recorders = {name: RunRecorder(p, out / "arms" / name, force=False, git=git,
                                            allow_source_change=provenance.allow_source_change,
                                            resume=resume and (out / "arms" / name /
                                                               rec.RUN_FILE).is_file(),
                                            kind="ab-arm")
                          for name, p in prepared.items()}
        self.prompt_sha: dict[str, str] = {}  # key -> sha seen first, across arms
        self.session = len(doc.resumes)
        for r in self.recorders.values():
            for s in load_samples(r.samples_path):
                if s.measured and s.key and s.prompt.sha256:
                    self.prompt_sha.setdefault(s.key, s.prompt.sha256)

    def save(self) -> None:
        write_record(self.out / AB_FILE, self.doc)

    def keys(self) -> list[tuple[Item, int]]:
        return self.prepared[self.exp.baseline].keys()

    def n_done(self) -> int:
        return sum(1 for r in self.recorders.values() for k in r.done
                   if not k.startswith("warmup"))

    def check_prompt(self, arm: str, session: EngineSession) -> None:
        """Before any sample: every arm must build the same prompt tokens."""
        item = self.keys()[0][0]
        with session.env():
            sha = ids_sha256(session.engine.render_prompt(self.prepared[arm].messages(item)))
        key = "__first_prompt__"
        first = self.prompt_sha.setdefault(key, sha or "")
        if sha != first:
            raise AbgateError(f"prompt mismatch: arm {arm!r} renders item {item.id} to tokens "
                              f"with SHA {sha[:12] if sha else None}, another arm to "
                              f"{first[:12]}; the arms are not matched (tokenizer or template "
                              "differs)")

    def check_loaded(self) -> None:
        """After a load: the candidates compared with the baseline (``ab.switches``); an
        undeclared difference stops the A/B before that arm's first sample."""
        provenance = {arm: r.doc.provenance for arm, r in self.recorders.items()}
        refusal = switches.loaded_differences(self.exp, self.doc, provenance, self.out)
        if refusal is not None:
            self.save()
            raise declared.UndeclaredDifference(refusal)

    def warmup(self, arm: str, session: EngineSession) -> None:
        rec_ = self.recorders[arm]
        for i, (item, seed) in enumerate(self.keys()[: self.exp.schedule.warmup]):
            with session.env():
                result = session.engine.generate([rec_.request(item, seed)])[0]
            rec_.record(item, seed, result, warmup=True)
            sample_id = f"warmup{self.session}-{i}"
            rec_.done.discard(WARMUP_PREFIX + sample_key(item.id, seed))
            rec_.done.add(sample_id)

    def run_one(self, arm: str, session: EngineSession, item: Item, seed: int) -> None:
        rec_ = self.recorders[arm]
        key = sample_key(item.id, seed)
        if key in rec_.done:
            return
        with session.env():
            result = session.engine.generate([rec_.request(item, seed)])[0]
        sha = ids_sha256(result.prompt_token_ids)
        if sha is not None:
            first = self.prompt_sha.setdefault(key, sha)
            if first != sha:
                raise AbgateError(f"prompt SHA mismatch for {key} in arm {arm!r}: "
                                  f"{sha[:12]} vs {first[:12]}; aborting (arms not matched)")
        sample = rec_.record(item, seed, result)
        self.doc.schedule.executed.append(f"{arm}:{key}")
        if self.progress:
            self.progress(sample)

    def load(self, arm: str, stack: ExitStack, warm: bool = True) -> EngineSession:
        """Load ``arm`` for the life of ``stack`` (closed, with cleanup recorded, when
        the stack unwinds), record its provenance, check its prompt, warm it up."""
        rec_ = self.recorders[arm]
        stack.enter_context(arm_named(arm))  # a changed model: which arm's load saw it
        session = stack.enter_context(loaded(self.prepared[arm].engine,
                                             self.out / "arms" / arm, rec_.doc))
        self.doc.engines[arm] = EngineRecord.model_validate(session.info)
        try:
            record_after_load(self.provenance, self.contracts[arm], session, rec_.doc)
        except ContractViolation as exc:
            raise AbgateError(f"arm {arm!r}: {exc}") from None
        finally:
            rec_.save()
        self.check_loaded()
        self.check_prompt(arm, session)
        if self.exp.evidence.agreement:
            evidence.scoring_preflight(arm, session)
        if self.exp.evidence.agreement:  # the scoring pass then restores each prompt
            session.engine.keep_prompt_states()  # instead of prefilling it (where it can)
        if warm:
            self.warmup(arm, session)
        return session

    def run_bench_cases(self, sessions: dict[str, EngineSession]) -> None:
        """Fixed-length speed cases, case by case with the arm order alternating
        (A B | B A ...), each arm's results in ``arms/<arm>/bench.json``."""
        plan = self.exp.bench
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
            write_record(self.out / "arms" / arm / "bench.json", docs.AbBenchDocument.new(
                plan=vars(plan) | {"input_len": list(plan.input_len)},
                cases=[c.to_dict(samples=True) for c in cs]))

    def bench_done(self) -> bool:
        return all((self.out / "arms" / arm / "bench.json").exists() for arm in self.exp.arms)

    def host_load(self, label: str) -> None:
        """A host-load snapshot (``abgate.host_load``) into ``ab.json``."""
        found = self.doc.host_load or {"snapshots": []}
        found["snapshots"] = [*found.get("snapshots", []), host_load.snapshot(label)]
        self.doc.host_load = found

    def run_interleaved(self) -> None:
        with ExitStack() as stack:
            sessions = {arm: self.load(arm, stack) for arm in self.exp.arms}
            self.host_load("interleaved start")
            self.save()
            if self.exp.schedule.sequential:
                sequential.run_sequential(self, sessions)
            else:
                for arm, (item, seed) in schedule.interleaved(self.keys(),
                                                              list(self.exp.arms)):
                    self.run_one(arm, sessions[arm], item, seed)
            self.host_load("interleaved end")
            if not self.bench_done():
                self.run_bench_cases(sessions)
            self.gather_evidence(sessions)

    def gather_evidence(self, sessions: dict[str, EngineSession]) -> None:
        """Distribution agreement of every loaded candidate with the baseline (which
        must be among ``sessions``), then the probes of every loaded arm."""
        ev, base = self.exp.evidence, self.exp.baseline
        if ev.agreement and len(sessions) > 1:
            evidence.agreement_pass(self.out, self.doc, base, sessions,
                                    evidence.prompt_from(sessions[base]), ev.agreement_tokens,
                                    on_start=self.on_phase, on_step=self.progress)
            self.save()
        if ev.probes:
            for arm, session in sessions.items():
                evidence.probes_pass(self.out, arm, session, ev.probe_len)

    def evidence_blocks(self) -> None:
        """Blocks mode: the baseline loaded beside one candidate at a time."""
        if not (self.exp.evidence.agreement or self.exp.evidence.probes):
            return
        with ExitStack() as stack:
            base = self.load(self.exp.baseline, stack, warm=False)
            for arm in self.exp.candidates:
                with ExitStack() as inner:
                    self.gather_evidence({self.exp.baseline: base,
                                          arm: self.load(arm, inner, warm=False)})

    def run_blocks(self) -> None:
        n = self.exp.schedule.block_size * len(self.prepared[self.exp.baseline].config.seeds)
        for arm, chunk in schedule.blocks(self.keys(), list(self.exp.arms), n):
            rec_ = self.recorders[arm]
            if all(sample_key(i.id, s) in rec_.done for i, s in chunk):
                continue
            with ExitStack() as stack:
                session = self.load(arm, stack)
                self.host_load(f"{arm} block start")
                for item, seed in chunk:
                    self.run_one(arm, session, item, seed)
                self.host_load(f"{arm} block end")
            self.save()
        if self.exp.bench.input_len and not self.bench_done():
            self.bench_blocks()
        self.evidence_blocks()

    def bench_blocks(self) -> None:
        """Blocks mode: each arm loaded once more, one after the other, for the bench."""
        for arm in self.exp.arms:
            with ExitStack() as stack:
                self.run_bench_cases({arm: self.load(arm, stack)})

    def finish(self, status: str, error: str | None) -> dict[str, dict[str, Any]]:
        summaries = {arm: r.finish(status, error).to_dict()
                     for arm, r in self.recorders.items()}
        end_record(self.doc, self.out, self.previous, status, error, log)
        self.save()
        return summaries


@contextmanager
def arm_named(arm: str) -> Iterator[None]:
    """A :class:`ModelChanged` from ``arm``'s load (or its close) says which arm."""
    try:
        yield
    except ModelChanged as exc:
        if exc.arm is not None:  # named by the arm whose load found it
            raise
        raise ModelChanged(f"arm {arm!r}: {exc}", arm) from None


def run_ab(exp: Experiment, out: Path, *, resume: bool = False, force: bool = False,
           on_start: Callable[[int, int], None] | None = None,
           progress: Progress | None = None,
           provenance: ProvenanceOptions | None = None,
           on_phase: OnPhase | None = None, policy: str | None = None) -> AbOutcome:
    """Run ``exp``'s arms into ``out`` (or finish them with ``resume``). Bad input
    raises UsageError before anything is written (``ab.checks``)."""
    checked = check_experiment(exp, provenance, policy)
    with claimed(out, resume=resume, force=force, marker=AB_FILE):
        return run_checked(checked, out, resume=resume, force=force, on_start=on_start,
                           progress=progress, on_phase=on_phase)


def run_checked(checked: Checked, out: Path, *, resume: bool, force: bool,
                on_start: Callable[[int, int], None] | None = None,
                progress: Progress | None = None,
                on_phase: OnPhase | None = None,
                strategy: Callable[[AbRunner], None] | None = None) -> AbOutcome:
    """Run an experiment that passed :func:`~abgate.ab.checks.check_experiment` into
    ``out``, whose claim (``runner.outdir.claimed``) the caller holds."""
    exp, prov, rules = checked.exp, checked.provenance, checked.policy
    # the policy's bytes too: a resumed (sequential) A/B decides under the same rules
    inputs = {**input_hashes(prov), "policy": rules.sha256}
    doc = open_ab_dir(exp, checked.prepared, out, checked.mode, resume, force,
                      source_state(out), inputs, prov.allow_source_change, rules.name)
    for arm, entry in checked.differences.items():
        found = doc.differences.setdefault(arm, ArmDifferences())
        found.declares, found.request = entry.declares, entry.request
    runner = AbRunner(checked, out, doc, resume, progress, on_phase)
    runner.save()
    summaries: dict[str, dict[str, Any]] = {}

    def finish(status: Status) -> None:
        summaries.update(runner.finish(status.value, status.error))

    with tracked(out, "A/B run", finish) as status:
        if on_start:
            on_start(runner.n_done(), len(runner.keys()) * len(exp.arms))
        if strategy is not None:  # another schedule (a fleet: abgate.fleet)
            strategy(runner)
        elif checked.mode == "interleave":
            runner.run_interleaved()
        else:
            runner.run_blocks()
        for arm, r in runner.recorders.items():
            fail_if_all_errors(f"A/B arm {arm!r}", r.samples())
    return AbOutcome(out, status.value, summaries)
