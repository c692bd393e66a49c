"""The documents in docs/ are cited by path from code, tests, charts and the README: every such
reference must name a file that exists and, with ``#anchor``, a heading of that file (GitHub's
anchors); and nothing may point outside the repository at the documents it used to cite."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# Where references live. Everything under these, that is text, is read.
SCANNED = ("ferrymq", "operator", "tests", "bench", "e2e", "spark-jobs", "fuzz", "charts", "crds", "broker-image",
           "docs", ".ci", "README.md", "Makefile", "Dockerfile", "pyproject.toml")
SKIPPED_DIRS = {"__pycache__", "node_modules", ".venv", ".cache", ".git", ".pytest_cache", "build", "dist"}
TEXT_SUFFIXES = {".py", ".pyi", ".c", ".h", ".java", ".md", ".yaml", ".yml", ".json", ".tpl", ".txt", ".sh", ".toml",
                 ".cfg", ".ini", ".go", ".js", ".mjs", ".css", ".html", ".conf", ".properties"}
TEXT_NAMES = {"Makefile", "Dockerfile", "run"}

# A path reference: `docs/wire-format.md#commitlog-record`. Not part of a longer path (another
# repository's docs/ folder is cited as owner/repo/docs/..., which this leaves alone).
DOC_REFERENCE = re.compile(r"(?<![\w./-])(docs/[\w./-]*?\.md)(?:#([\w-]+))?")
# A Markdown link inside docs/ or the README: [text](other.md#anchor) or [text](#anchor).
MARKDOWN_LINK = re.compile(r"\]\(\s*<?([^)\s>#]*)(?:#([^)\s>]*))?>?(?:\s+\"[^\"]*\")?\s*\)")
# Words that cite the documents outside the repository this one replaced.
FORBIDDEN = (re.compile(r"\.\./" + "shared"), re.compile("shared" + r"/docs"), re.compile("wire" + r"[ -]facts", re.I))

HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"", re.I)


def text_files(root: Path):
    for name in SCANNED:
        path = root / name
        if path.is_file():
            yield path
        elif path.is_dir():
            for p in sorted(path.rglob("*")):
                if p.is_file() and not SKIPPED_DIRS.intersection(p.relative_to(root).parts) and (
                        p.suffix in TEXT_SUFFIXES or p.name in TEXT_NAMES):
                    yield p


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: inline markup dropped, lower case, punctuation removed
    (letters, digits, '_', '-' and spaces kept), spaces turned into hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links and images: their text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.strip().lower()
    kept = []
    for ch in text:
        category = unicodedata.category(ch)
        if ch in "-_ " or category[0] in "LN" or category == "Mn":
            kept.append(ch)
    return "".join(kept).replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    """Every anchor a Markdown file offers: its headings' (a repeated one gets -1, -2, ... as
    GitHub numbers them) and explicit <a name/id> ones. Lines in fenced code are not headings."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    fence = None
    for line in markdown.splitlines():
        m = FENCE.match(line)
        if m:
            marker = m.group(1)[0]
            if fence is None:
                fence = marker
            elif fence == marker:
                fence = None
            continue
        if fence is not None:
            continue
        found.update(HTML_ANCHOR.findall(line))
        h = HEADING.match(line)
        if h:
            base = slug(h.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


class Checker:
    def __init__(self, root: Path) -> None:
        self.root = root
        self._anchors: dict[Path, set[str]] = {}

    def anchors_of(self, path: Path) -> set[str]:
        if path not in self._anchors:
            self._anchors[path] = anchors(read(path))
        return self._anchors[path]

    def target_problem(self, target: Path, anchor: str | None) -> str | None:
        if not target.is_file():
            return "no such file"
        if anchor and anchor not in self.anchors_of(target):
            return f"no heading with anchor #{anchor}"
        return None

    def broken(self, files) -> list[str]:
        """``path:line: reference (why)`` for every reference that does not resolve."""
        problems = []
        for path in files:
            if path.resolve() == Path(__file__).resolve():
                continue  # its own examples of broken references
            rel = path.relative_to(self.root)
            text = read(path)
            for lineno, line in enumerate(text.splitlines(), 1):
                for m in DOC_REFERENCE.finditer(line):
                    why = self.target_problem(self.root / m.group(1), m.group(2))
                    if why:
                        problems.append(f"{rel}:{lineno}: {m.group(0)} ({why})")
                if path.suffix != ".md":
                    continue
                for m in MARKDOWN_LINK.finditer(line):
                    target, anchor = m.group(1), m.group(2)
                    if re.match(r"[a-z][a-z0-9+.-]*:", target):
                        continue  # a URL
                    resolved = (path.parent / target).resolve() if target else path
                    if target and not target.endswith(".md"):  # a source file or folder
                        why = None if resolved.exists() else "no such file"
                    else:
                        why = self.target_problem(resolved, anchor or None)
                    if why:
                        problems.append(f"{rel}:{lineno}: ({m.group(1)}{'#' + anchor if anchor else ''}) ({why})")
        return list(dict.fromkeys(problems))  # a line naming a path twice ([path](path)) counts once

    def forbidden(self, files) -> list[str]:
        problems = []
        for path in files:
            if path.resolve() == Path(__file__).resolve():
                continue
            for lineno, line in enumerate(read(path).splitlines(), 1):
                for pattern in FORBIDDEN:
                    m = pattern.search(line)
                    if m:
                        problems.append(f"{path.relative_to(self.root)}:{lineno}: {m.group(0)!r}")
        return problems


def test_every_docs_reference_resolves() -> None:
    problems = Checker(REPO).broken(text_files(REPO))
    assert not problems, "references to docs/ that do not resolve:\n" + "\n".join(problems)


def test_nothing_cites_documents_outside_the_repository() -> None:
    problems = Checker(REPO).forbidden(text_files(REPO))
    assert not problems, "citations of documents outside the repository:\n" + "\n".join(problems)


def test_the_readme_starts_with_make_run_and_make_test() -> None:
    first_block = re.search(r"```\w*\n(.*?)```", read(REPO / "README.md"), re.S)
    assert first_block is not None
    commands = [line.split("#")[0].strip() for line in first_block.group(1).splitlines() if line.strip()]
    assert commands[:2] == ["make run", "make test"]


# ------------------------------------------------------------------ the checker itself


@pytest.mark.parametrize("heading, expected", [
    ("CommitLog record", "commitlog-record"),
    ("Abort marker and lock", "abort-marker-and-lock"),
    ("The `ferrymq` command: a [link](x.md) too", "the-ferrymq-command-a-link-too"),
    ("1.4 ROCKETMQ binary header (exact)", "14-rocketmq-binary-header-exact"),
    ("Master–slave replication", "masterslave-replication"),
    ("snake_case and-hyphens", "snake_case-and-hyphens"),
])
def test_slug_follows_github(heading: str, expected: str) -> None:
    assert slug(heading) == expected


def test_anchors_number_repeats_and_skip_code_blocks() -> None:
    md = "# Title\n## Part\n```sh\n# not a heading\n```\n## Part\n<a id=\"custom\"></a>\n"
    assert anchors(md) == {"title", "part", "part-1", "custom"}


def test_the_checker_finds_broken_references(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "guide.md").write_text("# Guide\n## Real section\nSee [other](missing.md) and "
                                                "[here](#real-section), [there](#gone).\n")
    (tmp_path / "ferrymq").mkdir()
    (tmp_path / "ferrymq" / "mod.py").write_text(
        '"""Layout: docs/guide.md#real-section; bad: docs/guide.md#no-such-anchor and docs/nope.md.\n'
        'Not ours: apache/spark/docs/running-on-kubernetes.md."""\n'
        "# see ../" + "shared/docs/x.md (wire" + " facts 5.1)\n")
    checker = Checker(tmp_path)
    files = list(text_files(tmp_path))
    broken = checker.broken(files)
    assert sorted(broken) == [
        "docs/guide.md:3: (#gone) (no heading with anchor #gone)",
        "docs/guide.md:3: (missing.md) (no such file)",
        "ferrymq/mod.py:1: docs/guide.md#no-such-anchor (no heading with anchor #no-such-anchor)",
        "ferrymq/mod.py:1: docs/nope.md (no such file)",
    ]
    assert len(checker.forbidden(files)) == 3
