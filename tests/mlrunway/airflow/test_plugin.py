"""The UI plugin loads through the package's ``airflow.plugins`` entry point, however Airflow is started: here
Airflow's own CLI, in a fresh process with an empty plugins folder, lists it with its links, pages and tab."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def test_airflow_loads_the_plugin_from_its_entry_point_without_a_plugins_folder(tmp_path):
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path), "AIRFLOW__CORE__PLUGINS_FOLDER": str(tmp_path / "plugins"),
           "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
    (tmp_path / "plugins").mkdir()
    listed = subprocess.run([str(Path(sys.executable).parent / "airflow"), "plugins", "--output", "json"], env=env,
                            cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr[-2000:]
    plugins = {p["name"]: p for p in json.loads(listed.stdout[listed.stdout.index("["):])}
    mine = plugins["mlrunway"]
    assert "value='mlrunway.airflow.plugin:MlrunwayPlugin', group='airflow.plugins'" in mine["source"]
    assert [link.split(".")[-1].split()[0] for link in mine["operator_extra_links"]] == [
        "StudioLink", "MlflowRunLink", "SweepReportLink", "EndpointLink", "ModelCardLink", "MonitorLink"]
    assert [app["url_prefix"] for app in mine["fastapi_apps"]] == ["/mlrunway"]
    assert [view["name"] for view in mine["external_views"]] == ["Sweep report"]
