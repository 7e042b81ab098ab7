"""What a run spends and where its records are kept, over the backend contract: what each job cost
(:mod:`~mlrunway.ledger.cost`), the budget a run cannot exceed (:mod:`~mlrunway.ledger.budget`) and the reports
folder's layout (:mod:`~mlrunway.ledger.reports`).

A backend gives the data (``Metered``'s :class:`~mlrunway.backend.types.Usage`, ``Priced``'s
:class:`~mlrunway.backend.rates.RateCard`); the prices, the budget and the folder are written here once, for every
backend. A layer above :mod:`mlrunway.backend` and below :mod:`mlrunway.sweep` (the import contracts).
"""

__all__: list[str] = []
