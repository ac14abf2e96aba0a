"""The documentation's links and code paths resolve.

Every relative link in README.md, docs/*.md, examples/README.md and bench/README.md names a
file or folder of the repository, and a ``#anchor`` into a Markdown page names one of its
headings (GitHub's slugs). Every repository path written in backticks in docs/concepts.md
(``engine/plan/planner.py``, ``modules/stem/``) names an existing file or folder, as
written: a module that became a package (or moved) must be renamed on the page too.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted(
    [
        ROOT / "README.md",
        *(ROOT / "docs").glob("*.md"),
        ROOT / "examples" / "README.md",
        ROOT / "bench" / "README.md",
    ]
)
CONCEPTS = ROOT / "docs" / "concepts.md"

_FENCE = re.compile(r"^\s*(```|~~~)")
_INLINE_CODE = re.compile(r"(`+)(.+?)\1")
#: ``[text](target)`` and ``![alt](target)``; a target may carry a "title".
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
#: ``[label]: target`` reference definitions.
_REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
#: A repository path in a code span: a top folder of the project, then a module or folder.
_CODE_PATH = re.compile(
    r"(?<![\w./])((?:engine|modules|router|sources|eddies_main|tests|bench|examples|docs)"
    r"/(?:[\w.-]+/)*(?:[\w-]+\.py|[\w-]+/|[\w.-]+\.md))"
)


def _outside_fences(path: Path) -> list[str | None]:
    """The page's lines, with each line of a fenced code block (fences included) as None."""
    lines: list[str | None] = []
    fenced = False
    for line in path.read_text().splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            lines.append(None)
        else:
            lines.append(None if fenced else line)
    return lines


def _prose(path: Path) -> str:
    """The page without code: fenced blocks blanked (line numbers kept), code spans removed."""
    return "\n".join(_INLINE_CODE.sub("", line or "") for line in _outside_fences(path))


def _code_spans(path: Path) -> list[tuple[int, str]]:
    """``(line number, text)`` of the inline code spans outside fenced code blocks."""
    return [
        (number, m.group(2))
        for number, line in enumerate(_outside_fences(path), 1)
        if line
        for m in _INLINE_CODE.finditer(line)
    ]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: inline markup dropped, lower case, punctuation
    removed (letters, marks, digits, ``_``, ``-`` and spaces kept), spaces to ``-``."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = re.sub(r"<[^>]+>", "", text).lower()
    kept = (
        ch
        for ch in text
        if ch in " -_" or unicodedata.category(ch)[0] in "LMN" or unicodedata.category(ch) == "Pc"
    )
    return "".join(kept).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown page (repeats get GitHub's ``-1``, ``-2``...)."""
    seen: dict[str, int] = {}
    found = set()
    for line in _outside_fences(path):
        match = _HEADING.match(line or "")
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def _links(path: Path) -> list[tuple[int, str]]:
    """``(line, target)`` of every link on the page outside code (inline and reference)."""
    prose = _prose(path)
    found = [(prose.count("\n", 0, m.start()) + 1, m.group(1)) for m in _LINK.finditer(prose)]
    for number, line in enumerate(prose.splitlines(), 1):
        reference = _REFERENCE.match(line)
        if reference:
            found.append((number, reference.group(1)))
    return found


def _is_external(target: str) -> bool:
    return bool(re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I)) or target.startswith("//")


def broken_links(path: Path) -> list[str]:
    """The relative links of ``path`` that name no file, folder or heading."""
    broken = []
    for number, target in _links(path):
        if not target or _is_external(target):
            continue
        file_part, _, anchor = target.partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path
        where = f"{_shown(path)}:{number}: {target}"
        if not resolved.exists():
            broken.append(f"{where} (no such file)")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{where} (no heading #{anchor} in {_shown(resolved)})")
    return broken


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def module_exists(relative: str) -> bool:
    """A path names an existing file (``x.py``) or folder (``x/``) of the repository."""
    path = ROOT / relative
    return path.is_dir() if relative.endswith("/") else path.is_file()


def code_paths(path: Path) -> list[tuple[int, str]]:
    """``(line, path)`` of every repository path written inside a code span of ``path``."""
    return [(n, m.group(1)) for n, span in _code_spans(path) for m in _CODE_PATH.finditer(span)]


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_relative_links_resolve(page: Path) -> None:
    broken = broken_links(page)
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_concepts_code_paths_exist() -> None:
    missing = [f"line {n}: {p}" for n, p in code_paths(CONCEPTS) if not module_exists(p)]
    assert not missing, "docs/concepts.md names paths that do not exist:\n" + "\n".join(missing)


def test_docs_have_an_index_that_links_every_page() -> None:
    index = ROOT / "docs" / "README.md"
    linked = {(index.parent / t.partition("#")[0]).resolve() for _, t in _links(index)}
    pages = {p.resolve() for p in (ROOT / "docs").glob("*.md") if p.name != "README.md"}
    unlinked = sorted(p.name for p in pages - linked)
    assert not unlinked, f"docs/README.md does not link {unlinked}"


def test_slugs_follow_github() -> None:
    assert slug("STAIRs — `modules/stair.py`, `engine/join_state.py`") == (
        "stairs--modulesstairpy-enginejoin_statepy"
    )
    assert slug("Placement: driver or executors") == "placement-driver-or-executors"
    assert slug("Windows: SteMs that forget (stems-2003 §2.3; CACQ)") == (
        "windows-stems-that-forget-stems-2003-23-cacq"
    )
    assert slug("Exactly-once at the eddy, across restarts: durable state") == (
        "exactly-once-at-the-eddy-across-restarts-durable-state"
    )


def test_the_checker_finds_what_is_broken(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other page\n\n## A `code` heading\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n[fine](other.md#a-code-heading), [own](#page), [web](https://x.org/y),\n"
        "[no file](missing.md), [no heading](other.md#nowhere), [split\nlink](gone.md)\n\n"
        "```\n[in a fence](ignored.md)\n```\n`[in code](ignored.md)`\n"
    )
    broken = broken_links(page)
    assert [entry.split(": ", 1)[1] for entry in broken] == [
        "missing.md (no such file)",
        f"other.md#nowhere (no heading #nowhere in {tmp_path / 'other.md'})",
        "gone.md (no such file)",
    ]
    assert module_exists("modules/selection.py") and module_exists("engine/plan/")
    assert not module_exists("engine/plan.py")  # the package engine/plan/, as a file's name
    assert not module_exists("modules/stem.py/")
    assert not module_exists("modules/no_such_module.py")
