"""A broker's epoch file (broker/ha/epochs.py): survives a reload, replaces entries a failed
earlier attempt or a truncation left behind, and refuses a file it cannot trust."""

from __future__ import annotations

import pytest

from ferrymq.broker.ha.epochs import EpochEntry, EpochFile, EpochFileError


def test_entries_survive_a_reload_and_later_epochs_replace_what_was_cut(tmp_path):
    epochs = EpochFile(tmp_path)
    assert epochs.load() == [] and epochs.last_epoch == 0
    epochs.append(1, 0)
    epochs.append(2, 5000)
    epochs.append(4, 9000)
    assert EpochFile(tmp_path).load() == [EpochEntry(1, 0), EpochEntry(2, 5000), EpochEntry(4, 9000)]
    # Rejoining after a truncation to 7000 as a follower of epoch 5 (which began at 7000): the
    # entry of epoch 4, which began past the cut, is gone.
    epochs.append(5, 7000)
    assert EpochFile(tmp_path).load() == [EpochEntry(1, 0), EpochEntry(2, 5000), EpochEntry(5, 7000)]


@pytest.mark.parametrize("text", ["{oops", '[{"epoch": 1}]', '[{"epoch": 2, "startOffset": 0}, '
                                                               '{"epoch": 1, "startOffset": 10}]'])
def test_a_damaged_epoch_file_is_refused(tmp_path, text):
    (tmp_path / "epochs.json").write_text(text)
    with pytest.raises(EpochFileError):
        EpochFile(tmp_path).load()
