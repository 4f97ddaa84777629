"""prepare: the corpus -> data/corpus/documents.parquet (doc_id, title, body, category, split)
and sentences.parquet (sentence_id, doc_id, position, text: bodies only; titles are evaluation
labels and never training text)."""

from __future__ import annotations

from infocse.config import load_config
from infocse.corpora.build import prepare_corpus
from infocse.errors import run_stage
from infocse.io import write_json, write_parquet
from infocse.paths import CORPUS_METRICS, DOCUMENTS, SENTENCES


def main() -> None:
    documents, sentences, stats = prepare_corpus(load_config())
    if stats["documents_under_two_sentences"]:
        print(f"note: {stats['documents_under_two_sentences']} document(s) have fewer than two sentences; "
              "they stay retrieval candidates but give no training pairs")
    if stats["documents_with_title"] == 0:
        print("note: no document has a title, so there are no retrieval queries: the run trains and reports "
              "pair statistics, without retrieval metrics or early stopping")
    write_parquet(sentences, SENTENCES)
    write_parquet(documents, DOCUMENTS)
    write_json(CORPUS_METRICS, stats)
    print(f"prepared {stats['documents']} documents, {stats['sentences']} sentences")


if __name__ == "__main__":
    run_stage(main)
