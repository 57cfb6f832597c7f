"""Opt-out evidence: when arms differ only by environment, did the variable take effect?

An environment opt-out (``GGML_NO_FA=1``, ``VLLM_USE_V1=0``) is invisible in the
request: only what the engine reports after the load can show it changed anything. For
a candidate whose every request difference is an ``env.*`` key, :func:`opt_out_evidence`
records

- the keys the engine reports differently after the load (effective configuration,
  engine version, mapped libraries: the ``loaded`` stage of the arm's ``differences``
  in ``ab.json``);
- the engine log lines that match the experiment's ``[evidence] log_patterns``
  (regular expressions), per arm, from the logs the engine wrote into the arm's
  directory (a launched server's ``server-*.log``; an in-process engine writes none);

and a warning when neither differs: the A/B then compares two configurations that no
recorded evidence tells apart.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from abgate.errors import UsageError
from abgate.records.sections import ArmDifferences, DiffStage, OptOut, OptOutLines

LOG_GLOB = "*.log"
MAX_LINES = 20


def compile_patterns(where: str, patterns: Any) -> tuple[str, ...]:
    """``[evidence] log_patterns``: a list of regular expressions, each compiled here so
    that a bad one is a one-line error before anything runs."""
    if not isinstance(patterns, list) or not all(isinstance(p, str) and p for p in patterns):
        raise UsageError(f"{where}: log_patterns must be a list of regular expressions, got "
                         f"{patterns!r}")
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise UsageError(f"{where}: log_patterns {pattern!r} is not a regular expression "
                             f"({exc})") from None
    return tuple(patterns)


def log_lines(arm_dir: Path, patterns: Sequence[str]) -> list[str]:
    """Distinct lines of the engine logs in ``arm_dir`` matching any pattern, in order
    (abgate's own ``run.log`` excluded)."""
    if not patterns:
        return []
    compiled = [re.compile(p) for p in patterns]
    found: list[str] = []
    for path in sorted(arm_dir.glob(LOG_GLOB)):
        if path.name == "run.log":
            continue
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            text = line.strip()
            if text not in found and any(c.search(text) for c in compiled):
                found.append(text)
                if len(found) >= MAX_LINES:
                    return found
    return found


def env_only(request: DiffStage) -> list[str]:
    """The env keys of a candidate whose request differs from the baseline only in
    environment variables; empty otherwise."""
    keys = [*request.declared, *request.undeclared]
    return keys if keys and all(k.startswith("env.") for k in keys) else []


def opt_out_evidence(entry: ArmDifferences, arm_dirs: tuple[Path, Path],
                     patterns: Sequence[str]) -> OptOut | None:
    """The ``opt_out`` section of a candidate's differences, or None when its request
    differs in anything but env (or not at all)."""
    env = env_only(entry.request or DiffStage())
    if not env:
        return None
    loaded = entry.loaded or DiffStage()
    reported = sorted({*loaded.declared, *loaded.undeclared})
    base_lines, cand_lines = (log_lines(d, patterns) for d in arm_dirs)
    logs_differ = base_lines != cand_lines
    observed = bool(reported) or logs_differ
    warning = None
    if not observed:
        how = (f"no engine log line matching {list(patterns)} differs" if patterns else
               "no [evidence] log_patterns were given")
        warning = (f"the arms differ only in {', '.join(env)}, and nothing the engine reports "
                   f"differs after the load (effective configuration, version, libraries; "
                   f"{how}): no recorded evidence shows the variable took effect")
    return OptOut(env=env, reported=reported, log_patterns=list(patterns),
                  log_lines=OptOutLines(baseline=base_lines, candidate=cand_lines),
                  observed=observed, warning=warning)
