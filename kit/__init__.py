"""kit: a notebook-first, reproducible toolkit for sharded Llama training and paired-bootstrap gates.

Layers (a module imports only from its own layer or below; tests/test_layers.py enforces it):
0 pure (digest, inventory, model.config, stats, planner, contract) -> 1 data -> 2 math (model, train,
numerics) -> 3 distributed -> 4 storage (store) -> 5 drivers (engine, seed, evaluation, adaptive, study,
evidence, cli).

`import kit` has no side effects and imports nothing heavy: the public API (`__all__`, defined in
kit/api.py) is imported on first use of one of its names, and the numeric profile is applied by
`kit.numerics.apply()` (the CLI, the launcher's workers and the notebook runtime call it).
"""

import importlib

__version__ = "0.1.0"

# The numeric profile (kit/numerics.py explains each setting). `import kit` only names it:
# kit.numerics.apply() sets it, before torch computes anything. Nothing here touches the process.
NUMERIC_PROFILE = "kit-cpu-portable/1"
NUMERIC_ENV = {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE", "OMP_NUM_THREADS": "1",
               "MKL_NUM_THREADS": "1"}

# The public API, defined in kit/api.py and resolved on first use so that `import kit` stays light;
# kit.api's __all__ is this tuple, so the two cannot drift apart.
API_NAMES = (  # grouped by what a notebook does: model, engine, refs, stores, seeds, contracts, experiments, runs
    "LlamaShape", "load_config", "LlamaCausalLM", "Layout", "even_layout",
    "build_worker", "Session", "Group", "launch", "Start", "start_from_seed", "start_from_commit",
    "EngineConfig", "GroupConfig", "DistillConfig", "PowerSGDConfig",
    "SeedRef", "CommitRef", "PeerCommitRef",
    "read_commit", "verify_commit", "list_commits",
    "SeedBuildConfig", "build_seed", "describe_seed", "SmallSeedConfig", "build_small_seed",
    "Contract", "ContractError", "load_adaptive_contract", "load_continued_contract", "load_study_contract",
    "prepare_adaptive", "CohortRequest", "train_cohort", "train_cohort_torchrun",
    "EvaluateRequest", "evaluate_adaptive", "select_adaptive", "adaptive_gates", "prepare_continued", "continued_gates",
    "prepare_study", "ArmRequest", "run_arm", "run_arm_torchrun", "evaluate_study", "freeze_candidates",
    "study_screens",
    "run_notebook", "run_batch", "RunRecord", "record_inputs", "record_metric", "record_roots", "results",
    # what the notebooks of notebooks/ call beside the steps above (tests/test_notebook_imports.py holds them
    # to this list): files and digests, the seed and its tasks, each step's sidecars and figures, the report
    "load_json_strict", "write_canonical_json", "sha256_file", "parameter_digest", "scale_name", "repository_root",
    "record_file", "ArmAborted", "ArmUnavailable", "LEDGER_INPUT", "ledger_digest",
    "SEED_BUILD_FILE", "SEED_SAMPLE_ROLE", "TRAINED_CONVERSATIONS_FILE", "load_seed_model", "greedy_reply",
    "load_tokenizer", "read_conversations", "TASK_FAMILIES", "generate_task_set", "check_answer",
    "job_contract", "prepared_digest", "final_evaluation_evidence", "selection_evidence", "compare_adaptive",
    "adaptive_dev_curve", "ownership_rows", "prepare_sidecars", "attempt_throughput", "commits_table",
    "loss_curves", "comparison_summary", "trajectories", "accuracy_sidecars", "evaluation_file", "gate_sidecars",
    "nll_change_sidecars", "commit_specs", "selection_sidecars", "continued_prepare_sidecars",
    "dev_curve_sidecars",
    "load_prepared_study", "read_arm_record", "arm_sidecars", "frozen_arms", "screens_sidecars", "cost_sidecars",
    "replicate_dev_tasks", "parse_model_spec", "score_replicates", "replicate_dev_sidecars",
    "curves_figure", "accuracy_figure", "bootstrap_figure", "dev_curve_figure", "render_report", "show_runs",
    "show_failures", "inspect_run",
)
__all__ = ["NUMERIC_ENV", "NUMERIC_PROFILE", "__version__", "numerics"] + list(API_NAMES)
_API = frozenset(API_NAMES)


def __getattr__(name: str):
    if name in _API:
        return getattr(importlib.import_module("kit.api"), name)
    raise AttributeError(f"module 'kit' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_API))
