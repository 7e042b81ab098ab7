"""The Azure backend's whole lifecycle through the real MLClient, against the fake Azure ML service.

Each test asserts on the requests azure-ai-ml sent (method, path, api-version, body fields), and on what the
service ended up holding, never on calls between our own functions.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from mlrunway import pipeline
from mlrunway.azure.environments import GPU_IMAGE, TORCH_VERSION
from mlrunway.backend.types import DeploymentSettings, JobStatus
from mlrunway.deploy.blue import deploy_blue
from mlrunway.early_termination import POLICIES, Policy
from mlrunway.errors import EndpointError, JobTimedOut, NotFound, SpecError
from mlrunway.onnx_export import export_registered
from mlrunway.report import collect, plot_curves, render_html
from tests.conftest import REPO
from tests.mlrunway.azure.fake_azureml import CONTAINER, SUBSCRIPTION, WS_PATH, Trial
from tests.mlrunway.early_termination.test_registry import FloorPolicy
from tests.mlrunway.early_termination.test_registry import decide_at as decide_floor
from training.tutorial import train_job, tutorial_sweep

CODE = REPO / "training"
ARM_JOB = f"management.azure.com{WS_PATH}/jobs/"


def only(requests: list, what: str):
    assert len(requests) == 1, f"expected one {what}, the SDK sent {len(requests)}"
    return requests[0]


def test_train_job_is_created_once_waited_on_and_read_back(fake, azure, small_digits: Path) -> None:
    spec = train_job(str(CODE), str(small_digits), num_epochs=3, learning_rate=0.05, momentum=0.8)
    azure.jobs.submit("mlr-1-train", spec)
    info = azure.jobs.wait("mlr-1-train", poll_s=0)

    put = only(fake.sent("PUT", f"{ARM_JOB}mlr-1-train$"), "job PUT")
    assert put.query["api-version"] == "2025-01-01-preview"
    props = put.json()["properties"]
    assert props["jobType"] == "Command"
    assert "--learning-rate ${{inputs.learning_rate}}" in props["command"]
    assert props["inputs"]["learning_rate"] == {"jobInputType": "literal", "value": "0.05"}
    assert props["inputs"]["data"]["jobInputType"] == "uri_folder"
    assert props["inputs"]["data"]["uri"].startswith("azureml://datastores/workspaceblobstore/paths/LocalUpload/")
    assert props["computeId"].endswith(f"{WS_PATH}/computes/gpu-cluster")
    # The trial trains with the project's torch (a .pt2 loads in the torch that wrote it): gpu-cluster is an NC
    # VM, so the CUDA base image with PyPI's torch, pinned.
    environment = fake.resources[props["environmentId"].lower()]["properties"]
    assert environment["image"] == GPU_IMAGE
    assert f"torch=={TORCH_VERSION}" in environment["condaFile"] and "download.pytorch.org" not in environment["condaFile"]
    only(fake.sent("GET", f"{WS_PATH}/computes/gpu-cluster$"), "compute GET")
    assert props["experimentName"] == "mlrunway"
    # The code snapshot went to blob storage and was registered as the code asset the job names.
    code = fake.resources[props["codeId"].lower()]["properties"]["codeUri"]
    uploaded = {k.rsplit("/", 1)[1]: v for k, v in fake.blobs.items() if k.startswith(code.split(".net/")[1])}
    assert uploaded["train.py"] == (CODE / "train.py").read_bytes()
    assert sum(k.endswith(".png") for k in fake.blobs) == 40  # the data folder, every image

    assert info.status is JobStatus.COMPLETED and info.kind == "command"
    assert info.properties["studio_url"].startswith("https://ml.azure.com/runs/mlr-1-train")
    assert azure.jobs.metrics("mlr-1-train") == {"best_val_acc": 0.9}
    assert azure.jobs.logs("mlr-1-train")[-1] == "epoch 2: best_val_acc 0.9000"
    mlflow = fake.sent("GET", r"api\.azureml\.ms/mlflow/v1\.0/subscriptions/.*/api/2\.0/mlflow/runs/get$")
    assert mlflow[-1].query == {"run_id": "mlr-1-train"}
    assert mlflow[-1].headers["Authorization"] == "Bearer fake-aad-token"

    # A retried task finds its job: no second PUT.
    assert azure.jobs.submit("mlr-1-train", spec).status is JobStatus.COMPLETED
    assert len(fake.sent("PUT", f"{ARM_JOB}mlr-1-train$")) == 1


def test_failed_job_reports_the_services_error(fake, azure, small_digits: Path) -> None:
    fake.job_final["bad"] = "Failed"
    fake.job_error["bad"] = "Execution failed. User process 'python' exited with status code 1: CUDA out of memory"
    azure.jobs.submit("bad", train_job(str(CODE), str(small_digits)))
    info = azure.jobs.wait("bad", poll_s=0)
    assert info.status is JobStatus.FAILED
    assert "CUDA out of memory" in info.error
    with pytest.raises(Exception, match="CUDA out of memory"):
        pipeline.require_completed(info, "training job")


def test_cancel_and_wait_timeout_use_begin_cancel(fake, azure, small_digits: Path) -> None:
    fake.steps = 50  # the job stays Running
    azure.jobs.submit("slow", train_job(str(CODE), str(small_digits)))
    with pytest.raises(JobTimedOut, match="slow"):
        azure.jobs.wait("slow", timeout=0.0, poll_s=0)
    cancel = only(fake.sent("POST", f"{ARM_JOB}slow/cancel$"), "cancel")
    assert cancel.query["api-version"] == "2023-04-01-preview"
    assert azure.jobs.get("slow").status is JobStatus.CANCELED
    azure.jobs.cancel("slow")  # already ended: nothing more is sent
    assert len(fake.sent("POST", f"{ARM_JOB}slow/cancel$")) == 1


def test_a_policy_azure_ml_lacks_is_refused_before_any_job(fake, azure, small_digits: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A policy registered for the local controller only (the registry test's floor) never reaches Azure ML."""
    monkeypatch.setitem(POLICIES, "floor", Policy(FloorPolicy, decide_floor))
    spec = tutorial_sweep(train_job(str(CODE), str(small_digits), num_epochs=3),
                          early_termination=FloorPolicy(floor=0.4))
    with pytest.raises(SpecError, match=r"^early_termination.type: 'floor' is not an early-termination policy of "
                                        r"azure-ai-ml, which has bandit, median_stopping and truncation_selection; "
                                        r"use one of those, or run this sweep on the local backend$"):
        azure.jobs.submit_sweep("mlr-floor-sweep", spec)
    assert not fake.sent("PUT", ARM_JOB) and not fake.blobs


