"""The object store (`binac_core.foundation.objects`) against a real S3 endpoint, `moto_server` (the `object_store`
fixture): files put and got by key with their sha256, digests checked on every read, objects replaced whole, and
the one-line errors; and, without a server, keys, URLs and the environment."""

from __future__ import annotations

import hashlib
import uuid

import pytest

from binac_core.errors import BinacError
from binac_core.foundation.objects import ObjectStore, check_key, parse_store_url, store_from_env

ABC = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
"""sha256 of b"abc" (FIPS 180-2, appendix B.1)."""
EMPTY = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
"""sha256 of no bytes."""


@pytest.fixture
def store(object_store, monkeypatch) -> ObjectStore:
    """A fresh bucket (prefix `lab/one`) on the session's moto_server, named by `BINAC_STORE` as a user would."""
    for name, value in object_store.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.setenv("BINAC_STORE", f"s3://b-{uuid.uuid4().hex[:12]}/lab/one")
    s = store_from_env()
    s.ensure_bucket()
    s.ensure_bucket()  # a second start finds it
    return s


def test_a_file_goes_up_and_comes_back_by_key_and_digest(store, tmp_path):
    src = tmp_path / "src.json"
    src.write_bytes(b"abc")
    assert store.put_file("runs/r1/step-00001/attempts.json", src) == ABC
    assert store.digest("runs/r1/step-00001/attempts.json") == ABC
    got = store.get_file("runs/r1/step-00001/attempts.json", tmp_path / "host2" / "attempts.json", ABC[:16])
    assert got.read_bytes() == b"abc"
    assert store.get_bytes("runs/r1/step-00001/attempts.json", ABC) == b"abc"
    assert store.put_bytes("empty", b"") == EMPTY and store.get_bytes("empty", EMPTY) == b""
    assert store.digest("runs/r1/step-00001/other.json") is None


def test_the_object_lives_under_the_prefix(store, tmp_path):
    store.put_bytes("a/b.txt", b"abc")
    listed = store._client().list_objects_v2(Bucket=store.bucket)["Contents"]
    assert [o["Key"] for o in listed] == ["lab/one/a/b.txt"]


def test_keys_are_listed_under_a_folder_and_deleted_one_by_one(store):
    for key in ("trajectories/a/x.parquet", "trajectories/a/y.parquet", "trajectories/ab/z.parquet", "runs/r"):
        store.put_bytes(key, b"abc")
    assert store.keys("trajectories/a") == ["trajectories/a/x.parquet", "trajectories/a/y.parquet"]
    assert len(store.keys("")) == 4
    store.delete("trajectories/a/x.parquet")
    store.delete("trajectories/a/x.parquet")  # no object: nothing
    assert store.keys("trajectories") == ["trajectories/a/y.parquet", "trajectories/ab/z.parquet"]
    assert store.credentials() == ("testing", "testing", None)


def test_an_object_is_replaced_whole_and_the_old_digest_is_refused(store, tmp_path):
    store.put_bytes("k.json", b"abc")
    new = store.put_bytes("k.json", b"")
    assert new == EMPTY and store.digest("k.json") == EMPTY
    dest = tmp_path / "k.json"
    with pytest.raises(BinacError) as err:
        store.get_file("k.json", dest, ABC)
    message = str(err.value)
    assert message == f"store object s3://{store.bucket}/lab/one/k.json has sha256 {EMPTY}, expected {ABC}"
    assert "\n" not in message
    assert list(tmp_path.iterdir()) == [], "no file, and no temporary file, where the check failed"


def test_bytes_changed_in_the_store_are_refused_even_with_matching_metadata(store, tmp_path):
    """A writer that bypassed binac (its metadata claims b"abc") cannot pass other bytes off: the bytes are hashed."""
    store._client().put_object(
        Bucket=store.bucket, Key=store.object_name("forged"), Body=b"abd", Metadata={"sha256": ABC}
    )
    with pytest.raises(BinacError, match=f"has sha256 {hashlib.sha256(b'abd').hexdigest()}, expected {ABC}$"):
        store.get_file("forged", tmp_path / "forged", ABC)
    with pytest.raises(BinacError, match="expected"):
        store.get_bytes("forged", ABC)


