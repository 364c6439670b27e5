"""Chat encoding: a seed's own chat template, token ids and the assistant-target mask.

A target is an assistant-content token or an end-of-turn token closing an assistant turn, so the
model learns both what to answer and when to stop; everything else is context. The decision to
know: the mask is found for any Hugging Face chat template (ChatML is not assumed) by rendering
prefixes, and a template that is not prefix-stable is refused rather than guessed.
How the mask is found: the notes below.

Notes: what a target is, and how the mask is found.

Never a target: system and user text, role headers, the whitespace after an end-of-turn token, token 0 (nothing
precedes it). The mask: render the whole conversation once; for assistant message k render messages[:k] (with and
without the generation prompt) and messages[:k+1], each of which must be a prefix of the full text (else refused).
The target span runs from the content's start (after the generation prompt) to the end of message k's segment
without trailing whitespace: content plus end-of-turn text, not the newline after it. The text is tokenized once
with offsets (fast tokenizers only), and a token is a target when its span overlaps a target span: overlap, not
containment, so a token straddling the header/content boundary still carries content and is learned, not dropped.
"""

from __future__ import annotations

import functools
import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, overload

from kit.data.conversations import Conversation, Message

if TYPE_CHECKING:  # importing transformers' tokenizer classes also imports torch; only load_tokenizer needs them
    from transformers import PreTrainedTokenizerBase

OVERFLOW_POLICIES = ("reject", "truncate")


def load_tokenizer(seed_dir: str | os.PathLike) -> PreTrainedTokenizerBase:
    """Load the seed directory's tokenizer from local files; refuse one without a chat template."""
    seed_dir = Path(seed_dir)
    if not seed_dir.is_dir():
        raise ValueError(f"{seed_dir}: not a directory; expected a seed directory with tokenizer files")
    try:
        tokenizer = _tokenizer_class(seed_dir).from_pretrained(seed_dir, local_files_only=True)
    except Exception as e:  # transformers and tokenizers raise bare Exceptions with multi-line texts on bad files
        reason = "; ".join(line.strip() for line in str(e).splitlines() if line.strip()) or type(e).__name__
        raise ValueError(f"{seed_dir}: its tokenizer does not load ({reason}); expected the tokenizer.json and "
                         "tokenizer_config.json of a fast tokenizer, as save_pretrained writes them") from e
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(
            f"{seed_dir}: tokenizer has no chat template; expected 'chat_template' in tokenizer_config.json "
            "or a chat_template.jinja file"
        )
    if not tokenizer.is_fast:
        raise ValueError(f"{seed_dir}: tokenizer is not a fast tokenizer; assistant masks need offset mappings")
    return tokenizer


def _tokenizer_class(seed_dir: Path):
    """The class AutoTokenizer would resolve for this directory, taken directly when the config names the plain
    fast tokenizer (every seed the kit builds): AutoTokenizer first imports the model's configuration machinery,
    about a second of every process that loads a tokenizer (a kit command, each worker). Any other seed goes
    through AutoTokenizer, which knows its class."""
    try:
        named = json.loads((seed_dir / "tokenizer_config.json").read_text()).get("tokenizer_class")
    except (OSError, ValueError, AttributeError):
        named = None  # AutoTokenizer reports what is wrong with the files
    if named == "PreTrainedTokenizerFast":
        from transformers import PreTrainedTokenizerFast  # noqa: PLC0415 - optional: transformers imports torch; only tokenizer loading needs it

        return PreTrainedTokenizerFast
    from transformers import AutoTokenizer  # noqa: PLC0415 - optional: transformers imports torch; only tokenizer loading needs it

    return AutoTokenizer


@dataclass
class EncodeStats:
    """Counts of an encoding pass. `accepted` counts returned examples; `truncated` is a subset of it."""

    accepted: int = 0
    rejected_too_long: int = 0
    truncated: int = 0


