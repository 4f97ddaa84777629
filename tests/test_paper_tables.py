"""The paper's tables and claims (study/paper_tables.py) from hand-made run files: the verdict
rule, a table cell with its n and paired interval, what has no run said as "not run", older groups
never pooled with the newest, few-shot and mixed-corpus claims, the larger model's row."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats
from test_compare_experiments import cells, make_run, state, write_runs
from test_compare_fewshot import run as fewshot_run
from test_compare_fewshot import scores

from infocse.reporting import t_interval
from study import paper_tables as paper
from study.compare_experiments import NEIGHBOURS, REFERENCE

BASELINES = {"simcse": "SimCSE", "mirror": "Mirror-BERT", "text_shuffle_cutoff": paper.TEXT_SHUFFLE_CUTOFF,
             "ict": "ICT", "neighbours": NEIGHBOURS}


def infocse_run(seed: int, seed_r1: float, r1: float, **overrides) -> dict:
    """An InfoCSE run: the seed model at iteration 0, the chosen model at iteration 1."""
    return make_run(f"infocse-s{seed}", seed, "none", [state(seed_r1), state(r1, 0.6)], best=1, **overrides)


def baseline_run(method: str, seed: int, r1: float, **overrides) -> dict:
    return make_run(f"{method}-s{seed}", seed, method, [state(r1)], best=0, loop={"max_iterations": 0}, **overrides)


def table_rows(text: str, heading: str) -> dict[tuple[str, str], list[str]]:
    """{(corpus, model): cells} of the first table under `heading`."""
    section = text.split(heading, 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]
    rows = [cells(line) for line in section.splitlines() if line.startswith("| ")]
    return {(row[0], row[1]): row for row in rows[1:]}


def claim_row(text: str, claim_start: str, corpus: str) -> list[str]:
    rows = table_rows(text, "## The paper's claims")
    (row,) = [row for (claim, where), row in rows.items() if claim.startswith(claim_start) and where == corpus]
    return row


@pytest.mark.parametrize("differences, kind, expected", [
    ([0.02, 0.03, 0.04], paper.BEATS, paper.HOLDS),
    ([-0.02, -0.03, -0.04], paper.BEATS, paper.CONTRADICTED),
    ([-0.02, 0.01, 0.04], paper.BEATS, paper.NOT_SHOWN),
    ([0.05], paper.BEATS, paper.NOT_SHOWN),  # one run has no interval
    ([], paper.BEATS, paper.NOT_RUN),
    ([0.001, 0.002, 0.003], paper.CLOSE, paper.HOLDS),  # inside (-0.02, +0.02)
    ([0.05, 0.06, 0.07], paper.CLOSE, paper.CONTRADICTED),  # wholly beyond +0.02
    ([-0.01, 0.01, 0.03], paper.CLOSE, paper.NOT_SHOWN),  # straddles the margin
    ([], paper.CLOSE, paper.NOT_RUN),
])
def test_the_verdict_is_read_from_the_95_percent_interval_alone(differences, kind, expected):
    assert paper.claim_verdict(t_interval(differences), kind) == expected


def test_a_claim_of_several_comparisons_holds_only_when_every_one_holds():
    holds, shown, contradicted, missing = paper.HOLDS, paper.NOT_SHOWN, paper.CONTRADICTED, paper.NOT_RUN
    assert paper.combined_verdict([holds, holds]) == holds
    assert paper.combined_verdict([holds, missing]) == shown
    assert paper.combined_verdict([holds, shown]) == shown
    assert paper.combined_verdict([holds, contradicted, missing]) == contradicted
    assert paper.combined_verdict([missing, missing]) == missing


def test_a_table1_cell_shows_n_and_the_interval_paired_by_seed():
    """SimCSE minus the seed model of the same seed: +0.10, +0.06, +0.09, as scipy's t-interval gives it."""
    gains, runs = [0.10, 0.06, 0.09], []
    for seed, (start, gain) in enumerate(zip([0.60, 0.66, 0.55], gains)):
        runs += [infocse_run(seed, start, start + 0.2), baseline_run("simcse", seed, start + gain)]
    rows = table_rows(paper.render(runs), "## Table 1")
    low, high = stats.t.interval(0.95, 2, loc=np.mean(gains), scale=stats.sem(gains))
    simcse = rows["BBC News", "SimCSE"]
    assert simcse[2] == "3 (0, 1, 2)"
    assert simcse[3] == f"{np.mean([0.70, 0.72, 0.64]):.3f} ± {np.std([0.70, 0.72, 0.64], ddof=1):.3f}"
    assert simcse[6] == f"+{np.mean(gains):.3f} [{low:+.3f}, {high:+.3f}] (n = 3)"
    assert rows["BBC News", "Mirror-BERT"][2:] == ["not run"] * 7


