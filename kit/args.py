"""Checked path arguments and one-line errors for the `kit` command line.

Every path-like option or positional of every subcommand has one of the `type=` checkers below, so a
missing path, a file where a folder belongs or a file that is not JSON is refused while the command
line is parsed: one line on stderr that names the subcommand, the path, what was expected and the
command that makes the right thing, exit code 2, before anything is imported or written. Each checker
returns its argument unchanged (a string), so the handlers see what they saw before.

`Parser` is the kit's argparse parser: its errors are one line (`kit adaptive train: error: ...`,
followed by where the usage is), and every leaf subcommand records its full name (`_prog`) so that
`kit.cli.main` names it for the kit's own refusals too (tests/test_cli_walk.py). Only kit/cli/ imports it
(tests/test_layers.py, PACKAGE_TIERS: the command line's tier, above the experiments).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import warnings
from pathlib import Path

from kit.contract import scale_name
from kit.digest import loads_strict
from kit.evidence.archive import ArchiveError, resolve

ROOT_RE = re.compile(r"[0-9a-f]{64}")


DEVICE_RE = re.compile(r"cpu|cuda(:[0-9]{1,3})?")


def device(text: str) -> str:
    """--device: cpu, cuda or cuda:N (torch's own refusal of `tpu:9` is a multi-line RuntimeError)."""
    if not DEVICE_RE.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r}: expected cpu, cuda or cuda:N")
    if text != "cpu":  # here, not as an AssertionError traceback from deep inside the first .to(device)
        import torch  # noqa: PLC0415 - only when a GPU is asked for: the parser stays light otherwise

        if torch.version.cuda is None:
            raise argparse.ArgumentTypeError(f"{text!r}: this torch build ({torch.__version__}) has no CUDA; expected "
                                             "cpu (on a GPU host, a CUDA build of torch: docs/gpu-hosts.md)")
        count = torch.cuda.device_count()
        index = int(text.partition(":")[2] or 0)
        if index >= count:
            raise argparse.ArgumentTypeError(f"{text!r}: {count} CUDA device(s) visible to this process "
                                             f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')})"
                                             "; expected cpu" + (f" or cuda:0..{count - 1}" if count else ""))
    return text