@dataclass(frozen=True)
class EncodedExample:
    id: str
    input_ids: tuple[int, ...]
    target_mask: tuple[bool, ...]  # True: token i is a loss target (predicted from tokens < i)
    source: str
    conversation_digest: str
    truncated: bool = False

    def __post_init__(self):
        if len(self.input_ids) != len(self.target_mask):
            raise ValueError(
                f"example {self.id!r}: {len(self.input_ids)} input ids but {len(self.target_mask)} mask entries"
            )

    @property
    def num_tokens(self) -> int:
        return len(self.input_ids)

    @property
    def num_targets(self) -> int:
        return sum(self.target_mask)


def _as_dicts(messages: Iterable[Message | Mapping]) -> list[dict]:
    out = []
    for message in messages:
        if isinstance(message, Message):
            out.append({"role": message.role, "content": message.content})
        else:
            out.append({"role": message["role"], "content": message["content"]})
    return out


class ChatTemplateError(ValueError):
    """The seed's chat template fails on a conversation (it raises, renders without bound, is not prefix-stable
    or drops an assistant's content): a property of the tokenizer folder, not of the conversation's length."""


# What a template may add around the messages' contents (characters): ChatML adds about 30 per message, a
# system prompt with tool definitions a few thousand. A rendering is bounded by twice the contents (a template
# may repeat them once) plus this, checked while it is produced and again before anything is tokenized: a
# template of unbounded output is refused here instead of filling memory or aborting inside the tokenizer.
TEMPLATE_EXTRA_CHARS = 1 << 16
_LIMIT: ContextVar[int] = ContextVar("kit_chat_render_limit", default=TEMPLATE_EXTRA_CHARS)


class _TooLong(Exception):
    """A bounded rendering passed its limit (internal: `_render` turns it into a ChatTemplateError)."""


def render_limit(messages: list[dict]) -> int:
    """The most characters a rendering of `messages` may have (TEMPLATE_EXTRA_CHARS)."""
    return 2 * sum(len(m["content"]) for m in messages) + TEMPLATE_EXTRA_CHARS


def _bounded_binop(env):
    """The sandbox's binary operators, with `*` on a string or list and `**` on integers refused before they
    build a result longer than the rendering may be (`'x' * 10**10` would allocate it whole)."""
    from jinja2.sandbox import SandboxedEnvironment  # noqa: PLC0415 - optional: transformers' template engine

    def call_binop(context, operator, left, right):
        limit = _LIMIT.get()
        if operator == "*":
            for seq, n in ((left, right), (right, left)):
                if isinstance(seq, (str, list, tuple)) and isinstance(n, int) and len(seq) * n > limit:
                    raise _TooLong(f"'*' would build {len(seq) * n} items")
        if operator == "**" and isinstance(left, int) and isinstance(right, int) and abs(left) > 1 \
                and right * math.log2(abs(left)) > 4 * limit:
            raise _TooLong(f"{left} ** {right} has over {4 * limit} bits")
        return SandboxedEnvironment.call_binop(env, context, operator, left, right)
    return call_binop


@functools.lru_cache(maxsize=8)
def _bounded_template(source: str):
    """`source` compiled in an overlay of transformers' own chat-template environment (same sandbox, filters,
    globals, extensions) whose `*` and `**` are bounded; None when transformers' compiler is not reachable."""
    try:
        from transformers.utils.chat_template_utils import (  # noqa: PLC0415 - optional: transformers' template engine
            _compile_jinja_template,
        )

        # the environment of an empty template: compiling `source` there would fold its constants (`9 ** 10**8`)
        env = _compile_jinja_template("").environment.overlay()
        env.intercepted_binops = frozenset({"*", "**"})
        env.call_binop = _bounded_binop(env)
        return env.from_string(source)
    except Exception:  # noqa: BLE001 - a template that does not compile is refused by apply_chat_template itself
        return None


