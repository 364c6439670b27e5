"""SIGINT and SIGTERM as one exception that names the signal, so that every command stops the same way:
its drivers record what was interrupted and stop their workers (`finally` blocks run), and `kit.cli.main`
prints one line that names the signal and the command that resumes or cleans up, then exits 128 + signal
(130 for Ctrl-C, 143 for SIGTERM). Layer 0: no torch.
"""

from __future__ import annotations

import signal


class Interrupted(KeyboardInterrupt):
    """The operator (SIGINT) or the system (SIGTERM) stopped this process. `next_step` is what a driver
    that recorded the interruption tells the operator to run (None: run the same command again)."""

    def __init__(self, signum: int, next_step: str | None = None):
        super().__init__(signal.Signals(signum).name)
        self.signum, self.next_step = signum, next_step

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def _raise(signum, frame):
    raise Interrupted(signum)


def raise_on_signals() -> None:
    """From now on SIGINT and SIGTERM raise `Interrupted` in the main thread (the default SIGTERM ends the
    process without running a `finally`, which would leave the workers and a record marked running)."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _raise)


def interruption(e: BaseException) -> tuple[str, int]:
    """(signal name, exit status) of a KeyboardInterrupt: an `Interrupted`, or Python's own for SIGINT."""
    if isinstance(e, Interrupted):
        return e.signal_name, e.exit_code
    return "SIGINT", 128 + signal.SIGINT
