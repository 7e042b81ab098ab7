

def test_the_package_exports_every_name_it_lists_without_importing_them_all_up_front():
    import subprocess
    import sys

    import mlrunway.backend as package

    assert sorted(package.__all__) == sorted(package._HOME)
    assert all(getattr(package, name) is not None for name in package.__all__)
    # A job's supervisor needs the records, not the protocol, the registry or run naming.
    loaded = subprocess.run([sys.executable, "-c", "import sys, mlrunway.local.supervisor; print(sorted(sys.modules))"],
                            capture_output=True, text=True, check=True).stdout
    assert "mlrunway.backend.types" in loaded and "mlrunway.backend.registry" not in loaded
    assert "mlflow" not in loaded
