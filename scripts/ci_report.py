"""The pull-request comment of the CI job (scripts/ci_pipeline.sh): one Markdown file a reviewer reads.

    python -m scripts.ci_report --against REV --repro-log LOG [--remote NAME] [--out ci-report]

Writes OUT/report.md: the params diff (DVC's own), the headline of metrics/summary.json for both
revisions, which stages ran and which came back from the run cache (from the `dvc repro` log),
the convergence and loss plots of both revisions where they changed (OUT/*.png, drawn from the
report stage's CSVs), then every other changed metric, and the timings apart (they change on every
rerun). The job posts it as one comment that later pushes update (examples/ci/).
"""

from __future__ import annotations

import argparse
import io
import json
import re
import subprocess
from pathlib import Path

import pandas as pd

SUMMARY = "metrics/summary.json"
HEADLINE = {"chosen_iteration": "chosen iteration", "val_mrr@10": "val MRR@10", "test_recall@1": "test R@1",
            "test_recall@1_vs_seed": "test R@1 − seed model", "test_mrr@10": "test MRR@10",
            "test_mrr@10_vs_seed": "test MRR@10 − seed model"}
PLOTS = {"convergence.png": ("reports/run_convergence.csv", "iteration", ("val_mrr@10", "test_recall@1")),
         "loss.png": ("reports/run_loss.csv", "run_step", ("loss",))}
TIMING = re.compile(r"seconds|per_second|runtime")


def command(*args: str) -> str:
    return subprocess.run(args, capture_output=True, text=True, check=True).stdout


def at(rev: str | None, path: str) -> str | None:
    """A file's text at `rev` (git), or in the working tree when `rev` is None; None if absent."""
    if rev is None:
        return Path(path).read_text(encoding="utf-8") if Path(path).exists() else None
    result = subprocess.run(["git", "show", f"{rev}:{path}"], capture_output=True, text=True)
    return result.stdout if result.returncode == 0 else None


def number(value, sign: bool = False) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{value:{'+' if sign else ''}{'.4f' if isinstance(value, float) else 'd'}}"
    return "—" if value is None else str(value)


def headline_table(rev: str, label: str) -> list[str]:
    old, new = (json.loads(text) if text else {} for text in (at(rev, SUMMARY), at(None, SUMMARY)))
    rows = [f"| metric | `{label}` | this change | change |", "|---|---|---|---|"]
    for key, name in HEADLINE.items():
        a, b = old.get(key), new.get(key)
        change = "" if a == b or not all(isinstance(v, (int, float)) for v in (a, b)) else number(b - a, sign=True)
        rows.append(f"| {name} | {number(a)} | {number(b)} | {change} |")
    return rows


def stages_lines(log: str) -> list[str]:
    """What `dvc repro` did per stage, from its own messages."""
    ran = re.findall(r"Running stage '([^']+)'", log)
    cached = re.findall(r"Stage '([^']+)' is cached - skipping run", log)
    unchanged = re.findall(r"Stage '([^']+)' didn't change, skipping", log)
    named = lambda stages: ", ".join(f"`{stage}`" for stage in stages) or "none"  # noqa: E731
    return [f"- ran ({len(ran)}): {named(ran)}", f"- restored from the run cache ({len(cached)}): {named(cached)}",
            f"- unchanged ({len(unchanged)})"]


def metrics_rows(diff: dict, keep) -> list[str]:
    rows = [f"| {path} | {key} | {number(values.get('old'))} | {number(values.get('new'))} |"
            for path, metrics in sorted(diff.items()) for key, values in sorted(metrics.items()) if keep(path, key)]
    return ["| file | metric | before | after |", "|---|---|---|---|", *rows] if rows else []


def plot_both(rev: str, label: str, out: Path) -> list[str]:
    """Each plot whose CSV differs between the revisions, both drawn in one figure."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    written = []
    for name, (path, x, columns) in PLOTS.items():
        old, new = at(rev, path), at(None, path)
        if old == new or new is None:
            continue
        figure, axes = plt.subplots(1, len(columns), figsize=(5 * len(columns), 3.5), squeeze=False)
        for ax, column in zip(axes[0], columns):
            for text, style, who in ((old, "--", label), (new, "-", "this change")):
                frame = pd.read_csv(io.StringIO(text)) if text else pd.DataFrame()
                if column in frame:
                    ax.plot(frame[x], frame[column], style, marker="o" if x == "iteration" else None, label=who)
            ax.set_xlabel(x.replace("_", " "))
            ax.set_title(column)
            ax.legend(loc="best", fontsize="small")
        figure.tight_layout()
        figure.savefig(out / name, dpi=100, metadata={"Software": None})
        plt.close(figure)
        written.append(f"![{name[:-4]}: `{label}` dashed, this change solid]({name})")
    return written


def report(rev: str, label: str, log: str, remote: str | None, precision: str, out: Path) -> str:
    params = command("dvc", "params", "diff", "--md", rev).strip()
    diff = json.loads(command("dvc", "metrics", "diff", "--json", rev) or "{}")
    others = metrics_rows(diff, lambda path, key: path != SUMMARY and not TIMING.search(key))
    timings = metrics_rows(diff, lambda path, key: bool(TIMING.search(key)))
    where = (f"DVC remote `{remote}`: unchanged stages were restored from it, and this run was pushed to it."
             if remote else "**No DVC remote** (a pull request from a fork gets no secrets): nothing was restored "
                            "or pushed, and every stage not in this runner's own cache ran.")
    lines = [f"## InfoCSE pipeline: this change against `{label}` ({rev[:7]})", "",
             f"Precision `{precision}` (params.yaml). {where}", "", "### Params", "",
             params if params.count("\n") > 1 else "No params changed.", "",
             f"### Headline ({SUMMARY})", "", *headline_table(rev, label), "", "### Stages", "", *stages_lines(log), ""]
    plots = plot_both(rev, label, out)
    lines += ["### Plots that changed", "", *(plots or ["None."]), ""]
    lines += ["<details><summary>Every other metric that changed</summary>", "", *(others or ["None."]), "",
              "</details>", "", "<details><summary>Timings (they change on every rerun)</summary>", "",
              *(timings or ["None."]), "", "</details>", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--against", required=True, help="the rev the change is compared with")
    parser.add_argument("--label", default=None, help="its name in the report (default: the rev)")
    parser.add_argument("--repro-log", required=True, type=Path, help="what `dvc repro` printed")
    parser.add_argument("--remote", default=None, help="the DVC remote used; none: say nothing was restored")
    parser.add_argument("--out", default=Path("ci-report"), type=Path)
    args = parser.parse_args()
    import yaml

    precision = yaml.safe_load(Path("params.yaml").read_text(encoding="utf-8")).get("precision", "fp32")
    rev = command("git", "rev-parse", "--verify", f"{args.against}^{{commit}}").strip()
    args.out.mkdir(parents=True, exist_ok=True)
    text = report(rev, args.label or args.against, args.repro_log.read_text(encoding="utf-8"), args.remote,
                  precision, args.out)
    (args.out / "report.md").write_text(text, encoding="utf-8")
    print(f"wrote {args.out / 'report.md'}")


if __name__ == "__main__":
    main()
