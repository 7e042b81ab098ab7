"""Compute (a named cluster or serverless), the trial's environment, cloud hosts and polling cost, through the
real MLClient against the fake service; every assertion is on what the SDK sent or what the service holds."""

from __future__ import annotations

import importlib.metadata
import re
from dataclasses import replace
from pathlib import Path

import pytest

from mlrunway.azure.environments import CPU_IMAGE, SCORING_CONDA, TORCH_VERSION, is_gpu_size
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
    azure.jobs._vm_sizes["gpu-cluster"] = "STANDARD_NC6S_V3"  # preflight saw it
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


@pytest.mark.parametrize(("size", "gpu"), [
    ("Standard_NC6s_v3", True), ("STANDARD_ND96ASR_V4", True), ("Standard_NV36ads_A10_v5", True),
    ("Standard_DS3_v2", False), ("Standard_E4s_v3", False), ("Standard_F2s_v2", False), (None, False),
])
def test_gpu_vm_sizes_are_the_n_families(size, gpu):
    assert is_gpu_size(size) is gpu



@pytest.mark.parametrize("model_path", ["outputs/model", "${{outputs.model}}"])
def test_the_model_contract_is_checked_on_azure_through_the_artifact_download(fake, azure, trained_model, model_path):
    """A training job's outputs are not files here: they are downloaded from their datastore and checked, so a
    job that saved no model fails before the sweep, as locally."""
    from mlrunway.errors import JobFailed
    from mlrunway.pipeline import check_model_output
    from tests.mlrunway.azure.fake_azureml import ARTIFACT_CONTAINER, CONTAINER

    prefix = f"{ARTIFACT_CONTAINER}/ExperimentRun/dcid.job-m/outputs/model" if model_path == "outputs/model" \
        else f"{CONTAINER}/azureml/job-m/model"
    with pytest.raises(JobFailed, match=f"job job-m: no model at {re.escape(model_path)}: nothing is there"):
        check_model_output(azure, "job-m", model_path)
    for file in (f for f in trained_model.rglob("*") if f.is_file()):
        fake.blobs[f"{prefix}/{file.relative_to(trained_model)}"] = file.read_bytes()
    assert check_model_output(azure, "job-m", model_path) == ["model.pt2", "signature.json"]
    assert not any(azure.cache_dir.iterdir())  # the scratch download is gone


def test_an_export_worker_whose_torch_is_not_the_trials_is_refused_naming_both(fake, azure, tmp_path):
    """A .pt2 is only promised to load in the torch that wrote it: on Azure the trials train with the project's
    environment's torch, so export on a worker with another refuses before it downloads anything (issue 61, 2)."""
    from mlrunway.azure.backend import AzureBackend
    from mlrunway.errors import MlrunwayError
    from mlrunway.onnx_export import export_registered
    from tests.mlrunway.azure.fake_azureml import FakeCredential

    assert azure.capabilities.trainer_torch == TORCH_VERSION
    own = AzureBackend.from_connection({**CONNECTION, "environment": "azureml:team-env:3",
                                        "cache_dir": str(tmp_path / "own")}, credential=FakeCredential(), transport=fake)
    assert own.capabilities.trainer_torch is None  # a team's own environment: its torch is not known here
    sent = len(fake.requests)
    with pytest.raises(MlrunwayError, match=rf"the backend's jobs train with torch 9\.9\.9, this worker has torch "
                                            rf"{re.escape(TORCH_VERSION)}.*install torch==9\.9\.9 where the export"):
        export_registered(azure.models, "digits", 1, trainer_torch="9.9.9")
    assert len(fake.requests) == sent
