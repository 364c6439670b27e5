"""Content-addressed checkpoint store: immutable objects, canonical manifests, HEAD, export.

A store is a directory holding `objects/` (bytes named by their sha256), `commits/<full_root>.json`
and `HEAD`, moved only by an atomic rename under a lock; the format and an independent verifier are in
docs/formats/checkpoint-store.md ("Checkpoint store"). Modules: `objects`, `manifest` (records and roots), `params`,
`head`, `commits` (where a commit is written: `write_commit`), `start`, `export`, `async_commit`.
Layer 4: imports torch, safetensors and layers 0-2 only; never torch.distributed.
"""
