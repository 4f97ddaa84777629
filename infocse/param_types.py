"""The types of params (what a value must be), how a refusal reads (one line naming the dotted param,
what it must be and what it is) and how the keys of older params files are named. The schema that
uses them is infocse/config.py."""

import math
import re
from typing import Annotated

from pydantic import PlainValidator
from pydantic_core import PydanticCustomError


def rule(wanted: str, accept) -> PlainValidator:
    """A param type: `accept(value)` returns the value to keep, or raises ValueError: 'must be {wanted}'."""
    def validate(value):
        try:
            return accept(value)
        except (ValueError, TypeError):
            raise PydanticCustomError("param", "must be " + wanted) from None  # (no context: braces stay as they are)
    return PlainValidator(validate)


def check(ok: bool, value):
    if not ok:
        raise ValueError
    return value


def integer(minimum: int = 1, or_word: str | None = None):
    """An integer >= minimum; `or_word` ("all", "auto") is also accepted and read as None."""
    def accept(value):
        if or_word is not None and (value == or_word or (or_word == "all" and value is None)):
            return None
        return check(isinstance(value, int) and not isinstance(value, bool) and value >= minimum, value)
    return rule(f"an integer >= {minimum}" + (f' or "{or_word}"' if or_word else ""), accept)


def number(low: float, high: float, low_open: bool = False, high_open: bool = False):
    """A finite float in a range; a numeric string is one (YAML reads `5e-5` as a string)."""
    def accept(value):
        number = float(check(not isinstance(value, (bool, list, dict)) and value is not None, value))
        return check(math.isfinite(number) and (number > low if low_open else number >= low)
                      and (number < high if high_open else number <= high), number)
    bounds = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open or high == math.inf else ']'}"
    return rule(f"a number in {bounds}", accept)


def choice(choices):
    """One of `choices` (strings)."""
    def accept(value):
        return check(isinstance(value, str) and value in choices, value)
    return Annotated[str, rule(f"one of {list(choices)}", accept)]


def text(null: bool = False) -> PlainValidator:
    def accept(value):
        return value if value is None and null else check(isinstance(value, str) and value != "", value)
    return rule("a non-empty string" + (" or null" if null else ""), accept)


def chain(first: int, expected_prev, allow_empty: bool, as_list: bool) -> PlainValidator:
    """Items {n: {prev: ...}} numbered first..N, each naming its predecessor (DVC templates have no
    arithmetic); a problem is one line, and each bad `prev` its own line naming that item."""
    def validate(raw):
        def fail(text):
            raise PydanticCustomError("line", text)
        if raw is None and allow_empty:  # `rounds:` with every item commented out
            return [] if as_list else {}
        if not isinstance(raw, dict):
            fail(f"must be a mapping of numbered items, got {raw!r} ({type(raw).__name__})")
        try:
            numbers = sorted(int(key) for key in raw)
        except (TypeError, ValueError):
            fail(f"must be numbered items, got {sorted(map(str, raw))}")
        if not numbers and not allow_empty:
            fail("is empty: InfoCSE needs at least one iteration")
        if numbers != list(range(first, first + len(numbers))):
            fail(f"must be numbered {first}..N, got {numbers}")
        chain = {}
        for number in numbers:
            item = raw.get(str(number), raw.get(number)) or {}
            chain[number] = item.get("prev") if isinstance(item, dict) else None
        bad = [f"`.{n}.prev` must be {expected_prev(n)!r}, got {prev!r}"
               for n, prev in chain.items() if prev != expected_prev(n)]
        if bad:
            fail("\n".join(bad))
        return list(chain) if as_list else chain
    return PlainValidator(validate)


Integer = Annotated[int, integer()]
OrAll = Annotated[int | None, integer(or_word="all")]
OrAuto = Annotated[int | None, integer(or_word="auto")]  # None: chosen at run time (by device)
Text = Annotated[str, text()]
Flag = Annotated[bool, rule("true or false", lambda value: check(isinstance(value, bool), value))]
Fraction = Annotated[float, number(0.0, 1.0)]
Positive = Annotated[float, number(0.0, math.inf, low_open=True)]
Device = Annotated[str, rule("auto, cpu, cuda or cuda:N", lambda value: check(
    isinstance(value, str) and re.fullmatch(r"auto|cpu|cuda(:\d+)?", value) is not None, value))]


MESSAGES = {"missing": "is missing", "extra_forbidden": "is not a known param (a typo? see params.yaml for the names)",
            "model_type": "must be a mapping", "model_attributes_type": "must be a mapping"}


def refusal(error: dict) -> str:
    dotted = ".".join(str(part) for part in error["loc"])
    if error["type"] == "line":  # a chain's problems: each line names its item
        return "\n".join(f"params `{dotted}` {line}".replace("` `.", ".") for line in error["msg"].split("\n"))
    line = f"params `{dotted}` {MESSAGES.get(error['type'], error['msg'])}"
    if error["type"] not in ("missing", "extra_forbidden"):
        line += f", got {error['input']!r} ({type(error['input']).__name__})"
    return line


RENAMED_PARAMS = {"annotators": "baselines", "idc.first_round_annotator": "idc.first_round_model"}  # old: new


def old_params(raw: dict, precision_sections) -> list[str]:
    """Params of older params.yaml files: one line each (not one per key the new name lacks); the
    value is moved to its new place so the rest is checked as usual."""
    problems = []
    for section in precision_sections:  # one value for every stage now, and no `auto` that differs by machine
        node = raw.get(section)
        if isinstance(node, dict) and "precision" in node:
            problems.append(f"params `{section}.precision` ({node.pop('precision')!r}) is now the one top-level "
                            "`precision` that every stage reads: fp32 (default), bf16 or fp16")
    for old_name, new_name in RENAMED_PARAMS.items():
        *parents, last = old_name.split(".")
        node = raw
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict) and last in node:
            problems.append(f"params `{old_name}` is now `{new_name}`: rename it (docs/parameters.md)")
            value = node.pop(last)
            *parents, last = new_name.split(".")
            node = raw
            for part in parents:
                node = node.setdefault(part, {})
            node.setdefault(last, value)
    return problems
