"""The Airflow adapter: the hook that turns a connection into a backend, the triggers, the links and the UI
plugin's pages. The only package that imports Airflow (import-linter holds the rest to it)."""

from __future__ import annotations

__all__ = ["hook", "links", "provider", "summary", "triggers", "ui", "views"]
