"""Compute (a named cluster or serverless), the trial's environment, cloud hosts and polling cost, through the
real MLClient against the fake service; every assertion is on what the SDK sent or what the service holds."""

from __future__ import annotations

import importlib.metadata
import re
from dataclasses import replace
from pathlib import Path

import pytest

from mlrunway.azure.environments import CPU_IMAGE, SCORING_CONDA, TORCH_VERSION, export_conda, is_gpu_size
from mlrunway.backend.types import JobStatus
from mlrunway.errors import JobFailed, SpecError
from tests.conftest import REPO
from tests.mlrunway.azure.conftest import CONNECTION
from tests.mlrunway.azure.fake_azureml import FakeCredential, Trial
from training.tutorial import train_job, tutorial_sweep

CODE = REPO / "training"


def backend(fake, tmp_path: Path, **fields: str):
    from mlrunway.azure.backend import AzureBackend

    azure = AzureBackend.from_connection({**CONNECTION, "cache_dir": str(tmp_path / "cache"), **fields},
                                         credential=FakeCredential(), transport=fake, polling_interval=0)
    azure.jobs.poll_s = azure.endpoints.provision_poll_s = 0.0
    return azure


def test_no_compute_runs_serverless_with_the_jobs_instance_type_on_the_cpu_image(fake, tmp_path, small_digits):
    azure = backend(fake, tmp_path, compute="", job_instance_type="Standard_E4s_v3")
    spec = train_job(str(CODE), str(small_digits), num_epochs=2)
    azure.jobs.validate(spec)  # serverless: nothing to look up
    azure.jobs.submit("serverless-1", spec)

    props = fake.sent("PUT", r"/jobs/serverless-1$")[0].json()["properties"]
    assert props.get("computeId") is None
    assert props["resources"]["instanceType"] == "Standard_E4s_v3"
    assert fake.sent("GET", r"/computes/") == []
    environment = fake.resources[props["environmentId"].lower()]["properties"]
    assert environment["image"] == CPU_IMAGE  # an E-series VM has no GPU: torch's CPU build
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in environment["condaFile"]
    assert f"torch=={TORCH_VERSION}" in environment["condaFile"]


def test_a_serverless_sweep_carries_the_instance_type_to_its_trials(fake, tmp_path, small_digits):
    azure = backend(fake, tmp_path, compute="", job_instance_type="Standard_NC6s_v3")
    fake.sweep_trials["sls-sweep"] = [Trial({"learning_rate": 0.01, "momentum": 0.9}, [0.5])]
    azure.jobs.submit_sweep("sls-sweep", tutorial_sweep(train_job(str(CODE), str(small_digits), num_epochs=1),
                                                        max_total_trials=1, max_concurrent_trials=1))
    body = fake.sent("PUT", r"/jobs/sls-sweep$")[0].json()["properties"]
    assert body.get("computeId") is None
    assert body["trial"]["resources"]["instanceType"] == "Standard_NC6s_v3"


def test_an_unknown_compute_is_refused_in_preflight_before_any_job(fake, azure, small_digits):
    spec = train_job(str(CODE), str(small_digits))
    with pytest.raises(SpecError, match=r"azure_ml connection.compute: 'no-such-cluster' is not a compute of "
                                        r"workspace ws-mlrunway.*leave compute empty to run on serverless"):
        azure.jobs.validate(replace(spec, compute="no-such-cluster"))
    assert fake.sent("PUT", r"/jobs/") == []
    azure.jobs.validate(spec)  # the connection's gpu-cluster exists: read once, then remembered
    azure.jobs.validate(spec)
    assert len(fake.sent("GET", r"/computes/gpu-cluster$")) == 1


