"""Starting ``abgate`` imports what every command needs and no more: scipy.stats (over
half of the start-up when it was imported with the CLI) is imported by the commands that
compute a statistic, not by one refused before any work."""

from __future__ import annotations

import subprocess
import sys

CODE = """import sys
from abgate.cli import main
sys.argv = ["abgate", "run", "--suite", "gsm9k", "-o", "/nonexistent/abgate-R"]
try:
    main()
except SystemExit as exc:
    print(exc.code, sorted(m for m in ("scipy", "torch", "transformers", "llama_cpp")
                           if m in sys.modules))
"""


def test_a_refused_command_imports_no_scipy_and_no_engine_library() -> None:
    r = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True,
                       timeout=120)
    assert r.stdout.strip() == "2 []", r.stdout + r.stderr
    assert "unknown suite 'gsm9k'" in r.stderr
