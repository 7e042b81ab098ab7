"""Every status the REST spec (mfe.json, ``JobStatus`` and ``DeploymentProvisioningState``) allows, read the one
way the backend reads it: one table each, one case per value."""

from __future__ import annotations

import logging

import pytest

from mlrunway.azure.jobs import job_status
from mlrunway.backend.types import JobStatus, ProvisioningState

# The spec's JobStatus values; terminal as in the SDK's RunHistoryConstants.TERMINAL_STATUSES, but for
# NotResponding, which the spec says may come back ("a run can go from NotResponding to any of the previous states").
JOB_STATUSES = [
    ("NotStarted", JobStatus.QUEUED), ("Starting", JobStatus.QUEUED), ("Provisioning", JobStatus.QUEUED),
    ("Preparing", JobStatus.QUEUED), ("Queued", JobStatus.QUEUED), ("Running", JobStatus.RUNNING),
    ("Finalizing", JobStatus.RUNNING), ("CancelRequested", JobStatus.RUNNING), ("Unknown", JobStatus.RUNNING),
    ("Completed", JobStatus.COMPLETED), ("Failed", JobStatus.FAILED), ("Canceled", JobStatus.CANCELED),
    ("NotResponding", JobStatus.RUNNING), ("Paused", JobStatus.FAILED),
]


@pytest.mark.parametrize(("azure", "ours"), JOB_STATUSES, ids=[a for a, _ in JOB_STATUSES])
def test_every_spec_job_status_has_its_meaning(azure, ours):
    assert job_status(azure) is ours


def test_the_sdks_terminal_job_statuses_are_terminal_here_but_not_responding():
    from azure.ai.ml.operations._run_history_constants import RunHistoryConstants

    sdk = {str(s) for s in RunHistoryConstants.TERMINAL_STATUSES}
    assert {a for a, ours in JOB_STATUSES if ours.is_terminal()} == sdk - {"NotResponding"}


def test_an_unknown_job_status_is_logged_and_still_running(caplog):
    with caplog.at_level(logging.WARNING):
        assert job_status("Hibernating") is JobStatus.RUNNING
    assert "Unknown Azure ML job status 'Hibernating'" in caplog.text


@pytest.mark.parametrize(("value", "state"), [
    ("Creating", ProvisioningState.CREATING), ("Updating", ProvisioningState.UPDATING),
    ("Scaling", ProvisioningState.SCALING), ("Deleting", ProvisioningState.DELETING),
    ("Succeeded", ProvisioningState.SUCCEEDED), ("Failed", ProvisioningState.FAILED),
    ("Canceled", ProvisioningState.CANCELED), ("succeeded", ProvisioningState.SUCCEEDED),
])
def test_every_spec_provisioning_state_parses(value, state):
    assert ProvisioningState.parse(value) is state
    assert state.is_terminal() == (state in (ProvisioningState.SUCCEEDED, ProvisioningState.FAILED,
                                             ProvisioningState.CANCELED))


def test_an_unknown_provisioning_state_is_logged_and_in_progress(caplog):
    with caplog.at_level(logging.WARNING):
        assert ProvisioningState.parse("Migrating") is ProvisioningState.UPDATING
        assert ProvisioningState.parse(None) is ProvisioningState.UPDATING
    assert "Unknown provisioning state 'Migrating'" in caplog.text
