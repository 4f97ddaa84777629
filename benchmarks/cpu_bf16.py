"""CPU precision: params `precision` fp32 against bf16, side by side, on 1 and 2 threads.

    python -m benchmarks.cpu_bf16 [--sentences 1024] [--pairs 256] [--documents 300] [--rounds 2]

On this machine's CPU, for each thread count, it times the stages' own calls:
- embed: `infocse.embedding.embed_sentences` on real BBC body sentences at 128 tokens (sentences/s);
  also bf16 with the weights cast instead of autocast, and how close each is to fp32 (lowest
  cosine between the fp32 and the reduced-precision vector of a sentence; the share of sentences
  whose nearest neighbour is the same), which is how the encoding path was chosen;
- train: `infocse.training.train_on_pairs` on real pairs (neighbour pairs of BBC sentences, the
  trainer's settings from params.yaml) from a fresh copy of the model each time (pairs/s);
- evaluate: `infocse.retrieval.score_model` on the first `--documents` BBC documents (seconds).
Runs alternate fp32 / bf16 and flip order every round, so that drift falls on both. The stages
accept bf16 only on a CPU with bf16 matrix instructions (AMX or AVX-512 BF16); elsewhere embed and
evaluate show what emulated bf16 would cost, and train (which the stage's own check refuses) is
left out.
"""

from __future__ import annotations

import argparse
import copy
import platform
import time

import numpy as np
import torch

from benchmarks.embed_throughput import bbc_sentences
from infocse.config import load_config
from infocse.embedding import embed_sentences
from infocse.models import cpu_has_bf16, load_model, resolve_model_source, sequence_length, weights_in
from infocse.retrieval import score_model


def timed(function) -> tuple[float, object]:
    started = time.perf_counter()
    result = function()
    return time.perf_counter() - started, result


def neighbour_training_pairs(count: int):
    """`count` real pairs: neighbouring sentences of BBC bodies (the `neighbours` annotator), a fixed sample."""
    from infocse.baselines import neighbour_pairs
    from infocse.corpora.readers import read_bbc_news
    from infocse.corpora.sentences import build_sentence_table

    sentences = build_sentence_table(read_bbc_news().sort_values("doc_id").head(600))[0]
    pairs = neighbour_pairs(sentences, 1)
    return pairs.sample(n=min(count, len(pairs)), random_state=0).reset_index(drop=True)


def bbc_documents(count: int):
    """The first `count` BBC documents as the prepare stage lays them out, every other one a query."""
    from infocse.corpora.readers import read_bbc_news

    documents = read_bbc_news().sort_values("doc_id").head(count).reset_index(drop=True)
    documents["split"] = np.where(np.arange(len(documents)) % 2 == 0, "val", "test")
    return documents


def agreement(reference: np.ndarray, other: np.ndarray) -> tuple[float, float]:
    """Lowest cosine between a sentence's two vectors, and the share of sentences whose nearest
    other sentence is the same under both."""
    lowest = float((reference * other).sum(axis=1).min())
    nearest = []
    for vectors in (reference, other):
        similarity = vectors @ vectors.T
        np.fill_diagonal(similarity, -np.inf)
        nearest.append(similarity.argmax(axis=1))
    return lowest, float((nearest[0] == nearest[1]).mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="all-MiniLM-L6-v2")
    parser.add_argument("--sentences", type=int, default=1024)
    parser.add_argument("--pairs", type=int, default=256)
    parser.add_argument("--documents", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()

    config = load_config()
    model = load_model(resolve_model_source(args.model), "cpu")
    texts, source = bbc_sentences(args.sentences)
    pairs = neighbour_training_pairs(args.pairs)
    documents = bbc_documents(args.documents)
    print(f"CPU: {platform.processor() or platform.machine()}; torch {torch.__version__}; "
          f"AMX tiles {torch.cpu._is_amx_tile_supported()}, AVX-512 BF16 {torch.cpu._is_avx512_bf16_supported()}; "
          f"stages accept bf16 on this CPU: {cpu_has_bf16()}")
    print(f"{len(texts)} sentences from {source}; {len(pairs)} neighbour pairs; {len(documents)} documents "
          f"({(documents['split'] == 'val').sum()} val queries)\n")

    with sequence_length(model, config.embed.max_seq_length):
        fp32 = embed_sentences(model, texts, 64, show_progress_bar=False, precision="fp32")
        autocast = embed_sentences(model, texts, 64, show_progress_bar=False, precision="bf16")
        with weights_in(model, torch.bfloat16):
            cast = model.encode(texts, batch_size=64, normalize_embeddings=True, convert_to_numpy=True,
                                show_progress_bar=False)
    for name, vectors in (("bf16 autocast (the CPU path)", autocast), ("bf16 weights cast", cast)):
        lowest, same = agreement(fp32, vectors)
        print(f"{name}: lowest cosine to fp32 {lowest:.5f}; same nearest neighbour for {same:.1%}")
    print()

    rows = []
    for threads in args.threads:
        torch.set_num_threads(threads)
        work = {
            "embed": lambda precision: len(texts) / timed(lambda: encode_at_embed_length(model, texts, config,
                                                                                       precision))[0],
            **({"train": lambda precision: train_rate(model, pairs, config, precision)} if cpu_has_bf16() else {}),
            "evaluate": lambda precision: timed(lambda: score_model(
                model, documents, config.evaluate.model_copy(update=dict(precision=precision))))[0],
        }
        for name, measure in work.items():
            results = {"fp32": [], "bf16": []}
            for round_number in range(args.rounds):
                order = ["fp32", "bf16"] if round_number % 2 == 0 else ["bf16", "fp32"]
                for precision in order:
                    results[precision].append(measure(precision))
            value = {precision: float(np.median(values)) for precision, values in results.items()}
            unit = "s" if name == "evaluate" else ("sentences/s" if name == "embed" else "pairs/s")
            ratio_bf16 = (value["fp32"] / value["bf16"]) if name == "evaluate" else (value["bf16"] / value["fp32"])
            rows.append(f"| {threads} | {name} ({unit}) | {value['fp32']:.1f} | {value['bf16']:.1f} | "
                        f"{ratio_bf16:.2f}x |")
            print(rows[-1], flush=True)
    print("\n| threads | work | fp32 | bf16 | bf16 speed-up |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))


def encode_at_embed_length(model, texts, config, precision):
    with sequence_length(model, config.embed.max_seq_length):
        return embed_sentences(model, texts, 64, show_progress_bar=False, precision=precision)


def train_rate(model, pairs, config, precision) -> float:
    """Pairs/s of one training pass of the stage's trainer on a fresh copy of `model`."""
    from infocse.training import train_at_length

    training = config.train.model_copy(update=dict(precision=precision))
    fresh = copy.deepcopy(model)
    seconds, stats = timed(lambda: train_at_length(fresh, pairs, training, 0, "cpu"))
    return stats["pairs_used"] / seconds


if __name__ == "__main__":
    main()
