"""Run the real `dvc repro` on a scratch copy of the project, with params overridden."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def make_project(dest: Path, overrides: dict) -> Path:
    """A git + DVC project holding this repo's code, dvc.yaml and params.yaml (deep-merged with overrides)."""
    dest.mkdir(parents=True)
    for code in ("stages", "infocse"):
        shutil.copytree(REPO / code, dest / code, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "corpus", dest / "corpus")
    for name in ("dvc.yaml", ".dvcignore"):
        shutil.copy(REPO / name, dest / name)
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    write_params(dest, deep_merge(params, overrides))
    run(["git", "init", "-q"], dest)
    run([sys.executable, "-m", "dvc", "init", "-q"], dest)
    run([sys.executable, "-m", "dvc", "config", "core.analytics", "false"], dest)
    return dest


CHAINS = ("iterations", "rounds")  # numbered chains are replaced whole: merging would keep stale items


def deep_merge(base: dict, overrides: dict) -> dict:
    merged = dict(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict) and key not in CHAINS:
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def read_params(project: Path) -> dict:
    return yaml.safe_load((project / "params.yaml").read_text())


def write_params(project: Path, params: dict) -> None:
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))


def update_params(project: Path, overrides: dict) -> None:
    write_params(project, deep_merge(read_params(project), overrides))


def run(command: list[str], cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    if check and result.returncode != 0:
        raise AssertionError(f"{' '.join(command)} failed ({result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result


def repro(project: Path, *args: str, check: bool = True) -> tuple[list[str], subprocess.CompletedProcess]:
    """Run `dvc repro`; return the names of the stages that actually ran, in order."""
    result = run([sys.executable, "-m", "dvc", "repro", *args], project, check=check)
    return re.findall(r"Running stage '([^']+)'", result.stdout), result


def locked_outputs(project: Path) -> dict[str, str]:
    """Output path -> md5 from dvc.lock."""
    lock = yaml.safe_load((project / "dvc.lock").read_text())
    return {out["path"]: out["md5"] for stage in lock["stages"].values() for out in stage.get("outs", [])}