def _check_bounded(tokenizer: PreTrainedTokenizerBase, messages: list[dict], add_generation_prompt: bool,
                   limit: int) -> None:
    """Render in a stream, stopping with ChatTemplateError once more than `limit` characters have come out."""
    template = _bounded_template(tokenizer.chat_template) if isinstance(tokenizer.chat_template, str) else None
    if template is None:
        return
    token = _LIMIT.set(limit)
    total = 0
    try:
        for chunk in template.generate(messages=messages, tools=None, documents=None,
                                       add_generation_prompt=add_generation_prompt, **tokenizer.special_tokens_map):
            total += len(chunk)
            if total > limit:
                raise _TooLong(f"over {limit} came out")
    except _TooLong as e:
        raise _template_refused(tokenizer, e, f"a conversation whose contents have "
                                f"{sum(len(m['content']) for m in messages)} characters may render to {limit}") from None
    except Exception:  # noqa: BLE001 - every other failure is apply_chat_template's to report, below
        return
    finally:
        _LIMIT.reset(token)


def _render(tokenizer: PreTrainedTokenizerBase, messages: list[dict], add_generation_prompt: bool = False) -> str:
    if not messages and not add_generation_prompt:
        return ""  # templates may refuse an empty conversation; an empty prefix renders to nothing
    limit = render_limit(messages)
    _check_bounded(tokenizer, messages, add_generation_prompt, limit)
    try:
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)
    except (ArithmeticError, RecursionError, LookupError, TypeError) as e:  # OverflowError: range(10**9)
        raise _template_refused(tokenizer, e) from None
    except Exception as e:
        from jinja2 import (  # noqa: PLC0415 - optional: transformers' template engine
            TemplateError,  # SecurityError (the sandbox held) and the template's own raise_exception
        )

        if isinstance(e, TemplateError):
            raise _template_refused(tokenizer, e) from None
        raise
    if not isinstance(text, str):
        raise _template_refused(tokenizer, TypeError(f"it rendered a {type(text).__name__}"))
    if len(text) > limit:  # before any tokenizer sees it
        raise _template_refused(tokenizer, _TooLong(f"over {limit}"), f"its output has {len(text)} "
                                f"characters for a conversation whose contents have "
                                f"{sum(len(m['content']) for m in messages)}")
    return text


def _template_refused(tokenizer: PreTrainedTokenizerBase, e: Exception, what: str = "") -> ChatTemplateError:
    if isinstance(e, _TooLong):
        return ChatTemplateError(f"{tokenizer.name_or_path}: its chat template renders without bound ({what}; "
                                 f"{e}); expected at most twice the contents plus {TEMPLATE_EXTRA_CHARS} characters")
    reason = "; ".join(line.strip() for line in str(e).splitlines() if line.strip())[:200]
    return ChatTemplateError(f"{tokenizer.name_or_path}: its chat template does not render a conversation "
                             f"({type(e).__name__}: {reason}); expected a template that renders messages to text")


def assistant_target_spans(
    tokenizer: PreTrainedTokenizerBase, conversation: Conversation
) -> tuple[str, list[tuple[int, int]]]:
    """The rendered text and, per assistant message, the character span [start, end) of its targets."""
    messages = _as_dicts(conversation.messages)
    full = _render(tokenizer, messages)
    spans = []
    for k, message in enumerate(conversation.messages):
        if message.role != "assistant":
            continue
        before = _render(tokenizer, messages[:k])
        through = _render(tokenizer, messages[: k + 1])
        if not (through.startswith(before) and full.startswith(through)):
            raise ChatTemplateError(
                f"{tokenizer.name_or_path}: its chat template is not prefix-stable at message {k} of conversation "
                f"{conversation.id!r} (rendering a prefix of the conversation is not a prefix of the full "
                "rendering); assistant tokens cannot be located"
            )
        # Content starts after the generation prompt when the template has one that matches.
        header_end = len(before)
        if k > 0:
            prompt = _render(tokenizer, messages[:k], add_generation_prompt=True)
            if through.startswith(prompt):
                header_end = len(prompt)
        content_start = -1
        # Some templates trim message content; look for the exact content first, then the trimmed one.
        for candidate in (message.content, message.content.strip()):
            content_start = through.find(candidate, header_end)
            if content_start >= 0:
                content_end = content_start + len(candidate)
                break
        if content_start < 0:
            raise ChatTemplateError(
                f"{tokenizer.name_or_path}: its chat template drops the content of assistant message {k} of "
                f"conversation {conversation.id!r} (not found in its rendered turn); expected the content verbatim"
            )
        # End-of-turn text (e.g. "<|im_end|>") is a target; the whitespace after it is not.
        target_end = content_end + len(through[content_end:].rstrip())
        spans.append((content_start, target_end))
    return full, spans


