"""What a run's jobs cost on Azure ML, through the real MLClient against the fake service: each job's compute (its
cluster's VM size and tier, or a serverless job's instance type and job tier), its nodes, and its run's start and
end from Run History; priced by the connection's rate card, or by the Retail Prices API's documented answers."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from pathlib import Path

import pytest

from mlrunway.azure.backend import AzureBackend
from mlrunway.backend.naming import RunNames
from mlrunway.backend.rates import RateCard
from mlrunway.backend.types import DeploymentSettings, JobStatus
from mlrunway.errors import SpecError
from mlrunway.ledger.cost import cost_of_run, job_cost, rates_for, serving_cost
from mlrunway.report import log_costs
from tests.conftest import REPO
from tests.mlrunway.azure.conftest import CONNECTION
from tests.mlrunway.azure.fake_azureml import REGION, FakeCredential, Trial
from training.tutorial import train_job, tutorial_sweep

CODE = REPO / "training"
NAMES = RunNames(prefix="mlr", run_key="c0ffee01")


def retail_item(size: str, meter: str, price: float, *, product: str = "Virtual Machines NCSv3 Series",
                kind: str = "Consumption", primary: bool = True, currency: str = "USD") -> dict:
    """An item as the Retail Prices API documents it (learn.microsoft.com: Azure Retail Prices REST API)."""
    return {"currencyCode": currency, "tierMinimumUnits": 0.0, "retailPrice": price, "unitPrice": price,
            "armRegionName": REGION, "location": "EU West", "effectiveStartDate": "2026-01-01T00:00:00Z",
            "meterId": f"meter-{size}-{meter}", "meterName": meter, "productId": "DZH318Z0BQ4W",
            "skuId": "DZH318Z0BQ4W/00TG", "productName": product, "skuName": meter, "serviceName": "Virtual Machines",
            "serviceId": "DZH313Z7MMC8", "serviceFamily": "Compute", "unitOfMeasure": "1 Hour", "type": kind,
            "isPrimaryMeterRegion": primary, "armSkuName": size}


def azure_with(fake, tmp_path: Path, **fields) -> AzureBackend:
    backend = AzureBackend.from_connection({**CONNECTION, "cache_dir": str(tmp_path / "cache"),
                                            "reports_folder": str(tmp_path / "reports"), **fields},
                                           credential=FakeCredential(), transport=fake, polling_interval=0,
                                           retry_backoff_factor=0.0)  # the fake answers at once: retry without waiting
    backend.jobs.poll_s = 0.0
    return backend


def test_a_cluster_job_and_its_sweeps_trials_cost_their_hours_times_nodes_at_the_cards_rate(fake, tmp_path,
                                                                                            small_digits):
    azure = azure_with(fake, tmp_path, rates='{"currency": "USD", "per_hour": {"Standard_NC6s_v3": 3.06}}')
    fake.run_seconds[NAMES.train_job] = 3600.0
    job = train_job(str(CODE), str(small_digits), num_epochs=2)
    azure.jobs.submit(NAMES.train_job, job)
    assert azure.jobs.wait(NAMES.train_job, poll_s=0).status is JobStatus.COMPLETED
    fake.sweep_trials[NAMES.sweep] = [Trial({"learning_rate": 0.01, "momentum": 0.9}, [0.5, 0.6]),
                                      Trial({"learning_rate": 0.05, "momentum": 0.8}, [0.6, 0.9])]
    fake.run_seconds.update({f"{NAMES.sweep}_0": 1800.0, f"{NAMES.sweep}_1": 900.0})
    azure.jobs.submit_sweep(NAMES.sweep, tutorial_sweep(job, max_total_trials=2, max_concurrent_trials=2))
    assert azure.jobs.wait(NAMES.sweep, poll_s=0).status is JobStatus.COMPLETED

    usage = azure.jobs.usage(NAMES.train_job)  # ARM's upper-cased vmSize, spelled as the region lists it
    assert (usage.size, usage.tier, usage.instances) == ("Standard_NC6s_v3", "dedicated", 1)
    assert usage.ended - usage.started == pytest.approx(3600.0)  # Run History's startTimeUtc and endTimeUtc
    cost = cost_of_run(azure, NAMES)
    assert [c.job for c in cost.jobs["trials"]] == [f"{NAMES.sweep}_0", f"{NAMES.sweep}_1"]
    assert [c.amount for c in cost.jobs["trials"]] == pytest.approx([1.53, 0.765])
    assert cost.jobs["train"][0].amount == pytest.approx(3.06) and cost.amount == pytest.approx(5.355)
    assert cost.text() == "5.355 USD for 1.75 node-hours in 3 jobs (an estimate)"
    # The run history reads that timed them: the job's details, the sweep's children.
    assert fake.sent("GET", rf"/history/v1\.0/.*/runs/{NAMES.train_job}/details$")
    # As the saved report does: each job's cost on its MLflow run, the trials' total on the sweep's (log-batch).
    log_costs(azure.jobs, NAMES.sweep, cost.to_dict())
    assert fake.runs[NAMES.train_job]["metrics"] == {"cost": pytest.approx(3.06), "compute_hours": 1.0}
    assert fake.runs[NAMES.sweep]["metrics"] == {"cost": pytest.approx(2.295), "compute_hours": 0.75}
    assert fake.runs[f"{NAMES.sweep}_1"]["metrics"]["cost"] == pytest.approx(0.765)


def test_a_serverless_spot_job_sends_its_job_tier_and_is_priced_at_the_spot_meter(fake, tmp_path, small_digits):
    card = '{"per_hour": {"Standard_NC6s_v3": 3.06, "Standard_NC6s_v3:spot": 0.612}}'
    azure = azure_with(fake, tmp_path, compute="", job_instance_type="Standard_NC6s_v3", rates=card)
    job = train_job(str(CODE), str(small_digits), num_epochs=2)
    spot = replace(job, queue_settings={"job_tier": "Spot"})
    azure.jobs.submit("mlr-spot-train", spot)
    assert azure.jobs.wait("mlr-spot-train", poll_s=0).status is JobStatus.COMPLETED
    body = fake.sent("PUT", r"/jobs/mlr-spot-train$")[0].json()["properties"]  # held to the REST spec by the fake
    assert body["queueSettings"] == {"jobTier": "Spot"} and "computeId" not in body
    assert body["resources"]["instanceType"] == "Standard_NC6s_v3"
    usage = azure.jobs.usage("mlr-spot-train")
    assert (usage.size, usage.tier) == ("Standard_NC6s_v3", "spot")
    assert job_cost("mlr-spot-train", usage, azure.rates_for([usage.size])).amount == pytest.approx(0.306)


def test_queue_settings_on_a_cluster_are_refused_before_any_job(fake, tmp_path, small_digits):
    azure = azure_with(fake, tmp_path)
    job = train_job(str(CODE), str(small_digits), num_epochs=2)
    spot = replace(job, queue_settings={"job_tier": "spot"})
    with pytest.raises(SpecError, match=r"^command_job.queue_settings: applies to serverless jobs, and this job runs "
                                        r"on compute cluster 'gpu-cluster'.*; leave compute empty"):
        azure.jobs.validate(spot)
    assert not fake.sent("PUT", r"/jobs/")


def test_a_size_the_card_lacks_is_priced_from_the_retail_prices_api_and_cached_in_the_reports_folder(fake, tmp_path):
    fake.retail_items = [
        retail_item("Standard_NC6s_v3", "NC6s v3", 3.06),
        retail_item("Standard_NC6s_v3", "NC6s v3", 3.672, product="Virtual Machines NCSv3 Series Windows"),
        retail_item("Standard_NC6s_v3", "NC6s v3 Spot", 0.6120),
        retail_item("Standard_NC6s_v3", "NC6s v3 Low Priority", 0.612),
        retail_item("Standard_NC6s_v3", "NC6s v3", 1.2, kind="DevTestConsumption"),
        retail_item("Standard_NC6s_v3", "NC6s v3", 9000.0, kind="Reservation"),
        retail_item("Standard_NC6s_v3", "NC6s v3", 2.85, currency="EUR"),
        retail_item("Standard_DS3_v2", "DS3 v2", 0.293),
    ]
    azure = azure_with(fake, tmp_path, rates={"retail_prices": True, "per_hour": {"Standard_DS3_v2": 0.25}})
    card = azure.rates_for(["STANDARD_NC6S_V3", "STANDARD_DS3_V2"])
    assert card.per_hour == {"standard_ds3_v2": 0.25,  # the card's own rate wins; only what it lacks is read
                             "standard_nc6s_v3": 3.06, "standard_nc6s_v3:spot": 0.612,
                             "standard_nc6s_v3:low_priority": 0.612}
    reads = fake.sent("GET", r"/api/retail/prices$")
    assert len(reads) == 2  # two pages of the Linux meters, NextPageLink followed
    assert "armRegionName eq 'westeurope'" in reads[0].query["$filter"]
    cached = tmp_path / "reports" / "rates" / f"retail-{REGION}-USD.json"
    assert cached.is_file()
    again = azure_with(fake, tmp_path, rates={"retail_prices": True}).rates_for(["STANDARD_NC6S_V3"])
    assert again.per_hour["standard_nc6s_v3"] == 3.06 and len(fake.sent("GET", r"/api/retail/prices$")) == 2


def test_without_retail_prices_a_size_the_card_lacks_is_rate_unknown_never_guessed(fake, tmp_path):
    azure = azure_with(fake, tmp_path, rates={"per_hour": {"Standard_DS3_v2": 0.293}})
    assert azure.rates_for(["STANDARD_NC6S_V3"]).per_hour == {"standard_ds3_v2": 0.293}
    assert not fake.sent("GET", r"/api/retail/prices$")
    assert rates_for(object(), []) == RateCard()  # a backend with no card: every rate unknown


@pytest.mark.parametrize(("rates", "message"), [
    ('{"per_hour": {"Standard_NC6s_v3": -3}}', r"^rates.per_hour.Standard_NC6s_v3: -3 is not a price of at least 0"),
    ('{"per_hour": {"Standard_NC6s_v3": "cheap"}}', r"^rates.per_hour.Standard_NC6s_v3: 'cheap' is not a price"),
    ('{"currency": "USD", "per_hour": {"Standard_NC6s_v3": "2.80 EUR"}}',
     r"^rates.per_hour.Standard_NC6s_v3: is in EUR and the card in USD: a currency mix; give every rate in USD"),
    ('{"currency": "dollars"}', r"^rates.currency: 'dollars' is not a currency code; use three capital letters"),
    ('{"per_hour": {"NC6 s v3": 1}}', r"^rates.per_hour.NC6 s v3: is not a VM size; name a VM size as Azure does"),
    ('{"per_hour": 3}', r"^rates.per_hour: 3 is not a rate card"),
    ('{"rate": 3}', r"^rates.rate: is not a rate card setting; use currency, per_hour, local_rate, retail_prices"),
    ("{not json", r"^rates: is not JSON"),
])
def test_a_bad_rate_card_is_refused_when_the_connection_is_read_naming_the_field_and_the_fix(fake, tmp_path, rates,
                                                                                              message):
    with pytest.raises(SpecError, match=message):
        azure_with(fake, tmp_path, rates=rates)
    assert not fake.sent("PUT", r"/jobs/")


def test_a_deployment_costs_its_serving_hours_times_its_instances_since_it_was_created(fake, tmp_path):
    """A deployment of 2 instances of Standard_F2s_v2 (the connection's), made at the fake's systemData.createdAt:
    an hour later it has served 2 node-hours."""
    azure = azure_with(fake, tmp_path, rates={"per_hour": {"Standard_F2s_v2": 0.25}})
    azure.endpoints.provision_poll_s = 0.0
    model = tmp_path / "model"
    model.mkdir()
    (model / "signature.json").write_text('{"file": "model.onnx", "inputs": []}')
    azure.models.register("digits", str(model))
    azure.endpoints.create_or_update("digits-cost")
    azure.endpoints.create_or_update_deployment(
        "digits-cost", "blue", DeploymentSettings(model="digits:1", code_dir=str(REPO / "training")))
    created = datetime.fromisoformat("2026-11-22T10:00:00+00:00").timestamp()
    serving = serving_cost(azure, "digits-cost", now=created + 3600)
    (blue,) = serving.jobs["serving"]
    assert (blue.job, blue.compute, blue.instances, blue.hours) == ("digits-cost/blue", "Standard_F2s_v2", 2, 2.0)
    assert blue.running and blue.amount == pytest.approx(0.5)
    assert serving.text() == "0.5 USD for 2 node-hours in 1 deployment (an estimate)"
    assert serving_cost(azure, "no-such-endpoint") is None
