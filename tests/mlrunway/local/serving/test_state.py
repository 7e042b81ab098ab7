from __future__ import annotations

import pytest

from mlrunway.check import endpoint_name as check_endpoint_name
from mlrunway.errors import SpecError
from mlrunway.local.serving.state import DeploymentState, check_traffic


@pytest.mark.parametrize("name", ["abc", "digits-ep-1", "a" * 32, "Blue2"])
def test_valid_endpoint_names(name):
    assert check_endpoint_name(name) == name


@pytest.mark.parametrize("name", ["ab", "a" * 33, "1abc", "abc-", "ab_c", "ab.c", "-abc", ""])
def test_endpoint_names_azure_would_reject(name):
    with pytest.raises(SpecError, match="endpoint.name: .* is not a valid endpoint name; use 3 to 32 letters"):
        check_endpoint_name(name)


DEPLOYMENTS = {n: DeploymentState(name=n, version=1, model_dir="m", code_dir="c", scoring_script="score.py")
               for n in ("blue", "green")}


@pytest.mark.parametrize(
    ("traffic", "mirror", "message"),
    [
        pytest.param({"blue": 60, "green": 30}, {}, "endpoint.traffic: weights sum to 90; make them sum to 100", id="sum-90"),
        pytest.param({"red": 100}, {}, "endpoint.traffic.red: names no deployment", id="unknown"),
        pytest.param({"blue": 101, "green": -1}, {}, "not an integer percentage", id="out-of-range"),
        pytest.param({"blue": 100}, {"green": 60}, "mirror at most 50% to one deployment", id="mirror-60"),
        pytest.param({"blue": 50, "green": 50}, {"green": 10}, "targets a deployment that has live traffic", id="mirror-live"),
    ],
)
def test_bad_traffic_is_rejected(traffic, mirror, message):
    with pytest.raises(SpecError, match=message):
        check_traffic(traffic, mirror, DEPLOYMENTS)


@pytest.mark.parametrize("traffic", [{}, {"blue": 0, "green": 0}, {"blue": 100}, {"blue": 30, "green": 70}])
def test_traffic_summing_to_0_or_100_is_accepted(traffic):
    check_traffic(traffic, {}, DEPLOYMENTS)
