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
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from abgate.ab import declared, evidence, optout, schedule
from abgate.ab.analyze import arm_samples, sequential_for
from abgate.ab.experiment import Experiment
from abgate.compare import Policy, load_policy
from abgate.engines import engine_adapter
from abgate.errors import AbgateError, UsageError
from abgate.identity import json_sha256
from abgate.provenance import ContractOutcome, ContractViolation
from abgate.runner import documents as docs
from abgate.runner import records as rec
from abgate.runner.documents import new_record, read_record, source_state, write_record
from abgate.runner.execute import (
    RunRecorder,
    Status,
    check_same_source,
    fail_if_all_errors,
    kept_status,
    tracked,
)
from abgate.runner.outdir import claimed, prepare_new_dir
from abgate.runner.provenance import (
    ProvenanceOptions,
    check_before_load,
    check_same_inputs,
    input_hashes,
    record_after_load,
)
from abgate.runner.samples import (
    WARMUP_PREFIX,
    Sample,
    ids_sha256,
    load_samples,
    sample_key,
)
from abgate.runner.sections import ArmDifferences, DiffStage, EngineRecord, GitState, Resume
from abgate.runner.session import EngineSession, loaded
from abgate.runner.spec import PreparedRun, prepare
from abgate.suites import Item

log = logging.getLogger("abgate.ab")
AB_FILE = "ab.json"
MATCHED = ("item_ids", "seeds", "sampling", "prompt", "suite")
Progress = Callable[[Sample | dict[str, Any]], None]  # a sample, or a scoring step
OnPhase = evidence.OnStart  # (done, total, phase): a later phase (the scoring pass) begins


@dataclass(frozen=True)
class AbOutcome:
    out: Path
    status: str
    arms: dict[str, dict[str, Any]]  # arm -> summary


def prepare_arms(exp: Experiment) -> dict[str, PreparedRun]:
    """Prepare every arm (cheap, before any load) and enforce matching."""
    prepared = {name: prepare(cfg) for name, cfg in exp.arms.items()}
    base = prepared[exp.baseline].spec
    for name, p in prepared.items():
        for key in MATCHED:
            if p.spec[key] != base[key]:
                raise UsageError(f"arm {name!r} is not matched with {exp.baseline!r}: "
                                 f"{key} differs; arms may differ only in engine, model, "
                                 "engine args/options and env")
    return prepared


def request_differences(exp: Experiment, prepared: dict[str, PreparedRun]
                        ) -> dict[str, ArmDifferences]:
    """Each candidate's differences from the baseline before any load, declared and
    undeclared apart; an undeclared one is refused (exit 2, nothing written) when the
    experiment declares anything, else logged as a warning."""
    base = declared.request_facts(prepared[exp.baseline].spec)
    out: dict[str, ArmDifferences] = {}
    for arm in exp.candidates:
        patterns = exp.declared_for(arm)
        diff = declared.differing(base, declared.request_facts(prepared[arm].spec))
        known, unknown = declared.split(diff, patterns)
        if unknown and exp.declares:
            raise UsageError(declared.refusal(arm, exp.baseline, unknown, "before the load"))
        if unknown:
            log.warning("arm %r differs from %r in %s, declared nowhere (declare the switch "
                        "with changes = [...] to have any other difference refused)", arm,
                        exp.baseline, ", ".join(unknown))
        out[arm] = ArmDifferences(declares=exp.declares,
                                  request=declared.section(known, unknown, patterns))
    return out


def check_contracts(exp: Experiment, prepared: dict[str, PreparedRun],
                    prov: ProvenanceOptions) -> dict[str, ContractOutcome | None]:
    """The contract checked on every arm's request, each arm's own declared changes
    (and ``allow_differences``) exempt; a violation is refused with exit 2."""
    out: dict[str, ContractOutcome | None] = {}
    for arm, p in prepared.items():
        exempt = declared.exemption((*exp.changes.get(arm, ()), *exp.allow_differences))
        try:
            out[arm] = check_before_load(prov, p.engine, exempt)
        except ContractViolation as exc:
            raise UsageError(f"arm {arm!r}: {exc}") from None
    return out


def choose_mode(exp: Experiment) -> str:
    mode = exp.schedule.mode
    if mode == "auto":
        arms = list(exp.arms.values())
        same_env = all(a.env == arms[0].env for a in arms)
        in_process = all(engine_adapter(a.engine).in_process for a in arms)
        mode = "interleave" if same_env and in_process else "blocks"
    if exp.schedule.sequential and mode != "interleave":
        why = "" if exp.schedule.mode == "blocks" else (
            " (auto chose blocks: the arms differ in env or are not all in-process)")
        raise UsageError(f"[schedule] stopping = \"sequential\" needs the interleaved "
                         f"schedule (every arm resident, looks after each item); this "
                         f"experiment runs in blocks{why}")
    return mode


