"""Params validation (infocse/config.py): every param is checked once, before any work; each bad
value is one line naming its dotted param, all of them reported together; the numbered chains
(`iterations`, `plusplus.rounds`) must name their predecessors."""

from __future__ import annotations

import copy

import pytest
from conftest import REPO, config_with, repo_params

from pydantic import BaseModel

from infocse.config import PRECISION_SECTIONS, Config, EngineConfig, load_config, parse_config
from infocse.errors import StageError, run_stage


def with_values(raw: dict, values: dict) -> dict:
    """A copy of `raw` with each dotted param set (None as a value deletes the param)."""
    raw = copy.deepcopy(raw)
    for dotted, value in values.items():
        *parents, leaf = dotted.split(".")
        node = raw
        for part in parents:
            node = node.setdefault(part, {})
        if value is None:
            node.pop(leaf, None)
        else:
            node[leaf] = value
    return raw


def problems(raw: dict) -> list[str]:
    """The lines parse_config refuses `raw` with (none when it accepts it)."""
    try:
        parse_config(raw)
    except StageError as error:
        return str(error).splitlines()
    return []


def leaves(raw: dict, prefix: str = "") -> list[str]:
    """Dotted names of every non-mapping value in `raw`."""
    found = []
    for key, value in raw.items():
        dotted = f"{prefix}{key}"
        found.extend(leaves(value, f"{dotted}.") if isinstance(value, dict) and value else [dotted])
    return found


# ---------------------------------------------------------------- the shipped params
def test_the_shipped_params_parse_into_their_values():
    config = load_config(REPO / "params.yaml")
    raw = repo_params()
    assert config.iterations == [int(t) for t in raw["iterations"]]
    assert config.idc.k == raw["idc"]["k"] and config.train.learning_rate == float(raw["train"]["learning_rate"])
    assert config.budget.max_pairs == raw["budget"]["max_pairs"]
    assert config.loop.max_iterations is None  # "all"
    assert config.plusplus.rounds == {2: "best", 3: "round-2"}
    assert config.engine == EngineConfig()
    assert config.finetune.max_seq_length == raw["finetune"]["max_seq_length"]


# ---------------------------------------------------------------- integers (was positive_int)
@pytest.mark.parametrize("dotted, value, expected", [
    ("idc.k", 3, 3),
    ("budget.max_pairs", "all", None),
    ("budget.max_pairs", 1, 1),
    ("loop.max_iterations", 0, 0),
])
def test_integer_params_accept(dotted, value, expected):
    config = parse_config(with_values(repo_params(), {dotted: value}))
    section, name = dotted.split(".")
    assert getattr(getattr(config, section), name) == expected


@pytest.mark.parametrize("dotted, value", [
    ("idc.k", 0), ("budget.max_pairs", -2), ("idc.k", "all"), ("idc.k", True), ("idc.k", 1.5),
    ("loop.max_iterations", -1), ("train.epochs", "3"),
])
def test_integer_params_refuse_with_one_line(dotted, value):
    lines = problems(with_values(repo_params(), {dotted: value}))
    assert len(lines) == 1, lines
    assert f"`{dotted}` must be an integer >= " in lines[0] and repr(value) in lines[0]


def test_numbers_are_checked_for_type_and_range():
    """A numeric string is a number (YAML reads `5e-5` as one); a word or a value out of range is not."""
    assert parse_config(with_values(repo_params(), {"train.learning_rate": "5e-5"})).train.learning_rate == 5e-5
    for value in ("fast", 0, -1e-5, float("nan"), True):
        lines = problems(with_values(repo_params(), {"train.learning_rate": value}))
        assert len(lines) == 1 and "`train.learning_rate` must be a number in (0, inf)" in lines[0], (value, lines)


