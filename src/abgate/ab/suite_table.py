"""An experiment's ``[suites.NAME]`` tables: several suites gated in one verdict.

```toml
[suites.gsm8k]
suite = "gsm8k"
data = "../shared/data/gsm8k/test.jsonl"
limit = 200
policy = "gsm8k-policy.toml"     # this suite's thresholds (default: the experiment's)

[suites.qa]
suite = "jsonl"                  # the generic suite: a user's prompts and text answers
data = "qa.jsonl"
max_tokens = 32
```

Each table overrides the ``[shared]`` keys that choose *what* is asked (the suite, its
data and selection, the output length) for every arm; each suite runs as its own matched
A/B (``OUT/suites/NAME/``) and one verdict over all of them controls the family-wise
error with Holm (:mod:`abgate.compare.holm`).
"""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

from pydantic.dataclasses import dataclass

from abgate.runner.spec import RunConfig
from abgate.schema import FORBID, Int, Str

__all__ = ["SuiteTable", "suite_config"]


@dataclass(frozen=True, config=FORBID)
class SuiteTable:
    suite: Str
    data: Str | None = None
    difficulty: Str | None = None
    synthetic_seed: Int | None = None
    limit: Int | None = None
    sample: Int | None = None
    sample_seed: Int | None = None
    max_tokens: Int | None = None
    policy: Str | None = None  # this suite's thresholds (a policy file or shipped name)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)
                if getattr(self, f.name) is not None}


def suite_config(cfg: RunConfig, table: SuiteTable) -> RunConfig:
    """``cfg`` asking ``table``'s suite: its keys replace the shared ones; ``limit`` and
    ``sample`` replace each other (a suite's ``sample`` clears a shared ``limit``)."""
    keys = {f.name: v for f in fields(table)
            if f.name != "policy" and (v := getattr(table, f.name)) is not None}
    if "sample" in keys and "limit" not in keys:
        keys["limit"] = None
    if "limit" in keys and "sample" not in keys:
        keys["sample"] = None
    if "data" not in keys:
        keys["data"] = None  # a shared data file belongs to the shared suite
    return replace(cfg, **keys)
