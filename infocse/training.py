"""Contrastive training on positive pairs: symmetric InfoNCE with in-batch negatives.

The loss is sentence-transformers' MultipleNegativesRankingLoss in both directions
(anchor -> positive and positive -> anchor) with scale 1/temperature over cosine similarity;
the batches come from `infocse.sampler` (never two pairs of one document).

Several devices (`devices` N > 1) run under torchrun (params `train.launcher`): `batch_size` stays
the global batch, each process takes an equal slice of every document-disjoint global batch, and
the loss gathers the embeddings of all processes, so its negatives are the whole global batch, as
on one device.

Precision (params `precision`, checked against the device by `infocse.models.check_precision`):
bf16 and fp16 are the trainer's mixed precision (autocast): the weights, gradients and optimizer
state stay fp32, the matrix products run in half precision. fp16 needs CUDA.
"""

from __future__ import annotations

import functools
import math
import os
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from infocse.config import TrainingConfig
from infocse.errors import StageError
from infocse.live import live_callback
from infocse.models import check_precision, sequence_length
from infocse.pairs import document_codes
from infocse.sampler import batch_statistics, precomputed_batch_sampler, sampled_batches
from infocse.tokens import table_preprocess, tokenizable


def distributed_world() -> tuple[int, int]:
    """(rank, world size) of this process as torchrun set them; (0, 1) when not launched by it."""
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def text_codes(pairs: pd.DataFrame) -> np.ndarray:
    """(pairs, 2): a code per distinct text, for the anchor and the positive of each pair."""
    codes = pd.factorize(np.concatenate([pairs["text_a"].to_numpy(object), pairs["text_b"].to_numpy(object)]))[0]
    return codes.reshape(2, -1).T.copy()


def training_batches(pairs: pd.DataFrame, training: TrainingConfig, seed: int) -> list[list[int]]:
    """The global batches of every epoch (pair row indices), document-disjoint and with no text
    twice in a batch, by `training.sampler`."""
    doc_codes = document_codes(pairs["doc_id"])
    texts = text_codes(pairs)
    batches = [batch for epoch in range(training.epochs)
               for batch in sampled_batches(training.sampler, doc_codes, training.batch_size, seed + epoch,
                                            multiple_of=training.devices, text_codes=texts)]
    if not batches:
        documents = len(set(doc_codes.tolist()))
        if training.sampler == "spread" and documents >= 2:
            raise StageError(f"no training batch can be formed: sampler `spread` forms full batches only, and the "
                             f"pairs come from {documents} documents, fewer than the batch size "
                             f"{training.batch_size}: use sampler `greedy` or a smaller batch size")
        raise StageError("no training batch can be formed: the pairs come from fewer than two documents")
    return batches


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


def finite_loss_callback(label: str):
    """A trainer callback that stops training at the first non-finite logged loss, naming `label`
    (e.g. "iteration 2"): a diverged model would otherwise be saved and scored as if it trained."""
    from transformers import TrainerCallback

    class StopOnNonFiniteLoss(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            loss = (logs or {}).get("loss")
            if loss is not None and not math.isfinite(loss):
                raise StageError(f"{label}: the training loss became {loss} by step {state.global_step}: lower "
                                 "the learning rate, or set the precision to fp32")

    return StopOnNonFiniteLoss()


def train_on_pairs(model, pairs: pd.DataFrame, training: TrainingConfig, seed: int, device: str,
                   output_dir: Path | None = None, label: str = "training", live=None, phase: str = "train") -> dict:
    """Train `model` in place on (text_a, text_b) pairs; return the loss curve, step counts and
    what the batches looked like.

    Under torchrun (WORLD_SIZE = `devices` > 1) each process calls it with the same pairs and
    trains on its slices of the same global batches; the returned stats are the global ones. Called
    in one process with `devices` > 1, it trains on those same global batches alone.

    `output_dir` is the trainer's output folder. It saves nothing there (no checkpoints, no
    reports), but makes the folder; by default it is the system temp folder, which exists, so no
    folder is made and a killed run leaves none behind. `live` (infocse/live.py) logs the loss and
    learning rate as `phase`'s live curves while it trains."""
    from datasets import Dataset
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from sentence_transformers.sentence_transformer.data_collator import SentenceTransformerDataCollator
    from transformers import set_seed

    precision = check_precision(device, training.precision)
    batches = training_batches(pairs, training, seed)
    _, world = distributed_world()
    if world not in (1, training.devices):
        raise StageError(f"running on {world} processes, but params `train.devices` is {training.devices}")
    set_seed(seed)
    sampler = functools.partial(precomputed_batch_sampler(), batches=batches, shards=world)
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
        logging_nan_inf_filter=False,  # the trainer would log a NaN step loss as the mean of the others
        dataloader_num_workers=dataloader_workers(device, world), disable_tqdm=False, **distributed,
    )
    # the pair table's texts tokenized once, not at every step: the same tensors reach the loss
    collator = SentenceTransformerDataCollator(table_preprocess(model, pairs["text_a"].tolist() +
                                                                pairs["text_b"].tolist())) if tokenizable(model) else None
    trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=dataset, loss=loss, data_collator=collator,
                                         callbacks=[finite_loss_callback(label),
                                                    *([live_callback(live, phase)] if live is not None else [])])
    result = trainer.train()
    # accelerate leaves a mixed-precision model's forward wrapped in autocast: unwrap it, so that a
    # model scored or mined in this process afterwards encodes as its params say, not in bf16
    trainer.accelerator.unwrap_model(trainer.model, keep_fp32_wrapper=False)
    curve = [{"step": row["step"], "loss": row["loss"]} for row in trainer.state.log_history if "loss" in row]
    train_loss = float(result.training_loss)
    if world > 1:
        train_loss = mean_over_processes(train_loss)
    if not math.isfinite(train_loss):
        raise StageError(f"{label}: the mean training loss is {train_loss}: lower the learning rate, or set the "
                         "precision to fp32")
    used = sum(len(batch) for batch in batches)
    stats = {"steps": int(result.global_step), "train_loss": train_loss, "loss_curve": curve,
             "pairs_used": used, "pairs_dropped": len(pairs) * training.epochs - used,
             "batches": batch_statistics(batches, document_codes(pairs["doc_id"]), training.batch_size),
             "sampler": training.sampler, "device": str(device), "precision": precision}
    if training.devices > 1:
        stats["devices"] = training.devices
    return stats


def train_at_length(model, pairs: pd.DataFrame, training: TrainingConfig, seed: int, device: str,
                    label: str = "training", max_seq_length: int | None = None, live=None,
                    phase: str = "train") -> dict:
    """Train at `max_seq_length` (default `training.max_seq_length`: short, for speed); the model
    keeps its own inference length."""
    with sequence_length(model, max_seq_length or training.max_seq_length):
        return train_on_pairs(model, pairs, training, seed, device, label=label, live=live, phase=phase)


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
