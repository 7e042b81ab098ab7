"""Write scikit-learn's 8x8 digits (1,797 real scans, 10 classes) as ``train/``, ``val/`` and ``test/`` PNG folders.

``python -m mlrunway.data data/digits`` writes them; the split is stratified and seeded, so every machine gets
the same files. ``val/`` (20%) is what a sweep selects on; ``test/`` (20%, taken from the rest) is never seen by
training or the sweep: a production endpoint's champion/challenger gate scores on it. Its 360 images are sized for
the gate's paired test: a challenger 5 points of accuracy better, with 10% of the images told apart, is promoted
about 9 times in 10 (``bench/gate.py``); the 180 of the earlier 10% split gave 6 in 10.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from mlrunway import check

SPLITS = ("train", "val", "test")

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp")


def write_digits(root: str | Path, *, val_fraction: float = 0.2, test_fraction: float = 0.2, seed: int = 0) -> Path:
    """Write the dataset under ``root`` (skipped when already complete); return ``root``."""
    import numpy as np
    from PIL import Image
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    root = Path(root)
    marker = root / ".complete-test-20"  # a folder of an earlier split (10% test) is rewritten
    if marker.exists():
        return root
    for part in SPLITS:  # an older layout, or a write that was cut short
        shutil.rmtree(root / part, ignore_errors=True)
    for stale in root.glob(".complete*"):
        stale.unlink()
    digits = load_digits()
    images = np.clip(digits.images * 16, 0, 255).astype(np.uint8)  # 0..16 -> 0..255
    rest_x, val_x, rest_y, val_y = train_test_split(images, digits.target, test_size=val_fraction, random_state=seed,
                                                    stratify=digits.target)
    train_x, test_x, train_y, test_y = train_test_split(rest_x, rest_y, test_size=test_fraction / (1 - val_fraction),
                                                        random_state=seed, stratify=rest_y)
    for part, xs, ys in (("train", train_x, train_y), ("val", val_x, val_y), ("test", test_x, test_y)):
        for index, (image, label) in enumerate(zip(xs, ys, strict=True)):
            folder = root / part / str(label)
            folder.mkdir(parents=True, exist_ok=True)
            Image.fromarray(image, mode="L").save(folder / f"{index:05d}.png")
    marker.touch()
    return root


def check_image_folder(field: str, root: str | Path) -> list[str]:
    """Check ImageFolder layout (train/ and val/, one folder per class, images inside); return the classes."""
    root = Path(root)
    if not root.is_dir():
        raise check.fail(field, f"folder {str(root)!r} does not exist", "pass a folder with train/ and val/ inside")
    classes: list[str] | None = None
    for part in ("train", "val"):
        split = root / part
        found = sorted(p.name for p in split.iterdir() if p.is_dir()) if split.is_dir() else []
        if not found:
            raise check.fail(field, f"{split} has no class folders", "lay data out as <root>/{train,val}/<class>/<image>")
        empty = [c for c in found if not any(f.suffix.lower() in IMAGE_SUFFIXES for f in (split / c).iterdir())]
        if empty:
            raise check.fail(field, f"class folder {split / empty[0]} holds no images", f"add {', '.join(IMAGE_SUFFIXES)} files")
        if classes is not None and found != classes:
            raise check.fail(field, f"train/ classes {classes} differ from val/ classes {found}", "use the same class folders in both")
        classes = found
    assert classes is not None
    return classes


