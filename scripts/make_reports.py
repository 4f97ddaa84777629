"""Regenerate every cross-run report from the committed run files, in one command:

    python -m scripts.make_reports

writes reports/comparison.md, reports/convergence.png (scripts/compare_experiments.py),
reports/fewshot.md, reports/plusplus_rounds.png (scripts/compare_fewshot.py),
reports/paper_tables.md, reports/paper_tables.png (scripts/paper_tables.py) and
reports/precision.md (scripts/precision_parity.py), reports/selection.md (scripts/selection_rules.py), and the README's generated blocks with
reports/glance.png (scripts/readme_results.py: the run files and the default run's reports/report.md) from
`results/runs/*.json` alone; the same run files give the same bytes. New runs get there with
`python -m scripts.export_runs` (after `dvc exp run` experiments; `--workspace NAME` for a
`dvc repro` in the working tree).
"""

from __future__ import annotations

from scripts import compare_experiments, compare_fewshot, paper_tables, precision_parity, readme_results, selection_rules


def main() -> None:
    compare_experiments.main()
    compare_fewshot.main()
    paper_tables.main()
    precision_parity.main()
    selection_rules.main()
    readme_results.main()


if __name__ == "__main__":
    main()
