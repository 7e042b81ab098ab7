from __future__ import annotations

import pytest

from mlrunway.data import check_image_folder
from mlrunway.errors import SpecError


def test_digits_are_written_in_imagefolder_layout(digits):
    assert check_image_folder("data", digits) == [str(i) for i in range(10)]
    counts = {split: sum(1 for _ in (digits / split).rglob("*.png")) for split in ("train", "val", "test")}
    assert counts == {"train": 1077, "val": 360, "test": 360}  # 60/20/20, stratified: every class in each split
    assert all(len(list((digits / "test" / str(c)).iterdir())) >= 35 for c in range(10))


def test_an_older_layout_is_rewritten_with_its_test_split(tmp_path, digits):
    from mlrunway.data import write_digits

    old = tmp_path / "old"
    for split in ("train", "val"):  # what an earlier version wrote, with its marker
        (old / split / "0").mkdir(parents=True)
        (old / split / "0" / "99999.png").write_bytes(b"stale")
    (old / ".complete").touch()
    write_digits(old)
    assert not (old / "train" / "0" / "99999.png").exists() and (old / "test").is_dir()


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
