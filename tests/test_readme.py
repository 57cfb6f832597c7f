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
