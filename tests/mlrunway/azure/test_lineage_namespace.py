"""The Azure backend's lineage namespace, from the workspace its connection names (no request is sent)."""

from __future__ import annotations

from mlrunway import lineage
from tests.mlrunway.azure.fake_azureml import RESOURCE_GROUP, SUBSCRIPTION, WORKSPACE


def test_the_azure_backend_names_its_workspace_as_its_azureml_uris_start(azure, fake):
    namespace = lineage.namespace_of(azure)
    assert namespace == f"azureml://subscriptions/{SUBSCRIPTION}/resourceGroups/{RESOURCE_GROUP}/workspaces/{WORKSPACE}"
    # A datastore URI of that workspace, short or long, lies under it.
    short = lineage.data("azureml://datastores/workspaceblobstore/paths/digits", namespace)
    long = lineage.data(f"{namespace}/datastores/workspaceblobstore/paths/digits/", namespace)
    assert short == long and short.namespace == f"{namespace}/datastores/workspaceblobstore"
    assert lineage.model_version(namespace, "digits-onnx", 2).name == "models/digits-onnx/versions/2"
