"""The Azure credential and workspace named by an ``azure_ml`` connection's fields.

``credential``: ``default`` (DefaultAzureCredential), ``client_secret`` or ``certificate`` (a service
principal), ``managed_identity`` or ``workload_identity``. The secret (client secret or certificate password)
comes from the connection's password, so Airflow's secrets backend holds it; no message here repeats it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mlrunway import check
from mlrunway.azure.clouds import hosts

KINDS = ("default", "client_secret", "certificate", "managed_identity", "workload_identity")
_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")


@dataclass(frozen=True)
class WorkspaceRef:
    subscription_id: str
    resource_group: str
    workspace_name: str


def workspace_ref(fields: Mapping[str, Any]) -> WorkspaceRef:
    """The workspace's three names, each required: a missing one is an error, never ``None``."""
    for name in ("subscription_id", "resource_group", "workspace_name"):
        if not fields.get(name):
            raise check.fail(f"azure_ml connection.{name}", "is missing", f"set {name} on the Airflow connection")
    if not _UUID.match(fields["subscription_id"]):
        raise check.fail("azure_ml connection.subscription_id", f"{fields['subscription_id']!r} is not a GUID",
                          "copy the subscription ID from the Azure portal")
    return WorkspaceRef(fields["subscription_id"], fields["resource_group"], fields["workspace_name"])


def _required(fields: Mapping[str, Any], kind: str, *names: str) -> list[str]:
    missing = [n for n in names if not fields.get(n)]
    if missing:
        raise check.fail(f"azure_ml connection.{missing[0]}", f"is needed for credential {kind!r}",
                          f"set {', '.join(missing)} on the connection")
    return [fields[n] for n in names]


def authority(cloud: str) -> str:
    """The Microsoft Entra host a cloud signs in at (login.microsoftonline.com, .us, login.chinacloudapi.cn),
    from azure-ai-ml's own table of each cloud's hosts (``mlrunway.azure.clouds``)."""
    return hosts(cloud).authority


def credential(fields: Mapping[str, Any], secret: str | None = None) -> Any:
    """Build the azure-identity credential the connection asks for (no token is requested here), signing in at
    the authority of the connection's ``cloud`` (a sovereign cloud's tenants are not at the public one)."""
    import azure.identity as identity

    kind = fields.get("credential") or "default"
    check.one_of("azure_ml connection.credential", kind, KINDS)
    client_id = fields.get("client_id") or None
    at = authority(fields.get("cloud") or "AzureCloud")
    if kind == "default":
        return identity.DefaultAzureCredential(managed_identity_client_id=client_id, authority=at)
    if kind == "managed_identity":  # the instance's own endpoint (IMDS) issues its tokens: no authority
        return identity.ManagedIdentityCredential(client_id=client_id)
    if kind == "workload_identity":
        tenant, client, token_file = _required(fields, kind, "tenant_id", "client_id", "token_file_path")
        return identity.WorkloadIdentityCredential(tenant_id=tenant, client_id=client, token_file_path=token_file,
                                                   authority=at)
    tenant, client = _required(fields, kind, "tenant_id", "client_id")
    if kind == "client_secret":
        if not secret:
            raise check.fail("azure_ml connection.password", "holds no client secret",
                              "put the service principal's secret in the connection's password")
        return identity.ClientSecretCredential(tenant_id=tenant, client_id=client, client_secret=secret, authority=at)
    (path,) = _required(fields, kind, "certificate_path")
    return identity.CertificateCredential(tenant_id=tenant, client_id=client, certificate_path=path,
                                          password=secret or None, authority=at)
