"""Conversation records: the JSONL format, a pinned public instruction source and synthetic chat.

Every conversation the kit trains or evaluates on is a `Conversation` (id, messages, source label,
metadata), from `read_jsonl`, from a pinned Alpaca-format source (`load_instruction_source`,
`instruction_source_range`) or from `synthetic_conversations`. The decision to know: readers refuse
anything a trainer could silently mis-learn from, naming the file and line, and a pinned file is
hash-checked before a byte is parsed. `normalize_text` is the one normalisation for exclusions.
Details: the notes below.

Notes: the record shapes.

A line is `{"id", "messages": [{"role", "content"}, ...], ...}`; an Alpaca record `{"instruction", "input",
"output"}` becomes one user/assistant pair. Synthetic chat (greetings, short facts, echo, counting) is sized for a
few-million-parameter model and labelled `source="synthetic"`.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kit.digest import (
    DigestMismatch,
    canonical_json,
    loads_strict,
    sha256_bytes,
    sha256_json,
    write_bytes_atomic,
)
from kit.record import ContractError, Record, spec_field

ROLES = ("system", "user", "assistant")
RECORD_KEYS = ("id", "messages", "source")  # reserved top-level keys; everything else is meta
INSTRUCTION_KEYS = ("instruction", "input", "output")
SYNTHETIC_SOURCE = "synthetic"


class RecordError(ValueError):
    """A conversation record or source file is not what a trainer may learn from; names file and record."""


@dataclass(frozen=True)
class Message:
    role: str
    content: str

    def to_json(self) -> dict:
        return {"role": self.role, "content": self.content}


@dataclass(frozen=True)
class Conversation:
    """One conversation; `meta` holds JSON-serialisable extra fields (e.g. "family")."""

    id: str
    messages: tuple[Message, ...]
    source: str
    meta: dict = field(default_factory=dict)

    def __post_init__(self):
        if not isinstance(self.id, str) or not self.id:
            raise RecordError(f"conversation id must be a non-empty string, got {self.id!r}")
        # Freeze what callers pass as lists/dicts so the record cannot change after validation.
        object.__setattr__(self, "messages", tuple(self.messages))
        object.__setattr__(self, "meta", dict(self.meta))
        check_messages(self.messages, f"conversation {self.id!r}")
        clash = sorted(set(self.meta) & set(RECORD_KEYS))
        if clash:
            raise RecordError(f"conversation {self.id!r}: meta keys {clash} are reserved record fields")

    def to_json(self) -> dict:
        return {
            **self.meta,
            "id": self.id,
            "messages": [m.to_json() for m in self.messages],
            "source": self.source,
        }

    @property
    def digest(self) -> str:
        """sha256 of the canonical JSON of the messages: identity of the content, not of the id."""
        return sha256_json([m.to_json() for m in self.messages])

    @property
    def prompt(self) -> str:
        """Content of the first user message (what exclusion matching compares)."""
        return next((m.content for m in self.messages if m.role == "user"), "")


def check_messages(messages: Sequence[Message], where: str) -> None:
    """Refuse a message list a trainer could not learn an assistant reply from; `where` prefixes errors."""
    if not messages:
        raise RecordError(f"{where}: no messages")
    for index, message in enumerate(messages):
        if not isinstance(message, Message):
            raise RecordError(f"{where}: message {index} is {type(message).__name__}, expected Message")
        if message.role not in ROLES:
            raise RecordError(f"{where}: message {index} has role {message.role!r}, expected one of {ROLES}")
        if not isinstance(message.content, str):
            raise RecordError(f"{where}: message {index} content must be a string")
        if message.role == "assistant" and not message.content.strip():
            raise RecordError(f"{where}: message {index} is an empty assistant turn")
    if not any(m.role == "assistant" for m in messages):
        raise RecordError(f"{where}: no assistant turn (nothing to learn)")
    if messages[-1].role != "assistant":
        raise RecordError(f"{where}: conversation ends with a {messages[-1].role!r} turn, expected 'assistant'")


def _parse_messages(raw: Any, where: str) -> tuple[Message, ...]:
    if not isinstance(raw, list) or not raw:
        raise RecordError(f"{where}: 'messages' must be a non-empty list of {{'role', 'content'}} objects")
    messages = []
    for index, item in enumerate(raw):
        if not isinstance(item, dict) or set(item) != {"role", "content"}:
            keys = sorted(item) if isinstance(item, dict) else type(item).__name__
            raise RecordError(f"{where}: message {index} must be an object with keys 'role' and 'content', got {keys}")
        if not isinstance(item["role"], str) or not isinstance(item["content"], str):
            raise RecordError(f"{where}: message {index} 'role' and 'content' must be strings")
        messages.append(Message(item["role"], item["content"]))
    return tuple(messages)


def conversation_from_json(obj: Any, where: str, default_source: str) -> Conversation:
    """Validate one record; extra keys go to `meta`, a missing "source" becomes `default_source`."""
    if not isinstance(obj, dict):
        raise RecordError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    for key in ("id", "messages"):
        if key not in obj:
            raise RecordError(f"{where}: missing required key {key!r}")
    if not isinstance(obj["id"], str) or not obj["id"]:
        raise RecordError(f"{where}: 'id' must be a non-empty string, got {obj['id']!r}")
    source = obj.get("source", default_source)
    if not isinstance(source, str) or not source:
        raise RecordError(f"{where}: 'source' must be a non-empty string, got {source!r}")
    messages = _parse_messages(obj["messages"], where)
    check_messages(messages, where)
    meta = {k: v for k, v in obj.items() if k not in RECORD_KEYS}
    return Conversation(obj["id"], messages, source, meta)


def _read_pinned(path: Path, expected_sha256: str | None) -> bytes:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: file not found") from None
    if expected_sha256 is not None:
        actual = sha256_bytes(data)
        if actual != expected_sha256.lower():
            raise DigestMismatch(f"{path}: sha256 mismatch: expected {expected_sha256}, actual {actual}")
    return data


def read_jsonl(path: str | Path, expected_sha256: str | None = None) -> list[Conversation]:
    """Read a conversation JSONL file, refusing bad records with file and line number.

    Refused: a sha256 mismatch (checked before parsing), non-UTF-8 bytes, invalid JSON, blank
    lines (other than the final newline), missing id/messages, unknown roles, empty assistant
    turns, no assistant turn, a last turn that is not the assistant's, duplicate ids, an empty
    file. Records without a "source" key get source "jsonl:<file name>".
    """
    path = Path(path)
    data = _read_pinned(path, expected_sha256)
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # the newline that ends the last record
    conversations: list[Conversation] = []
    first_line_of: dict[str, int] = {}
    for lineno, line in enumerate(lines, start=1):
        where = f"{path}:{lineno}"
        if not line.strip():
            raise RecordError(f"{where}: blank line; expected one JSON record per line")
        conversation = conversation_from_json(loads_strict(line, where), where, f"jsonl:{path.name}")
        if conversation.id in first_line_of:
            raise RecordError(
                f"{where}: duplicate id {conversation.id!r} (first on line {first_line_of[conversation.id]})"
            )
        first_line_of[conversation.id] = lineno
        conversations.append(conversation)
    if not conversations:
        raise RecordError(f"{path}: no records; expected at least one conversation")
    return conversations


def jsonl_bytes(conversations: Iterable[Conversation]) -> bytes:
    lines = []
    seen: set[str] = set()
    for conversation in conversations:
        if conversation.id in seen:
            raise RecordError(f"duplicate conversation id {conversation.id!r}; ids must be unique in a file")
        seen.add(conversation.id)
        lines.append(canonical_json(conversation.to_json()) + b"\n")
    return b"".join(lines)


def write_jsonl(path: str | Path, conversations: Iterable[Conversation]) -> str:
    """Atomically write one canonical-JSON line per conversation; returns the file's sha256."""
    data = jsonl_bytes(conversations)
    write_bytes_atomic(path, data)
    return sha256_bytes(data)