def encode_conversation(
    tokenizer: PreTrainedTokenizerBase,
    conversation: Conversation,
    max_tokens: int,
    overflow: str = "reject",
    stats: EncodeStats | None = None,
) -> EncodedExample | None:
    """Token ids and target mask of `conversation`, or None when it is too long and rejected.

    overflow="reject": more than `max_tokens` tokens -> None, counted in `stats.rejected_too_long`.
    overflow="truncate": keep the first `max_tokens` tokens and their mask entries (counted in
    `stats.truncated`); if no target survives the cut, the example is rejected as too long.
    """
    if overflow not in OVERFLOW_POLICIES:
        raise ValueError(f"overflow={overflow!r}: expected one of {OVERFLOW_POLICIES}")
    if not isinstance(max_tokens, int) or max_tokens < 2:
        raise ValueError(f"max_tokens={max_tokens!r}: expected an int >= 2")
    if not tokenizer.is_fast:
        raise ValueError(f"{type(tokenizer).__name__}: assistant masks need a fast tokenizer (offset mappings)")
    stats = stats if stats is not None else EncodeStats()
    text, spans = assistant_target_spans(tokenizer, conversation)
    encoding = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    input_ids = list(encoding.input_ids)
    mask = [
        end > start and any(start < span_end and end > span_start for span_start, span_end in spans)
        for start, end in encoding.offset_mapping
    ]
    if mask:
        mask[0] = False  # position 0 has no context to predict it from
    if not any(mask):
        raise ValueError(f"conversation {conversation.id!r}: no assistant token to learn after encoding")

    truncated = False
    if len(input_ids) > max_tokens:
        if overflow == "reject" or not any(mask[:max_tokens]):
            stats.rejected_too_long += 1
            return None
        input_ids, mask, truncated = input_ids[:max_tokens], mask[:max_tokens], True
        stats.truncated += 1
    stats.accepted += 1
    return EncodedExample(
        id=conversation.id,
        input_ids=tuple(int(i) for i in input_ids),
        target_mask=tuple(bool(m) for m in mask),
        source=conversation.source,
        conversation_digest=conversation.digest,
        truncated=truncated,
    )


@overload
def encode_or_refuse(tokenizer: PreTrainedTokenizerBase, conversation: Conversation, max_tokens: int,
                     refuse: type[Exception], what: str = "record") -> EncodedExample: ...


@overload
def encode_or_refuse(tokenizer: PreTrainedTokenizerBase, conversation: Conversation, max_tokens: int,
                     refuse: None = None, what: str = "record") -> EncodedExample | None: ...


def encode_or_refuse(
    tokenizer: PreTrainedTokenizerBase,
    conversation: Conversation,
    max_tokens: int,
    refuse: type[Exception] | None = None,
    what: str = "record",
) -> EncodedExample | None:
    """The contracts' "reject" policy in one place: the encoded conversation when it fits `max_tokens`;
    otherwise `refuse(f"{what} {id!r} exceeds max_tokens={max_tokens}")` is raised, or, without
    `refuse`, None (a caller that skips or counts over-long records)."""
    example = encode_conversation(tokenizer, conversation, max_tokens, overflow="reject")
    if example is None and refuse is not None:
        raise refuse(f"{what} {conversation.id!r} exceeds max_tokens={max_tokens}")
    return example


def encode_many(
    tokenizer: PreTrainedTokenizerBase,
    conversations: Iterable[Conversation],
    max_tokens: int,
    overflow: str = "reject",
) -> tuple[list[EncodedExample], EncodeStats]:
    """Encode every conversation in order; rejected ones are counted in the stats, not returned."""
    stats = EncodeStats()
    examples = []
    for conversation in conversations:
        example = encode_conversation(tokenizer, conversation, max_tokens, overflow, stats)
        if example is not None:
            examples.append(example)
    return examples, stats


