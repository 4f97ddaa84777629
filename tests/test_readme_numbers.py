"""Every decimal number in the README's results section comes from a generated file.

The section runs from the heading that starts with `## Results` to the next `## ` heading. Each
decimal there (0.683, +0.046, −0.159, 12.5%) must appear, as the same digits, in a generated
report (reports/comparison.md, reports/fewshot.md, reports/paper_tables.md, reports/precision.md,
reports/report.md, benchmarks/results/*.md) or as a value of the committed metrics
(metrics/**/*.json, written with 3 decimals, signed or not). A negative number must be quoted negative; a percent sign is not
compared. Numbers inside code (`...` or fenced blocks) are not claims and are skipped. An estimate
quoted with its interval, `+0.046 [+0.013, +0.079]`, must appear as that whole triple in a
generated report (a table cell boundary between the estimate and its interval is allowed): three
numbers each found somewhere are not enough. Regenerate the reports with
`python -m scripts.make_reports`, then quote them; never retype a number.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REPORTS = ("reports/comparison.md", "reports/fewshot.md", "reports/paper_tables.md", "reports/precision.md",
           "reports/report.md")
REPORT_GLOBS = ("benchmarks/results/*.md",)
METRICS_GLOB = "metrics/**/*.json"

# A decimal with an optional sign, not part of a longer dotted token (a version such as 2.13.0),
# a word, or a number in exponent notation.
NUMBER = re.compile(r"(?<![\w.])([+\-\u2212]?)(\d+\.\d+)(?![\d.]*\d)(?![eE][+\-]?\d)")
SIGNED = r"[+\-\u2212]?\d+\.\d+"
INTERVAL = re.compile(rf"({SIGNED}) \[({SIGNED}), ({SIGNED})\]")
FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"`[^`]*`")


def decimals(text: str) -> list[tuple[str, str]]:
    """(sign, digits) of every decimal in `text`, outside inline code; sign is '-' or ''."""
    return [("-" if sign in ("-", "\u2212") else "", digits)
            for sign, digits in NUMBER.findall(INLINE_CODE.sub(" ", text))]


def results_section(readme: str) -> list[tuple[int, str]]:
    """(line number, line) of the results section, code blocks left out."""
    lines, inside, fenced = [], False, False
    for number, line in enumerate(readme.splitlines(), start=1):
        if line.startswith("## "):
            inside = line.startswith("## Results")
            continue
        if FENCE.match(line):
            fenced = not fenced
            continue
        if inside and not fenced:
            lines.append((number, line))
    return lines


def metric_values(node) -> list[float]:
    if isinstance(node, dict):
        return [v for value in node.values() for v in metric_values(value)]
    if isinstance(node, list):
        return [v for value in node for v in metric_values(value)]
    if isinstance(node, (int, float)) and not isinstance(node, bool):
        return [float(node)]
    return []


def report_paths(root: Path) -> list[Path]:
    return [root / p for p in REPORTS] + [p for pattern in REPORT_GLOBS for p in sorted(root.glob(pattern))]


def generated_numbers(root: Path = REPO) -> tuple[set[tuple[str, str]], list[str]]:
    """Every (sign, digits) the generated files hold, and the files read."""
    found, sources = set(), []
    for path in report_paths(root):
        if path.is_file():
            found.update(decimals(path.read_text(encoding="utf-8")))
            sources.append(str(path.relative_to(root)))
    for path in sorted(root.glob(METRICS_GLOB)):
        for value in metric_values(json.loads(path.read_text(encoding="utf-8"))):
            found.update(decimals(f"{value:.3f} {value:+.3f}"))
        sources.append(str(path.relative_to(root)))
    return found, sources


def unsourced(readme: str, found: set[tuple[str, str]]) -> list[str]:
    """One line per README number that no generated file holds."""
    positive = {digits for sign, digits in found if sign == ""}
    missing = []
    for number, line in results_section(readme):
        for sign, digits in decimals(line):
            if (sign == "-" and ("-", digits) not in found) or (sign == "" and digits not in positive):
                missing.append(f"  README.md line {number}: {sign}{digits}   in: {line.strip()[:140]}")
    return missing


def intervals(text: str) -> set[str]:
    """Every `estimate [low, high]` in `text`, outside inline code, whitespace and minus signs
    normalised; an estimate and its interval in adjacent table cells count as one."""
    text = INLINE_CODE.sub(" ", text).replace("\u2212", "-")
    text = re.sub(r"(\d)\s*\|\s*\[", r"\1 [", text)
    text = re.sub(r"\s+", " ", text)
    return {"{} [{}, {}]".format(*match.groups()) for match in INTERVAL.finditer(text)}


def generated_intervals(root: Path = REPO) -> set[str]:
    return {i for path in report_paths(root) if path.is_file() for i in intervals(path.read_text(encoding="utf-8"))}


def unsourced_intervals(readme: str, found: set[str]) -> list[str]:
    section = " ".join(line for _, line in results_section(readme))
    return sorted(intervals(section) - found)


def test_every_results_number_in_the_readme_is_in_a_generated_report():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert any(line.startswith("## Results") for line in readme.splitlines()), \
        "README.md has no section whose heading starts with '## Results'"
    found, sources = generated_numbers()
    missing = unsourced(readme, found)
    assert not missing, (
        f"{len(missing)} number(s) in README.md's results section appear in no generated file "
        "(same digits; a negative must stay negative):\n" + "\n".join(missing) +
        f"\nLooked in: {', '.join(sources) or 'nothing (no reports or metrics found)'}.\n"
        "Regenerate the reports (`python -m scripts.make_reports`) and quote their numbers, or add the table "
        "that makes the number.")


def test_the_number_reader():
    text = "R@1 0.683 (+0.046 [−0.017, +0.025]), 12.5% of pairs, torch 2.13.0, lr 5.0e-5, `0.999`, v1.2, x0.5"
    assert decimals(text) == [("", "0.683"), ("", "0.046"), ("-", "0.017"), ("", "0.025"), ("", "12.5")]


def test_the_check_catches_a_retyped_or_rounded_number(tmp_path):
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports/comparison.md").write_text("| InfoCSE | +0.046 [+0.013, +0.079] (n = 3) | -0.158 |\n")
    (tmp_path / "metrics").mkdir()
    (tmp_path / "metrics/best.json").write_text(json.dumps({"test": {"recall@1": 0.68181818}}))
    found, _ = generated_numbers(tmp_path)
    readme = ("# x\n## Results on the default run\nInfoCSE +0.046 [+0.013, +0.079]; R@1 0.682; "
              "Mirror-BERT −0.158.\n```\n0.111 in a code block\n```\n## Next\n0.222 outside the section\n")
    assert unsourced(readme, found) == []
    for wrong in ("+0.047", "0.68", "−0.159", "−0.046"):
        assert len(unsourced(readme.replace("R@1 0.682", f"R@1 {wrong}"), found)) == 1, wrong


def test_every_interval_in_the_readme_is_one_of_a_generated_report():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    missing = unsourced_intervals(readme, generated_intervals())
    assert not missing, (
        f"{len(missing)} estimate(s) with an interval in README.md's results section appear as that "
        "triple in no generated report:\n  " + "\n  ".join(missing) +
        "\nQuote the estimate and its interval from the same row of the report.")


def test_the_interval_check_catches_numbers_from_different_rows(tmp_path):
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports/comparison.md").write_text(
        "| InfoCSE | +0.046 [+0.013, +0.079] (n = 3) |\n| CONPONO | +0.013 [-0.020, +0.041] (n = 3) |\n")
    (tmp_path / "reports/report.md").write_text("| 1 | +0.001 | [-0.019, +0.020] |\n")
    found = generated_intervals(tmp_path)
    readme = ("# x\n## Results\nInfoCSE +0.046 [+0.013,\n+0.079]; CONPONO +0.013 [\u22120.020, +0.041]; "
              "iter 1 +0.001 [-0.019, +0.020].\n## Next\n")
    assert unsourced_intervals(readme, found) == []
    mixed = readme.replace("CONPONO +0.013 [\u22120.020, +0.041]", "CONPONO +0.013 [+0.013, +0.079]")
    assert unsourced_intervals(mixed, found) == ["+0.013 [+0.013, +0.079]"]