# ---------------------------------------------------------------- one line per bad value
def test_every_param_refuses_a_bad_value_with_one_line_naming_it():
    """A list is a valid value of no param: each leaf of params.yaml set to one must give exactly one
    line, naming that param -- so a param read without validation cannot hide."""
    raw = repo_params()
    silent, wrong = [], []
    for dotted in leaves(raw):
        lines = problems(with_values(raw, {dotted: [1]}))
        if not lines:
            silent.append(dotted)
        elif len(lines) != 1 or f"`{dotted}`" not in lines[0]:
            wrong.append((dotted, lines))
    assert not silent, f"accepted without a word: {silent}"
    assert not wrong, wrong


def test_several_bad_values_are_all_reported_one_line_each():
    bad = {"idc.k": 0, "train.learning_rate": "fast", "evaluate.metric": "accuracy", "device": "tpu",
           "baselines.text_cutoff_rate": 2.0}
    lines = problems(with_values(repo_params(), bad))
    assert len(lines) == len(bad), lines
    for dotted in bad:
        assert sum(f"`{dotted}`" in line for line in lines) == 1, (dotted, lines)


def test_a_missing_param_is_named():
    lines = problems(with_values(repo_params(), {"baselines.ict_remove_probability": None}))
    assert lines == ["params `baselines.ict_remove_probability` is missing"]


def test_run_stage_prints_each_problem_as_one_error_line_and_exits_1(tmp_path, capsys):
    import yaml

    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(with_values(repo_params(), {"idc.k": 0, "embed.batch_size": -1})))
    with pytest.raises(SystemExit) as exit_info:
        run_stage(lambda: load_config(path))
    assert exit_info.value.code == 1
    stderr = capsys.readouterr().err.splitlines()
    assert len(stderr) == 2 and all(line.startswith("error: params `") for line in stderr), stderr
    assert "`idc.k`" in stderr[0] + stderr[1] and "`embed.batch_size`" in stderr[0] + stderr[1]


def test_unreadable_params_files_are_one_line(tmp_path):
    with pytest.raises(StageError, match="not found"):
        load_config(tmp_path / "params.yaml")
    (tmp_path / "params.yaml").write_text("idc: [unclosed\n")
    with pytest.raises(StageError, match="is not valid YAML") as error:
        load_config(tmp_path / "params.yaml")
    assert "\n" not in str(error.value)
    with pytest.raises(StageError, match="params must be a mapping"):
        parse_config(["idc", "k"])


# ---------------------------------------------------------------- rules across params
def test_split_fractions_must_sum_to_one():
    lines = problems(with_values(repo_params(), {"split": {"fewshot": 0.5, "val": 0.5, "test": 0.5}}))
    assert len(lines) == 1 and "`split` fractions must sum to 1" in lines[0]


def test_global_batch_must_split_evenly_over_devices():
    lines = problems(with_values(repo_params(), {"train.batch_size": 5, "train.devices": 2}))
    assert len(lines) == 1 and "`train.batch_size` (5) must be a multiple of `train.devices` (2)" in lines[0]
    assert config_with({"train": {"batch_size": 6, "devices": 2}}).train.devices == 2


def test_baseline_options_are_read_into_their_config():
    options = config_with({"baselines": {"neighbour_window": 4, "text_cutoff_rate": 0.3}}).baselines
    assert options.neighbour_window == 4 and options.text_cutoff_rate == 0.3


@pytest.mark.parametrize("key, value, message", [
    ("neighbour_window", 0, "params `baselines.neighbour_window` must be an integer >= 1, got 0"),
    ("neighbour_window", 1.5, "`baselines.neighbour_window` must be an integer >= 1, got 1.5"),
    ("mirror_span_chars", -2, "`baselines.mirror_span_chars` must be an integer >= 1, got -2"),
    ("ict_context_sentences", 0, "`baselines.ict_context_sentences` must be an integer >= 1, got 0"),
    ("ict_remove_probability", 1.5, "`baselines.ict_remove_probability` must be a number in [0, 1], got 1.5"),
    ("text_cutoff_rate", -0.1, "`baselines.text_cutoff_rate` must be a number in [0, 1], got -0.1"),
    ("text_cutoff_rate", True, "`baselines.text_cutoff_rate` must be a number in [0, 1], got True"),
])
def test_bad_baseline_options_are_one_line(key, value, message):
    lines = problems(with_values(repo_params(), {f"baselines.{key}": value}))
    assert len(lines) == 1 and message in lines[0], lines


