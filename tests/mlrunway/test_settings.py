"""Settings declared once (issue 62, first group: the staged rollout): the trigger form's Param is the declaration's
schema in the form's dialect, and the form's validator (jsonschema) and the declaration's (pydantic) accept and
refuse the same values; what only the declaration can check (a rule across fields, the order of steps) is named."""

from __future__ import annotations

import sys

import jsonschema
import pytest

from mlrunway.deploy.gate import Evaluation
from mlrunway.deploy.rollout import RolloutPolicy
from mlrunway.errors import SpecError
from mlrunway.settings import form_schema
from tests.conftest import REPO

GOOD = [{}, {"steps": [100]}, {"steps": [10, 50, 100], "window_s": 5}, {"mirror_percent": 50, "mirror_window_s": 10},
        {"max_extension_s": None}, {"max_extension_s": 90}, {"min_requests": 0}, {"watch_alpha": 0.1},
        {"mirror_percent": 10, "mirror_window_s": 5, "max_disagreement": 0.05, "shadow_keys": ["label"]},
        {"shadow_tolerance": 0.001, "max_p99_ratio": 3, "p99_slack_ms": 20, "max_error_rate_increase": 0}]
BAD = [{"steps": [10, 150]}, {"steps": []}, {"steps": [10.5, 100]}, {"steps": "10,100"}, {"mirror_percent": 80},
       {"mirror_percent": -1}, {"mirror_percent": 12.5}, {"mirror_percent": True}, {"window": 30},
       {"max_disagreement": 1.5}, {"shadow_keys": "label"}, {"shadow_keys": [""]}, {"min_requests": 2.5},
       {"min_requests": -1}, {"watch_alpha": 0}, {"watch_alpha": 0.5}, {"window_s": -1}, {"window_s": "30"},
       {"max_extension_s": "long"}, {"watch_s": None}]
# What JSON Schema cannot state: checked by the declaration (in preflight, before any job), not by the form.
DECLARATION_ONLY = [{"steps": [50, 10, 100]}, {"steps": [10, 50]}, {"max_disagreement": 0.1}]


EVALUATION_GOOD = [{}, {"confidence": 0.9, "min_samples": 300}, {"file": "eval.jsonl", "metric": "metrics.py:rmse"},
                   {"file": "e.jsonl", "metric": "m.py:f", "goal": "minimize", "resamples": 200}]
EVALUATION_BAD = [{"confidence": 1.0}, {"confidence": 0.4}, {"confidence": "high"}, {"min_samples": 0},
                  {"resamples": 50}, {"confidance": 0.9}, {"file": "eval.jsonl"}, {"metric": "m.py:f"},
                  {"file": "e.jsonl", "metric": "rmse"}, {"file": "e.jsonl", "metric": "m.py:f", "goal": "up"},
                  {"file": "", "metric": "m.py:f"}, {"min_samples": 1.5}]


@pytest.mark.parametrize("value", EVALUATION_GOOD, ids=str)
def test_the_form_and_the_declaration_accept_the_same_evaluation(value):
    from mlrunway.airflow.params import evaluation_param

    jsonschema.validate(value, evaluation_param(section="s", description="").schema)
    Evaluation.parse(value)


@pytest.mark.parametrize("value", EVALUATION_BAD, ids=str)
def test_the_form_and_the_declaration_refuse_the_same_evaluation(value):
    from mlrunway.airflow.params import evaluation_param

    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(value, evaluation_param(section="s", description="").schema)
    with pytest.raises(SpecError, match=r"^evaluation\.\w+: "):
        Evaluation.parse(value)


DRIFT_GOOD = [{}, {"min_rows": 50, "alpha": 0.05}, {"ignore": ["id", "ts"]}, {"permutations": 1000},
              {"metric_thresholds": {"numerical": {"jensen_shannon_distance": 0.2}}},
              {"metric_thresholds": {"categorical": {"pearsons_chi_squared_test": 0.01}, "numerical": None}}]
