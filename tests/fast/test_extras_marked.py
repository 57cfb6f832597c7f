"""CI runs the tests that need an optional extra (torch, transformers, ray) once, in its
.venv-extras, by their ``extras`` marker, and everything else once, in the README's
environment (.ci/run). A test file that skips without such an extra and lacks the marker would
run nowhere; this check finds it."""

from __future__ import annotations

import re

from tests.conftest import REPO

NEEDS = re.compile(r"""importorskip\(\s*["'](torch|transformers|ray)["']""")


def test_every_file_that_skips_without_an_extra_carries_the_extras_marker() -> None:
    unmarked = []
    for path in sorted((REPO / "tests").rglob("test_*.py")):
        text = path.read_text()
        if NEEDS.search(text) and "pytest.mark.extras" not in text:
            unmarked.append(str(path.relative_to(REPO)))
    assert unmarked == []

