"""Example data: scikit-learn's handwritten digits written out in ImageFolder layout (nothing is downloaded)."""

from mlrunway.data.digits import check_image_folder, write_digits

__all__ = ["check_image_folder", "write_digits"]
