"""The deploy step's smoke test: what `blue` must answer, and whether it did.

A deployment that answers 200 with JSON may still serve the wrong numbers (the wrong model version, a score.py
that scales or reorders its outputs). So a request file (``sample_request``, as Azure's ``invoke(request_file=...)``)
is held to an expected answer: the team's ``expected_response`` file, or else the answer the team's own score.py
gives on the deployed model version, run once as a job in the deployment's scoring environment (the reference job,
:func:`start_reference`; its runner is :mod:`mlrunway.deploy.score_once`), as the serving container runs it. The
two answers match (:func:`difference`) when their numbers agree by the ONNX parity rule
(:func:`mlrunway.onnx_export.parity.tolerance_used` at most 1) and everything else is equal, keys named in
``ignore_keys`` (a request id, a timestamp) aside wherever they appear.

An image classifier with no request file is smoke-tested as before: one real validation image
(:func:`smoke_payload`), whose answer must be a prediction over its classes (:func:`check_prediction`).
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Annotated, Any

from pydantic import BeforeValidator, ConfigDict, Field, Strict, ValidationInfo, model_validator
from pydantic.dataclasses import dataclass as pydantic_dataclass

from mlrunway import check
from mlrunway.backend.attempts import latest_attempt, submit_or_reattach
from mlrunway.backend.protocol import Backend
from mlrunway.backend.types import DeploymentSettings, JobStatus
from mlrunway.errors import EndpointError, JobTimedOut, shorten
from mlrunway.onnx_export.parity import tolerance_used
from mlrunway.onnx_export.registered import output_json
from mlrunway.settings import EMPTY_IS_NONE, SettingsError, parse, setting
from mlrunway.specs.job import ROLE_TAG, CommandJobSpec, Input, Output

__all__ = ["REFERENCE_TIMEOUT_S", "REFERENCE_WAIT_S", "Match", "SmokeTest", "check_before_any_job", "check_prediction",
           "difference", "expected_answer", "match", "needs_reference", "read_expected", "reference_job", "shown",
           "smoke_payload", "start_reference"]

REFERENCE_TIMEOUT_S = 300.0  # the reference job's run: score.py's import, init() and one run(), not a training
REFERENCE_WAIT_S = 3600.0  # how long the deploy task waits for it (its queue and start-up, on Azure ML)
ROLE = "reference"  # the job's mlrunway.role tag: a backend runs it in the scoring environment
ANSWER_OUTPUT = "answer"
RUNNER = Path(__file__).with_name("score_once.py")
SHOWN_CHARS = 300  # each answer as an error shows it

def smoke_payload(data_dir: str | Path, signature: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """One real validation image as a request, and its true label."""
    from mlrunway.onnx_export.images import load_labeled

    inputs, labels = load_labeled(Path(data_dir) / "val", signature["classes"], signature["preprocessing"], limit=1)
    return {"data": inputs.tolist()}, signature["classes"][int(labels[0])]


def check_prediction(body: str, classes: list[str]) -> dict[str, Any]:
    """The image smoke test's bar: one prediction whose label is a class and whose probabilities sum to 1."""
    try:
        prediction = json.loads(body)["predictions"][0]
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise EndpointError(f"smoke test: the endpoint answered {body[:200]!r}, not a prediction") from exc
    if prediction.get("label") not in classes or abs(sum(prediction.get("probabilities", [])) - 1) > 1e-3:
        raise EndpointError(f"smoke test: {prediction} is not a valid prediction over classes {classes}")
    return prediction


