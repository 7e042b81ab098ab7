"""Local deployments provision in the background, as on Azure: real provisioning processes, a real server.

The scoring script's ``init()`` waits for a gate file, so a test sees a deployment while it provisions.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import psutil
import pytest

from mlrunway.backend.types import DeploymentSettings, EndpointSettings, ProvisioningState
from mlrunway.errors import NotFound
from mlrunway.local.serving import provision
from mlrunway.local.serving.endpoints import LocalEndpoints
from tests.conftest import deployment, write_script
from tests.mlrunway.local.serving.test_endpoint import wait_until

pytestmark = pytest.mark.slow

GATED_SCORE = """
import os, time
from pathlib import Path

def init():
    global TAG
    TAG = os.environ["TAG"]
    gate, deadline = Path(os.environ["GATE"]), time.time() + 60
    while not gate.exists():
        if time.time() > deadline:
            raise TimeoutError("the gate never opened")
        time.sleep(0.05)
    if TAG == "broken":
        raise RuntimeError("weights do not match the graph")

def run(raw):
    return {"tag": TAG}
"""


@pytest.fixture
def endpoints(workspace):
    service = LocalEndpoints(workspace)
    yield service
    for state in service.list():
        service.delete(state.name)


@pytest.fixture
def gated(tmp_path: Path) -> dict:
    model = tmp_path / "model"
    model.mkdir()
    code = write_script(tmp_path / "code", GATED_SCORE, "score.py")
    return {"model_dir": model, "code_dir": code, "gate": tmp_path / "gate"}


def settings(endpoints: LocalEndpoints, gated: dict, tag: str) -> DeploymentSettings:
    return deployment(endpoints.workspace, gated["model_dir"], gated["code_dir"],
                      environment_variables={"TAG": tag, "GATE": str(gated["gate"])})


def state_of(endpoints: LocalEndpoints, endpoint: str, name: str = "blue") -> ProvisioningState:
    return endpoints.get_deployment(endpoint, name).provisioning_state


def provisioning_pid(endpoints: LocalEndpoints, endpoint: str, name: str = "blue") -> int:
    return provision.read(endpoints.workspace.endpoints / endpoint, name)["pid"]


def test_a_new_version_provisions_in_the_background_while_the_old_one_serves(endpoints, gated):
    endpoints.create_or_update("bg-ep", EndpointSettings(workers=1))
    gated["gate"].touch()
    endpoints.create_or_update_deployment("bg-ep", "blue", settings(endpoints, gated, "v1"))
    endpoints.set_traffic("bg-ep", {"blue": 100})
    assert json.loads(endpoints.invoke("bg-ep", payload={})) == {"tag": "v1"}  # the worker has run v1's init()
    gated["gate"].unlink()

    info = endpoints.begin_create_or_update_deployment("bg-ep", "blue", settings(endpoints, gated, "v2"))
    assert info.provisioning_state is ProvisioningState.UPDATING
    assert json.loads(endpoints.invoke("bg-ep", payload={})) == {"tag": "v1"}  # the serving version serves on
    assert state_of(endpoints, "bg-ep") is ProvisioningState.UPDATING

    gated["gate"].touch()
    wait_until(lambda: state_of(endpoints, "bg-ep") is ProvisioningState.SUCCEEDED)
    assert json.loads(endpoints.invoke("bg-ep", payload={})) == {"tag": "v2"}
    assert endpoints.state("bg-ep").deployments["blue"].version == 2


def test_a_failing_init_ends_failed_with_its_log_and_joins_nothing(endpoints, gated):
    endpoints.create_or_update("bad-ep", EndpointSettings(workers=1))
    gated["gate"].touch()
    assert endpoints.begin_create_or_update_deployment("bad-ep", "blue", settings(endpoints, gated, "broken")).provisioning_state \
        is ProvisioningState.CREATING
    wait_until(lambda: state_of(endpoints, "bad-ep").is_terminal())
    info = endpoints.get_deployment("bad-ep", "blue")
    assert info.provisioning_state is ProvisioningState.FAILED
    assert "score.py init() raised" in info.error and "RuntimeError: weights do not match the graph" in info.error
    assert endpoints.state("bad-ep").deployments == {}


def test_a_provisioning_process_that_dies_without_a_word_is_reported_failed(endpoints, gated):
    endpoints.create_or_update("dead-ep", EndpointSettings(workers=1))
    endpoints.begin_create_or_update_deployment("dead-ep", "blue", settings(endpoints, gated, "v1"))
    os.killpg(provisioning_pid(endpoints, "dead-ep"), signal.SIGKILL)
    wait_until(lambda: state_of(endpoints, "dead-ep").is_terminal())
    info = endpoints.get_deployment("dead-ep", "blue")
    assert info.provisioning_state is ProvisioningState.FAILED
    assert "exited without a result" in info.error


def test_deleting_stops_provisioning_of_a_deployment_and_of_a_whole_endpoint(endpoints, gated):
    endpoints.create_or_update("del-ep", EndpointSettings(workers=1))
    endpoints.begin_create_or_update_deployment("del-ep", "blue", settings(endpoints, gated, "v1"))
    pid = provisioning_pid(endpoints, "del-ep")
    assert endpoints.delete_deployment("del-ep", "blue") is True
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    with pytest.raises(NotFound, match="deployment blue of endpoint del-ep does not exist"):
        endpoints.get_deployment("del-ep", "blue")

    endpoints.begin_create_or_update_deployment("del-ep", "green", settings(endpoints, gated, "v1"))
    pid = provisioning_pid(endpoints, "del-ep", "green")
    assert endpoints.delete("del-ep") is True
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    gated["gate"].touch()  # a provisioning that outlived the delete would now join and recreate the folder
    assert not (endpoints.workspace.endpoints / "del-ep").exists()


def test_a_deployments_environment_never_reaches_a_command_line_or_a_repr(endpoints, gated):
    """The deployment's environment variables (secrets, often) reach init() through a pipe: the provisioning
    process's command line, which any local user reads with ps, does not hold them; nor does a state's repr."""
    endpoints.create_or_update("secret", EndpointSettings(workers=1))
    endpoints.begin_create_or_update_deployment("secret", "blue", settings(endpoints, gated, "tag-s3cr3t-value"))
    process = psutil.Process(provisioning_pid(endpoints, "secret"))
    deadline = time.monotonic() + 10  # once (run 38 of make test) it read empty right after the start: read it again
    while not (command := " ".join(process.cmdline())) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "tag-s3cr3t-value" not in command and "mlrunway.local.serving.provision" in command
    gated["gate"].touch()
    wait_until(lambda: state_of(endpoints, "secret") is ProvisioningState.SUCCEEDED)
    endpoints.set_traffic("secret", {"blue": 100})
    assert json.loads(endpoints.invoke("secret", payload={})) == {"tag": "tag-s3cr3t-value"}  # init() had it
    state = endpoints.state("secret")
    assert state.keys["primary"] not in repr(state) and "tag-s3cr3t-value" not in repr(state)
