"""``abgate baseline upgrade DIR``: re-seal a baseline written by an older abgate under
today's rules, after verifying what can be verified.

- A seal of version 2 (today's) is verified over the bytes on disk; the file is left
  as it is when its schema is current too.
- An older seal is verified over the content as it is (``integrity.verify_old_rules``);
  one that does not verify, or that matches only with the content redacted again (an
  edit inside a redacted value, which the old reader missed), is refused (exit 2,
  nothing written).
- A baseline recorded before seals existed has nothing that vouches for its content: it
  is refused unless ``accept_unsealed``, and then re-sealed as it is.

The content is read through today's model (schema migrations applied, every field
checked) and must be a baseline a check can use; the new seal's document gets an
``upgrades`` entry: what was verified, the previous file's SHA-256 and schema version,
and the abgate that upgraded it. The file is rewritten atomically.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from abgate import __version__
from abgate.baseline.core import BASELINE_FILE, check_readable
from abgate.errors import UsageError
from abgate.identity import sha256_bytes
from abgate.integrity import (
    VERSION,
    parse_bytes,
    read_bytes,
    verify_file,
    verify_old_rules,
)
from abgate.records.documents import BaselineRecord
from abgate.records.migrations import Stamp
from abgate.runner.documents import read_record, write_record

Verified = Literal["current", "old seal", "unsealed"]


@dataclass(frozen=True)
class Upgrade:
    """What ``upgrade_baseline`` found and did."""

    path: Path
    verified: Verified
    previous_sha256: str
    written: bool

    def summary(self) -> str:
        if not self.written:
            return f"{self.path}: already sealed under today's rules; nothing to do"
        how = {"old seal": "its old seal verified over the content as it is",
               "unsealed": "never sealed: re-sealed as it is (--accept-unsealed)",
               "current": "its seal verified; schema migrated"}[self.verified]
        return (f"{self.path}: upgraded ({how}; previous sha256 "
                f"{self.previous_sha256[:16]})")


def _verify(path: Path, doc: dict[str, Any], accept_unsealed: bool) -> Verified:
    stamp = Stamp.of(doc)
    if stamp.seal_version == VERSION:
        verify_file(path)
        return "current"
    if stamp.seal is not None:
        verify_old_rules(path, doc)
        return "old seal"
    if not accept_unsealed:
        raise UsageError(f"{path}: was never sealed (recorded before seals): nothing vouches "
                         "for its content; record it again, or pass --accept-unsealed to "
                         "seal it as it is now (its current sha256 is recorded)")
    return "unsealed"


def upgrade_baseline(base_dir: Path, *, accept_unsealed: bool = False) -> Upgrade:
    """Verify ``base_dir/baseline.json`` as far as it can be and re-seal it under
    today's rules (see the module doc); bad input is a UsageError, nothing written."""
    path = base_dir / BASELINE_FILE
    if not path.is_file():
        raise UsageError(f"{base_dir}: no {BASELINE_FILE} to upgrade")
    data = read_bytes(path)
    raw = parse_bytes(path, data)
    verified = _verify(path, raw, accept_unsealed)
    previous = sha256_bytes(data)
    current, stamp = BaselineRecord.current_version(), Stamp.of(raw)
    if verified == "current" and stamp.schema_version == current:
        return Upgrade(path, verified, previous, written=False)
    doc = read_record(path, "baseline", model=BaselineRecord)  # migrated, every field checked
    check_readable(path, doc)
    doc.schema_version = current
    doc.upgrades = [*(doc.upgrades or []), {
        "verified": verified, "previous_sha256": previous,
        "previous_schema_version": stamp.schema_version,
        "previous_seal_version": stamp.seal_version,
        "upgraded_by": __version__, "upgraded_at": time.time()}]
    doc.integrity = None
    doc.seal()
    write_record(path, doc)
    verify_file(path)  # what was written reads back under today's rules
    return Upgrade(path, verified, previous, written=True)
