"""The migration guides as data: sections and fenced blocks of each `migration-guides/<NN-name>/README.md` (pure).

The convention the guides follow (documented for their readers in migration-guides/README.md):

* Six level-2 sections, in this order: What changes, Before you begin, Steps, Verify, Roll back, Troubleshooting.
* ```` ```sh ```` blocks are commands; the tests run them in document order, each as one `bash -euo pipefail`
  script from the repository root, with the placeholders (`$NODE`, `$NS`, ...) set in the environment. Words after
  the language are attributes:
  - `id=NAME`: the tests check the cluster (and the block's output) after this block;
  - `exit=N`: the exit status the block ends with (default 0; `bridge migrate-report` exits 1 on blockers);
  - `variant=NAME`: only for one setup (e.g. `standalone` for NVIDIA's standalone device-plugin chart);
  - `real-backend=REASON`: needs real nodes (containers, their logs, exec, port-forward, a DaemonSet controller):
    not run against the stand-in sandbox but by tests/guides/test_real_cluster.py, on the real backend;
  - `real-cluster-only=REASON`: run by no test, for a reason only a user's own cluster can meet.
  Both reasons come from the lists in migration-guides/README.md (tests/guides/test_format.py holds the lists and the
  README to each other).
* ```` ```text ```` blocks are sample output, never run. No other block languages: manifests are files in the
  guide's folder, applied by a command.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GUIDES = REPO / "migration-guides"
SECTIONS = ("What changes", "Before you begin", "Steps", "Verify", "Roll back", "Troubleshooting")
LANGUAGES = ("sh", "text")
ATTRIBUTES = ("id", "exit", "variant", "real-backend", "real-cluster-only")
_FENCE = re.compile(r"^(\s*)```(.*)$")


class GuideFormatError(ValueError):
    """A guide does not follow the convention; the message names the file and line."""


@dataclass(frozen=True)
class Block:
    guide: str  # folder name, e.g. "01-first-node"
    section: str  # the level-2 section it is in
    heading: str  # the nearest heading above it (any level)
    line: int  # 1-based line of the opening fence
    language: str
    attrs: dict[str, str]
    text: str
    before: str  # the prose between the previous block (or heading) and this one

    @property
    def id(self) -> str | None:
        return self.attrs.get("id")

    @property
    def exit(self) -> int:
        return int(self.attrs.get("exit", "0"))

    @property
    def variant(self) -> str | None:
        return self.attrs.get("variant")

    @property
    def real_backend(self) -> str | None:
        return self.attrs.get("real-backend")

    @property
    def real_cluster_only(self) -> str | None:
        return self.attrs.get("real-cluster-only")

    @property
    def where(self) -> str:
        return f"migration-guides/{self.guide}/README.md:{self.line}"

    def runs_in(self, variant: str) -> bool:
        """Whether the tests run this block against the sandbox in a run of `variant`."""
        return (self.language == "sh" and self.real_cluster_only is None and self.real_backend is None
                and self.variant in (None, variant))


@dataclass(frozen=True)
class Guide:
    name: str
    path: Path
    title: str
    sections: tuple[str, ...]
    blocks: tuple[Block, ...] = field(default_factory=tuple)

    @property
    def folder(self) -> Path:
        return self.path.parent

    def commands(self) -> list[Block]:
        return [b for b in self.blocks if b.language == "sh"]

    def block(self, block_id: str) -> Block:
        found = [b for b in self.blocks if b.id == block_id]
        if len(found) != 1:
            raise KeyError(f"{self.name}: {len(found)} blocks with id={block_id}")
        return found[0]

    def manifests(self) -> list[Path]:
        return sorted(self.folder.glob("*.yaml"))


def parse_attrs(info: str, where: str) -> tuple[str, dict[str, str]]:
    words = info.split()
    if not words:
        raise GuideFormatError(f"{where}: a fenced block without a language (use sh or text)")
    language, attrs = words[0], {}
    for word in words[1:]:
        key, sep, value = word.partition("=")
        if not sep or not value or key not in ATTRIBUTES:
            raise GuideFormatError(f"{where}: unknown block attribute {word!r} (known: "
                                   f"{', '.join(a + '=...' for a in ATTRIBUTES)})")
        if key in attrs:
            raise GuideFormatError(f"{where}: attribute {key} given twice")
        if key == "exit" and not value.isdigit():
            raise GuideFormatError(f"{where}: exit={value!r} is not an exit status")
        attrs[key] = value
    if language not in LANGUAGES:
        raise GuideFormatError(f"{where}: block language {language!r}: guides use sh (commands) and text "
                               "(sample output); manifests are files in the guide's folder")
    if language == "text" and attrs:
        raise GuideFormatError(f"{where}: text blocks take no attributes")
    return language, attrs


def parse(text: str, name: str, path: Path) -> Guide:
    title, section, heading = "", "", ""
    sections: list[str] = []
    blocks: list[Block] = []
    prose: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        fence = _FENCE.match(line)
        if fence:
            where = f"migration-guides/{name}/README.md:{i + 1}"
            indent, info = fence.groups()
            language, attrs = parse_attrs(info, where)
            body: list[str] = []
            i += 1
            while i < len(lines) and not re.match(rf"^{indent}```\s*$", lines[i]):
                body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
                i += 1
            if i == len(lines):
                raise GuideFormatError(f"{where}: the block is never closed")
            if not section:
                raise GuideFormatError(f"{where}: a block before the first section")
            blocks.append(Block(name, section, heading, int(where.rsplit(":", 1)[1]), language, attrs,
                                "\n".join(body) + "\n", "\n".join(prose).strip()))
            prose = []
            i += 1
            continue
        if line.startswith("# ") and not title:
            title = line[2:].strip()
        elif line.startswith("## "):
            section = heading = line[3:].strip()
            sections.append(section)
            prose = []
        elif line.startswith("### ") or line.startswith("#### "):
            heading = line.lstrip("#").strip()
            prose = []
        else:
            prose.append(line)
        i += 1
    return Guide(name, path, title, tuple(sections), tuple(blocks))


def load(name: str) -> Guide:
    path = GUIDES / name / "README.md"
    return parse(path.read_text(), name, path)


def guide_names() -> list[str]:
    return sorted(p.name for p in GUIDES.iterdir() if p.is_dir() and re.match(r"^\d\d-", p.name))


def check_structure(guide: Guide) -> list[str]:
    """Problems with the guide's shape: the six sections in order, unique block ids."""
    problems = []
    if tuple(guide.sections) != SECTIONS:
        problems.append(f"{guide.name}: sections are {list(guide.sections)}, expected {list(SECTIONS)}")
    ids = [b.id for b in guide.blocks if b.id]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        problems.append(f"{guide.name}: block ids used twice: {dupes}")
    if not guide.title:
        problems.append(f"{guide.name}: no title (a level-1 heading)")
    return problems