def _key_names(value: Any) -> Any:
    """``ignore_keys`` as a template renders it: its JSON, or a comma-separated string; empty: none."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            value = [part.strip() for part in value.split(",") if part.strip()]
        return [value] if isinstance(value, str) else value
    return value


_FILE = "{value!r} is not a file name"

File = Annotated[str | None, EMPTY_IS_NONE]  # empty: none (the form and a template may give "")


@pydantic_dataclass(frozen=True, kw_only=True, config=ConfigDict(extra="forbid"))
class SmokeTest:
    """What the smoke test sends and compares, declared once (:mod:`mlrunway.settings`): the deploy task's
    arguments, the trigger form's fields and preflight's check come from here. With ``data_dir`` in the validation
    context (None: there is none), a smoke test with no request file needs it (an image classifier's images)."""

    sample_request: File = setting(
        None, title="Smoke-test request file",
        description="A JSON request file in the code folder that score.py answers: the smoke test sends it. Needed "
                    "for any model that is not an image classifier with a data folder.",
        problem=_FILE, fix="name a JSON request file in code_dir that score.py answers")
    expected_response: File = setting(
        None, title="Expected answer file",
        description="A JSON file in the code folder with the answer the request must get (numbers within the parity "
                    "rule). Empty: what your score.py answers on the exported model before it is deployed.",
        problem=_FILE, fix="name a JSON file in code_dir with the answer to sample_request")
    ignore_keys: Annotated[tuple[Annotated[str, Strict(), Field(min_length=1)], ...] | None,
                           BeforeValidator(_key_names)] = setting(
        None, title="Answer keys not compared",
        description="Keys of the answer the smoke test skips (a request id, a timestamp), wherever they appear. "
                    "Empty: every key is compared.",
        problem="{value!r} is not a list of key names",
        fix='pass key names the answers may differ in, e.g. ["request_id", "timestamp"]')

    @model_validator(mode="after")
    def _something_to_send(self, info: ValidationInfo) -> SmokeTest:
        if self.expected_response and not self.sample_request:
            raise SettingsError("expected_response", "is given without sample_request",
                                "name the request file whose answer it is in sample_request")
        context = info.context or {}
        if "data_dir" in context and not self.sample_request and not context["data_dir"]:
            raise SettingsError("sample_request", "is missing, and without data_dir there are no images to "
                                "smoke-test with", "name a JSON request file in code_dir that score.py answers")
        return self

    @classmethod
    def parse(cls, value: Mapping[str, Any], field: str, **context: Any) -> SmokeTest:
        """The settings from the deploy task's arguments (``field``: how its messages name them)."""
        return parse(cls, value, field, noun="smoke test", context=context)

    @property
    def keys(self) -> tuple[str, ...]:
        return self.ignore_keys or ()


def check_before_any_job(deployment: Mapping[str, Any]) -> SmokeTest:
    """What the smoke test will send and compare, before any job: the settings as :class:`SmokeTest` declares
    them (without a request, ``data_dir`` to smoke-test with), and each file named, in ``code_dir`` (or absolute),
    exists and holds JSON."""
    given = SmokeTest.parse({f.name: deployment.get(f.name) for f in fields(SmokeTest)}, "deployment",
                            data_dir=deployment.get("data_dir"))
    for field in ("sample_request", "expected_response"):
        name = getattr(given, field)
        if not name:
            continue
        path = Path(deployment["code_dir"]) / name
        if not path.is_file():
            raise check.fail(f"deployment.{field}", f"{path} does not exist", "name a JSON file in code_dir")
        try:
            json.loads(path.read_text())
        except (ValueError, UnicodeDecodeError) as exc:
            raise check.fail(f"deployment.{field}", f"{path} is not JSON ({exc})", "write it with json.dump") from exc
    return given


@dataclass(frozen=True)
class Match:
    """How an answer compares with the expected one: ``difference`` is the first differing path and both values,
    expected first (``predictions[0].value: 15.2 != 16.9``), None when they match; ``tolerance_used`` the
    largest share of the parity tolerance any number used."""

    difference: str | None
    tolerance_used: float


def match(expected: Any, answer: Any, ignore: Iterable[str] = ()) -> Match:
    """Compare two parsed JSON answers: numbers by the parity rule, booleans, strings and nulls by equality, lists
    by length then item by item, objects by their keys then key by key, in the expected answer's order. A key in
    ``ignore`` is skipped wherever it appears."""
    walk = _Walk(frozenset(ignore))
    found = walk.compare(expected, answer, "")
    return Match(found, walk.worst)


def difference(expected: Any, answer: Any, ignore: Iterable[str] = ()) -> str | None:
    """The first difference (path and both values) of :func:`match`, or None when the answers match."""
    return match(expected, answer, ignore).difference


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)  # JSON's true is no number


def _shown(value: Any) -> str:
    """A leaf as JSON writes it (NaN and the infinities as Python does: JSON has none)."""
    return repr(value) if isinstance(value, float) and not math.isfinite(value) else json.dumps(value)


