from __future__ import annotations

import logging

import pytest

from abgate.progress import reporter


def test_tty_bar_counts_items_and_tokens() -> None:
    with reporter("run X", tty=True) as rep:
        rep.on_start(2, 5)
        for _ in range(3):
            rep.on_sample({"output": {"tokens": 10}})
        assert rep.bar is not None
        task = rep.bar.tasks[0]
        assert task.completed == 5 and task.total == 5 and "tok/s" in task.fields["tps"]
    assert rep.tokens == 30


def test_non_tty_is_quiet_but_logged(caplog: pytest.LogCaptureFixture,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    caplog.set_level(logging.INFO, logger="abgate.progress")
    with reporter("bench Y", tty=False) as rep:
        rep.on_start(0, 10)
        for _ in range(10):
            rep.on_sample({"kind": "probe", "output_tokens": 4})  # probe-shaped sample
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""
    lines = [r.message for r in caplog.records if "bench Y" in r.message]
    assert len(lines) == 10 and lines[-1].startswith("bench Y: 10/10 samples")
    assert rep.tokens == 40
