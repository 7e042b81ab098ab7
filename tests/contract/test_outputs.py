"""Outputs, as the contract (:class:`mlrunway.backend.protocol.Backend`) says every backend keeps them: a job's
``./outputs`` at ``job_outputs``, a named output at ``named_output``, each read back through ``output_folder``."""

from __future__ import annotations

from mlrunway.backend.protocol import Backend
from mlrunway.backend.types import JobStatus
from tests.contract.conftest import Driver, completed

FILES = {"note.txt": "what the job noted", "deep/er.txt": "a file in a folder", "model/weights.txt": "weights"}


def test_job_outputs_and_named_output_are_strings_naming_the_job(backend: Backend, driver: Driver) -> None:
    completed(backend, "ctr-where", driver)
    where, named = backend.job_outputs("ctr-where"), backend.named_output("ctr-where", "model")
    assert isinstance(where, str) and isinstance(named, str) and where != named
    assert "ctr-where" in where and "ctr-where" in named and "model" in named


def test_files_a_job_wrote_to_its_outputs_are_read_back_through_output_folder(backend: Backend,
                                                                              driver: Driver) -> None:
    driver.writing(backend, "ctr-writes", FILES)
    info = backend.jobs.wait("ctr-writes", timeout=driver.wait_s)
    assert info.status is JobStatus.COMPLETED, info.error
    with backend.output_folder(backend.job_outputs("ctr-writes"), "") as folder:
        assert (folder / "note.txt").read_text() == FILES["note.txt"]
        assert (folder / "deep" / "er.txt").read_text() == FILES["deep/er.txt"]
    with backend.output_folder(backend.job_outputs("ctr-writes"), "deep") as folder:
        assert [p.name for p in folder.iterdir()] == ["er.txt"]
    with backend.output_folder(backend.named_output("ctr-writes", "model"), "") as folder:
        assert (folder / "weights.txt").read_text() == FILES["model/weights.txt"]
