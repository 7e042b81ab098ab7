"""The documentation as a whole: the site builds with --strict (a broken link or anchor, a page missing from the
nav, a reference that no longer resolves or a snippet whose file is gone fails it), offline; the README stays a front
door; the changelog keeps its form; every page's error headings are messages the code writes."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO


@pytest.mark.slow
def test_the_site_builds_strict_and_offline(tmp_path):
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    out = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(REPO / "mkdocs.yml"),
                          "-d", str(site)], cwd=REPO, capture_output=True, text=True, env=env, timeout=240)
    assert out.returncode == 0, out.stderr[-4000:]
    pages = {p.relative_to(site).as_posix() for p in site.rglob("index.html")}
    for page in ("index.html", "changelog/index.html", "reference/settings/index.html", "reference/params/index.html",
                 "reference/operators/index.html", "reference/cli/index.html", "reference/connections/index.html",
                 "reference/endpoint-http/index.html", "how-to/read-a-failure/index.html"):
        assert page in pages, f"{page} was not built: {sorted(pages)}"
    operators = (site / "reference/operators/index.html").read_text()
    assert "TrainModelOperator" in operators and "max_wait_s" in operators  # mkdocstrings rendered the docstrings
    settings = (site / "reference/settings/index.html").read_text()
    assert "RolloutPolicy" in settings and "window_s" in settings
    # Offline: no web font and no asset from another host.
    for html in site.rglob("*.html"):
        text = html.read_text()
        assert "fonts.googleapis" not in text and "fonts.gstatic" not in text, html
        assert not re.search(r'<(?:script|link)[^>]+(?:src|href)="https?://', text), html


@pytest.mark.slow
def test_a_broken_link_fails_the_build(tmp_path):
    """--strict is what holds the pages: a link to a page that does not exist is an error, not a warning."""
    docs = tmp_path / "docs"
    (docs / "hooks").mkdir(parents=True)
    (docs / "index.md").write_text("# Home\n\nSee [nowhere](nowhere.md).\n")
    config = (REPO / "mkdocs.yml").read_text()
    config = re.sub(r"(?s)\nhooks:.*?(?=\n\w)", "\n", config)  # no generated pages: this folder has only one
    config = re.sub(r"(?s)\nnav:.*", "\nnav:\n  - Home: index.md\n", config)
    (tmp_path / "mkdocs.yml").write_text(config)
    out = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert out.returncode != 0 and "nowhere.md" in out.stderr


def test_the_readme_is_a_front_door():
    readme = (REPO / "README.md").read_text()
    assert len(readme.encode()) <= 10 * 1024, f"README.md is {len(readme.encode())} bytes: move detail to docs/"
    commands = re.search(r"```bash\n(.*?)```", readme, re.S)
    assert commands and [line.split()[:2] for line in commands.group(1).splitlines()] == [["make", "demo"],
                                                                                         ["make", "test"]]
    for link in re.findall(r"\]\(((?:docs/|CHANGELOG)[^)#]+)", readme):
        assert (REPO / link).is_file(), f"README links {link}, which does not exist"


def test_the_changelog_keeps_a_changelog_with_upgrade_steps_per_release():
    text = (REPO / "CHANGELOG.md").read_text()
    releases = re.findall(r"^## \[([^\]]+)\]", text, re.M)
    assert releases[0] == "Unreleased" and "0.2.0" in releases and "0.1.0" in releases
    version = re.search(r'^version = "([^"]+)"', (REPO / "pyproject.toml").read_text(), re.M).group(1)
    assert version in releases, f"pyproject.toml's version {version} has no section in CHANGELOG.md"
    for body in re.split(r"^## ", text, flags=re.M)[1:]:
        headings = re.findall(r"^### (.+)$", body, re.M)
        allowed = {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security", "Upgrade steps"}
        assert set(headings) <= allowed and len(headings) == len(set(headings)), (body.splitlines()[0], headings)
        if not body.startswith("[0.1.0]"):
            assert "Upgrade steps" in headings, f"release {body.splitlines()[0]} has no upgrade steps"


def _literal_parts(message: str) -> list[str]:
    return [part.strip(" .") for part in message.split("…") if len(part.strip(" .")) >= 6]


def test_every_error_the_failures_page_names_is_written_by_the_code():
    page = (REPO / "docs" / "how-to" / "read-a-failure.md").read_text()
    messages = re.findall(r'^### "(.+)"$', page, re.M)
    assert len(messages) >= 12
    code = "\n".join(p.read_text() for folder in ("mlrunway", "operators") for p in (REPO / folder).rglob("*.py")
                     if "mlrunway/operators" not in p.as_posix())
    flat = re.sub(r'"\s*\n\s*f?"', "", code)  # a message split over implicitly joined string literals
    missing = [(message, part) for message in messages for part in _literal_parts(message)
               if part not in flat and re.sub(r"\{[^}]*\}", "…", part) not in flat]
    assert not missing, f"the failures page quotes messages the code no longer writes: {missing}"


def test_the_failures_check_finds_a_message_that_is_not_written():
    code = 'raise JobFailed(f"job {name}: no model at {path}")'
    assert all(part in code for part in _literal_parts("job …: no model at …"))
    assert not all(part in code for part in _literal_parts("job …: no checkpoint at …"))