def test_a_compute_the_service_lacks_at_submit_is_the_services_400_with_its_message(fake, azure, small_digits):
    """A cluster deleted between preflight and submit: the job PUT is refused, and the task says why."""
    del fake.computes["gpu-cluster"]
    azure.jobs._clusters["gpu-cluster"] = ("STANDARD_NC6S_V3", "dedicated")  # preflight saw it
    with pytest.raises(JobFailed, match="job gone-1 was refused by Azure ML: .*Compute gpu-cluster not found"):
        azure.jobs.submit("gone-1", train_job(str(CODE), str(small_digits)))


def test_a_local_input_that_is_missing_is_refused_in_preflight(azure, tmp_path):
    with pytest.raises(SpecError, match=r"command_job.inputs.data: .*does not exist here"):
        azure.jobs.validate(train_job(str(CODE), str(tmp_path / "nowhere")))


@pytest.mark.parametrize(("cloud", "arm", "studio"), [
    ("AzureCloud", "https://management.azure.com", "https://ml.azure.com"),
    ("AzureChinaCloud", "https://management.chinacloudapi.cn", "https://ml.azure.cn"),
    ("AzureUSGovernment", "https://management.usgovcloudapi.net", "https://ml.azure.us"),
])
def test_the_cloud_sets_the_arm_host_the_token_scope_and_the_studio_host(fake, tmp_path, cloud, arm, studio):
    azure = backend(fake, tmp_path, cloud=cloud)
    assert azure.rest._base_url == arm
    assert azure.client._base_url == arm  # the SDK's own client agrees
    bearer = next(p for p in azure.rest._pipeline._impl_policies if type(p).__name__ == "BearerTokenCredentialPolicy")
    assert bearer._scopes == (f"{arm}/.default",)
    assert azure.link("job", "j").startswith(f"{studio}/runs/j?wsid=/subscriptions/")


def test_an_unknown_cloud_is_refused_with_the_known_ones(fake, tmp_path):
    with pytest.raises(SpecError, match="azure_ml connection.cloud.*AzureChinaCloud"):
        backend(fake, tmp_path, cloud="Moon")


def test_run_history_and_mlflow_hosts_come_from_the_workspace(fake, azure):
    azure.jobs.params("some-run")
    discovery = fake.sent("GET", r"api\.azureml\.ms/discovery$")
    assert len(discovery) == 1
    assert fake.sent("GET", r"westeurope\.api\.azureml\.ms/mlflow/v1\.0/subscriptions/.*/runs/get$")


@pytest.mark.slow
def test_a_running_trials_metrics_are_read_again_only_after_refresh_s(fake, azure, small_digits):
    fake.steps = 50  # the sweep stays running
    fake.sweep_trials["poll-sweep"] = [Trial({"learning_rate": 0.01, "momentum": 0.9}, [0.5, 0.6])]
    spec = tutorial_sweep(train_job(str(CODE), str(small_digits), num_epochs=2), max_total_trials=1,
                          max_concurrent_trials=1)
    azure.jobs.submit_sweep("poll-sweep", spec)
    history = r"/mlflow/v1\.0/.*/metrics/get-history$"
    first = azure.jobs.sweep_result("poll-sweep")
    assert first.trials[0].status is JobStatus.RUNNING and first.trials[0].history == (0.5, 0.6)
    read = len(fake.sent("GET", history))
    azure.jobs.sweep_result("poll-sweep")
    assert len(fake.sent("GET", history)) == read  # within refresh_s (60 s): the record stands
    azure.jobs.refresh_s = 0.0
    azure.jobs.sweep_result("poll-sweep")
    assert len(fake.sent("GET", history)) > read


def test_a_job_that_stops_responding_and_comes_back_is_waited_for(fake, azure, small_digits):
    """Issue 29, 7: the spec says a NotResponding run may go back to any earlier state: not terminal here."""
    azure.jobs.submit("nr-1", train_job(str(CODE), str(small_digits)))
    fake.job_script["nr-1"] = ["Running", "NotResponding", "NotResponding", "Running", "Completed"]
    seen = []
    info = azure.jobs.wait("nr-1", timeout=30, poll_s=0, on_poll=lambda i: seen.append(i.properties["azure_status"]))
    assert info.status is JobStatus.COMPLETED and "NotResponding" in seen
    assert not fake.sent("POST", "/jobs/nr-1/cancel$")


