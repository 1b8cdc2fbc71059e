"""The object store hosts share: files put and got by a store-relative key and their sha256, over S3's protocol.

`BINAC_STORE` names it, an `s3://bucket[/prefix]` URL (AWS S3, MinIO, Ceph, or `moto_server` in the tests); unset,
there is no store (`store_from_env` returns None) and every file stays on the local disk. Credentials come the way
boto3 reads them (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, optionally `AWS_SESSION_TOKEN`; boto3's credential
chain: https://boto3.amazonaws.com/v1/documentation/api/latest/guide/credentials.html), the endpoint from
`BINAC_STORE_ENDPOINT` or else `AWS_ENDPOINT_URL` (none: AWS itself), the region from `AWS_DEFAULT_REGION` or
`AWS_REGION` (default `us-east-1`). Addresses are path-style (`http://host:port/bucket/key`), which MinIO, Ceph and
moto accept without DNS names per bucket.

- A key is store-relative (`runs/<run>/step-00001/attempts.json`): no leading `/`, no empty, `.` or `..` segment,
  no backslash; the object lives at `<prefix>/<key>` in the bucket.
- A writer's object is replaced whole: S3 makes an object visible only once its upload completes (a single PUT, or
  a multipart upload at `CompleteMultipartUpload`), so a reader sees the old object or the new one, never a part
  (https://docs.aws.amazon.com/AmazonS3/latest/userguide/Welcome.html#ConsistencyModel). Each object carries its
  sha256 as metadata (`x-amz-meta-sha256`) and is uploaded with an S3 SHA-256 checksum, which the server checks.
- A reader names the digest it expects (the full sha256, or its first 16 or more hex digits, as stage files name
  theirs): the bytes are downloaded beside the destination, hashed, and renamed onto it only when they match; a
  mismatch, a missing object or an unreachable store is one line (`BinacError`). A destination already holding the
  expected bytes is not downloaded again: a digest-checked local copy.

boto3 is imported only when a store is used: without `BINAC_STORE` nothing here runs."""

from __future__ import annotations

import functools
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from binac_core.errors import BinacError
from binac_core.foundation.atomic import atomic_path

STORE_VAR = "BINAC_STORE"
ENDPOINT_VARS = ("BINAC_STORE_ENDPOINT", "AWS_ENDPOINT_URL")
"""The endpoint's variables, the first set one wins."""
MIN_DIGEST = 16
"""The fewest hex digits of a sha256 a reader may name (stage files name 16)."""
_CHUNK = 1 << 20


