"""Where a run starts, or what it trains against: a seed directory or a commit of a checkpoint store.

The typed run requests (kit.adaptive.train.CohortRequest, kit.study.arms.ArmRequest) and the plans
they become carry these instead of dicts. `to_json()` is the form that travels to launched workers
(`launch-args.json`) and that the engine's start and reference arguments take."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SeedRef:
    """A Hugging Face Llama directory (the seed)."""

    seed_dir: str

    def to_json(self) -> dict:
        return {"seed_dir": self.seed_dir}


@dataclass(frozen=True)
class CommitRef:
    """Commit `root` (a full root) of the store `home` on this host."""

    home: str
    root: str

    def to_json(self) -> dict:
        return {"home": self.home, "root": self.root}


@dataclass(frozen=True)
class PeerCommitRef:
    """Commit `root` held by some rank's store, fetched over the process group (hosts without a shared
    filesystem); `source` is this host's store holding it, or None where this host has no copy."""

    root: str
    source: str | None

    def to_json(self) -> dict:
        return {"root": self.root, "source": self.source, "over_group": True}


Ref = SeedRef | CommitRef | PeerCommitRef


def ref_from_json(obj: dict, source: str) -> Ref:
    """The ref `to_json()` wrote; a ValueError naming `source` for anything else."""
    match obj:  # each form with exactly its keys
        case {"seed_dir": seed_dir} if len(obj) == 1:
            return SeedRef(seed_dir)
        case {"home": home, "root": root} if len(obj) == 2:
            return CommitRef(home, root)
        case {"root": root, "source": peer, "over_group": _} if len(obj) == 3:
            return PeerCommitRef(root, peer)
    raise ValueError(f"{source}: {obj!r} is not a start or reference; expected {{'seed_dir'}}, "
                     f"{{'home', 'root'}} or {{'root', 'source', 'over_group'}}")
