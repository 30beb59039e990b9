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


# A user's value is shown at most this long in a message (the rest is cut, with its length said).
SHOW_MAX_CHARS = 120


def _escape(text: str) -> str:
    """Control characters (newlines included) as escapes: a message stays one line."""
    out = []
    for ch in text:
        code = ord(ch)
        if ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif code < 0x20 or 0x7F <= code < 0xA0 or ch in "\u2028\u2029\ufeff" or 0xD800 <= code < 0xE000:
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
        else:
            out.append(ch)
    return "".join(out)


def one_line(text: str) -> str:
    """A message as one printable line (what the CLI prints after ``error:``)."""
    return _escape(text)


def show(value: object) -> str:
    """A user value as it appears in error messages: strings quoted (control characters escaped, long ones cut),
    numbers as written (integers exactly), booleans as TOML writes them."""
    if isinstance(value, str):
        text = value if len(value) <= SHOW_MAX_CHARS else value[:SHOW_MAX_CHARS]
        more = "" if len(value) <= SHOW_MAX_CHARS else f"... ({len(value)} characters)"
        return '"' + _escape(text).replace('"', '\\"') + '"' + more
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) and value.bit_length() > 256:     # Python refuses to print > 4300 digits
        return f"an integer of {len(format(value, 'x'))} hex digits"
    if isinstance(value, (list, tuple, dict)):
        text = repr(value)
        return _escape(text) if len(text) <= SHOW_MAX_CHARS else _escape(text[:SHOW_MAX_CHARS]) + "..."
    return _escape(repr(value))
