"""The tier of every test file (which of four pytest markers its tests carry) and the tests marked `slow`.

One table, filename -> tier, applied by tests/conftest.py at collection, so a file's tier is decided here
and reviewed in one place. A test file missing from the table stops collection with a line that names it
(tests/test_tiers.py checks the table against the files on disk). Each file has exactly one tier, by what
it is, not by how long it takes; where more than one fits, the first that applies wins:

- campaign: its subject is a script of the GPU campaigns (campaigns/, bench/, tools/ that run or prepare
  them), even where it reads earlier campaigns' committed records;
- evidence: it reads the committed runs/, reports/ or ledger/, even if fast: it changes with every re-run;
- e2e: it executes notebooks, the demo, the examples or `kit`/torchrun/JupyterLab in subprocesses end to end;
- unit: the rest: tiny models, no notebook executed, no committed run or report read.

Speed is the second marker, `slow`, whatever the tier: the files of SLOW_FILES and the test functions of
SLOW_TESTS, real multi-process training or a seed build too slow for the edit loop. `make test-fast` runs
`-m "unit and not slow"` (the 1- and 2-worker engine-against-oracle test included); `make test` runs all.
"""

from __future__ import annotations

from pathlib import Path

UNIT, E2E, EVIDENCE, CAMPAIGN = "unit", "e2e", "evidence", "campaign"
TIER_NAMES = (UNIT, E2E, EVIDENCE, CAMPAIGN)

CAMPAIGN_FILES = (
    "test_adopt_medium_evidence.py",
    "test_gpu_campaign_tiny.py",
    "test_gpu_wheels.py",
    "test_medium_campaign_script.py",
    "test_medium_pilot.py",
    "test_study_pilot.py",
)

EVIDENCE_FILES = (
    "test_adaptive_terms.py",  # builds its typed prepared jobs from the committed demo jobs
    "test_archive.py",
    "test_daily_use.py",
    "test_evidence_anchor.py",
    "test_dev_curve.py",
    "test_exposure_sensitivity.py",
    "test_format_docs_report.py",
    "test_format_docs_prepared.py",
    "test_final_verification.py",
    "test_gpu_repeats.py",
    "test_inspect_run.py",
    "test_ledger_from_evaluations.py",
    "test_medium_evidence.py",
    "test_newcomer_evidence.py",
    "test_planner_gpu_regime.py",
    "test_replay.py",
    "test_replay_at_commit.py",
    "test_replicate_analysis.py",
    "test_replicate_design_file.py",
    "test_replicates.py",
    "test_repo_size.py",
    "test_report.py",
    "test_report_accuracy.py",
    "test_report_first_screen.py",
    "test_report_page.py",
    "test_report_pilots.py",
    "test_report_selection.py",
    "test_report_sentences.py",
    "test_review_cost.py",
    "test_seed_small.py",
    "test_tamper.py",
    "test_verify_repository.py",
)

E2E_FILES = (
    "test_adaptive_netns.py",
    "test_cli_quiet.py",
    "test_demo_notebooks.py",
    "test_evidence.py",
    "test_examples.py",
    "test_make_lab.py",
    "test_newcomer_training.py",
    "test_no_abbrev.py",
    "test_numeric_profile.py",
    "test_own_model.py",
    "test_readme_python.py",
    "test_replicate_campaign.py",
    "test_replicates_tiny.py",
    "test_run_at_once.py",
    "test_scales.py",
    "test_study_netns.py",
    "test_torchrun.py",
    "test_type_check.py",  # mypy over kit/ (~50 CPU s on a cold cache; `make test` runs it after make lint)
    "reliability/test_full_disk_run.py",
    "reliability/test_locks_and_leftovers.py",
    "reliability/test_notebook_parameters.py",
    "reliability/test_signals.py",
    "test_digest.py",  # `kit digest` in subprocesses, on built seeds and sharded directories
)

