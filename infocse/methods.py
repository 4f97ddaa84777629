"""The methods a run can be (params `init.method`): each name once, with the name the reports show
and its reference, for the config, the baselines and the study to import. docs/method.md says how
each differs from its reference."""

from __future__ import annotations

from typing import NamedTuple


class Method(NamedTuple):
    display: str
    reference: str
    pairs: str  # "same sentence" (two views of one) | "different sentences" (of one document) | "" (none)


METHODS = {
    "none": Method("seed model", "", ""),
    "simcse": Method("SimCSE", "Gao et al. 2021; princeton-nlp/SimCSE", "same sentence"),
    "mirror": Method("Mirror-BERT", "Liu et al. 2021; cambridgeltl/mirror-bert", "same sentence"),
    "text_shuffle_cutoff": Method("text shuffle + cutoff (ConSERT-style)",
                                  "not ConSERT (Yan et al. 2021), whose cutoffs act inside the encoder", "same sentence"),
    "ict": Method("ICT", "Lee et al. 2019, ORQA's Inverse Cloze Task", "different sentences"),
    "neighbours": Method("neighbour pairs (CONPONO-style)",
                         "not CONPONO (Iter et al. 2020), which predicts each offset with its own head",
                         "different sentences"),
}
BASELINES = tuple(name for name in METHODS if name != "none")  # one round of pairs each
