"""Which folder names are versions: one rule for the export, which writes
them, and the readers, which list them (TF Serving's: ASCII digits, a
signed 64-bit integer)."""

import os

import pytest

from keras_vit.checkpoint import sources
from keras_vit.export import versions as export_versions
from keras_vit.storage.version_names import (
    MAX_VERSION,
    version_number,
    version_numbers,
)


@pytest.mark.parametrize("name, number", [
    ("1", 1), ("007", 7), ("12/", 12), (str(MAX_VERSION), MAX_VERSION),
    (str(MAX_VERSION + 1), None), ("\u00b2", None), ("\u0663", None),
    ("-1", None), ("1.5", None), (" 3", None), ("", None), (".tmp-3", None),
])
def test_version_number(name, number):
    assert version_number(name) == number


def test_the_export_and_the_reader_list_the_same_versions(tmp_path):
    """A version folder the export counts is one the reader loads (when
    it holds a SavedModel), and a name TF Serving skips is neither."""
    names = ["4", "10", "\u0663", str(MAX_VERSION + 1), "x1", "5"]
    for name in names:
        (tmp_path / name).mkdir()
        if name != "5":  # a version not completely published
            (tmp_path / name / "saved_model.pb").write_bytes(b"")
    assert version_numbers(os.listdir(tmp_path)) == [4, 5, 10]
    assert export_versions.existing_versions(str(tmp_path)) == [4, 5, 10]
    assert sources.saved_model_versions(str(tmp_path)) == [4, 10]
    assert sources.SavedModelSource(str(tmp_path)).version() == str(
        tmp_path / "10")


def test_an_automatic_version_lists_nothing_more(tmp_path, monkeypatch):
    """The lower-version warning lists the folder (a request on gs://)
    only for a version given by hand."""
    listed = []
    real = export_versions.existing_versions
    monkeypatch.setattr(export_versions, "existing_versions",
                        lambda folder: listed.append(folder) or real(folder))
    model_dir = tmp_path / "vit"
    model_dir.mkdir()
    for version, auto in ((1, True), (2, False)):
        staged = tmp_path / f"staged{version}"
        staged.mkdir()
        (staged / "saved_model.pb").write_bytes(b"")
        final = export_versions.publish_version(
            str(staged), str(model_dir), version, auto=auto)
        assert final == str(model_dir / str(version))
    assert listed == [str(model_dir)]  # the explicit version's check only
