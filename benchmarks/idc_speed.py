"""IDC speed and memory: the stage's IDC beside a plain numpy + scipy implementation, and long documents.

    python -m benchmarks.idc_speed [--sentences 1000000] [--threads 1 2] [--k 1 3] [--repeats 3]
                                   [--long 10000 20000 50000] [--plain-long-max 10000] [--oracle-sentences 20000]
                                   [--before FILE]

Synthetic corpus: random unit vectors (384-d, like all-MiniLM-L6-v2) grouped into documents whose
sizes follow a log-normal fitted to BBC News bodies (median ~18 sentences); embeddings are given,
so timings are IDC alone (no reading, embedding or writing).

Every case runs in its own subprocess, with its thread count fixed before numpy and torch load
(OMP/MKL/OpenBLAS variables and torch.set_num_threads), so cases neither share threads nor memory:
- corpus (threads, K): the stage's functions and the plain version, alternately, `--repeats`
  times each, best time kept (the machine may be shared). Three measures, each as sentences/s and
  as the stage/plain ratio: clustering (embeddings -> labels); clustering and every mined pair
  (what both build when nothing caps the pairs); and clustering and the pairs the default budget
  keeps (stage: only the kept pairs built from their numbers; plain: all pairs, then `cap_pairs`). The two
  versions' labels and pairs are compared, and where their top-K neighbour sets differ, for how
  many sentences and by how much (float64 similarity sums). With `--before FILE` (an earlier infocse/idc.py, e.g.
  `git show 94f79c0:infocse/idc.py > /tmp/idc_before.py`), its `partition_idc(embeddings,
  doc_codes, k)` -> (labels, first, second) is timed beside them too, and its pairs compared.
- long (sentences, version): one document of that many sentences, K=3, two threads, default
  budget: time, and the extra peak memory of the process (peak RSS during the case minus RSS
  before it: /proc/self/status VmHWM after a reset, VmRSS) and of numpy's allocations alone
  (tracemalloc; torch's are not traced).
- oracle: on the first `--oracle-sentences` sentences, the stage's pairs equal a per-document
  networkx version's.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import subprocess
import sys
import time

DEFAULT_BUDGET = (20, 2560)  # params.yaml: budget.max_pairs_per_document, budget.max_pairs
BLOCK_ROWS = 4096  # params.yaml: idc.block_rows


def synthetic_corpus(n_sentences: int, dim: int, seed: int):
    import numpy as np

    rng = np.random.default_rng(seed)
    sizes = np.clip(rng.lognormal(np.log(18), 0.5, size=n_sentences // 5).astype(int), 1, 150)
    sizes = sizes[: np.searchsorted(np.cumsum(sizes), n_sentences) + 1]
    sizes[-1] -= sizes.sum() - n_sentences
    vectors = rng.standard_normal((n_sentences, dim), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors, np.repeat(np.arange(len(sizes)), sizes)


# ---------------------------------------------------------------- the plain version
def plain_labels(embeddings, doc_codes, k: int):
    """Plain numpy + scipy: per document size, batched np.matmul (at most 2^24 similarities at once),
    np.argpartition for the top K (ties in any order), one sparse graph, connected_components."""
    import numpy as np
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    sources, targets = plain_edges(embeddings, doc_codes, k)
    n = len(doc_codes)
    graph = coo_matrix((np.ones(len(sources), np.int8), (sources, targets)), shape=(n, n))
    return connected_components(graph, directed=False)[1].astype(np.int64)


def plain_edges(embeddings, doc_codes, k: int):
    """The plain version's directed top-K edges (source, target), each source's `keep` in a row."""
    import numpy as np

    starts = np.flatnonzero(np.r_[True, doc_codes[1:] != doc_codes[:-1]])
    offsets = np.r_[starts, len(doc_codes)]
    sizes = np.diff(offsets)
    sources, targets = [np.empty(0, np.int64)], [np.empty(0, np.int64)]
    for size in np.unique(sizes[sizes >= 2]):
        docs = np.flatnonzero(sizes == size)
        keep = min(k, size - 1)
        per_block = max(1, (1 << 24) // int(size * size))
        for block in range(0, len(docs), per_block):
            rows = offsets[docs[block:block + per_block], None] + np.arange(size)
            stacked = embeddings[rows]
            similarity = np.matmul(stacked, stacked.transpose(0, 2, 1))
            similarity[:, np.arange(size), np.arange(size)] = -np.inf
            top = np.argpartition(similarity, size - keep, axis=2)[:, :, size - keep:]
            sources.append(np.repeat(rows, keep, axis=1).ravel())
            targets.append(np.take_along_axis(rows, top.reshape(len(rows), -1), axis=1).ravel())
    return np.concatenate(sources), np.concatenate(targets)


def neighbour_disagreement(embeddings, doc_codes, k: int) -> dict:
    """Where the stage's top-K neighbour sets differ from the plain version's: how many sentences,
    and the largest float64 gap between the similarity sums of the two sets (a difference of
    float32 rounding between near-equal similarities is below ~1e-6)."""
    import numpy as np

    from infocse.idc import top_k_neighbours
    from infocse.pairs import document_offsets

    stage = top_k_neighbours(embeddings, document_offsets(doc_codes), k, BLOCK_ROWS)
    plain = np.repeat(np.arange(len(doc_codes))[:, None], k, axis=1)
    sources, targets = plain_edges(embeddings, doc_codes, k)  # each source's targets are consecutive
    ends = np.r_[np.flatnonzero(np.diff(sources)) + 1, len(sources)] if len(sources) else np.zeros(0, np.int64)
    starts = np.r_[0, ends[:-1]] if len(sources) else ends
    for keep in np.unique(ends - starts).tolist():  # fill each source's row with its `keep` targets
        runs = np.flatnonzero(ends - starts == keep)
        plain[sources[starts[runs]], :keep] = targets[starts[runs, None] + np.arange(keep)]
    differ = np.flatnonzero((np.sort(stage, axis=1) != np.sort(plain, axis=1)).any(axis=1))
    vectors = embeddings[differ].astype(np.float64)
    sums = [np.einsum("nd,nkd->n", vectors, embeddings[chosen[differ]].astype(np.float64)) for chosen in (stage, plain)]
    return {"sentences": int(len(differ)), "largest_gap": float(np.abs(sums[0] - sums[1]).max(initial=0.0))}


def plain_pairs(labels):
    """Plain numpy: every pair of every cluster (np.triu_indices per cluster size), sorted."""
    import numpy as np

    order = np.argsort(labels, kind="stable")
    sizes = np.bincount(labels)
    starts = np.r_[0, np.cumsum(sizes)[:-1]]
    firsts, seconds = [np.empty(0, np.int64)], [np.empty(0, np.int64)]
    for size in np.unique(sizes[sizes >= 2]):
        members = order[starts[np.flatnonzero(sizes == size), None] + np.arange(size)]
        upper_i, upper_j = np.triu_indices(size, 1)
        firsts.append(members[:, upper_i].ravel())
        seconds.append(members[:, upper_j].ravel())
    first, second = np.concatenate(firsts), np.concatenate(seconds)
    keep = np.lexsort((second, first))
    return first[keep], second[keep]


def networkx_pairs(embeddings, doc_codes, k: int) -> set[tuple[int, int]]:
    """The straightforward version: one graph per document, networkx components."""
    import networkx as nx
    import numpy as np

    pairs = set()
    starts = np.flatnonzero(np.r_[True, doc_codes[1:] != doc_codes[:-1]])
    for start, end in zip(starts, np.r_[starts[1:], len(doc_codes)]):
        block = embeddings[start:end]
        similarity = block @ block.T
        np.fill_diagonal(similarity, -np.inf)
        graph = nx.Graph()
        graph.add_nodes_from(range(start, end))
        for i, row in enumerate(similarity):
            for j in np.argsort(-row, kind="stable")[: min(k, end - start - 1)]:
                graph.add_edge(start + i, start + int(j))
        for component in nx.connected_components(graph):
            pairs.update(itertools.combinations(sorted(component), 2))
    return pairs


# ---------------------------------------------------------------- cases (each in its own process)
def best_of(repeats: int, runs: dict) -> dict:
    """Best wall time of each named function over `repeats` rounds, the functions alternating."""
    best = {name: float("inf") for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            started = time.perf_counter()
            run()
            best[name] = min(best[name], time.perf_counter() - started)
    return best


def load_before(path: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location("idc_before", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def corpus_case(sentences: int, k: int, repeats: int, before: str | None = None) -> dict:
    import numpy as np

    from infocse.config import Budget
    from infocse.idc import cluster_pairs, intra_cluster_pairs, partition_idc
    from infocse.pairs import cap_pairs

    vectors, docs = synthetic_corpus(sentences, 384, seed=0)
    budget = Budget(max_pairs_per_document=DEFAULT_BUDGET[0], max_pairs=DEFAULT_BUDGET[1])
    labels = partition_idc(vectors, docs, k, BLOCK_ROWS)
    plain = plain_labels(vectors, docs, k)
    first, second = intra_cluster_pairs(labels)
    plain_first, plain_second = plain_pairs(plain)
    kept = cap_pairs(docs[plain_first], budget, 0)
    capped_first, capped_second = cluster_pairs(labels, docs, budget, 0)
    same = {"neighbours_differ": neighbour_disagreement(vectors, docs, k),
            "labels": bool(np.array_equal(labels, plain)),
            "pairs": bool(np.array_equal(first, plain_first) and np.array_equal(second, plain_second)),
            "capped_pairs": bool(np.array_equal(capped_first, plain_first[kept])
                                 and np.array_equal(capped_second, plain_second[kept]))}
    mined = len(first)
    runs = {}
    if before:
        before_idc = load_before(before)
        before_labels, before_first, before_second = before_idc.partition_idc(vectors, docs, k)
        same["before"] = bool(np.array_equal(before_labels, labels) and np.array_equal(before_first, first)
                              and np.array_equal(before_second, second))
        del before_labels, before_first, before_second
        runs["before_all_pairs"] = lambda: before_idc.partition_idc(vectors, docs, k)
    del first, second, plain_first, plain_second
    seconds = best_of(repeats, {**runs,
        "stage_labels": lambda: partition_idc(vectors, docs, k, BLOCK_ROWS),
        "plain_labels": lambda: plain_labels(vectors, docs, k),
        "stage_all_pairs": lambda: intra_cluster_pairs(labels),
        "plain_all_pairs": lambda: plain_pairs(plain),
        "stage_capped_pairs": lambda: cluster_pairs(labels, docs, budget, 0),
        "plain_capped_pairs": lambda: cap_pairs(docs[plain_pairs(plain)[0]], budget, 0),
    })
    return {"documents": int(docs.max()) + 1, "pairs_mined": mined, "same": same, "seconds": seconds}


def long_case(sentences: int, version: str) -> dict:
    """One document, K=3, the default budget: wall and CPU seconds, extra peak memory."""
    import tracemalloc

    import numpy as np

    from infocse.config import Budget
    from infocse.idc import cluster_pairs, partition_idc
    from infocse.pairs import cap_pairs

    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((sentences, 384), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    docs = np.zeros(sentences, np.int64)
    budget = Budget(max_pairs_per_document=DEFAULT_BUDGET[0], max_pairs=DEFAULT_BUDGET[1])
    warm_up = np.zeros(50, np.int64)  # libraries' first-call allocations are not the document's
    if version == "stage":
        partition_idc(vectors[:50], warm_up, 3, BLOCK_ROWS)
    else:
        plain_labels(vectors[:50], warm_up, 3)
    rss_before = reset_peak_rss()
    tracemalloc.start()
    started, cpu_started = time.perf_counter(), time.process_time()
    if version == "stage":
        labels = partition_idc(vectors, docs, 3, BLOCK_ROWS)
        clustered = time.perf_counter() - started
        first, _ = cluster_pairs(labels, docs, budget, 0)
    else:
        labels = plain_labels(vectors, docs, 3)
        clustered = time.perf_counter() - started
        all_first, all_second = plain_pairs(labels)
        first = all_first[cap_pairs(docs[all_first], budget, 0)]
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
    traced = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return {"seconds": seconds, "cpu_seconds": cpu_seconds, "clustering_seconds": clustered, "clusters": int(labels.max()) + 1,
            "pairs_kept": int(len(first)), "extra_peak_rss": memory_status("VmHWM") - rss_before,
            "rss_before": rss_before, "traced_numpy_peak": traced}


def memory_status(field: str) -> int:
    """VmRSS (resident now) or VmHWM (peak resident since the last reset) of this process, in bytes."""
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith(field + ":"))
    return int(line.split()[1]) * 1024


def reset_peak_rss() -> int:
    """Reset the process's peak RSS to its current RSS (Linux: `5` to /proc/self/clear_refs), so
    the next peak is the case's own; returns the current RSS."""
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")
    return memory_status("VmRSS")