def test_a_corpus_or_study_without_runs_says_not_run_never_a_value():
    text = paper.render([infocse_run(seed, 0.5, 0.6) for seed in range(3)])  # BBC News only
    table1 = table_rows(text, "## Table 1")
    assert all(row[2:] == ["not run"] * 7 for (corpus, _), row in table1.items() if corpus == "man pages")
    assert table_rows(text, "### K: ")["BBC News", "InfoCSE (init none, K=2)"][2:] == ["not run"] * 5
    assert set(table_rows(text, "## Table 2")["BBC News", "InfoCSE"][2:]) == {"not run"}
    assert claim_row(text, "InfoCSE beats every baseline", "man pages")[2] == "not run"
    assert claim_row(text, "Partition IDC beats", "BBC News")[2:] == [
        "not run", "InfoCSE − InfoCSE (init none, IDC K-means (10 clusters)): not run"]


def test_infocse_beats_every_baseline_holds_and_one_better_baseline_contradicts_it():
    runs = [infocse_run(seed, 0.5, 0.70 + 0.01 * seed) for seed in range(3)]
    runs += [baseline_run(method, seed, 0.55 + 0.02 * seed) for method in BASELINES for seed in range(3)]
    line = claim_row(paper.render(runs), "InfoCSE beats every baseline", "BBC News")
    assert line[2] == "holds"
    assert "InfoCSE − ICT: +0.140 [+0.115, +0.165] (n = 3), holds" in line[3]
    runs[-1] = baseline_run("neighbours", 2, 0.95)
    runs[-2] = baseline_run("neighbours", 1, 0.90)
    runs[-3] = baseline_run("neighbours", 0, 0.88)
    assert claim_row(paper.render(runs), "InfoCSE beats every baseline", "BBC News")[2] == "contradicted"


def test_an_older_group_at_the_defaults_is_listed_and_never_pooled_with_the_newest():
    """Runs of older code differ in a param (here one the current params lack): two groups, the newest wins."""
    new = [infocse_run(seed, 0.5, 0.6, ran_at="2031-01-01T00:00:00") for seed in range(2)]
    old = [make_run(f"old-s{seed}", seed, "none", [state(0.5), state(0.9)], best=1, ran_at="2030-01-01T00:00:00",
                    annotators={"conpono_window": 2}) for seed in range(3)]
    text = paper.render(new + old)
    assert table_rows(text, "## Table 1")["BBC News", REFERENCE][2:4] == ["2 (0, 1)", "0.600 ± 0.000"]
    (line,) = [line for line in text.splitlines() if line.startswith("- Zero-shot (Table 1, Table 3 studies), BBC")]
    assert line == ("- Zero-shot (Table 1, Table 3 studies), BBC News: 2 run(s) at commit(s) ccccccc (seed model "
                    "all-MiniLM-L6-v2; unrecorded); left out, other groups at the same defaults: 3 run(s) at commit(s) "
                    "ccccccc (seed model all-MiniLM-L6-v2; unrecorded).")


