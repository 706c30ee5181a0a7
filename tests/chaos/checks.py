"""What a chaos run must satisfy, checked from the logs, the archive and the stored chain.

* I1: every acknowledged job is archived or dead; every job a producer sent
  was acknowledged in the end (producers retry under the same id, across
  their own restarts);
* I2: nothing is archived that was not sent, and nothing twice;
* I3: at most one completion (one token) accepted per job, and the archive
  holds the token that completed it, in a version that landed;
* I4: every claim token was handed to one holder only;
* I5: the version chain.  Every document the recorder or a broker read
  decodes; for every version number there is one content (no fork); every
  version that landed was written by a broker's attempt with that version
  and those bytes, conditioned on the ETag of the version before it (exactly
  +1, nothing written blind); the landed versions are contiguous from the
  create to the last; epochs never go back and move by one at a takeover,
  with one broker per epoch; and the recorder's own reads never go
  backwards (it may skip versions between two reads: that is what polling
  allows).  On S3 the bucket keeps every version (versioning), and the stored
  history itself must be that chain, in order.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from cluster import Observation

from osqueue.state import Document

Event = dict[str, Any]


@dataclass
class ChainFigures:
    #: versions that landed (the whole chain)
    versions: int = 0
    #: distinct versions the recorder read
    recorder_versions: int = 0
    recorder_reads: int = 0
    #: epoch increments along the chain (takeovers)
    takeovers: int = 0
    #: takeovers written while the lease they replaced was still live on the taker's
    #: own clock (with the skew margin): not unsafe (compare-and-set), but needless
    premature_takeovers: int = 0
    #: versions in the bucket's own history (S3 with versioning; 0 elsewhere)
    stored_history: int = 0


@dataclass
class JobFigures:
    sent: int = 0
    acknowledged: int = 0
    archived: int = 0
    dead: int = 0
    claims: int = 0
    lost_leases: int = 0
    events: Counter[str] = field(default_factory=Counter)


def check_jobs(
    events: list[Event], archive: list[dict[str, Any]], doc: Document, landed: set[int]
) -> JobFigures:
    """I1 to I4 from the producers' and workers' logs, the archive and the final document."""
    sent = {str(e["id"]) for e in events if e["ev"] == "sent"}
    acked = {str(e["id"]) for e in events if e["ev"] == "ack"}
    archived = Counter(str(r["id"]) for r in archive)
    dead = {j.id for j in doc.jobs.values() if j.status == "dead"}
    completed: dict[str, set[int]] = defaultdict(set)
    holders: dict[int, set[tuple[str, str]]] = defaultdict(set)
    for e in events:
        if e["ev"] == "complete":
            completed[str(e["id"])].add(int(e["token"]))
        elif e["ev"] == "claim":
            holders[int(e["token"])].add((str(e["id"]), str(e["who"])))
    never = sorted(sent - acked)
    assert not never, f"I1: sent but never acknowledged: {never[:10]}"
    lost = sorted(acked - set(archived) - dead)
    assert not lost, f"I1: {len(lost)} acknowledged jobs lost: {lost[:10]}"
    assert set(archived) <= sent, (
        f"I2: archived but never pushed: {sorted(set(archived) - sent)[:10]}"
    )
    assert set(doc.jobs) <= sent, "I2: a job in the document was never pushed"
    twice = sorted(j for j, n in archived.items() if n > 1)
    assert not twice, f"I2/I3: archived more than once: {twice[:10]}"
    multi = {j: t for j, t in completed.items() if len(t) > 1}
    assert not multi, f"I3: completions accepted under several tokens: {multi}"
    tokens_of = {str(r["id"]): r["token"] for r in archive}
    wrong = {j: (t, tokens_of.get(j)) for j, t in completed.items() if tokens_of.get(j) not in t}
    assert not wrong, f"I3: completion accepted but archived under another token: {wrong}"
    unlanded = sorted({int(r["version"]) for r in archive} - landed)
    assert not unlanded, f"I3: archived in versions that never landed: {unlanded[:10]}"
    shared = {t: h for t, h in holders.items() if len(h) > 1}
    assert not shared, f"I4: tokens handed out twice: {shared}"
    bad = [e for e in events if e["ev"] == "bad-payload"]
    assert not bad, f"payloads delivered wrong: {bad[:3]}"
    return JobFigures(
        sent=len(sent),
        acknowledged=len(acked),
        archived=len(archived),
        dead=len(dead & acked),
        claims=sum(len(h) for h in holders.values()),
        lost_leases=sum(e["ev"] == "lost" for e in events),
        events=Counter(str(e["ev"]) for e in events),
    )


@dataclass(frozen=True)
class _Seen:
    version: int
    sha: str
    etag: str
    epoch: int
    broker: str | None


def _seen(observations: Iterable[Observation], broker_events: Iterable[Event]) -> list[_Seen]:
    seen = [_Seen(o.version, o.sha, o.etag, o.epoch, o.broker) for o in observations]
    for e in broker_events:
        if e["ev"] in ("doc-read", "doc-wrote"):
            seen.append(_Seen(e["version"], e["sha"], e["etag"], e["epoch"], e["broker"]))
    return seen


def check_chain(
    observations: list[Observation],
    broker_events: list[Event],
    *,
    recorder_reads: int,
    stored: list[tuple[str, str]] | None = None,
) -> tuple[set[int], ChainFigures]:
    """I5 on the stored chain; returns the versions that landed and the figures."""
    seen = _seen(observations, broker_events)
    assert all(s.version >= 0 for s in seen), "I5: a broker read a document that does not decode"
    contents: dict[int, set[str]] = defaultdict(set)
    etag_version: dict[str, int] = {}
    for s in seen:
        contents[s.version].add(s.sha)
        etag_version[s.etag] = s.version
    forks = {v: shas for v, shas in contents.items() if len(shas) > 1}
    assert not forks, f"I5: versions with two contents (a fork): {sorted(forks)[:10]}"
    attempts: dict[tuple[int, str], list[Event]] = defaultdict(list)
    for e in broker_events:
        if e["ev"] == "doc-write":
            attempts[(e["version"], e["sha"])].append(e)
    versions = sorted(contents)
    assert versions, "I5: nobody read the document"
    first, last = versions[0], versions[-1]
    gaps = sorted(set(range(first, last + 1)) - set(versions))
    assert not gaps, f"I5: versions that landed unseen, or were skipped: {gaps[:10]}"
    for version in versions:
        (sha,) = contents[version]
        tried = attempts.get((version, sha))
        assert tried, f"I5: version {version} landed but no broker wrote it"
        bases = {etag_version.get(a["if_match"]) if a["if_match"] else None for a in tried}
        expected = None if version == first else version - 1
        assert expected in bases, (
            f"I5: version {version} was written on {bases}, not on version {expected}"
        )
    takeovers = _check_epochs(seen, versions)
    _check_recorder(observations)
    early = premature_takeovers(broker_events, contents)
    assert not early, (
        f"a broker took the queue over while the lease before it was live, at versions {early}: "
        + "; ".join(
            str(e) for e in broker_events if e["version"] in {v for x in early for v in (x - 1, x)}
        )[:3000]
    )
    figures = ChainFigures(
        versions=len(versions),
        recorder_versions=len({o.version for o in observations}),
        recorder_reads=recorder_reads,
        takeovers=takeovers,
        premature_takeovers=len(early),
    )
    if stored is not None:
        figures.stored_history = _check_stored(stored, broker_events, first, last)
    return set(versions), figures


def premature_takeovers(
    broker_events: list[Event], contents: dict[int, set[str]], margin_s: float = 1.0
) -> list[int]:
    """Versions that took the queue over while the lease before them was live, as the
    taker's own clock (``t + skew_s``) saw it with the skew margin."""
    lease: dict[int, float | None] = {}
    epoch: dict[int, int] = {}
    for e in broker_events:
        if e["ev"] in ("doc-read", "doc-wrote", "doc-write") and {e["sha"]} == contents.get(
            e["version"]
        ):
            lease[e["version"]] = e["lease_until"]
            epoch[e["version"]] = e["epoch"]
    found = set()
    for e in broker_events:
        v = e["version"]
        if e["ev"] != "doc-write" or {e["sha"]} != contents.get(v) or v - 1 not in epoch:
            continue
        previous = lease[v - 1]
        if previous is None or e["epoch"] != epoch[v - 1] + 1:
            continue  # a create, or the same broker's write
        if e["t"] + e["skew_s"] < previous + margin_s:
            found.add(v)
    return sorted(found)


