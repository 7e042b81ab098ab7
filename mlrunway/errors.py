"""One exception tree for mlrunway.

::

    MlrunwayError
    ├── SpecError (also ValueError)        a bad input, raised before anything starts
    ├── NotSupportedOnBackend (also SpecError)  valid input this backend cannot run
    ├── NotFound (also LookupError)        a job, model or endpoint that does not exist
    ├── JobFailed                          a job or sweep ended Failed or Canceled
    │   └── JobTimedOut                    ... because a time limit ran out
    ├── ParityError                        ONNX output disagrees with PyTorch
    └── EndpointError                      an online endpoint or deployment failed
"""

from __future__ import annotations

__all__ = [
    "EndpointError",
    "JobFailed",
    "JobTimedOut",
    "MlrunwayError",
    "NotFound",
    "NotSupportedOnBackend",
    "ParityError",
    "SpecError",
]


class MlrunwayError(Exception):
    """Root of every error mlrunway raises on purpose."""


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


class ParityError(MlrunwayError):
    """The exported model's outputs differ from the source model's."""


class EndpointError(MlrunwayError):
    """An online endpoint or deployment failed."""
