"""Turn images into model inputs with the preprocessing recorded in a model's signature."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .errors import SpecError

# The image files read (mlrunway.data.digits's own list: a test keeps the two the same; this module also runs
# without mlrunway, in an export job's code folder).
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp")

CHANNELS = {"L": 1, "RGB": 3, "RGBA": 4}


def normalization(preprocessing: Mapping[str, Any]) -> tuple[Any, Any]:
    """``mean`` and ``std`` as arrays that broadcast over (channels, H, W): a number for every channel, or one
    per channel (``[0.485, 0.456, 0.406]``). Anything else is a SpecError naming the field and the fix."""
    import numpy as np

    color = preprocessing.get("color", "L")
    if color not in CHANNELS:
        raise SpecError(f"signature.json preprocessing.color: {color!r} is not one of {sorted(CHANNELS)}; "
                        "write the PIL mode the model was trained on")
    channels = CHANNELS[color]
    values = []
    for key, default in (("mean", 0.0), ("std", 1.0)):
        raw = preprocessing.get(key, default)
        try:
            array = np.asarray(raw, dtype=np.float32).reshape(-1)
        except (TypeError, ValueError):
            array = np.asarray([], dtype=np.float32)
        if array.size not in (1, channels) or not np.isfinite(array).all():
            raise SpecError(f"signature.json preprocessing.{key}: {raw!r} is neither a number nor {channels} "
                            f"numbers (one per channel of {color!r}); write one value or one per channel")
        values.append(array.reshape(-1, 1, 1))
    if (values[1] <= 0).any():
        raise SpecError(f"signature.json preprocessing.std: {preprocessing.get('std')!r} has a value <= 0; "
                        "every std must be positive")
    return values[0], values[1]


def preprocess(image: Any, preprocessing: Mapping[str, Any]) -> Any:
    """One PIL image -> float32 array of shape (channels, H, W): color mode, resize, scale, normalize (per
    channel when ``mean`` and ``std`` are lists)."""
    import numpy as np

    mean, std = normalization(preprocessing)
    height, width = preprocessing["size"]
    image = image.convert(preprocessing.get("color", "L"))
    if image.size != (width, height):
        image = image.resize((width, height))
    array = np.asarray(image, dtype=np.float32) * float(preprocessing.get("scale", 1 / 255))
    array = array[None] if array.ndim == 2 else array.transpose(2, 0, 1)
    return ((array - mean) / std).astype(np.float32)


def load_labeled(folder: str | Path, classes: list[str], preprocessing: Mapping[str, Any], limit: int | None = None):
    """Images of ``folder/<class>/`` as (inputs (N, C, H, W) float32, labels (N,)), in a stable order."""
    import numpy as np
    from PIL import Image

    inputs, labels = [], []
    for label, name in enumerate(classes):
        for path in sorted((Path(folder) / name).iterdir()):
            if path.suffix.lower() in IMAGE_SUFFIXES:
                with Image.open(path) as image:
                    inputs.append(preprocess(image, preprocessing))
                labels.append(label)
    order = np.random.default_rng(0).permutation(len(inputs))[:limit]
    return np.stack(inputs)[order], np.asarray(labels)[order]