def open_ab_dir(exp: Experiment, prepared: dict[str, PreparedRun], out: Path, mode: str,
                resume: bool, force: bool, git: GitState | None,
                inputs: dict[str, str | None], allow_source_change: bool,
                policy_name: str | None = None) -> docs.AbRecord:
    specs = {name: p.spec_digest for name, p in prepared.items()}
    digest = json_sha256({"experiment": exp.to_dict(), "specs": specs, "mode": mode})
    if resume:
        doc = read_record(out / AB_FILE, "ab", model=docs.AbRecord)
        if doc.digest != digest:
            raise UsageError(f"--resume {out}: the experiment differs from the recorded one; "
                             "use a new directory")
        changed = check_same_source(out, doc.git, git, allow_source_change)
        check_same_inputs(out, doc.inputs, inputs)
        doc.resumes = [*doc.resumes, Resume(at=time.time(), from_status=doc.status, git=git,
                                            inputs=inputs, source_changed=changed)]
        return doc
    prepare_new_dir(out, force, marker=AB_FILE)
    made = new_record("ab", git=git, inputs=inputs, experiment=exp.to_dict(),
                      experiment_resolved=exp.resolved(policy_name),
                      arm_spec_digests=specs, digest=digest,
                      schedule={"mode": mode, "warmup": exp.schedule.warmup,
                                "block_size": exp.schedule.block_size, "executed": []},
                      engines={}, resumes=[], differences={})
    assert isinstance(made, docs.AbRecord)
    write_record(out / AB_FILE, made)  # before arms/: a --force later finds it abgate's
    return made


class AbRunner:
    """Holds the per-arm recorders and runs requests in schedule order."""

    def __init__(self, exp: Experiment, prepared: dict[str, PreparedRun], out: Path,
                 doc: docs.AbRecord, resume: bool, force: bool,
                 progress: Progress | None, provenance: ProvenanceOptions,
                 on_phase: OnPhase | None = None, policy: Policy | None = None) -> None:
        git = doc.git_for_arms()  # one for all arms
        self.exp, self.prepared, self.out, self.doc = exp, prepared, out, doc
        self.policy = policy or load_policy(exp.policy)
        self.provenance = provenance
        # Every arm is held to the contract; only its own declared switch is exempt.
        self.contracts = check_contracts(exp, prepared, provenance)
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

    def loaded_facts(self, arm: str) -> dict[str, str] | None:
        engine = self.doc.engines.get(arm)
        if engine is None:
            return None
        return declared.loaded_facts(engine, self.recorders[arm].doc.provenance)

    def check_loaded(self) -> None:
        """After a load: each candidate whose and whose baseline's engines have loaded
        against the baseline (engine version, effective config, libraries); an
        undeclared difference stops the A/B before that arm's first sample."""
        base = self.loaded_facts(self.exp.baseline)
        for arm in self.exp.candidates:
            facts = self.loaded_facts(arm)
            if base is None or facts is None:
                continue
            patterns = self.exp.declared_for(arm)
            diff = declared.differing(base, facts)
            known, unknown = declared.split(diff, patterns)
            entry = self.doc.differences.setdefault(arm, ArmDifferences())
            entry.loaded = declared.section(known, unknown, patterns)
            request = entry.request or DiffStage()
            entry.unobserved = declared.unused(  # the arm's own claims, not allowances
                self.exp.changes.get(arm, ()), {**request.declared, **known})
            self.opt_out(arm, entry)
            if unknown and self.exp.declares:
                self.save()
                raise declared.UndeclaredDifference(
                    declared.refusal(arm, self.exp.baseline, unknown, "after the load"))
            if unknown:
                log.warning("arm %r differs from %r after the load in %s, declared nowhere",
                            arm, self.exp.baseline, ", ".join(unknown))

    def opt_out(self, arm: str, entry: ArmDifferences) -> None:
        """Arms that differ only by env: record what shows the variable took effect."""
        dirs = (self.out / "arms" / self.exp.baseline, self.out / "arms" / arm)
        found = optout.opt_out_evidence(entry, dirs, self.exp.evidence.log_patterns)
        if found is None:
            return
        entry.opt_out = found
        if found.warning:
            log.warning("arm %r: %s", arm, found.warning)

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

    def sequence(self) -> list[tuple[Item, int]]:
        """The keys a sequential A/B may run: those of its first ``max_items`` items."""
        keys, cap = self.keys(), self.exp.schedule.max_items
        items = list(dict.fromkeys(item.id for item, _ in keys))
        allowed = set(items[:cap] if cap is not None else items)
        return [(item, seed) for item, seed in keys if item.id in allowed]

    def look(self, sessions: dict[str, EngineSession], n_items: int) -> bool:
        """Score what is new (distribution gates need it), evaluate every gate of every
        candidate, record the look; True when every candidate's verdict is decided."""
        ev, base = self.exp.evidence, self.exp.baseline
        if ev.agreement:
            evidence.agreement_pass(self.out, self.doc, base, sessions,
                                    evidence.prompt_from(sessions[base]), ev.agreement_tokens)
        samples = {arm: arm_samples(self.out, arm) for arm in self.exp.arms}
        ab = self.doc.to_dict()
        decisions = {arm: sequential_for(self.out, ab, arm, base, self.policy, samples)
                     for arm in self.exp.candidates}
        seq = self.doc.sequential
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
        self.save()
        return done

    def run_sequential(self, sessions: dict[str, EngineSession]) -> None:
        """Interleaved, with a look after every ``look_every`` items (and the last)."""
        keys = self.sequence()
        looks = self.doc.sequential.looks if self.doc.sequential else []
        self.doc.sequential = docs.AbSequential(look_every=self.exp.schedule.look_every,
                                           max_items=len({item.id for item, _ in keys}),
                                           looks=looks, stopped_at=None)
        order = schedule.interleaved(keys, list(self.exp.arms))
        n_items = 0
        for i, (arm, (item, seed)) in enumerate(order):
            self.run_one(arm, sessions[arm], item, seed)
            if i + 1 < len(order) and order[i + 1][1][0].id == item.id:
                continue  # the item is complete when the next entry is another item's
            n_items += 1
            last = i + 1 == len(order)
            if (n_items % self.exp.schedule.look_every == 0 or last) and self.look(
                    sessions, n_items):
                return

    def run_interleaved(self) -> None:
        with ExitStack() as stack:
            sessions = {arm: self.load(arm, stack) for arm in self.exp.arms}
            self.save()
            if self.exp.schedule.sequential:
                self.run_sequential(sessions)
            else:
                for arm, (item, seed) in schedule.interleaved(self.keys(),
                                                              list(self.exp.arms)):
                    self.run_one(arm, sessions[arm], item, seed)
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
                for item, seed in chunk:
                    self.run_one(arm, session, item, seed)
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
        if kept_status(self.previous, status) != status:
            log.warning("%s was complete before this resume, and stays so (this resume "
                        "ended %s)", self.out, status)
            status, error = "complete", self.doc.error
        self.doc.status, self.doc.error = status, error  # type: ignore[assignment]
        self.doc.ended_at = time.time()
        self.save()
        return summaries


