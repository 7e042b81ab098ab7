"""The per-run deployment: the run's own endpoint, ``blue`` provisioned at 0%, smoke-tested through the deployment
header, then given 100% of traffic (Azure ML's safe rollout). The run's cleanup deletes the endpoint."""

from __future__ import annotations

import hashlib
import json
import logging
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

from mlrunway import check
from mlrunway.backend.protocol import Backend
from mlrunway.backend.types import DeploymentInfo, DeploymentSettings, EndpointSettings
from mlrunway.deploy import smoke
from mlrunway.deploy.base import DeployRequest, Done, Provisioning, Resumed, Step
from mlrunway.deploy.smoke import check_prediction, smoke_payload
from mlrunway.errors import EndpointError, NotFound

log = logging.getLogger(__name__)


class PerRunBlue:
    name: ClassVar[str] = "blue"

    def validate(self, backend: Backend | None, deployment: Mapping[str, Any]) -> None:
        smoke.check_before_any_job(deployment)

    def settings(self, backend: Backend, given: Mapping[str, Any]) -> None:
        """None of its own: a stable endpoint's settings do nothing on the run's own endpoint."""
        return None

    def start(self, backend: Backend, request: DeployRequest) -> Step:
        begin_reference(backend, request)
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
        return Done(result=promote_blue(backend, endpoint, name, version, request.data_dir, request.sample_request,
                                        settings=request.settings, expected_response=request.expected_response,
                                        ignore_keys=request.ignore_keys, reference_job=request.reference_job))

    def abandon(self, backend: Backend, request: DeployRequest) -> None:
        """`blue` still provisioning has no traffic yet: delete it; one that serves is left to the run's cleanup."""
        try:
            if not backend.endpoints.get_deployment(request.endpoint, "blue").provisioning_state.is_terminal():
                backend.endpoints.delete_deployment(request.endpoint, "blue")
        except NotFound:
            pass

    def clean_up(self, backend: Backend, endpoint: str, run_key: str) -> dict[str, Any]:
        """Nothing of its own: the run's endpoint, `blue` with it, is the cleanup's to delete (or keep)."""
        return {}


def model_signature(backend: Backend, model_name: str, model_version: int) -> dict[str, Any]:
    """The version's signature.json: the property the export task records (no download), else (a version registered
    otherwise) the file, downloaded; {} when it has none."""
    recorded = backend.models.get(model_name, model_version).properties.get("signature")
    if isinstance(recorded, dict) and recorded:
        return recorded
    with tempfile.TemporaryDirectory() as scratch:
        model_dir = backend.models.download(model_name, model_version, Path(scratch) / "model")
        path = model_dir / "signature.json"
        return json.loads(path.read_text()) if path.is_file() else {}


def begin_reference(backend: Backend, request: DeployRequest) -> None:
    """Start the smoke test's reference job when it needs one, before provisioning: its queue and start-up (minutes
    on Azure ML) overlap the deployment's; :func:`promote_blue` waits for its answer."""
    _begin_reference(backend, request.endpoint, request.settings, request.sample_request, request.expected_response,
                     request.reference_job)


def _begin_reference(backend: Backend, endpoint: str, settings: DeploymentSettings, sample_request: str | Path | None,
                     expected_response: str | Path | None, reference_job: str | None = None) -> None:
    if sample_request is not None and smoke.needs_reference(sample_request, expected_response):
        smoke.start_reference(backend, reference_name(endpoint, reference_job, settings, sample_request), settings,
                              Path(sample_request))


def reference_name(endpoint: str, reference_job: str | None, settings: DeploymentSettings | None = None,
                   request: str | Path | None = None) -> str:
    """The reference job's name: the run's (``RunNames.reference_job``); without a run (a call of
    :func:`deploy_blue` or :func:`promote_blue` of its own), one derived from the endpoint and what the job computes
    (the model, code folder, script and request), so another model's answer is never re-attached to."""
    if reference_job:
        return reference_job
    what = "|".join(map(str, (settings.model, Path(settings.code_dir).resolve(), settings.scoring_script,
                              Path(request or "").resolve()))) if settings is not None else ""
    return f"{endpoint}-reference-{hashlib.sha256(what.encode()).hexdigest()[:8]}"


def start_blue(backend: Backend, endpoint: str, settings: DeploymentSettings) -> DeploymentInfo:
    """Start provisioning `blue` with the settings' model on an existing endpoint; return at once."""
    return backend.endpoints.begin_create_or_update_deployment(endpoint, "blue", settings)


