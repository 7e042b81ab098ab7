"""The per-run deployment: the run's own endpoint, ``blue`` provisioned at 0%, smoke-tested through the deployment
header, then given 100% of traffic (Azure ML's safe rollout). The run's cleanup deletes the endpoint."""

from __future__ import annotations

import json
import logging
import tempfile
from pathlib import Path
from typing import Any, ClassVar

from mlrunway import check
from mlrunway.backend.protocol import Backend
from mlrunway.backend.types import DeploymentInfo, DeploymentSettings, EndpointSettings
from mlrunway.deploy.base import DeployRequest, Done, Provisioning, Resumed, Step
from mlrunway.errors import EndpointError, NotFound

log = logging.getLogger(__name__)


class PerRunBlue:
    name: ClassVar[str] = "blue"

    def start(self, backend: Backend, request: DeployRequest) -> Step:
        backend.endpoints.begin_create_or_update(request.endpoint, request.endpoint_settings)
        return Provisioning(state={"phase": "endpoint"}, endpoint=request.endpoint)

    def resume(self, backend: Backend, request: DeployRequest, state: dict[str, Any], event: Resumed) -> Step:
        endpoint = request.endpoint
        if state["phase"] == "endpoint":
            event.provisioned(f"endpoint {endpoint}", request.max_wait_s)
            started = start_blue(backend, endpoint, request.settings)
            return Provisioning(state={"phase": "blue"}, endpoint=endpoint, deployment="blue",
                                operation=started.operation)
        event.provisioned(f"deployment {endpoint}/blue", request.max_wait_s)
        name, version = request.model
        return Done(result=promote_blue(backend, endpoint, name, version, request.data_dir, request.sample_request))

    def abandon(self, backend: Backend, request: DeployRequest) -> None:
        """`blue` still provisioning has no traffic yet: delete it; one that serves is left to the run's cleanup."""
        try:
            if not backend.endpoints.get_deployment(request.endpoint, "blue").provisioning_state.is_terminal():
                backend.endpoints.delete_deployment(request.endpoint, "blue")
        except NotFound:
            pass


def smoke_payload(data_dir: str | Path, signature: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """One real validation image as a request, and its true label."""
    from mlrunway.data.images import load_labeled

    inputs, labels = load_labeled(Path(data_dir) / "val", signature["classes"], signature["preprocessing"], limit=1)
    return {"data": inputs.tolist()}, signature["classes"][int(labels[0])]


def check_prediction(body: str, classes: list[str]) -> dict[str, Any]:
    """The smoke test's bar: one prediction whose label is a class and whose probabilities sum to 1."""
    try:
        prediction = json.loads(body)["predictions"][0]
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise EndpointError(f"smoke test: the endpoint answered {body[:200]!r}, not a prediction") from exc
    if prediction.get("label") not in classes or abs(sum(prediction.get("probabilities", [])) - 1) > 1e-3:
        raise EndpointError(f"smoke test: {prediction} is not a valid prediction over classes {classes}")
    return prediction


def start_blue(backend: Backend, endpoint: str, settings: DeploymentSettings) -> DeploymentInfo:
    """Start provisioning `blue` with the settings' model on an existing endpoint; return at once."""
    return backend.endpoints.begin_create_or_update_deployment(endpoint, "blue", settings)


def promote_blue(backend: Backend, endpoint: str, model_name: str, model_version: int,
                 data_dir: str | Path | None, sample_request: str | Path | None = None) -> dict[str, Any]:
    """Smoke-test the provisioned `blue` by header, then give it 100% of traffic: with ``sample_request`` (a
    request file, as Azure's ``invoke(request_file=...)``) when the team gives one, which must answer 200 with
    JSON; else with a real validation image of ``data_dir``, whose answer must be a prediction over the classes.

    A failed smoke test raises EndpointError and leaves traffic where it was.
    """
    if sample_request is not None:
        return _promote_with_request(backend, endpoint, model_name, model_version, Path(sample_request))
    if data_dir is None:
        raise check.fail("deploy.sample_request", "is missing and there is no data_dir with validation images",
                         "pass sample_request: a JSON request file score.py answers")
    with tempfile.TemporaryDirectory() as scratch:
        model_dir = backend.models.download(model_name, model_version, Path(scratch) / "model")
        signature = json.loads((model_dir / "signature.json").read_text())
    payload, truth = smoke_payload(data_dir, signature)
    prediction = check_prediction(backend.endpoints.invoke(endpoint, payload=payload, deployment="blue"), signature["classes"])
    backend.endpoints.set_traffic(endpoint, {"blue": 100})
    check_prediction(backend.endpoints.invoke(endpoint, payload=payload), signature["classes"])
    scoring_uri = backend.endpoints.get(endpoint).scoring_uri
    log.info("blue serves %s:%s at %s; smoke image (true label %s) -> %s (p=%.3f)", model_name, model_version,
             scoring_uri, truth, prediction["label"], prediction["probability"])
    return {"endpoint": endpoint, "deployment": "blue", "scoring_uri": scoring_uri,
            "smoke_label": prediction["label"], "smoke_truth": truth, "smoke_probability": prediction["probability"]}


def _promote_with_request(backend: Backend, endpoint: str, model_name: str, model_version: int,
                          request: Path) -> dict[str, Any]:
    if not request.is_file():
        raise check.fail("deploy.sample_request", f"{request} does not exist", "pass a JSON request file")
    answers = []
    for deployment in ("blue", None):  # by header first, then through the traffic it has just been given
        body = backend.endpoints.invoke(endpoint, request_file=request, deployment=deployment)
        try:
            answers.append(json.loads(body))
        except ValueError as exc:
            raise EndpointError(f"smoke test: the endpoint answered {body[:200]!r} to {request.name}, not JSON") from exc
        if deployment == "blue":
            backend.endpoints.set_traffic(endpoint, {"blue": 100})
    scoring_uri = backend.endpoints.get(endpoint).scoring_uri
    shown = json.dumps(answers[0])[:200]
    log.info("blue serves %s:%s at %s; smoke request %s -> %s", model_name, model_version, scoring_uri, request.name,
             shown)
    return {"endpoint": endpoint, "deployment": "blue", "scoring_uri": scoring_uri, "smoke_request": request.name,
            "smoke_answer": shown}


def deploy_blue(backend: Backend, endpoint: str, settings: DeploymentSettings, data_dir: str | Path | None, *,
                endpoint_settings: EndpointSettings | None = None, timeout_s: float = 3600.0,
                sample_request: str | Path | None = None) -> dict[str, Any]:
    """Safe rollout, waiting here: the endpoint, `blue` with no traffic, a smoke test by header, then 100%."""
    backend.endpoints.create_or_update(endpoint, endpoint_settings)
    backend.endpoints.create_or_update_deployment(endpoint, "blue", settings, timeout_s=timeout_s)
    return promote_blue(backend, endpoint, settings.model_name, settings.model_version, data_dir, sample_request)
