"""The built tokenizer (real HF directory), chat rendering and the assistant-target mask."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kit.data.chat import EncodeStats, encode_conversation, encode_many, generation_prompt_ids, load_tokenizer
from kit.data.conversations import Conversation, Message, synthetic_conversations
from kit.data.tokenizer_build import SPECIAL_TOKEN_IDS, build_tokenizer

VOCAB_SIZE = 512  # small enough that the corpus fills it (the trainer stops early when merges run out)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def _training_texts() -> list[str]:
    texts = [m.content for c in synthetic_conversations(300, seed=0) for m in c.messages]
    return texts + ["system user assistant", "Ça va très bien, merci — 日本語のテキスト."]


@pytest.fixture(scope="module")
def seed_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("seed")
    build_tokenizer(_training_texts(), VOCAB_SIZE, out)
    return out


@pytest.fixture(scope="module")
def tokenizer(seed_dir):
    return load_tokenizer(seed_dir)


def _conversation(*turns: tuple[str, str], id_: str = "c") -> Conversation:
    return Conversation(id_, tuple(Message(role, content) for role, content in turns), "test")


def _masked_runs(tokenizer, example) -> list[str]:
    """Decoded text of each maximal run of consecutive target tokens."""
    runs, current = [], []
    for token, target in zip(example.input_ids, example.target_mask):
        if target:
            current.append(token)
        elif current:
            runs.append(current)
            current = []
    if current:
        runs.append(current)
    return [tokenizer.decode(run, skip_special_tokens=False) for run in runs]


# ---- the built tokenizer ----------------------------------------------------------------------------


def test_loads_offline_as_fast_tokenizer_with_special_ids(seed_dir, tokenizer):
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    assert isinstance(AutoTokenizer.from_pretrained(seed_dir, local_files_only=True), PreTrainedTokenizerFast)
    assert SPECIAL_TOKEN_IDS == {"<|endoftext|>": 0, "<|im_start|>": 1, "<|im_end|>": 2}
    assert [tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKEN_IDS] == [0, 1, 2]
    assert (tokenizer.bos_token, tokenizer.eos_token, tokenizer.pad_token) == ("<|im_start|>", "<|im_end|>", "<|endoftext|>")
    assert (tokenizer.eos_token_id, tokenizer.pad_token_id) == (2, 0)
    assert tokenizer.model_max_length == 2048
    assert len(tokenizer) == VOCAB_SIZE
    # no special token is added implicitly: the chat template writes them
    assert tokenizer("hi")["input_ids"] == tokenizer("hi", add_special_tokens=False)["input_ids"]
    assert json.loads((seed_dir / "special_tokens_map.json").read_text())["eos_token"] == "<|im_end|>"


def test_chat_template_renders_chatml_exactly(tokenizer):
    messages = [{"role": "user", "content": "What colour is the sky?"},
                {"role": "assistant", "content": "The sky is blue."}]  # fmt: skip
    assert tokenizer.apply_chat_template(messages, tokenize=False) == (
        "<|im_start|>user\nWhat colour is the sky?<|im_end|>\n<|im_start|>assistant\nThe sky is blue.<|im_end|>\n"
    )
    assert tokenizer.apply_chat_template(messages[:1], tokenize=False, add_generation_prompt=True) == (
        "<|im_start|>user\nWhat colour is the sky?<|im_end|>\n<|im_start|>assistant\n"
    )


@pytest.mark.parametrize("text", ["The sky is blue. Count: 1 2 3, 10 + 25 = 35!\n\n  indented\ttab",
                                  "Ça va très bien — 日本語のテキスト 🙂 naïve\r\nend "])  # fmt: skip
def test_decode_encode_round_trip(tokenizer, text):
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids) == text


def test_digits_are_single_tokens(tokenizer):
    ids = tokenizer("12345", add_special_tokens=False)["input_ids"]
    assert [tokenizer.decode([i]) for i in ids] == ["1", "2", "3", "4", "5"]


def test_two_builds_are_byte_identical(seed_dir, tmp_path):
    build_tokenizer(_training_texts(), VOCAB_SIZE, tmp_path / "same_process")
    # A second interpreter too: hash seeds differ per process, the trained merges must not.
    code = (
        "import sys; from pathlib import Path; sys.path.insert(0, sys.argv[2]);"
        "from tests.test_chat import _training_texts, VOCAB_SIZE;"
        "from kit.data.tokenizer_build import build_tokenizer;"
        "build_tokenizer(_training_texts(), VOCAB_SIZE, Path(sys.argv[1]))"
    )
    repo = Path(__file__).resolve().parents[1]
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "other_process"), str(repo)], check=True, cwd=repo)
    for name in TOKENIZER_FILES:
        expected = (seed_dir / name).read_bytes()
        assert (tmp_path / "same_process" / name).read_bytes() == expected, name
        assert (tmp_path / "other_process" / name).read_bytes() == expected, name


def test_build_refuses_tiny_vocab(tmp_path):
    with pytest.raises(ValueError, match=r"vocab_size=100: expected an int >= 259"):
        build_tokenizer(["abc"], 100, tmp_path)


def test_tokenizer_without_chat_template_refused(seed_dir, tmp_path):
    bare = tmp_path / "no_template_seed"
    shutil.copytree(seed_dir, bare)
    config = json.loads((bare / "tokenizer_config.json").read_text())
    del config["chat_template"]
    (bare / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"no_template_seed: tokenizer has no chat template"):
        load_tokenizer(bare)
    with pytest.raises(ValueError, match=r"missing_seed: not a directory"):
        load_tokenizer(tmp_path / "missing_seed")


# ---- assistant-target mask --------------------------------------------------------------------------


def test_mask_marks_assistant_content_and_end_of_turn_only(tokenizer):
    conversation = _conversation(
        ("system", "You are a helpful assistant."),
        ("user", "What colour is the sky?"),
        ("assistant", "The sky is blue."),
        ("user", "Repeat after me: apple"),
        ("assistant", "apple"),
        ("user", "Ça va?"),
        ("assistant", "Très bien — 日本語!"),
    )
    example = encode_conversation(tokenizer, conversation, max_tokens=512)
    assert _masked_runs(tokenizer, example) == ["The sky is blue.<|im_end|>", "apple<|im_end|>", "Très bien — 日本語!<|im_end|>"]
    rendered = tokenizer.apply_chat_template([m.to_json() for m in conversation.messages], tokenize=False)
    assert list(example.input_ids) == tokenizer(rendered, add_special_tokens=False)["input_ids"]
    # the newline after each closing <|im_end|> is a separate token and is context, not a target
    im_end_targets = [i for i, (t, m) in enumerate(zip(example.input_ids, example.target_mask)) if m and t == 2]
    assert len(im_end_targets) == 3
    assert all(tokenizer.decode([example.input_ids[i + 1]]) == "\n" and not example.target_mask[i + 1]
               for i in im_end_targets)  # fmt: skip
    # user/system turns contribute no targets: their <|im_end|> tokens stay unmasked
    assert sum(1 for t in example.input_ids if t == 2) == 7
    # each content tokenizes as it would alone (ChatML starts it after a separate "\n" token), plus <|im_end|>
    contents = ["The sky is blue.", "apple", "Très bien — 日本語!"]
    expected_targets = sum(len(tokenizer(c, add_special_tokens=False)["input_ids"]) + 1 for c in contents)
    assert example.num_targets == sum(example.target_mask) == expected_targets
    assert example.source == "test" and example.conversation_digest == conversation.digest
    assert not example.truncated and example.target_mask[0] is False


def test_generation_prompt_ids_prefix_the_encoded_conversation(tokenizer):
    conversation = _conversation(("user", "What colour is grass?"), ("assistant", "Grass is green."))
    example = encode_conversation(tokenizer, conversation, max_tokens=512)
    prompt = generation_prompt_ids(tokenizer, conversation.messages[:1])
    assert list(example.input_ids[: len(prompt)]) == prompt
    assert tokenizer.decode(prompt) == "<|im_start|>user\nWhat colour is grass?<|im_end|>\n<|im_start|>assistant\n"
    # the first target is the first token after the prompt
    assert example.target_mask.index(True) == len(prompt)


def test_mask_follows_any_template_not_only_chatml(tokenizer):
    from transformers import AutoTokenizer

    other = AutoTokenizer.from_pretrained(tokenizer.name_or_path, local_files_only=True)
    other.chat_template = (
        "{% for m in messages %}{{ m['role'] | upper }}: {{ m['content'] }}"
        "{% if m['role'] == 'assistant' %}{{ eos_token }}{% endif %}{{ '\\n' }}{% endfor %}"
        "{% if add_generation_prompt %}ASSISTANT:{% endif %}"
    )
    conversation = _conversation(("user", "Hello!"), ("assistant", "sky is blue."),
                                 ("user", "Count from 1 to 3."), ("assistant", "1 2 3"))  # fmt: skip
    assert other.apply_chat_template([m.to_json() for m in conversation.messages], tokenize=False) == (
        "USER: Hello!\nASSISTANT: sky is blue.<|im_end|>\nUSER: Count from 1 to 3.\nASSISTANT: 1 2 3<|im_end|>\n"
    )
    example = encode_conversation(other, conversation, max_tokens=512)
    # " sky" straddles the header's space and the content: overlapping tokens are targets (documented);
    # " " before "1" is a token of its own (digits split) and stays context.
    assert _masked_runs(other, example) == [" sky is blue.<|im_end|>", "1 2 3<|im_end|>"]


def test_no_assistant_token_refused_naming_the_conversation(tokenizer):
    from transformers import AutoTokenizer

    bare = AutoTokenizer.from_pretrained(tokenizer.name_or_path, local_files_only=True)
    bare.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    # the only assistant token is token 0, which has no context and can never be a target
    with pytest.raises(ValueError, match="conversation 'lonely': no assistant token"):
        encode_conversation(bare, _conversation(("assistant", "A"), id_="lonely"), max_tokens=16)


def test_overlong_rejected_and_counted(tokenizer):
    short = _conversation(("user", "Hi"), ("assistant", "Hello."), id_="short")
    long = _conversation(("user", "Repeat after me: " + "apple " * 40), ("assistant", "apple " * 40), id_="long")
    examples, stats = encode_many(tokenizer, [short, long, short], max_tokens=32)
    assert [e.id for e in examples] == ["short", "short"]
    assert stats == EncodeStats(accepted=2, rejected_too_long=1, truncated=0)


def test_truncate_keeps_mask_aligned(tokenizer):
    conversation = _conversation(("user", "Count from 1 to 9."), ("assistant", "1 2 3 4 5 6 7 8 9"))
    full = encode_conversation(tokenizer, conversation, max_tokens=512)
    stats = EncodeStats()
    cut = encode_conversation(tokenizer, conversation, max_tokens=full.num_tokens - 5, overflow="truncate", stats=stats)
    assert cut.truncated and cut.num_tokens == full.num_tokens - 5
    assert cut.input_ids == full.input_ids[:-5] and cut.target_mask == full.target_mask[:-5]
    # digits and spaces are separate tokens; the cut drops "8", " ", "9", "<|im_end|>", "\n"
    assert _masked_runs(tokenizer, cut) == ["1 2 3 4 5 6 7 "]
    assert stats == EncodeStats(accepted=1, rejected_too_long=0, truncated=1)
    # a cut that leaves no target at all cannot train anything: rejected and counted
    prompt_len = full.target_mask.index(True)
    assert encode_conversation(tokenizer, conversation, prompt_len, overflow="truncate", stats=stats) is None
    assert stats == EncodeStats(accepted=1, rejected_too_long=1, truncated=1)
    with pytest.raises(ValueError, match="overflow='drop'"):
        encode_conversation(tokenizer, conversation, 8, overflow="drop")


def test_synthetic_corpus_encodes_with_full_assistant_coverage(tokenizer):
    conversations = synthetic_conversations(50, seed=11)
    examples, stats = encode_many(tokenizer, conversations, max_tokens=256)
    assert stats == EncodeStats(accepted=50, rejected_too_long=0, truncated=0)
    for conversation, example in zip(conversations, examples):
        expected = [m.content + "<|im_end|>" for m in conversation.messages if m.role == "assistant"]
        assert _masked_runs(tokenizer, example) == expected


# ---- one-batch encoding of single turns (the seed build's generated conversations) -------------------
def test_batch_ids_and_offsets_equal_the_tokenizer_call_whatever_the_backend_state(tokenizer):
    """The seed build's batch encoding goes to the tokenizer's backend directly: the same ids and offsets
    as the tokenizer's call, also when the backend was left truncating (the call would undo that)."""
    from kit.data.chat import _ids_and_offsets

    texts = ["sort ascending: 48 38 32 36", "x " * 40, "table: a=1, b=2. value of b?<|im_end|>"]

    def plain(pairs):
        return [([int(i) for i in ids], [tuple(o) for o in offsets]) for ids, offsets in pairs]

    call = tokenizer(texts, add_special_tokens=False, return_offsets_mapping=True)
    expected = plain(zip(call["input_ids"], call["offset_mapping"]))
    assert plain(_ids_and_offsets(tokenizer, texts)) == expected
    backend = tokenizer.backend_tokenizer
    backend.enable_truncation(max_length=4)
    try:
        got = plain(_ids_and_offsets(tokenizer, texts))
    finally:
        backend.no_truncation()
    assert got == expected and len(got[1][0]) > 4


def test_single_turns_encode_exactly_as_one_at_a_time(tokenizer):
    from kit.data.chat import encode_or_refuse, encode_single_turns

    convs = [_conversation(("user", f"sort ascending: {i} {i + 7} 3"), ("assistant", f"3 {i} {i + 7}"), id_=f"s{i}")
             for i in range(80)]
    convs.append(_conversation(("user", "x " * 300), ("assistant", "too long"), id_="long"))
    fast = encode_single_turns(tokenizer, convs, 128, check=8)
    assert fast == [encode_or_refuse(tokenizer, c, 128) for c in convs]  # beyond the checked 8 too
    assert fast[-1] is None and all(e is not None for e in fast[:-1])
    with pytest.raises(ValueError, match="one user and one assistant"):
        encode_single_turns(tokenizer, [_conversation(("user", "a"), ("assistant", "b"), ("user", "c"),
                                                      ("assistant", "d"))], 128)