def test_a_job_silent_past_the_bound_is_canceled_before_a_retry_runs_another(fake, azure, small_digits):
    fake.job_final["nr-2"] = "NotResponding"
    azure.jobs.submit("nr-2", train_job(str(CODE), str(small_digits)))
    azure.jobs.not_responding_s = 0.2
    info = azure.jobs.wait("nr-2", timeout=30, poll_s=0.05)
    assert info.status is JobStatus.FAILED and "NotResponding on Azure ML for over 0 s" in info.error
    assert "canceled it, so a retry runs no attempt beside it" in info.error
    assert fake.sent("POST", "/jobs/nr-2/cancel$")


def test_the_trials_torch_and_the_scorings_onnxruntime_are_the_projects():
    """A .pt2 loads in the torch that wrote it, and parity was measured with the project's onnxruntime."""
    assert importlib.metadata.version("torch").split("+")[0] == TORCH_VERSION
    pins = (REPO / "constraints.txt").read_text().splitlines()  # what make setup installs
    assert f"torch=={TORCH_VERSION}" in pins
    ort = importlib.metadata.version("onnxruntime")
    assert f"onnxruntime=={ort}" in SCORING_CONDA["dependencies"][2]["pip"]
    # The export job measures parity with the scoring onnxruntime, on the trials' torch, with the project's onnx.
    for gpu in (False, True):
        export = export_conda(gpu)["dependencies"][-1]["pip"]
        assert f"torch=={TORCH_VERSION}" in export and f"onnxruntime=={ort}" in export
        for package in ("onnx", "onnxscript"):
            assert f"{package}=={importlib.metadata.version(package)}" in export and f"{package}==" in " ".join(pins)
    from mlrunway.data.digits import IMAGE_SUFFIXES
    from mlrunway.onnx_export.images import IMAGE_SUFFIXES as EXPORTED  # the exporter's own copy (it ships alone)

    assert EXPORTED == IMAGE_SUFFIXES


@pytest.mark.parametrize(("size", "gpu"), [
    ("Standard_NC6s_v3", True), ("STANDARD_ND96ASR_V4", True), ("Standard_NV36ads_A10_v5", True),
    ("Standard_DS3_v2", False), ("Standard_E4s_v3", False), ("Standard_F2s_v2", False), (None, False),
])
def test_gpu_vm_sizes_are_the_n_families(size, gpu):
    assert is_gpu_size(size) is gpu



@pytest.mark.parametrize("model_path", ["outputs/model", "${{outputs.model}}"])
def test_the_model_contract_is_checked_on_azure_reading_the_signature_and_never_the_model(fake, azure, trained_model,
                                                                                         model_path):
    """A training job's outputs are not files here: their signature.json is downloaded from the datastore and the
    model file's presence asked, so a job that saved no model fails before the sweep, as locally, and the worker
    never holds the model (issue 64, 4)."""
    from mlrunway.errors import JobFailed
    from mlrunway.pipeline import check_model_output
    from tests.mlrunway.azure.fake_azureml import ARTIFACT_CONTAINER, CONTAINER

    prefix = f"{ARTIFACT_CONTAINER}/ExperimentRun/dcid.job-m/outputs/model" if model_path == "outputs/model" \
        else f"{CONTAINER}/azureml/job-m/model"
    with pytest.raises(JobFailed, match=f"job job-m: no model at {re.escape(model_path)}: nothing is there"):
        check_model_output(azure, "job-m", model_path)
    for file in (f for f in trained_model.rglob("*") if f.is_file()):
        fake.blobs[f"{prefix}/{file.relative_to(trained_model)}"] = file.read_bytes()
    sent = len(fake.requests)
    assert check_model_output(azure, "job-m", model_path) == ["model.pt2", "signature.json"]
    assert not any(azure.cache_dir.iterdir())  # the scratch download is gone
    read = [r.path for r in fake.requests[sent:] if r.method == "GET" and not r.query.get("restype")]
    assert any(p.endswith("/model/signature.json") for p in read), read
    assert not any(p.endswith("/model.pt2") for p in read), read  # asked about (HEAD), never downloaded
    # The inputs file in a subfolder comes down to the same subfolder (the download lands a file by its own name).
    import io

    import numpy as np

    buffer = io.BytesIO()
    np.save(buffer, np.zeros((4, 1, 8, 8), np.float32))
    fake.blobs[f"{prefix}/inputs/sample.npy"] = buffer.getvalue()
    checked = check_model_output(azure, "job-m", model_path, {"inputs_file": "inputs/sample.npy"})
    assert checked == ["inputs/sample.npy", "model.pt2", "signature.json"]
    del fake.blobs[f"{prefix}/model.pt2"]
    with pytest.raises(JobFailed, match=r"signature.json names 'model.pt2', which is not there \(found: signature.json\)"):
        check_model_output(azure, "job-m", model_path)


