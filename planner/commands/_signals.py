"""Ctrl-C and SIGTERM for every `kplan` command (planner.cli installs the handler; a command may take the
first signal for a graceful stop). A module of its own so that `python -m planner.cli` (where planner.cli is
`__main__`) and the commands share one instance."""

from __future__ import annotations

import signal
from collections.abc import Callable


class Signals:
    """SIGINT (Ctrl-C) and SIGTERM (what Airflow, systemd and `kill` send) are handled alike, by every command.

    The first one either goes to the running command's graceful stop (apply: finish the batch in flight,
    remove what is no longer needed, record the state), which answers at once on stderr, or, with none,
    raises KeyboardInterrupt; a second one always raises it. Exit 128 + the signal: 130, 143."""

    def __init__(self) -> None:
        self.graceful: Callable[[str], bool] | None = None   # returns True when it took the stop request
        self.reset()

    def reset(self) -> None:
        self.signum: int | None = None
        self.count = 0

    def handle(self, signum: int, frame: object) -> None:
        self.count += 1
        if self.signum is None:
            self.signum = signum
        name = signal.Signals(signum).name
        if self.count == 1 and self.graceful is not None and self.graceful(name):
            return
        raise KeyboardInterrupt(name)

    def by(self) -> str:
        return f" by {signal.Signals(self.signum).name}" if self.signum is not None else ""

    def exit_code(self) -> int:
        return 128 + (self.signum or signal.SIGINT)


SIGNALS = Signals()
