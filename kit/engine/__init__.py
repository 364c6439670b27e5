"""The training engine of one worker, above the schedule and the store (layer 5).

The decision to know: `kit.engine.worker.build_worker` is the one construction every caller uses
(admission, the owned stage and weights, optimizer state, the frozen reference). Around it:
`session` (updates and commits bound to a store), `migration` (another layout; `open_start`),
`fetch` and `commit_transfer` (hosts without a shared filesystem), `reference`, `admission`.
Layer notes: docs/engine.md ("Where things happen").
"""
