"""What obstore sends to GCS, seen on the wire (through a recording proxy to the XML-API shim).

The contract suite runs on ``gcs`` like on every backend; these tests pin the
exchange itself, which is what the shim can honestly vouch for: obstore uses
the XML API (``/bucket/object``), conditions every compare-and-set write on
the *generation* (``x-goog-if-generation-match``: ``0`` to create, the token
we read otherwise), and our adapter hands out that generation as the token,
never the content ETag.  That GCS honours the header atomically is Google's
documented guarantee, not something a loopback test can show.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from urllib.parse import unquote

import pytest
from servers import GcsShimServer
from servers.http_faults import Exchange, FaultyHttpProxy

from osqueue.errors import Conflict
from osqueue.storage import Storage, from_url

MATCH = "x-goog-if-generation-match"


@pytest.fixture
async def wire(gcs_shim: GcsShimServer) -> AsyncIterator[tuple[Storage, FaultyHttpProxy]]:
    async with FaultyHttpProxy(gcs_shim.port) as proxy:
        url = gcs_shim.url(f"wire/{uuid.uuid4().hex[:12]}")
        through = url.replace(f"127.0.0.1%3A{gcs_shim.port}", f"127.0.0.1%3A{proxy.port}")
        assert through != url
        yield from_url(through), proxy


def last(proxy: FaultyHttpProxy, method: str) -> Exchange:
    return [e for e in proxy.exchanges if e.request.method == method][-1]


async def test_compare_and_set_is_conditioned_on_the_generation(
    wire: tuple[Storage, FaultyHttpProxy],
) -> None:
    store, proxy = wire
    first = await store.write("queue.json", b"A", if_match=None)
    create = last(proxy, "PUT")
    assert create.request.header(MATCH) == "0"
    # the XML API (/bucket/object, every byte but letters and digits escaped), not the
    # JSON API's /storage/v1 or /upload/storage/v1
    assert unquote(create.request.target).endswith("/queue.json")
    assert create.request.target.startswith("/osqueue%2Dtest/wire%2F")
    assert create.response is not None
    assert create.response.header("x-goog-generation") == first

    blob = await store.read("queue.json")
    assert blob.etag == first
    assert last(proxy, "GET").request.header(MATCH) is None

    second = await store.write("queue.json", b"B", if_match=first)
    update = last(proxy, "PUT")
    assert update.request.header(MATCH) == first
    assert int(second) > int(first)

    third = await store.write("queue.json", b"A", if_match=second)
    again = last(proxy, "PUT").response
    assert again is not None
    assert create.response is not None
    # the same bytes give the same ETag (content hash), but a new generation: no ABA
    assert again.header("etag") == create.response.header("etag")
    assert third not in (first, second)
    with pytest.raises(Conflict):
        await store.write("queue.json", b"C", if_match=first)
    assert last(proxy, "PUT").response is not None
    assert last(proxy, "PUT").response.status == 412  # type: ignore[union-attr]
    assert not store.capabilities.content_etags


async def test_plain_objects_listing_and_deletes_use_the_xml_api(
    wire: tuple[Storage, FaultyHttpProxy],
) -> None:
    store, proxy = wire
    await store.put("payloads/p1", b"payload")
    assert last(proxy, "PUT").request.header(MATCH) is None  # unconditional
    await store.put("archive/date=2026-11-24/hour=10/00000000000000000007.jsonl", b"{}\n")
    assert await store.list("payloads/") == ["payloads/p1"]
    listing = last(proxy, "GET").request.target
    assert "list-type=2" in listing
    assert "prefix=" in listing
    await store.delete("payloads/p1")
    assert last(proxy, "DELETE").response is not None
    assert last(proxy, "DELETE").response.status == 204  # type: ignore[union-attr]
    await store.delete("payloads/p1")  # a 404 on delete is success
    assert await store.list() == ["archive/date=2026-11-24/hour=10/00000000000000000007.jsonl"]