@dataclass(frozen=True, slots=True, kw_only=True)
class InstructionRecord(Record):
    """One record of a pinned instruction source (Alpaca's JSON list): a user turn and the reply."""

    instruction: str = spec_field(str, doc="the request; never empty")
    input: str = spec_field(str, doc="its context, appended after a blank line when not empty")
    output: str = spec_field(str, doc="the reply; a record with an empty one is skipped")


@dataclass(frozen=True)
class InstructionRange:
    """Records [start, stop) of a pinned instruction source, as conversations.

    Records whose output is empty (or whitespace) cannot teach an assistant reply; they are
    skipped, and their indices are kept here so reports can count them.
    """

    source_name: str
    start: int
    stop: int
    conversations: tuple[Conversation, ...]
    skipped_empty_output: tuple[int, ...]


def instruction_source_range(
    path: str | Path, sha256: str, start: int, stop: int, source_name: str
) -> InstructionRange:
    """Load records [start, stop) of an Alpaca-format JSON list pinned by `sha256`.

    user = instruction, plus "\\n\\n" + input when input is non-empty; assistant = output.
    Conversation ids are f"{source_name}:{index}" with the record's index in the file.
    """
    path = Path(path)
    if not source_name:
        raise RecordError(f"{path}: source_name must be a non-empty string")
    data = _read_pinned(path, sha256)
    records = loads_strict(data, str(path))
    if not isinstance(records, list):
        raise RecordError(f"{path}: expected a JSON list of {{'instruction', 'input', 'output'}} records")
    if not (isinstance(start, int) and isinstance(stop, int) and 0 <= start < stop <= len(records)):
        raise RecordError(
            f"{path}: record range [{start}, {stop}) is outside the file's {len(records)} records "
            f"(expected 0 <= start < stop <= {len(records)})"
        )
    conversations = []
    skipped = []
    for index in range(start, stop):
        record = records[index]
        where = f"{path} record {index}"
        if not isinstance(record, dict) or set(record) != set(INSTRUCTION_KEYS):
            keys = sorted(record) if isinstance(record, dict) else type(record).__name__
            raise RecordError(f"{where}: expected keys {list(INSTRUCTION_KEYS)}, got {keys}")
        try:
            rec = InstructionRecord.from_json(record, where)
        except ContractError:
            raise RecordError(f"{where}: {list(INSTRUCTION_KEYS)} must all be strings") from None
        if not rec.instruction.strip():
            raise RecordError(f"{where}: empty instruction")
        if not rec.output.strip():
            skipped.append(index)
            continue
        user = rec.instruction
        if rec.input:
            user = f"{user}\n\n{rec.input}"
        messages = (Message("user", user), Message("assistant", rec.output))
        conversations.append(Conversation(f"{source_name}:{index}", messages, source_name, {"index": index}))
    return InstructionRange(source_name, start, stop, tuple(conversations), tuple(skipped))


