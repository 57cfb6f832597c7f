"""An A/B's checks before anything is written (``ab.checks``: every arm prepared and
matched, every arm's contract, the declared differences, the schedule) run once per
A/B, through ``abgate ab FILE`` and the library calls alike, and refuse bad input the
same way through each: a one-line error naming the bad thing, nothing written."""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import abgate.ab.workflow
import abgate.cli
from abgate.ab import load_experiment, run_ab, run_experiment
from abgate.errors import UsageError
from abgate.runner.provenance import check_before_load
from abgate.runner.spec import prepare
from tests.conftest import error_lines
from tests.support.fake import cli, experiment

assert abgate.ab.workflow and abgate.cli.app  # every command loaded: the spies replace them
CONTRACT = 'name = "no-perturb"\n[settings]\nperturb = 0.0\n'


def _spy(monkeypatch: pytest.MonkeyPatch, fn: Callable[..., Any], seen: Counter[str]) -> None:
    """Count every call of ``fn``, wherever abgate imported it from."""
    def counted(*args: Any, **kwargs: Any) -> Any:
        seen[fn.__name__] += 1
        return fn(*args, **kwargs)

    for module in list(sys.modules.values()):
        name = getattr(module, "__name__", "")
        if name.startswith("abgate") and getattr(module, fn.__name__, None) is fn:
            monkeypatch.setattr(module, fn.__name__, counted)


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How often an arm was prepared (``prepare``) and had its contract checked before
    the load (``check_before_load``)."""
    seen: Counter[str] = Counter()
    _spy(monkeypatch, prepare, seen)
    _spy(monkeypatch, check_before_load, seen)
    return seen


def _file(tmp_path: Path, cand: str = "tpot_ms = 4.0", contract: bool = False) -> Path:
    path = experiment(tmp_path / "e.toml", cand, limit=4, agreement=False)
    if contract:  # the experiment file's own [contract]
        (tmp_path / "c.toml").write_text(CONTRACT)
        path.write_text(f'contract = "{tmp_path / "c.toml"}"\n' + path.read_text())
    return path


def _library(path: Path, out: Path) -> int:
    return run_experiment(load_experiment(path), out).exit_code


def _cli(path: Path, out: Path) -> int:
    return cli("ab", str(path), "-o", str(out)).returncode


@pytest.mark.parametrize("entry", [_library, _cli], ids=["run_experiment", "abgate ab"])
def test_checks_run_once_per_arm(tmp_path: Path, calls: Counter[str],
                                 entry: Callable[[Path, Path], int]) -> None:
    out = tmp_path / "AB"
    code = entry(_file(tmp_path, contract=True), out)
    assert code == 3 and (out / "comparison.json").is_file()  # 4 items decide nothing
    assert calls == {"prepare": 2, "check_before_load": 2}  # two arms, each once


def test_run_ab_checks_once_per_arm(tmp_path: Path, calls: Counter[str]) -> None:
    outcome = run_ab(load_experiment(_file(tmp_path, contract=True)), tmp_path / "AB")
    assert outcome.status == "complete"
    assert calls == {"prepare": 2, "check_before_load": 2}


def test_contract_refusal_through_the_cli(tmp_path: Path, calls: Counter[str]) -> None:
    out = tmp_path / "AB"
    r = cli("ab", str(_file(tmp_path, "perturb = 4.0", contract=True)), "-o", str(out))
    assert r.returncode == 2, r.stderr
    lines = error_lines(r.stderr)
    assert len(lines) == 1 and "arm 'b'" in lines[0] and "settings.perturb" in lines[0]
    assert not out.exists() and calls["check_before_load"] == 2  # a, then b refused


@pytest.mark.parametrize("call", [run_experiment, run_ab])
def test_contract_refusal_through_the_library(tmp_path: Path, calls: Counter[str],
                                              call: Callable[..., Any]) -> None:
    out = tmp_path / "AB"
    with pytest.raises(UsageError) as exc:
        call(load_experiment(_file(tmp_path, "perturb = 4.0", contract=True)), out)
    message = str(exc.value)
    assert "\n" not in message and "arm 'b'" in message and "settings.perturb" in message
    assert not out.exists() and calls["check_before_load"] == 2
