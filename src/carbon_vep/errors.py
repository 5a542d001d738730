"""Errors that carry the file (and line) they are about, for messages users can act on."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


class InputError(ValueError):
    """A user-supplied file is unusable; the message names the file and what to fix."""

    def __init__(self, path: object, problem: str, line: int | None = None) -> None:
        where = f"{path}" if line is None else f"{path}:{line}"
        super().__init__(f"{where}: {problem}")
        self.path = str(path)
        self.line = line
        self.problem = problem


class PanelUnusableError(InputError):
    """The panel as a whole cannot be scored (wrong build, wrong coordinates, no contigs)."""


class TokenizerMismatchError(RuntimeError):
    """The tokenizer does not behave like a 6-mer DNA tokenizer that we can score with."""


class UnsupportedModelError(RuntimeError):
    """The loaded model's logits are not what our scorer computes from its body and output
    layer (a scaled or soft-capped head, a bias we do not apply, a `get_decoder` that is not the
    body): refused by the start-up probe before any variant is scored."""


class EngineError(RuntimeError):
    """A model engine cannot run the job as configured (vLLM not installed, or not starting
    with these settings); the message names the job and the setting to change."""


class ContextTooLongError(ValueError):
    """A window needs more positions than the model was built for (a setting to lower)."""


@contextmanager
def reading_parquet(path: object) -> Iterator[None]:
    """A Parquet file that cannot be read (an OS, pyarrow or polars error inside the block: no
    such file, not Parquet, a column it lacks) as an InputError naming it."""
    import polars as pl  # here: the model's modules import this module, and need neither
    import pyarrow as pa

    try:
        yield
    except (OSError, pa.ArrowException, pl.exceptions.PolarsError) as err:
        raise InputError(path, f"cannot read this Parquet file: {err}") from err
