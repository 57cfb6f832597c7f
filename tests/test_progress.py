from __future__ import annotations

import io
import logging
import re

import pytest

from abgate.progress import Reporter, Step, reporter

# done/total (percent), a rate (from the second step on), an elapsed time and, while
# work is left, an ETA (once there is a rate)
LINE = re.compile(r"^abgate: (?P<name>.+): (?P<done>\d+)/(?P<total>\d+) \(\d+%\)"
                  r"(?P<rate>, [\d.]+/s(, [\d.]+ tok/s)?)?, elapsed \d+:\d\d"
                  r"(, ETA ((\d+:)?\d+:\d\d|after the next))?$")


def test_tty_bar_counts_items_and_tokens() -> None:
    stream = io.StringIO()
    with reporter("run X", tty=True, stream=stream) as rep:
        rep.on_start(2, 5)
        for _ in range(3):
            rep.on_sample(Step(10))
        assert rep.bar is not None
        task = rep.bar.tasks[0]
        assert task.completed == 5 and task.total == 5 and "tok/s" in task.fields["tps"]
    assert rep.tokens == 30
    assert "abgate:" not in stream.getvalue()  # the bar, not the plain lines


def test_non_tty_prints_plain_lines_with_rate_and_eta(caplog: pytest.LogCaptureFixture,
                                                      capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    caplog.set_level(logging.INFO, logger="abgate.progress")
    stream = io.StringIO()
    with reporter("bench Y", tty=False, stream=stream, every_s=3600) as rep:
        rep.on_start(0, 20)
        for _ in range(20):
            rep.on_sample(Step(4))
    lines = stream.getvalue().splitlines()
    assert lines[0] == "abgate: bench Y: 0/20 done, starting"
    progress = lines[1:]
    # every tenth of the total (2 samples), the last one at 20/20 without an ETA
    assert [LINE.match(x)["done"] for x in progress] == [str(n) for n in range(2, 21, 2)]
    assert all("ETA" in x for x in progress[:-1]) and "ETA" not in progress[-1]
    assert all(LINE.match(x)["rate"] for x in progress)  # each after the first step
    assert "tok/s" in progress[-1] and rep.tokens == 80
    # the run log gets the same lines; stdout stays for results
    logged = [r.getMessage() for r in caplog.records if r.name == "abgate.progress"]
    assert logged == [x.removeprefix("abgate: ") for x in lines]
    assert capsys.readouterr().out == ""


def test_non_tty_prints_on_time_as_well_as_on_count() -> None:
    stream = io.StringIO()
    rep = Reporter("run Z", None, stream, every_s=0.0)  # every sample is due by time
    rep.on_start(0, 1000)
    for _ in range(3):
        rep.on_sample(Step(1))
    lines = stream.getvalue().splitlines()[1:]
    assert [LINE.match(x)["done"] for x in lines] == ["1", "2", "3"]
    # the first step has no rate yet (loading and warm-up before it do not count)
    assert lines[0].endswith("ETA after the next") and not LINE.match(lines[0])["rate"]
    assert LINE.match(lines[2])["rate"] and "ETA after the next" not in lines[2]


def test_a_new_phase_restarts_the_count_and_names_itself() -> None:
    stream = io.StringIO()
    rep = Reporter("ab D", None, stream, every_s=3600)
    rep.on_start(0, 2)
    rep.on_sample(Step(8))
    rep.on_sample(Step(8))
    rep.on_start(1, 4, "scoring q8 against f16")
    rep.on_sample(Step(100))
    last = stream.getvalue().splitlines()[-1]
    m = LINE.match(last)
    assert m and m["name"] == "ab D scoring q8 against f16" and m["done"] == "2"
    assert m["total"] == "4" and "ETA" in last and rep.tokens == 100
    assert "abgate: ab D scoring q8 against f16: 1/4 done, starting" in stream.getvalue()
