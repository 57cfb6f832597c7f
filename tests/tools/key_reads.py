"""Count string-key reads in ``src/abgate``: ``x["name"]`` (a subscript by a string
literal, read, not assigned) and ``x.get("name", ...)``, per module, so that the
figure issue 36 asks for ("0 string-key reads of abgate's own records outside cli/
printing") is reproducible.

A string-key read is not always a read of abgate's own records: the modules that read
foreign JSON (lm-eval and vLLM bench output, an engine's HTTP replies and its own
config objects, SQLite rows, TOML and policy files, a GGUF header) are named apart in
:data:`FOREIGN` with what they read, and ``cli/`` (printing) is counted apart. The reads
of abgate's own documents raw, before a model can read them, are named apart too, in
:data:`MIGRATIONS`: a document's stamp (``schema``, ``schema_version``, ``kind``, its
seal's version), which chooses the model and its migration steps, and the v1 -> v2
steps, transforms of the raw v1 dict by nature. What is left is the figure: an upper
bound on the reads of abgate's own records, since a module may also read a dict it
built itself, and a lower bound of its raw reads: a read by a variable key (a loop over
key paths, ``table.get(name)``) or through ``getattr`` is not counted.

    python -m tests.tools.key_reads            # the total and the modules, largest first
    python -m tests.tools.key_reads --all      # the migration, foreign and cli/ modules too
    python -m tests.tools.key_reads --src OTHER/src/abgate   # another checkout
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "abgate"

# Module path prefixes (relative to src/abgate) whose string-key reads are of foreign
# JSON or of objects that are not abgate's records, with what they read.
FOREIGN: dict[str, str] = {
    "ledger/imports/": "lm-eval samples files and vLLM bench serve JSON",
    "ledger/store.py": "SQLite rows of the ledger",
    "engines/": "engine replies (HTTP JSON, vLLM/transformers/llama.cpp objects), engine args; "
                "engines/keys.py: each engine's own keys the workflows read (its effective "
                "config's n_ctx, n_vocab, scoring; its options' concurrency, launch, "
                "api_key_env; a launched server's cleanup evidence)",
    "bench/prompt_file.py": "a user's --prompt-file (token IDs: a JSON list, or an object's "
                            "token_ids)",
    "bench/load_run.py": "vllm bench serve / served load results",
    "bench/load_http.py": "an HTTP response's headers (Retry-After)",
    "tomlfile.py": "TOML documents",
    "schema.py": "pydantic error dicts",
    "safejson.py": "the JSON reader's own parse",
    "gguf_file.py": "a GGUF header",
    "host.py": "NVML, /proc and platform facts",
    "provenance/mapped.py": "/proc/PID/maps",
    "provenance/gitinfo.py": "git's output",
    "provenance/contract_toml.py": "contract TOML files (the user's tables)",
    "provenance/contract.py": "an engine's effective config (its per-rank facts)",
    "provenance/builds.py": "environment variables (ABGATE_CACHE, XDG_CACHE_HOME)",
    "provenance/environment.py": "sys.modules (the loaded torch)",
    "weights/": "checkpoint headers (safetensors, GGUF)",
    "compare/policy.py": "policy TOML files",
    "redact.py": "any object being redacted",
    "signing.py": "ssh-keygen and signed-files.json",
    "bench/roofline.py": "a GGUF header's metadata and tensor sizes, an engine's effective "
                         "config (its own keys)",
    "bench/fidelity.py": "an engine's own timing counters (llama.cpp's engine_timings)",
    "ab/file_tables.py": "an experiment file's tables as the user wrote them (TOML: arms, "
                         "changes, allow_differences, log_patterns, [source])",
    "fleet/ray_state.py": "Ray's state APIs (ray.nodes(), the actors' states)",
    "fleet/cluster.py": "the [cluster] table (the user's TOML, --cluster-opt pairs)",
    "suites/gsm8k.py": "GSM8K's data set lines (question, answer)",
    "suites/prompts.py": "a user's shots file (question, answer lines)",
    "suites/generic.py": "a user's JSONL suite (its lines' scorer)",
    "host_load.py": "psutil's process info (a busy process's name)",
    "ledger/paths.py": "environment variables (XDG_DATA_HOME)",
    "signals.py": "environment variables (ABGATE_TEST_PAUSE_AT)",
}
# Modules that read abgate's own documents raw, before any model, with why.
MIGRATIONS: dict[str, str] = {
    "records/migrations.py": "a document's stamp (schema, schema_version, kind, seal "
                             "version) before its model, and the v1 -> v2 steps (the raw "
                             "v1 dict)",
}
CLI = "cli/"
GROUPS = ("own", "migrations", "cli", "foreign")


def _is_read(node: ast.AST) -> bool:
    if isinstance(node, ast.Subscript):
        key = node.slice
        return (isinstance(node.ctx, ast.Load) and isinstance(key, ast.Constant)
                and isinstance(key.value, str) and not _is_literal(node.value))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        first = node.args[0] if node.args else None
        return (node.func.attr == "get" and isinstance(first, ast.Constant)
                and isinstance(first.value, str))
    return False


def _is_literal(value: ast.expr) -> bool:
    """``Literal["x"]`` (a type, not a read): ``Literal`` or ``typing.Literal``."""
    return ((isinstance(value, ast.Name) and value.id == "Literal")
            or (isinstance(value, ast.Attribute) and value.attr == "Literal"))


def _reads(tree: ast.AST) -> int:
    return sum(1 for node in ast.walk(tree) if _is_read(node))


def counts(src: Path = SRC) -> dict[str, int]:
    """String-key reads per module (path relative to ``src``, a ``src/abgate``)."""
    out = {}
    for path in sorted(src.rglob("*.py")):
        rel = path.relative_to(src).as_posix()
        n = _reads(ast.parse(path.read_text(encoding="utf-8")))
        if n:
            out[rel] = n
    return out


def group(rel: str) -> str:
    if rel.startswith(CLI):
        return "cli"
    if any(rel.startswith(p) for p in MIGRATIONS):
        return "migrations"
    return "foreign" if any(rel.startswith(p) for p in FOREIGN) else "own"


def main(argv: list[str] | None = None) -> int:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--all", action="store_true",
                      help="list the migration, foreign and cli/ modules too")
    args.add_argument("--src", type=Path, default=SRC, help="the src/abgate to count")
    ns = args.parse_args(argv)
    found = counts(ns.src)
    totals = {g: sum(n for rel, n in found.items() if group(rel) == g) for g in GROUPS}
    print(f"string-key reads outside cli/, the v1 migrations and the foreign readers: "
          f"{totals['own']} (stamps and v1 migrations: {totals['migrations']}; cli/: "
          f"{totals['cli']}; foreign readers: {totals['foreign']})")
    for rel, n in sorted(found.items(), key=lambda kv: (-kv[1], kv[0])):
        if ns.all or group(rel) == "own":
            print(f"{n:5d}  {rel}" + ("" if group(rel) == "own" else f"  ({group(rel)})"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
