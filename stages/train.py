"""train@t: model t-1 trained on iteration t's positive pairs -> models/iterations/iter-t.

dvc.yaml runs it under torchrun with `train.devices` processes (one by default); with several,
each process trains on its slice of every global batch and rank 0 writes the outputs.
"""

from __future__ import annotations

import argparse
import os
import time

import pandas as pd

from infocse.config import load_config
from infocse.errors import StageError, run_stage
from infocse.io import write_json, write_placeholder
from infocse.live import LiveCurves
from infocse.stopping import iteration_is_active
from infocse.models import load_model, save_model, stage_device
from infocse.paths import IterationPaths
from infocse.seeds import derived_seed
from infocse.training import check_devices, distributed_world, train_at_length


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--iteration", type=int, required=True)
    t = parser.parse_args().iteration
    config = load_config()
    device = stage_device(config)
    paths = IterationPaths(t)
    started = time.perf_counter()
    rank, world = distributed_world()
    if not iteration_is_active(config, t):
        if rank == 0:
            write_placeholder(paths.model, "the loop stopped before this iteration: it did no work")
            write_json(paths.metrics / "train.json", {"iteration": t, "skipped": True, "seconds": 0.0})
            LiveCurves(paths.live, ("train",))  # empty curves: the stage's outputs exist
            print(f"iteration {t}: skipped (the loop stopped)")
        return
    pairs = pd.read_parquet(paths.pairs)
    if pairs.empty:
        raise StageError(f"{paths.pairs} has no pairs to train on")
    check_devices(device, config.train.devices)
    if world != config.train.devices:
        raise StageError(f"running on {world} process(es), but params `train.devices` is {config.train.devices}: "
                         "set params `train.launcher` to `python -m torch.distributed.run --standalone "
                         f"--nproc_per_node={config.train.devices}`")
    if world > 1 and device.startswith("cuda"):
        device = f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
    model = load_model(IterationPaths(t - 1).model, device)
    live = LiveCurves(paths.live, ("train",)) if rank == 0 else None
    stats = train_at_length(model, pairs, config.train, derived_seed(config.seed, "train", t), device,
                            label=f"iteration {t}", live=live)
    if rank != 0:
        return
    save_model(model, paths.model)
    stats.update({"iteration": t, "skipped": False, "pairs": len(pairs), "seconds": time.perf_counter() - started})
    write_json(paths.metrics / "train.json", stats)
    print(f"iteration {t}: {stats['steps']} steps on {stats['pairs_used']} pairs"
          + (f" over {world} processes" if world > 1 else "") + f", mean loss {stats['train_loss']:.4f}")


if __name__ == "__main__":
    run_stage(main)
