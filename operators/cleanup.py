"""CleanupOperator: save the run's sweep report, then delete what the run created; runs whatever happened
upstream."""

from __future__ import annotations

from typing import Any

from airflow.sdk import Context, TriggerRule

from mlrunway import check, lineage
from mlrunway.airflow.links import SweepReportLink, ui_path
from mlrunway.backend.naming import RunNames, endpoint_salt
from mlrunway.deploy import strategy_for
from mlrunway.errors import JobFailed
from mlrunway.ledger.cost import RunCost, estimated, serving_cost
from mlrunway.ledger.reports import ReportsFolder
from mlrunway.operators._base import MlrunwayBaseOperator
from mlrunway.operators.deploy_blue import DeployBlueOperator
from mlrunway.pipeline import check_prefix, cleanup
from mlrunway.report import HTML_FILE, save_run_report


class CleanupOperator(MlrunwayBaseOperator):
    """:param keep_endpoint: leave the endpoint serving (the run's result) instead of deleting it.
    :param archive_models: ``[(name, version), ...]`` intermediate model versions to archive.
    :param endpoint_name: the stable endpoint the run deployed to (see DeployBlueOperator): it is never deleted;
        its deployment left without traffic (the loser, or the old champion after a promotion) is, and the run's
        rollout lease is given back.
    """

    template_fields = (*MlrunwayBaseOperator.template_fields, "keep_endpoint", "endpoint_name")

    def __init__(self, *, keep_endpoint: bool | str = False, archive_models: list[tuple[str, int]] | None = None,
                 endpoint_name: str | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("trigger_rule", TriggerRule.ALL_DONE)
        super().__init__(**kwargs)
        self.keep_endpoint = keep_endpoint
        self.archive_models = archive_models or []
        self.endpoint_name = endpoint_name

    def execute(self, context: Context) -> dict[str, Any]:
        keep = check.flag("keep_endpoint", self.keep_endpoint)
        names = self.names(context)
        self.save_report(context, names)
        serving = self.serving_cost(names)
        done = cleanup(self.backend, names, delete_endpoint=not keep and not self.endpoint_name,
                       archive=self.archive_models)
        if serving is not None:
            done["serving_cost"] = serving
        strategy = strategy_for(None, self.endpoint_name)  # as the deploy task chooses by default
        done.update(strategy.clean_up(self.backend, self.endpoint_name or names.endpoint, names.run_key))
        run_id = context["run_id"]
        states = context["ti"].get_task_states(dag_id=context["dag"].dag_id, run_ids=[run_id]).get(run_id, {})
        failed = sorted(task for task, state in states.items() if state == "failed")
        unrun = sorted(task for task, state in states.items() if state == "upstream_failed")
        refused = self.refused_deploys(context, failed)
        if refused and not unrun and refused == failed:  # the backend has no endpoints yet, as preflight said
            self.log.warning("The run did all this backend can: %s refused (%s); cleanup succeeded: %s",
                             ", ".join(refused), self.backend.capabilities.endpoints, cleaned(done))
            return {**done, "refused": refused}
        if failed or unrun:  # the run must not look successful because its last task, this one, always runs
            message = (f"the run failed at {', '.join(failed) or 'an earlier task'} (its log says why"
                       f"{'; not run: ' + ', '.join(unrun) if unrun else ''}); cleanup itself succeeded: "
                       f"{cleaned(done)}")
            self.log.error("RUN FAILED: %s", message)
            raise JobFailed(message)
        return done

    def refused_deploys(self, context: Context, failed: list[str]) -> list[str]:
        """The failed tasks that are deploy tasks of a backend without online endpoints
        (:attr:`~mlrunway.backend.protocol.Capabilities.endpoints`: refused at their start, announced by preflight):
        not a failure of the run's own work."""
        if self.backend.capabilities.endpoints is None:
            return []
        dag = context["dag"]
        return [task for task in failed if dag.has_task(task) and isinstance(dag.get_task(task), DeployBlueOperator)]

    def serving_cost(self, names: RunNames) -> dict[str, Any] | None:
        """What the endpoint's deployments cost since each was created, read before a run's own endpoint is
        deleted (a stable endpoint's: so far); an estimate, logged, that never stops the cleanup."""
        def read() -> RunCost | None:
            found = self.backend.endpoints.first_existing(*([self.endpoint_name] if self.endpoint_name
                                                           else names.endpoints))
            return serving_cost(self.backend, found.name) if found is not None else None

        cost = estimated(f"the endpoint of run {names.run_key}", read)
        if cost is not None:
            self.log.info("The endpoint's deployments served: %s", cost["text"])
        return cost

    def save_report(self, context: Context, names: RunNames) -> None:
        """The sweep report as the run ends, the endpoint still up: the run's artifact. A report that cannot be
        built is logged and does not stop the cleanup: the run's models and jobs stand without it."""
        try:
            page = save_run_report(self.backend, names, self.backend.reports, dag_id=context["dag"].dag_id,
                                   run_id=context["run_id"])
        except Exception:
            self.log.exception("The sweep report of %s could not be saved; cleaning up regardless", names.sweep)
            return
        if page is None:
            self.log.info("No sweep in this run: no report")
            return
        self.log.info("Sweep report saved: %s", page)
        # The task's "Sweep report" link, to the saved report; the run's tab finds the saved one too.
        self.show_links(context, {SweepReportLink.key: ui_path("report", self.backend_conn_id, names.sweep)})

    # -- OpenLineage -------------------------------------------------------------------------------------
    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """What it removed (the run's endpoint, archived versions) and the sweep report it saved, read from the
        run's names (the task instance's) and its result."""
        from mlrunway.airflow.lineage import operator_lineage

        names = RunNames.of(task_instance.dag_id, task_instance.run_id, check_prefix(self.name_prefix),
                            endpoint_salt(self.backend))
        done = self.returned if isinstance(self.returned, dict) else {}
        return operator_lineage(*self.lineage_of(names, done))

    def lineage_of(self, names: RunNames, done: dict[str, Any]) -> tuple[list[lineage.LineageDataset],
                                                                         list[lineage.LineageDataset]]:
        namespace = self.lineage_namespace
        removed = [lineage.endpoint(namespace, names.endpoint)] if done.get("endpoint_deleted") else []
        if done.get("stable_endpoint"):
            removed += [lineage.deployment(namespace, done["stable_endpoint"], d)
                        for d in done.get("deleted_deployments") or []]
        removed += [lineage.model_version(namespace, *ref.split(":", 1)) for ref in done.get("archived_models") or []]
        report = ReportsFolder(self.backend.reports).sweep(names.sweep) / HTML_FILE
        return removed, [lineage.local_path(report)] if report.is_file() else []


def cleaned(done: dict[str, Any]) -> str:
    """What a cleanup did, in words (its result is a dict for XCom)."""
    endpoint = ("endpoint kept" if done.get("endpoint_kept") else
                "endpoint deleted" if done.get("endpoint_deleted") else "no endpoint to delete")
    parts = [endpoint, f"canceled {', '.join(done['canceled_jobs'])}" if done.get("canceled_jobs") else
             "no job left running", f"archived {', '.join(done['archived_models'])}" if done.get("archived_models")
             else ""]
    if done.get("stable_endpoint"):
        parts.append(f"stable endpoint {done['stable_endpoint']} kept, slots deleted: "
                     f"{', '.join(done.get('deleted_deployments') or []) or 'none'}")
    return "; ".join(p for p in parts if p)
