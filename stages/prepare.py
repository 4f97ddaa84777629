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
    config = load_config()
    documents, sentences, stats = prepare_corpus(config)
    if stats["documents_under_two_sentences"]:
        print(f"note: {stats['documents_under_two_sentences']} document(s) have fewer than two sentences; "
              "they stay retrieval candidates but give no training pairs")
    val_queries = int(((documents["split"] == "val") & documents["title"].notna()).sum())
    if stats["documents_with_title"] == 0:
        print("note: no document has a title, so there are no retrieval queries: the run trains and reports "
              "pair statistics, without retrieval metrics or early stopping, and the last iteration is kept")
    elif val_queries == 0:
        val_documents = int((documents["split"] == "val").sum())
        why = (f"none of the {val_documents} val documents has a title" if val_documents else
               f"params `split.val` ({config.split.val} of each category, rounded) gives no val documents")
        print(f"note: 0 val queries ({why}): no validation is possible, so nothing stops the loop early and "
              "the last iteration is kept; raise `split.val` or add documents to each category")
    write_parquet(sentences, SENTENCES)
    write_parquet(documents, DOCUMENTS)
    write_json(CORPUS_METRICS, stats)
    print(f"prepared {stats['documents']} documents, {stats['sentences']} sentences")


if __name__ == "__main__":
    run_stage(main)