def load_instruction_source(path: str | Path, sha256: str, start: int, stop: int, source_name: str) -> list[Conversation]:
    """The conversations of `instruction_source_range` (records with empty output are skipped)."""
    return list(instruction_source_range(path, sha256, start, stop, source_name).conversations)


_PUNCTUATION_AT_ENDS = re.compile(r"^[\W_]+|[\W_]+$")


def normalize_text(text: str) -> str:
    """Key for exclusion matching: NFKC, casefold, collapsed whitespace, no punctuation at the ends.

    NFKC and casefold make visually equal prompts compare equal ("Ｗhat" == "what").
    """
    text = unicodedata.normalize("NFKC", text).casefold()
    text = " ".join(text.split())
    return _PUNCTUATION_AT_ENDS.sub("", text)


# ---- synthetic chat -------------------------------------------------------------------------
# A fixed small vocabulary so a tiny model sees each word many times.

_GREETINGS = (
    ("Hello!", "Hello! How can I help you today?"),
    ("Hi there.", "Hi! What would you like to talk about?"),
    ("Good morning.", "Good morning! How can I help?"),
    ("Hey, how are you?", "I am well, thank you. How can I help you?"),
    ("Thank you!", "You are welcome."),
    ("Goodbye.", "Goodbye! Have a nice day."),
)
_COLOURS = (
    ("the sky", "blue"), ("grass", "green"), ("snow", "white"), ("coal", "black"),
    ("a banana", "yellow"), ("a tomato", "red"), ("an orange", "orange"), ("a plum", "purple"),
)
_SOUNDS = (("dog", "woof"), ("cat", "meow"), ("cow", "moo"), ("duck", "quack"), ("sheep", "baa"))
_WORDS = (
    "apple", "river", "stone", "cloud", "house", "tree", "bird", "light", "music", "garden",
    "window", "paper", "bread", "chair", "star", "road",
)
_NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")
_SYSTEM_PROMPT = "You are a helpful assistant."


