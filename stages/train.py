"""train@t: model t-1 trained on iteration t's positive pairs -> model t.

Symmetric InfoNCE over cosine similarity with temperature tau (sentence-transformers'
MultipleNegativesRankingLoss in both directions, scale 1/tau). In-batch negatives come from
other documents only: a batch never holds two pairs of one document, since sentences of one
document may be true positives of each other.

With `train.devices` N > 1 the stage relaunches itself under torchrun (`torch.distributed.run`,
N processes: nccl on CUDA, gloo on CPU). `train.batch_size` stays the global batch: each process
takes an equal slice of every document-disjoint global batch and the loss gathers the embeddings of
all processes, so its negatives are the whole global batch, as on one device. Rank 0 writes the
outputs. With N = 1 (the default) nothing is launched and nothing changes.
"""

from __future__ import annotations

import argparse
import functools
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
from sentence_transformers.base.sampler import DefaultBatchSampler

from stages.common import (
    IterationPaths,
    StageError,
    atomic_output,
    iteration_is_active,
    load_model,
    load_params,
    positive_int,
    read_json,
    resolve_device,
    run_stage,
    save_model,
    seed_everything,
    sequence_length,
    write_json,
)


def document_disjoint_batches(doc_codes: np.ndarray, batch_size: int, seed: int,
                              multiple_of: int = 1) -> list[list[int]]:
    """Shuffle pairs with `seed` and fill batches greedily, skipping a pair whose document is
    already in the batch (it waits for the next one). Batches of fewer than two pairs, which
    have no negatives, are dropped.

    With `multiple_of` > 1 (the number of devices sharing each batch), a batch is cut to a multiple
    of it so that every device gets an equal slice; the pairs cut off wait for the next batch."""
    rng = np.random.default_rng(seed)
    waiting = rng.permutation(len(doc_codes)).tolist()
    codes = np.asarray(doc_codes).tolist()
    batches: list[list[int]] = []
    while waiting:
        batch, docs, deferred = [], set(), []
        filled_at = len(waiting)
        for position, index in enumerate(waiting):
            if len(batch) == batch_size:  # every later pair waits: stop scanning (linear, not quadratic)
                filled_at = position
                break
            if codes[index] in docs:
                deferred.append(index)
            else:
                batch.append(index)
                docs.add(codes[index])
        deferred += waiting[filled_at:]
        if multiple_of > 1 and len(batch) % multiple_of:
            batch = batch[: len(batch) - len(batch) % multiple_of]
            kept = set(batch)
            deferred = [index for index in waiting if index not in kept]
        if len(batch) < 2:
            break
        batches.append(batch)
        waiting = deferred
    return batches


def rank_slices(batch: list[int], shards: int) -> list[list[int]]:
    """A global batch cut into `shards` equal consecutive slices; slice r is rank r's share."""
    if len(batch) % shards:
        raise ValueError(f"a batch of {len(batch)} pairs cannot be cut into {shards} equal slices")
    size = len(batch) // shards
    return [batch[r * size:(r + 1) * size] for r in range(shards)]


class PrecomputedBatchSampler(DefaultBatchSampler):
    """The trainer's batch sampler: yields the given (document-disjoint) batches, in order.

    With `shards` = N > 1 processes it yields, for each global batch in turn, its N rank slices
    (slice 0, ..., slice N-1). Accelerate shards a batch sampler across processes by position
    (`BatchSamplerShard`, `split_batches=False`: process r takes items r, r + N, r + 2N, ...), so
    process r gets slice r of every global batch, and one optimizer step sees one global batch.
    Its `batch_size` is then None, which tells accelerate the slices vary in size (the last global
    batches can be short) and must not be regrouped or padded."""

    def __init__(self, dataset, batch_size, drop_last, valid_label_columns=None, generator=None, seed=0, *,
                 batches: list[list[int]], shards: int = 1):
        super().__init__(dataset, batch_size=batch_size, drop_last=drop_last,
                         valid_label_columns=valid_label_columns, generator=generator, seed=seed)
        self.batches = batches
        self.shards = shards
        if shards > 1:
            self.batch_size = None

    def __iter__(self):
        if self.shards == 1:
            return iter(self.batches)
        return (part for batch in self.batches for part in rank_slices(batch, self.shards))

    def __len__(self) -> int:
        return len(self.batches) * self.shards


