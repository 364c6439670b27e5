"""Conversation records: JSONL reading/writing and refusals, the pinned Alpaca source, synthetic chat."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kit.data.conversations import (
    Conversation,
    Message,
    instruction_source_range,
    load_instruction_source,
    normalize_text,
    read_jsonl,
    synthetic_conversations,
    write_jsonl,
)
from kit.digest import DigestMismatch, sha256_bytes, sha256_json

# The repository carries the pinned public source (data/SOURCE.md): a missing file fails, never skips.
ALPACA_PATH = Path(__file__).resolve().parents[1] / "data/alpaca_5000.json"
ALPACA_SHA256 = "fc1add24c93c9fbbe585a64a6c9bf6165eb110225f4470efbff382a913558ec0"  # from data/SOURCE.md



def _line(obj) -> bytes:
    return json.dumps(obj).encode() + b"\n"


def _record(id_="a", messages=None, **extra) -> dict:
    if messages is None:
        messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}]
    return {"id": id_, "messages": messages, **extra}


GOOD = _record("a")
USER = {"role": "user", "content": "Hi"}
ASSISTANT = {"role": "assistant", "content": "Hello."}


# ---- JSONL ------------------------------------------------------------------------------------------


def test_good_jsonl_parses_with_meta_and_digest(tmp_path):
    path = tmp_path / "good.jsonl"
    system = {"role": "system", "content": "Be brief."}
    path.write_bytes(
        _line(_record("a", family="greeting"))
        + _line(
            _record("b", [system, USER, ASSISTANT, USER, {"role": "assistant", "content": "Ça va."}], source="dev-retention")
        )
    )
    first, second = read_jsonl(path)
    assert first.id == "a" and first.source == "jsonl:good.jsonl" and first.meta == {"family": "greeting"}
    assert first.messages == (Message("user", "Hi"), Message("assistant", "Hello."))
    assert first.digest == sha256_json([USER, ASSISTANT])
    assert second.source == "dev-retention" and second.meta == {}
    assert [m.role for m in second.messages] == ["system", "user", "assistant", "user", "assistant"]
    assert second.messages[-1].content == "Ça va."


def test_write_jsonl_round_trips_canonically(tmp_path):
    conversations = synthetic_conversations(5, seed=3) + [
        Conversation("x", (Message("user", "é?"), Message("assistant", "ü!")), "src", {"family": "f", "n": 2})
    ]
    path = tmp_path / "out.jsonl"
    digest = write_jsonl(path, conversations)
    data = path.read_bytes()
    assert digest == sha256_bytes(data)
    assert data.isascii() and data.count(b"\n") == 6
    # canonical line: sorted keys, no spaces, meta keys at top level
    assert data.splitlines()[-1] == (
        b'{"family":"f","id":"x","messages":[{"content":"\\u00e9?","role":"user"},'
        b'{"content":"\\u00fc!","role":"assistant"}],"n":2,"source":"src"}'
    )
    assert read_jsonl(path, expected_sha256=digest) == conversations


def test_write_jsonl_refuses_duplicate_ids(tmp_path):
    twice = synthetic_conversations(1, seed=0) * 2
    with pytest.raises(ValueError, match="duplicate conversation id 'synthetic:0:0'"):
        write_jsonl(tmp_path / "dup.jsonl", twice)


BAD_FILES = {
    "invalid_json": (_line(GOOD) + b'{"id": "b", "messages": [\n', r":2: invalid JSON"),
    "non_utf8": (_line(GOOD) + b'{"id": "b\xff", "messages": []}\n', r":2: not UTF-8"),
    "missing_id": (_line({"messages": [USER, ASSISTANT]}), r":1: missing required key 'id'"),
    "missing_messages": (_line(GOOD) + _line({"id": "b"}), r":2: missing required key 'messages'"),
    "bad_role": (_line(_record("a", [{"role": "tool", "content": "x"}, ASSISTANT])),
                 r":1: message 0 has role 'tool'"),
    "empty_assistant": (_line(_record("a", [USER, {"role": "assistant", "content": "  \n"}])),
                        r":1: message 1 is an empty assistant turn"),
    "no_assistant": (_line(_record("a", [USER])), r":1: no assistant turn"),
    "ends_with_user": (_line(_record("a", [USER, ASSISTANT, USER])),
                       r":1: conversation ends with a 'user' turn, expected 'assistant'"),
    "duplicate_id": (_line(GOOD) + _line(_record("b")) + _line(GOOD), r":3: duplicate id 'a' \(first on line 1\)"),
    "blank_line": (_line(GOOD) + b"\n" + _line(_record("b")), r":2: blank line"),
    "not_an_object": (b"[1, 2]\n", r":1: expected a JSON object"),
    "duplicate_key": (b'{"id": "a", "id": "b", "messages": []}\n', r":1: duplicate key 'id'"),
    "message_extra_key": (_line(_record("a", [USER, {**ASSISTANT, "name": "bot"}])),
                          r":1: message 1 must be an object with keys 'role' and 'content'"),
}  # fmt: skip


@pytest.mark.parametrize("kind", sorted(BAD_FILES))
def test_bad_record_refused_naming_file_and_line(tmp_path, kind):
    data, message = BAD_FILES[kind]
    path = tmp_path / f"{kind}.jsonl"
    path.write_bytes(data)
    with pytest.raises(ValueError, match=f"{kind}\\.jsonl{message}"):
        read_jsonl(path)


def test_empty_file_refused(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_bytes(b"")
    with pytest.raises(ValueError, match=r"empty\.jsonl: no records"):
        read_jsonl(path)


def test_sha256_checked_before_parsing(tmp_path):
    path = tmp_path / "bad.jsonl"
    data = b'{"id": not json\n'
    path.write_bytes(data)
    wrong = "0" * 64
    # The record is bad too, but the digest error comes first: a wrong file is never parsed.
    with pytest.raises(DigestMismatch, match=rf"bad\.jsonl: sha256 mismatch: expected {wrong}, actual {sha256_bytes(data)}"):
        read_jsonl(path, expected_sha256=wrong)
    with pytest.raises(ValueError, match=r"bad\.jsonl:1: invalid JSON"):
        read_jsonl(path, expected_sha256=sha256_bytes(data))


def test_conversation_refuses_reserved_meta_and_bad_messages():
    messages = (Message("user", "q"), Message("assistant", "a"))
    with pytest.raises(ValueError, match=r"meta keys \['source'\] are reserved"):
        Conversation("c", messages, "s", {"source": "x"})
    with pytest.raises(ValueError, match="conversation 'c': no assistant turn"):
        Conversation("c", (Message("user", "q"),), "s")


# ---- pinned public instruction source ---------------------------------------------------------------


def test_alpaca_range_becomes_user_assistant_pairs():
    conversations = load_instruction_source(ALPACA_PATH, ALPACA_SHA256, 0, 5, "alpaca")
    assert [c.id for c in conversations] == [f"alpaca:{i}" for i in range(5)]
    assert all(c.source == "alpaca" for c in conversations)
    first = conversations[0]
    assert first.messages == (
        Message("user", "Are the two sentences below grammatically correct? Output yes or no.\n\n"
                        "Sentence 1: I am going to the store.\nSentence 2: I goes to the store."),
        Message("assistant", "No"),
    )  # fmt: skip
    assert first.meta == {"index": 0}
    # record 4 has an empty input: the user turn is the instruction alone
    assert conversations[4].messages[0] == Message("user", "Generate a new solution to address the global climate crisis.")


def test_alpaca_empty_outputs_are_skipped_and_counted():
    part = instruction_source_range(ALPACA_PATH, ALPACA_SHA256, 2330, 2340, "alpaca")
    assert part.skipped_empty_output == (2335,)
    assert [c.id for c in part.conversations] == [f"alpaca:{i}" for i in range(2330, 2340) if i != 2335]
    whole = instruction_source_range(ALPACA_PATH, ALPACA_SHA256, 0, 5000, "alpaca")
    assert whole.skipped_empty_output == (2335, 4658) and len(whole.conversations) == 4998


def test_alpaca_range_and_digest_refusals():
    with pytest.raises(ValueError, match=r"alpaca_5000\.json: record range \[4990, 5001\) is outside the file's 5000"):
        load_instruction_source(ALPACA_PATH, ALPACA_SHA256, 4990, 5001, "alpaca")
    with pytest.raises(ValueError, match=r"record range \[7, 7\)"):
        load_instruction_source(ALPACA_PATH, ALPACA_SHA256, 7, 7, "alpaca")
    with pytest.raises(DigestMismatch, match=rf"alpaca_5000\.json: sha256 mismatch: expected {'f' * 64}, actual {ALPACA_SHA256}"):
        load_instruction_source(ALPACA_PATH, "f" * 64, 0, 5, "alpaca")


def test_instruction_source_refuses_bad_records(tmp_path):
    path = tmp_path / "inst.json"
    data = json.dumps([{"instruction": "Say hi", "input": "", "output": "hi"}, {"instruction": "x", "output": "y"}])
    path.write_text(data)
    digest = sha256_bytes(data.encode())
    assert len(load_instruction_source(path, digest, 0, 1, "tiny")) == 1
    with pytest.raises(ValueError, match=r"inst\.json record 1: expected keys \['instruction', 'input', 'output'\]"):
        load_instruction_source(path, digest, 0, 2, "tiny")


# ---- synthetic chat and normalisation ---------------------------------------------------------------


def test_synthetic_is_deterministic_labelled_and_varied():
    first = synthetic_conversations(300, seed=7)
    assert first == synthetic_conversations(300, seed=7)
    assert [c.to_json() for c in first] != [c.to_json() for c in synthetic_conversations(300, seed=8)]
    assert all(c.source == "synthetic" and c.meta == {"synthetic": True} for c in first)
    assert len({c.id for c in first}) == 300
    assert all(c.messages[-1].role == "assistant" for c in first)
    prompts = {m.content for c in first for m in c.messages if m.role == "user"}
    assert len(prompts) > 100  # varied enough that a tiny model cannot just memorise a handful
    assert any(len(c.messages) > 3 for c in first) and any(c.messages[0].role == "system" for c in first)
    # golden first record pins the generator (numpy PCG64 from the integer seed)
    assert synthetic_conversations(1, seed=0)[0].to_json() == {
        "id": "synthetic:0:0",
        "messages": [{"role": "user", "content": "What sound does a dog make?"},
                     {"role": "assistant", "content": "A dog says woof."}],
        "source": "synthetic",
        "synthetic": True,
    }  # fmt: skip


def test_synthetic_facts_are_right():
    checked = {"sky": 0, "repeat": 0, "count": 0}
    for c in synthetic_conversations(200, seed=1):
        for user, assistant in zip(c.messages[:-1], c.messages[1:]):
            if user.role == "user" and user.content == "What colour is the sky?":
                assert assistant.content == "The sky is blue."
                checked["sky"] += 1
            if user.role == "user" and user.content.startswith("Repeat after me: "):
                assert assistant.content == user.content.removeprefix("Repeat after me: ")
                checked["repeat"] += 1
            if user.role == "user" and user.content.startswith("How many words are in: "):
                n = len(user.content.removeprefix("How many words are in: ").split())
                assert assistant.content.startswith(f"There {'is' if n == 1 else 'are'} {n} word")
                checked["count"] += 1
    assert all(checked.values()), checked  # every kind of fact was actually generated and checked


def test_normalize_text():
    assert normalize_text("  What   colour is\tthe SKY?\n") == "what colour is the sky"
    assert normalize_text('"Hello, world!"') == "hello, world"
    assert normalize_text("Ｗhat ﬁne day...") == "what fine day"
    assert normalize_text("?!") == ""
