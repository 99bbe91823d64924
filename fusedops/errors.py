"""User-facing errors: the CLI prints their message on one line and exits non-zero, without a traceback."""


class FusedopsError(Exception):
    """An error caused by the user's input (file, model name, shapes, attributes); the message names the problem."""
