"""From a :class:`RunConfig` to a validated, fully resolved run spec, before any load.

``prepare`` does everything cheap that can fail (suite loading and selection, engine
lookup, engine-arg validation, model path and hash, prompt shots) so that bad input
fails in seconds with a one-line error, before the engine loads.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from pydantic.dataclasses import dataclass as pydantic_dataclass

from abgate import __version__
from abgate.engines.base import content_chars
from abgate.errors import UsageError
from abgate.identity import json_sha256
from abgate.redact import redacted_paths
from abgate.runner.session import (
    EngineSpec,
    PreparedEngine,
    prepare_engine,
    recorded_engine_part,
)
from abgate.schema import FORBID, Float, Int, IntList, Str, StrTable, Table, validated
from abgate.suites import Item, Suite, load_suite, select_items
from abgate.suites.prompts import PromptConfig, build_messages, resolve_shots
from abgate.tomlfile import TomlDoc


@pydantic_dataclass(frozen=True, config=FORBID)
class RunConfig:
    """Everything a user chooses for a run: a pydantic model (strict types, unknown keys
    refused) that the CLI, experiment files and records all fill."""

    engine: Str = "llamacpp"
    model: Str | None = None
    engine_args: Table = field(default_factory=dict)
    engine_options: Table = field(default_factory=dict)
    env: StrTable = field(default_factory=dict)
    suite: Str = "gsm8k"
    data: Str | None = None
    difficulty: Str = "easy"
    synthetic_seed: Int = 0
    limit: Int | None = None
    sample: Int | None = None
    sample_seed: Int = 0
    seeds: IntList = (0,)
    max_tokens: Int = 512
    temperature: Float = 0.0
    top_p: Float = 1.0
    top_k: Int = 0
    shots: Int = 0
    shots_file: Str | None = None
    system: Str | None = None

    def to_dict(self) -> dict[str, Any]:
        """As recorded: every field, defaults included; secrets redacted."""
        d = asdict(self)
        d["seeds"] = list(self.seeds)
        return recorded_engine_part(d)

    @classmethod
    def from_dict(cls, d: Any, where: str = "config", *, doc: TomlDoc | None = None,
                  at: tuple[str, ...] = ()) -> RunConfig:
        """A config from a table (an experiment file's, a record's), every key and type
        checked: a bad one is a one-line UsageError naming ``where`` and the key."""
        return validated(cls, d, where, doc=doc, at=at)

    def redacted(self) -> list[str]:
        """Where this config holds ``<redacted>`` (read back from a record, whose secrets
        were never written): such a config cannot be run as it is."""
        return redacted_paths({"env": self.env, "engine_args": self.engine_args,
                               "engine_options": self.engine_options})

    @property
    def engine_spec(self) -> EngineSpec:
        return EngineSpec(self.engine, self.model, self.engine_args, self.engine_options,
                          self.env)


@dataclass(frozen=True)
class PreparedRun:
    """A validated run: what to load and exactly which (item, seed) pairs to produce."""

    config: RunConfig
    engine: PreparedEngine
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


MAX_SEED = 2**32 - 1  # exclusive: 0xFFFFFFFF is llama.cpp's LLAMA_DEFAULT_SEED (random)


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
    for seed in c.seeds:  # llama.cpp takes -1 (and 2**32 - 1) as "a random seed"
        if not 0 <= seed < MAX_SEED:
            raise UsageError(f"--seeds: seed {seed} is out of range 0..{MAX_SEED - 1} (a "
                             "negative seed means a random one to llama.cpp, so the record "
                             "would not reproduce the outputs)")


MAX_PROMPT_CHARS = 1_000_000  # ~250k tokens: beyond any context a run is given


def _check_prompt_sizes(items: tuple[Item, ...], prompt: PromptConfig,
                        shots: tuple[tuple[str, str], ...]) -> None:
    """An over-long prompt (a megabyte question, system prompt or shot) is refused here,
    before an engine tokenizes it."""
    for item in items:
        size = content_chars(build_messages(item, prompt, shots))
        if size > MAX_PROMPT_CHARS:
            raise UsageError(f"item {item.id[:80]!r}: its prompt has {size:,} characters, "
                             f"over the {MAX_PROMPT_CHARS:,} abgate accepts (check the data, "
                             "--system and the shots)")


def prepare(c: RunConfig) -> PreparedRun:
    _check_sampling(c)
    engine = prepare_engine(c.engine_spec)
    suite = load_suite(c.suite, c.data, c.difficulty, c.synthetic_seed)
    items = tuple(select_items(suite.items, c.limit, c.sample, c.sample_seed))
    prompt = PromptConfig(c.shots, c.shots_file, c.system)
    shots = tuple(resolve_shots(prompt, items))
    _check_prompt_sizes(items, prompt, shots)
    spec = {
        **engine.record(),
        "suite": {"name": suite.name, "source": suite.source, "data_sha256": suite.data_sha256,
                  "n_available": len(suite.items)},
        "selection": {"limit": c.limit, "sample": c.sample, "sample_seed": c.sample_seed},
        "item_ids": [i.id for i in items],
        "seeds": list(c.seeds),
        "sampling": {"max_tokens": c.max_tokens, "temperature": c.temperature,
                     "top_p": c.top_p, "top_k": c.top_k},
        "prompt": _prompt_record(prompt, shots),
    }
    return PreparedRun(c, engine, suite, items, prompt, shots, spec, json_sha256(spec))


def _prompt_record(prompt: PromptConfig, shots: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    """The prompt as recorded: with shots, the SHA-256 of the shots used (a shots file
    edited between a start and a resume changes the spec, so the resume is refused)."""
    d = prompt.to_dict()
    if shots:
        d["shots_sha256"] = json_sha256([list(s) for s in shots])
    return d


def abgate_version() -> str:
    return __version__