@pytest.mark.slow
@pytest.mark.parametrize("adversarial", [False, True], ids=["plain", "adversarial"])
def test_lifecycle_sweep_pick_export_deploy_cleanup(fake, azure, small_digits: Path, trained_model: Path,
                                                    adversarial: bool) -> None:
    """The DAG's steps on Azure: sweep, best trial registered from its outputs, ONNX export with the parity
    gate, blue at 0% then smoke-tested by header then 100%, scoring through traffic, delete. Adversarial: the
    same with every list paged, Retry-After in seconds, 429s and transient 503s, and an update through Scaling."""
    if adversarial:
        fake.adversarial()
    fake.trial_outputs = trained_model
    fake.sweep_trials["mlr-run-sweep"] = [
        Trial({"learning_rate": 0.01, "momentum": 0.9}, [0.50, 0.61, 0.70]),
        Trial({"learning_rate": 0.05, "momentum": 0.8}, [0.62, 0.80, 0.91]),
        Trial({"learning_rate": 0.001, "momentum": 0.5}, [0.20], status="Canceled"),
    ]
    spec = tutorial_sweep(train_job(str(CODE), str(small_digits), num_epochs=3), max_total_trials=3,
                          max_concurrent_trials=3)
    azure.jobs.submit_sweep("mlr-run-sweep", spec)
    assert azure.jobs.wait("mlr-run-sweep", poll_s=0).status is JobStatus.COMPLETED

    body = only(fake.sent("PUT", f"{ARM_JOB}mlr-run-sweep$"), "sweep PUT").json()["properties"]
    assert body["jobType"] == "Sweep"
    assert body["objective"] == {"goal": "maximize", "primaryMetric": "best_val_acc"}
    assert body["earlyTermination"] == {"policyType": "Bandit", "slackFactor": 0.15, "evaluationInterval": 1,
                                        "delayEvaluation": 10}
    assert "${{search_space.learning_rate}}" in body["trial"]["command"]
    assert body["limits"]["maxTotalTrials"] == 3

    result = azure.jobs.sweep_result("mlr-run-sweep")
    trials = {t.name: t for t in result.trials}
    assert result.best_trial == "mlr-run-sweep_1"
    assert trials["mlr-run-sweep_1"].params == {"learning_rate": 0.05, "momentum": 0.8}
    assert trials["mlr-run-sweep_1"].history == (0.62, 0.80, 0.91)
    assert trials["mlr-run-sweep_2"].status is JobStatus.CANCELED
    # Canceled after 1 interval, where Bandit (delay_evaluation=10) cannot act: not labelled as its decision.
    assert trials["mlr-run-sweep_2"].early_termination is None
    assert "canceled after 1 intervals, where no early-termination policy applies" in trials["mlr-run-sweep_2"].error
    assert fake.sent("GET", r"/history/v1\.0/subscriptions/.*/runs/mlr-run-sweep/children$")

    picked = pipeline.pick_best(azure, "mlr-run-sweep", "mlr-run")
    assert (picked["trial"], picked["model_version"], picked["value"]) == ("mlr-run-sweep_1", 1, 0.91)
    model = only(fake.sent("PUT", r"/models/mlr-run/versions/1$"), "model PUT").json()["properties"]
    assert model["modelUri"].endswith("/datastores/workspaceartifactstore/paths/ExperimentRun/dcid.mlr-run-sweep_1/outputs/model")
    assert model["tags"] == {"learning_rate": "0.05", "momentum": "0.8", "best_val_acc": "0.910000"}
    assert model["properties"]["source_job"] == "mlr-run-sweep_1"
    assert pipeline.pick_best(azure, "mlr-run-sweep", "mlr-run")["model_version"] == 1  # a retry registers nothing

    # Export and its gate run as a job: the exporter is its code folder, run by the fake's compute where mlrunway
    # cannot be imported; the task's side reads parity.json and registers the job's onnx output.
    onnx, parity = export_registered(azure, "mlr-run", 1, job_name="mlr-run-export", data_dir=str(small_digits),
                                     wait=lambda job: azure.jobs.wait(job, poll_s=0))
    assert parity["top1_agreement"] == 1.0 and parity["max_abs_diff"] < 1e-4, fake.job_logs["mlr-run-export"]
    export = only(fake.sent("PUT", f"{ARM_JOB}mlr-run-export$"), "export job PUT").json()["properties"]
    assert export["command"].startswith("python -m mlrunway_export.job --model ${{inputs.model}}")
    assert export["inputs"]["model"] == {"jobInputType": "uri_folder", "uri": model["modelUri"]}
    assert export["inputs"]["data"]["uri"].startswith("azureml://datastores/workspaceblobstore/paths/LocalUpload/")
    assert set(export["outputs"]) == {"onnx", "report"} and export["tags"]["mlrunway.role"] == "export"
    environment = fake.resources[export["environmentId"].lower()]["properties"]
    for package in (f"torch=={TORCH_VERSION}", "onnxruntime==", "onnx==", "onnxscript=="):
        assert package in environment["condaFile"], package  # the trials' torch, and what export needs
    onnx_put = only(fake.sent("PUT", r"/models/mlr-run-onnx/versions/1$"), "ONNX model PUT").json()["properties"]
    assert onnx_put["modelUri"].endswith("/paths/azureml/mlr-run-export/onnx/")
    assert json.loads(onnx_put["properties"]["parity"])["samples"] == parity["samples"]
    onnx_files = {k.rsplit("/", 1)[1] for k in fake.blobs if "/mlr-run-export/onnx/" in k}
    assert onnx_files == {"model.onnx", "signature.json"}

    settings = DeploymentSettings(model=f"{onnx.name}:{onnx.version}", code_dir=str(CODE),
                                  instance_type="Standard_DS3_v2", instance_count=1)
    deployed = deploy_blue(azure, "mlr-run", settings, small_digits)
    endpoint_puts = fake.sent("PUT", r"/onlineEndpoints/mlr-run$")
    assert endpoint_puts[0].json()["properties"]["authMode"] == "Key"
    assert endpoint_puts[-1].json()["properties"]["traffic"] == {"blue": 100}
    dep = only(fake.sent("PUT", r"/onlineEndpoints/mlr-run/deployments/blue$"), "deployment PUT").json()
    assert dep["sku"] == {"name": "Default", "capacity": 1}
    assert dep["properties"]["instanceType"] == "Standard_DS3_v2"
    assert dep["properties"]["model"].endswith("/models/mlr-run-onnx/versions/1")
    assert dep["properties"]["codeConfiguration"]["scoringScript"] == "score.py"
    assert "onnxruntime" in fake.resources[dep["properties"]["environmentId"].lower()]["properties"]["condaFile"]
    scores = fake.sent("POST", r"inference\.ml\.azure\.com/score$")
    assert [s.headers.get("azureml-model-deployment") for s in scores] == ["blue", None]  # by header, then traffic
    assert all(s.headers["Authorization"] == f"Bearer {fake.keys['primaryKey']}" for s in scores)
    # The traffic change came after the smoke test through the header, and the operations were polled.
    order = [(r.method, r.path.rsplit("/", 1)[-1]) for r in fake.requests]
    assert order.index(("POST", "score")) < max(i for i, r in enumerate(order) if r == ("PUT", "mlr-run"))
    assert fake.sent("GET", r"management\.azure\.com/.*/locations/westeurope/mfeOperationsStatus/")
    assert deployed["scoring_uri"] == "https://mlr-run.westeurope.inference.ml.azure.com/score"
    assert deployed["smoke_label"] in [str(d) for d in range(10)]

    report = collect(azure, pipeline.RunNames("mlr", "run"))  # the sweep report, read back from the service
    assert (report.sweep_status, report.best_trial, report.model["version"]) == ("Completed", "mlr-run-sweep_1", 1)
    assert report.onnx["properties"]["parity"]["samples"] == parity["samples"]
    assert report.endpoint["traffic"] == {"blue": 100} and report.endpoint["provisioning_state"] == "Succeeded"
    assert "3 trials, 0 stopped early, 7 epochs run" in render_html(report, plot_curves(report))

    # A request score.py refuses: Azure answers 424 with score.py's 400 in headers; the backend says both.
    with pytest.raises(EndpointError, match=r'HTTP 424 \(score.py answered 400: .*JSON object with \\?"data'):
        azure.endpoints.invoke("mlr-run", payload={"pixels": []}, deployment="blue")

    if adversarial:
        assert_survived_the_adversarial_service(fake, azure, settings, trained_model)

    done = pipeline.cleanup(azure, pipeline.RunNames("mlr", "run"), archive=[("mlr-run", 1)])
    assert fake.sent("GET", r"/jobs$") == []  # the run's jobs by name: the workspace's job list is never read
    assert done["endpoint_deleted"] and done["archived_models"] == ["mlr-run:1"]
    only(fake.sent("DELETE", r"/onlineEndpoints/mlr-run$"), "endpoint DELETE")
    assert fake.resource("onlineEndpoints", "mlr-run") is None
    assert fake.resource("models/versions", "mlr-run", "1")["properties"]["isArchived"] is True
    assert pipeline.cleanup(azure, pipeline.RunNames("mlr", "run"))["endpoint_deleted"] is False  # gone is fine


