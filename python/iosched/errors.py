"""The one error type for bad input: rendered by the CLI as a single line, exit code 2."""

from __future__ import annotations


class SpecError(Exception):
    """Bad user input (spec, job file, preset, CLI flag).

    ``file`` is the file as the user named it (or None for a CLI flag), ``key`` the offending key or option
    (or None), ``message`` what was expected.  ``str(err)`` is the one-line form ``file: key: message``.
    """

    def __init__(self, file: str | None, key: str | None, message: str):
        self.file = file
        self.key = key
        self.message = message
        super().__init__(str(self))

    def __str__(self) -> str:
        return ": ".join(p for p in (self.file, self.key, self.message) if p)

    def with_context(self, suffix: str) -> "SpecError":
        return SpecError(self.file, self.key, f"{self.message} {suffix}")


def show(value: object) -> str:
    """A user value as it appears in error messages: strings quoted, the rest as Python prints them."""
    if isinstance(value, str):
        return '"' + value.replace('"', '\\"') + '"'
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)
