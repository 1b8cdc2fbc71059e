"""flows/exclusive.py without a server: a run takes a Prefect slot only with an object store and a Prefect server;
otherwise `run_slot` holds nothing and asks nothing (one machine: the local run lock alone). With a real server:
tests/integration/test_liveness.py."""

import pytest
from prefect.settings import PREFECT_API_URL, temporary_settings

from flows import exclusive


@pytest.mark.parametrize(
    ("store", "api", "expected"),
    [("s3://b/lab", "http://127.0.0.1:1/api", True), ("", "http://127.0.0.1:1/api", False), ("s3://b/lab", "", False)],
)
def test_a_slot_is_taken_only_with_a_store_and_a_server(monkeypatch, store, api, expected):
    monkeypatch.setenv("BINAC_STORE", store)
    with temporary_settings(updates={PREFECT_API_URL: api or None}):
        assert exclusive.across_hosts() is expected


def test_without_other_hosts_no_slot_is_asked_for(monkeypatch):
    def asked(key):
        raise AssertionError("asked the Prefect server for a limit")

    monkeypatch.setattr(exclusive, "ensure_limit", asked)
    said = []
    with exclusive.run_slot("k1", None, across_hosts=False, wait_message=said.append):
        pass
    assert said == [] and exclusive.limit_name("k1") == "binac-run-k1"
