"""Provider info: what mlrunway adds to Airflow (its integrations, operators, hooks, triggers, extra links, plugin)
and its two connection types with their form fields, in the keys Airflow's own providers fill
(``airflow/provider_info.schema.json``; a test validates it).

Airflow finds it through the ``apache_airflow_provider`` entry point in pyproject.toml; the version Airflow shows
is the installed package's.
"""

from __future__ import annotations

from typing import Any

from mlrunway.backend.rates import RateCard
from mlrunway.backend.retention import RetentionPolicy
from mlrunway.backend.types import DEFAULT_INSTANCE_TYPE
from mlrunway.backend.waiting import Waits
from mlrunway.onnx_export.registered import ExportSettings
from mlrunway.settings import defaults, form_field

_STRING = {"type": ["string", "null"]}


INTEGRATIONS = ("Azure Machine Learning", "mlrunway local backend", "Ray (mlrunway)")
BUDGET = ('The most a run without a budget of its own may spend (JSON): {"max_cost": <amount>} in the rate card\'s '
          'currency or {"max_compute_hours": <hours>}, and "reserve" (default 0.1) kept for export and the '
          "reference; empty: no limit. The sweep stops at it and still delivers its best model.")
RATES = ('What compute costs an hour, for the estimates on the report, the model card and the summary: '
         '{"currency": "USD", "per_hour": {"<VM size>": <price>, "<VM size>:spot": <price>}, "local_rate": <price>}; '
         "empty: hours, not money.")

# The mlrunway_ray form's fields (mlrunway.ray.connection.RayConnection validates them; the adapter imports no
# backend): label and description. The connection's password is the cluster's token.
RAY_FIELDS = {
    "address": ("Jobs API address", "The head's dashboard, e.g. http://10.0.0.5:8265. Another machine needs a token "
                                    "(the password) or accept_unauthenticated_cluster."),
    "storage": ("Shared storage folder", "A folder every Ray node and Airflow component sees at the same path: "
                                         "inputs, outputs, job and sweep records."),
    "tracking_uri": ("MLflow server", "The tracking server jobs log to; its Model Registry holds the models."),
    "namespace": ("Namespace", "Prefixes every job this Airflow submits (Ray's ids are cluster-wide); empty: mlrunway."),
    "profiles": ("Resource profiles (JSON)", "Resources by name, named by a job's compute: "
                                             '{"cpu": {"num_cpus": 2}, "gpu1": {"num_cpus": 4, "num_gpus": 1}}.'),
    "default_profile": ("Default profile", "The profile of a job that names no compute; empty: cpu."),
    "environments": ("Runtime environments (JSON)", "Runtime environments by name, named by a job's environment: "
                                                   '{"torch": {"pip": ["torch==2.13.0"]}}; empty: the cluster\'s '
                                                   "Python."),
    "accept_unauthenticated_cluster": ("Accept a cluster without token auth", "true: anyone who reaches its Jobs API "
                                       "can run any command on it. Prefer RAY_AUTH_MODE=token and the token."),
    "autoscaling": ("Nodes added on demand", "true: the cluster's autoscaler adds nodes, so a distributed job the "
                    "nodes now up could never place waits for new ones instead of being refused."),
    "rates": ("Rate card (JSON)", 'What an hour of each profile costs: {"currency": "USD", "per_hour": {"gpu1": 2.5}}.'),
}


