"""Prompt construction: zero-shot chat (default) or k-shot chat.

Shots never come from the evaluated split: the built-in exemplars were written for
abgate (they are not GSM8K items), and a user-supplied shots file is checked for
overlap with the items under evaluation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from abgate.engines.base import Message
from abgate.errors import UsageError
from abgate.safejson import BadJson, parse
from abgate.suites.base import Item

PROMPT_VERSION = "v1"
INSTRUCTION = (
    "Solve the following math problem step by step. "
    "At the end, write the final answer as a single integer inside \\boxed{{}}.\n\n"
    "Problem: {question}"
)

# Written for abgate; deliberately not taken from any benchmark split.
BUILTIN_SHOTS: tuple[tuple[str, str], ...] = (
    ("A baker makes 4 trays of muffins with 9 muffins on each tray. She sells 20 muffins. "
     "How many muffins are left?",
     "She makes 4 * 9 = 36 muffins. After selling 20, 36 - 20 = 16 are left.\n\\boxed{16}"),
    ("Tom reads 12 pages a day for 5 days, then 8 pages on the sixth day. How many pages "
     "did he read in total?",
     "In 5 days he reads 12 * 5 = 60 pages. Adding the sixth day: 60 + 8 = 68.\n\\boxed{68}"),
    ("A box holds 48 crayons. They are shared equally among 6 children. Each child then "
     "loses 2 crayons. How many crayons does each child have?",
     "Each child gets 48 / 6 = 8 crayons. After losing 2: 8 - 2 = 6.\n\\boxed{6}"),
    ("A farmer has 3 fields with 25 cows each and sells 17 cows. How many cows remain?",
     "He has 3 * 25 = 75 cows. After selling 17: 75 - 17 = 58.\n\\boxed{58}"),
    ("Mia saves $15 each week for 7 weeks and spends $40 on a game. How many dollars "
     "does she have left?",
     "She saves 15 * 7 = 105 dollars. After the game: 105 - 40 = 65.\n\\boxed{65}"),
    ("A train has 9 cars with 42 seats each. 250 seats are taken. How many seats are free?",
     "There are 9 * 42 = 378 seats. Free seats: 378 - 250 = 128.\n\\boxed{128}"),
    ("A school orders 14 boxes of 30 pencils and gives 6 pencils to each of 55 students. "
     "How many pencils are left over?",
     "It orders 14 * 30 = 420 pencils and gives away 6 * 55 = 330. Left: 420 - 330 = 90."
     "\n\\boxed{90}"),
    ("A tank holds 500 litres. It leaks 35 litres a day for 4 days and is then topped up "
     "with 60 litres. How many litres are in it?",
     "It loses 35 * 4 = 140 litres: 500 - 140 = 360. Topping up: 360 + 60 = 420."
     "\n\\boxed{420}"),
)


@dataclass(frozen=True)
class PromptConfig:
    """How items become chat messages. Recorded in ``run.json``."""

    shots: int = 0
    shots_file: str | None = None
    system: str | None = None

    def to_dict(self) -> dict[str, object]:
        return {"version": PROMPT_VERSION, "shots": self.shots, "shots_file": self.shots_file,
                "system": self.system, "instruction": INSTRUCTION}


def _load_shots_file(path: Path) -> list[tuple[str, str]]:
    if not path.exists():
        raise UsageError(f"shots file not found: {path}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: shots file is not UTF-8 text (bad byte at offset "
                         f"{exc.start})") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the shots file ({exc.strerror or exc})") from None
    shots = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = parse(line)
            shots.append((str(rec["question"]), str(rec["answer"])))
        except (BadJson, KeyError, TypeError):
            raise UsageError(f"{path}:{lineno}: expected {{\"question\": ..., \"answer\": ...}}"
                             ) from None
    return shots


def resolve_shots(config: PromptConfig, items: Sequence[Item]) -> list[tuple[str, str]]:
    """The (question, answer) shots to prepend; refuses shots that are evaluated items."""
    if config.shots < 0:
        raise UsageError(f"--shots must be >= 0, got {config.shots}")
    if config.shots == 0:
        return []
    pool = (_load_shots_file(Path(config.shots_file)) if config.shots_file
            else list(BUILTIN_SHOTS))
    if config.shots > len(pool):
        raise UsageError(f"--shots {config.shots}: only {len(pool)} shots available")
    shots = pool[: config.shots]
    evaluated = {" ".join(item.question.split()) for item in items}
    for question, _ in shots:
        if " ".join(question.split()) in evaluated:
            raise UsageError("a shot is also an evaluated item; shots must come from "
                             f"another split: {question[:60]!r}")
    return shots


def build_messages(item: Item, config: PromptConfig,
                   shots: Sequence[tuple[str, str]]) -> tuple[Message, ...]:
    messages: list[Message] = []
    if config.system:
        messages.append({"role": "system", "content": config.system})
    for question, answer in shots:
        messages.append({"role": "user", "content": INSTRUCTION.format(question=question)})
        messages.append({"role": "assistant", "content": answer})
    content = item.question if item.scorer is not None else INSTRUCTION.format(
        question=item.question)  # a generic suite's prompt is the user's, as written
    messages.append({"role": "user", "content": content})
    return tuple(messages)
