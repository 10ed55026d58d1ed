"""Every relative link and #anchor in every Markdown file of the repository resolves.

A user reads these files on GitHub (or in a clone): a link to a file that moved, or to a
section that was renamed or never written (examples/tensorflow/ps.yaml once pointed at an
operator.md "Default PS server" section that did not exist), is a broken promise.

Anchors follow GitHub's slugs: the heading's text as rendered (code spans and link text
kept, markup dropped), lowercased, every character that is not a letter, digit, space, `-`
or `_` removed, spaces turned into `-`; a repeated slug gets `-1`, `-2`, ... Links are
read outside fenced code blocks and code spans, as Markdown renders them. (A regular
expression over our Markdown subset: no Markdown parser is among the project's
dependencies, and these files use inline links only.)
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from urllib.parse import unquote

import pytest

REPO = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
LINK = re.compile(r"(?<!\\)!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
SCHEMES = ("http://", "https://", "mailto:", "ftp://")


def markdown_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "*.md"], cwd=REPO, capture_output=True,
                            text=True, check=True).stdout.split()
    return [REPO / p for p in listed if (REPO / p).exists()]


def _prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks."""
    out, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append(line)
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's Markdown text."""
    text = CODE_SPAN.sub(lambda m: m.group(2), heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link: its text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = re.sub(r"(\*\*|__|\*|_(?=\w)|(?<=\w)_)", lambda m: m.group(0)
                  if m.group(0) == "_" else "", text)
    text = text.strip().lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out: set[str] = set()
    for line in _prose_lines(path.read_text()):
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        out.add(base if count == 0 else f"{base}-{count}")
    for name in re.findall(r"<a\s+(?:name|id)=\"([^\"]+)\"", path.read_text()):
        out.add(name)
    return out


def links(path: Path) -> list[tuple[int, str]]:
    found = []
    for number, line in enumerate(_prose_lines(path.read_text()), 1):
        prose = CODE_SPAN.sub("", line)
        found += [(number, m.group(1)) for m in LINK.finditer(prose)]
    return found


def broken_links(path: Path) -> list[str]:
    problems = []
    for number, target in links(path):
        if target.startswith(SCHEMES):
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / unquote(file_part)).resolve() if file_part else path
        where = f"{path.relative_to(REPO)} (prose line {number}): {target}"
        if not dest.exists():
            problems.append(f"{where}: no such file")
            continue
        try:
            dest.relative_to(REPO)
        except ValueError:
            problems.append(f"{where}: outside the repository")
            continue
        if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            problems.append(f"{where}: no heading with anchor #{anchor} in "
                            f"{dest.relative_to(REPO)}")
    return problems


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_and_anchor_resolves(path: Path) -> None:
    assert broken_links(path) == []


def test_the_checker_finds_what_it_should(tmp_path: Path) -> None:
    # Slugs as GitHub makes them.
    assert slug("Environment contracts") == "environment-contracts"
    assert slug("`trainjobs run`: the same job on this machine") == \
        "trainjobs-run-the-same-job-on-this-machine"
    assert slug("Caffe2Job: `backend` (redis, nfs)") == "caffe2job-backend-redis-nfs"
    assert slug("Names, labels & annotations") == "names-labels--annotations"
    assert slug("snake_case_name") == "snake_case_name"
    assert links(REPO / "README.md"), "no link found in README.md: the pattern is broken"
    assert "default-ps-server" in anchors(REPO / "docs" / "operator.md")


# `docs/operator.md, "Default PS server"` or `api.md ("Environment contracts")` in any tracked
# text file (comments, docstrings, YAML): the section must exist.
SECTION_REFERENCE = re.compile(r"((?:[\w.-]+/)*[\w.-]+\.md)[,:]?\s*\(?\"([^\"\n]{3,60})\"")
TEXT_SUFFIXES = {".md", ".py", ".yaml", ".yml", ".txt", ".sh", ".toml", ".tpl"}


def section_references() -> list[tuple[Path, str, str]]:
    listed = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True,
                            check=True).stdout.split()
    found = []
    for name in listed:
        path = REPO / name
        if path.suffix not in TEXT_SUFFIXES or not path.exists() or "fixtures" in path.parts:
            continue
        for match in SECTION_REFERENCE.finditer(path.read_text(errors="replace")):
            found.append((path, match.group(1), match.group(2)))
    return found


def named_parts(path: Path) -> set[str]:
    """Slugs of what a quoted reference may name: headings, and paragraphs led by a bold
    title (`**Garbage-collector pauses: found and fixed.**`)."""
    leads = re.findall(r"^\*\*([^*\n]+?)\*\*", path.read_text(), flags=re.M)
    return anchors(path) | {slug(lead) for lead in leads}


def test_every_quoted_section_reference_names_a_section() -> None:
    problems = []
    for path, doc, section in section_references():
        candidates = [REPO / doc, path.parent / doc, REPO / "docs" / Path(doc).name]
        target = next((c for c in candidates if c.exists()), None)
        where = f"{path.relative_to(REPO)}: {doc} \"{section}\""
        if target is None:
            problems.append(f"{where}: no such file")
        # A reference quotes a heading, or its start ("RBAC" for "RBAC: what is granted").
        elif not any(part.startswith(slug(section)) for part in named_parts(target)):
            problems.append(f"{where}: no such section")
    assert problems == []
    assert len(section_references()) >= 3, "the pattern finds nothing: it is broken"
