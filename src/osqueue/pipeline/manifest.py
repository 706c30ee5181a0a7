"""A namespace's manifest: the one object that says which index version is current.

``index/<namespace>/manifest.json`` holds the current version's directory and
every segment folded into it.  It only ever changes by compare-and-set through
the storage port, so of two workers that built a new version from the same
manifest exactly one publishes; the other re-reads and redoes its merge on top.
"""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec

from osqueue.errors import CorruptDocument, NotFound

from .dataroot import DataRoot
from .wal import check_namespace

INDEX_PREFIX = "index/"
VERSIONS_PREFIX = "index/_versions/"


class Manifest(msgspec.Struct, frozen=True, omit_defaults=True):
    namespace: str
    #: 0 before the first publish; +1 on every publish.
    version: int = 0
    #: Key (under the data root) of the current Parquet version directory;
    #: None while the index is empty.
    path: str | None = None
    #: Every segment key folded into ``path``, sorted.
    segments: tuple[str, ...] = ()
    updated_at: str | None = None

    def with_version(self, path: str | None, segments: set[str]) -> Manifest:
        now = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        return Manifest(
            namespace=self.namespace,
            version=self.version + 1,
            path=path,
            segments=tuple(sorted(segments)),
            updated_at=now,
        )


def manifest_key(namespace: str) -> str:
    return f"{INDEX_PREFIX}{check_namespace(namespace)}/manifest.json"


def load_manifest(root: DataRoot, namespace: str) -> tuple[Manifest, str | None]:
    """The namespace's manifest and its ETag (``None``: no manifest yet)."""
    key = manifest_key(namespace)
    try:
        blob = root.read(key)
    except NotFound:
        return Manifest(namespace=namespace), None
    try:
        manifest = msgspec.json.decode(blob.data, type=Manifest)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise CorruptDocument(f"{key}: {exc}", path=key) from exc
    return manifest, blob.etag


def publish_manifest(root: DataRoot, manifest: Manifest, *, if_match: str | None) -> str:
    """Write the manifest by compare-and-set; ``Conflict`` if it changed since read."""
    return root.write(
        manifest_key(manifest.namespace), msgspec.json.encode(manifest), if_match=if_match
    )


def list_namespaces(root: DataRoot) -> list[str]:
    """Namespaces that have a manifest."""
    out = []
    for key in root.list(INDEX_PREFIX):
        parts = key.split("/")
        if len(parts) == 3 and parts[2] == "manifest.json" and not parts[1].startswith("_"):
            out.append(parts[1])
    return sorted(out)
