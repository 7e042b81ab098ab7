"""The generated reference has nothing to generate it from where a description is missing: every Param of every DAG,
every setting of every group, every connection field and every argument of the operators and the builder carries
one, and every argument a docstring documents is a real one."""

from __future__ import annotations

import inspect
from dataclasses import fields

import pytest

from mlrunway.lifecycle import lifecycle
from mlrunway.operators.deploy_blue import FLAT_KEYS
from mlrunway.settings import form_field
from tests.docs._hook import reference


def test_every_param_of_every_dag_has_a_description():
    missing = [f"{dag.dag_id}.{name}" for dag in reference.dags() for name, param in dag.params.items()
               if not (param.description or "").strip()]
    assert not missing, f"Params without a description (Param(..., description=...)): {missing}"
    assert {"train_sweep_deploy", "demand_forecast", "deploy_model"} <= {dag.dag_id for dag in reference.dags()}


def test_every_setting_of_every_group_has_a_description():
    groups = reference.settings_groups()
    missing = [f"{kind.__module__}.{kind.__name__}.{f.name}" for kind in groups for f in fields(kind)
               if not form_field(kind, f.name).get("description", "").strip()]
    assert not missing, f"settings without a description (setting(..., description=...)): {missing}"
    names = {kind.__name__ for kind in groups}
    assert {"RolloutPolicy", "Evaluation", "SmokeTest", "ExportSettings", "Drift", "RetentionPolicy"} <= names


def test_every_connection_field_has_a_label_and_a_description():
    kinds = reference.connection_types()
    missing = [f"{kind['connection-type']}.{name}" for kind in kinds for name, spec in kind["conn-fields"].items()
               if not spec.get("label") or not spec.get("description", "").strip()]
    assert not missing, f"connection fields without a description (mlrunway/airflow/provider.py): {missing}"
    assert {kind["connection-type"] for kind in kinds} == {"mlrunway_local", "azure_ml", "mlrunway_ray"}


@pytest.mark.parametrize("operator", reference.operators(), ids=lambda operator: operator.__name__)
def test_every_argument_of_an_operator_is_documented_and_every_documented_one_is_real(operator):
    arguments = reference.operator_arguments(operator)
    assert "backend_conn_id" in arguments  # the bases' arguments are read too
    missing = [name for name, text in arguments.items() if not text]
    assert not missing, f"{operator.__name__} arguments without ':param <name>:' in its docstring: {missing}"
    deprecated = set(FLAT_KEYS) if operator.__name__ == "DeployBlueOperator" else set()
    documented = {line.split(":")[1].split()[-1] for line in (inspect.getdoc(operator) or "").splitlines()
                  if line.startswith(":param ")}
    unknown = documented - set(arguments) - deprecated
    assert not unknown, f"{operator.__name__} documents arguments it does not take: {sorted(unknown)}"


def test_every_argument_of_the_builder_is_documented():
    missing = [name for name, text in reference.documented_arguments(lifecycle).items() if not text]
    assert not missing, f"lifecycle() arguments without ':param <name>:': {missing}"


def test_a_missing_description_is_found_not_assumed():
    """The reader the tests above rely on sees a gap: an argument no docstring documents reads as None."""

    def documented(*, a: int, b: int) -> None:
        """:param a: the first."""

    assert reference.documented_arguments(documented) == {"a": "the first.", "b": None}


def test_a_generated_cell_shows_angle_brackets_as_text_and_keeps_code_spans_whole():
    assert reference._cell('{"<VM size>": <price>} | `x<y>`') == '{"&lt;VM size&gt;": &lt;price&gt;} \\| `x<y>`'
