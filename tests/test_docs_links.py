"""docs/benchmarks.md is a reference page of current figures: at most 300 lines, and every pointer
into it from the repository (code comments, configs, scripts, README, docs, tests) names one of its
headings in one syntax, ``docs/benchmarks.md#<anchor>``, with GitHub's anchor of the heading (lower
case, punctuation dropped, spaces as hyphens). A pointer without an anchor, or in another syntax
("benchmarks.md, section X"), fails here; so does an anchor whose heading was renamed or removed.
A pointer into the page's history names the commit, ``git show <commit>:docs/benchmarks.md``
(superseded figures live there), and is left alone; the page's own links are ``(#<anchor>)``."""
import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "benchmarks.md"
MAX_LINES = 300
SKIP_DIRS = {".git", ".venv", "venv", "build", "dist", "node_modules", "__pycache__", ".pytest_cache",
             ".ruff_cache", "runs"}
REFERENCE = re.compile(r"benchmarks\.md(#[A-Za-z0-9_-]*)?")
HISTORY = re.compile(r"\b[0-9a-f]{7,40}:(docs/)?$")     # "<commit>:docs/" just before the match
SELF_LINK = re.compile(r"\]\(#([A-Za-z0-9_-]+)\)")


def anchor(heading: str) -> str:
    """GitHub's anchor of a markdown heading's text: ``"Loop closure on and off"`` -> ``loop-closure-on-and-off``."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set:
    """The anchors of every heading of ``page`` (fenced code blocks skipped)."""
    found, fenced = set(), False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(r"#{1,6} ", line):
            found.add(anchor(line.lstrip("#")))
    return found


def repository_files(root: Path):
    """The repository's files: in a git checkout what git tracks or would track (ignored files such
    as local data and build outputs are not the repository's), else every file below ``root``."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                             cwd=root, capture_output=True, check=True).stdout
        return [root / name for name in out.decode().split("\0") if name]
    except (OSError, subprocess.CalledProcessError):
        return [p for p in root.rglob("*")
                if not any(part in SKIP_DIRS or part.endswith(".egg-info") for part in p.relative_to(root).parts[:-1])]


def text_files(root: Path):
    for path in repository_files(root):
        if not path.is_file() or path.stat().st_size > 2_000_000:
            continue
        try:
            yield path, path.read_text()
        except (UnicodeDecodeError, OSError):
            continue


def test_anchor_follows_github():
    assert anchor("Loop closure that never makes a trajectory worse") == "loop-closure-that-never-makes-a-trajectory-worse"
    assert anchor("TUM fr1/rpy at 160x120") == "tum-fr1rpy-at-160x120"
    assert anchor("Why the defaults are what they are") == "why-the-defaults-are-what-they-are"
    assert anchor("Issue 32's `loop` code") == "issue-32s-loop-code"


def test_benchmarks_page_is_short():
    lines = PAGE.read_text().splitlines()
    assert len(lines) <= MAX_LINES, f"{PAGE} has {len(lines)} lines (at most {MAX_LINES}: current figures only)"


def test_every_pointer_into_the_benchmarks_page_names_a_heading():
    known = anchors(PAGE)
    bad = []
    for path, text in text_files(REPO):
        rel = path.relative_to(REPO)
        if path == Path(__file__).resolve():
            continue
        for n, line in enumerate(text.splitlines(), 1):
            for m in REFERENCE.finditer(line if path != PAGE else ""):
                if HISTORY.search(line[:m.start()]):
                    continue
                tag = m.group(1)
                if tag is None or tag == "#":
                    bad.append(f"{rel}:{n}: '{m.group(0)}' names no section (write docs/benchmarks.md#<anchor>)")
                elif tag[1:] not in known:
                    bad.append(f"{rel}:{n}: '{m.group(0)}': no heading with that anchor")
            if path == PAGE:
                bad += [f"{rel}:{n}: '#{a}': no heading with that anchor" for a in SELF_LINK.findall(line)
                        if a not in known]
    assert bad == [], "\n".join(bad)
