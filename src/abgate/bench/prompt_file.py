"""Your own fixed prompt for ``bench`` and ``baseline``: ``--prompt-file FILE``.

A prompt file is either token IDs as JSON (a list of integers, or an object with a
``token_ids`` list: the form another tool's prompt SHA is taken over) or UTF-8 text,
tokenized by the engine under test without special tokens (as the filler is). It is
read once, before anything loads, and its content is kept in the recorded config (a
baseline check re-runs it without the file). The prompt's identity is the SHA-256 of
its token IDs, as for the filler (:func:`abgate.bench.prompts.prompt_sha256`), and
``--expect-prompt-sha`` refuses a run whose prompt does not have the expected SHA.

Each ``--input-len N`` benches the first N tokens; ``max`` the first ``n_ctx - output``;
no ``--input-len`` the whole prompt. The recorded form is read back through its model,
``records.bench_sections.PromptFileRecord`` (``bench.run.prompt_ids``); this module
reads only the user's file.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from abgate.errors import UsageError
from abgate.safejson import BadJson, parse, read_bytes

MAX_PROMPT_BYTES = 64 << 20  # a prompt file is read whole, before anything loads
MAX_TOKEN_ID = 1 << 31  # engines index tokens with int32


def read_prompt_file(path: str) -> dict[str, Any]:
    """The recorded form: ``{"file", "file_sha256", "token_ids"}`` or ``{..., "text"}``."""
    p = Path(path)
    raw = read_bytes(p, max_bytes=MAX_PROMPT_BYTES, where=f"--prompt-file {path}")
    out: dict[str, Any] = {"file": str(p), "file_sha256": hashlib.sha256(raw).hexdigest()}
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"--prompt-file {path}: not UTF-8 text (bad byte at offset "
                         f"{exc.start})") from None
    stripped = text.lstrip()
    if p.suffix.lower() == ".json" or stripped.startswith(("[", "{")):
        out["token_ids"] = _token_ids(path, text)
    elif not text:
        raise UsageError(f"--prompt-file {path}: empty")
    else:
        out["text"] = text
    return out


def _token_ids(path: str, text: str) -> list[int]:
    try:
        doc = parse(text)
    except BadJson as exc:
        raise UsageError(f"--prompt-file {exc.at(path)}; token IDs are a JSON list of "
                         "integers") from None
    ids = doc.get("token_ids") if isinstance(doc, dict) else doc
    if not isinstance(ids, list) or not ids:
        raise UsageError(f"--prompt-file {path}: expected a non-empty JSON list of token IDs "
                         "(or an object with a 'token_ids' list)")
    for i, t in enumerate(ids):
        if not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < MAX_TOKEN_ID:
            shown = repr(t) if len(repr(t)) <= 40 else repr(t)[:37] + "..."
            raise UsageError(f"--prompt-file {path}: token_ids[{i}] is {shown}, not an "
                             f"integer from 0 to {MAX_TOKEN_ID - 1}")
    return list(ids)
