"""Turn images into model inputs with the preprocessing recorded in a model's signature."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mlrunway.data.digits import IMAGE_SUFFIXES


def preprocess(image: Any, preprocessing: Mapping[str, Any]) -> Any:
    """One PIL image -> float32 array of shape (channels, H, W): color mode, resize, scale, normalize."""
    import numpy as np

    height, width = preprocessing["size"]
    image = image.convert(preprocessing.get("color", "L"))
    if image.size != (width, height):
        image = image.resize((width, height))
    array = np.asarray(image, dtype=np.float32) * float(preprocessing.get("scale", 1 / 255))
    array = (array - float(preprocessing.get("mean", 0.0))) / float(preprocessing.get("std", 1.0))
    return array[None] if array.ndim == 2 else array.transpose(2, 0, 1)


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
