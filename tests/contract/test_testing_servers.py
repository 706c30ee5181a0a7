"""The loopback servers: ready URLs and environments, clear errors when not installed."""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path

import pytest
from servers import AzuriteServer, MotoS3Server, ServerError

from osqueue.storage import from_url


def test_missing_azurite_says_to_run_make_setup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("OSQUEUE_AZURITE", raising=False)
    with pytest.raises(ServerError, match="make setup"):
        AzuriteServer()


async def test_moto_env_configures_s3_urls(
    moto_server: MotoS3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in moto_server.env.items():
        monkeypatch.setenv(name, value)
    bucket = f"extra-{uuid.uuid4().hex[:8]}"
    moto_server.create_bucket(bucket)
    store = from_url(f"s3://{bucket}/env")
    etag = await store.write("k", b"v", if_match=None)
    assert await from_url(moto_server.url().replace(moto_server.bucket, bucket, 1)).read(
        "env/k"
    ) == (b"v", etag)


async def test_azurite_env_uses_the_emulator_mode(
    azurite_server: AzuriteServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in list(os.environ):
        if name.startswith(("AZURE_", "AZURITE_")):
            monkeypatch.delenv(name)
    for name, value in azurite_server.env.items():
        monkeypatch.setenv(name, value)
    store = from_url(f"az://{azurite_server.container}/env-{uuid.uuid4().hex[:8]}")
    etag = await store.write("k", b"v", if_match=None)
    assert await store.read("k") == (b"v", etag)
    assert azurite_server.running
