"""Outside CI (``make test-long``): the whole DAG on the local backend with each of the samplers the form offers
beside random (issue 28, 2): a Sobol sequence and bayesian (uniform ranges, no early termination), end to end."""

from __future__ import annotations

import pytest

from mlrunway.local.backend import LocalBackend
from tests.e2e.test_dag_local import SMALL, assert_nothing_left, run_dag

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.long]


@pytest.mark.parametrize("sampling", ["sobol", "bayesian"])
def test_the_dag_runs_end_to_end_with(sampling, airflow_db, digits, tmp_path, monkeypatch):
    run, results, states = run_dag({**SMALL, "data_dir": str(digits), "sampling": sampling}, tmp_path / "ws",
                                   monkeypatch)
    assert str(run.state) == "success", states
    backend = LocalBackend.at(tmp_path / "ws")
    result = backend.jobs.sweep_result(results["sweep"]["sweep_name"])
    assert len(result.trials) == SMALL["max_trials"] and result.best_trial == results["pick_best"]["trial"]
    rates = {t.params["learning_rate"] for t in result.trials}
    assert len(rates) == SMALL["max_trials"] and all(0.001 <= r <= 0.1 for r in rates)
    if sampling == "bayesian":
        assert results["sweep"]["stopped_early"] == []  # no policy with bayesian
        assert (tmp_path / "ws" / "optuna.db").exists()
    assert results["export_onnx"]["parity"]["passed"]
    assert_nothing_left(backend)
