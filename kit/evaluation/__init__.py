"""Evaluation of committed candidates (layer 5), read-only and forward-only.

- `kit.evaluation.scoring`: the whole model of a commit or a seed (parameters only), per-example
  assistant-token NLL, greedy task answers (decoded by `kit.model.generate.greedy_batch`).

The adaptive experiment's evaluation records, gates and selection are `kit.adaptive.evaluation` and
`kit.adaptive.selection`; the study's screens are `kit.study.screens`.
"""
