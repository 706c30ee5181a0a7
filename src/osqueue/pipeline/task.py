"""The indexing job's payload: which segment of which namespace, under which root."""

from __future__ import annotations

import msgspec

from osqueue.errors import InvalidInput

from .wal import parse_segment_key

#: The queue the pipeline's indexing jobs go to by default.
INDEX_QUEUE = "index"
#: Indexing jobs of one namespace claimed at once: one, so two workers never race
#: one namespace's manifest (each job's group is its namespace).
INDEX_PER_NAMESPACE = 1


class IndexTask(msgspec.Struct, frozen=True):
    """Fold ``segment`` (a key under ``root``) into ``namespace``'s index."""

    root: str
    namespace: str
    segment: str

    def __post_init__(self) -> None:
        namespace, _ = parse_segment_key(self.segment)
        if namespace != self.namespace:
            raise InvalidInput(
                f"segment {self.segment!r} does not belong to namespace {self.namespace!r}",
                field="segment",
            )

    @property
    def group(self) -> str:
        """The job's group: its namespace (the index queue caps claims per group)."""
        return self.namespace

    @property
    def key(self) -> str:
        """Idempotency key: one live job per segment."""
        return f"{self.namespace}/{self.segment.rsplit('/', 1)[-1]}"

    def encode(self) -> bytes:
        return msgspec.json.encode(self)

    @classmethod
    def decode(cls, payload: bytes) -> IndexTask:
        try:
            return msgspec.json.decode(payload, type=cls)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise InvalidInput(f"not an index task: {exc}", field="payload") from exc


def task_for(root: str, segment: str) -> IndexTask:
    namespace, _ = parse_segment_key(segment)
    return IndexTask(root=root, namespace=namespace, segment=segment)
