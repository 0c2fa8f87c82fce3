"""Docstrings and comments cite only what a reader of the repository can open.

Covers: no ``.py`` file under ``hami_web/`` or ``tests/`` points at the specification or the issue tracker this
repository does not hold (the spec file, its numbered sections, issue numbers, the design seeds); every page cited
(``README.md``, ``docs/<page>.md``, or a bare ``<page>.md`` of ``docs/``) exists, and every ``#anchor`` after it is a
heading of that page, as GitHub derives anchors from headings. The links between the ``docs/`` pages and the README
are checked the same way.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE_DIRECTORIES = ("hami_web", "tests")

# What a docstring must not point at: the specification file or its sections (the word on its own in prose, so the
# identifiers ``_SPEC_ORDER``, ``SPEC_FLAGS``, a family module's ``SPEC = FamilySpec(…)`` or ``nvidia.SPEC`` do not
# count), an issue number, a design seed file.
OUTSIDE = re.compile(r"SPEC\.md|(?<![.\w])SPEC\b(?!\s*[=:,)\[]|\s*$)|\bissue [0-9]|\bseeds/[0-9]")
# A cited page, optionally with a section: README.md#scale, docs/wire-formats.md#handshake, wire-formats.md.
CITATION = re.compile(r"(?<![\w/.-])((?:docs/)?[\w-]+\.md)(#[\w-]+)?")
# A relative Markdown link in a docs page: [text](../README.md#scale), [text](wire-formats.md), [text](#handshake).
MARKDOWN_LINK = re.compile(r"\]\(((?:\.\./)?[\w/.-]*?\.md)?(#[\w-]+)?\)")
FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def _sources() -> Iterator[Path]:
    for directory in SOURCE_DIRECTORIES:
        yield from sorted((ROOT / directory).rglob("*.py"))


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped (``-`` and ``_`` kept), spaces to ``-``."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading anchor of a Markdown page, fenced code blocks skipped, repeated headings numbered as GitHub."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        match = None if fenced else HEADING.match(line)
        if match:
            anchor = github_anchor(match.group(2))
            count = seen.get(anchor, 0)
            seen[anchor] = count + 1
            found.add(anchor if count == 0 else f"{anchor}-{count}")
    return found


def _resolve(page: str, relative_to: Path) -> Path:
    """The file a cited page names: ``README.md`` and ``docs/…`` from the repository root, a bare page in docs/."""
    if page.startswith("../"):
        return (relative_to / page).resolve()
    if page == "README.md" or page.startswith("docs/"):
        return ROOT / page
    return ROOT / "docs" / page


def _broken(page: str, anchor: str | None, relative_to: Path, cache: dict[Path, set[str]]) -> str:
    """Why a citation does not resolve, or "" when it does."""
    path = _resolve(page, relative_to)
    if not path.is_file():
        return f"{page}: no such page"
    if anchor is None:
        return ""
    if path not in cache:
        cache[path] = anchors(path)
    return "" if anchor[1:] in cache[path] else f"{page}{anchor}: no such section"


def test_github_anchor_matches_githubs_rule() -> None:
    assert github_anchor("The admission webhook (`POST /webhook`)") == "the-admission-webhook-post-webhook"
    assert github_anchor("Compatibility with HAMi v2.10") == "compatibility-with-hami-v210"
    assert github_anchor("High availability (active and standby)") == "high-availability-active-and-standby"


def test_the_outside_pattern_tells_prose_from_identifiers() -> None:
    assert OUTSIDE.search("checked in SPEC order") and OUTSIDE.search("issue 41")
    assert not any(OUTSIDE.search(code) for code in ("SPEC = FamilySpec(", "SPEC: FamilySpec[int] = x",
                                                      "    nvidia.SPEC,", "SPEC_FLAGS", "_SPEC_ORDER"))


def test_no_source_file_cites_a_document_outside_the_repository() -> None:
    offenders = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
                 for path in _sources() if path != Path(__file__).resolve()  # this file spells the patterns out
                 for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
                 if OUTSIDE.search(line)]
    assert not offenders, ("cite the README section or a docs/ page instead of the specification or an issue:\n"
                           + "\n".join(offenders))


def test_every_cited_page_and_section_exists() -> None:
    cache: dict[Path, set[str]] = {}
    problems = []
    for path in _sources():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            for match in CITATION.finditer(line):
                if why := _broken(match.group(1), match.group(2), ROOT, cache):
                    problems.append(f"{path.relative_to(ROOT)}:{number}: {why}")
    for page in sorted((ROOT / "docs").glob("*.md")):
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), start=1):
            for match in MARKDOWN_LINK.finditer(line):
                target, anchor = match.group(1), match.group(2)
                if target is None and anchor is None:
                    continue
                cited = target or page.name
                why = _broken(cited, anchor, page.parent, cache)
                if why:
                    problems.append(f"{page.relative_to(ROOT)}:{number}: {why}")
    assert not problems, "\n".join(problems)
