"""seed: the initial model f_0 (a packaged name, a local folder, or a hub id), saved as iteration 0."""

from __future__ import annotations

from stages.common import IterationPaths, load_model, load_params, resolve_model_source, run_stage, save_model


def main() -> None:
    params = load_params()
    source = resolve_model_source(str(params.get("seed_model") or ""))
    model = load_model(source, device="cpu")
    save_model(model, IterationPaths(0).model)
    print(f"seed model {params['seed_model']!r} saved as iteration 0")


if __name__ == "__main__":
    run_stage(main)
