"""The bad-input catalogue: each case is rejected before any job starts, with the field and the fix named.

Cases go through the path a user's input takes (the spec constructors, the backend's submit, the run's
preflight, the hook, the endpoint), and each test checks afterwards that the workspace holds no job.
"""

from __future__ import annotations

import copy
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest

from mlrunway.errors import SpecError
from mlrunway.local.backend import LocalBackend
from mlrunway.specs import (
    BanditPolicy,
    Choice,
    CommandJobSpec,
    Input,
    MedianStoppingPolicy,
    Normal,
    Objective,
    QUniform,
    Randint,
    SweepLimits,
    SweepSpec,
    TruncationSelectionPolicy,
    Uniform,
)
from mlrunway.specs.search_space import LogUniform
from tests.conftest import REPO
from training.tutorial import train_job


@dataclass
class Ctx:
    backend: LocalBackend
    digits: Path
    tmp: Path
    monkeypatch: pytest.MonkeyPatch

    def trial(self) -> CommandJobSpec:
        return train_job(str(REPO / "training"), str(self.digits), num_epochs=1)

    def sweep(self, **changes) -> None:
        spec = {"trial": self.trial(), "search_space": {"learning_rate": Uniform(min_value=0.01, max_value=0.1)},
                "objective": Objective(primary_metric="best_val_acc", goal="maximize"),
                "limits": SweepLimits(max_total_trials=2, max_concurrent_trials=1), **changes}
        self.backend.jobs.submit_sweep("bad-sweep", SweepSpec(**spec))

    def preflight(self, **changes) -> None:
        sys.path.insert(0, str(REPO / "dags"))
        from train_sweep_deploy import dag, tasks

        params = {**dag.params.validate(), "data_dir": str(self.digits), **changes}
        task = copy.copy(dag.get_task("train"))
        task.backend_conn_id = params["backend_conn_id"]  # rendered, as pre_execute sees it
        tasks.preflight({"params": params, "dag": SimpleNamespace(dag_id=dag.dag_id), "run_id": "manual__x",
                         "task": task})

    def folder(self, layout: dict[str, bytes]) -> str:
        root = self.tmp / "data"
        for name, content in layout.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_bytes(content)
        root.mkdir(exist_ok=True)
        return str(root)


def hook(c: Ctx, conn_id: str, conn: dict | None = None):
    from mlrunway.airflow.hook import MlrunwayHook

    if conn is not None:
        c.monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(conn))
    return MlrunwayHook(conn_id).get_backend()


