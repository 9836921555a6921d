"""The repository explains itself, and what it says stays true.

* Nothing tracked in the repository points at a file outside it (the engineers' design notes are not shipped):
  docstrings cite upstream repositories and files, or docs/architecture.md.
* Every repository path the docs name (docs/architecture.md, the READMEs; relative to the document or to the
  repository root) exists, and every `file::test` they name is a test in that file. A line that marks its subject
  as not on main yet ("[issue N") is exempt until it lands.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "docs" / "architecture.md", ROOT / "README.md", ROOT / "charts" / "dra-bridge" / "README.md"]
# Built from parts so this file does not match itself.
_OUTSIDE = re.compile("|".join([
    r"\.\./" + "shared", "/work/" + "shared", r"\breference/[a-z-]+\." + "md",
    r"\b(?:ARCHI" + r"TECTURE|ST" + r"YLE)\.md", r"\b(?:kubelet-grpc|limits-and-timeouts|dra-landscape|"
    r"cdi-and-runtimes)\." + "md", "architecture " + "brief",
]))
_PATH = re.compile(r"(?<![\w/.<-])((?:bridge|tests|charts|docs|examples|bench|scripts|proto)/[\w./-]*[\w/])"
                   r"(?:::(\w+))?")
_NOT_YET = re.compile(r"\[issues? \d+")


def tracked_files() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: cannot list the tracked files")
    return [ROOT / p for p in out.decode().split("\0") if p]


def test_nothing_in_the_repository_points_outside_it() -> None:
    hits = []
    for path in tracked_files():
        if path.suffix in {".png", ".gz", ".whl"} or not path.is_file():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if _OUTSIDE.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()[:120]}")
    assert not hits, "cite the upstream source or docs/architecture.md instead:\n" + "\n".join(hits)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_path_and_test_the_docs_name_exists(doc: Path) -> None:
    missing = []
    for n, line in enumerate(doc.read_text().splitlines(), 1):
        if _NOT_YET.search(line):
            continue
        for path, test in _PATH.findall(line):
            target = next((base / path for base in (doc.parent, ROOT) if (base / path).exists()), ROOT / path)
            if not target.exists():
                missing.append(f"{doc.name}:{n}: {path}")
            elif test and not re.search(rf"^(?:async )?def {test}\(", target.read_text(), re.M):
                missing.append(f"{doc.name}:{n}: {path}::{test}")
    assert not missing, "\n".join(missing)


def test_the_readme_says_how_many_tests_the_suite_has(request: pytest.FixtureRequest) -> None:
    """The README's "about N tests" stays within 5% of what a whole-suite run collects (checked only in such a run:
    a run of some files or with -k/-m collects fewer)."""
    found = re.search(r"whole pytest suite \(about ([\d,]+) tests\)", (ROOT / "README.md").read_text())
    assert found, "README.md: the sentence with the suite's size moved"
    said = int(found.group(1).replace(",", ""))
    config = request.config
    whole = (not config.option.keyword and not config.option.markexpr
             and [str(a) for a in config.args] in ([], ["tests"], [str(ROOT / "tests")]))
    if not whole:
        pytest.skip("not a whole-suite run: the collected count is not the suite's")
    collected = len(request.session.items)
    assert abs(collected - said) <= said * 0.05, f"README says about {said} tests, the suite has {collected}"
