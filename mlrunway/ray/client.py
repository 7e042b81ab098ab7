"""Ray's Jobs REST API, over HTTP: what the Airflow side of the Ray backend talks to (it imports no ``ray``, so
workers and the triggerer stay light).

The routes are the head's dashboard's (Ray's ``JobSubmissionClient`` uses the same): ``GET /api/version``,
``POST /api/jobs/``, ``GET /api/jobs/{id}``, ``GET /api/jobs/{id}/logs``, ``POST /api/jobs/{id}/stop``,
``DELETE /api/jobs/{id}``, the state API's ``GET /api/v0/nodes``, and the packages a job's ``working_dir`` names (``GET``/``PUT
/api/packages/gcs/_ray_pkg_<hash>.zip``). A token goes into the ``Authorization`` header only.
"""

from __future__ import annotations

import hashlib
import io
import os
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import requests

from mlrunway.errors import MlrunwayError, NotFound, Unavailable

__all__ = ["PACKAGE_LIMIT", "JobsApi", "RayApiError", "zip_folder"]

# What Ray's GCS takes as one package (RAY_max_grpc_message_size's default, less room for the request itself).
PACKAGE_LIMIT = 500 * 1024 * 1024
TIMEOUT_S = 30.0


class RayApiError(MlrunwayError):
    """The Jobs API refused a request (its status and answer)."""


class JobsApi:
    """One cluster's Jobs API. Connection errors and 5xx answers are Unavailable (a wait rides them out)."""

    def __init__(self, address: str, token: str | None = None, *, timeout_s: float = TIMEOUT_S) -> None:
        self.address = address.rstrip("/")
        self.timeout_s = timeout_s
        self.session = requests.Session()
        if token:
            self.session.headers["Authorization"] = f"Bearer {token}"

    def _call(self, method: str, path: str, *, ok: Iterable[int] = (200,), **kwargs: Any) -> requests.Response:
        try:
            answer = self.session.request(method, f"{self.address}{path}", timeout=self.timeout_s, **kwargs)
        except requests.RequestException as exc:
            raise Unavailable(f"Ray's Jobs API at {self.address} did not answer {method} {path}: {exc}") from exc
        if answer.status_code in ok:
            return answer
        text = answer.text.strip()[:500]
        if answer.status_code in (401, 403):
            raise RayApiError(f"Ray's Jobs API at {self.address} refused {method} {path} ({answer.status_code}): "
                              "the connection's token is missing or wrong; put the cluster's token "
                              "(RAY_AUTH_TOKEN) in the connection's password")
        if answer.status_code == 404:
            raise NotFound(f"{method} {path}: not found at {self.address} ({text})")
        if answer.status_code >= 500 and "does not exist" not in text:
            raise Unavailable(f"Ray's Jobs API at {self.address} answered {answer.status_code} to {method} {path}: "
                              f"{text}")
        raise RayApiError(f"Ray's Jobs API at {self.address} answered {answer.status_code} to {method} {path}: {text}")

    def version(self) -> dict[str, Any]:
        """``{"version", "ray_version", "ray_commit", ...}``."""
        return dict(self._call("GET", "/api/version").json())

    def submit(self, body: dict[str, Any]) -> str:
        """Submit a job (``entrypoint``, ``submission_id``, ``runtime_env``, ``metadata``, ``entrypoint_*``)."""
        return str(self._call("POST", "/api/jobs/", json=body).json()["submission_id"])

    def job(self, submission_id: str) -> dict[str, Any]:
        """The job's details (``status``, ``message``, ``start_time``/``end_time`` in ms, ``driver_exit_code``);
        NotFound when the cluster does not know it."""
        return dict(self._call("GET", f"/api/jobs/{submission_id}").json())

    def jobs(self) -> list[dict[str, Any]]:
        return list(self._call("GET", "/api/jobs/").json())

    def logs(self, submission_id: str) -> str:
        return str(self._call("GET", f"/api/jobs/{submission_id}/logs").json().get("logs", ""))

    def stop(self, submission_id: str) -> bool:
        """Ask the job to stop; whether it was running."""
        return bool(self._call("POST", f"/api/jobs/{submission_id}/stop").json().get("stopped", False))

    def delete(self, submission_id: str) -> bool:
        return bool(self._call("DELETE", f"/api/jobs/{submission_id}").json().get("deleted", False))

    def nodes(self) -> list[dict[str, Any]]:
        """The cluster's nodes, from Ray's state API (``GET /api/v0/nodes``): ``node_id``, ``state``,
        ``resources_total`` and the rest of each."""
        answer = self._call("GET", "/api/v0/nodes", params={"limit": 10000}).json()
        try:
            return list(answer["data"]["result"]["result"])
        except (KeyError, TypeError):
            raise RayApiError(f"Ray's state API at {self.address} answered GET /api/v0/nodes with no node list: "
                              f"{str(answer)[:300]}") from None

    def upload(self, package: bytes) -> str:
        """Upload a zip as a package the cluster keeps (once per content): its ``gcs://`` URI for ``working_dir``
        or ``py_modules``."""
        name = f"_ray_pkg_{hashlib.sha1(package).hexdigest()}.zip"
        try:
            self._call("GET", f"/api/packages/gcs/{name}")
        except NotFound:
            self._call("PUT", f"/api/packages/gcs/{name}", data=package)
        return f"gcs://{name}"


def zip_folder(folder: Path, files: Iterable[Path], *, extra: dict[str, bytes] | None = None) -> bytes:
    """``files`` (under ``folder``, absolute or relative to it) as a zip with their paths relative to it, in name
    order with fixed times, so the same content is the same package; ``extra``: more files, by relative path."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(folder / file for file in files):
            relative = path.relative_to(folder).as_posix()
            entry = zipfile.ZipInfo(relative, date_time=(1980, 1, 1, 0, 0, 0))
            entry.external_attr = (os.stat(path).st_mode & 0o777 | 0o100000) << 16
            archive.writestr(entry, path.read_bytes(), compress_type=zipfile.ZIP_DEFLATED)
        for relative, data in sorted((extra or {}).items()):
            entry = zipfile.ZipInfo(relative, date_time=(1980, 1, 1, 0, 0, 0))
            entry.external_attr = 0o100644 << 16
            archive.writestr(entry, data, compress_type=zipfile.ZIP_DEFLATED)
    return buffer.getvalue()
