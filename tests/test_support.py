"""The test layers' own rules (docs/contributing.md#rules): a missing prerequisite skips locally, fails in CI."""

import pytest

from tests.support import missing_prerequisite


def test_missing_prerequisite_skips_locally_and_fails_under_ci(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no Maven Central"):
        missing_prerequisite("no Maven Central")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="missing prerequisite under CI=true: no Maven Central"):
        missing_prerequisite("no Maven Central")
