"""Read the queue document straight from storage (no broker needed).

``status`` and ``jobs`` look at the document the way a standby broker does:
reads only, so they work while no broker runs and never disturb one.
"""

from __future__ import annotations

from osqueue.errors import NotFound
from osqueue.state import DOCUMENT_KEY, Document, decode
from osqueue.storage import from_url
from osqueue.storage.port import Blob, Storage


async def read_document(url: str) -> Document:
    """The committed document at ``url``; NotFound names the object when there is none."""
    storage = from_url(url)
    try:
        blob = await read_blob(storage, url)
    finally:
        await storage.close()
    return decode(blob.data)


async def read_blob(storage: Storage, url: str) -> Blob:
    """The document's bytes, undecoded; NotFound saying there is no queue at ``url``."""
    try:
        return await storage.read(DOCUMENT_KEY)
    except NotFound:
        raise NotFound(
            f"no queue at {url}: {DOCUMENT_KEY} does not exist (start a broker to create it)"
        ) from None
