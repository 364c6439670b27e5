"""Shared helpers of the reliability suite (tests/reliability): tiny seeds, tiny commits, fault injection.

Worker processes get tests/ on their PYTHONPATH (`worker_env`), so `faulty_session_worker` can be
a launcher entry (`support.reliability:faulty_session_worker`).

What is here:
- `write_seed`: a tiny Hugging Face Llama directory (config.json + model.safetensors) written with
  the kit's own model class, so no test pays for importing transformers.
- `stage_commit` / `commit`: a small commit whose objects are random FP32 tensors (all distinct);
  `model_commit`: a commit of a seed's whole model with random distinct tensors (optionally with
  planted bytes in place of an RNG state or a tensor object).
- `learned_root_from_loaded`: load every tensor of a commit and recompute its learned-state root
  from the loaded values (what a resume would actually use), independently of the manifest.
- `faulty_session_worker`: `engine_workers.session_worker` (tests/support/engine_workers.py) with one fault injected on one rank at one
  phase (raise, SIGKILL or hang), driven by `args["fault"]`.
- `corrupt`: bit flip, truncation or deletion of a file.
- `worker_env` / `run_python`: the environment and runner for subprocesses of the suite.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch
from safetensors.torch import save_file

from kit.digest import canonical_json
from kit.model.config import LlamaShape, RopeSpec
from kit.store.commits import learned_state_root, save_param_states, write_commit
from kit.store.objects import ObjectStore

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent
REPO = TESTS.parent
VOCAB = 64  # support.engine.make_batches draws token ids below 64


def tiny_shape(layers: int = 2, vocab: int = VOCAB) -> LlamaShape:
    return LlamaShape(vocab_size=vocab, hidden_size=16, intermediate_size=24, num_hidden_layers=layers,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=8, rms_norm_eps=1e-5,
                      max_position_embeddings=64, tie_word_embeddings=True, rope=RopeSpec())


def write_seed(out: Path, layers: int = 2, seed: int = 0, shape: LlamaShape | None = None) -> Path:
    """A random tiny Llama seed directory (config.json, model.safetensors); non-trivial norms."""
    from kit.model.llama import LlamaCausalLM

    shape = shape or tiny_shape(layers)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(shape.to_hf_dict(), indent=2, sort_keys=True))
    torch.manual_seed(seed)
    model = LlamaCausalLM(shape)
    tensors = {}
    for name, p in model.named_parameters():
        t = p.detach().clone()
        if "norm" in name:
            t.uniform_(0.5, 1.5)
        else:
            t.normal_(0.0, 0.2)
        tensors[name] = t.contiguous()
    save_file(tensors, str(out / "model.safetensors"))
    return out


def tiny_config_bytes(num_layers: int = 2) -> bytes:
    return canonical_json(tiny_shape(num_layers).to_hf_dict())


def random_states(seed: int, shapes: dict[str, tuple[int, ...]] | None = None) -> dict[str, dict]:
    """Per-parameter FP32 states with random values, so that no two tensors share an object."""
    shapes = shapes or {"a.weight": (4, 3), "b.weight": (5,), "c.bias": (2, 2)}
    g = torch.Generator().manual_seed(seed)
    return {name: {"group": "default", "age": seed,
                   "param": torch.randn(shape, generator=g), "exp_avg": torch.randn(shape, generator=g),
                   "exp_avg_sq": torch.rand(shape, generator=g)}
            for name, shape in sorted(shapes.items())}


def stage_commit(home: Path, seed: int, world: int = 2, tag: str = "") -> tuple[dict, dict, list[str]]:
    """Write a commit's objects as the workers would; returns (learned_state, layout, rng)."""
    store = ObjectStore(home)
    entries = save_param_states(store, random_states(seed))
    rng = [store.put_bytes(f"rng {tag} rank {r} seed {seed}".encode()) for r in range(world)]
    blocks = [[0, 1], [1, 2]] if world == 2 else [[0, 2]]
    layout = {"blocks": blocks, "embedding_owner": 0, "model_config": store.put_bytes(tiny_config_bytes(2))}
    cursor = {"step": seed} | ({"writer": int(tag)} if tag.isdigit() else {})
    return {"cursor": cursor, "params": entries}, layout, rng


def commit(home: Path, seed: int, parent: str | None) -> str:
    ls, layout, rng = stage_commit(home, seed)
    return write_commit(home, ls, layout, parent, rng)


def learned_root_from_loaded(home: Path, manifest: dict) -> str:
    """The learned-state root recomputed from the tensors a resume loads (not from the manifest's digests)."""
    from kit.store.commits import load_param_states

    states = load_param_states(ObjectStore(home), manifest["learned_state"]["params"])
    entries = [{"name": name, "dtype": "float32", "shape": list(s["param"].shape), "group": s["group"],
                "age": s["age"], **{f: _digest_of(s[f]) for f in ("param", "exp_avg", "exp_avg_sq")}}
               for name, s in sorted(states.items())]
    return learned_state_root({"cursor": manifest["learned_state"]["cursor"], "params": entries})


def _digest_of(t: torch.Tensor) -> str:
    return hashlib.sha256(t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()).hexdigest()


