"""Each DVC stage's code: its entry module and every first-party module it imports, transitively.

`python -m scripts.stage_deps` prints, per stage, the code deps dvc.yaml must list and what it
lists that is not imported; exit status 1 when they differ. tests/test_stage_deps.py runs it, so
a stage cannot import a file that DVC does not watch (the stale-cache bug this guards against).
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
CODE_ROOTS = ("infocse", "stages")


def module_file(name: str, repo: Path = REPO) -> Path | None:
    parts = name.split(".")
    if parts[0] not in CODE_ROOTS:
        return None
    for candidate in (repo.joinpath(*parts).with_suffix(".py"), repo.joinpath(*parts, "__init__.py")):
        if candidate.is_file():
            return candidate
    return None


def imports_of(path: Path, repo: Path = REPO) -> set[Path]:
    """First-party files `path` imports anywhere in its body (function-level imports included)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            for i in range(1, len(parts) + 1):
                file = module_file(".".join(parts[:i]), repo)
                if file:
                    found.add(file)
    return found


def import_closure(entry: Path, repo: Path = REPO, parsed: dict[Path, set[Path]] | None = None) -> set[Path]:
    """Every first-party file `entry` reaches; `parsed` memoises `imports_of` across calls."""
    parsed = {} if parsed is None else parsed
    seen, todo = set(), [entry]
    while todo:
        file = todo.pop()
        if file not in seen:
            seen.add(file)
            if file not in parsed:
                parsed[file] = imports_of(file, repo)
            todo.extend(parsed[file] - seen)
    return {file for file in seen if file.stat().st_size}  # an empty __init__.py is no code


def entry_module(cmd: str) -> str | None:
    """The stage's own module: the last `-m X` of its command (after torchrun's own `-m`)."""
    found = re.findall(r"-m\s+([\w.]+)", cmd)
    return found[-1] if found else None


def stage_code_deps(repo: Path = REPO) -> dict[str, tuple[list[str], list[str]]]:
    """{stage: (code files it imports, code files dvc.yaml lists)} as repo-relative paths."""
    spec = yaml.safe_load((repo / "dvc.yaml").read_text())
    result, parsed = {}, {}  # one parse per file for all stages
    for name, stage in spec["stages"].items():
        body = stage.get("do", stage)
        module = entry_module(str(body["cmd"]))
        entry = module_file(module, repo) if module else None
        if entry is None:
            continue
        needed = sorted(file.relative_to(repo).as_posix() for file in import_closure(entry, repo, parsed))
        listed = sorted(dep for dep in (d if isinstance(d, str) else next(iter(d)) for d in body.get("deps", []))
                        if dep.endswith(".py"))
        result[name] = (needed, listed)
    return result


def main() -> None:
    problems = []
    for name, (needed, listed) in stage_code_deps().items():
        missing, extra = sorted(set(needed) - set(listed)), sorted(set(listed) - set(needed))
        print(f"{name}:\n" + "".join(f"  - {file}\n" for file in needed), end="")
        if missing:
            problems.append(f"stage {name}: dvc.yaml misses {', '.join(missing)}")
        if extra:
            problems.append(f"stage {name}: dvc.yaml lists {', '.join(extra)}, which it does not import")
    if problems:
        print("\n".join(problems), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
