"""The manual's links: every relative link in README.md and docs/*.md leads to an existing file, and to an existing
heading or `<a id>` anchor when it names one; every page of docs/ is linked from README.md or docs/README.md."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

if not (ROOT / "pyproject.toml").is_file():  # an installed copy without the checkout: no docs to check
    pytest.skip("not running from a checkout (no pyproject.toml next to python/)", allow_module_level=True)

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
ANCHOR = re.compile(r"""<a\s+(?:id|name)=["']([^"']+)["']""")


def _prose_lines(text: str):
    """(line number, text) of the lines outside fenced code blocks, with inline code spans removed."""
    fence = False
    for lineno, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fence = not fence
            continue
        if not fence:
            yield lineno, re.sub(r"`[^`]*`", "", line)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading keeps its text
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found, seen = set(), {}
    fence = False
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("```"):
            fence = not fence
            continue
        if fence:
            continue
        found.update(ANCHOR.findall(line))
        m = HEADING.match(line)
        if m:
            slug = _slug(m.group(2))
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            found.add(slug if n == 0 else f"{slug}-{n}")
    return found


def broken_links(files: list[Path]) -> list[str]:
    """One line per relative link that leads nowhere: 'FILE:LINE: TARGET: why'."""
    problems = []
    for f in files:
        for lineno, prose in _prose_lines(f.read_text()):
            for target in LINK.findall(prose):
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: ...
                    continue
                path_part, _, anchor = target.partition("#")
                dest = (f.parent / path_part).resolve() if path_part else f
                if not dest.exists():
                    problems.append(f"{f}:{lineno}: {target}: no such file")
                elif anchor and dest.is_file() and dest.suffix == ".md" and anchor not in anchors(dest):
                    problems.append(f"{f}:{lineno}: {target}: no heading or anchor '{anchor}' in {dest.name}")
    return problems


def manual_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_every_relative_link_resolves():
    files = manual_files()
    assert (ROOT / "docs" / "README.md").is_file() and len(files) > 2
    assert broken_links(files) == []


def test_every_doc_is_linked_from_the_readme_or_the_index():
    linked = set()
    for index in (ROOT / "README.md", ROOT / "docs" / "README.md"):
        for _, prose in _prose_lines(index.read_text()):
            for target in LINK.findall(prose):
                path_part = target.partition("#")[0]
                if path_part:
                    linked.add((index.parent / path_part).resolve())
    orphans = [p.name for p in sorted((ROOT / "docs").glob("*.md"))
               if p.name != "README.md" and p.resolve() not in linked]
    assert orphans == []
    assert (ROOT / "docs" / "README.md").resolve() in linked


def test_the_link_check_catches_broken_links(tmp_path):
    """Negative control: a missing file, a missing anchor and a missing generated anchor are reported; links in code,
    to existing headings (with GitHub's slugs) and to `<a id>` anchors are not."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text(
        "# A page\n\n## Seed 004: legacy schedulers and buffered I/O\n\n## `iosched run`\n\n## Twice\n\n## Twice\n\n"
        '<a id="seed000-fig1"></a>\n\n```sh\n# not a heading\n```\n')
    readme = tmp_path / "README.md"
    readme.write_text(
        "[ok](docs/a.md) [ok](docs/a.md#seed-004-legacy-schedulers-and-buffered-io) [ok](docs/a.md#iosched-run)\n"
        "[ok](docs/a.md#twice-1) [ok](docs/a.md#seed000-fig1) [ok](#top) [web](https://example.org/x)\n"
        "`[in code](docs/nowhere.md)`\n\n# Top\n\n"
        "[bad file](docs/nowhere.md)\n[bad anchor](docs/a.md#kernel-backend)\n[bad id](docs/a.md#seed000-fig2)\n"
        "[not a heading](docs/a.md#not-a-heading)\n")
    problems = broken_links([readme])
    assert len(problems) == 4, problems
    assert "README.md:7: docs/nowhere.md: no such file" in problems[0]
    assert all("no heading or anchor" in p for p in problems[1:])
