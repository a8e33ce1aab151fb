"""REST API fuzzing: schemathesis generates requests for every operation of the server's own
OpenAPI document (/v1/openapi.json), valid and invalid, and checks each answer: never a 5xx,
a status code the document lists, the declared content type, and a body matching its schema."""

import base64
import re

import pytest
import schemathesis
from hypothesis import HealthCheck, reject, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from conftest import Server

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.fixture(scope="module")
def api_server():
    server = Server()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def api_schema(api_server):
    schema = schemathesis.openapi.from_url(api_server.base_url + "/v1/openapi.json")
    # A NUL byte (%00) in a URL: libwebsockets closes the connection without an answer, before
    # the server sees the request (docs/security.md, known limits).
    schema.config.generation.update(allow_x00=False)
    return schema


schema = schemathesis.pytest.from_fixture("api_schema")


@pytest.fixture(scope="module")
def credentials(api_server):
    token = api_server.token("fuzzer", grants={"room": "*", "roomJoin": True, "call": True, "admin": True}, ttl=3600)
    basic = base64.b64encode(f"{api_server.api_key}:{api_server.api_secret}".encode()).decode()
    return {"bearer": "Bearer " + token, "basic": "Basic " + basic}


@schema.parametrize()
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
def test_every_operation_answers_as_documented(case, api_server, credentials):
    # An encoded CR or LF in a path: libwebsockets cuts the URL there, so the server answers
    # the shorter path (docs/security.md, known limits); nothing to check against the document.
    if re.search(r"[\r\n]|%0[adAD]", case.formatted_path):
        reject()  # not a pass: hypothesis draws another case instead
    auth = credentials["basic"] if case.operation.path == "/v1/tokens" else credentials["bearer"]
    headers = dict(case.headers or {})
    headers.setdefault("Authorization", auth)
    case.call_and_validate(base_url=api_server.base_url, headers=headers, checks=CHECKS)