DRIFT_BAD = [{"thresholds": {}}, {"metric_thresholds": {"numeric": {}}}, {"metric_thresholds": "x"},
             {"metric_thresholds": {"numerical": {"chi_squared": 0.1}}},
             {"metric_thresholds": {"numerical": {"normalized_wasserstein_distance": -1}}},
             {"metric_thresholds": {"categorical": {"jensen_shannon_distance": 0.1,
                                                    "population_stability_index": 0.2}}},
             {"min_rows": 3}, {"alpha": 0.7}, {"alpha": 0}, {"ignore": "correlationid"}, {"permutations": 50}]
# Declaration only: a p-value threshold of 1 or more (JSON Schema gives every metric one bound).
DRIFT_DECLARATION_ONLY = [{"metric_thresholds": {"numerical": {"two_sample_kolmogorov_smirnov_test": 1.5}}}]


def test_the_monitor_dags_drift_param_is_its_declaration():
    from mlrunway.monitoring.drift import Drift

    sys.path.insert(0, str(REPO / "dags"))
    from monitor_endpoint import dag

    param = dag.params.get_param("drift")
    declared = form_schema(Drift, title="Drift metrics and thresholds", description=param.description)
    assert {**param.schema, "description": param.description} == declared


@pytest.mark.parametrize(("value", "good"), [*((v, True) for v in DRIFT_GOOD), *((v, False) for v in DRIFT_BAD)],
                         ids=str)
def test_the_form_and_the_declaration_agree_on_drift(value, good):
    from mlrunway.airflow.params import drift_param
    from mlrunway.monitoring.drift import DriftSettings

    schema = drift_param(description="").schema
    if good:
        jsonschema.validate(value, schema)
        DriftSettings.parse(value)
        return
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(value, schema)
    with pytest.raises(SpecError, match=r"^drift\.\w+"):
        DriftSettings.parse(value)


@pytest.mark.parametrize("value", DRIFT_DECLARATION_ONLY, ids=str)
def test_what_the_drift_form_cannot_state_the_declaration_refuses(value):
    from mlrunway.airflow.params import drift_param
    from mlrunway.monitoring.drift import DriftSettings

    jsonschema.validate(value, drift_param(description="").schema)
    with pytest.raises(SpecError, match=r"^drift\.metric_thresholds\.numerical\.two_sample"):
        DriftSettings.parse(value)


@pytest.fixture(scope="module")
def param_schema() -> dict:
    from mlrunway.airflow.params import rollout_param

    return rollout_param(section="Production endpoint", description="").schema


def test_the_rollout_param_of_the_dag_is_its_declaration_in_the_forms_dialect():
    sys.path.insert(0, str(REPO / "dags"))
    from train_sweep_deploy import dag

    for name, kind, title in (("rollout", RolloutPolicy, "Staged rollout"),
                              ("evaluation", Evaluation, "Evaluation set and gate")):
        param = dag.params.get_param(name)
        declared = form_schema(kind, title=title, section="Production endpoint", description=param.description)
        assert {**param.schema, "description": param.description} == declared, name
    param = dag.params.get_param("rollout")
    assert param.schema["type"] == ["null", "object"] and "$defs" not in str(param.schema)  # the form's widget
    assert param.schema["properties"]["max_extension_s"]["type"] == ["null", "number"]
    assert param.schema["properties"]["watch_alpha"] == {**param.schema["properties"]["watch_alpha"],
                                                         "exclusiveMinimum": 0, "maximum": 0.1}
    assert '"steps": [10, 50, 100]' in param.description  # the defaults, stated from the declaration


@pytest.mark.parametrize("value", GOOD, ids=str)
def test_the_form_and_the_declaration_accept_the_same(value, param_schema):
    jsonschema.validate(value, param_schema)
    RolloutPolicy.parse(value)


@pytest.mark.parametrize("value", BAD, ids=str)
def test_the_form_and_the_declaration_refuse_the_same(value, param_schema):
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(value, param_schema)
    field = next(iter(value))
    with pytest.raises(SpecError, match=rf"^rollout\.{field}: "):
        RolloutPolicy.parse(value)


