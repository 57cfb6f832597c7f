"""Golden records: one small directory of each record kind at the current schema
versions, written by the real writers on the fake engine. ``python -m
tests.support.golden`` writes a new set under ``tests/data/golden/v<N>/`` (N: the
records' schema version); a set is never edited by hand, and an old set stays, so the
readers keep reading every version they ever wrote."""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from abgate.records.documents import SCHEMA_VERSIONS
from abgate.runner.records import SCHEMA_VERSION
from tests.support.fake import cli, experiment, fake_run

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden"
KINDS = ("run", "ab", "bench", "baseline")


def version_tag() -> str:
    """The directory name of the current versions' set (``v1`` while all kinds are 1)."""
    versions = {SCHEMA_VERSION, *SCHEMA_VERSIONS.values()}
    return "v" + "-".join(str(v) for v in sorted(versions))


def write_all(dest: Path) -> None:
    """Write one directory per kind under ``dest`` (which must not exist yet)."""
    dest.mkdir(parents=True)
    steps = {
        "run": lambda: fake_run(dest / "run", "--engine-arg", "error_rate=0.25", limit=3,
                                seeds="0"),
        "ab": lambda: cli("ab", str(experiment(dest / "ab.toml", "perturb = 0.05",
                                               limit=3)), "-o", str(dest / "ab")),
        "bench": lambda: cli("bench", "--engine", "fake", "--input-len", "32",
                             "--output-len", "8", "--repeats", "2", "-o", str(dest / "bench")),
        "baseline": lambda: cli("baseline", "record", "--engine", "fake", "--input-len", "32",
                                "--output-len", "8", "--repeats", "2", "--no-probes",
                                "-o", str(dest / "baseline")),
    }
    for kind, step in steps.items():
        r = step()
        if r.returncode not in (0, 3):
            raise SystemExit(f"golden {kind}: exit {r.returncode}: {r.stderr}")
    (dest / "ab.toml").unlink()
    for log in dest.rglob("run.log"):
        log.unlink()  # host-specific and not a record


def main() -> None:
    target = GOLDEN / version_tag()
    if target.exists():
        raise SystemExit(f"{target} exists: golden records of a version are never rewritten")
    with tempfile.TemporaryDirectory() as tmp:
        write_all(Path(tmp) / "g")
        shutil.copytree(Path(tmp) / "g", target)
    print(target, file=sys.stderr)


if __name__ == "__main__":
    main()
