"""`report --prometheus` through TLS and basic auth, against Prometheus' own web config."""

from __future__ import annotations

import shutil
import ssl
import subprocess
import warnings
from datetime import datetime, timedelta
from pathlib import Path

import httpx
import pytest

from tests.fleet import fleetgen
from tests.fleet.conftest import FleetData, report_error, report_json

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import crypt  # bcrypt hashes for Prometheus' basic_auth_users (removed in Python 3.13)

OPENSSL = shutil.which("openssl")
pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(OPENSSL is None, reason="needs openssl to make a certificate"),
]


def test_tls_and_basic_auth(
    fleet_data: FleetData, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert OPENSSL is not None
    subprocess.run(
        [OPENSSL, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(tmp_path / "key.pem"), "-out", str(tmp_path / "cert.pem")],
        check=True, capture_output=True,
    )  # fmt: skip
    hashed = crypt.crypt("s3cret", crypt.mksalt(crypt.METHOD_BLOWFISH))
    web = tmp_path / "web.yml"
    web.write_text(
        f"tls_server_config:\n  cert_file: {tmp_path / 'cert.pem'}\n"
        f"  key_file: {tmp_path / 'key.pem'}\n"
        f"basic_auth_users:\n  reader: '{hashed}'\n"
    )
    (tmp_path / "password").write_text("s3cret\n")
    (tmp_path / "wrong").write_text("nope\n")
    tsdb = tmp_path / "tsdb"
    shutil.copytree(
        fleet_data.tsdb, tsdb, ignore=shutil.ignore_patterns("lock", "wal", "chunks_head")
    )
    trust = ssl.create_default_context(cafile=str(tmp_path / "cert.pem"))
    probe = httpx.Client(verify=trust, auth=("reader", "s3cret"))
    end = datetime.fromisoformat(fleet_data.end)
    span = ("--start", (end - timedelta(minutes=30)).isoformat(), "--end", fleet_data.end)
    with probe, fleetgen.running_prometheus(tsdb, tmp_path, web_config=web, ready=probe) as url:
        assert url.startswith("https://")
        auth = ("--prometheus-user", "reader", "--prometheus-password-file",
                str(tmp_path / "password"))  # fmt: skip
        ca = ("--prometheus-ca-file", str(tmp_path / "cert.pem"))
        found = report_json(capsys, "--prometheus", url, *span, *auth, *ca)
        assert len(found["deployments"]) == len(fleet_data.servers)
        line = report_error(capsys, "--prometheus", url, *span, *auth)
        assert "CERTIFICATE_VERIFY_FAILED" in line or "certificate verify failed" in line
        wrong = ("--prometheus-user", "reader", "--prometheus-password-file",
                 str(tmp_path / "wrong"))  # fmt: skip
        line = report_error(capsys, "--prometheus", url, *span, *wrong, *ca)
        assert "HTTP 401" in line
