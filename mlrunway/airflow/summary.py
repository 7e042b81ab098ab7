"""Read a DAG run's results back from Airflow's metadata database and print the demo's summary.

    python -m mlrunway.airflow.summary [dag_id]     # the latest run of the DAG
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

DAG_ID = "train_sweep_deploy"


def latest_run(dag_id: str = DAG_ID) -> tuple[str, str]:
    """(run_id, state) of the DAG's latest run."""
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    with create_session() as session:
        run = session.query(DagRun).filter(DagRun.dag_id == dag_id).order_by(DagRun.id.desc()).first()
        if run is None:
            raise SystemExit(f"no run of {dag_id} in the metadata database")
        return run.run_id, str(run.state)


def run_results(dag_id: str, run_id: str) -> dict[str, dict[str, Any]]:
    """Each task's pushed values: {task_id: {key: value}} (multiple_outputs keys, without return_value)."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    results: dict[str, dict[str, Any]] = {}
    with create_session() as session:
        rows = session.query(XComModel).filter(XComModel.dag_id == dag_id, XComModel.run_id == run_id).all()
        for row in rows:
            if row.key != "return_value":
                results.setdefault(row.task_id, {})[row.key] = XComModel.deserialize_value(row)
    return results


def format_summary(state: str, results: dict[str, dict[str, Any]], leftovers: list[str],
                   report: Path | None = None) -> str:
    """The demo's lines, one per task that got that far; ``report`` is the run's saved sweep report."""
    sweep, pick = results.get("sweep", {}), results.get("pick_best", {})
    export, deploy, clean = results.get("export_onnx", {}), results.get("deploy_blue", {}), results.get("cleanup", {})
    parity = export.get("parity", {})
    lines = [f"run: {state}"]
    if sweep:
        lines.append(f"sweep: {sweep['trials']} trials, {len(sweep['stopped_early'])} stopped early by Bandit, "
                     f"{sweep['epochs']} epochs")
    if pick:
        params = ", ".join(f"{k}={v:.4g}" for k, v in pick["params"].items())
        lines.append(f"best: {pick['trial']} {pick['metric']}={pick['value']:.4f} ({params}) -> "
                     f"model {pick['model_name']}:{pick['model_version']}")
    if parity:
        top1 = "" if parity.get("top1_agreement") is None else f", top-1 agreement {parity['top1_agreement']:.0%}"
        share = "" if parity.get("tolerance_used") is None else \
            f" ({parity['tolerance_used'] * 100:.3g}% of the tolerance)"  # recorded since the relative part
        outputs = parity.get("outputs") or []
        most = max(outputs, key=lambda o: o.get("tolerance_used") or 0.0) if len(outputs) > 1 else None
        worst = "" if most is None else f", the most on {most['name']} of {len(outputs)} outputs"
        diff = "no PyTorch model to compare with" if parity.get("max_abs_diff") is None else \
            f"max |onnx - torch| {parity['max_abs_diff']:.2g}{share}{worst}{top1}"
        lines.append(f"onnx: {export['model_name']}:{export['model_version']} opset {export['opset']}, {diff} on "
                     f"{parity['samples']} {parity['inputs']}")
    if deploy.get("decision"):
        lines.append(stable_line(deploy))
    elif deploy:
        matched = f", {deploy['smoke_matched']}" if deploy.get("smoke_matched") else ""
        smoke = f"{deploy['smoke_request']} -> {deploy['smoke_answer']}{matched}" if "smoke_request" in deploy else (
            f"a real validation image of a {deploy['smoke_truth']} -> {deploy['smoke_label']} "
            f"(p={deploy['smoke_probability']:.2f})")
        lines.append(f"endpoint: blue at 100% on {deploy['scoring_uri']}; {smoke}")
    if clean:
        kept = clean.get("endpoint_kept")
        endpoint = f"stable endpoint {clean['stable_endpoint']} kept, deleted deployments " \
                   f"{clean.get('deleted_deployments') or 'none'}" if clean.get("stable_endpoint") else \
            f"endpoint {'kept (keep_endpoint)' if kept else 'deleted' if clean.get('endpoint_deleted') else 'none made'}"
        lines.append(f"cleanup: {endpoint}; "
                     f"{'nothing left running' if not leftovers else 'LEFT RUNNING: ' + '; '.join(leftovers)}")
    if deploy.get("cost"):
        lines.append(f"cost: {deploy['cost']['text']}")
    if clean.get("serving_cost"):
        lines.append(f"serving: {clean['serving_cost']['text']}")
    if report is not None:
        lines.append(f"report: {report} (in the Airflow UI: the run's Sweep report tab)")
    if deploy.get("model_card"):
        lines.append(f"model card: {deploy['model_card']} (in the Airflow UI: the deploy_blue task's Model card link)")
    return "\n".join(lines)


def stable_line(deploy: dict[str, Any]) -> str:
    """A stable endpoint's outcome: the decision, the gate's figures, what serves afterwards."""
    gate, live = deploy.get("gate") or {}, deploy.get("live")
    figures = f" ({gate['verdict']}: {gate['summary']})" if gate.get("verdict") else ""
    serving = f"{live['deployment']} serves {live['model']}" if live else "nothing serves"
    return f"endpoint: {deploy['endpoint']} {deploy['decision']}{figures}; {serving}; {deploy['reason']}"


def main() -> int:
    from mlrunway.airflow.hook import MlrunwayHook
    from mlrunway.backend.protocol import Leftovers
    from mlrunway.report import saved_report

    dag_id = sys.argv[1] if len(sys.argv) > 1 else DAG_ID
    run_id, state = latest_run(dag_id)
    backend = MlrunwayHook().get_backend()  # the demo's: mlrunway_default
    left = backend.leftovers() if isinstance(backend, Leftovers) else []
    results = run_results(dag_id, run_id)
    sweep = results.get("sweep", {}).get("sweep_name")
    print(format_summary(state, results, left, saved_report(sweep, backend.reports) if sweep else None))
    return 0 if state == "success" and not left else 1


if __name__ == "__main__":
    sys.exit(main())
