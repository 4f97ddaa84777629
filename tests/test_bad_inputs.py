"""Bad or unusual inputs fed through the real stage entry points, as a new user would meet them.

Each error case runs a stage's `main` under `run_stage` (what `python -m stages.X` does) in a
scratch project, and checks: exactly one `error:` line per problem on stderr, naming it; exit
status 1; no traceback; and data/, models/ and metrics/ exactly as they were (nothing written,
nothing half-written). Two cases run as real subprocesses. Unusual inputs that must work (a
byte-order mark, a corpus without titles, an empty validation split) complete, and say plainly
what they could not do.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import shutil
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import tiny_documents
from pipeline_helpers import deep_merge, make_project, read_params, repro, run, update_params, write_params

from infocse.errors import run_stage

OUTPUT_FOLDERS = ("data", "models", "metrics")


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def snapshot(project: Path) -> dict[str, str]:
    """Every file and folder under the output folders (hidden temporaries included), with content hashes."""
    found = {}
    for folder in OUTPUT_FOLDERS:
        for path in sorted((project / folder).rglob("*")):
            found[str(path.relative_to(project))] = hashlib.md5(path.read_bytes()).hexdigest() if path.is_file() else "dir"
    return found


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> tuple[Path, dict]:
    """A scratch project whose prepare already ran on the tiny corpus (a real `python -m stages.prepare`),
    so a failing stage is also checked not to touch earlier outputs."""
    root = tmp_path_factory.mktemp("bad-inputs")
    corpus = write_jsonl(root / "tiny.jsonl", tiny_documents())
    project = make_project(root / "project", {"device": "cpu", "corpus": {"source": "jsonl", "path": str(corpus)}})
    result = run([sys.executable, "-m", "stages.prepare"], project)
    assert "prepared 12 documents" in result.stdout
    return project, read_params(project)


def run_in(project: Path, base: dict, overrides: dict, stage: str, *args: str, monkeypatch, capsys):
    """Run stage `stage` in `project` with the base params deep-merged with `overrides`, as
    `python -m stages.<stage>` would; returns (exit status, stdout, stderr)."""
    write_params(project, deep_merge(base, overrides))
    monkeypatch.chdir(project)
    monkeypatch.setattr(sys, "argv", [f"stages/{stage}.py", *args])
    main = importlib.import_module(f"stages.{stage}").main
    capsys.readouterr()
    try:
        run_stage(main)
        status = 0
    except SystemExit as exit_info:
        status = exit_info.code
    out, err = capsys.readouterr()
    return status, out, err


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def assert_refused(status: int, stderr: str, *expected: str) -> None:
    """Exit 1, no traceback, and exactly one `error:` line per expected fragment, each containing it."""
    lines = error_lines(stderr)
    assert status == 1, (status, stderr)
    assert "Traceback" not in stderr, stderr
    assert len(lines) == len(expected), lines
    for fragment in expected:
        assert sum(fragment in line for line in lines) == 1, (fragment, lines)


# ---------------------------------------------------------------- corpora the prepare stage refuses
def jsonl_text(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "corpus.jsonl"
    path.write_text(text, encoding="utf-8")
    return path


def good_row(doc_id: str) -> str:
    return json.dumps({"id": doc_id, "text": "One sentence. Another sentence."})


def bad_corpus(kind: str, tmp_path: Path) -> tuple[dict, str]:
    """(corpus params, the fragment its one error line must contain) for each refused corpus."""
    if kind == "line is a JSON list":
        path = jsonl_text(tmp_path, f"{good_row('a')}\n[1, 2, 3]\n")
        return {"source": "jsonl", "path": str(path)}, "corpus.jsonl line 2: a JSON list, not an object with `id` and `text`"
    if kind in ("jsonl path is a folder", "parquet path is a folder"):
        source = kind.split()[0]
        return ({"source": source, "path": str(tmp_path)},
                f"is a folder, but the source needs a {'JSONL' if source == 'jsonl' else 'Parquet'} file")
    if kind == "text is bytes":
        path = tmp_path / "corpus.parquet"
        pd.DataFrame({"id": ["a", "b"], "text": [b"One. Two.", b"Three. Four."]}).to_parquet(path)
        return {"source": "parquet", "path": str(path)}, "corpus.parquet row 1: document 'a' has a text of type bytes"
    if kind.startswith("text is "):
        value = {"text is int": 42, "text is dict": {"body": "One. Two."}, "text is list": ["One.", "Two."]}[kind]
        path = jsonl_text(tmp_path, f"{good_row('a')}\n{json.dumps({'id': 'b', 'text': value})}\n")
        return ({"source": "jsonl", "path": str(path)},
                f"corpus.jsonl line 2: document 'b' has a text of type {type(value).__name__}, not a string")
    if kind == "two NaN ids":
        path = jsonl_text(tmp_path, '{"id": NaN, "text": "One. Two."}\n{"id": NaN, "text": "Three. Four."}\n')
        return {"source": "jsonl", "path": str(path)}, "corpus.jsonl line 1: the document has no id (null, NaN or left out)"
    if kind == "a null id":
        path = jsonl_text(tmp_path, f"{good_row('1')}\n\n" + '{"id": null, "text": "Three. Four."}\n')
        return {"source": "jsonl", "path": str(path)}, "corpus.jsonl line 3: the document has no id"
    if kind == "a float id":
        path = jsonl_text(tmp_path, '{"id": 1, "text": "One. Two."}\n{"id": 2.5, "text": "Three. Four."}\n')
        return {"source": "jsonl", "path": str(path)}, "corpus.jsonl line 2: id 2.5 is a float: ids must be strings or integers"
    if kind.startswith("title is "):
        value = {"title is int": 42, "title is list": ["a", "title"]}[kind]
        path = jsonl_text(tmp_path, json.dumps({"id": "a", "title": value, "text": "One. Two."}) + "\n")
        return ({"source": "jsonl", "path": str(path)},
                f"corpus.jsonl line 1: document 'a' has a title of type {type(value).__name__}, not a string")
    if kind == "invalid UTF-8 in a .txt file":
        (tmp_path / "texts").mkdir()
        (tmp_path / "texts" / "good.txt").write_text("Title\nOne. Two.\n", encoding="utf-8")
        (tmp_path / "texts" / "bad.txt").write_bytes(b"Title\nOne. Two.\nPr\xc3\xafce \x80 ten.\n")
        return {"source": "txt", "path": str(tmp_path / "texts")}, "bad.txt: invalid UTF-8 on line 3, column 7 (byte 23)"
    raise ValueError(kind)


@pytest.mark.parametrize("kind", [
    "line is a JSON list", "jsonl path is a folder", "parquet path is a folder",
    "text is int", "text is dict", "text is list", "text is bytes",
    "two NaN ids", "a null id", "a float id", "title is int", "title is list", "invalid UTF-8 in a .txt file",
])
def test_prepare_refuses_with_one_line_and_writes_nothing(scratch, tmp_path, monkeypatch, capsys, kind):
    project, base = scratch
    corpus, fragment = bad_corpus(kind, tmp_path)
    before = snapshot(project)
    status, _, stderr = run_in(project, base, {"corpus": corpus}, "prepare", monkeypatch=monkeypatch, capsys=capsys)
    assert_refused(status, stderr, fragment)
    assert "duplicate" not in stderr  # two NaN ids are not "duplicate document id nan"
    assert snapshot(project) == before


def test_a_byte_order_mark_is_accepted(scratch, tmp_path, monkeypatch, capsys):
    """The same JSONL with a UTF-8 byte-order mark in front gives byte-identical outputs."""
    project, base = scratch
    path = tmp_path / "corpus.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + Path(base["corpus"]["path"]).read_bytes())
    before = snapshot(project)
    status, stdout, stderr = run_in(project, base, {"corpus": {"path": str(path)}}, "prepare",
                                    monkeypatch=monkeypatch, capsys=capsys)
    assert status == 0 and not error_lines(stderr), stderr
    assert "prepared 12 documents" in stdout
    assert snapshot(project) == before
    assert pd.read_parquet(project / "data/corpus/documents.parquet")["doc_id"].iloc[0] == "cooking-0"


# ---------------------------------------------------------------- params: checked before any work
BAD_PARAMS = {"train": {"learning_rate": "fast"}, "idc": {"k": True, "K": 3}, "split": {"val": -0.2}}
BAD_PARAM_LINES = ("params `train.learning_rate` must be a number in (0, inf), got 'fast' (str)",
                   "params `idc.k` must be an integer >= 1, got True (bool)",
                   "params `split.val` must be a number in [0, 1], got -0.2 (float)",
                   "params `idc.K` is not a known param")


def test_bad_params_are_one_line_each_in_any_stage(scratch):
    """A real `python -m stages.prepare` refuses every bad value of every section, one line each."""
    project, base = scratch
    write_params(project, deep_merge(base, BAD_PARAMS))
    before = snapshot(project)
    result = run([sys.executable, "-m", "stages.prepare"], project, check=False)
    assert_refused(result.returncode, result.stderr, *BAD_PARAM_LINES)
    assert snapshot(project) == before


def test_bad_params_are_refused_before_the_model_loads(scratch, tmp_path, monkeypatch, capsys):
    """init loads the seed model first: with bad params it stops before -- the seed model here is a
    folder that is no model at all, and it is never mentioned."""
    project, base = scratch
    (tmp_path / "not-a-model").mkdir()
    before = snapshot(project)
    status, _, stderr = run_in(project, base, {**BAD_PARAMS, "seed_model": str(tmp_path / "not-a-model")},
                               "init", monkeypatch=monkeypatch, capsys=capsys)
    assert_refused(status, stderr, *BAD_PARAM_LINES)
    assert "not-a-model" not in stderr
    assert snapshot(project) == before


def test_cuda_without_cuda_is_blamed_on_the_device(scratch, tmp_path, monkeypatch, capsys):
    """`device: cuda` where torch has no CUDA: one line about the device, not about the model
    (a folder that looks like a model; the device is checked before it would load)."""
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    project, base = scratch
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    before = snapshot(project)
    overrides = {"device": "cuda", "seed_model": str(tmp_path / "model"), "init": {"method": "simcse"}}
    status, _, stderr = run_in(project, base, overrides, "init", monkeypatch=monkeypatch, capsys=capsys)
    assert_refused(status, stderr, "params `device` is 'cuda', but torch is")
    assert "set `device: auto` or `cpu`" in stderr and "model" not in error_lines(stderr)[0]
    assert snapshot(project) == before


PRECISION_STAGES = [("init",), ("evaluate", "--iteration", "0"), ("embed", "--iteration", "1"),
                    ("train", "--iteration", "1"), ("evaluate", "--iteration", "1"), ("finetune", "--start", "f0"),
                    ("plusplus", "--round", "2")]


@pytest.mark.parametrize("stage", PRECISION_STAGES, ids=lambda stage: " ".join(stage))
def test_bf16_on_a_cpu_without_bf16_units_stops_every_stage_that_computes(scratch, monkeypatch, capsys, stage):
    """Emulated bf16 is 4-16x slower than fp32: every stage that encodes or trains refuses it with
    one line naming the setting to use, before any model loads, and writes nothing."""
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)
    project, base = scratch
    before = snapshot(project)
    status, _, stderr = run_in(project, base, {"precision": "bf16", "init": {"method": "simcse"}}, stage[0], *stage[1:],
                               monkeypatch=monkeypatch, capsys=capsys)
    assert_refused(status, stderr, "params `precision` is bf16, but this CPU has no bf16 units")
    assert "set `precision: fp32`" in stderr
    assert snapshot(project) == before


def test_fp16_on_the_cpu_stops_the_stage(scratch):
    """A real `python -m stages.train`: fp16 needs CUDA (the trainer would quietly train in fp32)."""
    project, base = scratch
    write_params(project, deep_merge(base, {"precision": "fp16"}))
    before = snapshot(project)
    result = run([sys.executable, "-m", "stages.train", "--iteration", "1"], project, check=False)
    assert_refused(result.returncode, result.stderr, "params `precision` is fp16, which needs a CUDA GPU")
    assert snapshot(project) == before


# ---------------------------------------------------------------- unusual corpora that must run
PIPELINE = ["prepare", "init", "evaluate_init", "first_round_model", "embed@1", "cluster@1", "train@1", "evaluate@1",
            "select", "labels", "finetune@f0", "finetune@best", "plusplus@2", "plusplus@3", "select_plusplus", "report",
            "record", "record_fewshot"]


@pytest.fixture(scope="module")
def untitled_run(tmp_path_factory, tiny_model_dir) -> tuple[Path, list[str], str]:
    """The whole default pipeline (`dvc repro`) on the tiny corpus without its titles: one iteration."""
    root = tmp_path_factory.mktemp("untitled")
    corpus = write_jsonl(root / "corpus.jsonl", [{k: v for k, v in d.items() if k != "title"} for d in tiny_documents()])
    project = make_project(root / "project", {
        "seed_model": str(tiny_model_dir), "device": "cpu", "corpus": {"source": "jsonl", "path": str(corpus)},
        "budget": {"max_pairs_per_document": "all", "max_pairs": "all"},
        "train": {"batch_size": 32, "learning_rate": 1.0e-3}, "embed": {"max_seq_length": 64},
        "evaluate": {"max_seq_length": 64}, "report": {"bootstrap_samples": 200}, "iterations": {"1": {"prev": 0}}})
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OMP_NUM_THREADS", "1")  # tiny models on a shared CPU: one thread each stage
        ran, result = repro(project)
    return project, ran, result.stdout


def read_metrics(project: Path, name: str) -> dict:
    return json.loads((project / "metrics" / name).read_text())


def test_a_corpus_without_titles_runs_the_whole_pipeline(untitled_run):
    """Pair statistics, no retrieval metrics, nothing to fine-tune, and every step says so."""
    project, ran, stdout = untitled_run
    assert ran == PIPELINE, ran
    assert read_metrics(project, "iterations/iter-1/pairs.json")["pairs"] > 0
    for t in (0, 1):
        state = read_metrics(project, f"iterations/iter-{t}/retrieval.json")
        assert (state["val"], state["test"], state["val_queries"], state["test_queries"]) == ({}, {}, 0, 0)
    assert pd.read_parquet(project / "data/ranks/iter-1.parquet").empty
    best = read_metrics(project, "best.json")
    assert best["iteration"] == 1 and best["val_queries"] == 0 and best["selected_by"].startswith("none: no val queries")
    assert read_metrics(project, "labels.json")["labels"] == 0
    assert read_metrics(project, "finetuned/best.json")["skipped"] is True
    assert (project / "models/finetuned/best/SKIPPED").exists()
    assert read_metrics(project, "plusplus.json")["selected_by"] == "none: nothing was fine-tuned (no labelled pairs)"
    report = (project / "reports/report.md").read_text()
    assert "No document has a title, so there are no retrieval queries" in report and "(**1**) is `models/best`" in report
    assert "no document has a title" in stdout and "no val queries, so no validation was possible" in stdout
    assert "fine-tuning is skipped" in stdout


def test_an_empty_validation_split_completes_and_says_no_validation_was_possible(untitled_run, tmp_path):
    """The tiny corpus with titles: two documents per category give 0 val documents at 0.4/0.2/0.4.
    The run completes; stdout, metrics/best.json and the report say validation was impossible and
    which iteration was kept; test is still reported."""
    project = tmp_path / "project"
    shutil.copytree(untitled_run[0], project, symlinks=True)
    update_params(project, {"corpus": {"path": str(write_jsonl(tmp_path / "titled.jsonl", tiny_documents()))},
                            "finetune": {"labels": "all"}})  # its few-shot pool holds 6 pairs, not the default 300
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OMP_NUM_THREADS", "1")
        ran, result = repro(project, "report")
    assert ran[0] == "prepare" and "select" in ran and ran[-1] == "report" and "train@1" not in ran, ran
    assert "note: 0 val queries (params `split.val` (0.2 of each category, rounded) gives no val documents)" in result.stdout
    assert "no val queries, so no validation was possible: nothing stopped the loop early, and the last iteration run, " \
           "iteration 1, was kept" in result.stdout
    assert read_metrics(project, "corpus.json")["val_documents"] == 0
    best = read_metrics(project, "best.json")
    assert best["iteration"] == 1 and best["val_queries"] == 0 and best["val"] == {}
    assert best["selected_by"] == "none: no val queries, so no validation was possible; the last iteration run was kept"
    assert read_metrics(project, "iterations/iter-1/retrieval.json")["test_queries"] == 6 and best["test"]
    report = (project / "reports/report.md").read_text()
    assert "No val queries, so no validation was possible" in report and "(**1**) is `models/best`" in report
    assert "Best iteration by validation" not in report
