"""Extra links from a task to what it created: the Azure ML studio page of a job, model or endpoint.

A task pushes the page's URL under ``studio_url`` once it has created the thing; the link reads it back and
Airflow shows it on the task's page. The local backend has no studio: no link.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseOperatorLink
from airflow.sdk.execution_time.xcom import XCom

XCOM_KEY = "studio_url"


class StudioLink(BaseOperatorLink):
    name = "Azure ML studio"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        return XCom.get_value(ti_key=ti_key, key=XCOM_KEY) or ""


def push_link(context: Any, backend: Any, kind: str, name: str, version: int | str | None = None) -> str | None:
    """Push the backend's page for ``kind`` ``name`` (Azure only); return it."""
    link = getattr(backend, "link", None)
    url = link(kind, name, version) if link is not None else None
    if url:
        context["ti"].xcom_push(key=XCOM_KEY, value=url)
    return url
