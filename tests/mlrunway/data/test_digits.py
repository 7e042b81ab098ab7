from __future__ import annotations

import pytest

from mlrunway.data import check_image_folder
from mlrunway.errors import SpecError


def test_digits_are_written_in_imagefolder_layout(digits):
    assert check_image_folder("data", digits) == [str(i) for i in range(10)]
    assert sum(1 for _ in (digits / "train").rglob("*.png")) + sum(1 for _ in (digits / "val").rglob("*.png")) == 1797


@pytest.mark.parametrize(
    ("layout", "message"),
    [
        pytest.param({}, "has no class folders", id="empty"),
        pytest.param({"train/a/x.png": b"", "val/b/x.png": b""}, "train/ classes \\['a'\\] differ from val/ classes", id="class-mismatch"),
        pytest.param({"train/a/x.txt": b"", "val/a/x.png": b""}, "holds no images", id="no-images"),
        pytest.param({"a/x.png": b""}, "train has no class folders", id="flat"),
    ],
)
def test_bad_layouts_name_the_problem(tmp_path, layout, message):
    root = tmp_path / "data"
    root.mkdir()
    for rel, content in layout.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(content)
    with pytest.raises(SpecError, match=message):
        check_image_folder("data_dir", root)


def test_missing_folder(tmp_path):
    with pytest.raises(SpecError, match="data_dir: folder .* does not exist; pass a folder with train/ and val/"):
        check_image_folder("data_dir", tmp_path / "nope")
