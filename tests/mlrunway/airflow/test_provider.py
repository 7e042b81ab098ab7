"""mlrunway as an Airflow provider (issue 61, 4): its provider info fills the keys Airflow's own providers fill and
validates against Airflow's schema; the version Airflow shows is the package's; a connection made with the CLI is
kept with its type and fields, and the same as AIRFLOW_CONN_ JSON reaches its backend."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from mlrunway.airflow.provider import get_provider_info


def test_the_provider_info_validates_against_airflows_schema_and_every_name_in_it_imports():
    import airflow

    schema = json.loads((Path(airflow.__file__).parent / "provider_info.schema.json").read_text())
    info = get_provider_info()
    jsonschema.validate(info, schema)
    assert "versions" not in info  # the version is the installed package's
    assert {"integrations", "operators", "hooks", "triggers", "extra-links", "plugins", "connection-types"} <= set(info)
    integrations = {i["integration-name"] for i in info["integrations"]}
    for kind in ("operators", "hooks", "triggers"):
        for entry in info[kind]:
            assert entry["integration-name"] in integrations
            for module in entry["python-modules"]:
                importlib.import_module(module)
    for dotted in (*info["extra-links"], *(p["plugin-class"] for p in info["plugins"]),
                   *(c["hook-class-name"] for c in info["connection-types"])):
        module, _, name = dotted.rpartition(".")
        assert getattr(importlib.import_module(module), name)


@pytest.mark.slow
def test_the_provider_has_the_packages_version_and_a_connection_added_from_the_cli_reaches_its_backend(airflow_db, tmp_path):
    from importlib.metadata import version

    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "AIRFLOW_HOME": airflow_db,
           "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
    airflow = str(Path(sys.executable).parent / "airflow")
    from airflow.providers_manager import ProvidersManager

    assert ProvidersManager().providers["mlrunway"].version == version("mlrunway")  # what `providers list` shows
    extra = json.dumps({"workspace": str(tmp_path / "ws")})
    subprocess.run([airflow, "connections", "add", "mlrunway_cli", "--conn-type", "mlrunway_local", "--conn-extra",
                    extra], env=env, capture_output=True, text=True, check=True)
    # Kept in the metadata database (the session's own), as a task's supervisor hands it over; its JSON is what
    # AIRFLOW_CONN_ takes.
    (stored,) = json.loads(subprocess.run([airflow, "connections", "get", "mlrunway_cli", "--output", "json"],
                                          env=env, capture_output=True, text=True, check=True).stdout)
    assert stored["conn_type"] == "mlrunway_local" and stored["extra_dejson"] == json.loads(extra)
    probe = ("from mlrunway.airflow.hook import MlrunwayHook\n"
             "print(type(MlrunwayHook('mlrunway_json').get_backend()).__name__, "
             "MlrunwayHook('mlrunway_json').get_backend().workspace.root)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env={
        **env, "AIRFLOW_CONN_MLRUNWAY_JSON": json.dumps({"conn_type": stored["conn_type"],
                                                         "extra": stored["extra_dejson"]})})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["LocalBackend", str(tmp_path / "ws")]
