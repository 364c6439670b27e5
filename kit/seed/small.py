"""The medium seed (`kit seed build --scale medium`, formerly `--scale small`): a ~126M-parameter Llama chat seed
pretrained on one H200.

A 12-layer, 768-wide Llama trained on general text, pinned public conversations and generated task
conversations, through the kit's engine with bf16 autocast on CUDA. The decision to know: every
trained task digest is checked against every development and final role of the contracts before
any model work, and the build runs in the deterministic GPU mode with `torch.compile` off, so the
same hardware and software give the same digest.
Data, disjointness and determinism: the notes below; files: docs/formats/seed-directory.md.

Notes: the recipe, its reasons and what makes the digest repeat.

Data: general text from Debian's `python3.11-doc` (data/SOURCE.md); `data/alpaca_5000.json` records [0, 1948)
trained and [1948, 2048) held out, never 2048-4999 (the contracts' final-retention ranges); task conversations of
role "seed-train", excluding each contract role's first 2 x count draws (a superset of what prepare keeps).
Why this recipe (the defaults; the probes: campaigns/logbook.md): the seed must learn in context, but must not
already know what cohort A teaches. So difficulty-1 tasks packed 6 times (one pass answers at most 5 of 128),
524,288 practice examples at the contracts' sizes (kit.data.practice), and no difficulty-2 example of the four
families in any words: with reworded ones (p10) cohort A had only the wording left to teach, with 16,384 in the
contracts' words (p8) it gained at most +4.5 points. The result answers lookup 20 of 32 at the contracts' difficulty
and filtering, arithmetic and sorting 0; cohort A teaches them. Earlier recipes: `campaigns/seed-recipes/`.
Determinism: the numeric profile's `deterministic_gpu=True`, SDPA pinned to FLASH_ATTENTION (deterministic backward;
the flag excludes cuDNN attention), blocks compiled under Inductor's deterministic mode (no kernel chosen by timing),
the engine's fast paths off as when the pinned digest was built: the same digest on the same hardware and software
from a fresh machine (docs/engine.md).
"""

from __future__ import annotations

import gc
import hashlib
import os
import platform
import time
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields, replace
from pathlib import Path

import numpy as np
import torch

from kit import numerics
from kit.data import general_text
from kit.data.chat import EncodedExample, encode_or_refuse, encode_single_turns, load_tokenizer
from kit.data.conversations import (
    Conversation,
    conversation_from_json,
    load_instruction_source,
    synthetic_conversations,
)
from kit.data.general_text import TextDocument
from kit.data.practice import PRACTICE_FAMILIES, practice_set
from kit.data.retrieval import retrieval_documents
from kit.data.tasks import FAMILIES, TaskExample, generate_set, generate_twin_sets
from kit.data.tokenizer_build import BOS_TOKEN, EOS_TOKEN, PAD_TOKEN, build_tokenizer
from kit.digest import load_json_strict, sha256_file, sha256_json
from kit.distributed.pipeline import EngineConfig
from kit.evaluation.scoring import FamilyAccuracy, TaskAnswer, nll_scores, task_answers
from kit.flops import H200_BF16_PEAK_FLOPS, executed_flops_per_token
from kit.model.config import LlamaShape
from kit.model.llama import LlamaCausalLM, init_weights
from kit.publish import publish_dir
from kit.record import Opt, Record, spec_field
from kit.seed.build import SEED_TRAIN_ROLE, greedy_answer, seed_shape
from kit.seed.loop import STEADY_FROM, progress_enabled, train_updates, warmup_cosine
from kit.seed.record import common_record, final_loss, write_record, write_seed_files
from kit.train.batch import TrainRecord
from kit.train.optim import GroupConfig

ALPACA_FILE = "data/alpaca_5000.json"
ALPACA_SHA256 = "fc1add24c93c9fbbe585a64a6c9bf6165eb110225f4470efbff382a913558ec0"  # data/SOURCE.md
ALPACA_NAME = "alpaca_5000"
DEV_SAMPLE_ROLE = "seed-dev-sample"  # the per-family accuracy sample of the build record
REWORDED_ROLE = "seed-train-reworded"  # the reworded examples' own stream: no twin of a seed-train example
PRACTICE_ROLE = "seed-train-practice"  # the practice families' training stream (kit.data.practice)
PRACTICE_SAMPLE_ROLE = "seed-practice-sample"  # the record's practice accuracy sample: never trained on
CHAT_PROMPTS = ("What colour is the sky?", "Give three tips for staying healthy.",
                "What is a list in Python?", "Explain what a function is in one sentence.")
OPTIMIZER_GROUP = "default"
VOCAB_RANGE = (8192, 32768)  # the tokenizer size a real config must have
PARAM_RANGE = (100_000_000, 400_000_000)


class DisjointnessError(ValueError):
    """A task conversation of the build is in some development or final role."""


