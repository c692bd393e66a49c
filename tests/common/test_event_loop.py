"""The entry points' loop choice: asyncio by default, uvloop on request, a clear error otherwise."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ferrymq.common import event_loop
from ferrymq.common.config_loader import ConfigError


def test_the_standard_loop_is_the_default(monkeypatch):
    monkeypatch.delenv("FERRYMQ_EVENT_LOOP", raising=False)
    assert event_loop.chosen() == "asyncio"


def test_an_unknown_loop_is_refused_with_the_choices(monkeypatch):
    monkeypatch.setenv("FERRYMQ_EVENT_LOOP", "tokio")
    with pytest.raises(ConfigError, match="asyncio, uvloop"):
        event_loop.chosen()


def test_the_cli_says_what_is_wrong_with_the_loop_setting():
    done = subprocess.run([sys.executable, "-m", "ferrymq.cli.main", "admin", "topic", "list", "-n", "127.0.0.1:1"],
                          env={"FERRYMQ_EVENT_LOOP": "tokio", "PATH": "/usr/bin:/bin"}, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode != 0
    assert "FERRYMQ_EVENT_LOOP must be one of" in done.stderr
