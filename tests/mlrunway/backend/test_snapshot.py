"""The code snapshot as Azure ML makes it, and the local backend's job folders built from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlrunway.backend.snapshot import copy_snapshot, snapshot_files
from mlrunway.errors import SpecError


def tree(root: Path, files: dict[str, str | bytes]) -> Path:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return root


def names(files: list[Path]) -> list[str]:
    return [f.as_posix() for f in files]


def test_amlignore_wins_over_gitignore_with_negation_folders_and_anchors(tmp_path):
    code = tree(tmp_path / "code", {
        "train.py": "", "data/big.bin": "x", "data/keep.csv": "", "notes.tmp": "", "src/notes.tmp": "",
        "checkpoints/a.pt": "", "docs/readme.md": "", "src/docs": "a file, not the anchored folder",
        ".gitignore": "train.py\n", ".amlignore": "# comment\ndata/*\n!data/keep.csv\n*.tmp\ncheckpoints/\n/docs\n",
    })
    assert names(snapshot_files(code)) == [".amlignore", ".gitignore", "train.py", "data/keep.csv", "src/docs"]


def test_gitignore_is_read_when_there_is_no_amlignore(tmp_path):
    code = tree(tmp_path / "code", {"train.py": "", "wandb/run.log": "", ".gitignore": "wandb/\n"})
    assert names(snapshot_files(code)) == [".gitignore", "train.py"]


def test_caches_outputs_version_control_and_any_virtualenv_are_never_copied(tmp_path):
    code = tree(tmp_path / "code", {
        "train.py": "", "__pycache__/x.pyc": "", "outputs/model.pt2": "", ".git/HEAD": "", "mod.pyc": "",
        "env311/pyvenv.cfg": "home = /usr", "env311/lib/site.py": "", "venv-not/readme": "",
    })
    assert names(snapshot_files(code)) == ["train.py", "venv-not/readme"]


def test_a_code_folder_that_holds_the_workspace_is_snapshotted_without_it(tmp_path):
    """The 441 MB 'File name too long' recursion: the workspace (with every earlier job's snapshot in it) is
    inside the code folder; it is left out, and each job runs from a snapshot of the code alone."""
    from mlrunway.local.jobs import LocalJobs
    from mlrunway.local.workspace import Workspace
    from mlrunway.specs import CommandJobSpec

    code = tree(tmp_path / "project", {"train.py": "import pathlib; pathlib.Path('outputs/ok').write_text('1')\n"})
    jobs = LocalJobs(Workspace(code / ".workspace"))
    spec = CommandJobSpec(code=str(code), command="python train.py")
    jobs.validate(spec)
    for name in ("first", "second"):
        assert jobs.wait(jobs.submit(name, spec).name, timeout=60, poll_s=0.1).status.value == "Completed"
    snapshot = jobs.workspace.job_dir("second") / "code"
    assert sorted(p.name for p in snapshot.iterdir()) == ["outputs", "train.py"]


def test_an_oversized_snapshot_is_refused_before_copying_with_its_largest_files(tmp_path):
    code = tree(tmp_path / "code", {"train.py": "", "weights.bin": b"0" * 3 * 2**20, "data.npy": b"0" * 2**20})
    with pytest.raises(SpecError) as refused:
        copy_snapshot("command_job.code", code, tmp_path / "dest", max_mb=2)
    message = str(refused.value)
    assert message.startswith("command_job.code: the code snapshot of") and "over the 2 MB limit" in message
    assert "largest: weights.bin (3.0 MB), data.npy (1.0 MB), train.py (0.0 MB)" in message
    assert ".amlignore" in message and len(message) < 600
    assert not (tmp_path / "dest").exists()
