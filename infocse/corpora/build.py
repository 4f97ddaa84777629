"""The prepared corpus: documents (deduplicated, optionally sampled, split) and their sentences."""

from __future__ import annotations

import pandas as pd

from infocse.config import SPLITS, Config
from infocse.corpora.manpages import manpages_version
from infocse.corpora.mix import mix_sentences
from infocse.corpora.readers import read_documents
from infocse.corpora.sentences import build_sentence_table
from infocse.corpora.splits import assign_splits
from infocse.errors import StageError
from infocse.seeds import derived_seed


def prepare_corpus(config: Config) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """(documents, sentences, statistics). Without mixing the sentence table does not depend on
    `seed`, so changing the split seed does not re-embed anything; a mixed corpus
    (`corpus.mix.sources` > 1) groups its sources anew for each seed, the documents (and so
    evaluation) unchanged."""
    corpus = config.corpus
    documents = read_documents(corpus)
    before = len(documents)
    documents = documents.sort_values("doc_id", kind="stable")
    normalised = documents["body"].map(lambda body: " ".join(body.split()))
    documents = documents[~normalised.duplicated()].reset_index(drop=True)
    if corpus.max_documents is not None and corpus.max_documents < len(documents):
        documents = documents.sample(n=corpus.max_documents, random_state=0).sort_values("doc_id").reset_index(drop=True)
    if documents.empty:
        raise StageError("the corpus has no documents")
    sentences, stats = build_sentence_table(documents)
    if sentences.groupby("doc_id").size().ge(2).sum() == 0:
        raise StageError("no document has two or more sentences: there is nothing to pair")
    documents["split"] = assign_splits(documents, config.split.model_dump(), config.seed)
    if corpus.mix.sources > 1:
        sentences = mix_sentences(sentences, documents, corpus.mix.sources, corpus.mix.order,
                                  derived_seed(config.seed, "mix"))
        stats["mixed_documents"] = int(sentences["doc_id"].nunique())
    if corpus.source == "manpages":
        stats["manpages_version"] = manpages_version(corpus.manpages_root)
    stats.update({"documents": len(documents), "duplicate_bodies_dropped": before - len(documents),
                  "documents_with_title": int(documents["title"].notna().sum()),
                  **{f"{name}_documents": int((documents["split"] == name).sum()) for name in SPLITS}})
    return documents, sentences, stats
