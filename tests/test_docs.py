"""Issue 25 point 5: the docs a newcomer reads. README.md stays short and plain, every relative
Markdown link of README.md and docs/ points to a file (and heading) that exists, and the code cites
sections of docs/ that exist instead of a specification outside the repository.

Before: README.md was 1,002 lines of sentences averaging ~46 words, there was no docs/ folder, and
pipeline/ cited ``SPEC "…"`` (../shared/SPEC.md) 37 times.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = REPO / "docs"
#: The pages the README sends a newcomer to (issue 25 point 5).
PAGES = ["definitions.md", "inputs.md", "outputs.md", "operations.md", "architecture.md"]
#: The README's limits: lines, and words per sentence on average.
MAX_README_LINES = 200
MAX_MEAN_SENTENCE_WORDS = 25

LINK = re.compile(r"(?<!!)\[(?:[^\]\\]|\\.)*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~)")
#: A citation of the docs in code: ``docs/NAME.md`` with an optional ``#anchor``.
CITATION = re.compile(r"docs/([\w/.-]+\.md)(?:#([\w-]+))?")


def markdown_files() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def prose_lines(text: str) -> list[str]:
    """The lines of ``text`` outside fenced code blocks."""
    out, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            out.append(line)
    return out


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, Markdown code and link syntax dropped, every
    character but letters, digits, ``_``, ``-`` and spaces removed, spaces to ``-``."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    text = "".join(c for c in text if c.isalnum() or c in "_- ")
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of the Markdown file ``path`` (duplicates numbered ``-1``, ``-2`` as GitHub
    does)."""
    seen: dict[str, int] = {}
    out = set()
    for line in prose_lines(path.read_text(encoding="utf-8")):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(path: Path) -> list[str]:
    """The relative link targets of ``path`` (outside code blocks and inline code)."""
    found = []
    for line in prose_lines(path.read_text(encoding="utf-8")):
        line = re.sub(r"`[^`]*`", "", line)
        found += [t for t in LINK.findall(line) if not re.match(r"^[a-z][a-z0-9+.-]*:", t)]
    return found


def broken(source: Path, target: str) -> str | None:
    """Why the link ``target`` of ``source`` does not resolve, or None when it does."""
    file_part, _, anchor = target.partition("#")
    dest = (source.parent / file_part).resolve() if file_part else source
    if not dest.exists():
        return f"{source}: {target}: no file {file_part}"
    if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
        return f"{source}: {target}: no heading #{anchor} in {dest}"
    return None


def test_the_docs_pages_exist_and_the_readme_links_each():
    readme_links = {t.partition("#")[0] for t in links(README)}
    for page in PAGES:
        assert (DOCS / page).is_file(), page
        assert f"docs/{page}" in readme_links, f"README.md does not link docs/{page}"


def test_every_relative_link_resolves():
    problems = [why for path in markdown_files() for target in links(path)
                if (why := broken(path, target))]
    assert problems == []


def test_the_link_checker_sees_a_broken_link_and_a_missing_anchor(tmp_path):
    """The checker itself: a missing file and a missing heading are both found, a present one is not."""
    page = tmp_path / "a.md"
    (tmp_path / "b.md").write_text("# Title\n\n## Device-level idle\n\n## Fix first (in `USD`)\n", encoding="utf-8")
    page.write_text("[x](b.md#device-level-idle) [y](b.md#fix-first-in-usd) [z](c.md) [w](b.md#nowhere) "
                    "`[q](nothing.md)` [u](https://example.com/x)\n", encoding="utf-8")
    found = links(page)
    assert found == ["b.md#device-level-idle", "b.md#fix-first-in-usd", "c.md", "b.md#nowhere"]
    assert anchors(tmp_path / "b.md") == {"title", "device-level-idle", "fix-first-in-usd"}
    assert [target for target in found if broken(page, target)] == ["c.md", "b.md#nowhere"]


def test_the_readme_is_short():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines (at most {MAX_README_LINES})"


def sentences(text: str) -> list[str]:
    """The prose sentences of Markdown ``text``: outside code blocks, tables and headings; each list
    item or paragraph split after ``.``, ``!`` or ``?`` followed by a space."""
    blocks, current = [], []
    for line in prose_lines(text):
        stripped = line.strip()
        if not stripped or stripped.startswith(("|", "#")):
            blocks.append(" ".join(current))
            current = []
        elif re.match(r"^([-*]|\d+\.)\s", stripped):
            blocks.append(" ".join(current))
            current = [re.sub(r"^([-*]|\d+\.)\s+", "", stripped)]
        else:
            current.append(stripped)
    blocks.append(" ".join(current))
    return [s for b in blocks for s in re.split(r"(?<=[.!?:;])\s+(?=[A-Z`(\[])", b) if s.strip()]


def test_the_readme_sentences_are_short():
    said = sentences(README.read_text(encoding="utf-8"))
    mean = sum(len(s.split()) for s in said) / len(said)
    assert mean <= MAX_MEAN_SENTENCE_WORDS, f"README.md sentences average {mean:.1f} words"


