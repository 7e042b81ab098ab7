"""The wheel holds every package: built from the repo, installed into a fresh virtualenv, each package imported
from there (not from the checkout). A package without ``__init__.py`` would be missing, or found only by luck."""

from __future__ import annotations

import configparser
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow


def packages_in_tree() -> list[str]:
    found = []
    for init in sorted((REPO / "mlrunway").rglob("__init__.py")):  # the operators too, through mlrunway/operators
        found.append(".".join(init.parent.relative_to(REPO).parts))
    return found


def test_every_folder_of_python_code_is_a_package():
    for root in ("mlrunway", "mlrunway/operators"):  # rglob does not follow the link
        for source in (REPO / root).rglob("*.py"):
            assert (source.parent / "__init__.py").is_file(), f"{source.parent} has no __init__.py"


def test_the_wheel_installs_into_a_fresh_virtualenv_with_every_package(tmp_path):
    # setuptools builds through build/lib and packs whatever it holds: a checkout's stale copy of an earlier layout
    # (a top-level operators/) would ship beside what the project declares.
    shutil.rmtree(REPO / "build" / "lib", ignore_errors=True)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path / "dist"), str(REPO)], check=True, capture_output=True)
    (wheel,) = (tmp_path / "dist").glob("mlrunway-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    packages = packages_in_tree()
    assert {p for p in packages if f"{p.replace('.', '/')}/__init__.py" not in names} == set()
    # One namespace: the operators are inside mlrunway (real files, not the link), nothing else at the top level.
    assert {n.split("/")[0] for n in names if not n.startswith("mlrunway-")} == {"mlrunway"}
    assert "mlrunway/operators/train.py" in names
    # A light base: nothing heavy and no exact pin outside the extras.
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    base = [line.split(":", 1)[1].strip() for line in metadata.splitlines()
            if line.startswith("Requires-Dist:") and "extra ==" not in line]
    assert base and not [r for r in base if "==" in r], base
    heavy = ("torch", "onnx", "onnxruntime", "onnxscript", "mlflow", "optuna", "pandas", "scikit-learn")
    assert not [r for r in base if re.split(r"[<>=!~ ;\[]", r)[0].lower() in heavy], base
    # What the wheel registers: the three real backends by connection type; the fake only in the tests' distribution.
    points = configparser.ConfigParser(delimiters=("=",))
    points.read_string(zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/entry_points.txt")))
                       .decode())
    assert dict(points["mlrunway.backends"]) == {"mlrunway_local": "mlrunway.local.backend:LocalBackend",
                                                 "azure_ml": "mlrunway.azure.backend:AzureBackend",
                                                 "mlrunway_ray": "mlrunway.ray.backend:RayBackend"}

    fresh = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(fresh)], check=True)
    python = fresh / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    # The project's dependencies come from this environment (a path, not its editable finder); mlrunway itself
    # only from the wheel.
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)],
                   check=True, capture_output=True)
    code = ("import importlib, sys\n"
            f"for name in {packages!r}:\n"
            "    module = importlib.import_module(name)\n"
            f"    assert {str(REPO)!r} not in module.__file__, module.__file__\n"
            "    assert hasattr(module, '__all__'), name + ' has no __all__'\n"
            "print(len(sys.modules))\n")
    done = subprocess.run([str(python), "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
