"""train on several devices (`train.devices` > 1, the stage launched by `train.launcher`): how
global batches are cut into per-process slices, and a real two-process torchrun training of the
train stage on CPU (gloo) that matches one process on the same global batches."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from accelerate.data_loader import BatchSamplerShard
from conftest import REPO, config_with
from pipeline_helpers import deep_merge, read_params, write_params
from test_train import check_batches, dropped, tiny_pairs

from infocse.config import parse_config
from infocse.errors import StageError, run_stage
from infocse.models import load_model
from infocse.sampler import greedy_document_disjoint_batches, precomputed_batch_sampler, spread_batches
from infocse.seeds import derived_seed
from infocse.training import train_at_length, train_on_pairs
from stages.train import main

LAUNCHER = "python -m torch.distributed.run --standalone --nproc_per_node=2"
TRAIN_PARAMS = {"batch_size": 4, "learning_rate": 3.0e-3, "warmup_ratio": 0.1, "temperature": 0.05, "epochs": 3,
                "max_seq_length": 32, "devices": 2, "launcher": LAUNCHER}
TRAIN = config_with({"train": TRAIN_PARAMS, "precision": "fp32"}).train


# ---------------------------------------------------------------- global batches and rank slices
def rank_batches(batches: list[list[int]], devices: int, n: int, batch_size: int) -> list[list[list[int]]]:
    """What each process trains on: our sampler, sharded across processes by accelerate's own
    BatchSamplerShard exactly as the trainer's `accelerator.prepare` does (split_batches=False,
    even_batches=False)."""
    sampler = precomputed_batch_sampler()(range(n), batch_size=batch_size // devices, drop_last=False,
                                      batches=batches, shards=devices)
    return [list(BatchSamplerShard(sampler, num_processes=devices, process_index=rank, split_batches=False,
                                   even_batches=False)) for rank in range(devices)]


@pytest.mark.parametrize("sampler", ["greedy", "spread"])
@pytest.mark.parametrize("devices", [2, 4])
@pytest.mark.parametrize("seed", range(3))
def test_rank_slices_partition_each_global_batch(sampler, devices, seed):
    """At every step the processes' slices are equal in size, disjoint, and together exactly the
    global batch; the global batch never holds two pairs of one document; each global batch is a
    multiple of the device count; greedy leaves pairs out only when fewer than two (or fewer than
    `devices`) documents remain, spread only when fewer than a batch of documents remain."""
    batch_size = 8
    rng = np.random.default_rng(seed)
    doc_codes = rng.choice(25, size=300, p=np.r_[0.3, np.full(24, 0.7 / 24)])
    batching = {"greedy": greedy_document_disjoint_batches, "spread": spread_batches}[sampler]
    batches = batching(doc_codes, batch_size, seed, multiple_of=devices)
    check_batches(batches, doc_codes, batch_size)
    assert all(len(batch) % devices == 0 for batch in batches)
    left = dropped(batches, len(doc_codes))
    assert len(set(doc_codes[left].tolist())) < (max(2, devices) if sampler == "greedy" else batch_size)

    per_rank = rank_batches(batches, devices, len(doc_codes), batch_size)
    assert [len(steps) for steps in per_rank] == [len(batches)] * devices, "every process takes one slice per step"
    for step, batch in enumerate(batches):
        slices = [per_rank[rank][step] for rank in range(devices)]
        assert {len(part) for part in slices} == {len(batch) // devices}
        assert sorted(index for part in slices for index in part) == sorted(batch)
        assert [index for part in slices for index in part] == batch, "rank order is the gathered order"


def test_one_device_batches_are_unchanged():
    """multiple_of=1 (one device) is the original batching, and the sampler yields it as is."""
    doc_codes = np.random.default_rng(0).integers(0, 20, size=200)
    batches = greedy_document_disjoint_batches(doc_codes, 8, 0)
    assert greedy_document_disjoint_batches(doc_codes, 8, 0, multiple_of=1) == batches
    sampler = precomputed_batch_sampler()(range(200), batch_size=8, drop_last=False, batches=batches)
    assert list(sampler) == batches and len(sampler) == len(batches) and sampler.batch_size == 8


def test_hand_worked_batches_for_two_devices():
    """Documents 0,0,0,1,2: batch size 4 on two devices -> the first batch {0,1,2} is cut to two pairs,
    the third waits; then pairs of document 0 alone remain, which cannot form a batch."""
    doc_codes = np.array([0, 0, 0, 1, 2])
    batches = greedy_document_disjoint_batches(doc_codes, 4, 0, multiple_of=2)
    assert all(len(batch) == 2 for batch in batches)
    check_batches(batches, doc_codes, 4)
    used = [index for batch in batches for index in batch]
    assert {3, 4} <= set(used) and len(used) == 4, batches


@pytest.mark.parametrize("change, message", [
    ({"devices": 3}, r"batch_size` \(4\) must be a multiple of `train.devices` \(3\)"),
    ({"devices": 0}, "train.devices"),
    ({"devices": "two"}, "train.devices"),
])
def test_bad_device_params_are_refused(change, message):
    with pytest.raises(StageError, match=message):
        config_with({"train": {**TRAIN_PARAMS, **change}})


def test_world_size_must_match_devices(tiny_model_dir, tmp_path, monkeypatch):
    """Launched by hand on another number of processes than `train.devices`: a clear error."""
    monkeypatch.setenv("WORLD_SIZE", "4")
    model = load_model(tiny_model_dir, "cpu")
    with pytest.raises(StageError, match="running on 4 processes, but params `train.devices` is 2"):
        train_on_pairs(model, tiny_pairs()[0], TRAIN, 0, "cpu", tmp_path / "out")


# ---------------------------------------------------------------- a real two-process run
def without_dropout(model_dir: Path, dest: Path) -> Path:
    """A copy of the model with dropout off: each process draws its own dropout masks, so with
    dropout on, two processes and one process see different (equally valid) noise; without it the
    two runs compute the same function of the same global batches, and must agree."""
    shutil.copytree(model_dir, dest)
    config = json.loads((dest / "config.json").read_text())
    config.update(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    (dest / "config.json").write_text(json.dumps(config))
    return dest


def scratch_project(root: Path, model_dir: Path, pairs) -> Path:
    """Just what `python -m stages.train --iteration 1` reads: params, model 0, pairs, the go-ahead.
    The code is the repository's (on PYTHONPATH for a subprocess)."""
    root.mkdir()
    params = deep_merge(read_params(REPO), {"device": "cpu", "seed": 0, "train": TRAIN_PARAMS,
                                            "iterations": {"1": {"prev": 0}}})
    parse_config(params)
    write_params(root, params)
    shutil.copytree(model_dir, root / "models/iterations/iter-0")
    (root / "data/iterations/iter-1").mkdir(parents=True)
    pairs.to_parquet(root / "data/iterations/iter-1/pairs.parquet", index=False)
    (root / "data/state").mkdir(parents=True)
    (root / "data/state/after-iter-0.json").write_text(json.dumps({"continue": True}))
    return root


