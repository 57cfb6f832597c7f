"""A procedural, seeded, offline grade-school math suite.

Each problem is a short story: a starting quantity and 1-4 arithmetic steps
(add, take away, multiply, share equally), with an exact integer answer that is
computed alongside the text, never parsed back from it. The same
``(difficulty, seed)`` always gives the same problems, on any machine.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from abgate.errors import UsageError, did_you_mean
from abgate.suites.base import Item, Suite

NAMES = ("Ava", "Ben", "Chloe", "Diego", "Emma", "Farid", "Grace", "Hiro", "Isla", "Jonas",
         "Keiko", "Liam", "Maya", "Noah", "Olga", "Priya", "Quinn", "Rosa", "Sam", "Tariq")
THINGS = ("apples", "stickers", "marbles", "pencils", "cookies", "stamps", "shells", "books",
          "coins", "cards", "beads", "candles")
PLACES = ("a market", "the school fair", "a garage sale", "the corner shop", "a bakery")


@dataclass(frozen=True)
class Level:
    steps: tuple[int, int]  # inclusive range of arithmetic steps
    start: tuple[int, int]  # range of the starting quantity
    operand: tuple[int, int]  # range of additive operands
    factor: tuple[int, int]  # range of multipliers / group sizes


LEVELS = {
    "trivial": Level(steps=(1, 1), start=(2, 12), operand=(1, 9), factor=(2, 2)),
    "easy": Level(steps=(1, 2), start=(3, 20), operand=(1, 10), factor=(2, 3)),
    "medium": Level(steps=(2, 3), start=(10, 60), operand=(2, 30), factor=(2, 5)),
    "hard": Level(steps=(3, 4), start=(20, 200), operand=(5, 120), factor=(2, 9)),
}


def _step(rng: random.Random, who: str, what: str, total: int, lv: Level) -> tuple[str, int]:
    """One arithmetic step as a sentence and the new total (always a positive integer)."""
    ops = ["add", "multiply"]
    if total > lv.operand[0] + 1:
        ops.append("subtract")
    divisors = [d for d in range(lv.factor[0], lv.factor[1] + 1) if total % d == 0]
    if divisors and total // max(divisors) >= 1:
        ops.append("share")
    op = rng.choice(ops)
    if op == "add":
        n = rng.randint(*lv.operand)
        if rng.random() < 0.5:
            return f"{who} buys {n} more {what} at {rng.choice(PLACES)}.", total + n
        k, per = rng.randint(*lv.factor), max(1, n // 2)
        return f"{who} then gets {k} packs with {per} {what} in each.", total + k * per
    if op == "subtract":
        n = rng.randint(lv.operand[0], min(lv.operand[1], total - 1))
        return f"{who} gives {n} {what} to a friend.", total - n
    if op == "multiply":
        k = rng.randint(*lv.factor)
        word = {2: "doubles", 3: "triples"}.get(k, f"grows {k} times")
        return f"By the end of the month {who}'s collection {word}.", total * k
    d = rng.choice(divisors)
    return (f"{who} shares all the {what} equally among {d} boxes and keeps one box.",
            total // d)


def make_problem(rng: random.Random, lv: Level) -> tuple[str, int]:
    who, what = rng.choice(NAMES), rng.choice(THINGS)
    total = rng.randint(*lv.start)
    sentences = [f"{who} has {total} {what}."]
    for _ in range(rng.randint(*lv.steps)):
        sentence, total = _step(rng, who, what, total, lv)
        sentences.append(sentence)
    sentences.append(f"How many {what} does {who} have now?")
    return " ".join(sentences), total


def load(difficulty: str = "easy", seed: int = 0, size: int = 500) -> Suite:
    """``size`` problems of ``difficulty`` generated from ``seed``."""
    lv = LEVELS.get(difficulty)
    if lv is None:
        raise UsageError(f"unknown difficulty {difficulty!r}; expected one of "
                         f"{', '.join(LEVELS)}" + did_you_mean(difficulty, LEVELS))
    rng = random.Random(f"abgate-synthetic/{difficulty}/{seed}")
    items = []
    for i in range(size):
        question, answer = make_problem(rng, lv)
        items.append(Item(id=f"synth-{difficulty}-{seed}-{i:04d}", question=question,
                          answer=answer))
    return Suite("synthetic", tuple(items), f"synthetic:{difficulty}:seed={seed}", None)
