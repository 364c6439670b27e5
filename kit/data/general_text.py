"""General English text for the small seed, carried in the repository and re-derivable from a Debian package.

The GPU host has no package index, so the text travels as `data/python3.11-doc.jsonl.xz`: the
reStructuredText sources of Debian's `python3.11-doc`, one JSON line per file (licence and origin in
data/SOURCE.md). The decision to know: `derive(deb, out)` rebuilds that file deterministically with
the standard library only (`make general-text` checks it), and `load_documents` refuses a file
whose digest is not the pinned one before any work starts.
"""

from __future__ import annotations

import hashlib
import io
import json
import lzma
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

from kit.record import ContractError, Record, spec_field

PACKAGE = "python3.11-doc"
VERSION = "3.11.2-6+deb12u9"
DISTRIBUTION = "Debian 12 (bookworm) security/updates, architecture all"
LICENCE = "PSF-2.0 (Python Software Foundation License Agreement; code examples 0BSD)"
PACKAGE_FILE = f"{PACKAGE}_{VERSION}_all.deb"
PACKAGE_SHA256 = "5b3594189d6ef9a6963ce0347fd307a1cc67620ad697e144db366070e2e146be"
SOURCES_PREFIX = "usr/share/doc/python3.11/html/_sources/"
TEXT_FILE = "data/python3.11-doc.jsonl.xz"
TEXT_SHA256 = "8d67f9a7651709fbf1f4effc6e93eed402dd4f5c6a9b3b41e48bf7d59da15311"  # sha256 of the uncompressed JSONL (the text itself)
TEXT_XZ_SHA256 = "cc2fd32e68334fdd7f43d8ab3a6ef9bd503200a0473790daa3ce215ff5e400ae"  # sha256 of the committed .xz file



@dataclass(frozen=True, slots=True, kw_only=True)
class TextDocument(Record):
    """One line of the general-text JSONL: a documentation page of the package, as text."""

    path: str = spec_field(str, doc="its path under the package's sources, the sort key")
    text: str = spec_field(str, doc="its text")

def _ar_member(deb: bytes, name_prefix: str) -> tuple[str, bytes]:
    """The first member of an `ar` archive (a .deb) whose name starts with `name_prefix`."""
    if not deb.startswith(b"!<arch>\n"):
        raise ValueError("not a Debian package (ar archive): missing the '!<arch>' magic")
    pos = 8
    while pos + 60 <= len(deb):
        header = deb[pos:pos + 60]
        name = header[:16].decode("ascii").strip().rstrip("/")
        size = int(header[48:58].decode("ascii").strip())
        body = deb[pos + 60:pos + 60 + size]
        if name.startswith(name_prefix):
            return name, body
        pos += 60 + size + (size % 2)
    raise ValueError(f"the package has no {name_prefix}* member")


def documents_from_deb(deb_path: str | Path) -> list[TextDocument]:
    """Every reStructuredText source in the package, sorted by path."""
    name, body = _ar_member(Path(deb_path).read_bytes(), "data.tar")
    if not name.endswith(".xz"):
        raise ValueError(f"{deb_path}: data member {name!r}; expected data.tar.xz")
    docs: list[TextDocument] = []
    with tarfile.open(fileobj=io.BytesIO(lzma.decompress(body)), mode="r:") as tar:
        for member in tar.getmembers():
            path = member.name.removeprefix("./")
            if member.isfile() and path.startswith(SOURCES_PREFIX) and path.endswith(".rst.txt"):
                data = tar.extractfile(member)
                assert data is not None, "a regular file member (isfile above) has data"
                text = data.read().decode("utf-8")
                docs.append(TextDocument(path=path[len(SOURCES_PREFIX):], text=text))
    if not docs:
        raise ValueError(f"{deb_path}: no {SOURCES_PREFIX}*.rst.txt files")
    return sorted(docs, key=lambda d: d.path)


def jsonl_bytes(docs: list[TextDocument]) -> bytes:
    return b"".join(json.dumps(d.to_json(), ensure_ascii=False, sort_keys=True).encode("utf-8") + b"\n"
                    for d in docs)


def derive(deb_path: str | Path, out_path: str | Path) -> dict:
    """Write the xz JSONL from the package; returns the three digests and the counts."""
    data = jsonl_bytes(documents_from_deb(deb_path))
    packed = lzma.compress(data, format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC64, preset=9)
    Path(out_path).write_bytes(packed)
    return {"package_sha256": hashlib.sha256(Path(deb_path).read_bytes()).hexdigest(),
            "text_sha256": hashlib.sha256(data).hexdigest(), "xz_sha256": hashlib.sha256(packed).hexdigest(),
            "documents": data.count(b"\n"), "text_bytes": len(data), "xz_bytes": len(packed)}


def provenance() -> dict:
    """What a build record says about the general text."""
    return {"package": PACKAGE, "version": VERSION, "distribution": DISTRIBUTION, "licence": LICENCE,
            "package_file": PACKAGE_FILE, "package_sha256": PACKAGE_SHA256, "extracted": f"{SOURCES_PREFIX}**/*.rst.txt",
            "file": TEXT_FILE, "text_sha256": TEXT_SHA256, "xz_sha256": TEXT_XZ_SHA256,
            "rederive": "make general-text"}


def load_documents(path: str | Path, expected_text_sha256: str = TEXT_SHA256) -> list[TextDocument]:
    """The documents of the committed file, refused (ValueError naming the file) unless the text's
    sha256 is `expected_text_sha256`."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: general text file not found; expected {TEXT_FILE} from the repository "
                         f"(re-derive it with `make general-text`)")
    try:
        data = lzma.decompress(path.read_bytes())
    except lzma.LZMAError as e:
        raise ValueError(f"{path}: not an xz file ({e})") from None
    got = hashlib.sha256(data).hexdigest()
    if got != expected_text_sha256:
        raise ValueError(f"{path}: sha256 of the uncompressed text is {got}; expected {expected_text_sha256} "
                         f"({PACKAGE} {VERSION}, data/SOURCE.md)")
    docs: list[TextDocument] = []
    for i, line in enumerate(data.decode("utf-8").splitlines()):
        try:
            docs.append(TextDocument.from_json(json.loads(line), f"{path}: line {i + 1}"))
        except ContractError:
            raise ValueError(f"{path}: line {i + 1}: expected {{'path', 'text'}}") from None
    return docs


if __name__ == "__main__":  # python -m kit.data.general_text DEB OUT
    if len(sys.argv) != 3:
        sys.exit("usage: python -m kit.data.general_text PACKAGE.deb OUT.jsonl.xz")
    print(json.dumps(derive(sys.argv[1], sys.argv[2]), indent=2, sort_keys=True))
