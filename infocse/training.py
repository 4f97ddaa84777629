"""Contrastive training on positive pairs: symmetric InfoNCE with in-batch negatives.

The loss is sentence-transformers' MultipleNegativesRankingLoss in both directions
(anchor -> positive and positive -> anchor) with scale 1/temperature over cosine similarity;
the batches come from `infocse.sampler` (never two pairs of one document).

Several devices (`devices` N > 1) run under torchrun (params `train.launcher`): `batch_size` stays
the global batch, each process takes an equal slice of every document-disjoint global batch, and
the loss gathers the embeddings of all processes, so its negatives are the whole global batch, as
on one device.

Precision (params `train.precision`): `auto` is bf16 mixed precision on a CUDA device that has
it and fp32 elsewhere, so CPU runs are what they always were. bf16 may be asked for on the CPU
too (torch's CPU autocast runs it; fast only on CPUs with bf16 instructions); fp16 needs CUDA.
"""

from __future__ import annotations

import functools
import os
import tempfile
from pathlib import Path

import pandas as pd

from infocse.config import TrainingConfig
from infocse.errors import StageError
from infocse.models import sequence_length
from infocse.pairs import document_codes
from infocse.sampler import PrecomputedBatchSampler, batch_statistics, sampled_batches


def distributed_world() -> tuple[int, int]:
    """(rank, world size) of this process as torchrun set them; (0, 1) when not launched by it."""
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def training_batches(pairs: pd.DataFrame, training: TrainingConfig, seed: int) -> list[list[int]]:
    """The global batches of every epoch (pair row indices), document-disjoint, by `training.sampler`."""
    doc_codes = document_codes(pairs["doc_id"])
    batches = [batch for epoch in range(training.epochs)
               for batch in sampled_batches(training.sampler, doc_codes, training.batch_size, seed + epoch,
                                            multiple_of=training.devices)]
    if not batches:
        documents = len(set(doc_codes.tolist()))
        if training.sampler == "spread" and documents >= 2:
            raise StageError(f"no training batch can be formed: sampler `spread` forms full batches only, and the "
                             f"pairs come from {documents} documents, fewer than the batch size "
                             f"{training.batch_size}: use sampler `greedy` or a smaller batch size")
        raise StageError("no training batch can be formed: the pairs come from fewer than two documents")
    return batches


def training_precision(device: str, precision: str, bf16_supported: bool) -> str:
    """fp32, bf16 or fp16: what params `precision` means on `device`. `bf16_supported` is
    `torch.cuda.is_bf16_supported()` on CUDA (the CPU always has bf16 autocast). `auto` is bf16 on
    CUDA that has it, else fp32; a choice the device cannot run is one clear error, not a silent
    fallback (the trainer would quietly train fp16 on the CPU in fp32)."""
    cuda = str(device).startswith("cuda")
    if precision == "auto":
        return "bf16" if cuda and bf16_supported else "fp32"
    if precision == "fp16" and not cuda:
        raise StageError(f"training precision fp16 needs a CUDA device, but the device is {device}: "
                         "set params `train.precision` (or `finetune.precision`) to auto, fp32 or bf16")
    if precision == "bf16" and cuda and not bf16_supported:
        raise StageError(f"training precision bf16 is not supported by this CUDA device ({device}): "
                         "set params `train.precision` (or `finetune.precision`) to auto, fp32 or fp16")
    if precision not in ("fp32", "bf16", "fp16"):
        raise StageError(f"training precision must be auto, fp32, bf16 or fp16, got {precision!r}")
    return precision


def device_training_precision(device: str, precision: str) -> str:
    """`training_precision` for this machine's `device`."""
    bf16_supported = True
    if str(device).startswith("cuda"):
        import torch

        bf16_supported = torch.cuda.is_bf16_supported()
    return training_precision(device, precision, bf16_supported)


