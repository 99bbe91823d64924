"""What every ``fusedops`` command shares: the one-line-error parser, argument types, precision and output flags
spelled as trtexec and Polygraphy spell them, and progress for steps longer than a moment.

Nothing here imports torch, onnx or the runtimes: ``fusedops --help`` builds every parser from this and the
command modules alone.
"""

from __future__ import annotations

import argparse
import contextlib

from rich.console import Console


class Parser(argparse.ArgumentParser):
    """argparse that reports a bad command line as one line (``fusedops: error: ...``, exit 2) instead of the usage
    text plus the error; ``--help`` still shows the usage."""

    def error(self, message: str):
        sub = self.prog.split(" ", 1)[1] + ": " if " " in self.prog else ""
        self.exit(2, f"fusedops: error: {sub}{message}\n")


def positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {v}")
    return v


def non_negative_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not v >= 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"must be a non-negative number, got {text}")
    return v


# trtexec / Polygraphy spellings -> fusedops precision names. trtexec allows TF32 unless --noTF32; Polygraphy
# spells it --tf32. --noTF32 is strict FP32 (PyTorch's "highest").
PRECISION_FLAGS = {"fp16": "--fp16", "bf16": "--bf16", "tf32": "--tf32", "fp32": "--noTF32"}
PRECISION_HELP = {"fp16": "float16 (trtexec / Polygraphy --fp16)", "bf16": "bfloat16 (trtexec / Polygraphy --bf16)",
                  "tf32": "float32 with TF32 matrix products allowed (Polygraphy --tf32)",
                  "fp32": "strict float32: no TF32 (trtexec --noTF32)"}


def add_precision_flags(p: argparse.ArgumentParser, choices: tuple[str, ...], default: str | None,
                        dest: str = "precision", many: bool = False, old: str | None = "--precision") -> None:
    """One flag per precision the command supports (``--fp16 --bf16 --tf32 --noTF32``); ``many``: each flag adds its
    precision to a list (none given: ``default``, a list), else they are mutually exclusive. ``old``: the earlier
    spelling taking the name(s), kept working."""
    g = p.add_argument_group("precision (trtexec / Polygraphy flags)")
    if not many:
        g = g.add_mutually_exclusive_group()
    action = "append_const" if many else "store_const"
    for name in choices:
        g.add_argument(PRECISION_FLAGS[name], dest=dest, action=action, const=name, help=PRECISION_HELP[name])
    if old:
        g.add_argument(old, dest=dest, choices=list(choices), nargs="*" if many else None, metavar="P",
                       help=f"the same by name: {', '.join(choices)}")
    p.set_defaults(**{dest: default})


def add_force_flag(p: argparse.ArgumentParser, what: str = "the output") -> None:
    p.add_argument("--force", action="store_true", help=f"replace {what} if it exists (never an input)")


@contextlib.contextmanager
def progress(description: str, enabled: bool = True):
    """A rich spinner with elapsed time on stderr while a step runs (export, fuse, a native build)."""
    if not enabled:
        yield
        return
    console = Console(stderr=True)
    with console.status(f"{description} ...", spinner="dots"):
        yield
