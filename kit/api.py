"""The kit's public Python API: what a notebook or a script uses, re-exported by `kit` on first use.

        numerics.apply()  # first: digests and roots refuse before the numeric profile is in force
    import kit
    kit.build_seed(...); kit.prepare_adaptive(...); kit.train_cohort(kit.CohortRequest(...))

Per experiment the same steps: prepare, train (a typed run request), evaluate, select (the study
freezes its candidates), gates (the study's screens). Importing this module imports torch (the
drivers need it); `import kit` alone imports nothing heavy."""

from kit import API_NAMES
from kit.adaptive.continued import continued_gates, prepare_continued
from kit.adaptive.continued_schema import load_continued_contract
from kit.adaptive.evaluation import evaluate as evaluate_adaptive
from kit.adaptive.evaluation import gates as adaptive_gates
from kit.adaptive.prepare import prepare as prepare_adaptive
from kit.adaptive.schema import load_adaptive_contract
from kit.adaptive.selection import write_selection as select_adaptive
from kit.adaptive.torchrun import train_torchrun as train_cohort_torchrun
from kit.adaptive.train import CohortRequest
from kit.adaptive.train import train as train_cohort
from kit.contract import Contract, ContractError
from kit.distributed.group import Group
from kit.distributed.launch import launch
from kit.distributed.pipeline import EngineConfig
from kit.engine.session import Session
from kit.engine.worker import build_worker
from kit.evidence.notebook import record_inputs, record_metric, record_roots
from kit.evidence.results import results
from kit.evidence.run_record import RunRecord
from kit.evidence.runner import run_batch, run_notebook
from kit.model.config import LlamaShape, load_config
from kit.model.llama import LlamaCausalLM
from kit.model.shard import Layout, even_layout
from kit.refs import CommitRef, PeerCommitRef, SeedRef
from kit.seed.build import SeedBuildConfig, build_seed, describe_seed
from kit.seed.small import SmallSeedConfig, build_small_seed
from kit.store.commits import list_commits, read_commit, verify_commit
from kit.store.start import Start, start_from_commit, start_from_seed
from kit.study.arms import ArmRequest, run_arm
from kit.study.hosts import run_arm_torchrun
from kit.study.prepare import prepare_study
from kit.study.schema import load_study_contract
from kit.study.screens import build_screens as study_screens
from kit.study.screens import evaluate_study, freeze_candidates
from kit.train.loss import DistillConfig
from kit.train.optim import GroupConfig
from kit.train.powersgd import PowerSGDConfig

__all__ = list(API_NAMES)  # kit/__init__.py names them (import kit stays free of torch)
