"""The core's lineage datasets (:mod:`mlrunway.lineage`) as the OpenLineage provider's ``OperatorLineage``.

The provider and the OpenLineage client are imported when a listener asks, never when a DAG file is parsed.
A code snapshot's hash travels in the dataset's ``version`` facet (OpenLineage's ``DatasetVersionDatasetFacet``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from mlrunway.lineage import LineageDataset

__all__ = ["operator_lineage", "to_openlineage"]


def to_openlineage(dataset: LineageDataset) -> Any:
    """One ``openlineage.client.event_v2.Dataset`` (an input's or an output's: the listener makes them so)."""
    from openlineage.client.event_v2 import Dataset
    from openlineage.client.facet_v2 import dataset_version_dataset

    facets: dict[str, Any] = {}
    if dataset.version is not None:
        facets["version"] = dataset_version_dataset.DatasetVersionDatasetFacet(datasetVersion=dataset.version)
    return Dataset(namespace=dataset.namespace, name=dataset.name, facets=facets)


def operator_lineage(inputs: Iterable[LineageDataset], outputs: Iterable[LineageDataset] = ()) -> Any:
    """What a task read and made, as the provider's ``OperatorLineage``; each dataset once, in order."""
    from airflow.providers.openlineage.extractors import OperatorLineage

    return OperatorLineage(inputs=[to_openlineage(d) for d in dict.fromkeys(inputs)],
                           outputs=[to_openlineage(d) for d in dict.fromkeys(outputs)])
