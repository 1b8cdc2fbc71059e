"""The base of the project's kinds: string enums whose values are the identifiers stored and shown
(binac_core/rl/kinds.py, the adapter roles of binac_core/model/stage_io.py)."""

from __future__ import annotations

from enum import Enum


class Kind(str, Enum):
    """A string enum whose `str()` and f-string format are its value (as Python 3.11's `StrEnum`), so a member
    written into a file name, a tag, a param or a message is its identifier."""

    def __str__(self) -> str:
        return self.value
