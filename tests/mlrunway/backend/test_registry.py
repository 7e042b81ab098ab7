

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
    assert not [m for m in loaded if m.startswith(("mlrunway.backend", "mlrunway.specs", "mlflow", "logging"))]


def test_the_supervisor_knows_the_terminal_statuses_without_importing_them():
    from mlrunway.backend.types import JobStatus
    from mlrunway.local.supervisor import TERMINAL

    assert TERMINAL == {s.value for s in JobStatus if s.is_terminal()}
