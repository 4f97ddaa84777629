"""Why IDC multiplies at most `infocse.idc.BMM_ROWS` rows of a document at once: torch's CPU `bmm`
speed (GFLOP/s) for a batch of (rows x 384) @ (384 x size) products, one thread, over `rows`.

    python -m benchmarks.bmm_rows [--sizes 18 30 60] [--rows 4 ... 32]

Each cell multiplies ~4,096 rows of 384-d vectors against documents of `size` sentences, as IDC's
stacked batches do; the best of a few timed repeats. Whole documents (rows = size) against the
same document cut in chunks of rows is what the cell's neighbours compare.
"""

from __future__ import annotations

import argparse
import time

import torch

DIM = 384


def gflops(rows: int, size: int, seconds_each: float = 0.2) -> float:
    """GFLOP/s of bmm((count, rows, DIM), (count, DIM, size)), best of 3 timings."""
    count = max(1, 4096 // size)
    first = torch.randn(count, rows, DIM)
    second = torch.randn(count, size, DIM).transpose(1, 2)
    out = torch.empty(count, rows, size)
    torch.bmm(first, second, out=out)
    best = float("inf")
    for _ in range(3):
        calls, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds_each / 3:
            torch.bmm(first, second, out=out)
            calls += 1
        best = min(best, (time.perf_counter() - started) / calls)
    return 2 * DIM * rows * size * count / best / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[18, 30, 60])
    parser.add_argument("--rows", type=int, nargs="+", default=[4, 8, 9, 10, 12, 15, 16, 17, 18, 24, 30])
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, 1 thread; GFLOP/s of bmm (rows x {DIM}) @ ({DIM} x size)")
    print("size \\ rows " + "".join(f"{rows:>6}" for rows in args.rows))
    for size in args.sizes:
        cells = "".join(f"{gflops(rows, size):6.1f}" if rows <= size else f"{'':>6}" for rows in args.rows)
        print(f"{size:>11} {cells}")


if __name__ == "__main__":
    main()
