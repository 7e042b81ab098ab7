"""Write scikit-learn's 8x8 digits (1,797 real scans, 10 classes) as ``train/`` and ``val/`` PNG folders.

``python -m mlrunway.data data/digits`` writes them; the split is stratified and seeded, so every
machine gets the same files.
"""

from __future__ import annotations

from pathlib import Path

from mlrunway.specs import check

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp")


def write_digits(root: str | Path, *, val_fraction: float = 0.2, seed: int = 0) -> Path:
    """Write the dataset under ``root`` (skipped when already complete); return ``root``."""
    import numpy as np
    from PIL import Image
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    root = Path(root)
    marker = root / ".complete"
    if marker.exists():
        return root
    digits = load_digits()
    images = np.clip(digits.images * 16, 0, 255).astype(np.uint8)  # 0..16 -> 0..255
    split = train_test_split(images, digits.target, test_size=val_fraction, random_state=seed, stratify=digits.target)
    for part, xs, ys in (("train", split[0], split[2]), ("val", split[1], split[3])):
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