def dataloader_workers(device: str, devices: int) -> int:
    """Processes that tokenize batches ahead of the training step: on CUDA, where the step is short
    and tokenizing in the loop would keep the GPU waiting; none on the CPU, which tokenizes and
    trains on the same cores (and whose runs stay as they were). The batches and their order are
    the sampler's either way: workers only collate."""
    if not str(device).startswith("cuda"):
        return 0
    return max(0, min(2, (os.cpu_count() or 1) // devices - 1))


def contrastive_loss(model, temperature: float, gather_across_devices: bool = False):
    """Symmetric InfoNCE at `temperature`: cross-entropy of each anchor over the batch's positives
    and of each positive over the batch's anchors, cosine similarity scaled by 1/temperature."""
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    return MultipleNegativesRankingLoss(model, scale=1.0 / temperature, gather_across_devices=gather_across_devices,
                                        directions=("query_to_doc", "doc_to_query"), partition_mode="per_direction")


def train_on_pairs(model, pairs: pd.DataFrame, training: TrainingConfig, seed: int, device: str,
                   output_dir: Path | None = None) -> dict:
    """Train `model` in place on (text_a, text_b) pairs; return the loss curve, step counts and
    what the batches looked like.

    Under torchrun (WORLD_SIZE = `devices` > 1) each process calls it with the same pairs and
    trains on its slices of the same global batches; the returned stats are the global ones. Called
    in one process with `devices` > 1, it trains on those same global batches alone.

    `output_dir` is the trainer's output folder. It saves nothing there (no checkpoints, no
    reports), but makes the folder; by default it is the system temp folder, which exists, so no
    folder is made and a killed run leaves none behind."""
    from datasets import Dataset
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from transformers import set_seed

    precision = device_training_precision(device, training.precision)
    batches = training_batches(pairs, training, seed)
    _, world = distributed_world()
    if world not in (1, training.devices):
        raise StageError(f"running on {world} processes, but params `train.devices` is {training.devices}")
    set_seed(seed)
    sampler = functools.partial(PrecomputedBatchSampler, batches=batches, shards=world)
    dataset = Dataset.from_dict({"anchor": pairs["text_a"].tolist(), "positive": pairs["text_b"].tolist()})
    distributed = {}
    if world > 1:  # negatives gathered from every process: the loss sees the global batch
        distributed = {"ddp_backend": "nccl" if str(device).startswith("cuda") else "gloo",
                       "accelerator_config": {"split_batches": False, "dispatch_batches": False},
                       # what sentence-transformers sets under DDP anyway (with a warning); no effect here,
                       # since the sampler yields whole groups of one slice per process
                       "dataloader_drop_last": True}
    loss = contrastive_loss(model, training.temperature, gather_across_devices=world > 1)
    args = SentenceTransformerTrainingArguments(
        output_dir=str(output_dir if output_dir is not None else tempfile.gettempdir()), num_train_epochs=1,
        per_device_train_batch_size=training.batch_size // world,
        learning_rate=training.learning_rate, warmup_steps=training.warmup_ratio, seed=seed,
        data_seed=seed, batch_sampler=sampler, save_strategy="no", report_to="none", logging_steps=10,
        use_cpu=device == "cpu", bf16=precision == "bf16", fp16=precision == "fp16",
        dataloader_num_workers=dataloader_workers(device, world), disable_tqdm=False, **distributed,
    )
    trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=dataset, loss=loss)
    result = trainer.train()
    curve = [{"step": row["step"], "loss": row["loss"]} for row in trainer.state.log_history if "loss" in row]
    train_loss = float(result.training_loss)
    if world > 1:
        train_loss = mean_over_processes(train_loss)
    used = sum(len(batch) for batch in batches)
    stats = {"steps": int(result.global_step), "train_loss": train_loss, "loss_curve": curve,
             "pairs_used": used, "pairs_dropped": len(pairs) * training.epochs - used,
             "batches": batch_statistics(batches, document_codes(pairs["doc_id"]), training.batch_size),
             "sampler": training.sampler, "precision": precision}
    if training.devices > 1:
        stats["devices"] = training.devices
    return stats


def train_at_length(model, pairs: pd.DataFrame, training: TrainingConfig, seed: int, device: str) -> dict:
    """Train at `training.max_seq_length` (short, for speed); the model keeps its own inference length."""
    with sequence_length(model, training.max_seq_length):
        return train_on_pairs(model, pairs, training, seed, device)


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


def check_devices(device: str, devices: int) -> None:
    if str(device).startswith("cuda"):
        import torch

        available = torch.cuda.device_count()
        if devices > available:
            raise StageError(f"params `train.devices` is {devices}, but only {available} CUDA device(s) are visible")