def assert_survived_the_adversarial_service(fake, azure, settings: DeploymentSettings, model: Path) -> None:
    """What the adversarial modes did to the lifecycle that just passed; then paged version numbering and an
    update through Scaling."""
    from mlrunway.backend.types import ProvisioningState

    assert {status for status, _, _ in fake.faults} == {429, 503}
    assert [azure.models.register("mlr-paged", str(model)).version for _ in range(3)] == [1, 2, 3]
    assert any("$skipToken" in r.query for r in fake.sent("GET", r"/models/mlr-paged/versions$"))  # via nextLink
    children = fake.sent("GET", r"/runs/mlr-run-sweep/children$")
    assert any("$continuationtoken" in r.query for r in children)  # and Run History's continuation tokens
    fake.steps = 2  # the update stays in progress over the SDK's own first poll and the next read
    started = azure.endpoints.begin_create_or_update_deployment("mlr-run", "blue", settings)
    states = [started.provisioning_state] + [azure.endpoints.get_deployment("mlr-run", "blue").provisioning_state
                                             for _ in range(3)]
    assert ProvisioningState.SCALING in states and states[-1] is ProvisioningState.SUCCEEDED


@pytest.mark.parametrize(("code", "message", "storage_log", "expect"), [
    pytest.param("ImageBuildFailure", "The image build failed: conda env creation exited with 1", [],
                 "ImageBuildFailure: The image build failed", id="image-build"),
    pytest.param("OutOfQuota", "Not enough quota available for Standard_DS3_v2 in SubscriptionId", [],
                 "OutOfQuota: Not enough quota", id="out-of-quota"),
    pytest.param("DeploymentFailed", "ResourceNotReady: User container has crashed or terminated",
                 ["Downloading model files", "Error: AuthorizationPermissionMismatch while downloading the model"],
                 "(?s)storage-initializer log.*AuthorizationPermissionMismatch", id="model-download"),
])
def test_a_failed_deployment_says_why_from_its_operation_and_both_logs_and_leaves_traffic(
        fake, azure, trained_model: Path, code: str, message: str, storage_log: list[str], expect: str) -> None:
    """Azure keeps the reason in the deployment's operation status and the storage initializer's log, not in
    the deployment resource: the error carries the operation's code and message and both logs' tails."""
    azure.models.register("m", str(trained_model))
    azure.endpoints.create_or_update("ep-fail")
    fake.deployment_failure, fake.deployment_failure_code, fake.storage_log = message, code, storage_log
    with pytest.raises(EndpointError, match=f"deployment ep-fail/blue failed: {code}: ") as failed:
        azure.endpoints.create_or_update_deployment("ep-fail", "blue", DeploymentSettings(model="m:1", code_dir=str(CODE)))
    assert re.search(expect, str(failed.value))
    logs = fake.sent("POST", r"/deployments/blue/getLogs$")
    assert sorted(r.json().get("containerType") or "default" for r in logs) == ["StorageInitializer", "default"]
    assert fake.sent("GET", r"/mfeOperationsStatus/")  # the operation the PUT returned was read back
    assert fake.resource("onlineEndpoints", "ep-fail")["properties"].get("traffic") in (None, {})


