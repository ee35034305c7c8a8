"""The outage log: a line when failures start, a reminder a minute, a line when it works again."""

from __future__ import annotations

import logging

import pytest

from intel_device_plugins.kube.outage import OutageLog


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_five_minute_outage_retried_every_second_takes_six_lines(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    logger = logging.getLogger("test.outage")
    outage = OutageLog("following resourceslices", logger, clock=clock)
    with caplog.at_level(logging.INFO, logger="test.outage"):
        outage.succeeded()  # working all along: nothing to say
        for _ in range(300):
            outage.failed(ConnectionRefusedError("refused"), 1.0)
            clock.now += 1.0
        assert outage.failing
        outage.succeeded()
        outage.succeeded()
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 1 + 4 + 1, lines  # down, reminders at 60, 120, 180 and 240 s, up
    assert lines[0] == "following resourceslices failed: refused; retrying in 1.0 s"
    assert lines[1] == "following resourceslices still failing after 60 s and 61 attempts: refused"
    assert lines[-1] == "following resourceslices works again after 300 s and 300 failed attempts"
    assert [record.levelno for record in caplog.records] == [logging.WARNING] * 5 + [logging.INFO]
    assert not outage.failing


def test_a_second_outage_is_reported_afresh(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    outage = OutageLog("x", logging.getLogger("test.outage2"), clock=clock)
    with caplog.at_level(logging.INFO, logger="test.outage2"):
        for _ in range(2):
            outage.failed(OSError("down"), 1.0)
            clock.now += 5
            outage.succeeded()
    assert [record.getMessage() for record in caplog.records] == [
        "x failed: down; retrying in 1.0 s",
        "x works again after 5 s and 1 failed attempts",
    ] * 2
