"""Content-addressed checkpoint store: immutable objects, canonical manifests, HEAD, export.

A store is a directory `home` holding `objects/<first two hex digits>/<sha256>` (raw bytes named by
their own digest), `commits/<full_root>.json` (one canonical JSON manifest per commit) and `HEAD`
(the full root of the newest complete commit, moved only by an atomic rename under a lock).
The exact format, and how an independent verifier recomputes both roots, is in docs/formats.md
("Checkpoint store").

- `kit.store.objects`: the object store (write, read with re-hash, fetch only assigned objects).
- `kit.store.manifest`: commit records (learned state, layout, RNG, manifest) and both roots.
- `kit.store.params`: parameter I/O (param and both Adam moments; or parameters only).
- `kit.store.head`: HEAD and HEAD.lock.
- `kit.store.commits`: writing, adopting, reading, verifying and collecting commits (where a commit
  is written: `write_commit`).
- `kit.store.start`: where a worker's state comes from (a seed directory or a commit).
- `kit.store.export`: a commit back to a Hugging Face directory.

Layer 4: imports torch, safetensors and layers 0-2 only; never torch.distributed.
"""
