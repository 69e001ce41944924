"""The one exception type users see as a one-line message instead of a traceback."""


#: What pydantic writes before a validator's own words ("Value error, expected a string or ...").
_VALUE_ERROR = "Value error, "


def validator_words(message: str) -> str:
    """``message`` (a pydantic error's, or a line quoting one) without pydantic's "Value error, "
    prefix: the validator's words alone, as recipe, request and option errors show them."""
    return message.replace(_VALUE_ERROR, "")


class NmtkError(Exception):
    """An error caused by the user's input (recipe, files, flags): shown as one line, no traceback."""

    exit_code = 1


class Interrupted(NmtkError):
    """Ctrl-C or SIGTERM, with what was kept and how to go on: one line, exit code 130 (128 + SIGINT) or
    143 (128 + SIGTERM)."""

    exit_code = 130

    def __init__(self, message: str, exit_code: int = 130) -> None:
        super().__init__(message)
        self.exit_code = exit_code
