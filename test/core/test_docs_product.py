"""README.md and docs/ read as a product's documentation: a result is named by what it
measures and when (an ISO date), never by the project's work history (tracker numbers,
work sessions, commit hashes). And the README's results table stays a table: one short
row per result, its newest figure, command and date; the history lives in docs/results.md.

Fast and ROS-free: it reads text only. Each check proves its own sensitivity on a
planted file through the same scanner."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

ORDINALS = "first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth"

# (what it is, pattern). Matched case-insensitively on every line, code included: a shell
# comment or a heading's anchor naming an issue is as much history as the prose.
HISTORY = [
    (
        "tracker number",
        re.compile(r"\bissues?[ -]?#?\d+", re.I),
    ),  # issue 12, issues 26, issue-23, issue #7
    ("tracker reference", re.compile(r"\bthe issue's\b|\btracker\b", re.I)),
    ("work session", re.compile(rf"\b(?:{ORDINALS}|\d+(?:st|nd|rd|th)) session\b", re.I)),
    ("work session", re.compile(r"\bthis session\b|\bwork session", re.I)),
    ("work session", re.compile(r"\b(?:last|previous|next|earlier|later) session\b", re.I)),
    ("work session", re.compile(r"\bsession of \d{4}-\d{2}-\d{2}", re.I)),
    ("work stop", re.compile(r"\bstop \d+", re.I)),
    ("work round", re.compile(r"\bround \d+ of the work\b|\bthis round of work\b", re.I)),
]
# A bare `#12` is a tracker number; matched in prose only: not in code (a shell comment's
# `#1`), not in a link's target (an anchor `(#3-rounds)` made from a heading), and not after
# a word character, a slash or `&` (`page.md#12`, a path, an HTML entity `&#38;`). The
# history patterns above still read link targets: `#...-issue-23-...` is caught there.
TRACKER_HASH = re.compile(r"(?<![\w/&])#\d{1,3}\b")
LINK_TARGET = re.compile(r"\]\([^)]*\)")
# A commit hash: 7-40 lowercase hex digits with at least one digit and one letter (so
# neither a decimal number like 900000 nor a word like `deadbeef` or `facade` counts).
COMMIT = re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")
# Hex that is not a commit, deliberately excluded: a colour (`#1f77b4cc`, after `#`), a C
# literal (`0x...`), and a fingerprint or digest inside a path or identifier (after `-`,
# `/`, `_`, `.`, `:` or `=`, e.g. `push-base-3f2a9c1d`, `sha256:...`), as the adapter store
# names its directories; a commit in prose stands after a space, a bracket or a quote.
NOT_A_COMMIT_BEFORE = re.compile(r"(?:#|0x|[-/_.:=])$")
CODE_SPAN = re.compile(r"`[^`]*`")


def scan_text(text: str, name: str = "<text>") -> list[str]:
    """Every work-history reference in a markdown text, as 'name:line: what: text'."""
    found = []
    in_fence = False
    for number, line in enumerate(text.splitlines(), start=1):
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
        hits = [(what, m.group(0)) for what, pattern in HISTORY for m in pattern.finditer(line)]
        prose = "" if in_fence else LINK_TARGET.sub("]()", CODE_SPAN.sub("", line))
        hits += [("tracker number", m.group(0)) for m in TRACKER_HASH.finditer(prose)]
        hits += [
            ("commit hash", m.group(0))
            for m in COMMIT.finditer(line)
            if not NOT_A_COMMIT_BEFORE.search(line[: m.start()])
        ]
        found += [f"{name}:{number}: {what} {hit!r}: {line.strip()}" for what, hit in hits]
    return found


def product_documents(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def scan(paths: list[Path], root: Path = ROOT) -> list[str]:
    return [
        hit
        for path in paths
        for hit in scan_text(path.read_text(encoding="utf-8"), str(path.relative_to(root)))
    ]


# --- the README's results table -----------------------------------------------------------

# A row is one markdown line; 500 characters is about three lines of rendered text in a
# three-column table: a figure, its command and its date. The demo's row once listed a
# dozen runs in one 2,900-character cell; today's longest row is about 420.
MAX_ROW_CHARS = 500


def results_rows(readme_text: str) -> list[tuple[int, str]]:
    """The body rows (line number, text) of the first table under '## Results'."""
    rows, in_section, in_table = [], False, False
    for number, line in enumerate(readme_text.splitlines(), start=1):
        if line.startswith("## "):
            if in_table:
                break
            in_section = line.strip() == "## Results"
            continue
        if not in_section:
            continue
        if line.startswith("|"):
            in_table = True
            rows.append((number, line))
        elif in_table:
            break
    return rows[2:]  # not the header and the |---| line


def long_rows(readme_text: str, name: str = "README.md") -> list[str]:
    return [
        f"{name}:{number}: results row of {len(row)} characters (at most {MAX_ROW_CHARS}): "
        f"{row[:120]}..."
        for number, row in results_rows(readme_text)
        if len(row) > MAX_ROW_CHARS
    ]


# --- the tests ------------------------------------------------------------------------------


def test_the_docs_name_no_work_history():
    documents = product_documents()
    assert len(documents) > 5 and (ROOT / "docs" / "results.md") in documents
    found = scan(documents)
    assert not found, (
        "README.md and docs/ name the project's work history; say what was measured and "
        "when (an ISO date) instead:\n" + "\n".join(found)
    )


def test_the_readme_results_table_has_one_short_row_per_result():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    rows = results_rows(text)
    assert len(rows) >= 10, "the README's '## Results' table is missing or nearly empty"
    assert all(row.count("|") >= 4 for _, row in rows)  # three cells: what, figure, when
    assert not long_rows(text), "\n".join(long_rows(text))
    dated = [row for _, row in rows if re.search(r"\b20\d\d-\d\d-\d\d\b", row)]
    assert len(dated) == len(rows), "every results row names its date (YYYY-MM-DD)"


PLANTED = [
    ("Measured in issue 12 of the project.", "tracker number"),
    ("See #23 for the rest.", "tracker number"),
    ("Fixed in a later change (#7).", "tracker number"),
    ("[details](results.md#the-dip-issue-23-2026-12-05)", "tracker number"),
    ("The fifth session's run took 22 min.", "work session"),
    ("The 3rd session measured it.", "work session"),
    ("Measured this session on 2 cores.", "work session"),
    ("As the tracker says.", "tracker reference"),
    ("Fixed at stop 43.", "work stop"),
    ("These figures are from the code at commit bdad2ab.", "commit hash"),
    ("Since then (commit 9f8dec5, 8d82c0f) it holds.", "commit hash"),
]
CLEAN = [
    "Measured on 2026-12-05: 46/50 train [0.81, 0.97], seeds 900000+.",
    "The adapter store: `~/.simreal/adapters/arm/push-base-3f2a9c1d/v0001`.",
    "Plot colour #1f77b4cc; a C literal 0xdeadbeef1; a digest sha256:0a1b2c3d4e5f.",
    "The learner session reads the episodes; `LearnerSession.finetune`; test_learner_session.",
    "```sh\nmake demo   #1 thing to run\n```",
    "The [second table](#3-rounds-of-5) and [its plot](figures/se.png); an entity &#38; stays.",
    "A watchdog trip 1.0e-15 m, a stop at rest, 0 of 12,603 commands.",
]


@pytest.mark.parametrize(("line", "what"), PLANTED)
def test_the_scanner_flags_planted_history_naming_file_and_line(tmp_path, line, what):
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("# clean\n\nNothing here.\n")
    (tmp_path / "docs" / "results.md").write_text(f"# Results\n\nFine.\n{line}\n")
    found = scan(product_documents(tmp_path), tmp_path)
    assert found, f"not flagged: {line!r}"
    assert all(hit.startswith("docs/results.md:4: ") for hit in found), found
    assert any(f": {what} " in hit for hit in found), found


@pytest.mark.parametrize("text", CLEAN)
def test_the_scanner_passes_dates_fingerprints_and_product_words(text):
    assert scan_text(text) == []


def test_the_row_bound_fails_a_long_row_and_passes_a_short_one(tmp_path):
    table = "## Results\n\n| what | figure | command, date |\n|---|---|---|\n"
    short = "| demo | 46/50 train | `make demo`, 2026-12-06 |\n"
    history = "; ".join(f"run {i}: 44/50 train, arm kept 13 vs 4" for i in range(40))
    long = f"| demo | {history} | `make demo`, 2026-12-06 |\n"
    (tmp_path / "README.md").write_text(table + short + long + "\n## Known limitations\n")
    text = (tmp_path / "README.md").read_text()
    assert [number for number, _ in results_rows(text)] == [5, 6]
    found = long_rows(text)
    assert len(found) == 1 and found[0].startswith("README.md:6: results row of"), found
