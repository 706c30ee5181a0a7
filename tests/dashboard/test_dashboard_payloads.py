"""The job page's payload preview reads payload objects through the one checked
read (:func:`osqueue.broker.objects.payloads.read_payload`): an object that was rewritten,
or replaced by a link to a file outside the store, is never shown; the page says
the payload failed its check, naming the job and the object."""

from __future__ import annotations

import hashlib
import html
import re
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from dashboard_helpers import Seeded

from osqueue.client.remote import RemoteClient
from osqueue.dashboard.web import Dashboard

#: above the broker's default inline limit (64 KiB): stored under payloads/
SIZE = 64 * 1024 + 1
SECRET = b"SECRET-OUTSIDE-THE-STORE "


@pytest.fixture
async def http(board: Dashboard) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(base_url=board.address) as session:
        yield session


async def job_page(http: aiohttp.ClientSession, job_id: str) -> str:
    async with http.get(f"/jobs/{job_id}") as response:
        text = await response.text()
        assert response.status == 200, text
        return text


async def stored(client: RemoteClient, board: Dashboard, seeded: Seeded) -> tuple[str, Path]:
    """A job whose payload lives in an object under payloads/, and that object's file."""
    job_id = await client.push(b"A" * SIZE, queue="big")
    await board.source.refresh()
    ref = seeded.document().jobs[job_id].payload_ref
    assert ref is not None
    return job_id, seeded.directory / ref


async def test_a_payload_object_that_passes_its_check_is_shown(
    http: aiohttp.ClientSession, client: RemoteClient, board: Dashboard, seeded: Seeded
) -> None:
    job_id, _ = await stored(client, board, seeded)
    page = await job_page(http, job_id)
    assert 'id="payload"' in page
    assert "A" * 1000 in page
    assert 'id="payload-failed"' not in page


@pytest.mark.parametrize("tamper", ["rewritten with the same size", "a link out of the store"])
async def test_a_payload_object_that_fails_its_check_is_never_shown(
    http: aiohttp.ClientSession,
    client: RemoteClient,
    board: Dashboard,
    seeded: Seeded,
    tmp_path: Path,
    tamper: str,
) -> None:
    job_id, path = await stored(client, board, seeded)
    secret = (SECRET * SIZE)[:SIZE]
    if tamper == "a link out of the store":
        outside = tmp_path / "outside-secret"
        outside.write_bytes(secret)
        path.unlink()
        path.symlink_to(outside)
    else:
        path.write_bytes(secret)
    page = await job_page(http, job_id)
    assert SECRET.decode() not in page
    assert 'id="payload"' not in page
    failed = re.search(r'<p class="notice error" id="payload-failed">(.*?)</p>', page, re.S)
    assert failed is not None, page
    message = html.unescape(failed[1])
    assert "failed its check" in message
    assert job_id in message
    assert path.name in message
    if tamper == "a link out of the store":
        assert "symbolic link" in message
    else:
        assert hashlib.sha256(secret).hexdigest() in message
