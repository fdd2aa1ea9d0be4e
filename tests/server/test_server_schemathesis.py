"""Property-based testing of the HTTP API: schemathesis generates requests from the server's own OpenAPI
document (/openapi.json), valid ones and ones that break the schema, and checks every answer: never a 5xx,
a status and content type the document lists, a body of the documented shape, and invalid data refused.

A bounded run for the suite (HYPOTHESIS_MAX_EXAMPLES per operation, default 15, about a minute on 2 cores);
the longer campaign is the same test with a larger count (see the README's server section)."""
from __future__ import annotations

import os
from collections import Counter

import pytest
from hypothesis import HealthCheck, settings

schemathesis = pytest.importorskip("schemathesis")
from schemathesis.checks import not_a_server_error  # noqa: E402
from schemathesis.specs.openapi.checks import (  # noqa: E402
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from pyllama90a.tools.server_process import ServerProcess  # noqa: E402

pytestmark = pytest.mark.server  # (the test tier: tests/conftest.py)

MAX_EXAMPLES = int(os.environ.get("HYPOTHESIS_MAX_EXAMPLES", "15"))
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance,
          negative_data_rejection]
STATUSES: Counter[int] = Counter()


@pytest.fixture(scope="module")
def api_server(model_path, tmp_path_factory):
    # max_tokens at most 4: the generated requests stay cheap, so the examples go to input variety; a slot folder,
    # so the slot actions answer (without one they are a 501 by design)
    with ServerProcess(["--model", str(model_path), "--parallel", "2", "--n-ctx", "2048", "--threads", "2",
                        "--max-tokens-default", "4", "--max-tokens-limit", "4",
                        "--slot-save-path", str(tmp_path_factory.mktemp("slot-files"))]) as srv:
        yield srv


@pytest.fixture(scope="module")
def api_schema(api_server):
    return schemathesis.openapi.from_url(api_server.base_url + "/openapi.json")


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
def test_api_conforms_and_never_fails(case) -> None:
    response = case.call_and_validate(checks=CHECKS, timeout=60)
    STATUSES[response.status_code] += 1


def test_the_run_sent_requests_and_got_no_5xx() -> None:
    """(after the property test: what it sent, so a run that generated nothing cannot pass unseen)"""
    print(f"schemathesis: {sum(STATUSES.values())} requests, statuses {dict(sorted(STATUSES.items()))}")
    assert sum(STATUSES.values()) >= MAX_EXAMPLES
    assert not [s for s in STATUSES if s >= 500]