def training_devices(train: dict) -> int:
    """`train.devices` (1 when absent): how many processes share each global batch."""
    return positive_int({"train": {"devices": 1, **train}}, "train.devices")


def distributed_world() -> tuple[int, int]:
    """(rank, world size) of this process as torchrun set them; (0, 1) when not launched by it."""
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def train_on_pairs(model, pairs: pd.DataFrame, train: dict, seed: int, device: str, output_dir: Path) -> dict:
    """Train `model` in place on (text_a, text_b) pairs; return the loss curve and step counts.

    Under torchrun (WORLD_SIZE = `train.devices` > 1) each process calls it with the same pairs and
    trains on its slices of the same global batches; the returned stats are the global ones. Called
    in one process with `train.devices` > 1, it trains on those same global batches alone."""
    from datasets import Dataset
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    batches = training_batches(pairs, train, seed)
    temperature = float(train["temperature"])
    batch_size = int(train["batch_size"])
    devices = training_devices(train)
    _, world = distributed_world()
    if world not in (1, devices):
        raise StageError(f"running on {world} processes, but params `train.devices` is {devices}")
    seed_everything(seed)
    sampler = functools.partial(PrecomputedBatchSampler, batches=batches, shards=world)
    dataset = Dataset.from_dict({"anchor": pairs["text_a"].tolist(), "positive": pairs["text_b"].tolist()})
    distributed = {}
    if world > 1:  # negatives gathered from every process: the loss sees the global batch
        distributed = {"ddp_backend": "nccl" if str(device).startswith("cuda") else "gloo",
                       "accelerator_config": {"split_batches": False, "dispatch_batches": False},
                       # what sentence-transformers sets under DDP anyway (with a warning); no effect here,
                       # since the sampler yields whole groups of one slice per process
                       "dataloader_drop_last": True}
    loss = MultipleNegativesRankingLoss(model, scale=1.0 / temperature, gather_across_devices=world > 1,
                                        directions=("query_to_doc", "doc_to_query"), partition_mode="per_direction")
    args = SentenceTransformerTrainingArguments(
        output_dir=str(output_dir), num_train_epochs=1, per_device_train_batch_size=batch_size // world,
        learning_rate=float(train["learning_rate"]), warmup_steps=float(train["warmup_ratio"]), seed=seed,
        data_seed=seed, batch_sampler=sampler, save_strategy="no", report_to="none", logging_steps=10,
        use_cpu=device == "cpu", dataloader_num_workers=0, disable_tqdm=False, **distributed,
    )
    trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=dataset, loss=loss)
    result = trainer.train()
    curve = [{"step": row["step"], "loss": row["loss"]} for row in trainer.state.log_history if "loss" in row]
    train_loss = float(result.training_loss)
    if world > 1:
        train_loss = mean_over_processes(train_loss)
    used = sum(len(batch) for batch in batches)
    stats = {"steps": int(result.global_step), "train_loss": train_loss, "loss_curve": curve,
             "pairs_used": used, "pairs_dropped": len(pairs) * int(train["epochs"]) - used}
    if devices > 1:
        stats["devices"] = devices
    return stats


def training_batches(pairs: pd.DataFrame, train: dict, seed: int) -> list[list[int]]:
    """Check the training params and plan the global batches of every epoch (pair row indices)."""
    warmup = float(train["warmup_ratio"])
    if not 0 <= warmup < 1:
        raise StageError(f"params `train.warmup_ratio` must be in [0, 1), got {warmup}")
    temperature = float(train["temperature"])
    if temperature <= 0:
        raise StageError(f"params `train.temperature` must be > 0, got {temperature}")
    batch_size = positive_int({"train": train}, "train.batch_size")
    if batch_size < 2:
        raise StageError("params `train.batch_size` must be >= 2: in-batch negatives need another pair")
    epochs = positive_int({"train": train}, "train.epochs")
    devices = training_devices(train)
    if batch_size % devices:
        raise StageError(f"params `train.batch_size` ({batch_size}) must be a multiple of `train.devices` ({devices}): "
                         "it is the global batch, and each device takes an equal share of it")
    doc_codes = pd.factorize(pairs["doc_id"])[0]
    batches = [batch for epoch in range(epochs)
               for batch in document_disjoint_batches(doc_codes, batch_size, seed + epoch, multiple_of=devices)]
    if not batches:
        raise StageError("no training batch can be formed: the pairs come from fewer than two documents")
    return batches


