"""The `ray` engine of the embed stage: the local engine's embeddings.npy from a pool of model
actors, one partition of whole documents at a time (see infocse/engines/ray.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from infocse.config import Config, EngineConfig
from infocse.embedding import embed_sentences
from infocse.engines.ray import (
    RETRIES,
    map_partitions,
    partition_dataset,
    plan_partitions,
    ray_session,
    read_rows,
    sentence_document_codes,
)
from infocse.errors import StageError
from infocse.io import atomic_output, save_numpy
from infocse.models import check_precision, load_model, precisions
from infocse.paths import SENTENCES


class SentenceEncoder:
    """A Ray Data actor: loads the model once, then encodes whole partitions."""

    def __init__(self, model_path: str, device: str | None, max_seq_length: int, batch_size: int, sentences_path: str,
                 precision: str = "fp32"):
        self.model = load_model(model_path, device, max_seq_length)
        check_precision(self.model.device, precision)  # the actor's device, which may not be the driver's
        self.batch_size = batch_size
        self.sentences_path = sentences_path
        self.precision = precision

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        rows = np.concatenate([np.arange(a, b) for a, b in zip(batch["start"], batch["stop"])])
        texts = [text for a, b in zip(batch["start"], batch["stop"])
                 for text in read_rows(self.sentences_path, int(a), int(b), ["text"]).column("text").to_pylist()]
        return {"row": rows, "embedding": embed_sentences(self.model, texts, self.batch_size, show_progress_bar=False,
                                                          precision=self.precision),
                "precision": np.full(len(rows), self.precision)}


def encoder_resources(ray, engine: EngineConfig, device: str | None) -> tuple[int, float]:
    """(actors, GPUs per actor): `auto` is one actor per GPU of the cluster, or one without GPUs."""
    gpus = 0 if device == "cpu" else int(ray.cluster_resources().get("GPU", 0))
    actors = engine.actors or max(gpus, 1)
    return actors, (min(1.0, gpus / actors) if gpus else 0.0)


def embed_with_ray(config: Config, model_path: Path | str, dest: Path | str,
                   sentences_path: Path | str = SENTENCES) -> tuple[int, str | None]:
    """Write the local engine's embeddings.npy (same rows, same order) from a pool of model actors,
    filling the output file partition by partition as results arrive; returns the sentence count
    and the precision the actors encoded in (None without sentences)."""
    engine = config.engine
    doc_codes = sentence_document_codes(sentences_path)
    bounds = plan_partitions(doc_codes, engine.partition_sentences)
    if len(doc_codes) == 0:
        save_numpy(np.empty((0, 0), np.float32), dest)
        return 0, None
    with ray_session(engine) as ray:
        actors, gpus = encoder_resources(ray, engine, config.device)
        encoder_args = {"model_path": str(Path(model_path).resolve()), "device": config.device,
                        "max_seq_length": config.embed.max_seq_length, "batch_size": config.embed.batch_size,
                        "sentences_path": str(Path(sentences_path).resolve()), "precision": config.precision}
        embedded = map_partitions(partition_dataset(ray, bounds), SentenceEncoder, fn_constructor_kwargs=encoder_args,
                                  compute=ray.data.ActorPoolStrategy(size=actors), num_gpus=gpus,
                                  max_restarts=RETRIES, max_task_retries=RETRIES)
        with atomic_output(dest) as tmp:
            output, written, ran = None, np.zeros(len(doc_codes), bool), set()
            for batch in embedded.iter_batches(batch_size=None, batch_format="numpy"):
                if output is None:
                    output = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32,
                                                       shape=(len(doc_codes), batch["embedding"].shape[1]))
                if written[batch["row"]].any():
                    raise StageError("the ray engine returned a sentence twice")
                output[batch["row"]] = batch["embedding"]
                written[batch["row"]] = True
                ran.update(batch["precision"].tolist())
            if not written.all():
                raise StageError(f"the ray engine lost {int((~written).sum())} sentence(s)")
            output.flush()
            del output
    return len(doc_codes), precisions(*ran)
