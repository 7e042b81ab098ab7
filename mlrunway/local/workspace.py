"""The local workspace: one folder that holds jobs, models, endpoints and the MLflow store."""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

from mlrunway import check

DEFAULT_ROOT_ENV = "MLRUNWAY_WORKSPACE"


class Workspace(NamedTuple):
    """Paths under a workspace root; nothing here starts a process or imports MLflow. (A named tuple, not a
    dataclass: every job's supervisor imports it, and dataclasses' import is a tenth of that process's start.)"""

    root: Path

    @classmethod
    def at(cls, root: str | os.PathLike[str] | None = None) -> Workspace:
        """Open the workspace at ``root``, ``$MLRUNWAY_WORKSPACE``, or ``./.workspace``: one written by an older
        mlrunway is migrated first, one written by a newer one refused (:mod:`mlrunway.local.formats`)."""
        chosen = Path(root or os.environ.get(DEFAULT_ROOT_ENV) or ".workspace").expanduser().resolve()
        chosen.mkdir(parents=True, exist_ok=True)
        from mlrunway.local import formats

        formats.open_workspace(chosen)
        return cls(chosen)

    @property
    def jobs(self) -> Path:
        return self.root / "jobs"

    @property
    def models(self) -> Path:
        return self.root / "models"

    @property
    def endpoints(self) -> Path:
        return self.root / "endpoints"

    @property
    def tracking_uri(self) -> str:
        return f"sqlite:///{self.root / 'mlflow.db'}"

    def outside(self, path: Path) -> str | None:
        """Why ``path``, an entry of the workspace, is not followed: it is a symbolic link, or resolves outside the
        workspace (reading a job there would rewrite another's files); None for one of the workspace's own."""
        if path.is_symlink():
            return f"{path} is a symbolic link (to {os.readlink(path)})"
        if not (resolved := path.resolve()).is_relative_to(self.root.resolve()):  # a root given as it was found
            return f"{path} resolves to {resolved}, outside workspace {self.root}"
        return None

    def job_dir(self, name: str) -> Path:
        """A job's folder; a name that is not a job name (``..``, a slash) is refused before any path is made."""
        return self.jobs / check.job_name("job.name", name)

    def model_dir(self, name: str) -> Path:
        """A model's folder; a name that is not a model name is refused before any path is made."""
        return self.models / check.model_name("model.name", name)
