"""The committed cross-run reports are exactly what the committed run files give: a clone that runs
`python -m study.make_reports` gets the same bytes, so no report holds a number without its run."""

from __future__ import annotations

import shutil
from pathlib import Path

from study import make_reports

REPO = Path(__file__).resolve().parents[1]
GENERATED = ("study/reports/comparison.md", "study/reports/convergence.png", "study/reports/fewshot.md", "study/reports/plusplus_rounds.png",
             "study/reports/paper_tables.md", "study/reports/paper_tables.png", "study/reports/precision.md", "study/reports/glance.png",
             "README.md")


def test_make_reports_regenerates_the_committed_reports_byte_for_byte(tmp_path, monkeypatch):
    if (REPO / "study/runs").is_dir():  # none before the first run is exported
        shutil.copytree(REPO / "study/runs", tmp_path / "study/runs")
    (tmp_path / "reports").mkdir(exist_ok=True)
    for name in ("README.md", "reports/report.md"):  # the README's blocks are rewritten in place; the default run's report
        shutil.copy(REPO / name, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    make_reports.main()
    differing = [name for name in GENERATED if (tmp_path / name).read_bytes() != (REPO / name).read_bytes()]
    assert not differing, (f"{differing} differ from what study/runs/ gives: run `python -m study.make_reports` "
                           "and commit the reports with their run files")
