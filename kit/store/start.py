"""Where a worker's or an evaluator's state comes from: a seed directory or a commit of a store.

A `Start` carries the model shape, the exact config bytes (committed again with every commit) and,
for a commit, its manifest (its parameters: `kit.store.params.load_parameters`) as the declared record
(`commit`) and as its JSON (`manifest`, for the readers not yet typed).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from kit.digest import loads_strict
from kit.inventory import check_shapes
from kit.model.config import LlamaShape, check_params_match_config, parse_config
from kit.store import commits
from kit.store.manifest import Manifest
from kit.store.objects import ObjectStore


@dataclass
class Start:
    """Where a session's state comes from: a seed directory (new Adam phase) or a commit."""

    shape: LlamaShape
    config_bytes: bytes
    seed_dir: str | None = None
    commit: Manifest | None = None

    @property
    def manifest(self) -> dict | None:
        """The commit's JSON (callers that still read it by key; code reads `commit`)."""
        return None if self.commit is None else self.commit.to_json()

    @property
    def step(self) -> int:
        return 0 if self.commit is None else int(self.commit.learned_state.cursor["step"])


def start_from_seed(seed_dir: str | os.PathLike) -> Start:
    """A seed directory whose tensors were checked (headers only) against its config.json."""
    path = Path(seed_dir) / "config.json"
    data = path.read_bytes()
    shape = parse_config(loads_strict(data, str(path)), str(path))
    check_shapes(seed_dir, shape.parameter_shapes())
    return Start(shape, data, seed_dir=str(seed_dir))


def start_from_commit(home: str, root: str) -> Start:
    return _start(home, commits.read_manifest(home, root))


def start_from_manifest(home: str, manifest: dict) -> Start:
    """A commit whose manifest came from elsewhere (sent over the process group by the host holding it)
    and whose needed objects are in `home`'s store; the manifest is validated, never trusted."""
    return _start(home, Manifest.from_json(manifest, f"manifest sent for {home}"))


def _start(home: str, manifest: Manifest) -> Start:
    store = ObjectStore(home)
    source = f"{store.path(manifest.layout.model_config)} (model config)"
    data = store.get_bytes(manifest.layout.model_config)
    shape = parse_config(loads_strict(data, source), source)
    # a forged commit with an extra entry would resume dropping it, one missing an entry fail in a worker
    check_params_match_config({e.name: e.shape for e in manifest.learned_state.params}, shape,
                              f"{home}: commit {manifest.full_root} learned_state.params", source)
    return Start(shape, data, commit=manifest)