def test_an_export_job_whose_torch_is_not_the_trials_is_refused_naming_its_environment(fake, azure, tmp_path,
                                                                                      trained_model):
    """A .pt2 is only promised to load in the torch that wrote it: the export job is told the trials' torch (the
    project's environment's), and the job (run by the fake's compute without mlrunway) refuses another, naming the
    setting that picks its environment. A team's own training environment: its torch is not known, so not told."""
    from mlrunway.azure.backend import AzureBackend
    from mlrunway.onnx_export import export_registered

    assert azure.capabilities.trainer_torch == TORCH_VERSION
    own = AzureBackend.from_connection({**CONNECTION, "environment": "azureml:team-env:3",
                                        "cache_dir": str(tmp_path / "own")}, credential=FakeCredential(), transport=fake)
    assert own.capabilities.trainer_torch is None  # a team's own environment: its torch is not known here
    azure.models.register("digits", trained_model)
    wait = {"wait": lambda job: azure.jobs.wait(job, poll_s=0)}
    with pytest.raises(SpecError, match=rf"^export.environment: export job digits-export: the export job's environment "
                                        rf"has torch {re.escape(TORCH_VERSION)}, and the trials train with torch 9\.9\.9"):
        export_registered(azure, "digits", 1, job_name="digits-export", trainer_torch="9.9.9", **wait)
    assert azure.models.list("digits-onnx") == []
    props = fake.sent("PUT", r"/jobs/digits-export$")[0].json()["properties"]
    assert "--trainer-torch 9.9.9" in props["command"]


def test_the_connections_export_environment_runs_the_export_job_and_a_bad_one_is_refused_naming_it(fake, tmp_path):
    azure = backend(fake, tmp_path, export_environment="azureml:team-export:2")
    assert azure.jobs.export_environment == "azureml:team-export:2"
    from mlrunway.onnx_export.registered import export_job, shipped_code

    model = type("Model", (), {"name": "m", "version": 1, "path": "azureml://datastores/workspaceblobstore/paths/m/"})
    with shipped_code() as code:
        azure.jobs.submit("m-export", export_job(model, code))
        azure.jobs.submit("m-train", train_job(str(CODE), "azureml://datastores/workspaceblobstore/paths/d/"))
    export_env = fake.sent("PUT", r"/jobs/m-export$")[0].json()["properties"]["environmentId"]
    assert export_env.endswith("/environments/team-export/versions/2")
    assert "team-export" not in fake.sent("PUT", r"/jobs/m-train$")[0].json()["properties"]["environmentId"]
    with pytest.raises(SpecError, match=r"^azure_ml connection.export_environment: 42 is not an environment name"):
        backend(fake, tmp_path, export_environment=42)
