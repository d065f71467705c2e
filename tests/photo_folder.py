"""A folder of real photos, one sub-folder per class: random crops of the
two photographs that scikit-learn ships (china.jpg, flower.jpg), saved
as JPEG files, as a user's own pictures would be."""

import os

import numpy as np
from PIL import Image
from sklearn.datasets import load_sample_images


def write_photo_folder(root, per_class: int = 12, split: str = "",
                       seed: int = 0) -> list:
    """Writes `root`/[`split`/]<class>/<class>_NN.jpg, `per_class` crops
    (64 to 160 pixels square) of each photo; returns the class names."""
    photos = load_sample_images()
    rng = np.random.default_rng(seed)
    names = []
    for filename, image in zip(photos.filenames, photos.images):
        name = os.path.splitext(os.path.basename(filename))[0]
        folder = os.path.join(str(root), split, name)
        os.makedirs(folder, exist_ok=True)
        height, width, _ = image.shape
        for i in range(per_class):
            side = int(rng.integers(64, 160))
            top = int(rng.integers(0, height - side))
            left = int(rng.integers(0, width - side))
            Image.fromarray(image[top:top + side, left:left + side]).save(
                os.path.join(folder, f"{name}_{i:02d}.jpg"), quality=90)
        names.append(name)
    return sorted(names)
