"""Docstrings, comments and the documentation cite only what a reader of the repository can open.

Covers: no ``.py`` file under ``hami_web/``, ``tests/`` or ``benchmarks/`` and no Markdown file of the repository
points at the specification or the issue tracker this repository does not hold (the spec file, the word on its own,
issue numbers, the design seeds); every page a ``.py`` file cites (``README.md``, ``docs/<page>.md``, or a bare
``<page>.md`` of ``docs/``) exists, and every ``#anchor`` after it is a heading of that page, as GitHub derives
anchors from headings (compared without case, as GitHub resolves them); every relative link of every Markdown file
(the README, ``docs/``, the chart's) resolves the same way, relative to the file.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE_DIRECTORIES = ("hami_web", "tests", "benchmarks")
# Not the repository's own Markdown: virtualenvs, caches, installed packages.
SKIPPED = (".venv", ".git", ".mypy_cache", ".ruff_cache", "node_modules", "build", "dist", ".pytest_cache")

# What a docstring must not point at: the specification file or its sections (the word on its own in prose, so the
# identifiers ``_SPEC_ORDER``, ``SPEC_FLAGS``, a family module's ``SPEC = FamilySpec(…)`` or ``nvidia.SPEC`` do not
# count), an issue number, a design seed file.
OUTSIDE = re.compile(r"SPEC\.md|(?<![.\w])SPEC\b(?!\s*[=:,)\[]|\s*$)|\bissue [0-9]|\bseeds/[0-9]")
# A cited page, optionally with a section: docs/performance.md#scale, docs/wire-formats.md#handshake, wire-formats.md.
CITATION = re.compile(r"(?<![\w/.-])((?:docs/)?[\w-]+\.md)(#[\w-]+)?")
# A relative Markdown link: [text](../README.md#scale), [text](docs/wire-formats.md), [text](#handshake).
MARKDOWN_LINK = re.compile(r"\]\(((?:\.\./)*[\w/.-]*?\.md)?(#[\w-]+)?\)")
FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def _sources() -> Iterator[Path]:
    for directory in SOURCE_DIRECTORIES:
        yield from sorted((ROOT / directory).rglob("*.py"))


def _markdown() -> Iterator[Path]:
    """Every Markdown file of the repository (not of a virtualenv or a cache)."""
    for path in sorted(ROOT.rglob("*.md")):
        if not any(part in SKIPPED or part.endswith(".egg-info") for part in path.relative_to(ROOT).parts):
            yield path


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


def _resolve(page: str, relative_to: Path | None) -> Path:
    """The file a cited page names: a Markdown link's relative to its file's folder (``relative_to``); in a ``.py``
    file (``relative_to`` None), ``README.md`` and ``docs/…`` from the repository root, a bare page in docs/."""
    if relative_to is not None:
        return (relative_to / page).resolve()
    if page == "README.md" or page.startswith("docs/"):
        return ROOT / page
    return ROOT / "docs" / page


def _broken(page: str, anchor: str | None, relative_to: Path | None, cache: dict[Path, set[str]]) -> str:
    """Why a citation does not resolve, or "" when it does."""
    path = _resolve(page, relative_to)
    if not path.is_file():
        return f"{page}: no such page"
    if anchor is None:
        return ""
    if path not in cache:
        cache[path] = anchors(path)
    return "" if anchor[1:].lower() in cache[path] else f"{page}{anchor}: no such section"


def test_github_anchor_matches_githubs_rule() -> None:
    assert github_anchor("The admission webhook (`POST /webhook`)") == "the-admission-webhook-post-webhook"
    assert github_anchor("Compatibility with HAMi v2.10") == "compatibility-with-hami-v210"
    assert github_anchor("High availability (active and standby)") == "high-availability-active-and-standby"


def test_the_outside_pattern_tells_prose_from_identifiers() -> None:
    assert OUTSIDE.search("checked in SPEC order") and OUTSIDE.search("issue 41")
    assert not any(OUTSIDE.search(code) for code in ("SPEC = FamilySpec(", "SPEC: FamilySpec[int] = x",
                                                      "    nvidia.SPEC,", "SPEC_FLAGS", "_SPEC_ORDER"))


def test_anchors_are_compared_without_case(tmp_path: Path) -> None:
    page = tmp_path / "topic.markdown"
    page.write_text("# Page\n\n## Namespace quotas\n", encoding="utf-8")
    assert _broken(page.name, "#Namespace-Quotas", tmp_path, {}) == ""
    assert _broken(page.name, "#quotas", tmp_path, {}) == f"{page.name}#quotas: no such section"


def test_no_source_file_cites_a_document_outside_the_repository() -> None:
    offenders = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
                 for path in (*_sources(), *_markdown())
                 if path != Path(__file__).resolve()  # this file spells the patterns out
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
                if why := _broken(match.group(1), match.group(2), None, cache):
                    problems.append(f"{path.relative_to(ROOT)}:{number}: {why}")
    for page in _markdown():
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
