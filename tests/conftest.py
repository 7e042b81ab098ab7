"""Shared fixtures: a workspace in tmp_path, the local job service, and the digits dataset written once."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from mlrunway.backend.types import DeploymentSettings
from mlrunway.local.jobs import LocalJobs
from mlrunway.local.workspace import Workspace

REPO = Path(__file__).resolve().parent.parent

# Airflow reads its configuration when first imported: give the test session its own home, before any import.
os.environ["AIRFLOW_HOME"] = tempfile.mkdtemp(prefix="mlrunway-airflow-")
atexit.register(shutil.rmtree, os.environ["AIRFLOW_HOME"], ignore_errors=True)  # the session's home goes with it
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
# As a deployment with a triggerer sets it (make demo, make ui and docker-compose.yml do): waiting tasks defer.
os.environ.setdefault("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "True")
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(REPO / "dags")
os.environ.pop("MLRUNWAY_WORKSPACE", None)


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    return Workspace.at(tmp_path / "ws")


@pytest.fixture
def jobs(workspace: Workspace) -> LocalJobs:
    return LocalJobs(workspace, kill_grace_s=2.0)


@pytest.fixture(scope="session")
def digits(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from mlrunway.data import write_digits

    return write_digits(tmp_path_factory.mktemp("data") / "digits")


def write_script(folder: Path, body: str, name: str = "script.py") -> Path:
    """Write a job's code folder holding one script; return the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(body)
    return folder


@pytest.fixture(scope="session")
def trained_model(tmp_path_factory: pytest.TempPathFactory, digits: Path) -> Path:
    """A real model from training/train.py (3 epochs on digits), trained once per session in-process."""
    import importlib.util
    import os

    out = tmp_path_factory.mktemp("trained")
    spec = importlib.util.spec_from_file_location("example_train", REPO / "training" / "train.py")
    train = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(train)
    os.environ.setdefault("MLFLOW_TRACKING_URI", f"sqlite:///{out / 'mlflow.db'}")
    train.main(["--data-dir", str(digits), "--num-epochs", "3", "--learning-rate", "0.05", "--output-dir", str(out)])
    return out / "model"


@pytest.fixture(scope="session")
def onnx_model(tmp_path_factory: pytest.TempPathFactory, trained_model: Path, digits: Path) -> Path:
    from mlrunway.onnx_export import export_onnx

    out = tmp_path_factory.mktemp("onnx") / "model"
    export_onnx(trained_model, out, data_dir=digits)
    return out


@pytest.fixture(scope="session")
def airflow_db() -> str:
    """A migrated SQLite metadata database in the session's AIRFLOW_HOME."""
    import subprocess
    import sys

    subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], check=True, capture_output=True)
    return os.environ["AIRFLOW_HOME"]


@pytest.fixture(scope="session")
def small_digits(digits: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two images per class of each split: enough to upload, quick through the fake's blob store."""
    small = tmp_path_factory.mktemp("small") / "digits"
    for split in ("train", "val"):
        for cls in sorted((digits / split).iterdir()):
            (small / split / cls.name).mkdir(parents=True)
            for image in sorted(cls.iterdir())[:2]:
                shutil.copy(image, small / split / cls.name / image.name)
    return small


def deployment(workspace: Workspace, model_dir: Path, code_dir: Path, *, model_name: str = "model",
               **settings: object) -> DeploymentSettings:
    """Register ``model_dir`` in the workspace's registry and return settings that deploy it with ``code_dir``."""
    from mlrunway.local.registry import LocalModels

    model = LocalModels(workspace).register(model_name, model_dir)
    return DeploymentSettings(model=f"{model.name}:{model.version}", code_dir=str(code_dir), **settings)  # type: ignore[arg-type]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A costly backend's set-up (a Ray cluster: tests/contract/conftest.py's COSTLY) is asked for only from its own
    file, tests/contract/test_on_<id>.py: under ``--dist loadfile`` each file that asked would start a cluster of
    its own. Any other test that asks fails the collection, naming it."""
    strays = [item.nodeid for item in items if "costly_set_up" in getattr(item, "fixturenames", ())
              and item.path.name != f"test_on_{item.callspec.params.get('costly_set_up', '')}.py"
              if hasattr(item, "callspec")]
    if strays:
        raise pytest.UsageError("only tests/contract/test_on_<backend>.py may set up a costly backend (one file, one "
                                f"cluster); move these tests there: {', '.join(strays)}")
