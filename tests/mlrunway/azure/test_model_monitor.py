"""The workspace's model monitor, where an azure_ml connection asks for one: azure-ai-ml's MonitorSchedule on the
production deployment, with the local monitor's metrics and thresholds, through the real MLClient against the fake
service, which checks each request against the REST spec (2023-06-01-preview)."""

from __future__ import annotations

import pytest

from mlrunway.azure.model_monitor import ModelMonitors, MonitorSettings
from mlrunway.backend.capture import DataCollector
from mlrunway.backend.types import DeploymentSettings
from mlrunway.errors import SpecError
from mlrunway.monitoring import monitor
from mlrunway.monitoring.drift import DriftSettings
from tests.conftest import REPO
from tests.mlrunway.azure.fake_azureml import WS_PATH

COLLECTOR = DataCollector.parse({"collections": {"model_inputs": True, "model_outputs": True}})


@pytest.mark.parametrize(("value", "field"), [
    ("{not json", "azure_ml connection.model_monitor"),
    ({"runtime_version": "3.3"}, "azure_ml connection.model_monitor.runtime_version"),
    ({"cron": "daily"}, "azure_ml connection.model_monitor.cron"),
    ({"reference_data": "digits-reference"}, "azure_ml connection.model_monitor.reference_data"),
    ({"ml_task": "ranking"}, "azure_ml connection.model_monitor.ml_task"),
    ({"schedule": "0 3 * * *"}, "azure_ml connection.model_monitor.schedule"),
])
def test_bad_monitor_settings_name_their_field(value, field):
    with pytest.raises(SpecError, match=f"^{field}"):
        MonitorSettings.parse(value)


def test_the_model_monitor_watches_the_serving_deployment_with_the_same_thresholds(fake, azure, tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "model.onnx").write_bytes(b"onnx")
    azure.models.register("digits", str(tmp_path / "model"))
    azure.endpoints.create_or_update("digits-prod")
    azure.endpoints.create_or_update_deployment("digits-prod", "blue", DeploymentSettings(
        model="digits:1", code_dir=str(REPO / "training"), data_collector=COLLECTOR))
    azure.endpoints.set_traffic("digits-prod", {"blue": 100})
    drift = DriftSettings.parse({"metric_thresholds": {"categorical": {"pearsons_chi_squared_test": 0.02}}})
    assert monitor.hand_over(azure, "digits-prod", drift) is None  # the connection asked for no monitor

    azure.monitors = ModelMonitors(azure.client, MonitorSettings.parse(
        '{"cron": "0 4 * * *", "reference_data": "azureml:digits-reference:1", "emails": ["ml@example.com"]}'))
    assert monitor.hand_over(azure, "digits-prod", drift) == "digits-prod-monitor"
    assert monitor.hand_over(azure, "digits-prod", drift) == "digits-prod-monitor"  # updated, not made twice
    assert not fake.refused
    puts = fake.sent("PUT", f"{WS_PATH}/schedules/digits-prod-monitor$")
    assert len(puts) == 2
    sent = puts[-1].json()["properties"]
    assert sent["trigger"]["expression"] == "0 4 * * *"
    definition = sent["action"]["monitorDefinition"]
    assert definition["monitoringTarget"]["deploymentId"].endswith("/onlineEndpoints/digits-prod/deployments/blue")
    assert definition["alertNotificationSetting"]["emailNotificationSetting"]["emails"] == ["ml@example.com"]
    signals = definition["signals"]
    assert set(signals) == {"data_drift", "prediction_drift"}
    thresholds = {(t["dataType"].lower(), t["metric"].lower(), t["threshold"]["value"])
                  for t in signals["data_drift"]["metricThresholds"]}  # the SDK sends them camelCased
    assert thresholds == {("numerical", "normalizedwassersteindistance", 0.1),
                          ("categorical", "pearsonschisquaredtest", 0.02)}
    assert signals["data_drift"]["referenceData"]["uri"].endswith("/data/digits-reference/versions/1")
    assert "model_inputs" in signals["data_drift"]["productionData"]["uri"]  # the deployment's own collection
    assert azure.client.schedules.get("digits-prod-monitor").trigger.expression == "0 4 * * *"