def mean_over_processes(value: float) -> float:
    """The mean of `value` over the torch.distributed processes.

    The trainer's `training_loss` sums the losses it logged, which are averaged over processes,
    plus this process's own losses since the last log: every process holds the same first part,
    so the mean over processes is the mean loss of the global batches."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return value
    device = "cuda" if dist.get_backend() == "nccl" else "cpu"
    tensor = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(tensor)
    return float(tensor.item() / dist.get_world_size())


def launch_distributed(devices: int, arguments: list[str], cwd: Path | str | None = None) -> int:
    """Run `python -m torch.distributed.run --standalone --nproc_per_node <devices> <arguments>` with
    this interpreter (so the venv's torch) and return its exit status. Each process gets an equal
    share of the CPU threads unless OMP_NUM_THREADS is set."""
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // devices)))
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={devices}", *arguments]
    return subprocess.run(command, cwd=cwd, env=env).returncode


def check_devices(device: str, devices: int) -> None:
    if str(device).startswith("cuda"):
        import torch

        available = torch.cuda.device_count()
        if devices > available:
            raise StageError(f"params `train.devices` is {devices}, but only {available} CUDA device(s) are visible")


def train_at_length(model, pairs: pd.DataFrame, params: dict, device: str) -> dict:
    """Train at `train.max_seq_length` (short, for speed); the model keeps its own inference length."""
    with sequence_length(model, positive_int(params, "train.max_seq_length")), tempfile.TemporaryDirectory() as scratch:
        return train_on_pairs(model, pairs, params["train"], int(params["seed"]), device, Path(scratch))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--iteration", type=int, required=True)
    parser.add_argument("--launched-at", type=float, default=None, help=argparse.SUPPRESS)  # set by the torchrun launch
    arguments = parser.parse_args()
    t = arguments.iteration
    params = load_params()
    paths = IterationPaths(t)
    started = time.perf_counter()
    if not iteration_is_active(params, t):
        with atomic_output(paths.model) as tmp:
            tmp.mkdir()
            (tmp / "SKIPPED").write_text("the loop stopped before this iteration: it did no work\n")
        write_json(paths.metrics / "train.json", {"iteration": t, "skipped": True, "seconds": 0.0})
        print(f"iteration {t}: skipped (the loop stopped)")
        return
    pairs = pd.read_parquet(paths.pairs)
    if pairs.empty:
        raise StageError(f"{paths.pairs} has no pairs to train on")
    device = resolve_device(params.get("device"))
    devices = training_devices(params["train"])
    rank, world = distributed_world()
    if devices > 1 and "LOCAL_RANK" not in os.environ:  # not yet under torchrun: relaunch there
        training_batches(pairs, params["train"], int(params["seed"]))  # bad params fail here, in one line
        check_devices(device, devices)
        status = launch_distributed(devices, ["-m", "stages.train", "--iteration", str(t),
                                              "--launched-at", str(time.time())])
        if status != 0:
            raise StageError(f"training on {devices} processes failed "
                             f"(torchrun exit status {status}; their errors are above)")
        stats = read_json(paths.metrics / "train.json")
        print(f"iteration {t}: {stats['steps']} steps on {stats['pairs_used']} pairs over {devices} processes, "
              f"mean loss {stats['train_loss']:.4f}")
        return
    if world > 1 and device.startswith("cuda"):
        device = f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
    model = load_model(IterationPaths(t - 1).model, device)
    stats = train_at_length(model, pairs, params, device)
    if rank != 0:
        return
    save_model(model, paths.model)
    seconds = time.time() - arguments.launched_at if arguments.launched_at else time.perf_counter() - started
    stats.update({"iteration": t, "skipped": False, "pairs": len(pairs), "seconds": seconds})
    write_json(paths.metrics / "train.json", stats)
    print(f"iteration {t}: {stats['steps']} steps on {stats['pairs_used']} pairs, mean loss {stats['train_loss']:.4f}")


if __name__ == "__main__":
    run_stage(main)