def test_gpu_runs_of_the_fp16_rounded_seed_model_serve_a_corpus_only_where_they_cover_the_tables_more():
    """Never pooled with the published weights; used when they cover more of Table 1, else the published
    weights' group stands even if older."""
    rounded = {"seed_model": paper.SEED_MODEL_WEIGHTS[1]}
    published = [infocse_run(seed, 0.5, 0.6, ran_at="2030-01-01T00:00:00") for seed in range(3)]
    gpu = [infocse_run(seed, 0.5, 0.8, ran_at="2031-01-01T00:00:00", **rounded) for seed in range(3)]
    for run in gpu:
        run["name"] = "gpu-" + run["name"]
    rows = table_rows(paper.render(published + gpu), "## Table 1")
    assert rows["BBC News", REFERENCE][2:4] == ["3 (0, 1, 2)", "0.600 ± 0.000"]  # equal cover: published
    gpu += [baseline_run("simcse", seed, 0.55, ran_at="2031-01-01T00:00:00", **rounded) for seed in range(3)]
    for run in gpu[3:]:
        run["name"] = "gpu-" + run["name"]
    text = paper.render(published + gpu)
    rows = table_rows(text, "## Table 1")
    assert rows["BBC News", REFERENCE][2:4] == ["3 (0, 1, 2)", "0.800 ± 0.000"]  # more cover: the GPU group alone
    assert rows["BBC News", "SimCSE"][2] == "3 (0, 1, 2)"
    (line,) = [line for line in text.splitlines() if line.startswith("- Zero-shot (Table 1, Table 3 studies), BBC")]
    assert "6 run(s) at commit(s) ccccccc (seed model all-MiniLM-L6-v2-fp16" in line
    assert "left out, other groups at the same defaults: 3 run(s)" in line
    from study import readme_results  # the README names the weights its numbers come from

    found = readme_results.comparisons(published + gpu)
    assert "| BBC News | all-MiniLM-L6-v2-fp16 (the seed model) |" in " ".join(readme_results.table(found).split())
    assert "test R@1 over all-MiniLM-L6-v2-fp16," in readme_results.verdict(found)


def test_newer_bf16_runs_do_not_replace_the_fp32_group_of_the_tables():
    fp32 = [infocse_run(seed, 0.5, 0.6, ran_at="2030-01-01T00:00:00") for seed in range(3)]
    bf16 = [make_run(f"bf16-s{seed}", seed, "none", [state(0.5), state(0.9)], best=1, ran_at="2031-01-01T00:00:00",
                     precision="bf16") for seed in range(3)]
    assert table_rows(paper.render(fp32 + bf16), "## Table 1")["BBC News", REFERENCE][2:4] == \
        ["3 (0, 1, 2)", "0.600 ± 0.000"]


def test_a_run_off_the_defaults_is_not_in_the_tables():
    runs = [infocse_run(seed, 0.5, 0.6, budget={"max_pairs": "all", "max_pairs_per_document": 10}) for seed in range(3)]
    assert table_rows(paper.render(runs), "## Table 1")["BBC News", REFERENCE][2] == "not run"


def test_fewshot_cells_and_the_gap_claims_pair_by_seed_across_budgets():
    """InfoCSE minus the seed model after fine-tuning: +0.04 at 100 labels, +0.01 at all labels, per seed."""
    runs = []
    for seed in range(3):
        for labels, gain in ((100, 0.04), ("all", 0.01)):
            base = 0.5 + 0.01 * seed + (0.2 if labels == "all" else 0)
            runs.append(fewshot_run(f"f{labels}-s{seed}", seed, labels, f0=scores(base, 0.5),
                                    best=scores(base + gain + 0.001 * seed, 0.5)))
    text = paper.render(runs)
    assert table_rows(text, "## Table 2")["BBC News", "InfoCSE"][2:] == [
        "0.551 ± 0.011 / 0.651 ± 0.011 (n = 3)", "not run", "0.721 ± 0.011 / 0.821 ± 0.011 (n = 3)"]
    strongest = claim_row(text, "Fine-tuned InfoCSE is the strongest", "BBC News")
    assert strongest[2] == "not shown"  # 300 labels and the best baseline not run
    assert "InfoCSE − seed model, 100 labels: +0.041 [+0.039, +0.043] (n = 3), holds" in strongest[3]
    shrink = claim_row(text, "The few-shot gaps shrink", "BBC News")
    assert "(InfoCSE − seed model) at 100 minus at all labels: +0.030 [+0.030, +0.030] (n = 3), holds" in shrink[3]


