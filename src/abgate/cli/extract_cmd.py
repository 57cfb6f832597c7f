"""``abgate extract``: re-score model outputs with abgate's answer extractor.

``abgate extract TEXT`` prints the integer answer or ``invalid: <reason>``.
``abgate extract --jsonl`` reads JSON lines from stdin and writes one
``{"value", "source", "reason"}`` line per non-blank input line, in order;
``--field`` picks the text out of another harness's sample records.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any, TextIO

import typer

from abgate.cli.typer_app import app
from abgate.errors import UsageError
from abgate.safejson import BadJson, parse
from abgate.scoring.extract import Extraction, extract_integer
from abgate.scoring.numbers import format_int, parse_digits

__all__ = ["extract", "resolve_field"]


def resolve_field(record: Any, path: str) -> Any:
    """Follow a dotted path such as ``resps.0.0`` through dicts and lists.

    A part is a dict key, or a list index (negative counts from the end). Raises
    ValueError with a message that names the part that could not be followed.
    """
    current = record
    walked: list[str] = []
    for part in path.split("."):
        where = ".".join(walked) or "the record"
        if isinstance(current, dict):
            if part not in current:
                keys = ", ".join(sorted(map(str, current))[:8])
                raise ValueError(f"{where} has no key {part!r} (keys: {keys})")
            current = current[part]
        elif isinstance(current, list):
            try:
                current = current[int(part)]
            except ValueError:
                raise ValueError(f"{where} is a list; {part!r} is not an index") from None
            except IndexError:
                raise ValueError(f"{where} has {len(current)} items; no index {part}") from None
        else:
            raise ValueError(f"{where} is {type(current).__name__}, cannot take {part!r}")
        walked.append(part)
    return current


def _exact_int(literal: str) -> int:
    """JSON integers of any length (``json`` alone refuses more than 4300 digits)."""
    return -parse_digits(literal[1:]) if literal.startswith("-") else parse_digits(literal)


def _text_at(record: Any, path: str) -> str:
    value = resolve_field(record, path)
    if isinstance(value, str):
        return value
    hint = f" (try '{path}.0')" if isinstance(value, list) and value else ""
    raise ValueError(f"field {path!r} is {type(value).__name__}, not a string{hint}")


def _json_line(extraction: Extraction, explain: bool) -> str:
    value = "null" if extraction.value is None else format_int(extraction.value)
    line = (
        f'{{"value": {value}, "source": {json.dumps(extraction.source)}, '
        f'"reason": {json.dumps(extraction.reason)}'
    )
    if explain:
        line += f', "span": {json.dumps(extraction.span)}'
    return line + "}"


def _score_jsonl(source: TextIO, sink: TextIO, field: str, explain: bool) -> int:
    """Score every non-blank JSON line of ``source``; returns how many were scored."""
    scored = 0
    for number, raw in enumerate(source, start=1):
        if not raw.strip():
            continue
        try:  # integers of any length are read exactly; the nesting is still guarded
            record = parse(raw, max_digits=None, parse_int=_exact_int)
        except BadJson as exc:
            why = exc.reason if exc.detail is None else f"invalid JSON ({exc.detail})"
            raise UsageError(f"stdin line {number}: {why}") from None
        try:
            text = _text_at(record, field)
        except ValueError as exc:
            raise UsageError(f"stdin line {number}: {exc}") from None
        sink.write(_json_line(extract_integer(text), explain) + "\n")
        scored += 1
    sink.flush()
    return scored


def _print_one(text: str, explain: bool) -> None:
    extraction = extract_integer(text)
    if extraction.value is not None:
        typer.echo(format_int(extraction.value))
    else:
        typer.echo(f"invalid: {extraction.reason}")
    if explain:
        typer.echo(f"source: {extraction.source}")
        typer.echo(f"span: {extraction.span!r}")


@app.command("extract")
def extract(
    text: Annotated[
        str | None,
        typer.Argument(metavar="TEXT", help="A model output; '-' reads all of stdin as one."),
    ] = None,
    jsonl: Annotated[
        bool,
        typer.Option("--jsonl", help="Read JSON lines from stdin, write one result per line."),
    ] = False,
    field: Annotated[
        str | None,
        typer.Option(
            "--field",
            metavar="PATH",
            help="With --jsonl: dotted path to the text, e.g. 'resps.0.0' (default: 'text').",
        ),
    ] = None,
    explain: Annotated[
        bool, typer.Option("--explain", help="Also show the rule and the span it read.")
    ] = False,
) -> None:
    """Read the integer answer from model output, exactly as abgate scores it."""
    if jsonl:
        if text is not None:
            raise UsageError("give TEXT or --jsonl, not both")
        _score_jsonl(sys.stdin, sys.stdout, field or "text", explain)
        return
    if field is not None:
        raise UsageError("--field only applies with --jsonl")
    if text is None:
        raise UsageError("nothing to read: give TEXT, '-' for stdin, or --jsonl")
    _print_one(sys.stdin.read() if text == "-" else text, explain)