def promote_blue(backend: Backend, endpoint: str, model_name: str, model_version: int,
                 data_dir: str | Path | None, sample_request: str | Path | None = None, *,
                 settings: DeploymentSettings | None = None, expected_response: str | Path | None = None,
                 ignore_keys: Sequence[str] = (), reference_job: str | None = None) -> dict[str, Any]:
    """Smoke-test the provisioned `blue` by header, then give it 100% of traffic and test it again through the
    endpoint: with ``sample_request`` (a request file, as Azure's ``invoke(request_file=...)``) when the team gives
    one, whose answer must match the expected one (:mod:`mlrunway.deploy.smoke`: ``expected_response``, else
    ``settings``' score.py run on the model by the reference job ``reference_job``, with ``ignore_keys`` skipped);
    else, for an image classifier, with a real validation image of ``data_dir``, whose answer must be a prediction
    over the classes.

    A failed smoke test by header raises EndpointError and leaves traffic where it was.
    """
    if sample_request is not None:
        reference = replace(settings, model=f"{model_name}:{model_version}") if settings is not None else None
        return _promote_with_request(backend, endpoint, model_name, model_version, Path(sample_request), reference,
                                     Path(expected_response) if expected_response is not None else None,
                                     tuple(ignore_keys), reference_name(endpoint, reference_job, reference,
                                                                        sample_request))
    if expected_response is not None:
        raise check.fail("deploy.expected_response", "is given without sample_request",
                         "pass sample_request: the JSON request file whose answer it is")
    if data_dir is None:
        raise check.fail("deploy.sample_request", "is missing and there is no data_dir with validation images",
                         "pass sample_request: a JSON request file score.py answers")
    signature = model_signature(backend, model_name, model_version)
    if not isinstance(signature.get("classes"), list) or "preprocessing" not in signature:
        raise check.fail("deploy.sample_request", f"is missing, and {model_name}:{model_version} is no image "
                         "classifier to smoke-test with a validation image of data_dir (its signature.json has no "
                         "classes or no preprocessing)", "pass sample_request: a JSON request file score.py "
                         "answers (and expected_response, or the answer is computed with score.py)")
    payload, truth = smoke_payload(data_dir, signature)
    prediction = check_prediction(backend.endpoints.invoke(endpoint, payload=payload, deployment="blue"), signature["classes"])
    backend.endpoints.set_traffic(endpoint, {"blue": 100})
    check_prediction(backend.endpoints.invoke(endpoint, payload=payload), signature["classes"])
    scoring_uri = backend.endpoints.get(endpoint).scoring_uri
    log.info("blue serves %s:%s at %s; smoke image (true label %s) -> %s (p=%.3f)", model_name, model_version,
             scoring_uri, truth, prediction["label"], prediction["probability"])
    return {"endpoint": endpoint, "deployment": "blue", "scoring_uri": scoring_uri,
            "smoke_label": prediction["label"], "smoke_truth": truth, "smoke_probability": prediction["probability"]}


def _promote_with_request(backend: Backend, endpoint: str, model_name: str, model_version: int, request: Path,
                          settings: DeploymentSettings | None, expected_response: Path | None,
                          ignore: tuple[str, ...], reference_job: str) -> dict[str, Any]:
    if not request.is_file():
        raise check.fail("deploy.sample_request", f"{request} does not exist", "pass a JSON request file")
    expected: Any = smoke.read_expected(expected_response) if expected_response is not None else None
    source = expected_response.name if expected_response is not None else ""
    worst = 0.0
    answers = []
    for deployment in ("blue", None):  # by header first, then through the traffic it has just been given
        body = backend.endpoints.invoke(endpoint, request_file=request, deployment=deployment)
        try:
            answers.append(json.loads(body))
        except ValueError as exc:
            raise EndpointError(f"smoke test: the endpoint answered {body[:200]!r} to {request.name}, not JSON") from exc
        if not source:  # no expected_response: the team's score.py answered the request in the reference job
            expected, source = smoke.expected_answer(backend, reference_job, settings, request)
        found = smoke.match(expected, answers[-1], ignore)
        if found.difference is not None:
            where = "by the blue deployment header, before any traffic moved" if deployment == "blue" else \
                "through the endpoint after blue was given 100% of traffic"
            ignoring = f" (ignoring keys {', '.join(ignore)})" if ignore else ""
            raise EndpointError(
                f"smoke test: {endpoint} answered {request.name} {where}, not as expected ({source}){ignoring}; "
                f"first difference (expected != answered): {found.difference}\n"
                f"  expected: {smoke.shown(expected)}\n  answered: {smoke.shown(answers[-1])}\n"
                "A deployment serving the wrong model or a score.py that changed its outputs answers so; a key "
                "that may differ between calls (a request id, a timestamp) belongs in ignore_keys.")
        worst = max(worst, found.tolerance_used)
        if deployment == "blue":
            backend.endpoints.set_traffic(endpoint, {"blue": 100})
    scoring_uri = backend.endpoints.get(endpoint).scoring_uri
    shown = smoke.shown(answers[0])  # whole up to smoke.SHOWN_CHARS, else cut with a marker saying how much
    ignored = f"; {', '.join(ignore)} ignored" if ignore else ""
    matched = f"as expected ({source}: {worst:.0%} of the parity tolerance used{ignored})"
    log.info("blue serves %s:%s at %s; smoke request %s -> %s, %s", model_name, model_version, scoring_uri,
             request.name, shown, matched)
    return {"endpoint": endpoint, "deployment": "blue", "scoring_uri": scoring_uri, "smoke_request": request.name,
            "smoke_answer": shown, "smoke_expected": smoke.shown(expected), "smoke_matched": matched}


def deploy_blue(backend: Backend, endpoint: str, settings: DeploymentSettings, data_dir: str | Path | None, *,
                endpoint_settings: EndpointSettings | None = None, timeout_s: float = 3600.0,
                sample_request: str | Path | None = None, expected_response: str | Path | None = None,
                ignore_keys: Sequence[str] = ()) -> dict[str, Any]:
    """Safe rollout, waiting here: the endpoint, `blue` with no traffic, a smoke test by header, then 100% (the smoke
    test's reference job, when it needs one, started first: ``<endpoint>-reference-<8 hex>``, :func:`reference_name`)."""
    _begin_reference(backend, endpoint, settings, sample_request, expected_response)
    backend.endpoints.create_or_update(endpoint, endpoint_settings)
    backend.endpoints.create_or_update_deployment(endpoint, "blue", settings, timeout_s=timeout_s)
    return promote_blue(backend, endpoint, settings.model_name, settings.model_version, data_dir, sample_request,
                        settings=settings, expected_response=expected_response, ignore_keys=ignore_keys)
