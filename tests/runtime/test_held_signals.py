"""Signals that arrive while a child starts are acted on once it has, by the caller's handlers."""

from __future__ import annotations

import signal

import pytest

from opencode_sandbox.runtime.microsandbox.held_signals import signals_held


def test_a_signal_inside_is_raised_again_at_the_end_to_the_callers_handler() -> None:
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        reached_the_end_of_the_block = False
        with pytest.raises(KeyboardInterrupt), signals_held():
            signal.raise_signal(signal.SIGINT)
            reached_the_end_of_the_block = True
        assert reached_the_end_of_the_block
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, previous)


def test_an_ignored_signal_stays_ignored() -> None:
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with signals_held():
            signal.raise_signal(signal.SIGHUP)
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, previous)
