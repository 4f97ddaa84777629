"""Token ids of a text set, made once and padded per batch.

`SentenceTransformer.encode` and the trainer's collator tokenize every batch as it comes, in the
loop, and again for the same texts in every call. Here a stage tokenizes each text set once, with
the model's own preprocessing (the fast tokenizer's batch call, thousands of texts a call, unpadded),
keeps the ids flat in numpy, and pads each batch with array indexing: the padded batches are
exactly the tensors the model's own per-batch call would make (tests/test_tokens.py checks that).
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from infocse.errors import StageError

# token key -> what its padding positions hold (None: the tokenizer's pad token / pad type id)
PAD_VALUES = {"input_ids": None, "token_type_ids": None, "attention_mask": 0, "special_tokens_mask": 1}
CHUNK = 8192  # texts per call of the fast tokenizer
CACHED_SETS = 4  # text sets kept per process: InfoCSE++ encodes the same sentences and documents every iteration
_cache: OrderedDict = OrderedDict()


@dataclass(frozen=True)
class TokenTable:
    """The unpadded ids of n texts: key -> flat ids, with each text's offset and length."""

    flat: dict[str, np.ndarray]
    offsets: np.ndarray
    lengths: np.ndarray
    pad_values: dict[str, int]
    padding_side: str
    passed_through: dict  # the preprocessing's non-token outputs (e.g. `modality`), the same for every batch

    def batch(self, rows: np.ndarray) -> dict:
        """The padded tensors of `rows`, as the model's preprocessing of those texts gives them."""
        import torch

        lengths = self.lengths[rows]
        width = int(lengths.max())
        columns = np.arange(width)
        if self.padding_side == "left":
            columns = columns - (width - lengths[:, None])
        inside = (columns >= 0) & (columns < lengths[:, None])
        positions = np.where(inside, self.offsets[rows, None] + columns, 0)
        features = {key: torch.from_numpy(np.where(inside, ids[positions].astype(np.int64), self.pad_values[key]))
                    for key, ids in self.flat.items()}
        return {**features, **self.passed_through}


def tokenizable(model) -> bool:
    """Whether a token table can stand in for the model's preprocessing: a sentence-transformers
    Transformer module first. Other models (static embeddings, for one) keep the library's path."""
    from sentence_transformers.base.modules.transformer import Transformer

    try:
        return isinstance(model[0], Transformer)
    except (TypeError, IndexError, KeyError):
        return False


def tokenize(model, texts: list[str]) -> TokenTable:
    """Tokenize `texts` once, at the model's current max sequence length, `CHUNK` texts per call of
    the fast tokenizer (the Python lists it returns cost ~50 bytes a token; the table 6)."""
    if not tokenizable(model):
        raise StageError(f"a token table needs a transformer model, got {type(model).__name__}")
    tokenizer = model.tokenizer
    pads = {"input_ids": tokenizer.pad_token_id, "token_type_ids": tokenizer.pad_token_type_id}
    lengths, flat, passed_through = [], {}, {}
    for start in range(0, len(texts), CHUNK):
        output = model.preprocess(texts[start:start + CHUNK],
                                  processing_kwargs={"text": {"padding": False}, "common": {"return_tensors": None}})
        unknown = [key for key, value in output.items() if isinstance(value, list) and key not in PAD_VALUES]
        if unknown:
            raise StageError(f"the model's tokenizer returns {unknown}, which the pipeline does not know how to pad")
        chunk_lengths = np.fromiter(map(len, output["input_ids"]), dtype=np.int64, count=len(output["input_ids"]))
        lengths.append(chunk_lengths)
        for key, value in output.items():
            if isinstance(value, list):
                ids = np.fromiter(itertools.chain.from_iterable(value), dtype=np.int64, count=int(chunk_lengths.sum()))
                flat.setdefault(key, []).append(ids.astype(np.int32 if key == "input_ids" else np.int8))
            else:
                passed_through[key] = value
    lengths = np.concatenate(lengths) if lengths else np.zeros(0, dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    pad_values = {key: PAD_VALUES[key] if PAD_VALUES[key] is not None else pads[key] for key in flat}
    return TokenTable({key: np.concatenate(parts) for key, parts in flat.items()}, offsets, lengths, pad_values,
                      tokenizer.padding_side, passed_through)


def tokens_of(model, texts: list[str]) -> TokenTable:
    """`tokenize`, remembered for the last few text sets of this process (keyed by the model's
    input module, its max length and the texts), so a stage that encodes the same texts again
    tokenizes them once."""
    key = (id(model[0]), model.max_seq_length, tuple(texts))
    if key in _cache:
        _cache.move_to_end(key)
        return _cache[key][1]
    table = tokenize(model, texts)
    _cache[key] = (model[0], table)  # holding the module keeps its id from being reused by another
    while len(_cache) > CACHED_SETS:
        _cache.popitem(last=False)
    return table


@dataclass(frozen=True)
class TablePreprocess:
    """The trainer's collator's `preprocess_fn`: each batch's texts looked up in a token table
    made once for the stage, instead of tokenized again at every step. A class, not a closure,
    so that dataloader worker processes can receive it."""

    table: TokenTable
    rows: dict[str, int]

    def __call__(self, inputs: list[str], prompt=None, task=None, **kwargs) -> dict:
        if prompt is not None or task is not None:
            raise StageError("a token table holds texts without prompts or tasks")
        return self.table.batch(np.fromiter((self.rows[text] for text in inputs), dtype=np.int64, count=len(inputs)))


def table_preprocess(model, texts: list[str]) -> TablePreprocess:
    """`TablePreprocess` over the distinct `texts`, tokenized once at the model's current length."""
    distinct = list(dict.fromkeys(texts))
    return TablePreprocess(tokenize(model, distinct), {text: row for row, text in enumerate(distinct)})
