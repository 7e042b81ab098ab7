"""Stand-ins for mlrunway's errors where the exporter runs without mlrunway (an export job's code folder; see
:mod:`.errors`). Only the job itself raises and catches them."""

from __future__ import annotations


class SpecError(ValueError):
    """A field of the model folder or of the export's settings is invalid; the message names it and the fix."""


class ParityError(RuntimeError):
    """The exported model's outputs differ from the source model's, or the export failed."""


def shorten(text: str, limit: int = 2000) -> str:
    """``text`` when it fits; else its head and tail (the export task shortens its messages again)."""
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    return f"{text[:head]} ... [{len(text) - limit} characters cut] ... {text[len(text) - (limit - head):]}"