def test_a_large_file_goes_up_in_parts_and_comes_back_whole(store, tmp_path):
    """Above boto3's 8 MiB threshold the upload is multipart: the object appears only once complete."""
    data = bytes(range(256)) * (9 * 4096)  # 9 MiB
    src = tmp_path / "model.safetensors"
    src.write_bytes(data)
    digest = store.put_file("models/base-x/model.safetensors", src)
    assert digest == hashlib.sha256(data).hexdigest()
    assert store.get_file("models/base-x/model.safetensors", tmp_path / "copy", digest).read_bytes() == data


def test_a_local_copy_with_the_expected_bytes_is_not_fetched_again(store, tmp_path):
    store.put_bytes("once", b"abc")
    dest = store.get_file("once", tmp_path / "once", ABC)
    store._client().delete_object(Bucket=store.bucket, Key=store.object_name("once"))
    assert store.get_file("once", dest, ABC).read_bytes() == b"abc"
    dest.write_bytes(b"abd")  # a local copy that changed is fetched again: the object is gone, so that fails
    with pytest.raises(BinacError, match=f"^store object missing: s3://{store.bucket}/lab/one/once$"):
        store.get_file("once", dest, ABC)


def test_a_missing_object_or_bucket_is_one_line(store, tmp_path):
    with pytest.raises(BinacError, match=f"^store object missing: s3://{store.bucket}/lab/one/nothing$"):
        store.get_bytes("nothing", ABC)
    other = ObjectStore("no-such-bucket-here", "", store.endpoint)
    with pytest.raises(BinacError, match="^the store's bucket does not exist: s3://no-such-bucket-here$"):
        other.put_bytes("k", b"abc")


def test_without_credentials_the_store_says_which_variables(store, monkeypatch, tmp_path):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(BinacError, match="^no credentials for the store s3://.*: set AWS_ACCESS_KEY_ID and"):
        store.put_bytes("k", b"abc")


@pytest.mark.parametrize("key", ["", "/abs/key", "a//b", "a/./b", "a/../b", "..", "a\\b", "a/"])
def test_a_key_that_is_not_store_relative_is_refused(key):
    with pytest.raises(BinacError, match="^not a store-relative key"):
        check_key(key)
    with pytest.raises(BinacError, match="^not a store-relative key"):
        ObjectStore("bucket").object_name(key)


def test_a_reader_must_name_at_least_16_hex_digits():
    with pytest.raises(BinacError, match="^not a sha256 digest"):
        ObjectStore("bucket").get_bytes("k", ABC[:15])
    with pytest.raises(BinacError, match="^not a sha256 digest"):
        ObjectStore("bucket").get_bytes("k", ABC.upper())


def test_the_store_url_and_the_environment():
    assert parse_store_url("s3://bucket") == ("bucket", "")
    assert parse_store_url("s3://bucket/lab/one/") == ("bucket", "lab/one")
    for bad in ("http://bucket/x", "s3://", "s3:///x", "bucket", "s3://b/a/../c"):
        with pytest.raises(BinacError, match="^BINAC_STORE must be an s3://bucket"):
            parse_store_url(bad)
    assert store_from_env({}) is None and store_from_env({"BINAC_STORE": " "}) is None
    assert store_from_env({"BINAC_STORE": "s3://b/p"}) == ObjectStore("b", "p", None, "us-east-1")
    env = {"BINAC_STORE": "s3://b", "AWS_ENDPOINT_URL": "http://aws:1", "AWS_REGION": "eu-west-3"}
    assert store_from_env(env) == ObjectStore("b", "", "http://aws:1", "eu-west-3")
    env |= {"BINAC_STORE_ENDPOINT": "http://minio:9000", "AWS_DEFAULT_REGION": "us-west-2"}
    assert store_from_env(env) == ObjectStore("b", "", "http://minio:9000", "us-west-2")


def test_without_a_store_boto3_is_not_imported():
    """`BINAC_STORE` unset: importing the module and asking for the store loads nothing of boto3."""
    import subprocess
    import sys

    code = (
        "import sys; from binac_core.foundation.objects import store_from_env; "
        "assert store_from_env({}) is None; print('boto3' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