def generation_prompt_ids(tokenizer: PreTrainedTokenizerBase, messages: Sequence[Message | Mapping]) -> list[int]:
    """Token ids of `messages` followed by the template's generation prompt (for greedy answers)."""
    if not messages:
        raise ValueError("generation_prompt_ids: expected at least one message")
    text = _render(tokenizer, _as_dicts(messages), add_generation_prompt=True)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def _ids_and_offsets(tokenizer: PreTrainedTokenizerBase, texts: list[str]) -> list[tuple[list, list]]:
    """(ids, offsets) of every text, without special tokens. Why the backend (the `tokenizers` object that
    a fast tokenizer wraps; masks need a fast tokenizer anyway) directly: for a few hundred thousand texts,
    converting its encodings into a BatchEncoding costs about as much as the tokenization itself. The ids
    and offsets are the same ones; `encode_single_turns` checks its first conversations against the slow
    path either way. Only while the backend is in the state the tokenizer's call would put it in (no
    truncation, no padding, special tokens matched as such); otherwise the call, which sets that state."""
    backend = tokenizer.backend_tokenizer
    if backend.truncation is not None or backend.padding is not None or backend.encode_special_tokens:
        enc = tokenizer(texts, add_special_tokens=False, return_offsets_mapping=True)
        return list(zip(enc.input_ids, enc.offset_mapping))
    return [(e.ids, e.offsets) for e in backend.encode_batch(texts, add_special_tokens=False)]


def encode_single_turns(tokenizer: PreTrainedTokenizerBase, conversations: Sequence[Conversation],
                        max_tokens: int, check: int = 64) -> list[EncodedExample | None]:
    """`encode_or_refuse` (None when over `max_tokens`) for many one-user-one-assistant conversations at once.

    Why: `encode_conversation` renders the template four times per conversation, which dominates a
    build of a few hundred thousand generated conversations. A single turn renders as fixed template
    text around the two contents, so the template is rendered once around two sentinels, every text is
    assembled from those pieces and tokenized in one batch. The first `check` conversations are also
    encoded the slow way and must agree exactly; otherwise (a template that depends on the contents)
    every conversation takes the slow way."""
    for c in conversations:
        if [m.role for m in c.messages] != ["user", "assistant"]:
            raise ValueError(f"conversation {c.id!r}: encode_single_turns takes one user and one assistant message")
    user, reply = "\ue000", "\ue001"
    probe = _render(tokenizer, [{"role": "user", "content": user}, {"role": "assistant", "content": reply}])
    slow = [encode_or_refuse(tokenizer, c, max_tokens) for c in conversations[:check]]
    if probe.count(user) == 1 and probe.count(reply) == 1 and probe.index(user) < probe.index(reply):
        head, rest = probe.split(user)
        middle, tail = rest.split(reply)
        texts = [head + c.messages[0].content + middle + c.messages[1].content + tail for c in conversations]
        starts = [len(head) + len(c.messages[0].content) + len(middle) for c in conversations]
        fast: list[EncodedExample | None] = []
        for c, text, start, (ids, offsets) in zip(conversations, texts, starts, _ids_and_offsets(tokenizer, texts)):
            end = len(text.rstrip())  # end-of-turn text is a target, the whitespace after it is not
            mask = [e > s and s < end and e > start for s, e in offsets]
            if mask:
                mask[0] = False
            if len(ids) > max_tokens or not any(mask):
                fast.append(None)
                continue
            fast.append(EncodedExample(id=c.id, input_ids=tuple(ids),  # Python ints already
                                       target_mask=tuple(mask), source=c.source,
                                       conversation_digest=c.digest, truncated=False))
        if fast[:check] == slow:
            return fast
    return slow + [encode_or_refuse(tokenizer, c, max_tokens) for c in conversations[check:]]
