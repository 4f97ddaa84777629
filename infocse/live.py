"""Live training curves: the step loss and learning rate of every training phase of a stage,
rewritten (atomically) at each logged step into the stage's own output folder, in DVCLive's layout:

    <folder>/metrics.json                          each phase's latest step and values (a DVC metric)
    <folder>/plots/metrics/<phase>/<curve>.tsv     one curve per phase (DVC plots: `dvc plots show`)

`dvc exp show` reads a running experiment's workspace, so these follow a run as it goes. They hold
the trainer's own steps and logged values and no timestamps: a rerun on the same machine writes the
same bytes, so they are stage outputs in `dvc.lock`. Every phase starts with empty curves (a header), so
a stage that trains nothing, or fewer steps than the logging interval, still has its outputs.

Not DVCLive itself: `dvclive.Live` 3.49 stops the stage with `SCMError: Empty git repo` in a
repository without commits (a fresh `git init`), and opens the DVC repository on every stage
start; a stage needs none of what that buys (experiments saved, Studio) under `dvc repro`.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from infocse.io import write_json, write_text

CURVES = ("loss", "learning_rate")


class LiveCurves:
    """One stage's curves, {phase: {curve: [(step, value)]}}, and the files they are written to."""

    def __init__(self, folder: Path | str, phases: tuple[str, ...]):
        self.folder = Path(folder)
        self.points = {phase: {curve: [] for curve in CURVES} for phase in phases}
        self.summary: dict = {}
        # DVC removes a stage's outputs before it runs it, a stage run by hand does not: a phase of
        # an earlier run (e.g. an iteration dropped since) must not stay among these curves
        shutil.rmtree(self.folder / "plots", ignore_errors=True)
        for phase in phases:
            self._write(phase)

    def log(self, phase: str, step: int, values: dict[str, float]) -> None:
        for curve, value in values.items():
            self.points[phase][curve].append((step, value))
        self.summary = {**self.summary, phase: {**self.summary.get(phase, {}), **values, "step": step}}
        self._write(phase)

    def _write(self, phase: str) -> None:
        for curve, points in self.points[phase].items():
            rows = "".join(f"{step}\t{value!r}\n" for step, value in points)
            write_text(self.folder / "plots/metrics" / phase / f"{curve}.tsv", f"step\t{curve}\n{rows}")
        write_json(self.folder / "metrics.json", self.summary)


def live_callback(live: LiveCurves, phase: str):
    """A trainer callback that logs each logged step's loss and learning rate as `phase`'s curves,
    at the trainer's global step (on the main process only)."""
    from transformers import TrainerCallback

    class LogLiveCurves(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            values = {curve: float(logs[curve]) for curve in CURVES if curve in (logs or {})}
            if values and state.is_world_process_zero:
                live.log(phase, state.global_step, values)

    return LogLiveCurves()
