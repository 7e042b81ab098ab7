"""What the hand-written pages name holds in the code: the params a tutorial passes are valid params of the DAG it
triggers, and the workspace layout names only files and folders the local backend writes."""

from __future__ import annotations

import copy
import json
import re

import pytest

from tests.conftest import REPO
from tests.docs._hook import reference

DOCS = REPO / "docs"


def _dag(dag_id: str):
    return next(dag for dag in reference.dags() if dag.dag_id == dag_id)


def _validated(dag_id: str, conf: dict) -> dict:
    """The DAG's params with ``conf`` over them, validated as a trigger's are (an unknown or bad one raises)."""
    params = copy.deepcopy(_dag(dag_id).params)
    assert set(conf) <= set(params), f"{sorted(set(conf) - set(params))} are not params of {dag_id}"
    for name, value in conf.items():
        params[name] = value
    return params.validate()


def test_every_demo_conf_a_page_passes_is_valid_for_the_demo_dag():
    confs = [json.loads(conf) for page in DOCS.rglob("*.md") for conf in re.findall(r"DEMO_CONF='(\{.*?\})'",
                                                                                       page.read_text())]
    assert len(confs) >= 2
    for conf in confs:
        assert _validated("train_sweep_deploy", conf)["epochs"] == conf["epochs"]


def test_the_tutorials_rollback_conf_is_valid_for_deploy_model():
    text = (DOCS / "tutorials" / "production-endpoint.md").read_text()
    conf = json.loads(re.search(r'`(\{"endpoint_name".*?"rollback_to".*?\})`', text).group(1))
    assert _validated("deploy_model", conf)["rollback_to"] == "previous"


def test_a_conf_with_an_unknown_or_bad_value_is_refused_by_that_check():
    from airflow.sdk.exceptions import ParamValidationError

    with pytest.raises(ParamValidationError):
        _validated("train_sweep_deploy", {"epochs": 0})
    with pytest.raises(AssertionError, match="are not params"):
        _validated("train_sweep_deploy", {"epoch": 3})


def test_the_workspace_layout_names_what_the_local_backend_writes():
    page = (DOCS / "explanation" / "local-backend.md").read_text()
    tree = re.search(r"```\n\.workspace/\n(.*?)```", page, re.S).group(1)
    entries = [line.split()[0] for line in tree.splitlines() if re.match(r"^  \S", line)]
    names = {part for entry in entries for part in entry.strip("/").split("/") if not part.startswith("<")}
    names |= set(re.findall(r"\b[\w-]+\.(?:json|jsonl|db)\b", tree))  # the files each folder holds
    code = "\n".join(p.read_text() for p in (REPO / "mlrunway").rglob("*.py"))
    missing = sorted(name for name in names if f'"{name}"' not in code and f"'{name}'" not in code
                     and f"/ {name!r}" not in code)
    assert len(names) >= 12, names
    assert not missing, f"the workspace layout names what no module of mlrunway writes: {missing}"
