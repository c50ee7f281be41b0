"""The fuzz suites' harness: run a console-script entry point in this process under an alarm and
classify what it did (clean error, correct success, traceback, hang, silent wrong result).

Shared by ``tests/test_fuzz_inputs.py`` and ``tests/test_fuzz_diagnose.py``.
"""

from __future__ import annotations

import contextlib
import io
import signal
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class Outcome:
    """What one command run did."""

    code: int | None
    out: str
    err: str
    escaped: str = ""  # the traceback of an exception that escaped the entry point
    hung: bool = False


class _Hang(BaseException):
    """Raised by the alarm; a BaseException so no ``except Exception`` in the code swallows it."""


def invoke_entry(main: Callable[[], None], argv: list[str], seconds: int = 60) -> Outcome:
    """Run the entry point ``main`` with ``sys.argv = argv`` as the console script does, under
    an alarm of ``seconds``; never raises."""
    out, err = io.StringIO(), io.StringIO()

    def alarm(signum, frame):
        raise _Hang

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    saved_argv = sys.argv
    sys.argv = [str(a) for a in argv]
    code: int | None = 0
    escaped, hung = "", False
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main()
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except _Hang:
        hung, code = True, None
    except BaseException:
        escaped, code = traceback.format_exc(), None
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        sys.argv = saved_argv
    return Outcome(code, out.getvalue(), err.getvalue(), escaped, hung)


def classify(o: Outcome, check_ok: Callable[[Outcome], str] | None) -> tuple[str, str]:
    """``(kind, why)``: kind is clean, ok, traceback, hang or silent.

    ``check_ok`` says what is wrong with a successful run ("" when it is right); None means
    only a clean error is right.
    """
    if o.hung:
        return "hang", "no answer before the alarm"
    if o.escaped:
        return "traceback", o.escaped.strip().splitlines()[-1]
    if "Traceback" in o.err:
        return "traceback", o.err.strip().splitlines()[-1]
    if o.code != 0:
        lines = [line for line in o.err.splitlines() if line.strip()]
        if len(lines) == 1 and lines[0].startswith("error: "):
            return "clean", lines[0]
        return "silent", f"exit {o.code} without one error line: {o.err[-300:]!r}"
    if check_ok is None:
        return "silent", f"exit 0 where an error was expected: {o.out[-300:]!r}"
    problem = check_ok(o)
    return ("silent", problem) if problem else ("ok", "")
