"""docker-compose.yml, its GPU override and the Dockerfile, checked without a Docker engine.

The schema is the Compose specification's JSON schema as docker-compose 1.29.2 ships it
(``compose/config/compose_spec.json`` in its wheel, which ``make setup`` downloads, dependencies left out).
Compose interpolates ``${VAR:-default}`` before it validates; so does ``interpolate`` here.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SCHEMA_WHEEL_DIR = REPO / ".venv" / "compose-schema"
AIRFLOW_SERVICES = {"airflow-apiserver", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer",
                    "airflow-worker", "airflow-init"}


def compose_schema() -> dict[str, Any]:
    wheels = sorted(SCHEMA_WHEEL_DIR.glob("docker_compose-1.29.2-*.whl"))
    if not wheels:  # make setup fetches it; a bare pytest run fetches it here
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "docker-compose==1.29.2",
                        "-d", str(SCHEMA_WHEEL_DIR)], check=True)
        wheels = sorted(SCHEMA_WHEEL_DIR.glob("docker_compose-1.29.2-*.whl"))
    with zipfile.ZipFile(wheels[0]) as wheel:
        return json.loads(wheel.read("compose/config/compose_spec.json"))


def interpolate(value: Any) -> Any:
    """Compose's variable substitution with no variable set: ``${X:-d}`` and ``${X-d}`` give d, ``$$`` gives $."""
    if isinstance(value, dict):
        return {k: interpolate(v) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v) for v in value]
    if isinstance(value, str):
        value = re.sub(r"(?<!\$)\$\{(\w+)(?::?-([^}]*))?\}", lambda m: m.group(2) or "", value)
        return value.replace("$$", "$")
    return value


def load(name: str) -> dict[str, Any]:
    return interpolate(yaml.safe_load((REPO / name).read_text()))


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return load("docker-compose.yml")


@pytest.mark.parametrize("name", ["docker-compose.yml", "docker-compose.gpu.yml"])
def test_files_follow_the_compose_specification(name: str) -> None:
    jsonschema.validate(load(name), compose_schema())


def test_the_validator_rejects_what_compose_rejects(compose: dict[str, Any]) -> None:
    broken = json.loads(json.dumps(compose))
    broken["services"]["airflow-worker"]["depends_on"]["redis"] = {"condition": "service_ready"}
    with pytest.raises(jsonschema.ValidationError, match="service_ready"):
        jsonschema.validate(broken, compose_schema())


def test_services_are_airflows_official_set_plus_its_backing_stores(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert AIRFLOW_SERVICES | {"postgres", "redis"} <= set(services)
    for name, service in services.items():
        for needed in service.get("depends_on", {}):
            assert needed in services, f"{name} depends on {needed}, which is not a service"
        long_running = name != "airflow-init" and "profiles" not in service
        assert not long_running or "healthcheck" in service, f"{name} has no health check"


def test_airflow_runs_celery_on_postgres_and_redis(compose: dict[str, Any]) -> None:
    env = compose["services"]["airflow-scheduler"]["environment"]
    assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql+psycopg2://") and "@postgres/" in env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
    assert env["AIRFLOW__CELERY__BROKER_URL"].startswith("redis://") and "@redis:6379" in env["AIRFLOW__CELERY__BROKER_URL"]
    assert compose["services"]["airflow-worker"]["command"] == "celery worker"


def test_every_airflow_service_shares_the_workspace_and_mounts_existing_paths(compose: dict[str, Any]) -> None:
    for name in AIRFLOW_SERVICES:
        service = compose["services"][name]
        mounts = dict(v.split(":", 1) for v in service["volumes"])
        workspace = service["environment"]["MLRUNWAY_WORKSPACE"]
        assert mounts.get("mlrunway-workspace") == workspace, f"{name} does not mount the shared workspace"
        assert "mlrunway-workspace" in compose["volumes"]
        for source in mounts:
            if source.startswith("."):
                assert (REPO / source).is_dir(), f"{name} mounts {source}, which is not in the repository"
        assert {"./dags", "./plugins", "./training"} <= set(mounts)
        assert "./operators" not in mounts  # they are the image's mlrunway.operators, from the wheel
        assert service["build"]["context"] == "." and (REPO / "Dockerfile").is_file()


def test_dag_defaults_resolve_inside_the_containers(compose: dict[str, Any]) -> None:
    """The DAG's code_dir is <dags>/../training, so training/ must sit beside the mounted dags/."""
    mounts = dict(v.split(":", 1) for v in compose["services"]["airflow-worker"]["volumes"])
    assert Path(mounts["./dags"]).parent / "training" == Path(mounts["./training"])
    dockerfile = (REPO / "Dockerfile").read_text()
    assert compose["services"]["airflow-worker"]["environment"]["MLRUNWAY_DATA_DIR"] in dockerfile


def test_dockerfile_pins_torch_before_the_project_and_copies_what_exists() -> None:
    lines = [line for line in (REPO / "Dockerfile").read_text().splitlines() if line and not line.startswith("#")]
    assert lines[0].startswith("FROM apache/airflow:3.3.2-python3.11")
    installs = [i for i, line in enumerate(lines) if "pip install" in line]
    assert "torch==2.13.0" in lines[installs[0]] and "--index-url" in lines[installs[0]]
    # The built wheel with the extras the services need, never the source tree.
    (wheel,) = [i for i, line in enumerate(lines) if "pip wheel" in line]
    assert wheel < min(installs) and lines[wheel].split()[-1] == "/tmp/src"
    project = " ".join(lines[installs[1]:installs[1] + 2])
    assert '"mlrunway[local,azure] @ file://' in project and "-c /opt/mlrunway/constraints.txt" in project
    assert not any("/tmp/src" in lines[i] or "/opt/mlrunway/src" in lines[i] for i in installs)
    for line in lines:
        if line.startswith("COPY") and "--from=" not in line:  # not a file of a build stage
            for source in [p for p in line.split()[1:-1] if not p.startswith("--")]:
                assert (REPO / source).exists(), f"Dockerfile copies {source}, which does not exist"


def test_gpu_override_reserves_gpus_for_an_existing_service(compose: dict[str, Any]) -> None:
    gpu = load("docker-compose.gpu.yml")
    for name, service in gpu["services"].items():
        assert name in compose["services"]
        devices = service["deploy"]["resources"]["reservations"]["devices"]
        assert devices[0]["driver"] == "nvidia" and "gpu" in devices[0]["capabilities"]