class _Walk:
    def __init__(self, ignore: frozenset[str]) -> None:
        self.ignore, self.worst = ignore, 0.0

    def compare(self, expected: Any, answer: Any, path: str) -> str | None:
        where = path or "the answer"
        if _is_number(expected) and _is_number(answer):
            used = tolerance_used(expected, answer)
            self.worst = max(self.worst, used)
            return None if used <= 1 else f"{where}: {_shown(expected)} != {_shown(answer)}"
        if isinstance(expected, dict) and isinstance(answer, dict):
            return self._objects(expected, answer, path)
        if isinstance(expected, list) and isinstance(answer, list):
            if len(expected) != len(answer):
                return f"{where}: {len(expected)} items != {len(answer)}"
            for index, (want, got) in enumerate(zip(expected, answer, strict=True)):
                if (found := self.compare(want, got, f"{path}[{index}]")) is not None:
                    return found
            return None
        if type(expected) is not type(answer):  # two numbers were compared above
            if isinstance(expected, (dict, list)) or isinstance(answer, (dict, list)):
                return f"{where}: expected {_kind(expected)}, answered {_kind(answer)}"
            return f"{where}: {_shown(expected)} != {_shown(answer)} (expected {_kind(expected)}, answered " \
                f"{_kind(answer)})"
        return None if expected == answer else f"{where}: {_shown(expected)} != {_shown(answer)}"

    def _objects(self, expected: dict[str, Any], answer: dict[str, Any], path: str) -> str | None:
        want = [key for key in expected if key not in self.ignore]
        got = [key for key in answer if key not in self.ignore]
        missing, extra = [k for k in want if k not in answer], [k for k in got if k not in expected]
        if missing or extra:
            parts = ([f"answered no key {', '.join(map(repr, missing))}"] if missing else []) + \
                ([f"answered an unexpected key {', '.join(map(repr, extra))}"] if extra else [])
            return f"{path or 'the answer'}: {' and '.join(parts)}"
        for key in want:
            if (found := self.compare(expected[key], answer[key], f"{path}.{key}" if path else key)) is not None:
                return found
        return None


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if _is_number(value):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "a list" if isinstance(value, list) else "an object" if isinstance(value, dict) else type(value).__name__


def needs_reference(sample_request: Any, expected_response: Any) -> bool:
    """Whether the smoke test's expected answer is computed by a reference job (a request, no expected answer)."""
    return bool(sample_request) and not expected_response


