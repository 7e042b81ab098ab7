"""No message longer than a screen: mlrunway's own errors, and a library's exception as it leaves an operator."""

from __future__ import annotations

import traceback

from mlrunway.errors import SCREEN_CHARS, JobFailed, MlrunwayError, shorten, shorten_exception


def test_a_message_over_a_screen_keeps_its_head_and_tail_and_counts_what_was_cut():
    text = "head " + "x" * 11_000_000 + " tail"
    short = shorten(text)
    assert len(short) <= SCREEN_CHARS
    assert short.startswith("head ") and short.endswith(" tail")
    cut = int(short.split("[")[1].split(" characters cut]")[0])
    assert len(short) - len(f" ... [{cut} characters cut] ... ") + cut == len(text)
    assert shorten("fits") == "fits"


def test_mlrunway_errors_are_shortened_as_they_are_made():
    assert len(str(JobFailed("job x: " + "stderr line\n" * 100_000))) <= SCREEN_CHARS


class _BodyError(Exception):
    """A library exception whose message comes from an attribute, as azure-core's HttpResponseError's does."""

    def __init__(self, body: str) -> None:
        super().__init__()
        self.body = body

    def __str__(self) -> str:
        return self.body


def test_every_exception_of_a_chain_is_shortened_and_the_traceback_fits_a_few_screens():
    try:
        try:
            raise _BodyError("<html>" + "y" * 5_000_000)
        except _BodyError as inner:
            raise OSError(36, "File name too long", "ws/" * 3_000_000) from inner
    except OSError as exc:
        raised, short = exc, shorten_exception(exc)
    assert short is raised and len(str(short)) <= SCREEN_CHARS
    cause = short.__cause__
    assert isinstance(cause, MlrunwayError) and str(cause).startswith("_BodyError: <html>yyy")
    assert cause.__traceback__ is not None  # where the library raised it is kept
    assert len("".join(traceback.format_exception(short))) < 4 * SCREEN_CHARS + 2000
