"""A wrapper store that adds latency and faults: ``latency+<inner url>``.

``latency+memory://q?write_ms=200&read_ms=20&jitter_ms=10&error_rate=0.01&lost_rate=0.01&seed=1``
opens ``memory://q`` and wraps it.  The wrapper's query parameters (the fields
of :class:`FaultConfig` plus ``seed``) are removed before the inner URL is
opened; any other parameter belongs to the inner store.

* Delay: every read (``read``, ``get``, ``list``) waits ``read_ms`` and every
  write (``write``, ``put``, ``delete``) waits ``write_ms``, plus a uniform
  random ``0..jitter_ms``.  The wait uses the injected :class:`~osqueue.clock.Clock`,
  so a :class:`~osqueue.clock.ManualClock` makes it instant and deterministic.
* ``error_rate``: a write fails with ``StorageError`` *before* it reaches the
  inner store (nothing changed).
* ``lost_rate``: a write reaches the inner store and lands, then the caller
  gets ``OutcomeUnknown`` (a response lost on the way back).
* ``read_error_rate``: a read fails with ``StorageError``.

In Python: ``FaultyStorage(inner, FaultConfig(write_ms=5), rng=random.Random(7))``,
which is how the simulation drives it.  Counters (``reads``, ``writes``,
``errors_injected``, ``lost_injected``, ``faults``, ``delay_s``) are attributes.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from osqueue.clock import Clock, SystemClock
from osqueue.errors import InvalidInput, OutcomeUnknown, StorageError
from osqueue.storage.port import Blob, Capabilities, Storage

T = TypeVar("T")

_RATES = ("error_rate", "lost_rate", "read_error_rate")


@dataclass(frozen=True, slots=True)
class FaultConfig:
    """What the wrapper injects; all zero means a transparent wrapper."""

    write_ms: float = 0.0
    read_ms: float = 0.0
    jitter_ms: float = 0.0
    error_rate: float = 0.0
    lost_rate: float = 0.0
    read_error_rate: float = 0.0

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise InvalidInput(f"must be a number, not {value!r}", field=f.name)
            if not math.isfinite(value) or value < 0:
                raise InvalidInput(f"must be a finite number >= 0, not {value!r}", field=f.name)
            if f.name in _RATES and value > 1:
                raise InvalidInput(f"is a probability (0..1), not {value!r}", field=f.name)
        if self.error_rate + self.lost_rate > 1:
            raise InvalidInput("error_rate + lost_rate must not exceed 1", field="lost_rate")

    @classmethod
    def parameter_names(cls) -> frozenset[str]:
        """Query parameters the ``latency+`` URL prefix owns (``seed`` included)."""
        return frozenset(f.name for f in dataclasses.fields(cls)) | {"seed"}

    @classmethod
    def from_params(cls, params: Mapping[str, str]) -> tuple[FaultConfig, int | None]:
        """Build a config and the seed from URL query parameters (strings)."""
        values: dict[str, float] = {}
        seed: int | None = None
        for name, text in params.items():
            if name == "seed":
                try:
                    seed = int(text)
                except ValueError:
                    raise InvalidInput(
                        f"must be an integer, not {text!r}", field="url.seed"
                    ) from None
                continue
            try:
                values[name] = float(text)
            except ValueError:
                raise InvalidInput(f"must be a number, not {text!r}", field=f"url.{name}") from None
        return cls(**values), seed

    def to_params(self) -> dict[str, str]:
        """The non-default fields as query parameters."""
        out: dict[str, str] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value != f.default:
                out[f.name] = f"{value:g}"
        return out


class FaultyStorage:
    """Wraps a :class:`~osqueue.storage.port.Storage`, adding delays and faults."""

    def __init__(
        self,
        inner: Storage,
        config: FaultConfig | None = None,
        *,
        rng: random.Random | None = None,
        clock: Clock | None = None,
        seed: int | None = None,
    ) -> None:
        self.inner = inner
        self.config = config or FaultConfig()
        self.rng = rng if rng is not None else random.Random(seed)
        self.clock: Clock = clock or SystemClock()
        self._seed = seed
        self.reads = 0
        self.writes = 0
        self.errors_injected = 0
        self.lost_injected = 0
        self.delay_s = 0.0

    @property
    def faults(self) -> int:
        """Faults injected so far (errors and lost responses)."""
        return self.errors_injected + self.lost_injected

    @property
    def url(self) -> str:
        params = self.config.to_params()
        if self._seed is not None:
            params["seed"] = str(self._seed)
        inner = self.inner.url
        if not params:
            return f"latency+{inner}"
        query = "&".join(f"{k}={v}" for k, v in params.items())
        return f"latency+{inner}{'&' if '?' in inner else '?'}{query}"

    @property
    def capabilities(self) -> Capabilities:
        return self.inner.capabilities

    # ------------------------------------------------------------------ injection

    async def _delay(self, base_ms: float) -> None:
        delay_ms = base_ms
        if self.config.jitter_ms > 0:
            delay_ms += self.rng.uniform(0.0, self.config.jitter_ms)
        if delay_ms > 0:
            self.delay_s += delay_ms / 1000.0
            await self.clock.sleep(delay_ms / 1000.0)

    async def _reading(self, op: str, key: str, call: Callable[[], Awaitable[T]]) -> T:
        self.reads += 1
        await self._delay(self.config.read_ms)
        if self.config.read_error_rate > 0 and self.rng.random() < self.config.read_error_rate:
            self.errors_injected += 1
            raise StorageError(f"injected fault: {op} {key!r} failed")
        return await call()

    async def _writing(self, op: str, key: str, call: Callable[[], Awaitable[T]]) -> T:
        self.writes += 1
        await self._delay(self.config.write_ms)
        error_rate, lost_rate = self.config.error_rate, self.config.lost_rate
        draw = self.rng.random() if error_rate > 0 or lost_rate > 0 else 1.0
        if draw < error_rate:
            self.errors_injected += 1
            raise StorageError(f"injected fault: {op} {key!r} failed before it was applied")
        result = await call()
        if draw < error_rate + lost_rate:
            self.lost_injected += 1
            raise OutcomeUnknown(f"injected fault: {op} {key!r} applied, response lost")
        return result

    # ------------------------------------------------------------------ Storage

    async def read(self, key: str) -> Blob:
        return await self._reading("read", key, lambda: self.inner.read(key))

    async def write(self, key: str, data: bytes, *, if_match: str | None) -> str:
        return await self._writing(
            "write", key, lambda: self.inner.write(key, data, if_match=if_match)
        )

    async def put(self, key: str, data: bytes) -> None:
        await self._writing("put", key, lambda: self.inner.put(key, data))

    async def get(self, key: str) -> bytes:
        return await self._reading("get", key, lambda: self.inner.get(key))

    async def delete(self, key: str) -> None:
        await self._writing("delete", key, lambda: self.inner.delete(key))

    async def list(self, prefix: str = "") -> list[str]:
        return await self._reading("list", prefix, lambda: self.inner.list(prefix))

    async def close(self) -> None:
        await self.inner.close()

    def __repr__(self) -> str:
        return f"FaultyStorage({self.inner!r}, {self.config!r})"