AZ = {"subscription_id": "6a3c9f1e-0b7d-4e8a-9c2f-1d5e7b3a9c40", "resource_group": "rg", "workspace_name": "ws"}
CASES = [
    # search spaces
    ("empty-choice", lambda c: c.sweep(search_space={"learning_rate": Choice(values=[])}), "values"),
    ("uniform-min-above-max", lambda c: Uniform(min_value=1.0, max_value=0.1), "min_value"),
    ("log-of-zero", lambda c: LogUniform.from_range(0.0, 0.1), "low"),
    ("quniform-zero-q", lambda c: QUniform(min_value=0, max_value=10, q=0), "q"),
    ("randint-zero", lambda c: Randint(upper=0), "upper"),
    ("normal-negative-sigma", lambda c: Normal(mu=0.0, sigma=-1.0), "sigma"),
    ("unknown-distribution", lambda c: c.sweep(search_space={"learning_rate": (0.01, 0.1)}), "search_space.learning_rate"),
    ("name-not-in-command", lambda c: c.sweep(search_space={"batch": Choice(values=[16, 32])}), "search_space.batch"),
    ("empty-search-space", lambda c: c.sweep(search_space={}), "search_space"),
    # policies
    ("negative-slack", lambda c: BanditPolicy(slack_factor=-0.1), "slack_factor"),
    ("both-slacks", lambda c: BanditPolicy(slack_factor=0.1, slack_amount=0.2), "slack"),
    ("zero-interval", lambda c: BanditPolicy(slack_factor=0.1, evaluation_interval=0), "evaluation_interval"),
    ("negative-delay", lambda c: MedianStoppingPolicy(delay_evaluation=-1), "delay_evaluation"),
    ("truncation-100", lambda c: TruncationSelectionPolicy(truncation_percentage=100), "truncation_percentage"),
    # limits and objective
    ("zero-trials", lambda c: SweepLimits(max_total_trials=0), "max_total_trials"),
    ("too-many-trials", lambda c: SweepLimits(max_total_trials=1001), "max_total_trials"),
    ("negative-timeout", lambda c: SweepLimits(max_total_trials=2, timeout=-5), "timeout"),
    ("bad-goal", lambda c: Objective(primary_metric="acc", goal="up"), "goal"),
    ("empty-metric", lambda c: Objective(primary_metric="", goal="maximize"), "primary_metric"),
    ("bayesian-with-a-policy", lambda c: c.sweep(sampling_algorithm="bayesian",
                                                 early_termination=BanditPolicy(slack_factor=0.1)), "early_termination"),
    ("sobol-on-a-grid", lambda c: c.sweep(sampling_algorithm={"type": "grid", "rule": "sobol"}), "sampling_algorithm.rule"),
    # data and code
    ("missing-data-folder", lambda c: c.preflight(data_dir=str(c.tmp / "nowhere")), "data_dir"),
    ("empty-data-folder", lambda c: c.preflight(data_dir=c.folder({})), "data_dir"),
    ("not-imagefolder", lambda c: c.preflight(data_dir=c.folder({"train/a.png": b"x", "val/b.png": b"x"})), "data_dir"),
    ("class-without-images", lambda c: c.preflight(data_dir=c.folder({"train/0/a.txt": b"x", "val/0/a.png": b"x"})),
     "data_dir"),
    ("missing-training-script", lambda c: c.preflight(code_dir=str(c.tmp)), "code_dir"),
    ("missing-input-path", lambda c: c.backend.jobs.submit("bad-job", CommandJobSpec(
        code=str(REPO / "training"), command="python train.py --data-dir ${{inputs.data}}",
        inputs={"data": Input(path=str(c.tmp / "absent"))})), "inputs.data"),
    # endpoints and instances
    ("endpoint-starts-with-digit", lambda c: c.backend.endpoints.create_or_update("1digits"), "endpoint.name"),
    ("endpoint-too-long", lambda c: c.backend.endpoints.create_or_update("e" * 33), "endpoint.name"),
    ("endpoint-ends-with-hyphen", lambda c: c.backend.endpoints.create_or_update("digits-"), "endpoint.name"),
    ("prefix-too-long", lambda c: c.preflight(endpoint_prefix="p" * 24), "endpoint"),
    ("multi-node-locally", lambda c: c.backend.jobs.submit("bad-job", CommandJobSpec(
        code=str(REPO / "training"), command="python train.py", instance_count=2)), "instance_count"),
    ("deployment-instances-zero", lambda c: hook(c, "aml_zero", {"conn_type": "azure_ml",
                                                              "extra": {**AZ, "instance_count": "0"}}), "instance_count"),
    # connections
    ("unknown-connection", lambda c: hook(c, "no_such_connection"), "backend_conn_id"),
    ("azure-bad-subscription", lambda c: hook(c, "aml_guid", {"conn_type": "azure_ml",
                                                           "extra": {**AZ, "subscription_id": "my-sub"}}), "subscription_id"),
    ("azure-secret-missing", lambda c: hook(c, "aml_sp", {"conn_type": "azure_ml", "extra": {
        **AZ, "credential": "client_secret", "tenant_id": "t", "client_id": "c"}}), "password"),
]


@pytest.mark.parametrize(("case", "field"), [pytest.param(fn, field, id=name) for name, fn, field in CASES])
def test_bad_input_is_rejected_before_any_job_naming_field_and_fix(case, field, digits, tmp_path, monkeypatch):
    monkeypatch.setenv("MLRUNWAY_WORKSPACE", str(tmp_path / "ws"))
    ctx = Ctx(LocalBackend.at(tmp_path / "ws"), digits, tmp_path, monkeypatch)
    with pytest.raises(SpecError) as raised:
        case(ctx)
    message = str(raised.value)
    problem, _, fix = message.partition("; ")
    assert field in problem, f"the error does not name {field!r}: {message}"
    assert fix.strip(), f"the error gives no fix: {message}"
    assert ctx.backend.jobs.list() == []


def test_the_catalogue_has_at_least_25_cases():
    assert len(CASES) >= 25 and len({name for name, _, _ in CASES}) == len(CASES)
