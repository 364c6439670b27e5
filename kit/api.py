"""The kit's public Python API: what a notebook or a script uses, re-exported by `kit` on first use.

        numerics.apply()  # first: digests and roots refuse before the numeric profile is in force
    import kit
    kit.build_seed(...); kit.prepare_adaptive(...); kit.train_cohort(kit.CohortRequest(...))

Per experiment the same steps: prepare, train (a typed run request), evaluate, select (the study
freezes its candidates), gates (the study's screens). Importing this module imports torch (the
drivers need it); `import kit` alone imports nothing heavy."""

from kit import API_NAMES
from kit.adaptive.compare import compare as compare_adaptive
from kit.adaptive.continued import continued_gates, job_contract, prepare_continued
from kit.adaptive.continued_schema import load_continued_contract
from kit.adaptive.dev_curve import curve_sidecars as dev_curve_sidecars
from kit.adaptive.dev_curve import dev_curve as adaptive_dev_curve
from kit.adaptive.evaluation import EvaluateRequest
from kit.adaptive.evaluation import evaluate as evaluate_adaptive
from kit.adaptive.evaluation import gates as adaptive_gates
from kit.adaptive.prepare import prepare as prepare_adaptive
from kit.adaptive.schema import load_adaptive_contract
from kit.adaptive.selection import final_evaluation_evidence, prepared_digest, selection_evidence
from kit.adaptive.selection import write_selection as select_adaptive
from kit.adaptive.sidecars import (
    accuracy_sidecars,
    attempt_throughput,
    commit_specs,
    commits_table,
    comparison_summary,
    continued_prepare_sidecars,
    evaluation_file,
    gate_sidecars,
    loss_curves,
    nll_change_sidecars,
    ownership_rows,
    prepare_sidecars,
    selection_sidecars,
    trajectories,
)
from kit.adaptive.torchrun import train_torchrun as train_cohort_torchrun
from kit.adaptive.train import CohortRequest
from kit.adaptive.train import train as train_cohort
from kit.contract import Contract, ContractError, scale_name
from kit.data.chat import load_tokenizer
from kit.data.conversations import read_jsonl as read_conversations
from kit.data.tasks import FAMILIES as TASK_FAMILIES
from kit.data.tasks import check_answer
from kit.data.tasks import generate_set as generate_task_set
from kit.digest import load_json_strict, sha256_file, write_canonical_json
from kit.distributed.group import Group
from kit.distributed.launch import launch
from kit.distributed.pipeline import EngineConfig
from kit.engine.session import Session
from kit.engine.worker import build_worker
from kit.evidence.inspect import inspect_run
from kit.evidence.ledger import LEDGER_INPUT
from kit.evidence.ledger import read_digest as ledger_digest
from kit.evidence.notebook import (
    ArmAborted,
    ArmUnavailable,
    record_file,
    record_inputs,
    record_metric,
    record_roots,
)
from kit.evidence.report.figures import accuracy_figure, bootstrap_figure, dev_curve_figure
from kit.evidence.report.page import render_report
from kit.evidence.report.runs import show_failures, show_runs
from kit.evidence.report.sidecars import curves_figure
from kit.evidence.results import results
from kit.evidence.run_record import RunRecord
from kit.evidence.runner import run_batch, run_notebook
from kit.evidence.runtime import repository_root
from kit.inventory import parameter_digest
from kit.model.config import LlamaShape, load_config
from kit.model.llama import LlamaCausalLM
from kit.model.shard import Layout, even_layout
from kit.refs import CommitRef, PeerCommitRef, SeedRef
from kit.seed.build import (
    SEED_BUILD_FILE,
    SEED_SAMPLE_ROLE,
    TRAINED_CONVERSATIONS_FILE,
    SeedBuildConfig,
    build_seed,
    describe_seed,
    greedy_reply,
    load_seed_model,
)
from kit.seed.small import SmallSeedConfig, build_small_seed
from kit.store.commits import list_commits, read_commit, verify_commit
from kit.store.start import Start, start_from_commit, start_from_seed
from kit.study.arms import ArmRequest, read_arm_record, run_arm
from kit.study.hosts import run_arm_torchrun
from kit.study.prepare import load_prepared as load_prepared_study
from kit.study.prepare import prepare_study
from kit.study.replicate_dev import dev_sidecars as replicate_dev_sidecars
from kit.study.replicate_dev import dev_tasks as replicate_dev_tasks
from kit.study.replicate_dev import parse_model as parse_model_spec
from kit.study.replicate_dev import score_replicates
from kit.study.schema import load_study_contract
from kit.study.screens import build_screens as study_screens
from kit.study.screens import evaluate_study, freeze_candidates
from kit.study.sidecars import arm_sidecars, cost_sidecars, frozen_arms, screens_sidecars
from kit.train.loss import DistillConfig
from kit.train.optim import GroupConfig
from kit.train.powersgd import PowerSGDConfig

__all__ = list(API_NAMES)  # kit/__init__.py names them (import kit stays free of torch)
