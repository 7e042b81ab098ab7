"""The Ray connection's preflight: what is checked before any job, once per connection and process: the Jobs API
answers with a Ray that suits, the storage is writable, the tracking server answers, and (a probe job, its answer
kept per cluster session) the cluster's Python has what mlrunway's controller imports."""

from __future__ import annotations

import contextlib
import functools
import json
import shlex
import time
from pathlib import Path

from mlrunway import check
from mlrunway.errors import NotFound, Unavailable
from mlrunway.ray.client import JobsApi, RayApiError
from mlrunway.ray.closure import NEEDS
from mlrunway.ray.connection import RayConnection

__all__ = ["MIN_RAY", "check_connection"]

MIN_RAY = (2, 60)  # the release the backend is tested on; an older cluster's Jobs API is refused
PROBE_WAIT_S = 120.0


def check_connection(connection: RayConnection) -> None:
    """Before any job, each refusal naming the connection's field: the cluster answers and its Ray suits,
    ``storage`` is writable, the tracking server answers. Checked once per connection and process."""
    _checked(connection.address, connection.token, connection.storage, connection.namespace,
             connection.tracking_uri)


@functools.cache
def _checked(address: str, token: str | None, storage: str, namespace: str, tracking_uri: str) -> None:
    field_of = "mlrunway_ray connection"
    api = JobsApi(address, token, timeout_s=10.0)
    try:
        version = api.version()
    except (Unavailable, RayApiError) as exc:
        raise check.fail(f"{field_of}.address", f"the cluster's Jobs API did not answer: {exc}",
                         "start the cluster, or give the head's dashboard address (http://<head>:8265)") from None
    found = str(version.get("ray_version", "0"))
    if tuple(int(part) for part in found.split(".")[:2] if part.isdigit()) < MIN_RAY:
        raise check.fail(f"{field_of}.address", f"the cluster runs Ray {found}",
                         f"run Ray {'.'.join(map(str, MIN_RAY))} or newer on the cluster")
    probe = Path(storage) / namespace / f".probe-{time.time_ns()}"
    try:
        probe.parent.mkdir(parents=True, exist_ok=True)
        probe.write_text("mlrunway")
        probe.unlink()
    except OSError as exc:
        raise check.fail(f"{field_of}.storage", f"cannot be written here ({exc})",
                         "mount the shared folder at the same path on every node and Airflow component") from None
    import requests

    try:
        answer = requests.get(f"{tracking_uri}/health", timeout=10)
        answer.raise_for_status()
    except requests.RequestException as exc:
        raise check.fail(f"{field_of}.tracking_uri", f"the MLflow server did not answer ({exc})",
                         "start the tracking server (mlflow server), or give its address") from None
    _probe(api, Path(storage) / namespace, namespace, str(version.get("session_name", "")))


def _probe(api: JobsApi, root: Path, namespace: str, session: str) -> None:
    """A tiny job asking for no resources, as the sweep's controller does: the cluster's Python has what the
    controller imports (:data:`mlrunway.ray.closure.NEEDS`). Its answer is kept on the storage per cluster session
    (``.probe.json``): a restarted cluster is asked again, the same one never twice."""
    kept = root / ".probe.json"
    with contextlib.suppress(OSError, ValueError):
        if json.loads(kept.read_text()).get("session") == session and session:
            return
    script = ("import importlib.util, json; print('MLRUNWAY-PROBE', json.dumps([m for m in "
              f"{list(NEEDS)!r} if importlib.util.find_spec(m) is None]))")
    submission = f"{namespace}.probe-{time.time_ns()}"
    api.submit({"entrypoint": shlex.join(["python", "-c", script]), "submission_id": submission,
                "entrypoint_num_cpus": 0, "metadata": {"mlrunway.kind": "probe"}})
    deadline = time.monotonic() + PROBE_WAIT_S
    while (status := api.job(submission)["status"]) not in ("SUCCEEDED", "FAILED", "STOPPED"):
        if time.monotonic() > deadline:
            api.stop(submission)
            raise check.fail("mlrunway_ray connection.address", f"a probe job did not end within {PROBE_WAIT_S:g} s "
                             "(the head takes no job: is it out of memory, or its job agent down?)",
                             "look at the head's dashboard, then retry")
        time.sleep(0.5)
    lines = [line for line in api.logs(submission).splitlines() if line.startswith("MLRUNWAY-PROBE ")]
    with contextlib.suppress(NotFound, RayApiError):
        api.delete(submission)
    if status != "SUCCEEDED" or not lines:
        raise check.fail("mlrunway_ray connection.address", f"a probe job on the cluster ended {status}",
                         "look at the head's dashboard for why; the cluster's Python must run `python -c`")
    missing = json.loads(lines[-1].removeprefix("MLRUNWAY-PROBE "))
    if missing:
        raise check.fail("mlrunway_ray connection.address", f"the cluster's Python lacks {', '.join(missing)}, "
                         "which mlrunway's sweep controller imports",
                         'pip install "mlrunway[ray]" on every node (or into the image the cluster runs)')
    root.mkdir(parents=True, exist_ok=True)
    kept.write_text(json.dumps({"session": session, "at": time.time()}))
