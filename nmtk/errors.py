"""The one exception type users see as a one-line message instead of a traceback."""


class NmtkError(Exception):
    """An error caused by the user's input (recipe, files, flags): shown as one line, no traceback."""