def run_stage_here(project: Path, monkeypatch) -> int:
    """`python -m stages.train --iteration 1` in `project`, in this process (not under torchrun)."""
    monkeypatch.chdir(project)
    monkeypatch.setattr(sys, "argv", ["stages.train", "--iteration", "1"])
    for name in ("LOCAL_RANK", "RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(SystemExit) as exit_info:
        run_stage(main)
    return exit_info.value.code


def test_stage_refuses_bad_devices(tiny_model_dir, tmp_path, monkeypatch, capsys):
    """A batch size the devices cannot share is a one-line error from the stage, and no model is written."""
    project = scratch_project(tmp_path / "project", tiny_model_dir, tiny_pairs()[0])
    params = read_params(project)
    params["train"]["devices"] = 3
    write_params(project, params)
    assert run_stage_here(project, monkeypatch) == 1
    assert capsys.readouterr().err.strip() == ("error: params `train.batch_size` (4) must be a multiple of "
                                               "`train.devices` (3): it is the global batch, and each device "
                                               "takes an equal share of it")
    assert not (project / "models/iterations/iter-1").exists()


def test_stage_run_without_its_launcher_is_refused(tiny_model_dir, tmp_path, monkeypatch, capsys):
    """`train.devices: 2` but the stage started by plain `python` (one process): one line naming the
    launcher to set, before any model loads, and nothing written."""
    project = scratch_project(tmp_path / "project", tiny_model_dir, tiny_pairs()[0])
    assert run_stage_here(project, monkeypatch) == 1
    error = capsys.readouterr().err.strip()
    assert error.startswith("error: running on 1 process(es), but params `train.devices` is 2: set params "
                            f"`train.launcher` to `{LAUNCHER}`"), error
    assert "\n" not in error
    assert not (project / "models/iterations/iter-1").exists()
    assert not (project / "metrics").exists()


def test_two_process_training_matches_one_process(tiny_model_dir, tmp_path, one_torch_thread):
    """The train stage as dvc.yaml runs it with `train.devices: 2`: `${train.launcher} -m
    stages.train --iteration 1`, i.e. under torchrun (2 CPU processes, gloo); it completes, and
    rank 0 writes the model and metrics. Its loss curve, mean loss
    and final weights equal those of one process trained on the same global batches: the processes'
    slices together are each global batch, and the gathered negatives are the whole global batch
    (without the gathering, each process's loss would see half the negatives, and its values would
    differ by far more than the tolerance)."""
    pairs, _ = tiny_pairs()
    model_dir = without_dropout(tiny_model_dir, tmp_path / "model")
    project = scratch_project(tmp_path / "project", model_dir, pairs)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    for name in ("LOCAL_RANK", "RANK", "WORLD_SIZE"):
        env.pop(name, None)
    launcher = read_params(project)["train"]["launcher"].split()
    assert launcher[0] == "python"
    command = [sys.executable, *launcher[1:], "-m", "stages.train", "--iteration", "1"]
    result = subprocess.run(command, cwd=project, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    assert "over 2 processes" in result.stdout
    distributed = json.loads((project / "metrics/iterations/iter-1/train.json").read_text())
    assert not list(project.glob("models/iterations/.*")), "a temporary model folder was left"

    model = load_model(model_dir, "cpu")
    single = train_at_length(model, pairs, TRAIN, derived_seed(0, "train", 1), "cpu")  # the stage's seed for t = 1

    assert distributed["devices"] == single["devices"] == 2
    assert distributed["batches"] == single["batches"] and distributed["batches"]["batches"] == single["steps"]
    assert distributed["steps"] == single["steps"] > 0
    assert distributed["pairs_used"] == single["pairs_used"] and distributed["pairs_dropped"] == single["pairs_dropped"]
    steps = [row["step"] for row in distributed["loss_curve"]]
    assert steps == [row["step"] for row in single["loss_curve"]] and len(steps) >= 5, steps
    # float32 sums in another order (two halves of each batch, a gradient all-reduce) differ in the last
    # bits: measured 1e-6 relative (and 2e-8 absolute on a loss of 1.6e-4); without the gathering the first
    # logged loss is 0.66 instead of 1.36
    for a, b in zip(distributed["loss_curve"], single["loss_curve"]):
        assert math.isclose(a["loss"], b["loss"], rel_tol=1e-4, abs_tol=1e-6), (distributed["loss_curve"], single["loss_curve"])
    assert math.isclose(distributed["train_loss"], single["train_loss"], rel_tol=1e-4)
    # training moved the loss (otherwise equal curves would prove little)
    assert single["loss_curve"][-1]["loss"] < single["loss_curve"][0]["loss"] - 0.1

    trained = load_model(project / "models/iterations/iter-1", "cpu").state_dict()
    reference = model.state_dict()
    initial = load_model(model_dir, "cpu").state_dict()
    assert trained.keys() == reference.keys()
    moved = max((reference[k] - initial[k]).abs().max().item() for k in reference)
    apart = max((trained[k] - reference[k]).abs().max().item() for k in reference)
    # measured: weights moved up to 0.08, the two runs 2e-5 apart
    assert apart < 1e-3 * max(moved, 1e-6) + 1e-5, (apart, moved)
    assert torch.isfinite(torch.tensor(distributed["train_loss"]))
