"""Logging helpers: the keyed limiter for repeated failures and the JSON-lines log format."""

from __future__ import annotations

import io
import json
import logging

import pytest

from qosmanager.logfmt import JsonFormatter, Repeat, RepeatLimiter, setup_logging, span_text


class Clock:
    def __init__(self, t: float = 100.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_a_repeated_failure_is_said_once_then_as_a_count_per_interval() -> None:
    clock = Clock()
    lim = RepeatLimiter(300.0, clock=clock)
    assert lim.hit("cpu.max", "EACCES") == Repeat(True)
    reports = []
    for _ in range(600):  # one failure a second for ten minutes
        clock.t += 1.0
        rep = lim.hit("cpu.max", "EACCES")
        if rep is not None:
            reports.append(rep)
    assert [(r.first, r.count) for r in reports] == [(False, 300), (False, 300)]
    assert reports[0].seconds == pytest.approx(300.0)
    assert reports[0].times() == "300 more times in the last 5 min"
    assert lim.suppressed == 600


def test_another_error_or_another_key_is_a_new_failure() -> None:
    clock = Clock()
    lim = RepeatLimiter(300.0, clock=clock)
    assert lim.hit("a", "EACCES") is not None
    assert lim.hit("a", "EACCES") is None
    assert lim.hit("b", "EACCES") == Repeat(True)  # another file
    assert lim.hit("a", "EINVAL") == Repeat(True)  # the same file failing differently


def test_recovery_reports_what_was_not_said_yet_and_rearms() -> None:
    clock = Clock()
    lim = RepeatLimiter(300.0, clock=clock)
    lim.hit("k", 1)
    assert lim.clear("k") is None  # failed once: everything was said
    lim.hit("k", 1)
    for _ in range(3):
        clock.t += 10
        lim.hit("k", 1)
    rep = lim.clear("k")
    assert rep is not None and (rep.first, rep.count) == (False, 3) and rep.seconds == pytest.approx(30.0)
    assert "k" not in lim
    assert lim.hit("k", 1) == Repeat(True)  # failing again later is news again


def test_due_sums_up_a_failure_that_stopped_repeating() -> None:
    clock = Clock()
    lim = RepeatLimiter(60.0, clock=clock)
    lim.hit("k", 1, info="first")
    clock.t += 5
    lim.hit("k", 1, info="latest")
    assert lim.due() == []  # the interval has not passed
    clock.t += 60
    ((key, info, rep),) = lim.due()
    assert (key, info, rep.count) == ("k", "latest", 1)
    assert lim.due() == []  # said once


def test_tracking_is_bounded_and_forgettable() -> None:
    lim = RepeatLimiter(300.0, clock=Clock(), max_keys=3)
    for k in ("a", "b", "c", "d"):
        lim.hit(k)
    assert len(lim) == 3 and "a" not in lim
    lim.forget(lambda k: k in ("b", "c"))
    assert len(lim) == 1 and "d" in lim
    with pytest.raises(ValueError):
        RepeatLimiter(0)


def test_span_text() -> None:
    assert span_text(45) == "45 s"
    assert span_text(300.4) == "5 min"
    assert span_text(7200) == "2 h"
    assert Repeat(False, 1, 30).times() == "1 more time in the last 30 s"


def _record(msg: str, *args: object, extra: dict | None = None, exc_info: object = None) -> logging.LogRecord:
    logger = logging.getLogger("qosmanager.test")
    return logger.makeRecord(logger.name, logging.WARNING, __file__, 1, msg, args,
                             exc_info, extra=extra)


def test_json_lines_carry_the_standard_keys_and_the_extra_fields() -> None:
    rec = _record("wrote %s", "cpu.max", extra={"mode": "standalone", "strategies": {"cpuSuppress": ["X"]},
                                                "ratio": float("nan")})
    obj = json.loads(JsonFormatter().format(rec))
    assert obj["level"] == "WARNING" and obj["logger"] == "qosmanager.test" and obj["msg"] == "wrote cpu.max"
    assert isinstance(obj["ts"], float)
    assert obj["mode"] == "standalone" and obj["strategies"] == {"cpuSuppress": ["X"]}
    assert obj["ratio"] == "nan"  # valid JSON, not NaN
    assert "args" not in obj and "levelno" not in obj and "pathname" not in obj


def test_json_lines_put_a_traceback_in_one_field() -> None:
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        import sys

        rec = _record("failed", exc_info=sys.exc_info())
    line = JsonFormatter().format(rec)
    assert "\n" not in line
    assert "RuntimeError: boom" in json.loads(line)["exc"]


def test_setup_logging_replaces_only_its_own_handler() -> None:
    root = logging.getLogger()
    level = root.level
    other = logging.NullHandler()
    root.addHandler(other)
    first, second = io.StringIO(), io.StringIO()
    try:
        setup_logging(logging.INFO, "text", first)
        h = setup_logging(logging.INFO, "json", second)
        logging.getLogger("qosmanager.x").info("hello %d", 1)
        assert first.getvalue() == ""
        assert json.loads(second.getvalue())["msg"] == "hello 1"
        assert other in root.handlers and root.handlers.count(h) == 1
        with pytest.raises(ValueError):
            setup_logging(logging.INFO, "xml")
    finally:
        root.removeHandler(other)
        root.removeHandler(h)
        root.setLevel(level)


def test_outside_text_is_shown_escaped_and_truncated() -> None:
    from qosmanager.logfmt import shown

    assert shown("nginx") == "nginx" and shown(3) == "3"
    forged = "app\x1b[2K\r2026-01-01 00:00:00,000 ERROR forged\n"
    assert shown(forged) == "app\\x1b[2K\\r2026-01-01 00:00:00,000 ERROR forged\\n"
    assert shown("a" * 500) == "a" * 197 + "..." and len(shown("\x1b" * 500, 64)) == 64


def test_a_host_application_name_cannot_forge_a_log_line(caplog: pytest.LogCaptureFixture) -> None:
    """A host application's name reaches the log through the errors about its cgroup path: escaped and
    cut like a pod's fields."""
    from qosmanager.host.cgroups import CgroupLayout
    from qosmanager.host.roots import HostRoots

    layout = CgroupLayout(HostRoots(cgroup="/nonexistent"), 2, "cgroupfs")
    name = "x\x1b[2K\r2026-01-01 00:00:00,000 ERROR forged" + "y" * 1000
    for app in ({"name": name, "cgroupPath": {"base": "Elsewhere"}},
                {"name": name, "cgroupPath": {"relativePath": "../../etc\n"}}):
        with pytest.raises(ValueError) as err:
            layout.host_app_dir(app)
        message = str(err.value)
        assert message.isprintable() and "\x1b" not in message and len(message) < 600, message
        logging.getLogger("t").warning("%s", err.value)
    assert all(r.getMessage().isprintable() for r in caplog.records)