def test_the_plusplus_control_is_the_infocse_model_fine_tuned_as_many_epochs():
    """At 100 labels InfoCSE++ beats its 6-epoch control by 0.05-0.07; at all labels it trails it by 0.10."""
    runs = []
    for seed in range(3):
        runs.append(fewshot_run(f"pp-s{seed}", seed, 100, f0=scores(0.5, 0.5), best=scores(0.52, 0.5),
                                plusplus=scores(0.60 + 0.01 * seed, 0.6), max_rounds=3))
        runs.append(fewshot_run(f"control-s{seed}", seed, 100, f0=scores(0.5, 0.5), best=scores(0.55, 0.5),
                                finetune={"labels": 100, "epochs": 6}))
        runs.append(fewshot_run(f"pp-all-s{seed}", seed, "all", f0=scores(0.6, 0.5), best=scores(0.62, 0.5),
                                plusplus=scores(0.70 + 0.01 * seed, 0.6), max_rounds=3))
        runs.append(fewshot_run(f"control-all-s{seed}", seed, "all", f0=scores(0.6, 0.5),
                                best=scores(0.80 + 0.01 * seed, 0.5), finetune={"labels": "all", "epochs": 6}))
    text = paper.render(runs)
    table = table_rows(text, "### InfoCSE++ and its control")
    control = table["BBC News", "control: InfoCSE fine-tuned once for 6 epochs"]
    assert control[2] == "0.550 ± 0.000 / 0.650 ± 0.000 (n = 3)"
    assert table["BBC News", "InfoCSE++ after round 2 (2 fine-tunings of 3 epochs)"][2] == (
        "0.610 ± 0.010 / 0.710 ± 0.010 (n = 3)")
    line = claim_row(text, "InfoCSE++ beats InfoCSE fine-tuned for as many epochs (the control), smallest budget",
                     "BBC News")
    assert "round 2 − InfoCSE fine-tuned 6 epochs, 100 labels: +0.060 [+0.035, +0.085] (n = 3), holds" in line[3]
    assert "round 3 − InfoCSE fine-tuned 9 epochs, 100 labels: not run" in line[3]
    assert "all labels" not in line[3] and line[0].endswith("smallest budget")
    largest = claim_row(text, "InfoCSE++ beats InfoCSE fine-tuned for as many epochs (the control), largest budget",
                        "BBC News")
    assert largest[2] == "contradicted"
    assert largest[3].startswith("InfoCSE++ after round 2 − InfoCSE fine-tuned 6 epochs, all labels: -0.100 [")


def mixed(run: dict, order: str = "interleaved") -> dict:
    """The run on man pages regrouped into documents of 3 source pages."""
    run["params"]["corpus"] = {**run["params"]["corpus"], "source": "manpages",
                               "mix": {"sources": 3, "order": order}}
    return run