def test_deployment_provisions_after_begin_returns_and_is_deleted_at_the_deadline(fake, azure, trained_model: Path) -> None:
    """What DeployBlue's deferral relies on: begin sends the PUT and returns Creating; the service goes on by itself;
    the trigger's deadline deletes the deployment through the SDK."""
    from mlrunway.backend.types import ProvisioningState

    fake.steps = 3
    azure.models.register("m", str(trained_model))
    azure.endpoints.create_or_update("ep-bg")
    # The SDK's poller, which begin leaves behind, checks the operation once, then waits as long as the service
    # asks, as it would on Azure (with 1 ms, it raced this test's reads under load and finished the deployment).
    fake.retry_after_ms = 60_000
    info = azure.endpoints.begin_create_or_update_deployment("ep-bg", "blue",
                                                     DeploymentSettings(model="m:1", code_dir=str(CODE)))
    only(fake.sent("PUT", r"/onlineEndpoints/ep-bg/deployments/blue$"), "deployment PUT")
    assert info.provisioning_state is ProvisioningState.CREATING
    states = [azure.endpoints.get_deployment("ep-bg", "blue").provisioning_state for _ in range(5)]
    assert states[0] is ProvisioningState.CREATING and states[-1] is ProvisioningState.SUCCEEDED
    fake.retry_after_ms = 1

    assert azure.endpoints.delete_deployment("ep-bg", "blue") is True
    only(fake.sent("DELETE", r"/onlineEndpoints/ep-bg/deployments/blue$"), "deployment DELETE")
    with pytest.raises(NotFound, match="deployment blue of endpoint ep-bg does not exist"):
        azure.endpoints.get_deployment("ep-bg", "blue")
    assert azure.endpoints.delete_deployment("ep-bg", "blue") is False