def _capitalised(text: str) -> str:
    return text[0].upper() + text[1:]


def _greeting(rng: np.random.Generator) -> list[tuple[str, str]]:
    return [_GREETINGS[rng.integers(len(_GREETINGS))]]


def _colour_fact(rng: np.random.Generator) -> list[tuple[str, str]]:
    thing, colour = _COLOURS[rng.integers(len(_COLOURS))]
    return [(f"What colour is {thing}?", f"{_capitalised(thing)} is {colour}.")]


def _animal_sound(rng: np.random.Generator) -> list[tuple[str, str]]:
    animal, sound = _SOUNDS[rng.integers(len(_SOUNDS))]
    return [(f"What sound does a {animal} make?", f"A {animal} says {sound}.")]


def _echo(rng: np.random.Generator) -> list[tuple[str, str]]:
    count = int(rng.integers(1, 5))
    words = " ".join(_WORDS[i] for i in rng.integers(len(_WORDS), size=count))
    return [(f"Repeat after me: {words}", words)]


def _count_words(rng: np.random.Generator) -> list[tuple[str, str]]:
    count = int(rng.integers(1, 8))
    words = " ".join(_WORDS[i] for i in rng.integers(len(_WORDS), size=count))
    noun = "word" if count == 1 else "words"
    return [(f"How many words are in: {words}", f"There {'is' if count == 1 else 'are'} {count} {noun}.")]


def _count_up(rng: np.random.Generator) -> list[tuple[str, str]]:
    first = int(rng.integers(0, 10))
    last = first + int(rng.integers(1, 6))
    return [(f"Count from {first} to {last}.", " ".join(str(n) for n in range(first, last + 1)))]


def _number_word(rng: np.random.Generator) -> list[tuple[str, str]]:
    n = int(rng.integers(len(_NUMBER_WORDS)))
    return [(f"Write the number {n} as a word.", _NUMBER_WORDS[n])]


_FAMILIES = (_greeting, _colour_fact, _animal_sound, _echo, _count_words, _count_up, _number_word)


def synthetic_conversations(n: int, seed: int) -> list[Conversation]:
    """`n` deterministic synthetic conversations (ids "synthetic:{seed}:{i}").

    A quarter of them carry a system prompt and a fifth have a second exchange, so multi-turn
    formatting is learned too. Same (n, seed) -> same list on every platform (numpy PCG64).
    """
    if not isinstance(n, int) or n < 0:
        raise ValueError(f"n={n!r}: expected a non-negative int")
    if not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed={seed!r}: expected a non-negative int")
    rng = np.random.default_rng(seed)
    conversations = []
    for i in range(n):
        messages: list[Message] = []
        if rng.random() < 0.25:
            messages.append(Message("system", _SYSTEM_PROMPT))
        exchanges = 2 if rng.random() < 0.2 else 1
        for _ in range(exchanges):
            family = _FAMILIES[rng.integers(len(_FAMILIES))]
            for user, assistant in family(rng):
                messages += [Message("user", user), Message("assistant", assistant)]
        conversations.append(
            Conversation(f"{SYNTHETIC_SOURCE}:{seed}:{i}", tuple(messages), SYNTHETIC_SOURCE, {"synthetic": True})
        )
    return conversations