@pytest.mark.parametrize("value, message", [
    ("conpono", "`init.method` must be one of ['none', 'simcse', 'mirror', 'text_shuffle_cutoff', 'ict', 'neighbours'], "
                "got 'conpono'"),
    ("foo", "`init.method` must be one of ['none', 'simcse', 'mirror', 'text_shuffle_cutoff', 'ict', 'neighbours'], "
            "got 'foo'"),
])
def test_bad_init_methods_are_one_line(value, message):
    lines = problems(with_values(repo_params(), {"init.method": value}))
    assert len(lines) == 1 and message in lines[0], lines


@pytest.mark.parametrize("old, new", [("annotators", "baselines"), ("idc.first_round_annotator", "idc.first_round_model")])
def test_a_renamed_param_is_one_line_naming_its_new_name(old, new):
    """A params.yaml from before the rename: one line, not one per key the new name lacks."""
    raw = repo_params()
    *parents, last = new.split(".")
    node = raw
    for part in parents:
        node = node[part]
    value = node.pop(last)
    *old_parents, old_last = old.split(".")
    node = raw
    for part in old_parents:
        node = node[part]
    node[old_last] = value
    assert problems(raw) == [f"params `{old}` is now `{new}`: rename it (docs/parameters.md)"]


def test_engine_defaults_to_local_and_rejects_bad_values():
    raw = repo_params()
    del raw["engine"]
    assert parse_config(raw).engine == EngineConfig()
    ray = {"name": "ray", "address": "ray://head:10001", "partition_sentences": 10, "actors": 2}
    assert config_with({"engine": ray}).engine == EngineConfig(**ray)
    for dotted, value, message in [
        ("engine.name", "spark", "`engine.name` must be one of ['local', 'ray'], got 'spark'"),
        ("engine.actors", 0, "`engine.actors` must be an integer >= 1 or \"auto\", got 0"),
        ("engine.partition_sentences", "many", "`engine.partition_sentences` must be an integer >= 1"),
    ]:
        lines = problems(with_values(repo_params(), {dotted: value}))
        assert len(lines) == 1 and message in lines[0], lines


# ---------------------------------------------------------------- numbered chains
@pytest.mark.parametrize("iterations, message", [
    ({}, "params `iterations` is empty"),
    ({"1": {"prev": 0}, "3": {"prev": 2}}, "`iterations` must be numbered 1..N, got [1, 3]"),
    ({"2": {"prev": 1}}, "`iterations` must be numbered 1..N, got [2]"),
    ({"1": {"prev": 0}, "2": {"prev": 0}}, "`iterations.2.prev` must be 1, got 0"),
    ({"1": {"prev": 1}}, "`iterations.1.prev` must be 0, got 1"),
    ({"1": {}}, "`iterations.1.prev` must be 0, got None"),
])
def test_iteration_chain_is_checked(iterations, message):
    lines = problems(with_values(repo_params(), {"iterations": iterations}))
    assert len(lines) == 1 and message in lines[0], lines


def test_each_bad_link_of_a_chain_is_its_own_line_naming_it():
    lines = problems(with_values(repo_params(), {"iterations": {"1": {"prev": 5}, "2": {"prev": 7}}}))
    assert lines == ["params `iterations.1.prev` must be 0, got 5", "params `iterations.2.prev` must be 1, got 7"]


