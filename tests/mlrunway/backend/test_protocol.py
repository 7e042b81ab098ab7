from __future__ import annotations

import re

import pytest

from mlrunway.backend.fake import FakeBackend
from mlrunway.backend.protocol import (
    REQUIRED,
    Artifacts,
    Endpoints,
    Jobs,
    Leftovers,
    Metered,
    MeteredEndpoints,
    Models,
    Rollout,
    RunMetrics,
    Shadow,
    Studio,
    rollout_of,
)
from mlrunway.errors import NotSupportedOnBackend
from tests.conftest import REPO


def test_a_backend_writes_the_abstract_core_and_the_architecture_page_says_how_much():
    assert REQUIRED == {"jobs": 10, "models": 6, "endpoints": 11}
    conveniences = {"wait", "pause", "recover", "validate"}, {"set_alias", "alias"}, {"create_or_update",
                                                                                       "create_or_update_deployment"}
    for resource, written_once in zip((Jobs, Models, Endpoints), conveniences, strict=True):
        assert written_once <= set(vars(resource)) and not written_once & resource.__abstractmethods__
    page = (REPO / "docs" / "explanation" / "architecture.md").read_text()
    said = re.search(r"(\d+) methods a backend writes \(`jobs`: (\d+),\s+`models`: (\d+),\s+`endpoints`: (\d+)\)", page)
    assert said and [int(n) for n in said.groups()] == [sum(REQUIRED.values()), *REQUIRED.values()]


def test_what_only_some_backends_do_is_a_capability_each_has_or_not():
    from mlrunway.azure.backend import AzureBackend
    from mlrunway.azure.endpoints import AzureEndpoints
    from mlrunway.azure.jobs import AzureJobs
    from mlrunway.local.backend import LocalBackend
    from mlrunway.local.jobs import LocalJobs
    from mlrunway.local.serving.endpoints import LocalEndpoints

    # Azure ML: a studio and a rollout, no run artifacts; local: artifacts, a rollout and processes; the fake: rollout.
    assert issubclass(AzureBackend, Studio) and issubclass(AzureEndpoints, Rollout)
    assert not issubclass(AzureJobs, Artifacts)
    assert issubclass(LocalJobs, Artifacts) and issubclass(LocalEndpoints, Rollout)
    assert issubclass(LocalBackend, Leftovers) and not issubclass(LocalBackend, Studio)
    assert issubclass(LocalEndpoints, Shadow) and not issubclass(AzureEndpoints, Shadow)  # Azure discards the answers
    fake = FakeBackend()
    assert isinstance(fake.endpoints, Rollout) and not isinstance(fake.jobs, Artifacts) and not isinstance(fake, Studio)
    assert not isinstance(fake.endpoints, Shadow)
    assert rollout_of(fake) is fake.endpoints
    # What a run costs: every shipped backend's jobs say what they ran on; the fake's endpoints do not say theirs.
    assert issubclass(AzureJobs, Metered) and issubclass(LocalJobs, Metered) and isinstance(fake.jobs, Metered)
    assert issubclass(AzureEndpoints, MeteredEndpoints) and issubclass(LocalEndpoints, MeteredEndpoints)
    assert not isinstance(fake.endpoints, MeteredEndpoints) and not isinstance(fake.jobs, RunMetrics)
    assert issubclass(AzureJobs, RunMetrics) and issubclass(LocalJobs, RunMetrics)


def test_a_backend_without_rollout_is_refused_by_name(monkeypatch):
    fake = FakeBackend()
    monkeypatch.setattr(fake, "endpoints", object())
    with pytest.raises(NotSupportedOnBackend, match="the fake backend has no staged rollout: its endpoints report no "
                                                    "per-deployment metrics"):
        rollout_of(fake)


def test_aliases_by_default_are_tags_given_before_they_are_taken():
    fake = FakeBackend()
    for _ in range(3):
        fake.models.register("m", REPO / "training" / "score.py")
    fake.models.set_alias("m", 1, "production")
    fake.models.set_alias("m", 2, "production")
    assert "mlrunway.alias.production" not in fake.models.get("m", 1).tags  # the move took the old holder's tag
    # A move cut short between its two writes leaves two holders: the newer one holds the alias.
    fake.models.update_tags("m", 3, {"mlrunway.alias.production": "9999-01-01T00:00:00+00:00"})
    assert fake.models.alias("m", "production").version == 3
