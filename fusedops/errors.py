"""User-facing errors: the CLI prints their message on one line and exits with status 2, without a traceback.

Subclasses say which kind of input was wrong; all carry the same one-line text the CLI prints."""


class FusedopsError(Exception):
    """An error caused by the user's input (file, model name, shapes, attributes); the message names the problem."""


class UsageError(FusedopsError, ValueError):
    """A bad argument to a command or API function (a count, a name, a size)."""


class InputFileError(FusedopsError):
    """An input file that cannot be read or is not what it must be (missing, unreadable, not ONNX, bad external
    data)."""


class OutputFileError(FusedopsError):
    """An output path that must not or cannot be written (exists without force, a folder or device, read-only
    folder, disk full)."""


class ModelError(FusedopsError, ValueError):
    """A model whose content is invalid (ill-typed or unknown attributes, inconsistent shapes, duplicate names)."""


class CatalogError(FusedopsError, ValueError):
    """A chain, attribute or shape that the catalog does not accept; the message names the problem."""