UNIT_FILES = (
    "test_adaptive_guards.py",
    "test_adaptive_prepare.py",
    "test_admission.py",
    "test_api.py",
    "test_async_commit.py",
    "test_bench_flops.py",
    "test_cached_decode.py",
    "test_chat.py",
    "test_checkpoint_training.py",
    "test_cli_readme.py",
    "test_cli_walk.py",
    "test_commit_transfer.py",
    "test_compiled_loss.py",
    "test_contract_terms.py",
    "test_conversations.py",
    "test_css_prune.py",
    "test_device_clip.py",
    "test_docs_reference.py",
    "test_format_docs_engine.py",
    "test_docstrings.py",
    "test_engine.py",
    "test_evaluate.py",
    "test_format_docs_study.py",
    "test_format_docs_evcore.py",
    "test_format_docs_status.py",
    "test_fast_paths_applied.py",
    "test_fetch_over_group.py",
    "test_format_docs_adaptive_records.py",
    "test_function_length.py",
    "test_format_docs_contracts.py",
    "test_format_docs_replicates.py",
    "test_fused_paths.py",
    "test_gradient_oracle.py",
    "test_growth.py",
    "test_install_pins.py",
    "test_integrity.py",
    "test_layers.py",
    "test_ledger_concurrency.py",
    "test_ledger_replay.py",
    "test_ledger_scope.py",
    "test_length_buckets.py",
    "test_lineage.py",
    "test_llama_oracle.py",
    "test_lr_schedule.py",
    "test_nccl_schedule.py",
    "test_nccl_separate_homes.py",
    "test_newcomer.py",
    "test_notebook_imports.py",
    "test_notebook_parameter_names.py",
    "test_notebooks_clean.py",
    "test_numeric_entry.py",
    "test_planner.py",
    "test_powersgd.py",
    "test_powersgd_oracle.py",
    "test_practice.py",
    "test_process_start.py",
    "test_provenance.py",
    "test_publish.py",
    "test_replicate_calibration.py",
    "test_replicate_design.py",
    "test_report_figure_axes.py",
    "test_report_notebook_sidecars.py",
    "test_retrieval_docs.py",
    "test_seed.py",
    "test_sizes.py",
    "test_stats.py",
    "test_store.py",
    "test_study.py",
    "test_study_projection.py",
    "test_study_shared_gpu.py",
    "test_study_terms.py",
    "test_tasks.py",
    "test_test_layout.py",
    "test_tiers.py",
    "test_tracked_links.py",
    "test_update_levers.py",
    "test_adam_writes_cache.py",
    "test_worker_faults.py",
    "reliability/test_bad_data.py",
    "reliability/test_concurrent_commits.py",
    "reliability/test_crash_and_disk_full.py",
    "reliability/test_hostile_input.py",
    "reliability/test_hostile_use.py",
    "reliability/test_no_pickle.py",
    "reliability/test_prepared_job_guards.py",
    "reliability/test_properties.py",
    "reliability/test_rank_faults.py",
    "reliability/test_store_integrity.py",
)


SLOW = "slow"

# Marked `slow` (worker seconds under `pytest -n 2` on 2 shared cores, tests/support/schedule.py has the
# longest): real multi-process runs or a seed build. A file's every test, or one test function of a file.
SLOW_FILES = (
    "test_digest.py",  # ~143: `kit digest` on built seeds and sharded directories
    "test_checkpoint_training.py",  # ~118
    "test_integrity.py",  # ~109
    "reliability/test_rank_faults.py",  # ~104
    "test_seed.py",  # ~57: builds the test-size seed
    "test_study.py",  # ~45: three arms in separate processes
    "test_worker_faults.py",  # ~45
)
SLOW_TESTS = (
    # 3 workers against the oracle and the 1-worker run; the 1- and 2-worker test stays in `make test-fast`
    "test_engine.py::test_three_workers_match_oracle_and_one_worker",
    "test_engine.py::test_no_worker_holds_a_full_model",  # 3 worker processes
)


def is_slow(path: Path, function: str, tests_dir: Path) -> bool:
    """Whether the test `function` of the file `path` (under `tests_dir`) is marked slow."""
    rel = Path(path).resolve().relative_to(Path(tests_dir).resolve()).as_posix()
    return rel in SLOW_FILES or f"{rel}::{function}" in SLOW_TESTS


def _table() -> dict[str, list[str]]:
    """{file relative to tests/: every tier that lists it} (a file listed twice shows here, not silently)."""
    table: dict[str, list[str]] = {}
    for tier, files in ((UNIT, UNIT_FILES), (E2E, E2E_FILES), (EVIDENCE, EVIDENCE_FILES), (CAMPAIGN, CAMPAIGN_FILES)):
        for name in files:
            table.setdefault(name, []).append(tier)
    return table


TIERS = _table()


class NoTier(Exception):
    """A test file the table does not give exactly one tier."""


def tier_of(path: Path, tests_dir: Path) -> str:
    """The one tier of the test file `path` (under `tests_dir`), or NoTier naming the file and the fix."""
    rel = Path(path).resolve().relative_to(Path(tests_dir).resolve()).as_posix()
    tiers = TIERS.get(rel, [])
    if len(tiers) != 1:
        found = "no tier" if not tiers else f"{len(tiers)} tiers ({', '.join(tiers)})"
        raise NoTier(f"tests/{rel}: {found} in tests/support/tiers.py; list it in exactly one of "
                     f"{', '.join(t.upper() + '_FILES' for t in TIER_NAMES)}")
    return tiers[0]