def test_a_models_properties_and_files_are_uploaded_and_a_missing_version_is_named_name_colon_version(
        fake, azure, trained_model: Path) -> None:
    azure.models.register("m", str(trained_model), tags={"k": "v"}, properties={"params": {"lr": 0.1}})
    assert azure.models.get("m", 1).properties["params"] == {"lr": 0.1}
    files = {k.rsplit("/", 1)[1] for k in fake.blobs if k.startswith(f"{CONTAINER}/LocalUpload/")}
    assert files == {"model.pt2", "signature.json"}
    with pytest.raises(NotFound, match="m:9"):
        azure.models.get("m", 9)


def test_listing_every_model_follows_the_pages_of_the_model_list(fake, azure, tmp_path: Path) -> None:
    """``list()`` reads the model names from ModelContainers_List, which pages with ``nextLink`` like every list."""
    (tmp_path / "weights.txt").write_text("weights")
    fake.page_size = 1
    for name in ("b-model", "a-model", "b-model"):
        azure.models.register(name, str(tmp_path / "weights.txt"))
    assert [(m.name, m.version) for m in azure.models.list()] == [("a-model", 1), ("b-model", 1), ("b-model", 2)]
    assert any("$skipToken" in r.query for r in fake.sent("GET", r"/workspaces/[^/]+/models$"))  # via nextLink


