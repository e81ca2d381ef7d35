"""Secrets from config never reach messages or logs; TLS and ACL options reach the clients."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import structlog

from hivemem.config import RedisSettings, Settings
from hivemem.errors import StoreUnavailable
from hivemem.logs import configure_logging
from hivemem.store.redis import connect, connection_options

PASSWORD = "s3cret-Pa55word"
API_KEY = "hm_0123456789ab_" + "k" * 43


def test_redis_credentials_and_tls_options() -> None:
    plain = connection_options(RedisSettings(username="svc", password=PASSWORD))
    assert plain["username"] == "svc" and plain["password"] == PASSWORD
    assert "ssl_ca_certs" not in connection_options(
        RedisSettings(ssl_ca_certs=Path("/etc/ca.pem")))
    tls = connection_options(RedisSettings(url="rediss://cache:6380/0",
                                           ssl_ca_certs=Path("/etc/ca.pem")))
    assert tls["ssl_ca_certs"] == "/etc/ca.pem"
    settings = Settings.model_validate({
        "redis": {"password": PASSWORD}, "qdrant": {"api_key": PASSWORD, "https": True}})
    assert PASSWORD not in repr(settings) and PASSWORD not in str(settings.model_dump())


def test_connection_errors_do_not_show_passwords() -> None:
    with pytest.raises(StoreUnavailable) as caught:
        connect(RedisSettings(url=f"redis://svc:{PASSWORD}@127.0.0.1:1/0",
                              connect_timeout=0.2))
    assert PASSWORD not in str(caught.value)


def test_logs_never_carry_keys_or_passwords(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("debug", json=True)
    log = structlog.get_logger("test")
    log.info("event one", api_key=API_KEY, password=PASSWORD, token_count=12)
    log.info("event two", url=f"redis://svc:{PASSWORD}@cache:6379/0",
             detail=f"Authorization: Bearer {API_KEY}", headers={"authorization": API_KEY})
    log.warning("event three", error=f"bad key {API_KEY}")
    err = capsys.readouterr().err
    lines = [json.loads(line) for line in err.splitlines()]
    assert len(lines) == 3 and lines[0]["token_count"] == 12
    assert PASSWORD not in err and API_KEY not in err and API_KEY[16:] not in err
    assert lines[0]["api_key"] == "[REDACTED]"
