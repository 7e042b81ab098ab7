"""The tokenizer fit.py trains with and score.py serves with: words to int64 ids, one module both import.

A hashing vocabulary: each lower-cased word maps to ``1 + crc32(word) % (SIZE - 1)``, and 0 pads. Nothing to
fit or ship beside the model, and a word never seen in training still gets an id (shared with others by chance).
"""

from __future__ import annotations

import re
import zlib

import numpy as np

SIZE = 2048  # ids 1..SIZE-1 for words, 0 for padding
PAD = 0
MAX_WORDS = 64  # a longer text is cut to its first MAX_WORDS words
_WORD = re.compile(r"[a-z0-9']+")


def ids(text: str) -> list[int]:
    """A text's word ids, at most MAX_WORDS of them (at least one: an empty text is one padding id)."""
    words = _WORD.findall(text.lower())[:MAX_WORDS]
    return [1 + zlib.crc32(word.encode()) % (SIZE - 1) for word in words] or [PAD]


def batch(texts: list[str]) -> np.ndarray:
    """Texts as one int64 array (N, the longest's length), padded with PAD."""
    encoded = [ids(text) for text in texts]
    out = np.full((len(encoded), max(len(e) for e in encoded)), PAD, dtype=np.int64)
    for row, token_ids in enumerate(encoded):
        out[row, :len(token_ids)] = token_ids
    return out
