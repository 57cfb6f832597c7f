"""Fixed-length synthetic prompts in the engine's own tokenizer.

A bench prompt is exactly ``N`` token IDs: deterministic, natural-looking English
filler (sentences drawn from fixed word lists with a seeded generator) tokenized by the
engine under test, then cut to the first ``N`` IDs. No BOS or other special token is
added. The prompt is fed to the engine as token IDs, so the engine sees exactly those
``N`` tokens and nothing is ever re-tokenized. Its identity is the SHA-256 of the IDs
(:func:`abgate.runner.samples.ids_sha256`: comma-joined decimal IDs), so the same
tokenizer and seed always give the same SHA, and a different tokenizer gives a
different one.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from functools import lru_cache

from abgate.errors import UsageError
from abgate.records.samples import ids_sha256

Tokenize = Callable[[str], list[int]]

_SUBJECTS = (
    "The old harbour keeper", "A young engineer", "The village baker", "Our neighbour",
    "The river pilot", "A quiet librarian", "The school teacher", "The night nurse",
    "A travelling musician", "The city gardener", "The museum guide", "A retired sailor",
    "The farmer next door", "The station master", "A curious student", "The carpenter",
)
_VERBS = (
    "repaired", "painted", "carried", "counted", "described", "collected", "cleaned",
    "measured", "inspected", "arranged", "wrapped", "sorted", "polished", "delivered",
    "photographed", "catalogued",
)
_OBJECTS = (
    "the wooden boats", "a basket of apples", "the broken clock", "three heavy boxes",
    "the garden fence", "a stack of letters", "the brass lanterns", "the old maps",
    "a pair of boots", "the kitchen shelves", "the spare tyres", "a crate of books",
    "the blue bicycle", "the window frames", "a bundle of firewood", "the stone steps",
)
_TAILS = (
    "before the winter storms arrived", "while the rain kept falling", "early in the morning",
    "after the market had closed", "with great care", "as the sun went down",
    "without saying a word", "because the season was changing", "on a cold Tuesday",
    "in the shade of the chestnut tree", "just before lunch", "for the spring festival",
    "near the end of the long summer", "while the children watched", "in record time",
    "as everyone had expected",
)
_LINKS = ("Later that day,", "Meanwhile,", "In the afternoon,", "The next week,",
          "Not long after,", "By evening,")


def _sentence(rnd: random.Random, first: bool) -> str:
    subject = rnd.choice(_SUBJECTS)
    body = f"{rnd.choice(_VERBS)} {rnd.choice(_OBJECTS)} {rnd.choice(_TAILS)}."
    if not first and rnd.random() < 0.3:
        return f"{rnd.choice(_LINKS)} {subject[0].lower()}{subject[1:]} {body}"
    return f"{subject} {body}"


def filler_sentences(n_sentences: int, seed: int = 0) -> list[str]:
    """``n_sentences`` deterministic sentences (the same for the same seed everywhere)."""
    rnd = random.Random(seed)
    return [_sentence(rnd, first=i % 5 == 0) for i in range(n_sentences)]


def join_paragraphs(sentences: Sequence[str], per_paragraph: int = 5) -> str:
    return "\n\n".join(" ".join(sentences[i:i + per_paragraph])
                        for i in range(0, len(sentences), per_paragraph))


@lru_cache(maxsize=16)
def filler_text(n_sentences: int, seed: int = 0) -> str:
    """Deterministic prose: ``n_sentences`` sentences, paragraphs of five."""
    return join_paragraphs(filler_sentences(n_sentences, seed))


MAX_SHIFT = 256


def fixed_length_prompt(tokenize: Tokenize, n_tokens: int, seed: int = 0,
                        text_stable: Callable[[list[int]], bool] | None = None) -> list[int]:
    """Exactly ``n_tokens`` token IDs of filler in ``tokenize``'s vocabulary.

    For an engine that can only be sent text (``text_stable`` given), the window of
    ``n_tokens`` IDs slides forward over the filler until its text tokenizes back to
    exactly the same IDs, so the prompt the server sees is the prompt planned."""
    if n_tokens < 1:
        raise UsageError(f"input length must be >= 1 token, got {n_tokens}")
    n_sentences = max(8, (n_tokens + (MAX_SHIFT if text_stable else 0)) // 12)
    while True:
        ids = tokenize(filler_text(n_sentences, seed))
        if len(ids) >= n_tokens + (MAX_SHIFT if text_stable else 0):
            break
        n_sentences *= 2
    if text_stable is None:
        return list(ids[:n_tokens])
    for shift in range(MAX_SHIFT):
        window = list(ids[shift:shift + n_tokens])
        if text_stable(window):
            return window
    raise UsageError(f"no {n_tokens}-token filler prompt survives this engine's text round "
                     "trip; it cannot be benched with exact-length prompts")


def prompt_sha256(ids: Sequence[int]) -> str:
    sha = ids_sha256(ids)
    assert sha is not None
    return sha


def parse_input_lens(text: str) -> list[int | None]:
    """``"512,2048,max"`` -> ``[512, 2048, None]`` (``None``: fill the context)."""
    out: list[int | None] = []
    for part in (p.strip() for p in text.split(",")):
        if part.lower() == "max":
            out.append(None)
        elif part.isdigit() and int(part) > 0:
            out.append(int(part))
        else:
            raise UsageError(f"--input-len {text!r}: expected positive integers or 'max', "
                             f"comma-separated (bad part {part!r})")
    if not out:
        raise UsageError("--input-len needs at least one length")
    return out


def input_lens(text: str | None, prompt_file: str | None,
               default: str) -> tuple[int | None, ...]:
    """``--input-len`` as given; unset: ``default``, or with a ``--prompt-file`` none
    (the whole prompt is one case)."""
    if text is None:
        return () if prompt_file else tuple(parse_input_lens(default))
    return tuple(parse_input_lens(text))


def parse_shas(text: str | None) -> list[str]:
    """``--expect-prompt-sha``: comma-separated SHA-256 hex digests."""
    if not text:
        return []
    shas = [s.strip().lower() for s in text.split(",")]
    for s in shas:
        if len(s) != 64 or any(c not in "0123456789abcdef" for c in s):
            raise UsageError(f"--expect-prompt-sha: {s!r} is not a SHA-256 hex digest")
    return shas
