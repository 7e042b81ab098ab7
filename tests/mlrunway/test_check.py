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


@pytest.mark.parametrize(("validator", "field", "fix"), [
    (lambda value: check.job_name("job.name", value), "job.name", "use 1 to 255 letters"),
    (lambda value: check.model_name("model.name", value), "model.name", "use 1 to 255 letters"),
    (lambda value: check.endpoint_name(value), "endpoint.name", "use 3 to 32 letters"),
], ids=["job", "model", "endpoint"])
def test_a_name_error_echoes_a_long_name_shortened_with_its_field_and_fix(validator, field, fix):
    """Issue 76: a 5,000-character name was echoed whole, burying the field and the fix."""
    with pytest.raises(SpecError) as refused:
        validator("a" * 5000 + "/")
    message = str(refused.value)
    assert message.startswith(f"{field}: 'aaaa") and f"; {fix}" in message, message
    assert "characters cut" in message and "a/'" in message and len(message) < 300, message