def corrupt(path: Path, damage: str, offset: int | None = None) -> None:
    """Damage a file in place: "bit_flip" (one bit at `offset`, default the middle), "truncate" (drop
    the last byte) or "delete"."""
    if damage == "delete":
        path.unlink()
        return
    data = bytearray(path.read_bytes())
    if damage == "truncate":
        path.write_bytes(bytes(data[:-1]))
    elif damage == "bit_flip":
        data[len(data) // 2 if offset is None else offset] ^= 0x01
        path.write_bytes(bytes(data))
    else:
        raise AssertionError(damage)


# -- subprocesses ------------------------------------------------------------------------------------------


def worker_env(extra: dict | None = None) -> dict:
    """Environment for a subprocess or launched worker: tests/ (so `support`) importable, one thread."""
    path = os.pathsep.join([str(TESTS), str(REPO), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1", **(extra or {})}


def run_python(code: str, *args: str, env: dict | None = None, cwd: Path | None = None,
               timeout: float = 60) -> subprocess.CompletedProcess:
    """`python -c code args` (from `cwd`: `-c` puts the working directory first on sys.path)."""
    return subprocess.run([sys.executable, "-c", code, *args], env=worker_env(env), cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, check=False)


# -- a session worker with one injected fault ------------------------------------------------------------


def faulty_session_worker(group, args: dict, ctx) -> dict:
    """`engine_workers.session_worker` (tests/support/engine_workers.py) with `args["fault"] = {"rank", "phase", "kind", "step"}` injected.

    phase "migrate": the rank's fetch of its assigned objects raises OSError (a failed read);
    phase "update":  at update `step` the rank raises RuntimeError ("raise") or SIGKILLs itself ("sigkill");
    phase "commit":  at the commit after update `step`, "raise" on rank 0 makes `write_commit` raise a
                     ValueError (the store refused), "raise" on another rank raises RuntimeError before
                     its objects are exchanged, and "hang" stalls the rank just before that collective.
    Every fault is real in the worker process; nothing outside this function is changed.
    """
    from kit.engine import migration, session
    from kit.store import commits
    from support import engine_workers

    fault = args.get("fault") or {}
    mine = fault.get("rank") == group.rank

    def mark() -> None:  # when the fault fired, so a test can bound the time to the run's error
        (Path(ctx.run_dir) / "fault-at.json").write_text(json.dumps({"rank": group.rank, "time": time.time()}))

    phase, kind, step = fault.get("phase"), fault.get("kind", "raise"), fault.get("step")
    if mine and phase == "migrate":
        def failing_fetch(*a, **k):
            mark()
            raise OSError(f"injected read failure while fetching on rank {group.rank}")
        migration.fetch_objects = failing_fetch
    if mine and phase == "update":
        original_update = session.Session.update

        def update(self, records, total_targets=None):
            if self.step + 1 == step:
                mark()
                if kind == "sigkill":
                    os.kill(os.getpid(), signal.SIGKILL)
                raise RuntimeError(f"injected failure in update {step} on rank {group.rank}")
            return original_update(self, records, total_targets)
        session.Session.update = update
    if mine and phase == "commit":
        original_commit, original_write = session.Session.commit, commits.write_commit

        def commit_(self, extra_cursor=None):
            if self.step == step and kind == "hang":
                mark()
                time.sleep(3600)  # stalls before the first collective of the commit
            if self.step == step and kind == "raise" and group.rank != 0:
                mark()
                raise RuntimeError(f"injected failure in commit after update {step} on rank {group.rank}")
            return original_commit(self, extra_cursor)

        def write_commit_(*a, **k):
            if kind == "raise":
                mark()
                raise ValueError("injected refusal: the store cannot take this commit")
            return original_write(*a, **k)
        session.Session.commit = commit_
        if group.rank == 0:
            commits.write_commit = write_commit_
    return engine_workers.session_worker(group, args, ctx)


def model_commit(home: Path, seed_dir: Path, workers: int, seed: int = 0, parent: str | None = None,
                 rng_bytes: list[bytes] | None = None, replace_objects: dict[str, bytes] | None = None,
                 cursor: dict | None = None) -> str:
    """A commit of the seed's model in `home`: every parameter with random, distinct FP32 tensors (so
    no two entries share an object), the seed's config.json bytes, real torch RNG states, an even layout.

    `rng_bytes` replaces the RNG states' bytes; `replace_objects` maps "<parameter name>.<field>" to
    bytes stored (under their own digest) in place of that tensor's object; `cursor` replaces {"step": seed}."""
    from kit.model.config import load_config
    from kit.model.llama import LlamaCausalLM
    from kit.model.shard import even_layout

    shape = load_config(seed_dir)
    with torch.device("meta"):
        shapes = {n: tuple(p.shape) for n, p in LlamaCausalLM(shape).named_parameters()}
    store = ObjectStore(home)
    entries = save_param_states(store, random_states(seed, shapes))
    for key, data in (replace_objects or {}).items():
        name, field = key.rsplit(".", 1)
        next(e for e in entries if e["name"] == name)[field] = store.put_bytes(data)
    rng = []
    for rank in range(workers):
        torch.manual_seed(1000 * seed + rank)
        state = rng_bytes[rank] if rng_bytes is not None else torch.get_rng_state().numpy().tobytes()
        rng.append(store.put_bytes(state))
    layout = {**even_layout(shape.num_hidden_layers, workers).to_json(),
              "model_config": store.put_bytes((seed_dir / "config.json").read_bytes())}
    return write_commit(home, {"cursor": cursor or {"step": seed}, "params": entries}, layout, parent, rng)
