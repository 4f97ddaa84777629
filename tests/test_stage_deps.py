"""Code deps that cannot drift: every DVC stage lists exactly the code it imports
(scripts/stage_deps.py), no stage imports another stage, and the package has no import cycle.

The import graph here is built independently of scripts/stage_deps.py (relative imports included)
and serves as its oracle. Each check is also shown to fail, on a copy of the code and dvc.yaml in
a scratch folder, never on the real files.
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import networkx as nx
import pytest
import yaml
from conftest import REPO

from scripts.stage_deps import stage_code_deps

CODE_ROOTS = ("infocse", "stages", "scripts")


# ---------------------------------------------------------------- the import graph
def module_path(name: str, repo: Path) -> str | None:
    """Repo-relative file of a first-party module (a module file, else a package's __init__.py)."""
    parts = name.split(".")
    if parts[0] not in CODE_ROOTS:
        return None
    for candidate in (Path(*parts).with_suffix(".py"), Path(*parts, "__init__.py")):
        if (repo / candidate).is_file():
            return candidate.as_posix()
    return None


def imported_names(path: Path, package: list[str]) -> set[str]:
    """Absolute names of every module `path` imports, anywhere in its body, with the packages
    Python imports on the way (`a.b.c` imports `a` and `a.b` too)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)  # `from pkg import module`
    return {".".join(name.split(".")[:i]) for name in names for i in range(1, name.count(".") + 2)}


def import_graph(repo: Path) -> nx.DiGraph:
    """Edge a -> b: first-party file a imports b (paths relative to `repo`)."""
    graph = nx.DiGraph()
    for root in ("infocse", "stages"):
        for path in sorted((repo / root).rglob("*.py")):
            source = path.relative_to(repo)
            package = list(source.parent.parts)
            graph.add_node(source.as_posix())
            for name in imported_names(path, package):
                target = module_path(name, repo)
                if target and target != source.as_posix():
                    graph.add_edge(source.as_posix(), target)
    return graph


def closure(graph: nx.DiGraph, entry: str, repo: Path) -> list[str]:
    """`entry` and every file it reaches, less empty files (an empty __init__.py is no code)."""
    return sorted(f for f in nx.descendants(graph, entry) | {entry} if (repo / f).stat().st_size)


def stage_to_stage_imports(repo: Path) -> list[tuple[str, str]]:
    graph = import_graph(repo)
    return [(a, b) for a, b in graph.edges if a.startswith("stages/") and b.startswith("stages/")
            and b != "stages/__init__.py"]


def package_import_cycles(repo: Path) -> list[list[str]]:
    graph = import_graph(repo)
    package = graph.subgraph([node for node in graph if node.startswith("infocse/")])
    return sorted(sorted(cycle) for cycle in nx.simple_cycles(package))


def copy_project(dest: Path) -> Path:
    """The code and dvc.yaml, in a scratch folder the checks can be pointed at."""
    for code in ("infocse", "stages"):
        shutil.copytree(REPO / code, dest / code, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "dvc.yaml", dest / "dvc.yaml")
    return dest


def mismatches(repo: Path) -> dict[str, tuple[list[str], list[str]]]:
    """{stage: (imported but not listed, listed but not imported)} for stages that differ."""
    found = {}
    for stage, (needed, listed) in stage_code_deps(repo).items():
        missing, extra = sorted(set(needed) - set(listed)), sorted(set(listed) - set(needed))
        if missing or extra:
            found[stage] = (missing, extra)
    return found


@pytest.fixture(scope="module")
def real_mismatches() -> dict[str, tuple[list[str], list[str]]]:
    return mismatches(REPO)


# ---------------------------------------------------------------- dvc.yaml against the imports
def test_every_stage_lists_exactly_the_code_it_imports(real_mismatches):
    """If this fails, run `python -m scripts.stage_deps` and update the stage's deps in dvc.yaml."""
    assert real_mismatches == {}


def test_every_stage_with_python_code_is_checked():
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    python_stages = {name for name, stage in stages.items() if " -m stages." in stage.get("do", stage)["cmd"]}
    assert python_stages == set(stage_code_deps(REPO)) and len(python_stages) >= 14


def test_stage_deps_agrees_with_an_independent_import_graph():
    graph = import_graph(REPO)
    for stage, (needed, _) in stage_code_deps(REPO).items():
        entry = next(dep for dep in needed if dep.startswith("stages/"))
        assert needed == closure(graph, entry, REPO), stage


def new_mismatches(repo: Path, before: dict, change) -> dict[str, tuple[list[str], list[str]]]:
    """The mismatches that `change(repo)` adds to `before`, those of the unchanged copy (so the
    check is shown to fail whatever else differs)."""
    change(repo)
    added = {}
    for stage, (missing, extra) in mismatches(repo).items():
        old_missing, old_extra = before.get(stage, ([], []))
        delta = (sorted(set(missing) - set(old_missing)), sorted(set(extra) - set(old_extra)))
        if delta != ([], []):
            added[stage] = delta
    return added


def test_a_dep_deleted_from_dvc_yaml_is_caught(tmp_path, real_mismatches):
    def delete_deps(repo: Path) -> None:
        spec = yaml.safe_load((repo / "dvc.yaml").read_text())
        spec["stages"]["cluster"]["do"]["deps"].remove("infocse/pairs.py")
        spec["stages"]["prepare"]["deps"].remove("infocse/corpora/manpages.py")
        (repo / "dvc.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))

    assert new_mismatches(copy_project(tmp_path), real_mismatches, delete_deps) == {
        "cluster": (["infocse/pairs.py"], []), "prepare": (["infocse/corpora/manpages.py"], [])}


def test_a_dep_that_is_not_imported_is_caught(tmp_path, real_mismatches):
    def add_dep(repo: Path) -> None:
        spec = yaml.safe_load((repo / "dvc.yaml").read_text())
        spec["stages"]["select"]["deps"].append("infocse/plusplus.py")
        (repo / "dvc.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))

    assert new_mismatches(copy_project(tmp_path), real_mismatches, add_dep) == {"select": ([], ["infocse/plusplus.py"])}


def test_a_new_import_inside_a_function_is_caught(tmp_path, real_mismatches):
    """A stage that starts importing a package file (here inside a function) needs it as a dep."""
    def import_labels(repo: Path) -> None:
        with open(repo / "stages/select.py", "a", encoding="utf-8") as handle:
            handle.write("\n\ndef late():\n    from infocse.corpora import labels  # noqa: F401\n")

    added = new_mismatches(copy_project(tmp_path), real_mismatches, import_labels)
    assert list(added) == ["select"] and "infocse/corpora/labels.py" in added["select"][0], added
    assert set(added["select"][0]) <= set(closure(import_graph(tmp_path), "infocse/corpora/labels.py", tmp_path))


# ---------------------------------------------------------------- the shape of the import graph
def test_no_stage_imports_another_stage(tmp_path):
    assert stage_to_stage_imports(REPO) == []
    repo = copy_project(tmp_path)
    with open(repo / "stages/select_plusplus.py", "a", encoding="utf-8") as handle:
        handle.write("\nfrom stages.finetune import STARTS  # noqa: E402,F401\n")
    assert stage_to_stage_imports(repo) == [("stages/select_plusplus.py", "stages/finetune.py")]


def test_the_package_never_imports_a_stage_or_a_script():
    graph = import_graph(REPO)
    assert [(a, b) for a, b in graph.edges if a.startswith("infocse/") and not b.startswith("infocse/")] == []


def test_the_package_has_no_import_cycle(tmp_path):
    assert package_import_cycles(REPO) == []
    repo = copy_project(tmp_path)
    with open(repo / "infocse/idc.py", "a", encoding="utf-8") as handle:
        handle.write("\n\ndef on_ray():\n    from infocse.engines.ray_cluster import cluster_with_ray  # noqa: F401\n")
    assert ["infocse/engines/ray_cluster.py", "infocse/idc.py"] in package_import_cycles(repo)


def test_the_ray_engine_depends_on_idc_and_embedding_never_the_reverse():
    graph = import_graph(REPO)
    assert "infocse/idc.py" in set(graph.successors("infocse/engines/ray_cluster.py"))
    assert "infocse/embedding.py" in set(graph.successors("infocse/engines/ray_embed.py"))
    for module in ("infocse/idc.py", "infocse/embedding.py", "infocse/loop.py", "infocse/config.py"):
        for engine in ("ray.py", "ray_embed.py", "ray_cluster.py"):
            assert f"infocse/engines/{engine}" not in nx.descendants(graph, module), module


def test_only_the_stages_that_run_idc_depend_on_it():
    """An IDC change reruns cluster@t and plusplus@r only (their outputs feed the rest), never
    embed, train, evaluate or fine-tuning, whose code does not run it."""
    deps = {stage: code for stage, (code, _) in stage_code_deps(REPO).items()}
    assert sorted(stage for stage, code in deps.items() if "infocse/idc.py" in code) == ["cluster", "plusplus"]


@pytest.mark.parametrize("source, package, expected", [
    ("from . import io\n", ["infocse"], {"infocse", "infocse.io"}),
    ("from ..idc import partition_idc\n", ["infocse", "engines"], {"infocse", "infocse.idc",
                                                                    "infocse.idc.partition_idc"}),
    ("import infocse.corpora.labels as labels\n", ["stages"], {"infocse", "infocse.corpora", "infocse.corpora.labels"}),
])
def test_import_names_resolve_relative_imports(tmp_path, source, package, expected):
    """The oracle itself: relative imports resolve against the importing file's package."""
    path = tmp_path / "module.py"
    path.write_text(source)
    assert imported_names(path, package) == expected
