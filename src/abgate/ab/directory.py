"""An A/B directory's ``ab.json``: opened for a new run or for a resume."""

from __future__ import annotations

from pathlib import Path

from abgate.ab.experiment import Experiment
from abgate.errors import UsageError
from abgate.identity import json_sha256
from abgate.records import documents as docs
from abgate.records.sections import GitState
from abgate.runner.documents import new_record, read_record, write_record
from abgate.runner.outdir import prepare_new_dir
from abgate.runner.resume import resumed
from abgate.runner.spec import PreparedRun

AB_FILE = "ab.json"


def open_ab_dir(exp: Experiment, prepared: dict[str, PreparedRun], out: Path, mode: str,
                resume: bool, force: bool, git: GitState | None,
                inputs: dict[str, str | None], allow_source_change: bool,
                policy_name: str | None = None) -> docs.AbRecord:
    """``out/ab.json`` as recorded (``resume``: the experiment, source and inputs must
    be those recorded) or written anew (the directory cleared first with ``force``)."""
    specs = {name: p.spec_digest for name, p in prepared.items()}
    given = exp.to_dict()  # the experiment as given: recorded, and what its digest covers
    digest = json_sha256({"experiment": given, "specs": specs, "mode": mode})
    if resume:
        doc = read_record(out / AB_FILE, "ab", model=docs.AbRecord)
        if doc.digest != digest:
            raise UsageError(f"--resume {out}: the experiment differs from the recorded one; "
                             "use a new directory")
        resumed(doc, out, git, inputs, allow_source_change)
        return doc
    prepare_new_dir(out, force, marker=AB_FILE)
    made = new_record("ab", git=git, inputs=inputs, experiment=given,
                      experiment_resolved=exp.resolved(policy_name),
                      arm_spec_digests=specs, digest=digest,
                      schedule={"mode": mode, "warmup": exp.schedule.warmup,
                                "block_size": exp.schedule.block_size, "executed": []},
                      engines={}, resumes=[], differences={})
    assert isinstance(made, docs.AbRecord)
    write_record(out / AB_FILE, made)  # before arms/: a --force later finds it abgate's
    return made
