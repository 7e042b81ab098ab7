"""The hosts of each Azure cloud this backend runs in: ARM, the studio, Microsoft Entra's sign-in.

The one private import of azure-ai-ml's cloud table: the SDK has no public call for it (``MLClient`` keeps the
hosts in private attributes), and reading the SDK's own table keeps our hosts the ones ``MLClient`` talks to
under the same pin. The workspace's own hosts (MLflow, Run History) come from the workspace, not from here.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CLOUDS", "CloudHosts", "hosts"]

CLOUDS = ("AzureCloud", "AzureChinaCloud", "AzureUSGovernment")


@dataclass(frozen=True)
class CloudHosts:
    """:param arm: the Resource Manager host, also the token's audience (``<arm>/.default``).
    :param studio: the Azure ML studio's host.
    :param authority: where the cloud's tenants sign in.
    """

    arm: str
    studio: str
    authority: str


def hosts(cloud: str) -> CloudHosts:
    """The hosts of ``cloud`` (one of ``CLOUDS``; the caller checks it), without trailing slashes."""
    from azure.ai.ml._azure_environments import _get_cloud_details  # private: no public table (see above)

    details = _get_cloud_details(cloud)
    return CloudHosts(arm=str(details["resource_manager"]).rstrip("/"),
                      studio=str(details["aml_resource_id"]).rstrip("/"),
                      authority=str(details["active_directory"]).rstrip("/"))
