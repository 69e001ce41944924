"""The one exception type users see as a one-line message instead of a traceback."""


class NmtkError(Exception):
    """An error caused by the user's input (recipe, files, flags): shown as one line, no traceback."""

    exit_code = 1


class Interrupted(NmtkError):
    """Ctrl-C, with what was kept and how to go on: one line, exit code 130 (128 + SIGINT)."""

    exit_code = 130
