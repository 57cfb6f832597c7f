"""From a :class:`RunConfig` to a validated, fully resolved run spec, before any load.

``prepare`` does everything cheap that can fail (suite loading and selection, engine
lookup, engine-arg validation, model path and hash, prompt shots) so that bad input
fails in seconds with a one-line error, before the engine loads.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from abgate import __version__
from abgate.engines import engine_module
from abgate.engines.args import redact_env, validate_args
from abgate.errors import UsageError
from abgate.runner.records import canonical_json
from abgate.suites import Item, Suite, load_suite, select_items
from abgate.suites.prompts import PromptConfig, build_messages, resolve_shots


@dataclass(frozen=True)
class RunConfig:
    """Everything a user chooses for a run. Plain data; the CLI and TOML files fill it."""

    engine: str = "llamacpp"
    model: str | None = None
    engine_args: dict[str, Any] = field(default_factory=dict)
    engine_options: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    suite: str = "gsm8k"
    data: str | None = None
    difficulty: str = "easy"
    synthetic_seed: int = 0
    limit: int | None = None
    sample: int | None = None
    sample_seed: int = 0
    seeds: tuple[int, ...] = (0,)
    max_tokens: int = 512
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    shots: int = 0
    shots_file: str | None = None
    system: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["seeds"] = list(self.seeds)
        d["env"] = redact_env(self.env)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunConfig:
        d = dict(d)
        d["seeds"] = tuple(d.get("seeds", (0,)))
        return cls(**d)


def file_sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@dataclass(frozen=True)
class PreparedRun:
    """A validated run: what to load and exactly which (item, seed) pairs to produce."""

    config: RunConfig
    engine: ModuleType
    model: str
    resolved_args: dict[str, Any]
    suite: Suite
    items: tuple[Item, ...]
    prompt: PromptConfig
    shots: tuple[tuple[str, str], ...]
    spec: dict[str, Any]
    spec_digest: str

    def messages(self, item: Item) -> tuple[dict[str, str], ...]:
        return build_messages(item, self.prompt, self.shots)

    def keys(self) -> list[tuple[Item, int]]:
        """Every (item, seed) pair in run order: items in order, each once per seed."""
        return [(item, seed) for item in self.items for seed in self.config.seeds]


def _check_sampling(c: RunConfig) -> None:
    if c.max_tokens < 1:
        raise UsageError(f"--max-tokens must be >= 1, got {c.max_tokens}")
    if c.temperature < 0:
        raise UsageError(f"--temperature must be >= 0, got {c.temperature}")
    if not 0 < c.top_p <= 1:
        raise UsageError(f"--top-p must be in (0, 1], got {c.top_p}")
    if c.top_k < 0:
        raise UsageError(f"--top-k must be >= 0, got {c.top_k}")
    if not c.seeds:
        raise UsageError("--seeds needs at least one seed")


def prepare(c: RunConfig) -> PreparedRun:
    _check_sampling(c)
    engine = engine_module(c.engine)
    resolved = validate_args(c.engine, c.engine_args, engine.ARG_SPECS)
    check_options = getattr(engine, "check_options", None)
    if check_options is not None:  # engine-level options (endpoints, launch, ...)
        check_options(c.engine_options)
    elif c.engine_options:
        raise UsageError(f"engine {c.engine!r} takes no engine options "
                         f"(got {', '.join(c.engine_options)})")
    suite = load_suite(c.suite, c.data, c.difficulty, c.synthetic_seed)
    items = tuple(select_items(suite.items, c.limit, c.sample, c.sample_seed))
    prompt = PromptConfig(c.shots, c.shots_file, c.system)
    shots = tuple(resolve_shots(prompt, items))
    model = engine.resolve_model(c.model)
    model_info: dict[str, Any] = {"path": model}
    if Path(model).is_file():
        model_info |= {"sha256": file_sha256(model), "size": Path(model).stat().st_size}
    spec = {
        "engine": c.engine,
        "model": model_info,
        "engine_args": c.engine_args,
        "engine_options": c.engine_options,
        "resolved_engine_args": resolved,
        "env": redact_env(c.env),
        "suite": {"name": suite.name, "source": suite.source, "data_sha256": suite.data_sha256,
                  "n_available": len(suite.items)},
        "selection": {"limit": c.limit, "sample": c.sample, "sample_seed": c.sample_seed},
        "item_ids": [i.id for i in items],
        "seeds": list(c.seeds),
        "sampling": {"max_tokens": c.max_tokens, "temperature": c.temperature,
                     "top_p": c.top_p, "top_k": c.top_k},
        "prompt": prompt.to_dict(),
    }
    digest = hashlib.sha256(canonical_json(spec).encode()).hexdigest()
    return PreparedRun(c, engine, model, resolved, suite, items, prompt, shots, spec, digest)


def abgate_version() -> str:
    return __version__