def oracle_case(sentences: int, k: int) -> dict:
    import numpy as np

    from infocse.idc import intra_cluster_pairs, partition_idc

    vectors, docs = synthetic_corpus(max(sentences * 2, 1000), 384, seed=0)
    cut = int(np.searchsorted(docs, docs[sentences]))  # whole documents only
    first, second = intra_cluster_pairs(partition_idc(vectors[:cut], docs[:cut], k, BLOCK_ROWS))
    return {"sentences": cut, "same": networkx_pairs(vectors[:cut], docs[:cut], k) == set(zip(first.tolist(),
                                                                                                  second.tolist()))}


def run_case(threads: int, case: str, *args) -> dict:
    """One case in a fresh interpreter with `threads` threads everywhere."""
    env = {**os.environ, **{name: str(threads) for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS",
                                                            "OPENBLAS_NUM_THREADS")}}
    code = (f"import json, torch; torch.set_num_threads({threads}); from benchmarks import idc_speed; "
            f"print(json.dumps(idc_speed.{case}(*{list(args)!r})))")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    if done.returncode:
        return {"error": (done.stderr.strip().splitlines() or ["no output"])[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def rate(sentences: int, seconds: float) -> str:
    return f"{sentences / seconds:>11,.0f}/s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", type=int, default=1_000_000)
    parser.add_argument("--threads", type=int, nargs="*", default=[1, 2])
    parser.add_argument("--k", type=int, nargs="*", default=[1, 3])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--long", type=int, nargs="*", default=[10_000, 20_000, 50_000])
    parser.add_argument("--plain-long-max", type=int, default=10_000,
                        help="largest long document the plain version gets (it holds the whole matrix)")
    parser.add_argument("--oracle-sentences", type=int, default=20_000)
    parser.add_argument("--before", help="an earlier infocse/idc.py to time beside the stage (see above)")
    args = parser.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, python {platform.python_version()}")
    n = args.sentences
    print(f"\n== {n:,} synthetic sentences (384-d), best of {args.repeats}; stage/plain ratio in brackets ==")
    for threads, k in itertools.product(args.threads, args.k):
        result = run_case(threads, "corpus_case", n, k, args.repeats,
                          os.path.abspath(args.before) if args.before else None)
        if "error" in result:
            print(f"threads={threads} K={k}: failed: {result['error']}")
            continue
        s = result["seconds"]
        print(f"threads={threads} K={k} ({result['documents']:,} documents, {result['pairs_mined']:,} pairs mined; "
              f"same as plain: {result['same']})")
        for measure, label in (("labels", "clustering"), ("all_pairs", "clustering + all pairs"),
                               ("capped_pairs", "clustering + default-budget pairs")):
            stage = s["stage_labels"] + (s[f"stage_{measure}"] if measure != "labels" else 0)
            plain = s["plain_labels"] + (s[f"plain_{measure}"] if measure != "labels" else 0)
            print(f"  {label:<34} stage {rate(n, stage)}  plain {rate(n, plain)}  [{plain / stage:.2f}x]")
        if "before_all_pairs" in s:
            stage = s["stage_labels"] + s["stage_all_pairs"]
            print(f"  {'clustering + all pairs, before':<34} before {rate(n, s['before_all_pairs'])}  "
                  f"stage/before [{s['before_all_pairs'] / stage:.2f}x]")
    print("\n== one long document, K=3, default budget, 2 threads ==")
    for sentences in args.long:
        for version in ("stage", "plain"):
            if version == "plain" and sentences > args.plain_long_max:
                print(f"{sentences:,} sentences, plain: not run (its similarity matrix and argpartition indices "
                      f"need {sentences ** 2 * 12 / 1e9:.0f} GB, its {sentences * (sentences - 1) // 2:,} pairs "
                      f"{sentences * (sentences - 1) // 2 * 16 / 1e9:.0f} GB before their sort)")
                continue
            result = run_case(2, "long_case", sentences, version)
            if "error" in result:
                print(f"{sentences:,} sentences, {version}: failed: {result['error']}")
                continue
            print(f"{sentences:,} sentences, {version}: {result['seconds']:.1f} s, CPU {result['cpu_seconds']:.1f} s "
                  f"(clustering "
                  f"{result['clustering_seconds']:.1f} s), {result['clusters']} cluster(s), {result['pairs_kept']} "
                  f"pairs kept; extra peak RSS {result['extra_peak_rss'] / 1e9:.2f} GB, numpy's traced peak "
                  f"{result['traced_numpy_peak'] / 1e9:.2f} GB")
    if args.oracle_sentences:
        result = run_case(1, "oracle_case", args.oracle_sentences, 1)
        print(f"\noracle: on {result.get('sentences', 0):,} sentences, K=1, the stage's pairs equal networkx's: "
              f"{result.get('same', result)}")


if __name__ == "__main__":
    main()
