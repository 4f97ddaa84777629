"""The InfoCSE loop in one process (InfoCSE++): embed -> IDC -> train -> score, early-stopped
on validation by the same state as the staged pipeline (infocse/stopping.py).

The same steps, seeds and lengths as the stages embed@t, cluster@t, train@t and evaluate@t (a
test runs both on a tiny corpus and compares pair statistics and metrics; on a mixed corpus the
pair precision too). Two settings do not apply
here, by design: `engine` (the local engine mines exactly the ray engine's pairs) and
`idc.first_round_model` (it mines round 1 of the main loop; an InfoCSE++ round starts from
a fine-tuned model, which mines its own pairs).
"""

from __future__ import annotations

import copy

import pandas as pd

from infocse.config import Config, LoopConfig
from infocse.corpora.mix import pair_precision
from infocse.embedding import embed_sentences
from infocse.errors import StageError
from infocse.idc import cluster_sentences
from infocse.models import sequence_length
from infocse.retrieval import scored
from infocse.seeds import derived_seed
from infocse.stopping import next_state
from infocse.training import train_at_length


def run_loop(model, config: Config, sentences: pd.DataFrame, documents: pd.DataFrame, device: str,
             loop: LoopConfig | None = None, round_number: int = 1, live=None) -> list[dict]:
    """InfoCSE iterations on `model`, in place and in one process: embed -> IDC -> train -> score,
    early-stopped on validation exactly as the staged loop is; `round_number` (InfoCSE++'s round)
    gives each round its own random draws; `live` logs iteration t's training as phase
    `iteration-t` (infocse/live.py). `model` ends as the iteration validation chose; returns one
    entry per iteration run."""
    loop = loop or config.loop
    texts = sentences["text"].tolist()
    result = scored(model, documents, config)
    state = next_state(None, 0, result["score"], loop.patience, loop.max_iterations)
    history = [{"iteration": 0, "val": result["val"], "test": result["test"]}]
    best_weights = copy.deepcopy(model.state_dict())
    for t in config.iterations:
        if not state["continue"]:
            break
        with sequence_length(model, config.embed.max_seq_length):
            embeddings = embed_sentences(model, texts, config.embed.batch_size, precision=config.precision)
        pairs, stats = cluster_sentences(config.idc, config.budget, derived_seed(config.seed, "pairs", t, round_number),
                                         sentences, embeddings)
        if pairs.empty:
            raise StageError(f"round {round_number}, iteration {t}: IDC found no positive pairs")
        train_at_length(model, pairs, config.train, derived_seed(config.seed, "train", t, round_number), device,
                        label=f"round {round_number}, iteration {t}", live=live, phase=f"iteration-{t}")
        result = scored(model, documents, config)
        state = next_state(state, t, result["score"], loop.patience, loop.max_iterations)
        if state["best_iteration"] == t:
            best_weights = copy.deepcopy(model.state_dict())
        stats.pop("idc_seconds")
        if "source_id" in sentences:
            stats.update(pair_precision(pairs, sentences))
        history.append({"iteration": t, "val": result["val"], "test": result["test"], "pairs": stats["pairs"],
                        "pair_statistics": stats})
    model.load_state_dict(best_weights)
    return [{**entry, "chosen": entry["iteration"] == state["best_iteration"]} for entry in history]
