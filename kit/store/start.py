"""Where a worker's or an evaluator's state comes from: a seed directory or a commit of a store.

A `Start` carries the model shape, the exact config bytes (committed again with every commit) and,
for a commit, its manifest (its parameters: `kit.store.params.load_parameters`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kit.digest import loads_strict
from kit.model.config import LlamaShape, parse_config
from kit.store import commits
from kit.store.objects import ObjectStore


@dataclass
class Start:
    """Where a session's state comes from: a seed directory (new Adam phase) or a commit."""

    shape: LlamaShape
    config_bytes: bytes
    seed_dir: str | None = None
    manifest: dict | None = None

    @property
    def step(self) -> int:
        return 0 if self.manifest is None else int(self.manifest["learned_state"]["cursor"]["step"])


def start_from_seed(seed_dir: str) -> Start:
    path = Path(seed_dir) / "config.json"
    data = path.read_bytes()
    return Start(parse_config(loads_strict(data, str(path)), str(path)), data, seed_dir=seed_dir)


def start_from_commit(home: str, root: str) -> Start:
    return start_from_manifest(home, commits.read_commit(home, root))


def start_from_manifest(home: str, manifest: dict) -> Start:
    """A commit whose manifest came from elsewhere (sent over the process group by the host holding it)
    and whose needed objects are in `home`'s store; the manifest is validated, never trusted."""
    commits.validate_manifest(manifest, f"manifest sent for {home}")
    store = ObjectStore(home)
    data = store.get_bytes(manifest["layout"]["model_config"])
    return Start(parse_config(loads_strict(data, "model config object"), f"{home} config object"), data,
                 manifest=manifest)

