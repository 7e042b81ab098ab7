"""Names checked on every entry point of the Azure backend (issue 60, 3): a name that is not one never reaches a
request's URL (the fake would answer a path that climbs out of the workspace's routes)."""

from __future__ import annotations

from tests.mlrunway.backend.names import refusals


def test_every_entry_point_of_the_azure_backend_refuses_a_name_that_is_not_one(azure, fake, tmp_path):
    sent = len(fake.requests)
    assert refusals(azure, tmp_path / "out") == {}
    assert len(fake.requests) == sent  # every one refused before any request