def test_links_point_at_studio(azure) -> None:
    wsid = f"wsid=/subscriptions/{SUBSCRIPTION}/resourcegroups/rg-mlrunway/workspaces/ws-mlrunway"
    assert azure.link("job", "j") == f"https://ml.azure.com/runs/j?{wsid}"
    assert azure.link("model", "m", 3) == f"https://ml.azure.com/model/m:3/details?{wsid}"
    assert azure.link("endpoint", "e") == f"https://ml.azure.com/endpoints/realtime/e/detail?{wsid}"


@pytest.mark.parametrize(("delay", "intervals", "sweep_status", "stopped"), [
    pytest.param(10, 1, JobStatus.COMPLETED, False, id="before-delay-evaluation"),
    pytest.param(1, 1, JobStatus.COMPLETED, True, id="at-an-evaluation-point"),
    pytest.param(2, 3, JobStatus.COMPLETED, True, id="after-the-delay-every-interval"),
    pytest.param(1, 2, JobStatus.CANCELED, False, id="the-sweep-itself-was-canceled"),
])
def test_a_canceled_trial_is_the_policys_decision_only_where_the_policy_applies(delay, intervals, sweep_status, stopped):
    """The service does not say why a trial was canceled: the evidence is the interval it reached."""
    from azure.ai.ml.sweep import BanditPolicy, SweepJobLimits

    from mlrunway.azure.jobs import _why_canceled

    class Sweep:  # the two attributes of the SDK's SweepJob that the label reads, as the SDK's own entities
        early_termination = BanditPolicy(slack_factor=0.15, evaluation_interval=1, delay_evaluation=delay)
        limits = SweepJobLimits(trial_timeout=600)

    label, error = _why_canceled(Sweep(), sweep_status, intervals)
    assert (label is not None) is stopped and (error is None) is stopped
    if stopped:
        assert label == {"reason": f"canceled by the sweep's bandit policy at interval {intervals}", "interval": intervals}
    elif sweep_status is JobStatus.CANCELED:
        assert error == "canceled: the sweep was canceled"
    else:
        assert error.endswith("no early-termination policy applies: the trial timeout (600 s), the sweep's timeout or a user")


