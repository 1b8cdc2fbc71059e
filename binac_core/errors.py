"""The one error type users see: a one-line message that names the bad value, raised before any compute."""


class BinacError(Exception):
    """A user-facing error; the CLI prints `error: <message>` on one line and exits with status 2."""
