"""What of a job's code folder is snapshotted, as Azure ML decides it: ``.amlignore`` (else ``.gitignore``)
patterns are left out, and so are version control, caches, ``outputs``, virtualenvs and any folder the caller
names (the local backend's own workspace, when it lies inside the code folder). A snapshot over ``max_bytes``
is refused with its largest files named, before anything is copied.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from mlrunway import check

ALWAYS_SKIPPED = {".git", "__pycache__", "outputs", ".ipynb_checkpoints", ".mypy_cache", ".pytest_cache"}
DEFAULT_MAX_MB = 300.0  # Azure ML's own snapshot limit; MLRUNWAY_SNAPSHOT_MAX_MB changes it


def _patterns(code: Path) -> list[str]:
    """The ignore file Azure ML reads: ``.amlignore`` when there is one, else ``.gitignore``."""
    for name in (".amlignore", ".gitignore"):
        if (code / name).is_file():
            lines = (line.strip() for line in (code / name).read_text(errors="replace").splitlines())
            return [line for line in lines if line and not line.startswith("#")]
    return []


def _ignored(relative: str, is_dir: bool, patterns: list[str]) -> bool:
    """gitignore's rules that matter here: the last matching pattern wins, ``!`` re-includes, a trailing ``/``
    matches folders only, a pattern with a ``/`` is anchored at the code folder, one without matches any name."""
    verdict = False
    for raw in patterns:
        negate, pattern = raw.startswith("!"), raw.lstrip("!")
        if pattern.endswith("/"):
            if not is_dir:
                continue
            pattern = pattern.rstrip("/")
        if "/" in pattern:
            hit = fnmatch.fnmatch(relative, pattern.lstrip("/")) or fnmatch.fnmatch(relative, pattern.lstrip("/") + "/*")
        else:
            hit = any(fnmatch.fnmatch(part, pattern) for part in relative.split("/"))
        if hit:
            verdict = not negate
    return verdict


def snapshot_files(code: str | Path, *, exclude: Iterable[str | Path] = ()) -> list[Path]:
    """Every file of the snapshot, relative to ``code``, in a stable order."""
    root = Path(code).resolve()
    skipped = {Path(p).resolve() for p in exclude}
    patterns = _patterns(root)
    files: list[Path] = []
    for folder, dirs, names in os.walk(root):
        here = Path(folder)
        keep = []
        for name in sorted(dirs):
            path = here / name
            if name in ALWAYS_SKIPPED or path.resolve() in skipped or (path / "pyvenv.cfg").is_file() \
                    or _ignored(path.relative_to(root).as_posix(), True, patterns):
                continue
            keep.append(name)
        dirs[:] = keep
        for name in sorted(names):
            file = (here / name).relative_to(root)
            if not _ignored(file.as_posix(), False, patterns) and not name.endswith(".pyc"):
                files.append(file)
    return files


def check_size(field: str, code: str | Path, files: list[Path], max_mb: float | None = None) -> None:
    """Refuse a snapshot over ``max_mb`` (default: MLRUNWAY_SNAPSHOT_MAX_MB or 300), naming its largest files."""
    limit = float(max_mb if max_mb is not None else os.environ.get("MLRUNWAY_SNAPSHOT_MAX_MB", DEFAULT_MAX_MB))
    root = Path(code)
    sizes = sorted(((root / f).lstat().st_size, f) for f in files)
    total = sum(size for size, _ in sizes)
    if total > limit * 2**20:
        largest = ", ".join(f"{f} ({size / 2**20:.1f} MB)" for size, f in sizes[:-6:-1])
        raise check.fail(field, f"the code snapshot of {root} is {total / 2**20:.1f} MB, over the {limit:g} MB "
                                f"limit; largest: {largest}",
                         "move data out of the code folder (pass it as an input), list what the job does not "
                         "need in .amlignore, or raise MLRUNWAY_SNAPSHOT_MAX_MB")


def copy_snapshot(field: str, code: str | Path, dest: Path, *, exclude: Iterable[str | Path] = (),
                  max_mb: float | None = None) -> int:
    """Copy the snapshot of ``code`` into ``dest`` (links stay links); return the number of files."""
    files = snapshot_files(code, exclude=exclude)
    check_size(field, code, files, max_mb)
    dest.mkdir(parents=True, exist_ok=True)
    for relative in files:
        target = dest / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(Path(code) / relative, target, follow_symlinks=False)
    return len(files)