def sha256_file(path: str | Path) -> str:
    """The sha256 of a file's bytes, hex, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def file_digest(folder: str | Path) -> str:
    """sha256 over the files of a checkpoint folder (names and bytes), first 16 hex digits."""
    h = hashlib.sha256()
    for f in sorted(p for p in Path(folder).rglob("*") if p.is_file()):
        h.update(f.relative_to(folder).as_posix().encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def check_key(key: str) -> str:
    """`key` when it is store-relative (the module docstring); else one line naming it."""
    parts = key.split("/")
    if not key or key.startswith("/") or "\\" in key or any(p in ("", ".", "..") for p in parts):
        raise BinacError(f"not a store-relative key: {key!r} (segments separated by '/', none empty, '.' or '..')")
    return key


def _check_digest(digest: str) -> str:
    if len(digest) < MIN_DIGEST or any(c not in "0123456789abcdef" for c in digest):
        raise BinacError(f"not a sha256 digest: {digest!r} (lower-case hex, {MIN_DIGEST} to 64 digits)")
    return digest


@dataclass(frozen=True)
class ObjectStore:
    """One bucket (and prefix) of an S3-compatible store, at `endpoint` (None: AWS's own)."""

    bucket: str
    prefix: str = ""
    endpoint: str | None = None
    region: str = "us-east-1"

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}" + (f"/{self.prefix}" if self.prefix else "")

    def object_name(self, key: str) -> str:
        """The object's name in the bucket: `<prefix>/<key>`."""
        check_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def where(self, key: str) -> str:
        """The object's address as errors name it: `s3://bucket/prefix/key`."""
        return f"s3://{self.bucket}/{self.object_name(key)}"

    def put_file(self, key: str, path: str | Path) -> str:
        """Upload the file at `path` as `key`, replacing any object there whole; returns its sha256."""
        digest = sha256_file(path)
        extra = {"Metadata": {"sha256": digest}, "ChecksumAlgorithm": "SHA256"}
        with self._errors(key):
            self._client().upload_file(str(path), self.bucket, self.object_name(key), ExtraArgs=extra)
        return digest

    def put_bytes(self, key: str, data: bytes) -> str:
        """Upload `data` as `key` in one PUT, replacing any object there whole; returns its sha256."""
        digest = hashlib.sha256(data).hexdigest()
        with self._errors(key):
            self._client().put_object(
                Bucket=self.bucket,
                Key=self.object_name(key),
                Body=data,
                Metadata={"sha256": digest},
                ChecksumSHA256=_b64(digest),
            )
        return digest

    def digest(self, key: str) -> str | None:
        """The sha256 the object `key` was uploaded with, or None when there is no such object."""
        from botocore.exceptions import ClientError

        try:
            with self._errors(key, missing_ok=True):
                head = self._client().head_object(Bucket=self.bucket, Key=self.object_name(key))
        except ClientError:
            return None
        return head.get("Metadata", {}).get("sha256")

    def get_file(self, key: str, dest: str | Path, digest: str) -> Path:
        """The object `key` at `dest`, its bytes' sha256 checked against `digest` (the module docstring)."""
        _check_digest(digest)
        dest = Path(dest)
        if dest.is_file() and sha256_file(dest).startswith(digest):
            return dest
        with atomic_path(dest) as tmp:
            with self._errors(key):
                self._client().download_file(self.bucket, self.object_name(key), str(tmp))
            got = sha256_file(tmp)
            if not got.startswith(digest):
                raise BinacError(f"store object {self.where(key)} has sha256 {got}, expected {digest}")
        return dest

    def get_bytes(self, key: str, digest: str) -> bytes:
        """The bytes of object `key`, their sha256 checked against `digest`."""
        _check_digest(digest)
        with self._errors(key):
            data = self._client().get_object(Bucket=self.bucket, Key=self.object_name(key))["Body"].read()
        got = hashlib.sha256(data).hexdigest()
        if not got.startswith(digest):
            raise BinacError(f"store object {self.where(key)} has sha256 {got}, expected {digest}")
        return data

    def keys(self, under: str) -> list[str]:
        """The keys of the objects whose key starts with the folder `under` (a key, or "" for all), sorted."""
        prefix = self.object_name(under) + "/" if under else (f"{self.prefix}/" if self.prefix else "")
        skip = len(self.prefix) + 1 if self.prefix else 0
        out: list[str] = []
        with self._errors(under):
            for page in self._client().get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
                out.extend(o["Key"][skip:] for o in page.get("Contents", []))
        return sorted(out)

    def delete(self, key: str) -> None:
        """Remove the object `key` (nothing when there is none: S3's DeleteObject)."""
        with self._errors(key):
            self._client().delete_object(Bucket=self.bucket, Key=self.object_name(key))

    def credentials(self) -> tuple[str, str, str | None]:
        """(access key id, secret key, session token or None) as boto3's chain finds them, for a client that is not
        boto3 (DuckDB's `httpfs`); none found is one line."""
        import boto3

        found = boto3.session.Session().get_credentials()
        if found is None:
            raise BinacError(
                f"no credentials for the store {self.url}: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
            )
        frozen = found.get_frozen_credentials()
        return frozen.access_key, frozen.secret_key, frozen.token or None

    def ensure_bucket(self) -> None:
        """Create the bucket unless it exists (a lab's first start)."""
        from botocore.exceptions import ClientError

        client = self._client()
        with self._errors(""):
            try:
                client.head_bucket(Bucket=self.bucket)
                return
            except ClientError as exc:
                if str(exc.response.get("Error", {}).get("Code")) not in ("404", "NoSuchBucket", "NotFound"):
                    raise
            where = {} if self.region == "us-east-1" else {"LocationConstraint": self.region}
            client.create_bucket(Bucket=self.bucket, **({"CreateBucketConfiguration": where} if where else {}))

    def _client(self):
        return _client(self.endpoint, self.region, os.environ.get("AWS_ACCESS_KEY_ID"))

    def _errors(self, key: str, missing_ok: bool = False):
        return _Errors(self, key, missing_ok)


