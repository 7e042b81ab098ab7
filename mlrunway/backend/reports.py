"""Where the reports folder's layout was: :mod:`mlrunway.ledger.reports`, re-exported so code importing it from here
(the address the changelog gave) keeps working."""

from mlrunway.ledger.reports import BATCH, CARDS, MONITOR, REFERENCE, RUN_FILE, ReportsFolder, size_of

__all__ = ["BATCH", "CARDS", "MONITOR", "REFERENCE", "RUN_FILE", "ReportsFolder", "size_of"]
