"""The small validators every layer shares (mlrunway.check): each names its field and the fix."""

from __future__ import annotations

import pytest

from mlrunway import check
from mlrunway.errors import SpecError


@pytest.mark.parametrize(("value", "expected"), [
    (True, True), (False, False), (None, False), ("", False), ("True", True), ("true", True), ("1", True),
    ("False", False), ("false", False), ("0", False), (" True ", True),
])
def test_a_flag_reads_as_given_or_as_a_template_renders_it(value, expected):
    assert check.flag("keep_endpoint", value) is expected


@pytest.mark.parametrize("value", ["yes", "maybe", 1, 0.0, [True]])
def test_a_flag_that_is_no_yes_or_no_names_its_field(value):
    with pytest.raises(SpecError, match=r"^keep_endpoint: .* is not true or false; pass true or false"):
        check.flag("keep_endpoint", value)