def test_a_version_after_an_archived_one_gets_the_next_number(fake, azure, trained_model: Path) -> None:
    """The service lists active versions only unless asked (listViewType): an archived version still holds its
    number, so the next registration must not reuse it."""
    assert azure.models.register("arch", str(trained_model)).version == 1
    azure.models.archive("arch", 1)
    assert azure.models.register("arch", str(trained_model)).version == 2
    assert fake.resource("models/versions", "arch", "1")["properties"]["isArchived"] is True


@pytest.mark.parametrize("rewrites", [False, True], ids=["service-keeps-the-uri", "service-rewrites-the-uri"])
def test_a_model_registered_from_a_jobs_outputs_downloads_whatever_the_service_does_with_its_uri(
        fake, azure, trained_model: Path, tmp_path: Path, rewrites: bool) -> None:
    """The spec does not say whether the service rewrites a model's URI; the artifact store's own path works
    either way (a job URI kept as sent would be read back as a datastore named 'artifacts')."""
    from tests.mlrunway.azure.fake_azureml import ARTIFACT_CONTAINER

    fake.rewrite_model_uris = rewrites
    for file in (f for f in trained_model.rglob("*") if f.is_file()):
        fake.blobs[f"{ARTIFACT_CONTAINER}/ExperimentRun/dcid.job-x/outputs/model/{file.relative_to(trained_model)}"] = \
            file.read_bytes()
    model = azure.models.register("from-job", "model", base=azure.job_outputs("job-x"))
    got = azure.models.download("from-job", model.version, tmp_path / "got")
    assert sorted(p.name for p in got.rglob("*") if p.is_file()) == \
        sorted(p.name for p in trained_model.rglob("*") if p.is_file())


@pytest.mark.slow
def test_an_ended_trials_metrics_are_read_once_however_often_the_sweep_is_polled(fake, azure, small_digits: Path):
    fake.sweep_trials["mlr-poll-sweep"] = [Trial({"learning_rate": 0.01, "momentum": 0.9}, [0.5, 0.6, 0.7])]
    spec = tutorial_sweep(train_job(str(CODE), str(small_digits), num_epochs=3), max_total_trials=1,
                          max_concurrent_trials=1)
    azure.jobs.submit_sweep("mlr-poll-sweep", spec)
    azure.jobs.wait("mlr-poll-sweep", timeout=60, poll_s=0.01)
    first = azure.jobs.sweep_result("mlr-poll-sweep")
    calls = len(fake.sent("GET", r"/mlflow/v1\.0/.*/metrics/get-history$"))
    again = [azure.jobs.sweep_result("mlr-poll-sweep") for _ in range(3)]
    assert all(result.trials == first.trials for result in again) and first.trials[0].history == (0.5, 0.6, 0.7)
    assert len(fake.sent("GET", r"/mlflow/v1\.0/.*/metrics/get-history$")) == calls


