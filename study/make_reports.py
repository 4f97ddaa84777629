"""Regenerate every cross-run report from the committed run files, in one command:

    python -m study.make_reports

writes study/reports/comparison.md, study/reports/convergence.png (study/compare_experiments.py),
study/reports/fewshot.md, study/reports/plusplus_rounds.png (study/compare_fewshot.py),
study/reports/paper_tables.md, study/reports/paper_tables.png (study/paper_tables.py) and
study/reports/precision.md (study/precision_parity.py), study/reports/selection.md (study/selection_rules.py), and the README's generated blocks with
study/reports/glance.png (study/readme_results.py: the run files and the default run's reports/report.md) from
`study/runs/*.json` alone; the same run files give the same bytes. New runs get there with
`python -m study.export_runs` (after `dvc exp run` experiments; `--workspace NAME` for a
`dvc repro` in the working tree).
"""

from __future__ import annotations

from study import compare_experiments, compare_fewshot, paper_tables, precision_parity, readme_results, selection_rules


def main() -> None:
    compare_experiments.main()
    compare_fewshot.main()
    paper_tables.main()
    precision_parity.main()
    selection_rules.main()
    readme_results.main()


if __name__ == "__main__":
    main()