def test_the_diverse_topics_claims_read_the_interleaved_mix_and_its_unmixed_corpus():
    """Interleaved: InfoCSE − neighbour pairs = +0.10, +0.11, +0.12; unmixed: +0.01, +0.00, +0.03, so
    the mixing costs neighbour pairs +0.09, +0.11, +0.09 more. The concatenated mix, where InfoCSE
    loses by 0.10 at every seed, is a control that neither claim reads."""
    runs = []
    for seed, unmixed_infocse in enumerate([0.61, 0.60, 0.63]):
        runs += [mixed(make_run(f"mix-infocse-s{seed}", seed, "none", [state(0.5), state(0.60 + 0.01 * seed)], best=1)),
                 mixed(baseline_run("neighbours", seed, 0.50)),
                 mixed(make_run(f"mixc-infocse-s{seed}", seed, "none", [state(0.5), state(0.40)], best=1),
                       "concatenated"),
                 mixed(baseline_run("neighbours", seed, 0.50), "concatenated"),
                 make_run(f"man-infocse-s{seed}", seed, "none", [state(0.5), state(unmixed_infocse)], best=1,
                          corpus="manpages"),
                 make_run(f"man-neighbours-s{seed}", seed, "neighbours", [state(0.60)], best=0, corpus="manpages",
                          loop={"max_iterations": 0})]
    text = paper.render(runs)
    line = claim_row(text, "CONPONO (here neighbour pairs) is limited", "man pages")
    assert line[2] == "holds"
    assert line[3].startswith(f"InfoCSE − {NEIGHBOURS}, man pages, mixed: 3 sources, interleaved: +0.110 [")
    assert "concatenated" not in line[3]
    half = stats.t.ppf(0.975, 2) * np.std([0.09, 0.11, 0.09], ddof=1) / np.sqrt(3)
    line = claim_row(text, "Mixing topics costs CONPONO (here neighbour pairs) more", "man pages")
    assert line[2] == "holds"
    assert line[3] == (f"(InfoCSE − {NEIGHBOURS}) on man pages, mixed: 3 sources, interleaved minus on man pages: "
                       f"+0.097 [{0.29 / 3 - half:+.3f}, {0.29 / 3 + half:+.3f}] (n = 3)")
    assert claim_row(text, "CONPONO (here neighbour pairs) is limited", "BBC News")[2] == "not run"
    assert claim_row(text, "Mixing topics costs", "BBC News")[2] == "not run"
    assert table_rows(text, "## Table 1")["man pages, mixed: 3 sources, interleaved", NEIGHBOURS][2] == "3 (0, 1, 2)"
    # GPU runs of the fp16-rounded seed model that cover more of Table 1 take the unmixed table, but the
    # mix (of the published weights) is still measured against its own unmixed runs
    rounded = {"seed_model": paper.SEED_MODEL_WEIGHTS[1]}
    for seed in range(3):
        gpu = [make_run(f"gpu-infocse-s{seed}", seed, "none", [state(0.5), state(0.9)], best=1, corpus="manpages",
                        **rounded),
               *(make_run(f"gpu-{method}-s{seed}", seed, method, [state(0.3)], best=0, corpus="manpages",
                          loop={"max_iterations": 0}, **rounded) for method in ("neighbours", "simcse"))]
        runs += gpu
    text = paper.render(runs)
    assert table_rows(text, "## Table 1")["man pages", REFERENCE][3] == "0.900 ± 0.000"
    assert claim_row(text, "Mixing topics costs CONPONO (here neighbour pairs) more", "man pages")[3] == line[3]


def with_precision(run: dict, shares: dict[int, float]) -> dict:
    """Pair precision in iteration t's pairs.json; the category share is the source share minus 0.1."""
    for t, share in shares.items():
        run["metrics"][f"metrics/iterations/iter-{t}/pairs.json"].update(
            pair_source_precision=share, pair_category_precision=share - 0.1, pairs_with_sources=2560)
    return run


