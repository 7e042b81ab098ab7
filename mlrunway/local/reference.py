"""The old name of :mod:`mlrunway.monitoring.reference`: ``python -m mlrunway.local.reference`` runs it, as the
monitor's message once said to."""

from __future__ import annotations

from mlrunway.monitoring.reference import main

if __name__ == "__main__":
    main()
