"""README.md's shell commands, read at test time (issue 28): shared by
test/core/test_readme_commands.py and test/graph/test_readme_graph_commands.py."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"^```(?:sh|bash)\n(.*?)^```", re.S | re.M)
YAML_BLOCK = re.compile(r"^```yaml\n(# robot\.yaml\n.*?)^```", re.S | re.M)
LINK = re.compile(r"\((docs/[\w./-]+\.md)\)|`(docs/[\w./-]+\.md)`")
SIMREAL = re.compile(r"^(?:\.venv/bin/)?simreal(?:\s|$)")

# Placeholders the README uses for the reader's own paths -> what the scratch dir has.
PLACEHOLDERS = {
    "runs/<id>/bags": "bags",
    "BAGS": "bags",
    "DIR": "bags",
    "HEAD_IP:6379": "127.0.0.1:6379",
}
# Commands run as written; a tiny budget is appended where the full one takes minutes.
RUN = {
    ("--help",): "",
    ("robot", "check"): "",
    ("episodes", "list"): "",
    ("episodes", "export"): "",
    ("models", "list"): "",
    ("models", "rollback"): "",
    ("up", "--set"): "",  # the README's refused-setting example (exit 2, as it shows)
    ("eval",): "--episodes 2 --workers 1",
}
EXPECTED_EXIT = {("up", "--set"): 2}
GRAPH = {("up", "--graph"), ("trials",)}
SHELL_RUN = ("mkdir -p my_arm", "mv my_arm/")  # set-up lines of the bring-your-own-arm block
# Outputs of an expensive command earlier in the README (pretraining, sysid): parsed only.
MADE_BY_EXPENSIVE = ("runs/my_arm_push", "runs/push", "/tmp/arm_id")
NEEDS_A_CLUSTER = ("--ray-address",)  # parsed only


def documents() -> list[Path]:
    readme = ROOT / "README.md"
    text = readme.read_text()
    linked = {a or b for a, b in LINK.findall(text)}
    return [readme] + [ROOT / path for path in sorted(linked) if (ROOT / path).is_file()]


def commands(text: str) -> list[str]:
    """The commands of every shell block: continuations joined, comments dropped."""
    out = []
    for block in BLOCK.findall(text):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            out.append(re.sub(r"\s+#\s.*$", "", line).strip())
    return out


def all_commands() -> list[tuple[str, str]]:
    return [(doc.name, c) for doc in documents() for c in commands(doc.read_text())]


def simreal_argv(command: str) -> list[str]:
    for placeholder, value in PLACEHOLDERS.items():
        command = command.replace(placeholder, value)
    return shlex.split(SIMREAL.sub("", command, count=1))


def key_of(argv: list[str]) -> tuple[str, ...] | None:
    words = [w for w in argv if w != "--robot"]
    if "--robot" in argv:  # drop the arm's value too
        i = argv.index("--robot")
        words = argv[:i] + argv[i + 2 :]
    for key in sorted((*RUN, *GRAPH), key=len, reverse=True):
        if tuple(words[: len(key)]) == key:
            return key
    return None
