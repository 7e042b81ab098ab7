"""Provider info: registers mlrunway's two connection types and their form fields with Airflow.

Airflow finds it through the ``apache_airflow_provider`` entry point in pyproject.toml.
"""

from __future__ import annotations

from typing import Any

_STRING = {"type": ["string", "null"]}


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "mlrunway",
        "name": "mlrunway",
        "description": "The PyTorch model lifecycle on Azure ML or the local backend.",
        "versions": ["0.2.0", "0.1.0"],
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
                                  "description": 'What pruning keeps: {"keep_runs": 10, "keep_versions": 5, '
                                                 '"capture_days": 30}; empty: these.'},
                },
                "ui-field-behaviour": {"hidden-fields": ["host", "schema", "login", "password", "port", "extra"],
                                       "relabeling": {}, "placeholders": {}},
            },
            {
                "hook-class-name": "mlrunway.airflow.hook.AzureMLHook",
                "hook-name": "Azure Machine Learning (mlrunway)",
                "connection-type": "azure_ml",
                "conn-fields": {
                    "subscription_id": {"label": "Subscription ID", "schema": _STRING},
                    "resource_group": {"label": "Resource group", "schema": _STRING},
                    "workspace_name": {"label": "Workspace name", "schema": _STRING},
                    "credential": {
                        "label": "Credential",
                        "schema": {"type": ["string", "null"], "default": "default",
                                   "enum": ["default", "client_secret", "certificate", "managed_identity",
                                            "workload_identity", None]},
                        "description": "DefaultAzureCredential, a service principal (secret or certificate), "
                                       "managed identity or workload identity.",
                    },
                    "tenant_id": {"label": "Tenant ID", "schema": _STRING},
                    "certificate_path": {"label": "Certificate path (PEM or PKCS12)", "schema": _STRING},
                    "token_file_path": {"label": "Federated token file (workload identity)", "schema": _STRING},
                    "compute": {"label": "Compute cluster", "schema": _STRING,
                                "description": "Where jobs and sweep trials run; empty: serverless compute."},
                    "job_instance_type": {"label": "Serverless job instance type", "schema": _STRING,
                                          "description": "VM size of serverless jobs (empty: the service's)."},
                    "environment": {"label": "Training environment", "schema": _STRING,
                                    "description": "Empty: a pinned image with the project's torch."},
                    "cloud": {"label": "Azure cloud", "schema": {"type": ["string", "null"], "default": "AzureCloud",
                                                                 "enum": ["AzureCloud", "AzureChinaCloud",
                                                                          "AzureUSGovernment", None]}},
                    "transient_outage_s": {"label": "Transient outage (s)", "schema": _STRING,
                                           "description": "How long a wait rides out Azure reads that fail (throttled, "
                                                          "5xx, dropped connections) before the task gives up on it "
                                                          "(a retry re-attaches); empty: 900."},
                    "instance_type": {"label": "Deployment instance type", "schema": _STRING},
                    "instance_count": {"label": "Deployment instance count", "schema": _STRING},
                    "reports_folder": {"label": "Reports folder", "schema": _STRING,
                                       "description": "Where run reports are saved, on a disk the workers and the "
                                                      "API server share; empty: ~/.mlrunway/reports/<workspace>."},
                    "model_monitor": {"label": "Model monitor (JSON)", "schema": _STRING,
                                      "description": "The workspace's model monitor of the production endpoint, "
                                                     'e.g. {"cron": "0 3 * * *", "reference_data": '
                                                     '"azureml:digits-reference:1"}; empty: none.'},
                },
                "ui-field-behaviour": {"hidden-fields": ["host", "schema", "port", "extra"],
                                       "relabeling": {"login": "Client ID",
                                                      "password": "Client secret or certificate password"},
                                       "placeholders": {"login": "a service principal's or a user-assigned "
                                                                 "identity's; empty: the system-assigned identity"}},
            },
        ],
    }