class _Errors:
    """Turns what boto3 raises into one line naming the object (or lets a missing object's error through for a
    caller that asks whether it exists)."""

    def __init__(self, store: ObjectStore, key: str, missing_ok: bool):
        self.store, self.key, self.missing_ok = store, key, missing_ok

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        if exc is None:
            return False
        from boto3.exceptions import S3UploadFailedError
        from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError

        what = self.store.where(self.key) if self.key else self.store.url
        if isinstance(exc, NoCredentialsError):
            raise BinacError(
                f"no credentials for the store {self.store.url}: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
            ) from None
        if isinstance(exc, EndpointConnectionError):
            raise BinacError(f"the store {self.store.url} is unreachable at {self.store.endpoint or 'AWS'}") from None
        if isinstance(exc, ClientError):
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code in ("404", "NoSuchKey", "NotFound"):
                if self.missing_ok:
                    return False
                raise BinacError(f"store object missing: {what}") from None
            if code == "NoSuchBucket":
                raise BinacError(f"the store's bucket does not exist: {self.store.url}") from None
            raise BinacError(
                f"the store refused {what}: {code} {exc.response.get('Error', {}).get('Message', '')}".rstrip()
            ) from None
        if isinstance(exc, S3UploadFailedError):
            raise BinacError(f"upload to {what} failed: {str(exc).splitlines()[0]}") from None
        return False


def _b64(hex_digest: str) -> str:
    import base64

    return base64.b64encode(bytes.fromhex(hex_digest)).decode()


@functools.lru_cache(maxsize=8)
def _client(endpoint: str | None, region: str, access_key: str | None):
    """One S3 client per endpoint, region and access key id, path-style; its credentials from boto3's chain, read
    when it is made (`access_key` keys the cache, so new credentials in the environment make a new client). A client is safe to
    share across threads (https://boto3.amazonaws.com/v1/documentation/api/latest/guide/clients.html#multithreading-or-multiprocessing-with-clients)."""
    import boto3
    from botocore.config import Config as BotoConfig

    session = boto3.session.Session()
    return session.client(
        "s3", endpoint_url=endpoint, region_name=region, config=BotoConfig(s3={"addressing_style": "path"})
    )


def parse_store_url(url: str) -> tuple[str, str]:
    """(bucket, prefix) of an `s3://bucket[/prefix]` URL; anything else is one line naming `BINAC_STORE`."""
    rest = url.removeprefix("s3://")
    bucket, _, prefix = rest.partition("/")
    prefix = prefix.strip("/")
    try:
        if rest == url or not bucket or (prefix and check_key(prefix) != prefix):
            raise BinacError("")
    except BinacError:
        raise BinacError(f"{STORE_VAR} must be an s3://bucket[/prefix] URL, not {url!r}") from None
    return bucket, prefix


def store_from_env(environ: dict | None = None) -> ObjectStore | None:
    """The store `BINAC_STORE` names (the module docstring), or None when it is unset or empty."""
    env = os.environ if environ is None else environ
    url = env.get(STORE_VAR, "").strip()
    if not url:
        return None
    bucket, prefix = parse_store_url(url)
    endpoint = next((env[v] for v in ENDPOINT_VARS if env.get(v)), None)
    region = env.get("AWS_DEFAULT_REGION") or env.get("AWS_REGION") or "us-east-1"
    return ObjectStore(bucket, prefix, endpoint, region)