def test_the_sentence_counter():
    text = "# Title\n\nOne two three. Four five.\n\n- a list item here\n- b: `Code` stays\n\n```\nnot. prose.\n```\n| a | b |\n"
    assert sentences(text) == ["One two three.", "Four five.", "a list item here", "b:", "`Code` stays"]


def code_files() -> list[Path]:
    return sorted(p for p in (REPO / "pipeline").rglob("*.py")) + sorted((REPO / "tests").glob("*.py"))


def test_the_code_cites_the_docs_not_an_outside_specification():
    """No ``SPEC "…"`` citation is left in pipeline/, and every ``docs/….md#anchor`` in pipeline/ and
    tests/ names a page and a heading that exist."""
    spec = [f"{p.relative_to(REPO)}:{i}" for p in sorted((REPO / "pipeline").rglob("*.py"))
            for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
            if re.search(r"\bSPEC\b(?!IAL)", line)]
    assert spec == []
    cited, problems = 0, []
    for path in code_files():
        if path.name == Path(__file__).name:
            continue
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for page, anchor in CITATION.findall(line):
                cited += 1
                dest = DOCS / page
                if not dest.is_file():
                    problems.append(f"{path.relative_to(REPO)}:{i}: docs/{page} does not exist")
                elif anchor and anchor not in anchors(dest):
                    problems.append(f"{path.relative_to(REPO)}:{i}: docs/{page} has no heading #{anchor}")
    assert problems == []
    assert cited >= 37, f"only {cited} citations of docs/ in the code"


@pytest.mark.parametrize("section, rule", [
    ("device-level-idle", "`idle_ns` = `window_ns − busy_ns`"),
    ("per-stream-gaps", "strictly longer than `analysis.min_gap_ns`"),
    ("size-buckets", "always add up to `gap_count` and `gap_total_ns`"),
    ("categories", "`data`, `comm`, `sync`, `boundary`, `periodic`, `launch`, `cpu`"),
    ("cost", "× `rate_usd_per_hour` × hours per month"),
    ("fix-first", "`1 / (1 − s_c)`"),
    ("communication-overlap", "`comm_exposed_ns` = `comm_ns − comm_overlapped_ns`"),
])
def test_the_definitions_state_the_rules_the_code_cites(section, rule):
    """Each section the code cites most states its rule (the text between its heading and the next
    heading of the same level)."""
    text = (DOCS / "definitions.md").read_text(encoding="utf-8")
    parts = re.split(r"^## ", text, flags=re.M)
    body = next(p for p in parts if slug(p.splitlines()[0]) == section)
    assert rule in " ".join(body.split())


def test_the_category_order_is_the_models():
    """The order docs/definitions.md states is :data:`pipeline.model.CATEGORIES`."""
    from pipeline.model import CATEGORIES

    text = " ".join((DOCS / "definitions.md").read_text(encoding="utf-8").split())
    assert "The order is `model.CATEGORIES`: " + ", ".join(f"`{c}`" for c in CATEGORIES) + "." in text


def layout_block() -> list[str]:
    """The lines of the ``pipeline/`` tree in docs/architecture.md (its first code block)."""
    text = (DOCS / "architecture.md").read_text(encoding="utf-8")
    block = text.split("\n```\n", 1)[1].split("\n```", 1)[0]
    return block.splitlines()


def test_the_layout_names_every_module_and_only_modules_that_exist():
    """docs/architecture.md's tree of pipeline/ names each module where it is (a folder ``  name/``, its
    modules ``    name.py`` below it), and every module of pipeline/ appears in it."""
    listed, folder = [], None
    for line in layout_block():
        if m := re.match(r"^  (\w+)/\s", line + " "):
            folder = m.group(1)
        elif m := re.match(r"^    (\w+\.py)\s", line + " "):
            listed.append(f"{folder}/{m.group(1)}")
        elif m := re.match(r"^  (\w+\.py)\s", line + " "):
            folder = None
            listed.append(m.group(1))
        elif re.match(r"^\S", line) and not line.startswith("pipeline/"):
            break
    missing = [p for p in listed if not (REPO / "pipeline" / p).is_file()]
    assert missing == [], f"docs/architecture.md lists modules that do not exist: {missing}"
    words = set(re.findall(r"[\w.]+\.py", "\n".join(layout_block())))
    unlisted = [str(p.relative_to(REPO)) for p in sorted((REPO / "pipeline").rglob("*.py"))
                if p.name != "__init__.py" and p.name not in words]
    assert unlisted == [], f"docs/architecture.md does not name {unlisted}"
    assert len(listed) >= 40


def test_every_pipeline_path_the_docs_name_exists():
    """A ``pipeline/….py`` path named in README.md or docs/ is a file of the repository."""
    missing = sorted({f"{path.relative_to(REPO)}: {name}" for path in markdown_files()
                      for name in re.findall(r"\bpipeline/[\w/]+\.py\b", path.read_text(encoding="utf-8"))
                      if not (REPO / name).is_file()})
    assert missing == []
