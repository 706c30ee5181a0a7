"""``from_url``: what each URL opens, and a clear error naming the part at fault."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from osqueue.errors import InvalidInput, MissingExtra
from osqueue.storage import FaultyStorage, FileStorage, MemoryStorage, from_url
from osqueue.storage.cloud import CloudStorage, parse_options


@pytest.mark.parametrize(
    ("url", "field", "words"),
    [
        ("", "url", "non-empty"),
        ("queue.json", "url.scheme", "not a URL"),
        ("ftp://host/dir", "url.scheme", "unknown scheme 'ftp'"),
        ("memory://q?etag=sha1", "url.etag", "counter, md5"),
        ("memory://q?colour=red", "url.colour", "unknown parameter 'colour'"),
        ("memory://q?etag=md5&etag=md5", "url.etag", "given twice"),
        ("file://relative/dir", "url.host", "three slashes"),
        ("file:///tmp/q?fsync=maybe", "url.fsync", "true or false"),
        ("file:///tmp/q#frag", "url.fragment", "fragment"),
        ("s3:///prefix", "url", "needs a bucket"),
        ("s3://bucket/p?regoin=eu-west-1", "url.regoin", "unknown parameter 'regoin'"),
        ("s3://bucket/p?allow_http=perhaps", "url.allow_http", "true or false"),
        ("s3://bucket/p?timeout_s=soon", "url.timeout_s", "number of seconds"),
        ("s3://bucket/p?max_retries=-1", "url.max_retries", ">= 0"),
        ("az://c/p?use_emulator=2", "url.use_emulator", "true or false"),
        ("gs://b/p?account_key=x", "url.account_key", "unknown parameter"),
        ("latency+memory://q?write_ms=slow", "url.write_ms", "number"),
        ("latency+memory://q?seed=x", "url.seed", "integer"),
        ("latency+memory://q?error_rate=2", "error_rate", "probability"),
        ("latency+memory://q?read_ms=-5", "read_ms", ">= 0"),
        ("latency+ftp://q", "url.scheme", "unknown scheme"),
    ],
)
def test_bad_urls_name_the_part_at_fault(url: str, field: str, words: str) -> None:
    with pytest.raises(InvalidInput) as info:
        from_url(url)
    assert info.value.field == field
    assert words in str(info.value)


def test_non_string_url() -> None:
    with pytest.raises(InvalidInput) as info:
        from_url(42)  # type: ignore[arg-type]
    assert info.value.field == "url"


def test_memory_urls() -> None:
    store = from_url("memory://url-test")
    assert isinstance(store, MemoryStorage)
    assert store.url == "memory://url-test"
    assert not store.capabilities.content_etags
    md5 = from_url("memory://url-test?etag=md5")
    assert isinstance(md5, MemoryStorage)
    assert md5.capabilities.content_etags
    assert md5.url == "memory://url-test?etag=md5"
    MemoryStorage.drop("url-test")


def test_file_url_percent_decoding_and_localhost(tmp_path: Path) -> None:
    target = tmp_path / "a dir+x=1"
    store = from_url(target.as_uri())
    assert isinstance(store, FileStorage)
    assert store.root == str(target)
    assert target.is_dir()
    assert from_url(store.url).url == store.url
    assert isinstance(from_url(f"file://localhost{tmp_path}/other?fsync=false"), FileStorage)


def test_latency_url_strips_its_own_parameters() -> None:
    store = from_url("latency+memory://lat-url?write_ms=200&etag=md5&read_ms=20&seed=3")
    assert isinstance(store, FaultyStorage)
    assert store.config.write_ms == 200
    assert store.config.read_ms == 20
    assert isinstance(store.inner, MemoryStorage)
    assert store.inner.etag_mode == "md5"  # the inner store kept its own parameter
    assert store.url == "latency+memory://lat-url?etag=md5&write_ms=200&read_ms=20&seed=3"
    MemoryStorage.drop("lat-url")


def test_cloud_url_hides_secrets_and_keeps_prefix() -> None:
    store = from_url(
        "s3://bucket/jobs/q1?endpoint=http%3A%2F%2F127.0.0.1%3A9&region=eu-west-1"
        "&access_key_id=AK&secret_access_key=SECRET"
    )
    assert isinstance(store, CloudStorage)
    assert "SECRET" not in store.url
    assert store.url.startswith("s3://bucket/jobs/q1?")
    assert "access_key_id=AK" in store.url
    assert store.capabilities.content_etags
    az = from_url("az://container/p?account_name=acct&account_key=S2VZ&use_emulator=true")
    assert "S2VZ" not in az.url
    assert not az.capabilities.content_etags


def test_cloud_options_defaults_and_http_inference(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT"):
        monkeypatch.delenv(var, raising=False)
    options = parse_options("s3", {"endpoint": "http://127.0.0.1:9000"})
    assert options.store["conditional_put"] == "etag"
    assert options.client["allow_http"] is True
    assert options.retry["max_retries"] == 3
    assert "allow_http" not in parse_options("s3", {"endpoint": "https://s3.example"}).client
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://minio:9000")
    assert parse_options("s3", {}).client["allow_http"] is True
    explicit = parse_options("s3", {"allow_http": "false"})
    assert explicit.client["allow_http"] is False
    monkeypatch.setenv("AZURE_STORAGE_USE_EMULATOR", "true")
    assert parse_options("az", {}).client["allow_http"] is True
    assert parse_options("gs", {"endpoint": "http://fake-gcs:4443"}).store == {
        "base_url": "http://fake-gcs:4443"
    }


def test_cloud_without_obstore_raises_missing_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "obstore.store", None)
    with pytest.raises(MissingExtra) as info:
        from_url("s3://bucket/prefix")
    assert info.value.extra == "cloud"
    assert "osqueue[cloud]" in str(info.value)
