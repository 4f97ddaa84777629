"""Documents -> the sentence table: sentence_id, doc_id, position, text (bodies only)."""

from __future__ import annotations

import blingfire
import numpy as np
import pandas as pd


def split_sentences(body: str) -> list[str]:
    """Sentences of one body, by blingfire's sentence breaker (no downloads); empty lines dropped."""
    sentences = []
    for paragraph in body.splitlines():
        if paragraph.strip():
            sentences.extend(s.strip() for s in blingfire.text_to_sentences(paragraph.strip()).split("\n"))
    return [s for s in sentences if s]


def build_sentence_table(documents: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """One row per distinct sentence of each body, grouped by document in document order; repeats
    inside one document are dropped (identical sentences would be trivially 'positive')."""
    rows, repeated, short = [], 0, []
    for doc_id, body in zip(documents["doc_id"], documents["body"]):
        seen: set[str] = set()
        kept = []
        for sentence in split_sentences(body):
            if sentence in seen:
                repeated += 1
                continue
            seen.add(sentence)
            kept.append(sentence)
        if len(kept) < 2:
            short.append(doc_id)
        rows.extend((doc_id, position, text) for position, text in enumerate(kept))
    table = pd.DataFrame(rows, columns=["doc_id", "position", "text"])
    table.insert(0, "sentence_id", np.arange(len(table), dtype=np.int64))
    table["position"] = table["position"].astype(np.int32)
    stats = {"sentences": len(table), "repeated_sentences_dropped": repeated,
             "documents_under_two_sentences": len(short)}
    return table, stats
