"""The model registry, as the contract (:class:`mlrunway.backend.protocol.Models`) says every backend keeps it."""

from __future__ import annotations

import pytest

from mlrunway.backend.protocol import Backend
from mlrunway.errors import NotFound, SpecError
from tests.contract.conftest import Driver


def test_registering_a_folder_gives_versions_one_then_two(backend: Backend, driver: Driver) -> None:
    first = backend.models.register("ctr-model", driver.model_folder(text="first"))
    second = backend.models.register("ctr-model", driver.model_folder(text="second"))
    assert (first.name, first.version, second.version) == ("ctr-model", 1, 2)
    assert backend.models.get("ctr-model", 1).version == 1
    assert backend.models.get("ctr-model", "2").version == 2
    assert backend.models.get("ctr-model").version == 2  # the latest


@pytest.mark.parametrize("version", [None, 1], ids=["latest", "one"])
def test_get_of_a_model_that_does_not_exist_raises_not_found(backend: Backend, version: int | None) -> None:
    with pytest.raises(NotFound, match="ctr-missing"):
        backend.models.get("ctr-missing", version)


def test_get_of_a_version_that_does_not_exist_raises_not_found(backend: Backend, driver: Driver) -> None:
    backend.models.register("ctr-model", driver.model_folder())
    with pytest.raises(NotFound, match="ctr-model"):
        backend.models.get("ctr-model", 9)


def test_list_gives_a_models_versions_in_version_order(backend: Backend, driver: Driver) -> None:
    for _ in range(3):
        backend.models.register("ctr-model", driver.model_folder())
    backend.models.register("ctr-other", driver.model_folder())
    assert [(m.name, m.version) for m in backend.models.list("ctr-model")] == [("ctr-model", v) for v in (1, 2, 3)]
    assert backend.models.list("ctr-none") == []


def test_list_without_a_name_gives_every_version_of_every_model_by_name_then_version(backend: Backend,
                                                                                     driver: Driver) -> None:
    assert backend.models.list() == []
    for name in ("ctr-other", "ctr-model", "ctr-other"):  # registered out of name order
        backend.models.register(name, driver.model_folder())
    backend.models.archive("ctr-other", 1)  # archived versions are listed too, as by name
    assert [(m.name, m.version) for m in backend.models.list()] == [("ctr-model", 1), ("ctr-other", 1),
                                                                    ("ctr-other", 2)]
    assert backend.models.list(None) == backend.models.list("ctr-model") + backend.models.list("ctr-other")


def test_tags_given_at_registration_are_set_and_removed_per_version(backend: Backend, driver: Driver) -> None:
    backend.models.register("ctr-model", driver.model_folder(), tags={"stage": "candidate", "team": "vision"})
    backend.models.register("ctr-model", driver.model_folder(), tags={"team": "vision"})
    updated = backend.models.update_tags("ctr-model", 1, {"stage": None, "gate": "passed"})
    assert updated.tags == {"team": "vision", "gate": "passed"}
    assert backend.models.get("ctr-model", 1).tags == {"team": "vision", "gate": "passed"}
    assert backend.models.get("ctr-model", 2).tags == {"team": "vision"}


def test_an_alias_is_held_by_one_version_and_moves_when_given_again(backend: Backend, driver: Driver) -> None:
    for _ in range(2):
        backend.models.register("ctr-model", driver.model_folder())
    assert backend.models.alias("ctr-model", "production") is None
    backend.models.set_alias("ctr-model", 1, "production")
    holder = backend.models.alias("ctr-model", "production")
    assert holder is not None and (holder.name, holder.version) == ("ctr-model", 1)
    backend.models.set_alias("ctr-model", 2, "production")
    backend.models.set_alias("ctr-model", 1, "previous")
    assert getattr(backend.models.alias("ctr-model", "production"), "version", None) == 2
    assert getattr(backend.models.alias("ctr-model", "previous"), "version", None) == 1
    backend.models.set_alias("ctr-model", 1, "production")  # back again: a rollback
    assert getattr(backend.models.alias("ctr-model", "production"), "version", None) == 1


def test_an_alias_of_a_model_that_does_not_exist_is_none(backend: Backend) -> None:
    assert backend.models.alias("ctr-missing", "production") is None


@pytest.mark.parametrize("bad", ["../escape", "has space", ".hidden"], ids=["path", "space", "dot"])
def test_a_bad_model_name_is_refused_naming_the_field(backend: Backend, driver: Driver, bad: str) -> None:
    with pytest.raises(SpecError, match="model.name"):
        backend.models.register(bad, driver.model_folder())
    with pytest.raises(SpecError, match="model.name"):
        backend.models.get(bad)
    with pytest.raises(SpecError, match="model.name"):
        backend.models.list(bad)


def test_download_of_a_version_gives_its_files(backend: Backend, driver: Driver, tmp_path) -> None:
    backend.models.register("ctr-model", driver.model_folder("one", text="first"))
    backend.models.register("ctr-model", driver.model_folder("two", text="second"))
    first = backend.models.download("ctr-model", 1, tmp_path / "first")
    latest = backend.models.download("ctr-model", None, tmp_path / "latest")
    assert [p.name for p in first.rglob("*") if p.is_file()] == ["weights.txt"]
    assert next(first.rglob("weights.txt")).read_text() == "first"
    assert next(latest.rglob("weights.txt")).read_text() == "second"
    with pytest.raises(NotFound, match="ctr-model"):
        backend.models.download("ctr-model", 9, tmp_path / "none")


def test_an_archived_version_is_kept_and_listed_but_is_no_longer_the_latest(backend: Backend, driver: Driver) -> None:
    for _ in range(2):
        backend.models.register("ctr-model", driver.model_folder())
    archived = backend.models.archive("ctr-model", 2)
    assert (archived.name, archived.version) == ("ctr-model", 2)
    assert backend.models.get("ctr-model").version == 1  # the latest is the newest version not archived
    assert backend.models.get("ctr-model", 2).version == 2  # asked by its number, it is still there
    assert [m.version for m in backend.models.list("ctr-model")] == [1, 2]
    assert backend.models.register("ctr-model", driver.model_folder()).version == 3  # its number is not reused
    with pytest.raises(NotFound, match="ctr-model"):
        backend.models.archive("ctr-model", 9)
