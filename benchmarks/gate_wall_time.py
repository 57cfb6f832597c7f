"""Wall time to gate a pull request with ``abgate ab --rev``, builds cached.

Makes the fixture engine repository (tests/support/engine_repo.py: a Python engine on
llama-cpp-python serving the embedded SmolLM2, with a no-op commit and a planted
sampling regression), builds both revisions once (the cache warm, as on a CI runner
that keeps ``$ABGATE_CACHE``), then times ``abgate ab FILE --rev BASE..HEAD`` end to end
(process start to exit: the cached builds checked, both servers launched, the items,
the verdict, reports, JUnit and Markdown) for the no-op and for the regression. Run from
the repository root::

    PYTHONPATH=src python benchmarks/gate_wall_time.py [--limit 32] [--threads 1]
        [--max-tokens 24] [--sequential] [--heads noop,regression]
        [--sequential-first] [--json out.json]

It prints one line per gate: the head, the verdict, the exit code, the wall time, and
how long the cached-build check took (the "cached, nothing built" lines).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.engine_repo import BUILD, LAUNCH, make_engine_repo  # noqa: E402

from abgate.provenance.builds import build_revision  # noqa: E402


def experiment(tmp: Path, repo: Path, limit: int, threads: int, max_tokens: int) -> Path:
    path = tmp / "pr.toml"
    path.write_text(f"""name = "pr"
policy = "pre-merge"
[source]
repository = "{repo}"
build = "{BUILD}"
[shared]
suite = "synthetic"
difficulty = "trivial"
limit = {limit}
max_tokens = {max_tokens}
engine = "openai"
engine_args = {{ n_ctx = 1024, n_threads = {threads}, n_threads_batch = {threads} }}
engine_options = {{ launch = "{LAUNCH}" }}
[schedule]
mode = "interleave"
warmup = 1
[evidence]
agreement = false
probes = false
[arms.base]
[arms.head]
""")
    return path


def gate(file: Path, base: str, head: str, out: Path, env: dict[str, str],
         *extra: str) -> dict[str, object]:
    start = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "abgate", "ab", str(file), "--rev",
                        f"{base}..{head}", "-o", str(out), "--junit", f"{out}.xml",
                        "--summary-md", f"{out}.md", *extra], capture_output=True,
                       text=True, env=env, check=False)
    wall = time.monotonic() - start
    comp = json.loads((out / "comparison.json").read_text()) \
        if (out / "comparison.json").is_file() else {}
    decision = comp.get("decision")
    seq = next(iter(comp.get("comparisons", {}).values()), {}).get(
        "comparison", {}).get("sequential") or {}
    cached = r.stderr.count("cached, nothing built")
    return {"head": head, "mode": " ".join(extra) or "fixed", "decision": decision,
            "exit": r.returncode, "items_run": seq.get("n_items_run"),
            "wall_s": round(wall, 1), "builds_cached": cached,
            "stderr_tail": r.stderr.strip().splitlines()[-1:] if r.returncode == 2 else []}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--sequential", action="store_true",
                    help="also gate the no-op with sequential stopping")
    ap.add_argument("--heads", default="noop,regression",
                    help="the heads gated at the fixed N (comma-separated)")
    ap.add_argument("--sequential-first", action="store_true",
                    help="gate the no-op sequentially before the fixed-N gates")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="gate-wall-") as t:
        tmp = Path(t)
        revs = make_engine_repo(tmp / "engine")
        env = {**os.environ, "ABGATE_CACHE": str(tmp / "cache")}
        os.environ["ABGATE_CACHE"] = env["ABGATE_CACHE"]
        start = time.monotonic()
        for rev in ("base", "noop", "regression"):  # the cache warmed, as on CI
            build_revision(tmp / "engine", revs[rev], BUILD)
        warm = time.monotonic() - start
        file = experiment(tmp, tmp / "engine", a.limit, a.threads, a.max_tokens)
        def fixed() -> list[dict[str, object]]:
            return [gate(file, revs["base"], revs[h], tmp / h, env)
                    for h in a.heads.split(",") if h]

        def sequential() -> list[dict[str, object]]:  # issue 34 item 5: stopped early
            return [gate(file, revs["base"], revs["noop"], tmp / "noop-seq", env,
                         "--sequential", "--max-items", str(a.limit))] if a.sequential else []

        rows = sequential() + fixed() if a.sequential_first else fixed() + sequential()
    load = os.getloadavg()
    result = {"limit": a.limit, "threads": a.threads, "max_tokens": a.max_tokens,
              "cpus": os.cpu_count(), "loadavg_after": [round(x, 1) for x in load],
              "cold_builds_s": round(warm, 1), "gates": rows}
    for row in rows:
        print(f"{row['head']:>10} ({row['mode']}): {row['decision']} (exit {row['exit']}) "
              f"in {row['wall_s']} s, {row['builds_cached']}/2 builds cached"
              + (f", {row['items_run']} items run" if row["items_run"] else ""))
    print(f"three cold builds: {result['cold_builds_s']} s; load after: {load}")
    if a.json:
        a.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