def test_the_mixed_table_shows_each_rounds_pair_precision_and_infocse_against_each_method():
    """Hand-worked: InfoCSE mines 0.90/0.80/0.85 right pairs in round 1 and 0.95/0.90/0.91 in round 2
    (seeds 0-2); neighbour pairs 0.40/0.38/0.36 in its one round; InfoCSE − neighbour pairs is
    +0.10, +0.11, +0.12 in test R@1."""
    runs = []
    for seed, (first, second, neighbours) in enumerate([(0.90, 0.95, 0.40), (0.80, 0.90, 0.38), (0.85, 0.91, 0.36)]):
        infocse = make_run(f"mix-infocse-s{seed}", seed, "none", [state(0.5), state(0.60 + 0.01 * seed, 0.6),
                                                                  state(0.55, 0.5)], best=1)
        runs += [mixed(with_precision(infocse, {1: first, 2: second})),
                 mixed(with_precision(baseline_run("neighbours", seed, 0.50), {0: neighbours}))]
    # the same methods unmixed, at seeds 0 and 1: neighbour pairs 0.58 / 0.59 (mixing cost -0.08, -0.09)
    runs += [make_run(f"man-neighbours-s{seed}", seed, "neighbours", [state(r1)], best=0, corpus="manpages",
                      loop={"max_iterations": 0}) for seed, r1 in ((0, 0.58), (1, 0.59))]
    runs += [make_run(f"man-infocse-s{seed}", seed, "none", [state(0.5), state(0.60, 0.6)], best=1,
                      corpus="manpages") for seed in (0, 1)]
    rows = table_rows(paper.render(runs), "### Documents that mix topics")
    corpus = "man pages, mixed: 3 sources, interleaved"
    infocse, neighbours = rows[corpus, REFERENCE], rows[corpus, NEIGHBOURS]
    sd = lambda values: np.std(values, ddof=1)  # noqa: E731
    assert infocse[2] == "3 (0, 1, 2)"
    half = stats.t.ppf(0.975, 1) * sd([-0.08, -0.09]) / np.sqrt(2)
    assert neighbours[8] == f"-0.085 [{-0.085 - half:+.3f}, {-0.085 + half:+.3f}] (n = 2)"
    half = stats.t.ppf(0.975, 1) * sd([0.00, 0.01]) / np.sqrt(2)  # 0.60 - 0.60 and 0.61 - 0.60
    assert infocse[8] == f"+0.005 [{0.005 - half:+.3f}, {0.005 + half:+.3f}] (n = 2)"
    assert rows[corpus, paper.SEED_MODEL][8] == "+0.000 [+0.000, +0.000] (n = 2)"
    assert infocse[9:] == [f"0.850 ± {sd([0.90, 0.80, 0.85]):.3f}", f"0.920 ± {sd([0.95, 0.90, 0.91]):.3f}",
                           f"0.750 ± {sd([0.90, 0.80, 0.85]):.3f}", f"0.820 ± {sd([0.95, 0.90, 0.91]):.3f}"]
    spread = sd([0.40, 0.38, 0.36])
    assert neighbours[9:] == [f"0.380 ± {spread:.3f}", "–", f"0.280 ± {spread:.3f}", "–"]
    half = stats.t.ppf(0.975, 2) * sd([0.10, 0.11, 0.12]) / np.sqrt(3)
    assert neighbours[7] == f"+0.110 [{0.110 - half:+.3f}, {0.110 + half:+.3f}] (n = 3)"
    assert rows[corpus, paper.SEED_MODEL][9:] == ["–"] * 4
    assert rows[corpus, "SimCSE"][2:] == ["not run"] * 11
    assert rows["BBC News, mixed: 3 sources, interleaved", REFERENCE][2] == "not run"


def test_the_larger_model_row_is_paired_with_the_seed_model_of_the_same_split():
    """Scored at seeds 1 and 2 only: +0.09 and +0.10 over the seed model of the same seed."""
    runs = [infocse_run(seed, 0.5 + 0.01 * seed, 0.6) for seed in range(3)]
    runs += [make_run(f"mpnet-s{seed}", seed, "none", [state(0.58 + 0.02 * seed)], best=0,
                      seed_model=paper.LARGER_MODEL, loop={"max_iterations": 0}) for seed in (1, 2)]
    row = table_rows(paper.render(runs), "## Table 1")["BBC News", "all-mpnet-base-v2 (no training)"]
    half = stats.t.ppf(0.975, 1) * np.std([0.09, 0.10], ddof=1) / np.sqrt(2)
    assert row[2] == "2 (1, 2)" and row[6] == f"+0.095 [{0.095 - half:+.3f}, {0.095 + half:+.3f}] (n = 2)"
    # InfoCSE (0.6 at every seed) minus the larger model (0.60, 0.62), paired by seed: -0.01 [.] (n = 2)
    claim = claim_row(paper.render(runs), "Not the paper's, a user's: InfoCSE on the seed model", "BBC News")
    half = stats.t.ppf(0.975, 1) * np.std([0.0, -0.02], ddof=1) / np.sqrt(2)
    assert f"InfoCSE − all-mpnet-base-v2: -0.010 [{-0.010 - half:+.3f}, {-0.010 + half:+.3f}] (n = 2)" in claim[3]