@dataclass(frozen=True)
class SmallSeedConfig:
    # model
    vocab_size: int = 16384
    hidden_size: int = 768
    intermediate_size: int = 3072
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    num_key_value_heads: int = 12
    seq_len: int = 1024  # every training row has exactly this many tokens (packed, padding only at row ends)
    max_position_embeddings: int = 2048
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5
    init_std: float = 0.02
    # data
    general_text_epochs: int = 1
    general_text_max_docs: int = 0  # 0: every document of the file (tests use a few)
    heldout_every: int = 50  # a document is held out when sha256(path) % heldout_every == 0
    alpaca_train_stop: int = 1948  # train on records [0, alpaca_train_stop)
    alpaca_heldout_stop: int = 2048  # held out: [alpaca_train_stop, alpaca_heldout_stop), inside replay 0-2047
    alpaca_epochs: int = 1
    synthetic: int = 2000
    tasks: int = 500000
    task_difficulty: int = 1  # the difficulty of the seed's own task examples (below the contracts' 2)
    task_epochs: int = 6  # each of the `tasks` examples is packed this many times (in the one conversation order)
    dev_difficulty_tasks: int = 0  # more seed-train examples at dev_difficulty, each packed once (p8: 16,384)
    # Examples at dev_difficulty in other words than the contracts' (kit.data.tasks REWORDED), under their own
    # role, each packed reworded_epochs times (probe p10, the seed d1749707: campaigns/seed-recipes/). Off: a
    # seed that can do the cohorts' tasks in other words has already learned what cohort A is meant to teach.
    reworded_tasks: int = 0
    reworded_epochs: int = 1
    # Practice families (kit.data.practice) at dev_difficulty's sizes, each example packed practice_epochs
    # times: the four families' skills in computations none of them asks for, so that the seed has the
    # capacity without having learned the cohorts' tasks in any words (probe q1, the seed af103c8d;
    # the module docstring's notes.
    practice_tasks: int = 524288
    practice_epochs: int = 1
    retrieval_docs: int = 0  # key-value recall and repetition documents (kit/data/retrieval.py), plain text
    retrieval_max_pairs: int = 12
    dev_difficulty: int = 2  # the contracts' difficulty: the record's per-family accuracy is measured there
    # optimisation: one update = batch_rows rows of seq_len tokens
    batch_rows: int = 64
    microbatch_rows: int = 64
    max_updates: int = 0  # 0: one pass over every packed row; N: stop after N updates (shorter builds)
    lr: float = 1e-3
    min_lr_ratio: float = 0.1
    warmup_updates: int = 100
    beta1: float = 0.9
    beta2: float = 0.95
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    compute_dtype: str = "bfloat16"  # on CUDA; a CPU build computes in float32
    compile_blocks: str = "auto"  # "auto": torch.compile the blocks on CUDA, under the deterministic profile
    clip_on_device: str = "auto"  # "off": the host's left-to-right sum of squared norms; "auto": on the device, no sync
    # The engine's GPU fast paths (weight cache, fused norms and SwiGLU, multi-tensor norms; docs/performance.md):
    # "off" for the pinned recipe, which was built before them and whose digest their arithmetic would change.
    fast_paths: str = "off"
    seed: int = 0
    # reporting
    dev_sample_per_family: int = 32
    heldout_max_rows: int = 64
    eval_batch: int = 64
    sample_max_new_tokens: int = 64
    curve_every: int = 400  # 0: no learning curve; N: per-family dev accuracy every N updates (and at the end)
    curve_per_family: int = 16
    curve_difficulty: int = 2  # 0: the dev difficulty

    @staticmethod
    def small() -> SmallSeedConfig:
        return SmallSeedConfig()

    def __post_init__(self):
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type == "int" and (isinstance(value, bool) or not isinstance(value, int)):
                raise ValueError(f"SmallSeedConfig.{f.name} = {value!r}; expected an int")
            if f.type == "float" and (isinstance(value, bool) or not isinstance(value, (int, float))):
                raise ValueError(f"SmallSeedConfig.{f.name} = {value!r}; expected a number")
        zero_ok = {"general_text_max_docs", "max_updates", "synthetic", "tasks", "alpaca_epochs", "seed",
                   "warmup_updates", "retrieval_docs", "curve_every", "curve_difficulty", "dev_difficulty_tasks",
                   "reworded_tasks", "practice_tasks"}
        for f in fields(self):
            if f.type == "int" and getattr(self, f.name) < (0 if f.name in zero_ok else 1):
                raise ValueError(f"SmallSeedConfig.{f.name} = {getattr(self, f.name)}; expected "
                                 f"{'>= 0' if f.name in zero_ok else '>= 1'}")
        if self.hidden_size % self.num_attention_heads or (self.hidden_size // self.num_attention_heads) % 2:
            raise ValueError(f"SmallSeedConfig.hidden_size = {self.hidden_size}; expected a multiple of "
                             f"num_attention_heads = {self.num_attention_heads} with an even head dimension")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(f"SmallSeedConfig.num_key_value_heads = {self.num_key_value_heads}; expected a "
                             f"divisor of num_attention_heads = {self.num_attention_heads}")
        if self.seq_len > self.max_position_embeddings:
            raise ValueError(f"SmallSeedConfig.seq_len = {self.seq_len}; expected <= max_position_embeddings = "
                             f"{self.max_position_embeddings}")
        if self.batch_rows % self.microbatch_rows:
            raise ValueError(f"SmallSeedConfig.batch_rows = {self.batch_rows}; expected a multiple of "
                             f"microbatch_rows = {self.microbatch_rows}")
        if not 0 < self.alpaca_train_stop < self.alpaca_heldout_stop <= 2048:
            raise ValueError(f"SmallSeedConfig.alpaca_train_stop = {self.alpaca_train_stop}, alpaca_heldout_stop = "
                             f"{self.alpaca_heldout_stop}; expected 0 < train_stop < heldout_stop <= 2048 (the "
                             f"replay range; records 2048-4999 are final retention and never trained on)")
        if self.clip_on_device not in ("auto", "off"):
            raise ValueError(f"SmallSeedConfig.clip_on_device = {self.clip_on_device!r}; expected 'auto' or 'off'")
        if self.fast_paths not in ("auto", "off"):
            raise ValueError(f"SmallSeedConfig.fast_paths = {self.fast_paths!r}; expected 'auto' or 'off'")
        if self.compile_blocks not in ("auto", "off"):
            raise ValueError(f"SmallSeedConfig.compile_blocks = {self.compile_blocks!r}; expected 'auto' or 'off'")
        for name in ("task_difficulty", "dev_difficulty", "curve_difficulty"):
            if getattr(self, name) not in ((0, 1, 2, 3) if name == "curve_difficulty" else (1, 2, 3)):
                raise ValueError(f"SmallSeedConfig.{name} = {getattr(self, name)}; expected 1, 2 or 3")
        if not 2 <= self.retrieval_max_pairs <= 26:
            raise ValueError(f"SmallSeedConfig.retrieval_max_pairs = {self.retrieval_max_pairs}; expected 2..26")
        if self.compute_dtype not in ("bfloat16", "float32"):
            raise ValueError(f"SmallSeedConfig.compute_dtype = {self.compute_dtype!r}; expected 'bfloat16' or 'float32'")
        if not (self.lr > 0 and 0 <= self.min_lr_ratio <= 1):
            raise ValueError(f"SmallSeedConfig: lr = {self.lr}, min_lr_ratio = {self.min_lr_ratio}; expected lr > 0 "
                             f"and a ratio in [0, 1]")

    @staticmethod
    def from_json(path: str | Path) -> SmallSeedConfig:
        """The small config with the fields of a JSON object file replaced (unknown fields refused)."""
        path = Path(path)
        if not path.is_file():
            raise ValueError(f"{path}: config file not found; expected a JSON object of SmallSeedConfig fields")
        overrides = load_json_strict(path)
        if not isinstance(overrides, dict):
            raise ValueError(f"{path}: expected a JSON object of SmallSeedConfig fields, "  # noqa: TRY004 (a user refusal)
                             f"got {type(overrides).__name__}")
        known = {f.name for f in fields(SmallSeedConfig)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ValueError(f"{path}: unknown field(s) {unknown}; expected some of {sorted(known)}")
        try:
            return replace(SmallSeedConfig.small(), **overrides)
        except ValueError as e:
            raise ValueError(f"{path}: {e}") from None

    def learning_rate(self, update: int, updates: int) -> float:
        return warmup_cosine(update, updates, self.lr, self.min_lr_ratio, self.warmup_updates)

    def shape(self, vocab_size: int, bos_id: int, eos_id: int, pad_id: int) -> LlamaShape:
        return seed_shape(self, vocab_size, bos_id, eos_id, pad_id)


# --- disjointness --------------------------------------------------------------------------------
def _dev_final_specs(node) -> list[tuple]:
    """(role, seed, difficulty, count) of every {role, seed, difficulty, count} object with a dev or final role."""
    found = []
    if isinstance(node, dict):
        role = node.get("role")
        if (isinstance(role, str) and ("dev" in role or "final" in role)
                and all(isinstance(node.get(k), int) for k in ("seed", "difficulty", "count"))):
            found.append((role, node["seed"], node["difficulty"], node["count"]))
        for v in node.values():
            found += _dev_final_specs(v)
    elif isinstance(node, list):
        for v in node:
            found += _dev_final_specs(v)
    return found


@dataclass(frozen=True, slots=True)
class ForbiddenSet:
    """A development or final task role of a contract, as the seed build draws it to stay disjoint from it."""

    seed: int
    difficulty: int
    count: int
    drawn: int  # 2 x count: the role's first draws per family
    digests: dict[str, str]  # task digest -> its id

    def checked_against(self) -> dict:
        """seed_build.json's `disjointness.checked_against` entry: the digests as one digest."""
        return {"seed": self.seed, "difficulty": self.difficulty, "count": self.count, "drawn": self.drawn,
                "digest": sha256_json(sorted(self.digests))}


def forbidden_task_sets(contracts_dir: Path) -> dict[str, ForbiddenSet]:
    """{"<contract file>:<role>": its ForbiddenSet} for every development and final task role of every contract:
    the role's first 2 x count draws per family."""
    out = {}
    for path in sorted(Path(contracts_dir).glob("*.json")):
        c = load_json_strict(path)
        specs = []
        if isinstance(c.get("data_seeds"), dict) and isinstance(c.get("tasks"), dict):  # adaptive, continued
            ev = c.get("evaluation", {})
            for role, count in (("dev.tasks", ev.get("dev", {}).get("tasks")),
                                ("final.tasks", ev.get("final", {}).get("tasks"))):
                if isinstance(count, int) and count > 0:
                    specs.append((role, c["data_seeds"]["tasks"], c["tasks"]["difficulty"], count))

        specs += _dev_final_specs(c)
        for role, seed, difficulty, count in specs:
            drawn = generate_set(2 * count, seed, role, difficulty)
            out[f"{path.name}:{role}"] = ForbiddenSet(seed, difficulty, count, len(drawn),
                                                      {e.digest: e.id for e in drawn})
    return out


def check_disjoint(tasks: list[TaskExample], forbidden: dict[str, ForbiddenSet]) -> None:
    """Refuse (DisjointnessError naming the task and the role) when a training task is in a dev/final role."""
    for t in tasks:
        if "dev" in t.role or "final" in t.role:
            raise DisjointnessError(f"seed build: training task {t.id!r} has role {t.role!r}, a development or final "
                                    f"role; the seed trains only on role {SEED_TRAIN_ROLE!r}")
        for key, spec in forbidden.items():
            if t.digest in spec.digests:
                raise DisjointnessError(f"seed build: training task {t.id!r} (digest {t.digest}) is in {key} (as "
                                        f"{spec.digests[t.digest]!r}); refusing to train on a development or final task")


def seed_train_tasks(cfg: SmallSeedConfig, excluded: set[str]) -> tuple[list[TaskExample], list[TaskExample]]:
    """(tasks, twins). Tasks: the `tasks` examples at task_difficulty, then the `dev_difficulty_tasks` ones at
    dev_difficulty (the same seed-train role, never a digest of the first set or of `excluded`), then the
    `practice_tasks` practice examples (kit.data.practice, role PRACTICE_ROLE, at dev_difficulty's sizes), then the
    `reworded_tasks` ones at dev_difficulty in other words (role REWORDED_ROLE). Twins: those last ones in
    the contracts' words, the examples their selection excluded against `excluded` and the rest; the
    disjointness check reads them, so that no trained example is a rewording of a dev or final one."""
    workers = min(16, os.cpu_count() or 1)  # the same examples in any number of processes (generate_set)
    tasks = (generate_set(cfg.tasks, cfg.seed, SEED_TRAIN_ROLE, cfg.task_difficulty, excluded, workers)
             if cfg.tasks else [])
    if cfg.dev_difficulty_tasks:
        tasks += generate_set(cfg.dev_difficulty_tasks, cfg.seed, SEED_TRAIN_ROLE, cfg.dev_difficulty,
                              set(excluded) | {t.digest for t in tasks}, workers)
    if cfg.practice_tasks:  # other families (kit.data.practice): no digest can be a task of any role
        tasks += practice_set(cfg.practice_tasks, cfg.seed, PRACTICE_ROLE, cfg.dev_difficulty,
                              set(excluded) | {t.digest for t in tasks}, workers)
    twins: list[TaskExample] = []
    if cfg.reworded_tasks:
        twins, reworded = generate_twin_sets(cfg.reworded_tasks, cfg.seed, REWORDED_ROLE, cfg.dev_difficulty,
                                             set(excluded) | {t.digest for t in tasks}, workers, "reworded")
        tasks += reworded
    return tasks, twins


def task_record(example: TaskExample) -> Conversation:
    obj = {**example.to_conversation(), "answer": example.answer, "role": example.role}
    return conversation_from_json(obj, f"task example {example.id}", "task")


# --- data ----------------------------------------------------------------------------------------
def split_documents(cfg: SmallSeedConfig, docs: list[TextDocument]) -> tuple[list[TextDocument], list[TextDocument]]:
    if cfg.general_text_max_docs:
        docs = docs[:cfg.general_text_max_docs]
    held = [int(hashlib.sha256(d.path.encode()).hexdigest(), 16) % cfg.heldout_every == 0 for d in docs]
    return [d for d, h in zip(docs, held) if not h], [d for d, h in zip(docs, held) if h]


def text_rows(ids_per_doc: list[list[int]], order: list[int], sep: int, seq_len: int) -> list[tuple[int, ...]]:
    """Documents in `order`, each followed by `sep`, cut into full rows of seq_len (the rest is dropped)."""
    stream = []
    for i in order:
        stream.extend(ids_per_doc[i])
        stream.append(sep)
    return [tuple(stream[a:a + seq_len]) for a in range(0, len(stream) - seq_len + 1, seq_len)]


def conversation_rows(encoded: list, order: list[int], pad: int,
                      seq_len: int) -> list[tuple[tuple[int, ...], tuple[bool, ...]]]:
    """Encoded conversations in `order`, packed whole into rows of seq_len (right-padded, pad not a target).
    The rows are extended in place: a row rebuilt at every conversation cost a third of a build's packing."""
    rows: list[tuple[tuple[int, ...], tuple[bool, ...]]] = []
    ids: list[int] = []
    mask: list[bool] = []

    def close() -> None:
        rows.append((tuple(ids) + (pad,) * (seq_len - len(ids)), tuple(mask) + (False,) * (seq_len - len(mask))))

    for i in order:
        e = encoded[i]
        if len(ids) + len(e.input_ids) > seq_len:
            close()
            ids, mask = [], []
        ids.extend(e.input_ids)
        mask.extend(e.target_mask)  # bools already (EncodedExample)
    if ids:
        close()
    return rows


@contextmanager
def collection_paused():
    """The cyclic garbage collector off while millions of token tuples are built: they hold no cycles, and
    each full collection walks all of them again (most of the row building's time otherwise)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@dataclass
class _Inputs:
    """What the build reads, checked for disjointness: tasks, general text, public and synthetic conversations."""
    forbidden: dict[str, ForbiddenSet]  # forbidden_task_sets of the contracts
    excluded: set[str]  # every digest of `forbidden`
    tasks: list[TaskExample]
    twins: list[TaskExample]  # the reworded tasks in the contracts' words (seed_train_tasks)
    docs_train: list[TextDocument]
    docs_held: list[TextDocument]
    alpaca_train: list[Conversation]
    alpaca_held: list[Conversation]
    synthetic: list[Conversation]
    convs: list[Conversation]  # alpaca_train + synthetic + tasks: every conversation that may be trained on


def _read_inputs(cfg: SmallSeedConfig, alpaca: Path, text: Path, contracts_dir: Path) -> _Inputs:
    # disjointness first: nothing is built from a task set that touches a dev or final role
    forbidden = forbidden_task_sets(contracts_dir)
    excluded = {d for spec in forbidden.values() for d in spec.digests}
    tasks, twins = seed_train_tasks(cfg, excluded)
    check_disjoint(tasks + twins, forbidden)
    docs_train, docs_held = split_documents(cfg, general_text.load_documents(text))
    alpaca_train = load_instruction_source(alpaca, ALPACA_SHA256, 0, cfg.alpaca_train_stop, ALPACA_NAME)
    alpaca_held = load_instruction_source(alpaca, ALPACA_SHA256, cfg.alpaca_train_stop, cfg.alpaca_heldout_stop,
                                          ALPACA_NAME)
    synthetic = synthetic_conversations(cfg.synthetic, cfg.seed) if cfg.synthetic else []
    convs = alpaca_train + synthetic + [task_record(t) for t in tasks]
    return _Inputs(forbidden, excluded, tasks, twins, docs_train, docs_held, alpaca_train, alpaca_held, synthetic, convs)


def _train_tokenizer(cfg: SmallSeedConfig, inputs: _Inputs, staging: Path):
    """The byte-level BPE trained on the general text and every conversation, written into `staging`;
    returns it and the ids of its special tokens."""
    build_tokenizer([d.text for d in inputs.docs_train] + [m.content for c in inputs.convs for m in c.messages],
                    cfg.vocab_size, staging, model_max_length=cfg.max_position_embeddings)
    tokenizer = load_tokenizer(staging)
    return tokenizer, {t: tokenizer.convert_tokens_to_ids(t) for t in (BOS_TOKEN, EOS_TOKEN, PAD_TOKEN)}


def _encode_conversations(cfg: SmallSeedConfig, tokenizer, convs: list[Conversation]) -> list:
    """Each conversation encoded within seq_len, or None (over-long ones are skipped, never cut)."""
    single = [i for i, c in enumerate(convs) if [m.role for m in c.messages] == ["user", "assistant"]]
    encoded: list[EncodedExample | None] = [None] * len(convs)
    for i, e in zip(single, encode_single_turns(tokenizer, [convs[i] for i in single], cfg.seq_len)):
        encoded[i] = e
    rest = set(range(len(convs))) - set(single)
    for i in sorted(rest):
        encoded[i] = encode_or_refuse(tokenizer, convs[i], cfg.seq_len)
    return encoded


@dataclass
class _Packed:
    """The training rows in training order, cut to whole updates, and what went into them."""
    rows: list[TrainRecord]  # updates * batch_rows rows of seq_len tokens
    updates: int
    tokens: int
    target_tokens: int
    conv_order: list[int]  # indices into _Inputs.convs, in packing order (public ones repeat per epoch)
    skipped: list[str]  # ids of conversations over seq_len
    text_rows: int
    retrieval_documents: int
    retrieval_rows: int


def _pack(cfg: SmallSeedConfig, tokenizer, pad: int, inputs: _Inputs) -> _Packed:
    """General text epochs, retrieval documents and conversations packed into rows, then one row order.
    One numpy PCG64 stream of cfg.seed draws, in order: each text epoch's document order, the
    conversation order, the row order."""
    doc_ids = tokenizer([d.text for d in inputs.docs_train], add_special_tokens=False).input_ids
    encoded = _encode_conversations(cfg, tokenizer, inputs.convs)
    skipped = [c.id for c, e in zip(inputs.convs, encoded) if e is None]
    kept = [i for i, e in enumerate(encoded) if e is not None]
    rng = np.random.default_rng(cfg.seed)
    rows = []
    every = (True,) * cfg.seq_len  # every token of a text row is a target
    for _epoch in range(cfg.general_text_epochs):
        rows += [(r, every) for r in text_rows(doc_ids, list(rng.permutation(len(doc_ids))), pad, cfg.seq_len)]
    n_text_rows = len(rows)
    retrieval = retrieval_documents(cfg.retrieval_docs, cfg.seed, cfg.retrieval_max_pairs)
    retrieval_ids = tokenizer(retrieval, add_special_tokens=False)["input_ids"] if retrieval else []
    rows += [(r, every) for r in text_rows(retrieval_ids, list(range(len(retrieval_ids))), pad, cfg.seq_len)]
    n_retrieval_rows = len(rows) - n_text_rows
    alpaca_idx = [i for i in kept if i < len(inputs.alpaca_train)]
    once_idx = [i for i in kept if i >= len(inputs.alpaca_train)]
    first_task = len(inputs.convs) - len(inputs.tasks)  # convs = alpaca_train + synthetic + tasks
    task_idx = [i for i in once_idx if first_task <= i < first_task + cfg.tasks]  # not the dev-difficulty ones
    first_reworded = len(inputs.convs) - cfg.reworded_tasks  # the reworded ones are the last tasks
    reworded_idx = [i for i in once_idx if i >= first_reworded]
    first_practice = first_reworded - cfg.practice_tasks  # the practice ones come just before them
    practice_idx = [i for i in once_idx if first_practice <= i < first_reworded]
    pool = (alpaca_idx * cfg.alpaca_epochs + once_idx + task_idx * (cfg.task_epochs - 1)
            + reworded_idx * (cfg.reworded_epochs - 1) + practice_idx * (cfg.practice_epochs - 1))
    conv_order = [pool[int(j)] for j in rng.permutation(len(pool))]
    rows += conversation_rows(encoded, conv_order, pad, cfg.seq_len)
    row_order = rng.permutation(len(rows))
    records = [TrainRecord(f"row{int(j)}", *rows[j]) for j in row_order]
    updates = len(records) // cfg.batch_rows
    if cfg.max_updates:
        updates = min(updates, cfg.max_updates)
    if updates < 1:
        raise ValueError(f"seed build: {len(records)} rows make no update of batch_rows = {cfg.batch_rows}")
    used = records[:updates * cfg.batch_rows]
    return _Packed(used, updates, updates * cfg.batch_rows * cfg.seq_len, sum(sum(r.target_mask) for r in used),
                   conv_order, skipped, n_text_rows, len(retrieval), n_retrieval_rows)


# --- the build -----------------------------------------------------------------------------------
def check_inputs(alpaca: Path, text: Path, contracts_dir: Path, device: str) -> None:
    """Every input checked before any work (ValueError naming the file or setting and the expectation)."""
    if not Path(alpaca).is_file():
        raise ValueError(f"{alpaca}: public conversation source not found; expected {ALPACA_FILE} (data/SOURCE.md)")
    got = sha256_file(alpaca)
    if got != ALPACA_SHA256:
        raise ValueError(f"{alpaca}: sha256 {got}; expected {ALPACA_SHA256} (data/SOURCE.md)")
    general_text.load_documents(text)  # refuses a missing file or another digest
    if not any(Path(contracts_dir).glob("*.json")):
        raise ValueError(f"{contracts_dir}: no contract *.json; the build checks task disjointness against the "
                         f"development and final roles of the contracts there")
    if torch.device(device).type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device {device}: CUDA is not available on this machine; use --device cpu (test sizes only)")


def _engine_config(cfg: SmallSeedConfig, device: torch.device, pad_id: int) -> EngineConfig:
    dtype = cfg.compute_dtype if device.type == "cuda" else "float32"
    return EngineConfig(microbatch_size=cfg.microbatch_rows, max_grad_norm=cfg.max_grad_norm, compute_dtype=dtype,
                        pad_id=pad_id, compile_blocks=cfg.compile_blocks, length_bucket=0, clip_on_device=cfg.clip_on_device,
                        weight_cache=cfg.fast_paths, fused_elementwise=cfg.fast_paths, foreach_norm=cfg.fast_paths)


@dataclass
class _Trained:
    losses: list[float]
    learning_curve: list[dict]  # per-family dev-role correct counts every curve_every updates
    curve_seconds: float
    train_seconds: float  # the updates' wall time, learning-curve evaluations excluded
    steady: dict | None  # the rate from update STEADY_FROM on, when the build reached it


def _train(cfg: SmallSeedConfig, model: LlamaCausalLM, tokenizer, packed: _Packed, device: torch.device, show: bool,
           curve_sample: list[TaskExample]) -> _Trained:
    """The seed's updates (kit.seed.loop), with the learning curve measured on `curve_sample` after every
    curve_every updates and after the last; it only reads the model."""
    learning_curve = []

    def curve(k: int) -> None:
        model.eval()
        answers = task_answers(model, tokenizer, [task_record(e) for e in curve_sample], cfg.sample_max_new_tokens,
                               batch_size=cfg.eval_batch)
        model.train()
        learning_curve.append({"update": k, "tokens": k * cfg.batch_rows * cfg.seq_len,
                               **{f: sum(a.correct for a in answers if a.family == f) for f in FAMILIES}})
        if show:  # a long build's curve is worth seeing as it comes, not only in the record
            print(f"learning curve: {learning_curve[-1]}", flush=True)

    t_train = time.perf_counter()
    assert model.shape.pad_token_id is not None, "the seed's tokenizer has a pad token"
    run = train_updates(model, packed.rows, device, _engine_config(cfg, device, model.shape.pad_token_id),
                        GroupConfig(cfg.lr, cfg.beta1, cfg.beta2, 1e-8, cfg.weight_decay),
                        lambda k: cfg.learning_rate(k, packed.updates), cfg.batch_rows, packed.updates, "small seed",
                        show, cfg.curve_every, curve)
    if device.type == "cuda":
        torch.cuda.synchronize()
    t_end = time.perf_counter()
    steady = None
    if run.steady_start is not None:
        steady_seconds = t_end - run.steady_start - (run.hook_seconds - run.hook_seconds_before_steady)
        steady = {"from_update": STEADY_FROM, "seconds": round(steady_seconds, 2),
                  "tokens_per_second": round((packed.updates - STEADY_FROM) * cfg.batch_rows * cfg.seq_len
                                             / steady_seconds, 1)}
    return _Trained(run.losses, learning_curve, run.hook_seconds, t_end - t_train - run.hook_seconds, steady)


def _inductor_deterministic():
    """Inductor's deterministic flag where this torch has one (it follows torch.use_deterministic_algorithms)."""
    try:
        import torch._inductor.config as inductor_config  # noqa: PLC0415 - optional: torch._inductor (triton), on the compile path only
    except ImportError:
        return None
    return getattr(inductor_config, "deterministic", None)


# --- evaluation ----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class TextLoss(Record):
    """The NLL of held-out text rows (seed_build.json's `heldout.general_text` numbers)."""

    rows: int = spec_field(int, doc="rows of seq_len tokens scored")
    tokens: int = spec_field(int, doc="next-token positions scored: rows x (seq_len - 1)")
    nll_per_token: float | None = spec_field(Opt(float), doc="mean NLL (nats), null for no rows")


@torch.no_grad()
def heldout_text_loss(model, rows: Sequence[Sequence[int]], batch: int) -> TextLoss:
    device = next(model.parameters()).device
    total, count = 0.0, 0
    for a in range(0, len(rows), batch):
        ids = torch.tensor(rows[a:a + batch], dtype=torch.long, device=device)
        logp = torch.log_softmax(model(ids).float()[:, :-1], dim=-1)
        nll = -logp.gather(2, ids[:, 1:, None]).squeeze(-1)
        total += float(nll.double().sum())
        count += nll.numel()
    return TextLoss(rows=len(rows), tokens=count, nll_per_token=total / count if count else None)


@dataclass(frozen=True, slots=True)
class _Heldout:
    """The held-out losses: the record's `heldout` and the two numbers the build's summary shows."""
    text_nll: float | None  # per token of the held-out general text
    conversation_nll: float | None  # per assistant token of the held-out public conversations
    record: dict  # seed_build.json's "heldout"


@dataclass(frozen=True, slots=True)
class _Accuracy:
    """The greedy accuracies: the record's `task_accuracy` and the per-family values the summary shows."""
    per_family: dict[str, FamilyAccuracy]  # at the dev difficulty
    reworded: dict[str, FamilyAccuracy] | None  # in the reworded words, when the seed trained on them
    practice: dict[str, FamilyAccuracy] | None  # on practice problems, when the seed trained on some
    record: dict  # seed_build.json's "task_accuracy"


@dataclass(frozen=True, slots=True)
class _Parts:
    """What the build produced before its record is written (`_record` assembles it)."""
    inputs: _Inputs
    packed: _Packed
    trained: _Trained
    data: dict  # the record's "data"
    heldout: _Heldout
    task_accuracy: _Accuracy
    chat_samples: list[dict]


def _heldout(cfg: SmallSeedConfig, model, tokenizer, pad: int, inputs: _Inputs) -> _Heldout:
    """The held-out losses: general text documents and public conversations none of the build trained on."""
    held_ids = tokenizer([d.text for d in inputs.docs_held], add_special_tokens=False).input_ids
    held_rows = text_rows(held_ids, list(range(len(held_ids))), pad, cfg.seq_len)[:cfg.heldout_max_rows]
    text = heldout_text_loss(model, held_rows, max(1, cfg.eval_batch // 8))
    held_text = {"documents": len(inputs.docs_held), "paths_digest": sha256_json([d.path for d in inputs.docs_held]),
                 **text.to_json()}
    held_convs = [c for c in inputs.alpaca_held if encode_or_refuse(tokenizer, c, cfg.seq_len) is not None]
    scores = nll_scores(model, tokenizer, held_convs, cfg.seq_len, batch_size=max(1, cfg.eval_batch // 4))
    n_tok = sum(s.tokens for s in scores)
    conversation_nll = sum(s.nll_sum for s in scores) / n_tok if n_tok else None
    held_conv = {"source": ALPACA_NAME, "range": [cfg.alpaca_train_stop, cfg.alpaca_heldout_stop],
                 "conversations": len(scores), "assistant_tokens": n_tok, "nll_per_token": conversation_nll}
    return _Heldout(text.nll_per_token, conversation_nll, {"general_text": held_text, "conversations": held_conv})


def _task_accuracy(cfg: SmallSeedConfig, model, tokenizer, trained_digests: set[str]) -> _Accuracy:
    """Per-family greedy accuracy on a dev-role sample at the dev (and the seed's own task) difficulty, and,
    when the seed trained on reworded examples, on the same dev-difficulty sample in the reworded words, and,
    when it trained on practice examples, on a practice sample of its own (kit.data.practice, never trained on)."""
    def per_family(sample: list[TaskExample], families: Sequence[str] = FAMILIES
                   ) -> tuple[dict[str, FamilyAccuracy], list[TaskAnswer]]:
        answers = task_answers(model, tokenizer, [task_record(e) for e in sample], cfg.sample_max_new_tokens,
                               batch_size=cfg.eval_batch)
        return {f: FamilyAccuracy.of([a for a in answers if a.family == f]) for f in families}, answers

    def dev_sample(difficulty: int, wording: str = "contract") -> list[TaskExample]:
        return generate_set({f: cfg.dev_sample_per_family for f in FAMILIES}, cfg.seed, DEV_SAMPLE_ROLE,
                            difficulty, trained_digests, wording=wording)

    accuracy_at, task_examples = {}, []
    for difficulty in sorted({cfg.dev_difficulty, cfg.task_difficulty}):
        sample = dev_sample(difficulty)
        accuracy_at[difficulty], answers = per_family(sample)
        task_examples += [{"difficulty": difficulty, "prompt": e.prompt, "expected": e.answer,
                           "reply": a.reply, "correct": a.correct}
                          for e, a in zip(sample[::cfg.dev_sample_per_family], answers[::cfg.dev_sample_per_family])]
    accuracy = accuracy_at[cfg.dev_difficulty]
    out = {"role": DEV_SAMPLE_ROLE, "difficulty": cfg.dev_difficulty, "per_family": _json(accuracy),
           "pooled": _pooled(accuracy), "at_difficulty": {str(d): _json(a) for d, a in accuracy_at.items()},
           "examples": task_examples, "note": "before any cohort; greedy, the checker of kit.data.tasks"}
    reworded = practice = None
    if cfg.reworded_tasks:  # the skill beside the words: the same problems, in the words the seed learned them in
        reworded, _ = per_family(dev_sample(cfg.dev_difficulty, "reworded"))
        out["reworded"] = {"wording": "reworded", "difficulty": cfg.dev_difficulty, "per_family": _json(reworded),
                           "pooled": _pooled(reworded)}
    if cfg.practice_tasks:  # the practice skill itself, on practice problems the seed never trained on
        sample = practice_set(cfg.dev_sample_per_family * len(PRACTICE_FAMILIES), cfg.seed, PRACTICE_SAMPLE_ROLE,
                              cfg.dev_difficulty, trained_digests)
        practice, answers = per_family(sample, PRACTICE_FAMILIES)
        out["practice"] = {"role": PRACTICE_SAMPLE_ROLE, "difficulty": cfg.dev_difficulty,
                           "per_family": _json(practice), "pooled": _pooled(practice),
                           "examples": [{"prompt": e.prompt, "expected": e.answer, "reply": a.reply,
                                         "correct": a.correct}
                                        for e, a in zip(sample[::cfg.dev_sample_per_family],
                                                        answers[::cfg.dev_sample_per_family])]}
    return _Accuracy(accuracy, reworded, practice, out)


def _pooled(accuracy: dict[str, FamilyAccuracy]) -> float:
    return sum(a.correct for a in accuracy.values()) / max(1, sum(a.n for a in accuracy.values()))


def _json(accuracy: dict[str, FamilyAccuracy]) -> dict:
    return {f: a.to_json() for f, a in accuracy.items()}


def _chat_samples(cfg: SmallSeedConfig, model, tokenizer) -> list[dict]:
    chats = []
    for prompt in CHAT_PROMPTS:
        r = greedy_answer(model, tokenizer, prompt, cfg.sample_max_new_tokens)
        chats.append({"prompt": prompt, "reply": r.text, "ended_at_turn_boundary": r.ended_at_turn_boundary})
    return chats


# --- the record ----------------------------------------------------------------------------------
def _data_record(cfg: SmallSeedConfig, inputs: _Inputs, packed: _Packed, alpaca: Path, trained: tuple[int, str],
                 staging: Path) -> dict:
    """seed_build.json's "data": every source with its provenance and counts, and what was trained."""
    tasks = inputs.tasks
    return {
        "general_text": {**general_text.provenance(), "documents_train": len(inputs.docs_train),
                         "documents_heldout": len(inputs.docs_held), "epochs": cfg.general_text_epochs,
                         "train_paths_digest": sha256_json([d.path for d in inputs.docs_train]),
                         "rows": packed.text_rows},
        "public_conversations": {"name": ALPACA_NAME, "file": str(alpaca), "sha256": ALPACA_SHA256,
                                 "licence": "CC BY-NC 4.0", "train_range": [0, cfg.alpaca_train_stop],
                                 "heldout_range": [cfg.alpaca_train_stop, cfg.alpaca_heldout_stop],
                                 "epochs": cfg.alpaca_epochs, "never_read": [cfg.alpaca_heldout_stop, 5000]},
        "retrieval": {"documents": packed.retrieval_documents, "rows": packed.retrieval_rows, "seed": cfg.seed,
                      "max_pairs": cfg.retrieval_max_pairs, "generator": "kit.data.retrieval"},
        "synthetic": {"count": len(inputs.synthetic), "seed": cfg.seed,
                      "digest": sha256_json([c.digest for c in inputs.synthetic])},
        "tasks": {"count": len(tasks), "role": SEED_TRAIN_ROLE, "seed": cfg.seed,
                  "difficulty": cfg.task_difficulty, "epochs": cfg.task_epochs,
                  "at_dev_difficulty": {"count": cfg.dev_difficulty_tasks, "difficulty": cfg.dev_difficulty,
                                        "epochs": 1},
                  "reworded": {"count": cfg.reworded_tasks, "role": REWORDED_ROLE, "difficulty": cfg.dev_difficulty,
                               "epochs": cfg.reworded_epochs, "wording": "reworded",
                               "twins_digest": sha256_json(sorted(t.digest for t in inputs.twins))},
                  "practice": {"count": cfg.practice_tasks, "role": PRACTICE_ROLE, "difficulty": cfg.dev_difficulty,
                               "epochs": cfg.practice_epochs, "generator": "kit.data.practice",
                               "per_family": {f: sum(t.family == f for t in tasks) for f in PRACTICE_FAMILIES}},
                  "per_family": {f: sum(t.family == f for t in tasks) for f in FAMILIES},
                  "digest": sha256_json(sorted(t.digest for t in tasks))},
        "skipped_over_seq_len": {"count": len(packed.skipped), "ids": packed.skipped[:20]},
        "trained_conversations": trained[0], "trained_conversations_sha256": trained[1],
        "rows": len(packed.rows), "tokens": packed.tokens, "target_tokens": packed.target_tokens,
        "tokenizer_sha256": sha256_file(staging / "tokenizer.json"),
        "order": f"numpy.random.default_rng({cfg.seed}): text epochs' document orders, then the conversation "
                 f"order, then the row order",
    }


def _disjointness_record(forbidden: dict[str, ForbiddenSet]) -> dict:
    return {"construction": f"tasks drawn under roles {SEED_TRAIN_ROLE!r} and {REWORDED_ROLE!r}, excluding every "
                            f"digest below; a reworded task is selected, and checked, by its contract-worded twin",
            "checked_against": {k: s.checked_against() for k, s in forbidden.items()},
            "overlaps": 0}


def _determinism(cfg: SmallSeedConfig, dev: torch.device) -> dict:
    return {
        "torch.use_deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "CUBLAS_WORKSPACE_CONFIG": os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
        "cudnn.deterministic": torch.backends.cudnn.deterministic, "cudnn.benchmark": torch.backends.cudnn.benchmark,
        "tf32": False if dev.type == "cuda" else None,
        "sdpa_backend": "FLASH_ATTENTION (training)" if dev.type == "cuda" else "default CPU kernels",
        "torch.compile": ("blocks, under torch.use_deterministic_algorithms (Inductor's deterministic mode: "
                          "no benchmarked kernel choices)" if cfg.compile_blocks == "auto" and dev.type == "cuda"
                          else "off"),
        "inductor_deterministic": _inductor_deterministic(), "compute": "bf16 autocast over FP32 master weights" if (
            dev.type == "cuda" and cfg.compute_dtype == "bfloat16") else "float32",
        "seeds": {"numpy PCG64 data order": cfg.seed, "torch.manual_seed": cfg.seed, "init_weights": cfg.seed},
        "promise": "the same parameter digest on the same GPU model and software (torch, CUDA), from a fresh machine",
    }


def _tokens_per_second(packed: _Packed, trained: _Trained) -> float:
    return round(packed.tokens / trained.train_seconds, 1)


def _mfu_executed(cfg: SmallSeedConfig, shape: LlamaShape, tokens: int, trained: _Trained,
                  dev: torch.device) -> float | None:
    """Executed FLOPs (kit/flops.py) per second of training over the bf16 datasheet peak (CUDA only)."""
    per_token = executed_flops_per_token(shape, cfg.seq_len)
    return round(per_token * tokens / trained.train_seconds / H200_BF16_PEAK_FLOPS, 4) if dev.type == "cuda" else None


def _throughput(cfg: SmallSeedConfig, shape: LlamaShape, mfu: float | None, trained: _Trained,
                dev: torch.device) -> dict:
    """The record's "throughput": `_mfu_executed` over the whole training and over its steady state."""
    per_token = executed_flops_per_token(shape, cfg.seq_len)
    cuda = dev.type == "cuda"
    steady = trained.steady
    return {"executed_flops_per_token": per_token,
            "mfu_executed": mfu,
            "peak_flops": H200_BF16_PEAK_FLOPS, "steady_state": steady and {
                **steady, "mfu_executed": round(per_token * steady["tokens_per_second"] / H200_BF16_PEAK_FLOPS, 4)
                if cuda else None},
            "note": "executed FLOPs (kit/flops.py) of the training updates over the train seconds, "
                    "learning-curve evaluations excluded, over the bf16 datasheet peak"}


def _record(cfg: SmallSeedConfig, shape: LlamaShape, vocab_size: int, parts: _Parts, throughput: dict,
            dev: torch.device, seconds: dict, profile: dict, digest: str) -> dict:
    """seed_build.json of the small seed: the common fields (kit.seed.record) and the small scale's own."""
    trained, packed = parts.trained, parts.packed
    return common_record(cfg, shape, vocab_size, trained.losses, cfg.learning_rate(packed.updates - 1, packed.updates),
                         profile, digest).to_json() | {
        "scale": "medium", "data": parts.data, "disjointness": _disjointness_record(parts.inputs.forbidden),
        "heldout": parts.heldout.record, "task_accuracy": parts.task_accuracy.record,
        "learning_curve": {"role": DEV_SAMPLE_ROLE + "-curve", "difficulty": cfg.curve_difficulty or cfg.dev_difficulty,
                           "per_family_n": cfg.curve_per_family, "points": trained.learning_curve,
                           "seconds": round(trained.curve_seconds, 2)},
        "throughput": throughput,
        "chat_samples": parts.chat_samples,
        "seconds": seconds,
        "tokens_per_second": _tokens_per_second(packed, trained),
        "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else platform.processor() or "cpu",
        "cuda_version": torch.version.cuda, "determinism": _determinism(cfg, dev),
    }


def build_small_seed(out: Path, cfg: SmallSeedConfig, device: str = "cuda", alpaca: Path = Path(ALPACA_FILE),
                     text: Path = Path(general_text.TEXT_FILE), contracts_dir: Path = Path("contracts"),
                     progress: bool = True) -> dict:
    """Train the small seed into `out` (a new directory). Returns the summary `kit seed build` prints."""
    t0 = time.perf_counter()
    out, dev = Path(out), torch.device(device)
    check_inputs(alpaca, text, contracts_dir, device)
    profile = numerics.apply(dev, deterministic_gpu=True)  # before any CUDA work: cuBLAS reads its workspace then
    show = progress_enabled(progress)
    with publish_dir(out) as staging:
        torch.manual_seed(cfg.seed)
        inputs = _read_inputs(cfg, alpaca, text, contracts_dir)
        t_data = time.perf_counter()
        tokenizer, ids = _train_tokenizer(cfg, inputs, staging)
        t_tok = time.perf_counter()
        with collection_paused():
            packed = _pack(cfg, tokenizer, ids[PAD_TOKEN], inputs)
        t_prep = time.perf_counter()

        shape = cfg.shape(len(tokenizer), ids[BOS_TOKEN], ids[EOS_TOKEN], ids[PAD_TOKEN])
        model = LlamaCausalLM(shape)
        init_weights(model, cfg.seed, cfg.init_std)
        model.to(dev)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        trained_digests = {t.digest for t in inputs.tasks + inputs.twins}
        curve_sample = generate_set({f: cfg.curve_per_family for f in FAMILIES}, cfg.seed, DEV_SAMPLE_ROLE + "-curve",
                                    cfg.curve_difficulty or cfg.dev_difficulty,
                                    trained_digests | inputs.excluded) if cfg.curve_every else []
        trained = _train(cfg, model, tokenizer, packed, dev, show, curve_sample)

        model.eval()
        heldout = _heldout(cfg, model, tokenizer, ids[PAD_TOKEN], inputs)
        accuracy = _task_accuracy(cfg, model, tokenizer, trained_digests)
        chat_samples = _chat_samples(cfg, model, tokenizer)
        model.cpu()
        conversations = [inputs.convs[i] for i in dict.fromkeys(packed.conv_order)]  # each once, in order of first use
        trained_sha256, digest = write_seed_files(staging, model, conversations)
        data = _data_record(cfg, inputs, packed, alpaca, (len(conversations), trained_sha256), staging)
        parts = _Parts(inputs, packed, trained, data, heldout, accuracy, chat_samples)
        seconds = {"inputs_and_tasks": round(t_data - t0, 2), "tokenizer": round(t_tok - t_data, 2),
                   "encode_and_pack": round(t_prep - t_tok, 2), "train": round(trained.train_seconds, 2),
                   "total": round(time.perf_counter() - t0, 2)}
        mfu = _mfu_executed(cfg, shape, packed.tokens, trained, dev)
        record = _record(cfg, shape, len(tokenizer), parts, _throughput(cfg, shape, mfu, trained, dev), dev, seconds,
                         profile, digest)
        write_record(staging, record)
    reworded, practice = accuracy.reworded, accuracy.practice
    return {"out": str(out), "scale": "medium", "parameter_digest": digest, "params": shape.param_count(),
            "vocab_size": len(tokenizer), "updates": packed.updates, "tokens": packed.tokens,
            "loss_initial": round(trained.losses[0], 4), "loss_final": round(final_loss(trained.losses), 4),
            "heldout_text_nll": heldout.text_nll, "heldout_conversation_nll": heldout.conversation_nll,
            "task_accuracy": {f: accuracy.per_family[f].accuracy for f in FAMILIES},
            "pooled_accuracy": _pooled(accuracy.per_family),
            "reworded_task_accuracy": {f: v.accuracy for f, v in reworded.items()} if reworded is not None else None,
            "reworded_pooled_accuracy": _pooled(reworded) if reworded is not None else None,
            "practice_accuracy": {f: v.accuracy for f, v in practice.items()} if practice is not None else None,
            "practice_pooled_accuracy": _pooled(practice) if practice is not None else None,
            "mfu_executed": mfu, "learning_curve": trained.learning_curve, "chat_samples": chat_samples,
            "seconds": seconds, "tokens_per_second": _tokens_per_second(packed, trained)}
