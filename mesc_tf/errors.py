"""The one exception type a user is meant to see.

Everything that is the user's input being wrong (a missing file, a bad option, an image size
that does not fit the architecture, ...) raises :class:`MescError` with a one-line message that
says what is wrong, where, and what to do. The command-line entry points catch it, print
``error: <message>`` to stderr and exit with status 2, so a user never sees a traceback for
bad input. Library users get a normal exception (it subclasses ``ValueError``, as scikit-learn
users expect for bad arguments).

Input that is usable but suspect (negative pixels, a C that links no samples) gives a
:class:`MescWarning` instead, which the command-line scripts print as one ``warning:`` line.
"""


class MescError(ValueError):
    """A user-facing error: the message is one line: what, where, what to do."""


class MescWarning(UserWarning):
    """A user-facing warning, one line like a MescError's; the run goes on."""


def one_line(e: BaseException, limit=300) -> str:
    """An exception as one line for a MescError's parentheses: its type and message, the
    message's whitespace collapsed and cut at ``limit`` characters."""
    text = " ".join(str(e).split())[:limit]
    return f"{type(e).__name__}: {text}" if text else type(e).__name__
