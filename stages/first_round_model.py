"""first_round_model: the model that mines round 1's positives (`idc.first_round_model`) ->
models/first_round_model.

`current` (the default): f_0 mines round 1 itself, and only a marker is written. A model name
or folder (an SBERT-class model such as all-mpnet-base-v2): it mines round 1's clusters while
the trained model stays f_0 -- the paper's "InfoCSE (SBERT)" ablation.
"""

from __future__ import annotations

from infocse.config import load_config
from infocse.errors import run_stage
from infocse.models import materialize_first_round_model
from infocse.paths import FIRST_ROUND_MODEL


def main() -> None:
    name = load_config().idc.first_round_model
    materialize_first_round_model(name, FIRST_ROUND_MODEL)
    print(f"round-1 annotator: {name}")


if __name__ == "__main__":
    run_stage(main)