def reference_key(settings: DeploymentSettings, request: Path) -> str:
    """A digest of what a reference job is asked: the model version, the scoring script, the deployment's environment
    variables, the request's bytes and every file of the code folder (a score.py mended since is asked anew)."""
    digest = hashlib.sha256(json.dumps([settings.model, settings.scoring_script,
                                        sorted(settings.environment_variables.items())]).encode())
    digest.update(request.read_bytes())
    code = Path(settings.code_dir)
    for path in sorted(p for p in code.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(str(path.relative_to(code)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def reference_job(model: Any, settings: DeploymentSettings, request: Path, code: Path, key: str = "") -> CommandJobSpec:
    """The reference job of ``model`` (a ModelVersion): :mod:`.score_once` as its code folder (``code``), the team's
    code folder, the model version's folder and the request file as its inputs, the deployment's environment
    variables set; its answer in ``outputs.answer``, with ``key`` (:func:`reference_key`) echoed."""
    command = ("python score_once.py --code ${{inputs.code}} --script ${{inputs.script}} --model ${{inputs.model}} "
               f"--request ${{{{inputs.request}}}} --out ${{{{outputs.answer}}}} --key {key or '-'}")
    return CommandJobSpec(
        code=str(code), command=command,
        inputs={"code": Input(path=str(Path(settings.code_dir).resolve())), "script": settings.scoring_script,
                "model": Input(path=model.path), "request": Input(path=str(request.resolve()), type="uri_file")},
        outputs={ANSWER_OUTPUT: Output()}, environment_variables=dict(settings.environment_variables),
        timeout=REFERENCE_TIMEOUT_S, display_name=f"smoke reference: {settings.scoring_script} on {settings.model}",
        tags={ROLE_TAG: ROLE, "model": settings.model})


def start_reference(backend: Backend, base: str, settings: DeploymentSettings, request: Path) -> str:
    """Submit the reference job as ``base`` (or re-attach to its newest attempt); its name. The deploy task calls it
    before provisioning starts, so the job's queue and start-up overlap the deployment's."""
    script = Path(settings.code_dir) / settings.scoring_script
    if not script.is_file():
        raise check.fail("deploy.expected_response", f"is missing, and there is no {script} to compute it with",
                         "pass expected_response: a JSON file in the code folder holding the answer to sample_request")
    if not request.is_file():
        raise check.fail("deploy.sample_request", f"{request} does not exist", "pass a JSON request file")
    model = backend.models.get(settings.model_name, settings.model_version)
    key = reference_key(settings, request)

    def submit(name: str) -> Any:
        with tempfile.TemporaryDirectory(prefix="mlrunway-reference-") as code:
            shutil.copyfile(RUNNER, Path(code) / RUNNER.name)
            return backend.jobs.submit(name, reference_job(model, settings, request, Path(code), key))

    return submit_or_reattach(backend.jobs, base, submit, lambda info: _stale(backend, info.name, key)).job.name


def _answer(backend: Backend, name: str) -> dict[str, Any] | None:
    return output_json(backend, name, ANSWER_OUTPUT, "answer.json")


def _stale(backend: Backend, name: str, key: str) -> str | None:
    """Why the completed reference job ``name`` does not answer ``key`` (score.py failed there, or it was asked
    otherwise: a re-run after a person mended score.py submits the next attempt), or None."""
    answer = _answer(backend, name)
    if answer is None or "error" in answer:
        return "score.py did not answer there"
    return None if answer.get("key") == key else "it was asked otherwise (the model, code, request or environment)"


def expected_answer(backend: Backend, base: str, settings: DeploymentSettings | None, request: Path,
                    timeout_s: float = REFERENCE_WAIT_S) -> tuple[Any, str]:
    """What `blue` must answer to ``request`` when the team gave no ``expected_response``, and where that came
    from: the answer of the reference job ``base`` (its newest attempt; submitted now if none was), waited for up to
    ``timeout_s``. A score.py that cannot answer there (an import its environment lacks, an ``init()`` that fails)
    is a SpecError with its error, asking for ``expected_response``."""
    if settings is None:
        raise check.fail("deploy.expected_response", "is missing, and no code folder was given to compute it "
                         "with score.py", "pass expected_response: the JSON answer to sample_request")
    script = settings.scoring_script
    fix = (f"pass expected_response: a JSON file in the code folder holding the answer {request.name} should get, "
           "so the smoke test need not run score.py")
    latest = latest_attempt(backend.jobs, base)
    name = latest.name if latest is not None else start_reference(backend, base, settings, request)
    try:
        info = backend.jobs.wait(name, timeout=timeout_s, outage_s=backend.capabilities.transient_outage_s,
                                 backend=backend.kind)
    except JobTimedOut as exc:
        raise check.fail("deploy.expected_response", f"is missing, and the reference job {name} running {script} "
                         f"did not end within {timeout_s:g} s", fix) from exc
    if info.status is not JobStatus.COMPLETED:
        raise check.fail("deploy.expected_response", f"is missing, and the reference job {name} running {script} "
                         f"ended {info.status.value}: {info.error or 'see its log'}", fix)
    answer = _answer(backend, name) or {"error": "it left no readable answer.json"}
    if "error" in answer:
        raise check.fail("deploy.expected_response", f"is missing, and {script} could not compute it in the "
                         f"reference job {name}", f"{fix}. Its error:\n{shorten(str(answer['error']), 1500)}")
    where = f"{script} run on {settings.model} in job {name}"
    if answer["status"] != 200:
        raise check.fail("deploy.sample_request", f"{script} answers {request.name} with status {answer['status']} "
                         f"in job {name}: {shorten(answer['body'], SHOWN_CHARS)}", "pass a request score.py answers "
                         "with 200")
    try:
        return json.loads(answer["body"]), where
    except ValueError as exc:
        raise check.fail("deploy.sample_request", f"{script} answers {request.name} with "
                         f"{shorten(answer['body'], SHOWN_CHARS)!r} in job {name}, not JSON",
                         "pass a request score.py answers with JSON") from exc


def read_expected(path: Path) -> Any:
    """The ``expected_response`` file, parsed; a missing file or one that is not JSON is a SpecError."""
    if not path.is_file():
        raise check.fail("deploy.expected_response", f"{path} does not exist",
                         "pass a JSON file in the code folder (or an absolute path): the answer to sample_request")
    try:
        return json.loads(path.read_text())
    except ValueError as exc:
        raise check.fail("deploy.expected_response", f"{path} is not JSON ({exc})",
                         "write the answer score.py should give to sample_request, as JSON") from exc


def shown(answer: Any) -> str:
    """An answer as JSON, shortened to what an error or a log line shows."""
    return shorten(json.dumps(answer), SHOWN_CHARS)
