"""Names checked on every entry point of the local and fake backends (the Azure one: tests/mlrunway/azure)."""

from __future__ import annotations

from mlrunway.backend.fake import FakeBackend
from mlrunway.local.backend import LocalBackend
from tests.mlrunway.backend.names import entry_points, refusals


def test_every_entry_point_of_the_local_backend_refuses_a_name_that_is_not_one(tmp_path):
    other = tmp_path / "other" / "jobs" / "victim"
    other.mkdir(parents=True)
    (other / "status.json").write_text('{"status": "Running"}')
    backend = LocalBackend.at(tmp_path / "ws" / "a" / "b")
    assert len(list(entry_points(backend.jobs))) >= 10 and len(list(entry_points(backend.endpoints))) >= 15
    assert refusals(backend, tmp_path / "out") == {}
    assert (other / "status.json").read_text() == '{"status": "Running"}'  # the other workspace's job untouched


def test_every_entry_point_of_the_fake_backend_refuses_a_name_that_is_not_one(tmp_path):
    assert refusals(FakeBackend(), tmp_path / "out") == {}
