"""The files a team deploys the Ray backend with, checked without Docker or Kubernetes: docker-compose.ray.yml against
the Compose specification's schema (as docker-compose.yml is) and for what the Ray backend needs of it;
deploy/kuberay/raycluster.yaml for what KubeRay's documented RayCluster requires (apiVersion ray.io/v1, a head group
with its rayStartParams and pod template, worker groups with replicas and templates) and the storage mounted at the
same path on every pod. Not against KubeRay's CRD schema: no package registry here ships it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from mlrunway.ray.connection import RayConnection
from tests.deploy.test_compose import compose_schema, interpolate

REPO = Path(__file__).resolve().parents[2]
STORAGE = "/mnt/mlrunway"


@pytest.fixture(scope="module")
def ray_compose() -> dict[str, Any]:
    text = (REPO / "docker-compose.ray.yml").read_text().replace("${RAY_AUTH_TOKEN:?", "${RAY_AUTH_TOKEN:-")
    return interpolate(yaml.safe_load(text))


def test_the_ray_compose_file_follows_the_compose_specification(ray_compose: dict[str, Any]) -> None:
    jsonschema.validate(ray_compose, compose_schema())


def test_only_the_jobs_api_and_the_scoring_ports_are_published(ray_compose: dict[str, Any]) -> None:
    published = {name: service.get("ports", []) for name, service in ray_compose["services"].items()}
    assert published["ray-head"] == ["8265:8265"]
    assert published["ray-worker"] == ["30000-30009:30000-30009"]
    assert ray_compose["services"]["ray-worker"]["environment"]["MLRUNWAY_SCORING_PORTS"] == "30000-30009"
    assert not any(published[name] for name in published if name not in ("ray-head", "ray-worker"))


def test_every_ray_node_mlflow_and_airflow_service_mounts_the_storage_at_the_connections_path(
        ray_compose: dict[str, Any]) -> None:
    services = ray_compose["services"]
    for name in ("ray-head", "ray-worker", "mlflow", "airflow-worker", "airflow-triggerer", "airflow-scheduler",
                 "airflow-apiserver", "airflow-dag-processor"):
        assert f"ray-storage:{STORAGE}" in services[name]["volumes"], name
    connection = json.loads(services["airflow-worker"]["environment"]["AIRFLOW_CONN_MLRUNWAY_RAY"])
    parsed = RayConnection.parse(connection["extra"], "a-token")
    assert parsed.storage == STORAGE and parsed.address == "http://ray-head:8265"
    assert parsed.tracking_uri == "http://mlflow:5000"
    assert "--num-cpus=0" in services["ray-head"]["command"]  # no job on the head by accident
    assert services["ray-head"]["environment"]["RAY_AUTH_MODE"] == "token"


@pytest.fixture(scope="module")
def kuberay() -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all((REPO / "deploy" / "kuberay" / "raycluster.yaml").read_text()) if doc]


def _pods(cluster: dict[str, Any]) -> list[dict[str, Any]]:
    spec = cluster["spec"]
    return [spec["headGroupSpec"]["template"]["spec"], *(group["template"]["spec"] for group in spec["workerGroupSpecs"])]


def test_the_raycluster_has_what_kuberays_documented_raycluster_requires(kuberay: list[dict[str, Any]]) -> None:
    [cluster] = [doc for doc in kuberay if doc["kind"] == "RayCluster"]
    assert cluster["apiVersion"] == "ray.io/v1" and cluster["metadata"]["name"]
    head = cluster["spec"]["headGroupSpec"]
    assert isinstance(head["rayStartParams"], dict) and head["rayStartParams"]["num-cpus"] == "0"
    assert head["template"]["spec"]["containers"][0]["image"]
    assert all(isinstance(value, str) for value in head["rayStartParams"].values())  # KubeRay takes strings only
    assert cluster["spec"]["workerGroupSpecs"]
    for group in cluster["spec"]["workerGroupSpecs"]:
        assert group["groupName"] and isinstance(group["replicas"], int) and isinstance(group["rayStartParams"], dict)
        assert group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]
        assert group["template"]["spec"]["containers"][0]["image"]


def test_every_pod_mounts_the_storage_claim_at_the_same_path_and_reads_the_token_from_a_secret(
        kuberay: list[dict[str, Any]]) -> None:
    [cluster] = [doc for doc in kuberay if doc["kind"] == "RayCluster"]
    [claim] = [doc for doc in kuberay if doc["kind"] == "PersistentVolumeClaim"]
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    [mlflow] = [doc for doc in kuberay if doc["kind"] == "Deployment"]
    for pod in [*_pods(cluster), mlflow["spec"]["template"]["spec"]]:
        volumes = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"]}
        for container in pod["containers"]:
            mounts = {m["mountPath"]: volumes[m["name"]] for m in container["volumeMounts"]}
            assert mounts == {STORAGE: claim["metadata"]["name"]}
    for pod in _pods(cluster):
        env = {e["name"]: e for e in pod["containers"][0]["env"]}
        assert env["RAY_AUTH_MODE"]["value"] == "token"
        assert "secretKeyRef" in env["RAY_AUTH_TOKEN"]["valueFrom"] and "value" not in env["RAY_AUTH_TOKEN"]
    services = {doc["metadata"]["name"]: doc for doc in kuberay if doc["kind"] == "Service"}
    assert {"type": None} == {"type": services["mlrunway-jobs"]["spec"].get("type")}  # ClusterIP: inside only
    assert services["mlrunway-jobs"]["spec"]["ports"][0]["port"] == 8265
