"""The tiny seed: a ~1.75M-parameter Llama and its tokenizer, trained on one CPU core in about 1.5 minutes.

The embedded default needs a seed that is small, built locally and still plausible: it speaks ChatML,
stops at the end of its turn and has seen task-style conversations. `build_seed` writes an ordinary
Hugging Face directory (docs/formats/seed-directory.md, "Seed directory"), so every later step treats it like a real
seed. The decision to know: it is trained by the kit's own engine under the numeric profile, so the
same config gives the same parameter digest on any x86 CPU with the pinned torch build.
Data, training and determinism: the notes below.

Notes: the data and the training.

Files: docs/formats/seed-directory.md (`trained_conversations.jsonl`: update k used lines [k*B, (k+1)*B)).
Data: synthetic chat (kit/data/conversations.py) plus a `task_share` of role "seed-train" tasks, each line with its
"digest", so later roles exclude them by content. One pass, no repeats: a default_rng(seed) permutation, each
update's batch then sorted by token length. Training runs through kit.engine.worker.build_worker, so the seed is
made by the same code path as every later update; linear warm-up, then cosine decay.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

import numpy as np
import torch

from kit import numerics
from kit.data.chat import encode_or_refuse, generation_prompt_ids, load_tokenizer
from kit.data.conversations import (
    Conversation,
    Message,
    conversation_from_json,
    read_jsonl,
    synthetic_conversations,
)
from kit.data.tasks import FAMILIES, TaskExample, check_answer, generate_set
from kit.data.tokenizer_build import BOS_TOKEN, EOS_TOKEN, PAD_TOKEN, build_tokenizer
from kit.digest import load_json_strict, sha256_file, sha256_json
from kit.distributed.pipeline import EngineConfig
from kit.inventory import parameter_digest
from kit.model.config import LlamaShape, RopeSpec, load_config
from kit.model.generate import greedy_generate
from kit.model.llama import LlamaCausalLM, init_weights
from kit.model.shard import load_owned
from kit.publish import publish_dir
from kit.record import Record, Seq, spec_field
from kit.seed.loop import progress_enabled, train_updates, warmup_cosine
from kit.seed.record import (  # noqa: F401  - re-exported: a seed directory's file names, where notebooks look
    SEED_BUILD_FILE,
    TRAINED_CONVERSATIONS_FILE,
    WEIGHTS_FILE,
    common_record,
    final_loss,
    read_build_summary,
    write_record,
    write_seed_files,
)
from kit.store.start import start_from_seed
from kit.train.batch import TrainRecord
from kit.train.optim import GroupConfig

if TYPE_CHECKING:  # the tokenizer class, for annotations only (kit.data.chat loads it)
    from transformers import PreTrainedTokenizerBase

SEED_TRAIN_ROLE = "seed-train"  # task conversations the seed was trained on
SEED_SAMPLE_ROLE = "seed-sample"  # the per-family sample questions shown after the build
SAMPLE_CHAT_PROMPT = "What colour is the sky?"  # a training-style prompt (kit.data.conversations)


@dataclass(frozen=True)
class SeedBuildConfig:
    # model; the model's vocabulary is the trained tokenizer's size (at most `vocab_size`: BPE
    # stops early once every pair in the small corpus is merged)
    vocab_size: int = 1024
    hidden_size: int = 192
    intermediate_size: int = 512
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 512
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5
    init_std: float = 0.02
    # data: updates * batch_size conversations, each trained once
    updates: int = 300
    batch_size: int = 32
    task_share: float = 0.2
    task_difficulty: int = 1
    max_tokens: int = 256  # longer conversations are refused, never truncated
    # optimisation
    lr: float = 3e-3
    min_lr_ratio: float = 0.1
    warmup_updates: int = 20
    beta1: float = 0.9
    beta2: float = 0.95
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    microbatch_size: int = 8  # batches are length-sorted, so small microbatches pad little
    # reproducibility and reporting
    seed: int = 0
    sample_max_new_tokens: int = 48

    @staticmethod
    def tiny() -> SeedBuildConfig:
        """The embedded default's seed: ~1.75M parameters, ~1.5 min on one CPU core."""
        return SeedBuildConfig()

    @staticmethod
    def test() -> SeedBuildConfig:
        """The same code path in a few seconds, for unit tests."""
        return SeedBuildConfig(vocab_size=512, hidden_size=64, intermediate_size=176, num_hidden_layers=2,
                               updates=150, batch_size=16, lr=5e-3, warmup_updates=10,
                               sample_max_new_tokens=24)

    def __post_init__(self):
        ints = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "max_position_embeddings", "updates", "batch_size", "max_tokens",
                "microbatch_size", "sample_max_new_tokens")
        for name in ints:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"SeedBuildConfig.{name} = {value!r}; expected a positive int")
        if self.hidden_size % self.num_attention_heads or (self.hidden_size // self.num_attention_heads) % 2:
            raise ValueError(f"SeedBuildConfig.hidden_size = {self.hidden_size}; expected a multiple of "
                             f"num_attention_heads = {self.num_attention_heads} with an even head dimension")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(f"SeedBuildConfig.num_key_value_heads = {self.num_key_value_heads}; expected a "
                             f"divisor of num_attention_heads = {self.num_attention_heads}")
        if self.max_tokens > self.max_position_embeddings:
            raise ValueError(f"SeedBuildConfig.max_tokens = {self.max_tokens}; expected <= "
                             f"max_position_embeddings = {self.max_position_embeddings}")
        if not 0.0 <= self.task_share < 1.0:
            raise ValueError(f"SeedBuildConfig.task_share = {self.task_share}; expected 0 <= share < 1")
        if not (self.lr > 0 and 0 <= self.min_lr_ratio <= 1 and 0 <= self.warmup_updates < self.updates):
            raise ValueError(f"SeedBuildConfig: lr = {self.lr}, min_lr_ratio = {self.min_lr_ratio}, "
                             f"warmup_updates = {self.warmup_updates}; expected lr > 0, ratio in [0, 1] "
                             f"and warmup_updates < updates = {self.updates}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"SeedBuildConfig.seed = {self.seed!r}; expected a non-negative int")

    def learning_rate(self, update: int) -> float:
        """Linear warm-up over `warmup_updates`, then cosine decay to `min_lr_ratio * lr` (0-based update)."""
        return warmup_cosine(update, self.updates, self.lr, self.min_lr_ratio, self.warmup_updates)

    def shape(self, vocab_size: int, bos_id: int, eos_id: int, pad_id: int) -> LlamaShape:
        return seed_shape(self, vocab_size, bos_id, eos_id, pad_id)


def seed_shape(cfg, vocab_size: int, bos_id: int, eos_id: int, pad_id: int) -> LlamaShape:
    """The Llama shape of a seed config (either scale's): tied embeddings, default RoPE, FP32 weights."""
    return LlamaShape(
        vocab_size=vocab_size, hidden_size=cfg.hidden_size, intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_hidden_layers, num_attention_heads=cfg.num_attention_heads,
        num_key_value_heads=cfg.num_key_value_heads, head_dim=cfg.hidden_size // cfg.num_attention_heads,
        rms_norm_eps=cfg.rms_norm_eps, max_position_embeddings=cfg.max_position_embeddings,
        tie_word_embeddings=True, rope=RopeSpec("default", cfg.rope_theta),
        bos_token_id=bos_id, eos_token_id=eos_id, pad_token_id=pad_id, torch_dtype="float32",
    )


# --- data --------------------------------------------------------------------------------------
def task_conversation(example: TaskExample) -> Conversation:
    return conversation_from_json(example.to_conversation(), f"task example {example.id}", "task")


def training_conversations(cfg: SeedBuildConfig) -> tuple[list[Conversation], dict]:
    """The conversations of the build in training order, and a summary of what went in."""
    total = cfg.updates * cfg.batch_size
    n_task = round(cfg.task_share * total)
    synthetic = synthetic_conversations(total - n_task, cfg.seed)
    tasks = generate_set(n_task, cfg.seed, SEED_TRAIN_ROLE, cfg.task_difficulty)
    pool = synthetic + [task_conversation(t) for t in tasks]
    order = np.random.default_rng(cfg.seed).permutation(len(pool))
    summary = {
        "synthetic": {"count": len(synthetic), "seed": cfg.seed,
                      "digest": sha256_json([c.digest for c in synthetic])},
        "tasks": {"count": len(tasks), "role": SEED_TRAIN_ROLE, "seed": cfg.seed, "difficulty": cfg.task_difficulty,
                  "per_family": {f: sum(t.family == f for t in tasks) for f in FAMILIES},
                  "digest": sha256_json(sorted(t.digest for t in tasks))},
        "order": f"numpy.random.default_rng({cfg.seed}).permutation({len(pool)}) of synthetic + tasks, "
                 f"then each batch of {cfg.batch_size} sorted by token length",
    }
    return [pool[int(i)] for i in order], summary


def length_sorted_batches(lengths: list[int], batch_size: int) -> list[int]:
    """Indices in training order: consecutive batches of `batch_size`, each sorted by length (stable).

    An update's loss is a sum over its documents, so the order inside a batch changes nothing but
    padding: sorted, each microbatch holds documents of similar length and pads little.
    """
    order = []
    for start in range(0, len(lengths), batch_size):
        order += sorted(range(start, min(start + batch_size, len(lengths))), key=lambda i: (lengths[i], i))
    return order


# --- the build ---------------------------------------------------------------------------------
@dataclass
class _Encoded:
    """The build's training data, tokenized and in training order (each batch length-sorted)."""
    tokenizer: PreTrainedTokenizerBase
    shape: LlamaShape
    conversations: list[Conversation]
    records: list[TrainRecord]
    tokens: int
    target_tokens: int


def _tokenize(cfg: SeedBuildConfig, conversations: list[Conversation], staging: Path) -> _Encoded:
    """Train the tokenizer on the conversations into `staging`, encode them (refusing any over
    max_tokens) and sort each batch by length."""
    build_tokenizer([m.content for c in conversations for m in c.messages], cfg.vocab_size, staging,
                    model_max_length=cfg.max_position_embeddings)
    tokenizer = load_tokenizer(staging)
    fitting = [encode_or_refuse(tokenizer, c, cfg.max_tokens) for c in conversations]
    too_long = sum(e is None for e in fitting)
    if too_long:
        raise ValueError(f"seed build: {too_long} conversations exceed max_tokens = "
                         f"{cfg.max_tokens}; raise max_tokens (up to max_position_embeddings)")
    encoded = [e for e in fitting if e is not None]  # every one, past the check above
    # one token (a str) converts to one id
    ids = {t: cast(int, tokenizer.convert_tokens_to_ids(t)) for t in (BOS_TOKEN, EOS_TOKEN, PAD_TOKEN)}
    shape = cfg.shape(len(tokenizer), ids[BOS_TOKEN], ids[EOS_TOKEN], ids[PAD_TOKEN])
    order = length_sorted_batches([e.num_tokens for e in encoded], cfg.batch_size)
    conversations, encoded = [conversations[i] for i in order], [encoded[i] for i in order]
    return _Encoded(tokenizer, shape, conversations, [TrainRecord(e.id, e.input_ids, e.target_mask) for e in encoded],
                    sum(e.num_tokens for e in encoded), sum(e.num_targets for e in encoded))


def _train(cfg: SeedBuildConfig, model: LlamaCausalLM, records: list[TrainRecord], show: bool) -> list[float]:
    assert model.shape.pad_token_id is not None, "the seed's tokenizer has a pad token (_tokenize)"
    return train_updates(model, records, torch.device("cpu"),
                         EngineConfig(microbatch_size=cfg.microbatch_size, max_grad_norm=cfg.max_grad_norm,
                                      pad_id=model.shape.pad_token_id),
                         GroupConfig(cfg.lr, cfg.beta1, cfg.beta2, 1e-8, cfg.weight_decay), cfg.learning_rate,
                         cfg.batch_size, cfg.updates, "seed build", show).losses


@dataclass(frozen=True, slots=True, kw_only=True)
class GreedyReply(Record):
    """The seed's greedy reply to one user turn."""

    ids: tuple[int, ...] = spec_field(Seq(int), doc="the generated token ids, the end of turn included")
    text: str = spec_field(str, doc="their text, without the end-of-turn token")
    ended_at_turn_boundary: bool = spec_field(bool, doc="generation stopped at an end of turn")


def greedy_answer(model: LlamaCausalLM, tokenizer, prompt: str, max_new_tokens: int) -> GreedyReply:
    """The seed's greedy reply to one user turn."""
    eos_id = model.shape.eos_token_id  # one id, or a list of them in some configs
    eos_ids = {eos_id} if isinstance(eos_id, int) else set(eos_id or ())
    ids = greedy_generate(model, generation_prompt_ids(tokenizer, [Message("user", prompt)]), max_new_tokens, eos_ids)
    ended = bool(ids) and ids[-1] in eos_ids
    text = tokenizer.decode(ids[:-1] if ended else ids, skip_special_tokens=False)
    return GreedyReply(ids=tuple(ids), text=text, ended_at_turn_boundary=ended)


def greedy_reply(model: LlamaCausalLM, tokenizer, prompt: str, max_new_tokens: int) -> dict:
    """`greedy_answer` as JSON, {"ids", "text", "ended_at_turn_boundary"} (notebook 00 reads it)."""
    return greedy_answer(model, tokenizer, prompt, max_new_tokens).to_json()


def _task_samples(cfg: SeedBuildConfig, model: LlamaCausalLM, tokenizer, trained_digests: set[str]) -> dict:
    samples = {}
    for family in FAMILIES:
        (example,) = generate_set({family: 1}, cfg.seed, SEED_SAMPLE_ROLE, cfg.task_difficulty,
                                  exclude_digests=trained_digests)
        reply = greedy_answer(model, tokenizer, example.prompt, cfg.sample_max_new_tokens)
        samples[family] = {"prompt": example.prompt, "expected": example.answer, "reply": reply.text,
                           "correct": check_answer(example, reply.text),
                           "ended_at_turn_boundary": reply.ended_at_turn_boundary}
    return samples


def _record(cfg: SeedBuildConfig, data: _Encoded, data_summary: dict, staging: Path, losses: list[float],
            trained_sha256: str, seconds: tuple[float, float], profile: dict, digest: str) -> dict:
    """seed_build.json of the tiny seed: the common fields, the data, the seconds and the thread count."""
    train_seconds, total_seconds = seconds
    common = common_record(cfg, data.shape, len(data.tokenizer), losses, cfg.learning_rate(cfg.updates - 1),
                           profile, digest)
    return common.to_json() | {
        "data": {**data_summary, "trained_conversations": len(data.conversations),
                 "trained_conversations_sha256": trained_sha256, "tokens": data.tokens,
                 "target_tokens": data.target_tokens, "tokenizer_sha256": sha256_file(staging / "tokenizer.json")},
        "train_seconds": round(train_seconds, 2),
        "seconds": round(total_seconds, 2),
        "threads": common.numeric_profile.intra_op_threads,
    }


def build_seed(out: Path, cfg: SeedBuildConfig, progress: bool = True) -> dict:
    """Train the seed and write its Hugging Face directory at `out` (which must not hold anything).

    Returns the build summary (also printed by `kit seed build`): out, parameter_digest, params,
    seconds, losses, counts, and `samples`: one task question per family with the expected answer
    and the seed's greedy reply, plus `chat_sample`, the reply to a training-style chat prompt.
    """
    t0 = time.perf_counter()
    out = Path(out)
    profile = numerics.apply()  # one thread, CPU-independent kernels: the digest is the same on any x86 CPU
    with publish_dir(out) as staging:
        torch.manual_seed(cfg.seed)
        conversations, data_summary = training_conversations(cfg)
        data = _tokenize(cfg, conversations, staging)
        model = LlamaCausalLM(data.shape)
        init_weights(model, cfg.seed, cfg.init_std)
        t_train = time.perf_counter()
        losses = _train(cfg, model, data.records, progress_enabled(progress))
        train_seconds = time.perf_counter() - t_train

        trained_sha256, digest = write_seed_files(staging, model, data.conversations)
        trained_digests = {c.meta["digest"] for c in data.conversations if "digest" in c.meta}
        samples = _task_samples(cfg, model, data.tokenizer, trained_digests)
        chat = greedy_answer(model, data.tokenizer, SAMPLE_CHAT_PROMPT, cfg.sample_max_new_tokens)
        chat_sample = {"prompt": SAMPLE_CHAT_PROMPT, "reply": chat.text,
                       "ended_at_turn_boundary": chat.ended_at_turn_boundary}
        seconds = time.perf_counter() - t0
        record = _record(cfg, data, data_summary, staging, losses, trained_sha256, (train_seconds, seconds), profile,
                         digest)
        write_record(staging, record)
    return {"out": str(out), "parameter_digest": digest, "params": data.shape.param_count(),
            "vocab_size": len(data.tokenizer), "trained_conversations": len(data.conversations), "updates": cfg.updates,
            "loss_initial": round(losses[0], 4), "loss_final": round(final_loss(losses), 4),
            "seconds": round(seconds, 2), "samples": samples, "chat_sample": chat_sample}


# --- inspection --------------------------------------------------------------------------------
def load_seed_model(seed_dir: Path) -> LlamaCausalLM:
    """The full model of a seed directory, through the kit's own loader (FP32)."""
    model = LlamaCausalLM(start_from_seed(seed_dir).shape)  # tensors checked against the config first
    load_owned(model, seed_dir)
    return model.eval()


def describe_seed(seed_dir: Path) -> str:
    """Human-readable summary: digest, shape, tokenizer, trained conversations, one greedy reply."""
    seed_dir = Path(seed_dir)
    shape = load_config(seed_dir)
    tokenizer = load_tokenizer(seed_dir)
    lines = [f"seed {seed_dir}", f"parameter digest: {parameter_digest(seed_dir)}"]
    kv = f" ({shape.num_key_value_heads} key/value)" if shape.num_key_value_heads != shape.num_attention_heads else ""
    lines.append(
        f"shape: {shape.num_hidden_layers} layers, hidden {shape.hidden_size}, {shape.num_attention_heads} heads"
        f"{kv}, head_dim {shape.head_dim}, intermediate {shape.intermediate_size}, vocab {shape.vocab_size}, "
        f"{'tied' if shape.tie_word_embeddings else 'untied'} embeddings, {shape.param_count():,} parameters"
    )
    lines.append(f"tokenizer: {len(tokenizer)} tokens, eos {tokenizer.eos_token!r}, chat template present")
    trained = seed_dir / TRAINED_CONVERSATIONS_FILE
    lines.append(f"trained conversations: {len(read_jsonl(trained)):,}" if trained.exists()
                 else f"trained conversations: not recorded (no {TRAINED_CONVERSATIONS_FILE})")
    build = seed_dir / SEED_BUILD_FILE
    if build.exists():
        info = read_build_summary(load_json_strict(build), str(build))
        # the small seed (kit/seed/small.py) trains on a GPU: its record names the device and times each phase
        where = f"{info.threads} thread(s)" if info.threads is not None else info.device or "?"
        lines.append(f"built by kit {info.kit_version} (torch {info.torch_version}, {where}): "
                     f"{info.updates} updates, loss {info.loss_initial:.3f} -> {info.loss_final:.3f}, "
                     f"{info.total_seconds:.1f} s")
    reply = greedy_answer(load_seed_model(seed_dir), tokenizer, SAMPLE_CHAT_PROMPT, 48)
    end = "ended at end of turn" if reply.ended_at_turn_boundary else "no end of turn within 48 tokens"
    lines.append(f"greedy reply to {SAMPLE_CHAT_PROMPT!r}: {reply.text!r} ({end})")
    return "\n".join(lines)