def get_provider_info() -> dict[str, Any]:
    every = [{"integration-name": name} for name in INTEGRATIONS]
    return {
        "package-name": "mlrunway",
        "name": "mlrunway",
        "description": "The PyTorch model lifecycle (train, sweep, pick the best, export to ONNX, deploy, clean up) "
                       "as Airflow operators, on Azure ML or the embedded local backend.",
        "integrations": [
            {"integration-name": "Azure Machine Learning",
             "external-doc-url": "https://learn.microsoft.com/azure/machine-learning/", "tags": ["azure", "ml"]},
            {"integration-name": "mlrunway local backend", "tags": ["ml"]},
            {"integration-name": "Ray (mlrunway)", "external-doc-url": "https://docs.ray.io/en/latest/cluster/"
                                                                       "running-applications/job-submission/",
             "tags": ["ml"]},
        ],
        "operators": [{**i, "python-modules": ["mlrunway.operators"]} for i in every],
        "hooks": [{**i, "python-modules": ["mlrunway.airflow.hook"]} for i in every],
        "triggers": [{**i, "python-modules": ["mlrunway.airflow.triggers"]} for i in every],
        "extra-links": [f"mlrunway.airflow.links.{link}" for link in (
            "StudioLink", "MlflowRunLink", "SweepReportLink", "EndpointLink", "ModelCardLink", "MonitorLink")],
        "plugins": [{"name": "mlrunway", "plugin-class": "mlrunway.airflow.plugin.MlrunwayPlugin"}],
        "connection-types": [
            {
                "hook-class-name": "mlrunway.airflow.hook.MlrunwayHook",
                "hook-name": "mlrunway local backend",
                "connection-type": "mlrunway_local",
                "conn-fields": {
                    "workspace": {"label": "Workspace folder", "schema": _STRING,
                                  "description": "Root of the local workspace (jobs, models, endpoints, MLflow)."},
                    "endpoint_host": {"label": "Endpoint host", "schema": _STRING,
                                      "description": "Address endpoints listen on; empty: 127.0.0.1 (this "
                                                     "machine). Serve beyond it only behind a TLS proxy."},
                    "capture_max_mb": {"label": "Capture cap (MB)", "schema": _STRING,
                                       "description": "What each deployment's data collector may keep on disk; "
                                                      "empty: 1024. Past it, its oldest files go first."},
                    "retention": {"label": "Retention (JSON)", "schema": _STRING,
                                  "description": f"What pruning keeps: {defaults(RetentionPolicy)}; empty: these."},
                    "local_rate": {"label": "Price of a core-hour", "schema": _STRING,
                                   "description": form_field(RateCard, "local_rate")["description"]},
                    "rates": {"label": "Rate card (JSON)", "schema": _STRING, "description": RATES},
                    "budget": {"label": "Budget of a run (JSON)", "schema": _STRING, "description": BUDGET},
                },
                "ui-field-behaviour": {"hidden-fields": ["host", "schema", "login", "password", "port", "extra"],
                                       "relabeling": {},
                                       "placeholders": {"workspace": "/opt/airflow/mlrunway-workspace",
                                                        "capture_max_mb": "1024"}},
            },
            {
                "hook-class-name": "mlrunway.airflow.hook.AzureMLHook",
                "hook-name": "Azure Machine Learning (mlrunway)",
                "connection-type": "azure_ml",
                "conn-fields": {
                    "subscription_id": {"label": "Subscription ID", "schema": _STRING,
                                        "description": "The Azure subscription that holds the workspace."},
                    "resource_group": {"label": "Resource group", "schema": _STRING,
                                       "description": "The workspace's resource group."},
                    "workspace_name": {"label": "Workspace name", "schema": _STRING,
                                       "description": "The Azure ML workspace the DAG's jobs, models and endpoints "
                                                      "live in."},
                    "credential": {
                        "label": "Credential",
                        "schema": {"type": ["string", "null"], "default": "default",
                                   "enum": ["default", "client_secret", "certificate", "managed_identity",
                                            "workload_identity", None]},
                        "description": "DefaultAzureCredential, a service principal (secret or certificate), "
                                       "managed identity or workload identity.",
                    },
                    "tenant_id": {"label": "Tenant ID", "schema": _STRING,
                                  "description": "The Microsoft Entra tenant a service principal or a "
                                                 "workload identity signs in at."},
                    "certificate_path": {"label": "Certificate path (PEM or PKCS12)", "schema": _STRING,
                                         "description": "The service principal's certificate (credential "
                                                        "certificate); its password is the connection's password."},
                    "token_file_path": {"label": "Federated token file (workload identity)", "schema": _STRING,
                                        "description": "The federated token file of workload identity (with "
                                                       "tenant_id and the Client ID)."},
                    "compute": {"label": "Compute cluster", "schema": _STRING,
                                "description": "Where jobs and sweep trials run; empty: serverless compute."},
                    "job_instance_type": {"label": "Serverless job instance type", "schema": _STRING,
                                          "description": "VM size of serverless jobs (empty: the service's)."},
                    "environment": {"label": "Training environment", "schema": _STRING,
                                    "description": "Empty: a pinned image with the project's torch."},
                    "export_environment": {"label": "Export environment", "schema": _STRING,
                                           "description": form_field(ExportSettings, "environment")["description"]},
                    "cloud": {"label": "Azure cloud", "schema": {"type": ["string", "null"], "default": "AzureCloud",
                                                                 "enum": ["AzureCloud", "AzureChinaCloud",
                                                                          "AzureUSGovernment", None]},
                              "description": "The ARM host, token scope, studio host and sign-in authority."},
                    "transient_outage_s": {"label": "Transient outage (s)", "schema": _STRING, "description": (
                        f"{form_field(Waits, 'transient_outage_s')['description']} Empty: "
                        f"{Waits().transient_outage_s:g}.")},
                    "instance_type": {"label": "Deployment instance type", "schema": _STRING,
                                      "description": "VM size of online deployments where the deploy task "
                                                     f"names none; empty: {DEFAULT_INSTANCE_TYPE}."},
                    "instance_count": {"label": "Deployment instance count", "schema": _STRING,
                                       "description": "Instances of each online deployment where the deploy "
                                                      "task names none; empty: 1."},
                    "reports_folder": {"label": "Reports folder", "schema": _STRING,
                                       "description": "Where run reports are saved, on a disk the workers and the "
                                                      "API server share; empty: ~/.mlrunway/reports/<workspace>."},
                    "rates": {"label": "Rate card (JSON)", "schema": _STRING, "description": RATES},
                    "budget": {"label": "Budget of a run (JSON)", "schema": _STRING, "description": BUDGET},
                    "model_monitor": {"label": "Model monitor (JSON)", "schema": _STRING,
                                      "description": "The workspace's model monitor of the production endpoint, "
                                                     'e.g. {"cron": "0 3 * * *", "reference_data": '
                                                     '"azureml:digits-reference:1"}; empty: none.'},
                },
                "ui-field-behaviour": {"hidden-fields": ["host", "schema", "port", "extra"],
                                       "relabeling": {"login": "Client ID",
                                                      "password": "Client secret or certificate password"},
                                       "placeholders": {"login": "a service principal's or a user-assigned "
                                                                 "identity's; empty: the system-assigned identity",
                                                        "subscription_id": "00000000-0000-0000-0000-000000000000",
                                                        "resource_group": "my-resource-group",
                                                        "workspace_name": "my-workspace",
                                                        "compute": "gpu-cluster"}},
            },
            {
                "hook-class-name": "mlrunway.airflow.hook.RayHook",
                "hook-name": "Ray cluster (mlrunway)",
                "connection-type": "mlrunway_ray",
                "conn-fields": {name: {"label": label, "schema": _STRING, "description": description}
                                for name, (label, description) in RAY_FIELDS.items()} | {
                    "budget": {"label": "Budget of a run (JSON)", "schema": _STRING, "description": BUDGET}},
                "ui-field-behaviour": {"hidden-fields": ["host", "schema", "login", "port", "extra"],
                                       "relabeling": {"password": "Token (RAY_AUTH_TOKEN)"},
                                       "placeholders": {"address": "http://127.0.0.1:8265",
                                                        "storage": "/mnt/shared/mlrunway",
                                                        "tracking_uri": "http://127.0.0.1:5000",
                                                        "namespace": "mlrunway",
                                                        "profiles": '{"cpu": {"num_cpus": 2}, '
                                                                    '"gpu1": {"num_cpus": 4, "num_gpus": 1}}'}},
            },
        ],
    }
