"""The audit log: pinned record format, JSON escaping, buffering, rotation, and a full disk."""

from __future__ import annotations

import errno
import json
import logging
import os

import pytest

from qosmanager.executor import audit as audit_mod
from qosmanager.executor.audit import FIELDS, AuditLog
from qosmanager.framework.conditions import Conditions


def test_records_are_json_lines_with_the_pinned_fields(tmp_path) -> None:
    path = tmp_path / "a" / "audit.log"
    log = AuditLog(str(path), clock=lambda: 12.5)
    log.record(strategy='cpu"Suppress', action="write", target="cpu/kubepods/besteffort/cpu.cfs_quota_us",
               value="120000", old="-1", reason="BE usage ↑\nline", executed=True)
    log.record(strategy="memoryEvict", action="evict", target="default/be-1", uid="u1", reason="r",
               executed=False, error="PDB said no")
    assert not path.read_text()  # buffered until flush
    log.flush()
    lines = path.read_text().splitlines()
    recs = [json.loads(ln) for ln in lines]
    assert list(recs[0]) == list(FIELDS)
    assert recs[0]["strategy"] == 'cpu"Suppress' and recs[0]["reason"] == "BE usage ↑\nline"
    assert recs[0]["ts"] == 12.5 and recs[0]["executed"] is True and recs[0]["uid"] is None
    assert recs[1]["error"] == "PDB said no" and recs[1]["value"] is None
    assert log.counts == {"write:ok": 1, "evict:error": 1}


def test_rotation_keeps_a_bounded_number_of_files(tmp_path) -> None:
    path = tmp_path / "audit.log"
    log = AuditLog(str(path), max_bytes=2000, backups=2)
    for i in range(200):
        log.record(strategy="s", action="write", target=f"t{i}", reason="r" * 20, executed=True)
        log.flush()
    log.close()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["audit.log", "audit.log.1", "audit.log.2"]
    total = sum(1 for p in tmp_path.iterdir() for _ in p.read_text().splitlines())
    assert total < 200  # old records were dropped, the disk use is bounded
    assert all(p.stat().st_size < 2000 + 200 for p in tmp_path.iterdir())


# ---------------------------------------------------------------------------------------------
# a full disk never stops the agent


def _rec(log: AuditLog, i: int = 0) -> None:
    log.record(strategy="cpuSuppress", action="write", target=f"cpu/kubepods/besteffort/t{i}", value="2000",
               reason="r", executed=True)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
def test_a_full_disk_is_counted_and_logged_once_and_close_never_raises(caplog) -> None:
    conditions = Conditions()
    log = AuditLog("/dev/full", conditions=conditions)  # every write: ENOSPC
    with caplog.at_level(logging.ERROR, logger="qosmanager.executor.audit"):
        for i in range(50):
            _rec(log, i)
            _rec(log, i)
            log.flush()  # would raise on the old buffered file
        assert log.write_errors == 50 and log.dropped == 100
        cond = conditions.get(AuditLog.CONDITION)
        assert cond is not None and "ENOSPC" in cond.message
        log.close()  # the old file object raised ENOSPC here, on its own flush
        log.close()
    msgs = [r.getMessage() for r in caplog.records]
    assert sum("cannot write audit log /dev/full: ENOSPC" in m for m in msgs) == 1, msgs
    assert len(msgs) == 2  # the first failure, and the total on close: not one line per flush
    assert "100 record(s) could not be written" in msgs[-1]
    assert len(log.recent) == 100  # the in-memory tail keeps everything