def test_a_value_with_braces_is_shown_as_it_is():
    assert problems(with_values(repo_params(), {"idc.method": {"a"}, "iterations": {"a"}})) == [
        "params `idc.method` must be one of ['partition', 'kmeans'], got {'a'} (set)",
        "params `iterations` must be a mapping of numbered items, got {'a'} (set)"]


def test_iteration_chain_in_order():
    assert config_with({"iterations": {"2": {"prev": 1}, "1": {"prev": 0}}}).iterations == [1, 2]
    assert config_with({"iterations": {1: {"prev": 0}}}).iterations == [1]


@pytest.mark.parametrize("rounds, message", [
    ({"2": {"prev": "round-1"}}, "`plusplus.rounds.2.prev` must be 'best', got 'round-1'"),
    ({"2": {"prev": "best"}, "3": {"prev": "best"}}, "`plusplus.rounds.3.prev` must be 'round-2', got 'best'"),
    ({"2": {"prev": "best"}, "4": {"prev": "round-3"}}, "`plusplus.rounds` must be numbered 2..N, got [2, 4]"),
    ({"3": {"prev": "round-2"}}, "`plusplus.rounds` must be numbered 2..N, got [3]"),
])
def test_plusplus_round_chain_is_checked(rounds, message):
    lines = problems(with_values(repo_params(), {"plusplus.rounds": rounds}))
    assert len(lines) == 1 and message in lines[0], lines


def test_plusplus_round_chain_in_order_and_may_be_empty():
    rounds = {"3": {"prev": "round-2"}, "2": {"prev": "best"}}
    assert config_with({"plusplus": {"rounds": rounds}}).plusplus.rounds == {2: "best", 3: "round-2"}
    assert config_with({"plusplus": {"rounds": {}}}).plusplus.rounds == {}
    raw = repo_params()
    raw["plusplus"]["rounds"] = None  # `rounds:` with every item commented out
    assert parse_config(raw).plusplus.rounds == {}


def documented_params() -> set[str]:
    """The keys docs/parameters.md's table names: a row's first cell, where a bare name after a
    dotted one is in its section (`train.batch_size`, `epochs`), `a.*` covers a section and
    `split.fewshot/val/test` three keys."""
    names = set()
    for line in (REPO / "docs/parameters.md").read_text().splitlines():
        if not line.startswith("| `"):
            continue
        section = ""
        for name in line.split("|")[1].split("`")[1::2]:
            if "." in name:
                section = name.rsplit(".", 1)[0] + "."
                head, tail = name.rsplit(".", 1)
                names.update(f"{head}.{part}" for part in tail.split("/"))
            else:
                names.add(section + name)
    return names


def schema_keys(model=Config, prefix: str = "") -> set[str]:
    """Dotted names of every param the schema defines (the sections' `precision` is the top-level one,
    copied in; the numbered chains are documented as a whole)."""
    keys = set()
    for name, field in model.model_fields.items():
        dotted = f"{prefix}{name}"
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            keys |= schema_keys(field.annotation, f"{dotted}.")
        elif not (name == "precision" and prefix[:-1] in PRECISION_SECTIONS):
            keys.add(dotted)
    return keys


def test_docs_parameters_names_every_param_and_only_params():
    """Each param of the schema has a row in docs/parameters.md, each row names one, and
    params.yaml sets no other key."""
    def flat(node: dict, prefix: str = "") -> set[str]:
        keys = set()
        for key, value in node.items():
            whole = f"{prefix}{key}" in ("iterations", "plusplus.rounds")  # documented as a whole
            keys |= flat(value, f"{prefix}{key}.") if isinstance(value, dict) and not whole else {f"{prefix}{key}"}
        return keys

    params, documented = schema_keys(), documented_params()
    assert flat(repo_params()) - params == set()
    sections = {name[:-1] for name in documented if name.endswith(".*")}
    covered = {key for key in params if key in documented or key.rsplit(".", 1)[0] + "." in sections}
    assert params - covered == set()
    assert {name for name in documented if not name.endswith(".*")} - params == set()
