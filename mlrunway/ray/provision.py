"""A Ray endpoint's deployment provisioned on the cluster: ``python -m mlrunway.ray.provision <endpoint folder> <name>
<version>``, a Ray job the control plane (:mod:`mlrunway.ray.endpoints`) submits with the endpoint's profile, as
Azure provisions a deployment while its caller goes on.

It imports the version's score.py from its copy on the shared storage and runs ``init()`` with the model (a fresh
interpreter, as Azure starts a container: :func:`mlrunway.serving.runtime.load_deployment`). Only a deployment whose
``init()`` returns joins the endpoint: this job commits it to ``endpoint.json`` (the servers' workers load it on
their next request), so provisioning finishes even when whoever started it has exited (a task that deferred). Until
then the version that was serving goes on serving. Its progress is the deployment's ``provision.json``, its output
the version's ``provision.log``.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

from mlrunway.locks import locked
from mlrunway.serving.state import DeploymentState, EndpointState, write_json

__all__ = ["DEPLOYMENT_FILE", "RECORD", "main", "state_lock"]

RECORD = "provision.json"  # deployments/<name>/: {"version", "state", "error"}
DEPLOYMENT_FILE = "deployment.json"  # deployments/<name>/v<version>/: the deployment (mode 0600: its variables)


def state_lock(folder: Path) -> Path:
    """The lock every read-modify-write of the endpoint's state holds (control plane and provisioning jobs)."""
    return folder / ".state.lock"


def main(folder: Path, name: str, version: int) -> int:
    from mlrunway.serving import capture
    from mlrunway.serving.runtime import load_deployment

    home = folder / "deployments" / name
    deployment = DeploymentState(**json.loads((home / f"v{version}" / DEPLOYMENT_FILE).read_text()))
    try:
        load_deployment(folder, deployment)
        capture.WRITER.flush()  # what init() collected, if anything
        error = None
    except BaseException:  # noqa: BLE001 - score.py's own failure, whatever it is, is the deployment's
        traceback.print_exc()
        sys.stderr.flush()
        error = f"score.py init() raised: {traceback.format_exc(limit=-8).strip()[-3000:]}"
    if not (folder / "endpoint.json").exists():  # the endpoint was deleted meanwhile: nothing to report to
        return 1
    with locked(state_lock(folder)):
        record = json.loads((home / RECORD).read_text()) if (home / RECORD).exists() else {}
        if record.get("version") != version:  # a newer version superseded this one: it reports nothing
            return 1
        if error is None:
            state = EndpointState.load(folder)
            state.deployments[name] = deployment
            state.save(folder)
        write_json(home / RECORD, {**record, "state": "Failed" if error else "Succeeded", "error": error})
    return 1 if error else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])))