@pytest.mark.parametrize("value", DECLARATION_ONLY, ids=str)
def test_what_the_form_cannot_state_the_declaration_refuses(value, param_schema):
    jsonschema.validate(value, param_schema)
    with pytest.raises(SpecError, match=r"^rollout\.(steps|max_disagreement): "):
        RolloutPolicy.parse(value)


COLLECTOR_GOOD = [{"collections": {"model_inputs": {"enabled": "true"}, "model_outputs": {"enabled": "True"}}},
                  {"collections": {"request": True, "response": False}, "sampling_rate": 0.1},
                  {"collections": {"model_inputs": "false"}, "rolling_rate": "minute"},
                  {"collections": {f"c{i}": True for i in range(5)}, "sampling_rate": 1}]
COLLECTOR_BAD = [{"collections": {}}, {"sampling_rate": 1.0}, {"collections": {"model inputs": True}},
                 {"collections": {"model_inputs": {"enabled": "yes"}}}, {"collections": {"model_inputs": 1}},
                 {"collections": {"model_inputs": {"enabled": "true", "data": "azureml:x:1"}}},
                 {"collections": {"x": True}, "sampling_rate": 0}, {"collections": {"x": True}, "sampling_rate": 1.5},
                 {"collections": {"x": True}, "sampling_rate": True},
                 {"collections": {"x": True}, "rolling_rate": "week"}, {"collections": {"x": True}, "request_logging": {}}]
# What JSON Schema cannot state: at most five custom collections enabled (any number of disabled ones).
COLLECTOR_DECLARATION_ONLY = [{"collections": {f"c{i}": True for i in range(6)}}]


@pytest.mark.parametrize(("value", "good"), [*((v, True) for v in COLLECTOR_GOOD),
                                             *((v, False) for v in COLLECTOR_BAD)], ids=str)
def test_the_form_and_the_declaration_agree_on_the_data_collector(value, good):
    from mlrunway.airflow.params import data_collector_param
    from mlrunway.backend.capture import DataCollector

    schema = data_collector_param(section="s", description="").schema
    if good:
        jsonschema.validate(value, schema)
        assert DataCollector.parse(value) is not None or not any(
            v in (True, "true", "True") for v in value["collections"].values())
        return
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(value, schema)
    with pytest.raises(SpecError, match=rf"^data_collector\.{list(value)[-1] if len(value) > 1 else 'collections'}"):
        DataCollector.parse(value)


def test_what_the_collector_form_cannot_state_the_declaration_refuses():
    from mlrunway.airflow.params import data_collector_param
    from mlrunway.backend.capture import DataCollector

    for value in COLLECTOR_DECLARATION_ONLY:
        jsonschema.validate(value, data_collector_param(section="s", description="").schema)
        with pytest.raises(SpecError, match=r"^data_collector\.collections: enables 6 custom collections"):
            DataCollector.parse(value)


def test_the_dags_collector_and_the_monitors_window_are_their_declarations():
    from mlrunway.airflow.params import data_collector_param
    from mlrunway.monitoring.monitor import MonitorSettings
    from mlrunway.settings import form_field

    sys.path.insert(0, str(REPO / "dags"))
    from monitor_endpoint import dag as monitor_dag
    from train_sweep_deploy import dag

    param = dag.params.get_param("data_collector")
    declared = data_collector_param(section="Production endpoint", description="").schema
    assert param.schema == declared
    assert param.schema["properties"]["collections"]["additionalProperties"] is False  # a bad name is refused
    window = monitor_dag.params.get_param("window_s")
    assert {**window.schema, "description": window.description} == {
        **{k: v for k, v in form_field(MonitorSettings, "window_s").items() if k != "default"},
        "title": "Window (seconds)"}
    assert window.value == 86400.0