def test_infocse_from_the_larger_model_is_paired_with_it_as_it_is_and_with_neighbour_pairs_from_it():
    """From all-mpnet-base-v2 at seeds 0-2: InfoCSE gains +0.03, +0.04, +0.05 over the same run's
    iteration 0, and leads neighbour pairs from it by +0.03, +0.03, +0.02: both claims hold, in the
    table and the claims; the tables of the default seed model do not take these runs."""
    larger = {"seed_model": paper.LARGER_MODEL}
    runs = [infocse_run(seed, 0.5, 0.55) for seed in range(3)]
    runs += [make_run(f"mpnet-infocse-s{seed}", seed, "none", [state(0.6), state(0.63 + 0.01 * seed, 0.7)], best=1,
                      **larger) for seed in range(3)]
    runs += [baseline_run("neighbours", seed, r1, **larger) for seed, r1 in enumerate([0.60, 0.61, 0.63])]
    text = paper.render(runs)
    rows = table_rows(text, "### Not the paper's, a user's")
    assert rows["BBC News", "InfoCSE from all-mpnet-base-v2"][5:] == [
        paper.format_interval(t_interval([0.03, 0.04, 0.05])), paper.format_interval(t_interval([0.03, 0.03, 0.02]))]
    assert rows["BBC News", "all-mpnet-base-v2, as it is"][2:4] == ["3 (0, 1, 2)", "0.600 ± 0.000"]
    over_it = claim_row(text, "Not the paper's, a user's: InfoCSE from all-mpnet-base-v2 beats all", "BBC News")
    over_neighbours = claim_row(text, "Not the paper's, a user's: InfoCSE from all-mpnet-base-v2 beats one", "BBC News")
    assert over_it[2] == over_neighbours[2] == paper.HOLDS
    assert over_it[3].endswith(paper.format_interval(t_interval([0.03, 0.04, 0.05])))
    assert over_neighbours[3].endswith(paper.format_interval(t_interval([0.03, 0.03, 0.02])))
    assert table_rows(text, "## Table 1")["BBC News", REFERENCE][2:4] == ["3 (0, 1, 2)", "0.550 ± 0.000"]


def test_the_readme_verdict_speaks_of_infocse_from_the_larger_model_once_its_planned_seeds_are_in():
    """Two of the three planned seeds, or no neighbour pairs from it: no sentence on InfoCSE from it (n is
    fixed before looking), only on neighbour pairs from it once their three seeds are in; all three: the
    gain over the larger model as it is and the lead over neighbour pairs from it, with their intervals."""
    from study import readme_results

    larger = {"seed_model": paper.LARGER_MODEL}
    runs = [infocse_run(seed, 0.5, 0.55) for seed in range(3)]
    runs += [baseline_run("neighbours", seed, r1, **larger) for seed, r1 in enumerate([0.60, 0.61, 0.63])]
    mpnet = [make_run(f"mpnet-infocse-s{seed}", seed, "none", [state(0.6), state(0.63 + 0.01 * seed, 0.7)], best=1,
                      **larger) for seed in range(3)]
    as_is = [make_run(f"mpnet-s{seed}", seed, "none", [state(0.6)], best=0, loop={"max_iterations": 0}, **larger)
             for seed in range(3)]
    neighbours_only = readme_results.verdict(readme_results.comparisons(runs + as_is + mpnet[:2]))
    assert "InfoCSE gained" not in neighbours_only.split("Started from")[1]
    assert ("Started from all-mpnet-base-v2 on BBC News, one round of neighbour pairs did not move test R@1 measurably "
            "against all-mpnet-base-v2 as it is") in neighbours_only  # 0.60, 0.61, 0.63 against 0.6: not separated
    assert "Started from" not in readme_results.verdict(readme_results.comparisons(runs[:3] + mpnet))  # no neighbours
    assert "Started from" not in readme_results.verdict(readme_results.comparisons(runs[:5] + mpnet[:2]))  # n = 2 of each
    text = readme_results.verdict(readme_results.comparisons(runs + mpnet))
    assert (f"Started from all-mpnet-base-v2 on BBC News, InfoCSE gained "
            f"{paper.format_interval(t_interval([0.03, 0.04, 0.05]))} test R@1 over all-mpnet-base-v2 as it is, ahead "
            f"of one round of neighbour pairs from it ({paper.format_interval(t_interval([0.03, 0.03, 0.02]))}).") in text