def _check_epochs(seen: list[_Seen], versions: list[int]) -> int:
    owner = {s.version: (s.epoch, s.broker) for s in seen}
    takeovers = 0
    for before, after in pairwise(versions):
        (e1, b1), (e2, b2) = owner[before], owner[after]
        assert e2 in (e1, e1 + 1), f"I5: epoch went from {e1} to {e2} at version {after}"
        if e2 == e1:
            assert b1 == b2, f"I5: epoch {e1} held by {b1} and {b2}"
        else:
            takeovers += 1
    return takeovers


def _check_recorder(observations: list[Observation]) -> None:
    read = [o.version for o in observations]
    back = [(a, b) for a, b in pairwise(read) if b < a]
    assert not back, f"I5: the document went back between two reads: {back[:5]}"


def _check_stored(
    stored: list[tuple[str, str]], broker_events: list[Event], first: int, last: int
) -> int:
    """The bucket's own history (oldest first): exactly the chain, one version each."""
    by_md5: dict[str, int] = {}
    for e in broker_events:
        if e["ev"] == "doc-write":
            by_md5[e["md5"]] = e["version"]
    history = [by_md5.get(etag) for _, etag in stored]
    unknown = [vid for (vid, _), v in zip(stored, history, strict=True) if v is None]
    assert not unknown, f"I5: stored versions no broker wrote: {unknown[:5]}"
    expected = list(range(first, last + 1))
    assert history == expected, (
        f"I5: the stored history is not the chain {first}..{last}: "
        f"{_first_difference(history, expected)}"
    )
    return len(history)


def _first_difference(got: list[int | None], expected: list[int]) -> str:
    for i, (a, b) in enumerate(zip(got, expected, strict=False)):
        if a != b:
            return f"at position {i}: stored {got[max(0, i - 2) : i + 3]}, chain {b}"
    return f"{len(got)} stored versions for a chain of {len(expected)}"