@pytest.mark.parametrize(("value", "message"), [
    ({"cron": "0 3 * *"}, r"model_monitor\.cron: '0 3 \* \*' is not a cron expression"),
    ({"emails": "ml@example.com"}, r"model_monitor\.emails: 'ml@example.com' is not a list of e-mail addresses"),
    ({"runtime_version": 3.4}, r"model_monitor\.runtime_version: 3\.4 is not supported; use one of 3\.4, 3\.5"),
    ({"instance_type": ""}, r"model_monitor\.instance_type: '' is not an instance type"),
])
def test_the_azure_model_monitors_declaration_names_the_field_and_the_fix(value, message):
    pytest.importorskip("azure.ai.ml")
    from mlrunway.azure.model_monitor import MonitorSettings

    with pytest.raises(SpecError, match=rf"^azure_ml connection\.{message}"):
        MonitorSettings.parse(value)
    assert MonitorSettings.parse(True) == MonitorSettings() and MonitorSettings.parse("") is None


def test_the_dags_smoke_test_and_promotion_fields_are_their_declarations():
    from mlrunway.backend.types import Instances
    from mlrunway.deploy.gate import Promotion
    from mlrunway.deploy.smoke import SmokeTest
    from mlrunway.settings import form_field

    sys.path.insert(0, str(REPO / "dags"))
    from train_sweep_deploy import dag

    for kind, names in ((SmokeTest, ("sample_request", "expected_response", "ignore_keys")),
                        (Promotion, ("endpoint_name", "require_approval", "min_improvement")),
                        (Instances, ("instance_type", "instance_count"))):
        for name in names:
            param = dag.params.get_param(name)
            declared = {k: v for k, v in form_field(kind, name).items() if k != "default"}
            assert {**param.schema, "description": param.description} == {**declared, "section": param.schema[
                "section"]}, name
    assert dag.params.get_param("endpoint_name").schema["pattern"] == "^[A-Za-z][A-Za-z0-9-]{1,30}[A-Za-z0-9]$"


# (group, settings as the form gives them, accepted): each through every field's Param (jsonschema) and the
# declaration. What only a template renders (text for a number or a flag) is the declaration's alone.
FIELDS = [
    ("SmokeTest", {"sample_request": "request.json", "ignore_keys": ["request_id"]}, True),
    ("SmokeTest", {"sample_request": None, "expected_response": None, "ignore_keys": None}, True),
    ("SmokeTest", {"ignore_keys": [""]}, False), ("SmokeTest", {"ignore_keys": [3]}, False),
    ("SmokeTest", {"sample_request": 3}, False),
    ("Promotion", {"endpoint_name": "digits-prod", "require_approval": True, "min_improvement": 0.01}, True),
    ("Promotion", {"endpoint_name": None}, True), ("Promotion", {"endpoint_name": "digits-"}, False),
    ("Promotion", {"endpoint_name": "7digits"}, False), ("Promotion", {"min_improvement": -0.1}, False),
    ("Promotion", {"min_improvement": True}, False), ("Promotion", {"require_approval": "maybe"}, False),
    ("Instances", {"instance_type": "Standard_DS3_v2", "instance_count": 3}, True),
    ("Instances", {"instance_type": None, "instance_count": None}, True),
    ("Instances", {"instance_type": "Standard DS3"}, False), ("Instances", {"instance_count": 0}, False),
    ("Instances", {"instance_count": 101}, False), ("Instances", {"instance_count": 1.5}, False),
]


@pytest.mark.parametrize(("group", "value", "good"), FIELDS, ids=str)
def test_the_form_fields_and_the_declaration_agree(group, value, good):
    from mlrunway.backend.types import Instances
    from mlrunway.deploy.gate import Promotion
    from mlrunway.deploy.smoke import SmokeTest
    from mlrunway.settings import form_field

    kind = {"SmokeTest": SmokeTest, "Promotion": Promotion, "Instances": Instances}[group]
    schema = {"type": "object", "properties": {name: form_field(kind, name) for name in value}}
    parse = {"SmokeTest": lambda v: SmokeTest.parse(v, "deployment"), "Promotion": lambda v: Promotion.parse(**v),
             "Instances": lambda v: Instances.parse("deployment", **v)}[group]
    if good:
        jsonschema.validate(value, schema)
        parse(value)
        return
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(value, schema)
    with pytest.raises(SpecError, match=rf"^(deployment\.)?{next(iter(value))}: "):
        parse(value)
