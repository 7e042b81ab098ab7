from __future__ import annotations

import pytest

from mlrunway.errors import SpecError


def test_the_package_exports_every_name_it_lists_without_importing_them_all_up_front():
    import subprocess
    import sys

    import mlrunway.backend as package

    assert sorted(package.__all__) == sorted(package._HOME)
    assert all(getattr(package, name) is not None for name in package.__all__)
    # A job's supervisor, started before every job's script, imports none of the backend, the specs or MLflow.
    loaded = subprocess.run([sys.executable, "-c", "import sys, mlrunway.local.supervisor; print(sorted(sys.modules))"],
                            capture_output=True, text=True, check=True).stdout.split("'")
    assert "mlrunway.local.supervisor" in loaded
    assert not [m for m in loaded if m.startswith(("mlrunway.backend", "mlrunway.specs", "mlflow", "logging", "psutil",
                                                   "dataclasses"))]


def test_the_supervisor_knows_the_terminal_statuses_without_importing_them():
    from mlrunway.backend.types import JobStatus
    from mlrunway.local.supervisor import ROLE_TAG, TERMINAL
    from mlrunway.specs.job import ROLE_TAG as SPEC_ROLE_TAG

    assert TERMINAL == {s.value for s in JobStatus if s.is_terminal()}
    assert ROLE_TAG == SPEC_ROLE_TAG  # the role an export's or a reference job's process is named by
    from mlrunway.local.records import JOB_STATES

    assert set(JOB_STATES) == {s.value for s in JobStatus}  # what a status.json may hold, checked without them


def test_backends_are_found_by_connection_type_in_the_entry_point_group():
    from importlib.metadata import distribution

    from mlrunway.backend.registry import GROUP, available

    assert {"mlrunway_local", "azure_ml", "mlrunway_fake"} <= set(available())
    # mlrunway itself registers the three real ones; the fake comes from the tests' own distribution only, so a
    # production install refuses an mlrunway_fake connection.
    own = {p.name for p in distribution("mlrunway").entry_points if p.group == GROUP}
    assert own == {"mlrunway_local", "azure_ml", "mlrunway_ray"}
    assert {p.name for p in distribution("mlrunway-test-backends").entry_points if p.group == GROUP} == {"mlrunway_fake"}


ACME = """
from mlrunway.backend.fake import FakeBackend


class AcmeBackend(FakeBackend):
    kind = "acme"

    @classmethod
    def from_connection(cls, fields, secret=None):
        backend = cls()
        backend.region = fields["region"]
        return backend
"""


def test_a_backend_from_another_package_is_reached_by_its_connection_type(tmp_path, monkeypatch):
    """A third backend ships in its own distribution: a class and one entry point, nothing in mlrunway."""
    from mlrunway.backend import registry

    (tmp_path / "acme_backend.py").write_text(ACME)
    info = tmp_path / "acme_backend-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-backend\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[mlrunway.backends]\nacme = acme_backend:AcmeBackend\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry.available.cache_clear()
    try:
        backend = registry.connect("acme", {"region": "north"})
        assert (backend.kind, backend.region) == ("acme", "north")
        with pytest.raises(SpecError, match=r"'nope' is not an installed mlrunway backend; use one of acme, azure_ml, "
                                            r"mlrunway_fake, mlrunway_local, mlrunway_ray \(a backend registers itself in the "
                                            r"'mlrunway.backends' entry-point group\)"):
            registry.connect("nope", {})
    finally:
        registry.available.cache_clear()
