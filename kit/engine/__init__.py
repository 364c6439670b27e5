"""The training engine of one worker, above the schedule and the store (layer 5).

- `kit.engine.worker.build_worker`: where a worker is built (admission, the student's owned stage
  and weights, optimizer and state, the frozen reference) -- the one construction every caller uses.
- `kit.engine.session.Session`: the session loop bound to a store: updates (the schedule runs in
  `kit.distributed.pipeline.StageEngine.update`) and commits (written by
  `kit.store.commits.write_commit`, called from `Session.commit` on rank 0).
- `kit.engine.migration`: migration to another layout and `open_start` (seed, commit, or migrated commit);
  `open_start_over_group` and `reference_over_group` for hosts without a shared filesystem.
- `kit.engine.fetch`: objects over the process group (a new owner's assigned objects, hash-checked, counted).
- `kit.engine.commit_transfer`: a commit across hosts without a shared mount (rank 0's store receives what
  it lacks; the other hosts adopt their shard).
- `kit.engine.reference`: the frozen reference's stage (seed or commit parameters).
- `kit.engine.admission`: memory admission against the memory free now.
"""
