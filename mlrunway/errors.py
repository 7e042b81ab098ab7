"""One exception tree for mlrunway.

::

    MlrunwayError
    ├── SpecError (also ValueError)        a bad input, raised before anything starts
    ├── NotSupportedOnBackend (also SpecError)  valid input this backend cannot run
    ├── NotFound (also LookupError)        a job, model or endpoint that does not exist
    ├── JobFailed                          a job or sweep ended Failed or Canceled
    │   └── JobTimedOut                    ... because a time limit ran out
    ├── ParityError                        ONNX output disagrees with PyTorch
    ├── EndpointError                      an online endpoint or deployment failed
    ├── Unavailable                        a read brought no news: the service is briefly away (a wait reads again)
    └── WatchLost                          ... for longer than the backend's transient_outage_s
"""

from __future__ import annotations

__all__ = [
    "SCREEN_CHARS",
    "EndpointError",
    "JobFailed",
    "JobTimedOut",
    "MlrunwayError",
    "NotFound",
    "NotSupportedOnBackend",
    "ParityError",
    "SpecError",
    "Unavailable",
    "WatchLost",
    "shorten",
    "shorten_exception",
]

SCREEN_CHARS = 2000  # a screen: 25 lines of 80 columns


def shorten(text: str, limit: int = SCREEN_CHARS) -> str:
    """``text`` when it fits on a screen; else its head and tail with what was cut in between counted."""
    if len(text) <= limit:
        return text
    marker = " ... [{} characters cut] ... "
    keep = limit - len(marker) - 10
    head = keep * 2 // 3
    return text[:head] + marker.format(len(text) - keep) + text[len(text) - (keep - head):]


def shorten_exception(exc: BaseException, limit: int = SCREEN_CHARS) -> BaseException:
    """``exc`` with each message of its chain (what it was raised from or during) at most a screen long, so a
    library's 11 MB message never reaches a task log whole. An exception whose class builds its message from
    elsewhere than its args is replaced by an MlrunwayError naming the class, with the same traceback."""
    first = _fit(exc, limit)
    current: BaseException | None = first
    seen = set()
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if current.__cause__ is not None:
            current.__cause__ = _fit(current.__cause__, limit)
            current = current.__cause__
        elif current.__context__ is not None and not current.__suppress_context__:
            current.__context__ = _fit(current.__context__, limit)
            current = current.__context__
        else:
            current = None
    return first


def _fit(exc: BaseException, limit: int) -> BaseException:
    if len(str(exc)) <= limit:
        return exc
    for attr in ("filename", "filename2"):  # an OSError's message names its paths whole
        if isinstance(path := getattr(exc, attr, None), str):
            setattr(exc, attr, shorten(path, limit // 3))
    if len(str(exc)) > limit:
        exc.args = (shorten(str(exc), limit),)
    if len(str(exc)) <= limit:
        return exc
    kind = type(exc).__name__
    short = MlrunwayError(f"{kind}: {shorten(str(exc), limit - len(kind) - 2)}").with_traceback(exc.__traceback__)
    short.__cause__, short.__context__ = exc.__cause__, exc.__context__
    short.__suppress_context__ = exc.__suppress_context__
    return short


class MlrunwayError(Exception):
    """Root of every error mlrunway raises on purpose; a message longer than a screen is shortened."""

    def __init__(self, *args: object) -> None:
        super().__init__(*(shorten(a) if isinstance(a, str) else a for a in args))


class SpecError(MlrunwayError, ValueError):
    """A spec field is invalid; the message names the field, the value and the fix."""


class NotSupportedOnBackend(SpecError):
    """The spec is valid but this backend cannot run it."""


class NotFound(MlrunwayError, LookupError):
    """A named resource does not exist."""


class JobFailed(MlrunwayError):
    """A job ended without success."""


class JobTimedOut(JobFailed):
    """A job ran past its time limit and was canceled."""


class Unavailable(MlrunwayError):
    """A read that brought no news: the service is briefly away (a backend maps its own transient failures here:
    Azure's 408, 429, 5xx and dropped connections after azure-core's own retries). A wait reads again after
    ``retry_after_s`` (the service's Retry-After) or a backoff of its own; nothing is concluded from it."""

    def __init__(self, message: str, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class WatchLost(MlrunwayError):
    """A wait whose reads brought no news for longer than the backend's ``transient_outage_s``: what it waited
    on may still be running, and a later try may re-attach to it."""

    def __init__(self, what: str, backend: str, seconds: float, last: BaseException) -> None:
        super().__init__(f"{what} may still be running on the {backend} backend: its status could not be read for "
                         f"{seconds:.0f} s ({shorten(str(last), 500)})")
        self.seconds = seconds


class ParityError(MlrunwayError):
    """The exported model's outputs differ from the source model's."""


class EndpointError(MlrunwayError):
    """An online endpoint or deployment failed."""
