"""The audit log: pinned record format, JSON escaping, buffering and rotation."""

from __future__ import annotations

import json

from qosmanager.executor.audit import FIELDS, AuditLog


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
