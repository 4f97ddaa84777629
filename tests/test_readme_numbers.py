"""The README's numbers cannot go stale: its results are generated blocks, and prose carries none.

`python -m study.make_reports` writes the blocks between `<!-- NAME: generated ... -->` and
`<!-- end NAME -->` from the committed run files and the default run's report
(tests/test_committed_reports.py checks that the committed README is exactly what it writes). Here:
the blocks are there and hold what the generator makes of the committed files, and outside them
(and outside code) no decimal number appears unless a benchmark record holds it (a speed-up measured
by a command in benchmarks/results/). The README stays at most 150 lines.
"""

from __future__ import annotations

import re
from pathlib import Path

from study import readme_results
from study.compare_experiments import load_runs

REPO = Path(__file__).resolve().parents[1]
BLOCKS = ("verdict", "results", "default run")
NUMBER = re.compile(r"(?<![\w.])[+\-\u2212]?\d+\.\d+(?![\d.]*\d)")
FENCE = re.compile(r"```.*?```", re.S)
INLINE_CODE = re.compile(r"`[^`]*`")


def readme() -> str:
    return (REPO / "README.md").read_text(encoding="utf-8")


def without_blocks(text: str) -> str:
    for name in BLOCKS:
        start, end = readme_results.marked(name)
        text = re.sub(re.escape(start) + r".*?" + re.escape(end), " ", text, flags=re.S)
    return INLINE_CODE.sub(" ", FENCE.sub(" ", text))


def test_each_generated_block_is_what_the_generator_writes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the forest plot goes here, not over the committed one
    (tmp_path / "reports").mkdir()
    expected = readme_results.blocks(load_runs(REPO / "study/runs"), (REPO / "reports/report.md").read_text())
    text = readme()
    for name, content in expected.items():
        start, end = readme_results.marked(name)
        assert f"{start}\n{content}\n{end}" in text, f"README block {name!r}: run `python -m study.make_reports`"
        assert re.search(r"\d\.\d{3}", content) or name == "default run" and "chosen" in content, name


def test_prose_outside_the_blocks_carries_no_result_number():
    records = " ".join(path.read_text(encoding="utf-8") for path in (REPO / "benchmarks/results").glob("*.md"))
    stray = [number for number in NUMBER.findall(without_blocks(readme())) if number.lstrip("+-\u2212") not in records]
    assert not stray, f"numbers typed into the README outside its generated blocks: {stray}"


def test_the_readme_is_short_and_says_what_you_get_first():
    lines = readme().splitlines()
    assert len(lines) <= 150, len(lines)
    assert any(NUMBER.search(line) and "InfoCSE" in line for line in lines[:15])
