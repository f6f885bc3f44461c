"""The documentation holds together: every relative link and every ``docs/…`` path named in README.md and
docs/ exists, and the reference pages describe the product without dates or issue numbers (measured figures,
with their dates, live on the results pages and are linked from there)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
RESULTS_PAGES = {"results-science.md", "results-benchmarks.md"}  # and every results-*.md
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
NAMED_PATH = re.compile(r"(?<![\w./-])(docs/[\w./-]+\.(?:md|png))")
DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")
ISSUE = re.compile(r"\b[Ii]ssue [0-9]|#[0-9]{2}\b")
# `python` as a command: absent where only python3 is
BARE_PYTHON = re.compile(r"(?<![\w/.-])python (?:-[mc]\b|\S+\.py\b)")


def _is_results_page(page: Path) -> bool:
    return page.name in RESULTS_PAGES or page.name.startswith("results-")


def _targets(page: Path) -> list[tuple[str, Path]]:
    """(as written, resolved path) of every relative link and every repository path the page names."""
    text = page.read_text(encoding="utf-8")
    found = []
    for target in LINK.findall(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL or an anchor on the same page
        found.append((target, (page.parent / target.split("#")[0]).resolve()))
    found += [(named, ROOT / named) for named in NAMED_PATH.findall(text)]
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_link_and_named_docs_path_exists(page: Path) -> None:
    missing = [written for written, path in _targets(page) if not path.exists()]
    assert not missing, f"{page.relative_to(ROOT)} points at what does not exist: {missing}"


# a heading (a numbered one without its number) or a paragraph's bold lead: what a citation may name
SECTION = re.compile(r"^#{1,6}\s+(?:\d+\.\s+)?(.+?)\s*$|^\*\*(.+?)\*\*", re.M)
# `results-x.md, "Title"` (or `[results-x.md](results-x.md), "Title"`): a results section cited by its title
CITED_SECTION = re.compile(r"(results-[\w-]+\.md)(?:\]\([^)\s]*\))?,\s*\"([^\"]+)\"")


def _sections(page: Path) -> list[str]:
    return [" ".join((h or b).replace("`", "").split()) for h, b in SECTION.findall(page.read_text(encoding="utf-8"))]


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.replace("`", "").strip().lower()).replace(" ", "-")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_anchor_and_cited_results_section_exists(page: Path) -> None:
    """A link's ``#anchor`` is a heading of its page, and a results section cited by title ("docs/results-x.md,
    "Title"") begins a heading or a bold lead of that page, so that moving a section moves its citations too."""
    text = page.read_text(encoding="utf-8")
    missing = []
    for target in LINK.findall(text):
        if "#" not in target or re.match(r"[a-z][a-z0-9+.-]*:", target):
            continue
        path, anchor = target.split("#", 1)
        linked = (page.parent / path).resolve() if path else page
        if linked.suffix == ".md" and linked.exists() and anchor not in {_slug(s) for s in _sections(linked)}:
            missing.append(target)
    for name, title in CITED_SECTION.findall(text):
        cited, title = ROOT / "docs" / name, " ".join(title.replace("`", "").split())
        if not cited.exists() or not any(s.startswith(title) for s in _sections(cited)):
            missing.append(f'{name}, "{title}"')
    assert not missing, f"{page.relative_to(ROOT)} names sections that do not exist: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_issue_numbers(page: Path) -> None:
    hits = [line for line in page.read_text(encoding="utf-8").splitlines() if ISSUE.search(line)]
    assert not hits, f"{page.relative_to(ROOT)} cites issue numbers: {hits}"


@pytest.mark.parametrize("page", [p for p in PAGES if not _is_results_page(p)],
                         ids=lambda p: p.relative_to(ROOT).as_posix())
def test_reference_pages_carry_no_dates(page: Path) -> None:
    hits = [line for line in page.read_text(encoding="utf-8").splitlines() if DATE.search(line)]
    assert not hits, f"{page.relative_to(ROOT)} is a reference page; dated figures belong on a results page: {hits}"


def test_the_checks_see_every_page_kind() -> None:
    assert (ROOT / "README.md") in PAGES and any(_is_results_page(p) for p in PAGES)
    assert sum(not _is_results_page(p) for p in PAGES) >= 10  # the reference pages