def run_ab(exp: Experiment, out: Path, *, resume: bool = False, force: bool = False,
           on_start: Callable[[int, int], None] | None = None,
           progress: Progress | None = None,
           provenance: ProvenanceOptions | None = None,
           on_phase: OnPhase | None = None, policy: str | None = None) -> AbOutcome:
    prov = provenance or ProvenanceOptions()
    rules = load_policy(policy if policy is not None else exp.policy)  # bad policy: exit 2
    prepared = prepare_arms(exp)
    check_contracts(exp, prepared, prov)  # fail fast, before anything is written
    differences = request_differences(exp, prepared)
    mode = choose_mode(exp)
    with claimed(out, resume=resume, force=force, marker=AB_FILE):
        # the policy's bytes too: a resumed (sequential) A/B decides under the same rules
        inputs = {**input_hashes(prov), "policy": rules.sha256}
        doc = open_ab_dir(exp, prepared, out, mode, resume, force, source_state(out),
                          inputs, prov.allow_source_change, rules.name)
        for arm, entry in differences.items():
            found = doc.differences.setdefault(arm, ArmDifferences())
            found.declares, found.request = entry.declares, entry.request
        runner = AbRunner(exp, prepared, out, doc, resume, force, progress, prov,
                          on_phase, rules)
        runner.save()
        summaries: dict[str, dict[str, Any]] = {}

        def finish(status: Status) -> None:
            summaries.update(runner.finish(status.value, status.error))

        with tracked(out, "A/B run", finish) as status:
            if on_start:
                on_start(runner.n_done(), len(runner.keys()) * len(exp.arms))
            if mode == "interleave":
                runner.run_interleaved()
            else:
                runner.run_blocks()
            for arm, r in runner.recorders.items():
                fail_if_all_errors(f"A/B arm {arm!r}", r.samples())
    return AbOutcome(out, status.value, summaries)