def test_a_verdict_is_read_at_the_preset_seeds_and_later_seeds_are_a_follow_up():
    """Seeds 0-2 give an interval that holds 0; seeds 3 and 4, added after that look, would separate
    it at n = 5: the verdict stays "not shown", and the n = 5 interval is shown beside it, labelled."""
    runs = [infocse_run(seed, 0.5, 0.6) for seed in range(5)]
    runs += [make_run(f"sbert-s{seed}", seed, "none", [state(0.5), state(0.6 + gain)], best=1,
                      idc={"first_round_model": paper.LARGER_MODEL})
             for seed, gain in enumerate([0.0, 0.03, 0.06, 0.03, 0.03])]
    line = claim_row(paper.render(runs), "The SBERT annotator", "BBC News")
    preset, everything = t_interval([0.0, 0.03, 0.06]), t_interval([0.0, 0.03, 0.06, 0.03, 0.03])
    assert preset["low"] < 0 < everything["low"]  # the case: more seeds would flip the verdict
    assert line[2] == "not shown"
    assert line[3] == (f"InfoCSE with SBERT round 1 − InfoCSE: {paper.format_interval(preset)} (follow-up, seeds "
                       f"added after that look: {paper.format_interval(everything)})")


def test_a_claim_against_the_seed_model_of_the_same_run_is_also_read_at_the_preset_seeds():
    """InfoCSE from all-mpnet-base-v2 against its own iteration 0 (the model as it is), the same gains as above:
    seeds 3 and 4 are a follow-up beside the verdict, not part of it."""
    runs = [infocse_run(seed, 0.5, 0.55) for seed in range(3)]  # the tables' own group, at the defaults
    runs += [make_run(f"mpnet-infocse-s{seed}", seed, "none", [state(0.6), state(0.6 + gain, 0.7)], best=1,
                      seed_model=paper.LARGER_MODEL) for seed, gain in enumerate([0.0, 0.03, 0.06, 0.03, 0.03])]
    line = claim_row(paper.render(runs), "Not the paper's, a user's: InfoCSE from all-mpnet-base-v2 beats all",
                     "BBC News")
    preset, everything = t_interval([0.0, 0.03, 0.06]), t_interval([0.0, 0.03, 0.06, 0.03, 0.03])
    assert line[2] == "not shown"
    assert line[3] == (f"InfoCSE from all-mpnet-base-v2 − all-mpnet-base-v2: {paper.format_interval(preset)} "
                       f"(follow-up, seeds added after that look: {paper.format_interval(everything)})")


def test_no_run_files_give_a_report_of_not_run_and_a_plot(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_runs(tmp_path / "study/runs", [])
    paper.main()
    text = (tmp_path / "study/reports/paper_tables.md").read_text()
    assert {row[2] for row in table_rows(text, "## The paper's claims").values()} == {"not run"}
    assert (tmp_path / "study/reports/paper_tables.png").stat().st_size > 0
