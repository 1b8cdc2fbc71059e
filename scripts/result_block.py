"""Save Prefect's result storage in the object store as a block, and make it the server's default (`make lab`).

Run with `PREFECT_API_URL` (and `PREFECT_API_AUTH_STRING` where the server requires it) pointing at the lab's
Prefect server and `BINAC_STORE` naming the store (`binac_core.foundation.objects`). It saves an `S3Bucket` block
of prefect-aws (https://docs.prefect.io/integrations/prefect-aws/, "S3Bucket: AWS S3 or S3-compatible object
storage like MinIO") named `BLOCK_NAME`, whose folder is `<prefix>/prefect-results` in the store's bucket, at the
store's endpoint with path-style addresses; then makes it the server's default result storage (as `prefect
result-storage set` does), so that a flow run whose environment names no block stores its results there too. A client
names it with `PREFECT_RESULTS_DEFAULT_STORAGE_BLOCK=s3-bucket/<name>` (Prefect's results settings:
https://docs.prefect.io/v3/advanced/results), which `lab.env` carries.

The block holds no credentials: its `AwsCredentials` is empty, so every process that reads or writes a result
finds the store's credentials the way boto3 does (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` from its own
environment, i.e. `lab.env`), and the Prefect server stores no secret. It does not create the bucket (`make lab`
does, `ObjectStore.ensure_bucket`)."""

from __future__ import annotations

import sys
from pathlib import Path

BLOCK_TYPE = "s3-bucket"
BLOCK_NAME = "binac-results"
SLUG = f"{BLOCK_TYPE}/{BLOCK_NAME}"
"""What `PREFECT_RESULTS_DEFAULT_STORAGE_BLOCK` names."""
FOLDER = "prefect-results"
"""The results' folder under the store's prefix."""


def save_block() -> str:
    """Save (or overwrite) the block from this process's environment and make it the server's default result
    storage; returns its slug."""
    from prefect.client.orchestration import get_client
    from prefect_aws import AwsClientParameters, AwsCredentials, S3Bucket

    from binac_core.errors import BinacError
    from binac_core.foundation.objects import store_from_env

    store = store_from_env()
    if store is None:
        raise BinacError("BINAC_STORE is not set: Prefect's results live in the object store it names")
    params = AwsClientParameters(endpoint_url=store.endpoint, config={"s3": {"addressing_style": "path"}})
    credentials = AwsCredentials(region_name=store.region, aws_client_parameters=params)
    folder = f"{store.prefix}/{FOLDER}" if store.prefix else FOLDER
    block = S3Bucket(bucket_name=store.bucket, bucket_folder=folder, credentials=credentials)
    block_id = block.save(BLOCK_NAME, overwrite=True)
    with get_client(sync_client=True) as client:
        client.update_server_default_result_storage(block_id)
    return SLUG


def main() -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from binac_core.errors import BinacError

    try:
        print(save_block())
    except BinacError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
