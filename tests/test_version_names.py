"""Which folder names are versions: one rule for the export, which writes
them, and the readers, which list them (TF Serving's: ASCII digits, a
signed 64-bit integer)."""

import os
import re

import pytest

from keras_vit.checkpoint import sources
from keras_vit.export import versions as export_versions
from keras_vit.storage.version_names import (
    MAX_VERSION,
    version_folders,
    version_number,
)


@pytest.mark.parametrize("name, number", [
    # As TF Serving's safe_strto64 reads a name: leading zeros, a minus
    # sign and spaces around the digits taken.
    ("1", 1), ("007", 7), ("12/", 12), (str(MAX_VERSION), MAX_VERSION),
    (str(MAX_VERSION + 1), None), (str(-2**63), -2**63),
    (str(-2**63 - 1), None), ("\u00b2", None), ("\u0663", None),
    ("-1", -1), ("+1", None), ("1.5", None), (" 3\t", 3), ("3 4", None),
    ("\u00a03", None), ("", None), ("-", None), (".tmp-3", None),
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
    assert [n for n, _ in version_folders(os.listdir(tmp_path))] == [
        4, 5, 10]
    assert export_versions.existing_versions(str(tmp_path)) == [4, 5, 10]
    assert sources.saved_model_versions(str(tmp_path)) == ["4", "10"]
    assert sources.SavedModelSource(str(tmp_path)).version() == str(
        tmp_path / "10")


def test_a_version_of_leading_zeros_is_its_number(tmp_path, caplog):
    """A folder named 0012 is TF Serving's version 12: whole (no warning
    naming a folder 12 that is not there), taken (an export of version
    12 is refused, not written beside it) and read as the newest."""
    for name in ("0012", "5"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "saved_model.pb").write_bytes(b"")
    caplog.set_level("WARNING", logger="absl")
    assert export_versions.warn_incomplete(str(tmp_path)) == []
    assert caplog.text == ""
    assert export_versions.next_version(str(tmp_path)) == 13
    staged = tmp_path / ".staged"
    staged.mkdir()
    with pytest.raises(FileExistsError, match=re.escape(
            f"Version 12 already exists at {tmp_path / '0012'}")):
        export_versions.publish_version(str(staged), str(tmp_path), 12,
                                        auto=False)
    assert sources.saved_model_versions(str(tmp_path)) == ["5", "0012"]
    assert sources.SavedModelSource(str(tmp_path)).version() == str(
        tmp_path / "0012")
    os.remove(tmp_path / "0012" / "saved_model.pb")
    assert export_versions.warn_incomplete(str(tmp_path)) == [12]
    assert f"{tmp_path / '0012'} holds no saved_model.pb" in caplog.text


def test_an_automatic_version_lists_nothing_more(tmp_path, monkeypatch):
    """The lower-version warning lists the folder (a request on gs://)
    only for a version given by hand."""
    listed = []
    real = export_versions._folders
    monkeypatch.setattr(export_versions, "_folders",
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
