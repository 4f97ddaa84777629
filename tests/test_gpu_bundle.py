"""study/gpu_bundle.py: which bundled wheels a machine needs installed."""

from __future__ import annotations

import importlib.metadata

from study import gpu_bundle


def wheel(folder, name: str, version: str) -> None:
    (folder / f"{name.replace('-', '_')}-{version}-py3-none-any.whl").write_bytes(b"")


def test_a_pinned_distribution_is_installed_when_the_machine_has_another_version(tmp_path):
    installed = importlib.metadata.version("sentence-transformers")
    wheel(tmp_path, "sentence-transformers", "0.0.1")
    wheel(tmp_path, "tqdm", "0.0.1")  # not pinned exactly: the machine's own version is kept
    assert gpu_bundle.missing(("sentence-transformers", "tqdm"), wheels=tmp_path) == ["sentence-transformers"]
    (tmp_path / "sentence_transformers-0.0.1-py3-none-any.whl").unlink()
    wheel(tmp_path, "sentence-transformers", installed)
    assert gpu_bundle.missing(("sentence-transformers", "tqdm"), wheels=tmp_path) == []
    assert gpu_bundle.missing(("no-such-distribution-here",), wheels=tmp_path) == ["no-such-distribution-here"]