def test_the_readme_first_screen_names_the_prerequisites() -> None:
    """What a newcomer needs before `make serve`, before the first command (scripts/setup.sh checks the same)."""
    first_screen = "\n".join((ROOT / "README.md").read_text(encoding="utf-8").splitlines()[:24])
    quick_start = first_screen.find("## Quick start")
    for needed in ("Linux x86-64", "Python ≥ 3.11", "venv", "GB for `make serve`", "GB for `make test`"):
        assert needed in first_screen, needed
        assert quick_start == -1 or first_screen.index(needed) < quick_start, needed


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_commands_never_call_a_bare_python(page: Path) -> None:
    """Debian and Ubuntu have `python3` but no `python` outside a venv: a command names `python3` or the venv's
    `.venv/bin/python`."""
    hits = [line for line in page.read_text(encoding="utf-8").splitlines() if BARE_PYTHON.search(line)]
    assert not hits, f"{page.relative_to(ROOT)} calls a bare `python`: {hits}"


def test_the_real_data_recipe_is_the_embedded_models_command() -> None:
    """docs/training-real-data.md's recipe ends with the model card's command, word for word but for the paths
    (the card elides the training machine's folders), and the training CLI accepts it."""
    import shlex

    from training.cli import build_parser

    card = (ROOT / "models" / "default" / "MODEL_CARD.md").read_text(encoding="utf-8")
    ran = shlex.split(re.search(r"^- Command: `(radscreen-train [^`]+)`", card, re.M).group(1))  # type: ignore[union-attr]
    doc = (ROOT / "docs" / "training-real-data.md").read_text(encoding="utf-8")
    section = doc[doc.index("### The embedded model's recipe"):]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)  # type: ignore[union-attr]
    commands = [line for line in block.replace("\\\n", " ").splitlines() if line and not line.startswith("#")]
    documented = shlex.split(commands[-1])
    paths = {"--data", "--init-from", "--out", "--artifact"}
    assert documented[0] == ".venv/bin/radscreen-train" and len(documented) == len(ran)
    for i, (mine, theirs) in enumerate(zip(documented[1:], ran[1:], strict=True), start=1):
        assert mine == theirs or ran[i - 1] in paths, (ran[i - 1], mine, theirs)
    build_parser().parse_args(documented[1:])


# «NAME»: a placeholder left for a figure still to be filled (the model summary shipped two)
PLACEHOLDER = re.compile(r"«[^»\n]*»")
DOC_TEXTS = sorted([*PAGES, *(ROOT / "models").glob("*/MODEL_CARD.md")])


@pytest.mark.parametrize("page", DOC_TEXTS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_unfilled_placeholders(page: Path) -> None:
    hits = [line for line in page.read_text(encoding="utf-8").splitlines() if PLACEHOLDER.search(line)]
    assert not hits, f"{page.relative_to(ROOT)} ships an unfilled «…» placeholder: {hits}"


def _summary_block() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    return readme[readme.index("<!-- MODEL SUMMARY"):readme.index("<!-- END MODEL SUMMARY -->")]


def test_the_readme_model_summary_quotes_the_test_patients_figures() -> None:
    """The README's miss and automatic shares are the served model's column (the last) of the results page's
    per-source tables, word for word (written by hand with every new default model: this is the check that they
    were)."""
    results = (ROOT / "docs" / "results-real-eyes.md").read_text(encoding="utf-8")
    section = results[results.index("## 2. The test patients, per source"):]
    summary = " ".join(_summary_block().split())
    for row in ("referable eyes missed", "non-referable eyes answered `no_referable_dr`"):
        cells = re.findall(rf"^\| {re.escape(row)} \|.*\| ([^|]+) \|$", section, re.M)[:2]  # ODIR, EyePACS
        assert len(cells) == 2, row
        for cell in cells:
            share = re.search(r"([\d.]+ %)", cell).group(1)  # type: ignore[union-attr]
            counts = re.search(r"(\d+ of \d+)", cell)
            assert share in summary, (row, share)
            assert counts is None or counts.group(1) in summary, (row, counts.group(1))
