"""Getting osqueue's error back out of a Spark failure.

An error raised by the data source inside Spark's Python workers reaches the
driver as a Spark exception (``AnalysisException``, ``PythonException``,
``Py4JJavaError``) whose text holds the worker's traceback.
:func:`osqueue_error` finds the last ``osqueue.errors.X: message`` line in it
and rebuilds that error, so callers (and the CLI) see ``InvalidInput: payload:
...`` or ``BrokerUnavailable: ...`` instead of a JVM stack trace.
"""

from __future__ import annotations

import re

from osqueue import errors

_LINE = re.compile(r"osqueue\.errors\.([A-Za-z]+): ([^\n]*)")


def osqueue_error(exc: BaseException) -> errors.OsqueueError | None:
    """The osqueue error that caused ``exc`` (itself, its causes, or its text), if any."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, errors.OsqueueError):
            return seen
        seen = seen.__cause__
    found = _LINE.findall(str(exc))
    if not found:
        return None
    name, message = found[-1]
    cls = getattr(errors, name, None)
    if not isinstance(cls, type) or not issubclass(cls, errors.OsqueueError):
        return None
    if cls is errors.MissingExtra:
        return errors.OsqueueError(message)
    if cls is errors.InvalidInput:
        field, sep, _ = message.partition(": ")
        rebuilt: errors.OsqueueError = errors.InvalidInput(
            message, field=field if sep and " " not in field else None
        )
    else:
        try:
            rebuilt = cls(message)
        except TypeError:
            rebuilt = errors.OsqueueError(message)
    rebuilt.__cause__ = exc
    return rebuilt
