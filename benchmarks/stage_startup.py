"""Each stage's start-up at two versions of the code, side by side: a fresh interpreter importing
`stages.<name>`, which is all a stage loads before its first work -- or before it finds it has none
(an iteration after the loop stopped, an InfoCSE++ round past `plusplus.max_rounds`) or refuses its
params. The working tree against `--before REV` (exported with `git archive`), alternating, medians
of `--rounds` runs; the ratio is before / now.

    python -m benchmarks.stage_startup --before REV [--rounds 3]

Results: stdout, as Markdown; benchmarks/results/stage_startup.md records a run with its command and CPU.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STAGES = ("prepare", "init", "first_round_model", "embed", "cluster", "train", "evaluate", "select", "labels",
          "finetune", "plusplus", "select_plusplus", "report", "record")


def import_seconds(root: Path, stage: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", f"import stages.{stage}"], cwd=root, check=True,
                   env={**os.environ, "PYTHONPATH": str(root)})
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True, help="the git revision to compare the working tree with")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    import torch

    with tempfile.TemporaryDirectory() as scratch:
        before = Path(scratch)
        subprocess.run(f"git archive {args.before} stages infocse | tar -x -C {before}", shell=True, check=True)
        trees = {"before": before, "now": Path.cwd()}
        seconds = {(name, stage): [] for name in trees for stage in STAGES}
        for _ in range(args.rounds):
            for stage in STAGES:
                for name, root in trees.items():
                    seconds[name, stage].append(import_seconds(root, stage))
    print(f"`python -m benchmarks.stage_startup --before {args.before} --rounds {args.rounds}`; "
          f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, AVX-512 BF16 "
          f"{torch.cpu._is_avx512_bf16_supported()}, AMX {torch.cpu._is_amx_tile_supported()}, "
          f"torch {torch.__version__}, python {platform.python_version()}\n")
    print("| stage | before: s to import (median, min-max) | now | before / now |")
    print("|---|---|---|---|")
    for stage in STAGES:
        old, new = seconds["before", stage], seconds["now", stage]
        print(f"| {stage} | {statistics.median(old):.2f} ({min(old):.2f}-{max(old):.2f}) | "
              f"{statistics.median(new):.2f} ({min(new):.2f}-{max(new):.2f}) | "
              f"{statistics.median(old) / statistics.median(new):.1f}x |")


if __name__ == "__main__":
    main()
