"""The sweep controller reaches the cluster as the files of its import closure: a fresh interpreter imports it from
only those files (so a later import it gains fails here, not on a cluster), and they are not the whole package."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from mlrunway.ray.client import zip_folder
from mlrunway.ray.closure import CONTROLLER, package


def imports_from_only_the_shipped_files(roots: tuple[str, ...], tmp_path: Path) -> None:
    """A fresh interpreter imports ``roots`` with only their closure's files first on the path (``-I``: no user site,
    no PYTHONPATH, no script folder, as py_modules are): every mlrunway module comes from those files."""
    base, files = package(roots)
    zipfile.ZipFile(__import__("io").BytesIO(zip_folder(base, files))).extractall(tmp_path / "shipped")
    probe = ("import sys, importlib\n"
             f"for name in {list(roots)!r}: importlib.import_module(name)\n"
             "outside = [m.__file__ for n, m in sys.modules.items() if n.startswith('mlrunway') and m.__file__ "
             f"and not m.__file__.startswith({str(tmp_path / 'shipped')!r})]\n"
             "assert not outside, outside\n")
    done = subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(tmp_path / 'shipped')!r})"
                           f"\n{probe}"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_the_controller_imports_from_only_the_shipped_files(tmp_path: Path) -> None:
    imports_from_only_the_shipped_files(CONTROLLER, tmp_path)


def test_the_closure_is_not_the_whole_package_nor_the_operators() -> None:
    base, files = package()
    shipped = {f.relative_to(base).as_posix() for f in files}
    assert "mlrunway/ray/sweep_controller.py" in shipped and "mlrunway/sweep/controller.py" in shipped
    assert not any(name.startswith(("mlrunway/operators/", "mlrunway/airflow/", "mlrunway/local/",
                                    "mlrunway/azure/", "mlrunway/deploy/")) for name in shipped)


def test_the_entrys_own_copy_of_the_run_statuses_is_the_shared_one() -> None:
    """The entry ships alone (the standard library only), so it keeps its own copy of the statuses a run ends with."""
    from mlrunway.ray import entry
    from mlrunway.tracking_names import RUN_STATUS

    assert entry.RUN_STATUS == RUN_STATUS


def test_an_endpoints_server_and_provisioning_import_from_only_their_shipped_files_and_no_backend(
        tmp_path: Path) -> None:
    """What an endpoint's Ray jobs run (mlrunway.ray.server, mlrunway.ray.provision) reaches the cluster as its own
    closure: the scoring app and its guard, no other backend, no Airflow."""
    roots = ("mlrunway.ray.server", "mlrunway.ray.provision")
    base, files = package(roots)
    shipped = {f.relative_to(base).as_posix() for f in files}
    assert {"mlrunway/serving/app.py", "mlrunway/serving/guard.py", "mlrunway/ray/server.py"} <= shipped
    assert not any(name.startswith(("mlrunway/operators/", "mlrunway/airflow/", "mlrunway/local/",
                                    "mlrunway/azure/", "mlrunway/deploy/")) for name in shipped)
    imports_from_only_the_shipped_files(roots, tmp_path)
