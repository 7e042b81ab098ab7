"""The architecture page (docs/explanation/architecture.md) names only paths that exist: every entry of its tree (a
nested entry under the folder above it) and every path it quotes in backticks. A moved or deleted module fails here
until the page says where it went."""

from __future__ import annotations

import re

from tests.conftest import REPO


def architecture() -> str:
    return (REPO / "docs" / "explanation" / "architecture.md").read_text()


def tree_paths(section: str) -> list[str]:
    """The tree's left column: an entry indented under a folder is inside it; several may share a line."""
    block = section.split("```", 2)[1]
    paths, parents = [], {0: ""}
    for line in block.splitlines():
        match = re.match(r"^( *)(\S.*?)(?:\s{2,}|$)", line)
        if not match or len(match[1]) >= 20:  # a continuation of the description column
            continue
        indent = len(match[1])
        base = parents.get(indent - 2, "") if indent else ""
        for entry in match[2].split():
            paths.append(base + entry)
            if entry.endswith("/"):
                parents[indent] = base + entry
    return paths


def quoted_paths(section: str) -> list[str]:
    """Backticked tokens that are paths of this repository: a folder or a file with an extension and a slash."""
    return [t for t in re.findall(r"`([^`\s]+)`", section)
            if "/" in t and re.fullmatch(r"[\w./-]+", t) and not t.startswith(("http", "mlrunway://"))]


def test_every_path_the_architecture_section_names_exists():
    section = architecture()
    named = tree_paths(section) + quoted_paths(section)
    assert len(named) > 15  # the parser still finds the tree
    missing = [path for path in named if not (REPO / path).exists()]
    assert not missing, f"the architecture page names paths that do not exist: {missing}"


def test_the_parser_nests_entries_under_their_folder():
    more = " " * 30 + "more text"
    section = f"## Architecture\n```\nmlrunway/     core\n  specs/ data/   x\n{more}\ntraining/  t\n```\n"
    assert tree_paths(section) == ["mlrunway/", "mlrunway/specs/", "mlrunway/data/", "training/"]
