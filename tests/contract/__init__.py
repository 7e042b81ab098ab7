"""The backend contract's behaviour, written once and run on every backend (:mod:`tests.contract.conftest`)."""
