"""The docs site's hook (docs/hooks/reference.py), imported once for the tests that read what it generates from."""

from __future__ import annotations

import importlib.util
import sys

from tests.conftest import REPO

_NAME = "mlrunway_docs_reference"
if _NAME not in sys.modules:
    _spec = importlib.util.spec_from_file_location(_NAME, REPO / "docs" / "hooks" / "reference.py")
    assert _spec is not None and _spec.loader is not None
    sys.modules[_NAME] = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(sys.modules[_NAME])
reference = sys.modules[_NAME]
