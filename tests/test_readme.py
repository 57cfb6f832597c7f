from __future__ import annotations

import re

from tests.conftest import REPO


def _readme_commands() -> list[str]:
    text = (REPO / "README.md").read_text()
    return re.findall(r"```bash\n(.*?)\n```", text, flags=re.S)


def test_readme_opens_with_two_setup_commands() -> None:
    text = (REPO / "README.md").read_text()
    head = text.split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)\n```", head, flags=re.S)
    assert len(blocks) == 2 and all("\n" not in b for b in blocks)
    assert "pip install" in blocks[0] and "abgate" in blocks[0].split("&&")[-1]
    assert "pytest" in blocks[1]


def test_ci_runs_the_readme_test_command() -> None:
    test_cmd = _readme_commands()[1]
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    assert test_cmd in ci


def test_ci_runs_the_extras_tier_on_one_thread_first() -> None:
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    assert "ABGATE_TEST_THREADS=1 python -m pytest -m extras -p no:randomly" in ci
    assert ci[-1] == _readme_commands()[1]  # the README's command stays the last step
    # the step selects tests (pytest's exit 5 for none would fail CI)
    assert any("pytest.mark.extras" in p.read_text()
               for p in (REPO / "tests").glob("test_*.py"))


def test_ci_runs_the_readme_test_command_without_the_extras() -> None:
    """The README's test command runs in the README's own .venv, where no optional extra
    (torch, transformers) was installed; the extras get their own venv (issue #35: lint failed
    without torch while CI only ever had it)."""
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    readme_step = ci.index(_readme_commands()[1])
    bare = [line for line in ci[:readme_step] if ". .venv/bin/activate" in line
            or line.strip() == "python3 -m venv .venv"]
    assert bare, "the README's venv is made by .ci/run"
    first_bare = ci.index("python3 -m venv .venv")
    assert not any("torch" in line or "transformers" in line
                   for line in ci[first_bare:] if not line.lstrip().startswith("#"))
    assert "python3 -m venv .venv-extras" in ci[:first_bare]
    assert "torch" not in _readme_commands()[1] and "transformers" not in _readme_commands()[1]