def test_the_smoke_tests_reference_answer_is_a_job_in_the_scoring_environment_started_before_provisioning(fake, azure,
                                                                                                      tmp_path):
    """No expected_response: the team's score.py answers sample_request in a reference job (score_once.py its code,
    the team's code folder, the model version and the request its inputs; the fake's compute runs it where mlrunway
    cannot be imported), submitted before the deployment's PUT, and blue's answer must match it."""
    from mlrunway.azure.environments import INFERENCE_IMAGE
    from tests.mlrunway.deploy.test_smoke import FORECAST, answers_as, regressor

    azure.models.register("reg", regressor(tmp_path / "reg"))
    settings = DeploymentSettings(model="reg:1", code_dir=str(FORECAST), instance_type="Standard_DS3_v2",
                                  instance_count=1, environment_variables={"FORECAST_UNITS": "kg"})
    deployed = deploy_blue(azure, "reg-ep", settings, None, sample_request=FORECAST / "sample_request.json",
                           ignore_keys=["request_id"])
    assert answers_as(json.loads(deployed["smoke_answer"])) and answers_as(json.loads(deployed["smoke_expected"]))
    (put,) = [r for r in fake.sent("PUT", f"{ARM_JOB}reg-ep-reference-[0-9a-f]{{8}}$")]
    job = put.json()["properties"]
    assert f"in job {put.path.rsplit('/', 1)[1]}" in deployed["smoke_matched"]
    assert job["command"].startswith("python score_once.py --code ${{inputs.code}} --script ${{inputs.script}}")
    assert job["inputs"]["script"] == {"jobInputType": "literal", "value": "score.py"}
    assert job["inputs"]["request"]["jobInputType"] == "uri_file" and job["inputs"]["model"]["jobInputType"] == "uri_folder"
    assert job["environmentVariables"] == {"FORECAST_UNITS": "kg"} and job["tags"]["mlrunway.role"] == "reference"
    assert fake.resources[job["environmentId"].lower()]["properties"]["image"] == INFERENCE_IMAGE
    order = [r.path for r in fake.requests if r.method == "PUT"]
    first_deployment = next(i for i, p in enumerate(order) if "/deployments/blue" in p)
    assert order.index(put.path) < first_deployment  # its queue and start-up overlap the provisioning


def test_named_outputs_are_read_from_the_datastore_the_service_wrote_them_to(fake, azure, small_digits: Path) -> None:
    """Issue 75: the service writes an output that names no datastore to the workspace's default one, which need
    not be workspaceblobstore, and records its URI on the job: that URI is read, else the default (read once)."""
    from mlrunway.specs.job import Output

    fake.datastores["teamstore"] = "team-container"
    fake.default_datastore = "teamstore"
    job = replace(train_job(str(CODE), str(small_digits)), outputs={"onnx": Output(type="uri_folder")})
    azure.jobs.submit("out-1", job)
    azure.jobs.submit("out-2", job)
    # out-1: the service has recorded where it wrote the output; out-2: it has not (yet).
    stored = fake.resources[f"{WS_PATH}/jobs/out-1".lower()]["properties"]["outputs"]["onnx"]
    stored["uri"] = "azureml://datastores/teamstore/paths/azureml/out-1/onnx/"
    fake.blobs["team-container/azureml/out-1/onnx/model.onnx"] = b"onnx"
    assert azure.named_output("out-1", "onnx") == "azureml://datastores/teamstore/paths/azureml/out-1/onnx/"
    with azure.output_folder(azure.named_output("out-1", "onnx"), "") as folder:
        assert (folder / "model.onnx").read_bytes() == b"onnx"
    assert azure.named_output("out-2", "onnx") == "azureml://datastores/teamstore/paths/azureml/out-2/onnx/"
    assert azure.named_output("out-2", "report") == "azureml://datastores/teamstore/paths/azureml/out-2/report/"
    assert len([r for r in fake.sent("GET", r"/datastores$") if r.query.get("isDefault") == "true"]) == 1