def one_line(text: object) -> str:
    """An error message on one line (continuation lines joined with '; ')."""
    return "; ".join(line.strip() for line in str(text).splitlines() if line.strip())


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors naming the (sub)command; subparsers are Parsers too. No abbreviations:
    a mistyped `--worker 2` must not run as `--workers 2` (tests/test_no_abbrev.py walks every parser)."""

    def __init__(self, *args, allow_abbrev: bool = False, **kwargs):
        super().__init__(*args, **{**kwargs, "allow_abbrev": allow_abbrev})

    def error(self, message: str):
        unknown = self._unknown_options()
        if unknown and message.startswith("the following arguments are required"):
            # a misspelt option (--sed for --seed) is the cause, the missing one only its consequence
            message = f"unrecognized arguments: {' '.join(unknown)} ({message})"
        self.exit(2, f"{self.prog}: error: {one_line(message)} (usage: {self.prog} --help)\n")

    def parse_known_args(self, args=None, namespace=None):
        self._args_seen = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def _unknown_options(self) -> list[str]:
        """The words of the last parse that look like options this parser does not have (abbreviations count)."""
        out = []
        for word in getattr(self, "_args_seen", []):
            if word == "--":
                break
            if not word.startswith("-") or word == "-" or self._negative_number_matcher.match(word):
                continue
            name = word.split("=", 1)[0]
            if name in self._option_string_actions or (self.allow_abbrev and name.startswith("--") and any(
                    o.startswith(name) for o in self._option_string_actions)):
                continue
            out.append(word)
        return out

    def parse_args(self, args=None, namespace=None):
        # argparse's subparsers hand unknown options up to the top parser, which would blame `kit`; the
        # leaf subcommand that was parsed (its `_prog` default, set by kit.cli.build_parser) is named instead
        namespace, extras = self.parse_known_args(args, namespace)
        if extras:
            prog = getattr(namespace, "_prog", None) or self.prog
            self.exit(2, f"{prog}: error: unrecognized arguments: {' '.join(extras)} (usage: {prog} --help)\n")
        return namespace


def add_renamed(parser: argparse.ArgumentParser, name: str, *old: str, **kwargs) -> argparse.Action:
    """An option `name` that also answers to its former names `old`, deprecated for one release: they still
    work, print one warning line on stderr, and are marked in the help (and so in the README's reference)."""
    class Renamed(argparse._StoreAction):
        def __call__(self, p, namespace, values, option_string=None):
            if option_string in old:
                print(f"{p.prog}: warning: {option_string} is deprecated; use {name} (the name every kit command "
                      "uses; the old name goes in the next release)", file=sys.stderr)
            setattr(namespace, self.dest, values)

    kwargs.setdefault("dest", name.lstrip("-").replace("-", "_"))
    kwargs["help"] = f"{kwargs.get('help', '')} ({', '.join(old)}: deprecated alias)".lstrip()
    return parser.add_argument(name, *old, action=Renamed, **kwargs)


def deprecated_scale(flag: str):
    """An argparse type for --scale: an old scale name (small) still works as its new one (medium), with
    one warning line on stderr; the option's choices then check the new name."""
    def convert(value: str) -> str:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            new = scale_name(value, flag)
        for w in caught:
            print(f"warning: {w.message}", file=sys.stderr)
        return new

    convert.__name__ = "scale"
    return convert


def _made(made_by: str | None) -> str:
    return ("; make one with " + " or ".join(f"`{c}`" for c in made_by.split(" or "))) if made_by else ""


def _json_problem(path: Path) -> str | None:
    """None when `path` parses as JSON, else why not (one line)."""
    try:
        loads_strict(path.read_bytes(), str(path))
    except (ValueError, UnicodeDecodeError) as e:
        return f"not valid JSON ({one_line(e)})"
    except OSError as e:
        return f"cannot be read ({e.strerror or e})"
    return None


def _jsonl_problem(path: Path) -> str | None:
    """None when the first non-empty line of `path` is a JSON object (a JSON Lines file)."""
    try:
        with path.open("rb") as f:
            for line in f:
                if line.strip():
                    if not isinstance(loads_strict(line, str(path)), dict):
                        return "not JSON Lines (its first line is not a JSON object)"
                    return None
    except (ValueError, UnicodeDecodeError) as e:
        return f"not JSON Lines ({one_line(e)})"
    except OSError as e:
        return f"cannot be read ({e.strerror or e})"
    return None


class PathArg:
    """Base of the checkers. `kind` says what the walk test may feed it; `sample(path)` embeds a path
    in a value of this argument's syntax (HOME:ROOT, NAME=PATH, ...)."""

    kind = "input"  # "input": the path must exist; "output": it may be new
    wants_dir = False
    metavar = "FILE"

    def __init__(self, what: str, made_by: str | None = None):
        self.what, self.made_by = what, made_by
        self.__name__ = type(self).__name__  # argparse names a type in some messages

    def sample(self, path: str) -> str:
        return path

    def check(self, path: Path) -> None:
        raise NotImplementedError

    def __call__(self, text: str) -> str:
        try:
            self.check(Path(text))
        except OSError as e:  # a name over 255 bytes, a path over 4096, a folder we may not read: one line
            self.fail(Path(text), f"cannot be used ({e.strerror or e})")
        return text

    def fail(self, path: Path, problem: str):
        raise argparse.ArgumentTypeError(f"{path}: {problem}; expected {self.what}{_made(self.made_by)}")


class Dir(PathArg):
    """An existing folder; with `marker`, a file in it that must exist (and parse as JSON if .json)."""

    wants_dir = True
    metavar = "DIR"

    def __init__(self, what: str, made_by: str | None = None, marker: str | None = None,
                 keys: tuple[str, ...] = (), also: tuple[str, ...] = (), missing: str = "the folder does not exist",
                 any_of: tuple[str, ...] = (), not_this: str = "", json_if_present: tuple[str, ...] = ()):
        super().__init__(what, made_by)
        self.json_if_present = json_if_present
        self.marker, self.keys, self.also, self.missing = marker, keys, also, missing
        self.any_of, self.not_this = any_of, not_this  # entries of which one must exist, and what it is not then

    def check(self, path: Path) -> None:
        if not path.exists():
            self.fail(path, self.missing)
        if not path.is_dir():
            self.fail(path, "is a file, not a folder")
        if self.marker:
            m = path / self.marker
            if not m.is_file():
                self.fail(path, f"has no {self.marker}")
            if m.suffix == ".json":
                problem = _json_problem(m)
                if problem is None:
                    obj = json.loads(m.read_bytes())
                    if not isinstance(obj, dict):
                        problem = "not a JSON object"
                    elif missing := [k for k in self.keys if k not in obj]:
                        problem = f"missing its field(s) {', '.join(missing)}"
                if problem:
                    self.fail(path, f"its {self.marker} is {problem}")
        for name in self.also:
            if not (path / name).is_file():
                self.fail(path, f"has no {name}")
            if name.endswith(".json") and (problem := _json_problem(path / name)):
                self.fail(path, f"its {name} is {problem}")
        for name in self.json_if_present:
            if (path / name).is_file() and (problem := _json_problem(path / name)):
                self.fail(path, f"its {name} is {problem}")
        if self.any_of and not any((path / name).exists() for name in self.any_of):
            self.fail(path, f"{self.not_this} (it has none of {', '.join(self.any_of)})")


class EvidenceDir(Dir):
    """A folder of committed evidence: as Dir, and a path inside an archived folder of a runs directory
    (`runs/demo-superseded-X/demo-seed`) names that folder unpacked (kit/evidence/archive.py)."""

    def __call__(self, text: str) -> str:
        try:
            path = resolve(text)
        except ArchiveError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
        except OSError:  # a name too long, a folder that cannot be read: the checks below say so in one line
            path = Path(text)
        return super().__call__(str(path))


class StatusDir(Dir):
    """`kit status PATH`: as Dir, where PATH may also name an archived run (`runs/<archived folder>/...`) or a
    bare run id of `runs/` (kit.status.locate); the text is kept, so the report names the place given."""

    def __call__(self, text: str) -> str:
        from kit.status import locate  # noqa: PLC0415 - the checkpoint store (torch) only for `kit status`

        try:
            path = locate(Path(text))
        except ArchiveError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
        except OSError:
            path = Path(text)
        super().__call__(str(path))
        return text


class RunsSelection(Dir):
    """A runs folder, or a selection `DIR/GLOB` of its run ids (`'runs/medium-*'`): the folder must exist."""

    def check(self, path: Path) -> None:
        if any(ch in path.name for ch in "*?["):
            path = path.parent
        super().check(path)


class File(PathArg):
    """An existing file; `fmt` "json" or "jsonl" also checks that it parses, "xz" that it is xz-compressed."""

    def __init__(self, what: str, made_by: str | None = None, fmt: str | None = None):
        super().__init__(what, made_by)
        self.fmt = fmt

    def check(self, path: Path) -> None:
        if not path.exists():
            self.fail(path, "the file does not exist")
        if path.is_dir():
            self.fail(path, "is a folder, not a file")
        problem = None
        if self.fmt == "json" or (self.fmt == "json-if-suffix" and path.suffix == ".json"):
            problem = _json_problem(path)
        elif self.fmt == "jsonl":
            problem = _jsonl_problem(path)
        elif self.fmt == "xz":
            with open(path, "rb") as f:
                if f.read(6) != b"\xfd7zXZ\x00":
                    problem = "not an xz file (its first bytes are not the xz magic)"
        elif self.fmt == "allowed-signers":  # ssh-keygen ALLOWED SIGNERS: "principals [options] keytype key" lines
            lines = [ln.split() for ln in path.read_text(errors="replace").splitlines() if ln.strip()
                     and not ln.lstrip().startswith("#")]
            if not lines or not all(any(w.startswith(("ssh-", "ecdsa-", "sk-")) for w in ln[1:]) for ln in lines):
                problem = "not an ssh-keygen allowed-signers file (expected lines 'principal keytype key')"
        if problem:
            self.fail(path, f"is {problem}")


class FileOrDir(PathArg):
    """A file, or a folder holding `name` (e.g. config.json or a model folder)."""

    metavar = "PATH"

    def __init__(self, what: str, name: str, made_by: str | None = None):
        super().__init__(what, made_by)
        self.name = name

    def check(self, path: Path) -> None:
        if not path.exists():
            self.fail(path, "does not exist")
        target = path / self.name if path.is_dir() else path
        if not target.is_file():
            self.fail(path, f"has no {self.name}")
        problem = _json_problem(target)
        if problem:
            self.fail(path, f"{target.name} is {problem}")


class OutDir(PathArg):
    """A folder to write into: new, or an existing folder (never a file)."""

    kind = "output"
    wants_dir = True
    metavar = "DIR"

    def check(self, path: Path) -> None:
        if path.exists() and not path.is_dir():
            self.fail(path, "is a file, not a folder")
        for parent in path.parents:
            if parent.exists():
                if not parent.is_dir():
                    self.fail(path, f"{parent} is a file, not a folder")
                break


class OutFile(PathArg):
    """A file to write (or append to): new or an existing file (never a folder)."""

    kind = "output"

    def check(self, path: Path) -> None:
        if path.is_dir():
            self.fail(path, "is a folder, not a file")
        for parent in path.parents:
            if parent.exists():
                if not parent.is_dir():
                    self.fail(path, f"{parent} is a file, not a folder")
                break


class HomeRoot(PathArg):
    """HOME:FULL_ROOT (a commit of a checkpoint store), or with `seed_ok` also seed:DIR."""

    wants_dir = True

    def __init__(self, seed_ok: bool = False):
        super().__init__("HOME:FULL_ROOT (a checkpoint store and a 64-hex commit root" +
                         (") or seed:DIR" if seed_ok else ")"), "kit adaptive train")
        self.seed_ok = seed_ok
        self.metavar = "HOME:ROOT|seed:DIR" if seed_ok else "HOME:ROOT"
        self.store = Dir("a checkpoint store folder (HOME of HOME:FULL_ROOT)", "kit adaptive train",
                         any_of=("HEAD", "commits", "objects"), not_this="not a checkpoint store")
        self.seed = Dir("a seed folder (DIR of seed:DIR)", "kit seed build", marker="config.json")

    def sample(self, path: str) -> str:
        return f"{path}:{'0' * 64}"

    def check(self, path: Path) -> None:
        self.store.check(path)

    def __call__(self, text: str) -> str:
        home, sep, root = text.rpartition(":")
        if self.seed_ok and text.startswith("seed:"):
            self.seed.check(Path(text[len("seed:"):]))
            return text
        if not sep or not home or not ROOT_RE.fullmatch(root):
            raise argparse.ArgumentTypeError(f"{text!r}: expected {self.what}")
        self.store.check(Path(home))
        return text


class Named(PathArg):
    """NAME=VALUE where VALUE is checked by `inner` (a path, or HOME:FULL_ROOT)."""

    def __init__(self, inner: PathArg):
        super().__init__(inner.what, inner.made_by)
        self.inner, self.kind, self.wants_dir = inner, inner.kind, inner.wants_dir
        self.metavar = f"NAME={inner.metavar}"

    def sample(self, path: str) -> str:
        return f"x={self.inner.sample(path)}"

    def __call__(self, text: str) -> str:
        name, sep, value = text.partition("=")
        if not sep or not name or not value:
            raise argparse.ArgumentTypeError(f"{text!r}: expected NAME={self.inner.sample('PATH')}")
        self.inner(value)
        return text


# --- the kinds of path the subcommands share ---------------------------------------------------
def seed_dir() -> Dir:
    # tokenizer.json: every command that takes a seed loads its (fast) tokenizer; without the file
    # transformers' own message ("Couldn't instantiate the backend tokenizer ...") would be all one got
    return Dir("a seed folder (config.json, *.safetensors, tokenizer.json and tokenizer_config.json of a fast "
               "tokenizer)", "kit seed build or kit checkpoint export --tokenizer-from SEED", marker="config.json",
               also=("tokenizer.json",), json_if_present=("tokenizer_config.json", "special_tokens_map.json"))


def prepared_dir() -> Dir:
    return Dir("a prepared adaptive job (a folder with prepared.json)", "kit adaptive prepare",
               marker="prepared.json", keys=("format", "job_digest", "locations"), also=("adaptive-shards-inputs.json",))


def study_dir() -> Dir:
    return Dir("a prepared study folder (prepared/prepared.json)", "kit study prepare",
               marker="prepared/prepared.json", keys=("files", "contract"))


def store_dir() -> Dir:
    # what `kit.store` writes first (objects/, then commits/ and HEAD; docs/formats/checkpoint-store.md, "Checkpoint store")
    return Dir("a checkpoint store folder (objects/, commits/, HEAD)", "kit adaptive train or kit study arm",
               any_of=("HEAD", "commits", "objects"), not_this="not a checkpoint store")


# The contract kinds (the `kind` field; KIND of kit/adaptive/schema.py, continued_schema.py, study/schema.py,
# tests/test_cli_walk.py checks they agree) and the command that prepares each.
CONTRACT_COMMANDS = {"adaptive-shards": "kit adaptive prepare", "continued-learning": "kit continued prepare",
                     "shared-gradient-study": "kit study prepare"}


class ContractFile(File):
    """A contract JSON file of one of `kinds`; one of another known kind is refused with the command it is for
    (a study contract given to `kit adaptive prepare` would otherwise meet "unknown field 'arms'")."""

    def __init__(self, kinds: tuple[str, ...]):
        super().__init__(f"a contract of kind {' or '.join(kinds)} (contracts/*.json)", None, fmt="json")
        self.kinds = kinds

    def check(self, path: Path) -> None:
        super().check(path)
        obj = loads_strict(path.read_bytes(), str(path))
        kind = obj.get("kind") if isinstance(obj, dict) else None
        if isinstance(kind, str) and kind in CONTRACT_COMMANDS and kind not in self.kinds:
            self.fail(path, f"is a contract of kind {kind} (its field 'kind'): give it to `{CONTRACT_COMMANDS[kind]}`")


def contract_file(kinds: tuple[str, ...] = ("adaptive-shards",)) -> ContractFile:
    return ContractFile(kinds)


def public_source_file() -> File:
    return File("the pinned public source, a JSON list (data/alpaca_5000.json)", None, fmt="json")


def name_metavars(parser: argparse.ArgumentParser) -> None:
    """Options without a metavar get one from their type: DIR, FILE, HOME:ROOT, NAME=FILE, N, X."""
    for action in parser._actions:
        if action.metavar is None and action.option_strings and action.nargs != 0 and not action.choices:
            action.metavar = (action.type.metavar if isinstance(action.type, PathArg) else
                              "N" if action.type is int else "X" if action.type is float else None)


def leaf_parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """(words, parser) for every leaf subcommand, e.g. (("adaptive", "train"), <parser>)."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield path, parser
        return
    for name, sp in subs[0].choices.items():
        yield from leaf_parsers(sp, path + (name,))


def print_error(prog: str, message) -> int:
    print(f"{prog}: error: {printable(one_line(message))}", file=sys.stderr)
    return 2


# C0 and C1 controls (ESC starts a terminal's control sequence, CSI is U+009B), DEL, and the bidirectional overrides
# and isolates that reorder what a terminal shows ("Trojan source"); a tab is kept
_UNPRINTABLE = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """`text` safe to print on a terminal: each control or bidi character written as its Python escape
    (`\\x1b`, `\\u202e`), so a record's text can neither move the cursor, retitle the window nor hide itself.
    Applied line by line (the newlines between lines stay)."""
    def escaped(m: re.Match) -> str:
        code = ord(m.group(0))
        return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"

    return "\n".join(_UNPRINTABLE.sub(escaped, line) for line in str(text).split("\n"))