def test_a_write_cut_short_by_a_full_disk_leaves_every_later_line_whole(tmp_path, monkeypatch) -> None:
    path = tmp_path / "audit.log"
    conditions = Conditions()
    log = AuditLog(str(path), conditions=conditions)
    real_write = os.write
    calls = {"n": 0}

    def full_after_half(fd: int, data: bytes) -> int:
        if fd != log._fd:
            return real_write(fd, data)
        calls["n"] += 1
        if calls["n"] == 1:
            return real_write(fd, bytes(data[: len(data) // 2]))  # the disk fills up mid-line
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    _rec(log, 1)
    log.flush()
    monkeypatch.setattr(audit_mod.os, "write", full_after_half)
    _rec(log, 2)
    log.flush()
    monkeypatch.setattr(audit_mod.os, "write", real_write)
    assert log.write_errors == 1 and log.dropped == 1
    assert conditions.get(AuditLog.CONDITION) is not None
    _rec(log, 3)  # space again
    log.flush()
    assert conditions.get(AuditLog.CONDITION) is None
    log.close()
    lines = path.read_text().splitlines()
    assert len(lines) == 3
    assert json.loads(lines[0])["target"].endswith("t1")
    with pytest.raises(json.JSONDecodeError):
        json.loads(lines[1])  # the cut line, ended so the next record starts on its own line
    assert json.loads(lines[2])["target"].endswith("t3")


@pytest.mark.parametrize("err", [errno.EIO, errno.EBADF])
def test_close_never_raises(tmp_path, err: int, monkeypatch) -> None:
    log = AuditLog(str(tmp_path / "audit.log"))
    _rec(log)

    def failing(fd: int, data: bytes) -> int:
        raise OSError(err, os.strerror(err))

    monkeypatch.setattr(audit_mod.os, "write", failing)
    log.close()  # flush fails
    monkeypatch.undo()
    log2 = AuditLog(str(tmp_path / "audit2.log"))
    os.close(log2._fd)  # close(2) of its descriptor fails with EBADF
    log2.close()


def test_a_rotation_that_fails_keeps_the_audit_going(tmp_path, caplog) -> None:
    path = tmp_path / "audit.log"
    (tmp_path / "audit.log.1").mkdir()  # os.replace onto a directory fails
    (tmp_path / "audit.log.1" / "x").write_text("")
    log = AuditLog(str(path), max_bytes=500, backups=1)
    with caplog.at_level(logging.ERROR, logger="qosmanager.executor.audit"):
        for i in range(20):
            _rec(log, i)
            log.flush()
    log.close()
    assert len(path.read_text().splitlines()) == 20  # nothing lost: still the same file
    assert sum("cannot rotate audit log" in r.getMessage() for r in caplog.records) == 1


def test_reopen_after_logrotate_moved_the_file_writes_to_a_new_one(tmp_path) -> None:
    """SIGHUP after logrotate renamed the file: the records before go to the moved file (flushed first),
    the later ones to a new file at the path."""
    path = str(tmp_path / "audit.log")
    a = AuditLog(path)
    a.record(strategy="s", action="write", target="t", reason="before", executed=True)
    os.rename(path, path + ".1")  # logrotate (no copytruncate)
    a.record(strategy="s", action="write", target="t", reason="buffered", executed=True)
    a.reopen()
    a.record(strategy="s", action="write", target="t", reason="after", executed=True)
    a.close()
    with open(path + ".1") as f:
        assert [json.loads(line)["reason"] for line in f] == ["before", "buffered"]
    with open(path) as f:
        assert [json.loads(line)["reason"] for line in f] == ["after"]


def test_reopen_that_cannot_open_counts_and_tries_again_at_the_next_flush(tmp_path) -> None:
    conditions = Conditions()
    d = tmp_path / "logs"
    path = str(d / "audit.log")
    a = AuditLog(path, conditions=conditions)
    os.rename(d, tmp_path / "moved")
    d.write_text("")  # where the directory was, a file: the path cannot be opened (ENOTDIR)
    a.reopen()
    a.record(strategy="s", action="write", target="t", reason="lost", executed=True)
    a.flush()
    assert a.dropped == 1 and conditions.get(AuditLog.CONDITION) is not None
    d.unlink()
    d.mkdir()
    a.record(strategy="s", action="write", target="t", reason="kept", executed=True)
    a.flush()
    a.close()
    assert conditions.get(AuditLog.CONDITION) is None
    with open(path) as f:
        assert [json.loads(line)["reason"] for line in f] == ["kept"]


class _Name(str):
    pass


@pytest.mark.parametrize("value", [
    "200000", "", 'a "quoted"\nline\\', "é ✓ \x00", _Name("sub"), None, True, False, 0, -3, 2**70, 1.5,
    1700000000.123456, float("nan"), float("inf"), -float("inf"), [1, "a", None], {"k": [True]},
])
def test_a_record_is_the_json_the_json_module_writes(tmp_path, value: object) -> None:
    # the audit formats its lines itself (it is per-write cost): byte for byte what json.dumps writes
    path = tmp_path / "audit.log"
    log = AuditLog(str(path))
    rec = log.record(strategy="s", action="write", target="cpu/x", reason="r", executed=True,
                     value=value, error="ENOENT", ts=1.25, extra_field=value)  # type: ignore[arg-type]
    log.close()
    assert path.read_text() == json.dumps(rec, separators=(", ", ": "), ensure_ascii=False) + "\n"
