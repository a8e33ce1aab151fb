"""`switchboard apns-sandbox` as stock third-party APNs clients use it, as they would use Apple's
service: aioapns 4.0 out of the box (no ALPN offered: HTTP/2 with prior knowledge, which APNs
takes) and h2 by hand for what a client library would not send (no push type, no device token)."""

import asyncio
import os
import random
import re
import select
import socket
import ssl
import string
import subprocess
import tempfile
import time

import h2.config
import h2.connection
import h2.events
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from conftest import BINARY, stop_process


class Sandbox:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="switchboard-sandbox-")
        self.log = tempfile.TemporaryFile(mode="w+")
        self.process = subprocess.Popen(
            [BINARY, "apns-sandbox", "--port", "0", "--admin-port", "0", "--accept-any-key", "--dir", self.dir],
            stdout=subprocess.PIPE, stderr=self.log)
        out, deadline, fd = "", time.time() + 20, self.process.stdout.fileno()
        while "admin API" not in out:
            if time.time() > deadline or self.process.poll() is not None:
                raise RuntimeError("the sandbox did not start: " + out)
            if select.select([fd], [], [], 0.2)[0]:
                out += os.read(fd, 65536).decode()
        match = re.search(r"APNs sandbox: https://([\d.]+):(\d+)", out)
        self.host, self.port = match.group(1), int(match.group(2))
        self.certificate = re.search(r"certificate:\s+(\S+)", out).group(1)

    def stop(self):
        stop_process(self.process, self.log, 10)


@pytest.fixture(scope="module")
def sandbox():
    running = Sandbox()
    yield running
    running.stop()


def provider_token():
    """A key of its own and its provider token (one key id per token: APNs refuses a key's new
    token within 20 minutes of its last, as the sandbox does)."""
    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    key_id = "".join(random.choice(string.ascii_uppercase + string.digits) for _ in range(10))
    token = jwt.encode({"iss": "TEAM123456", "iat": int(time.time())}, pem, algorithm="ES256", headers={"kid": key_id})
    return pem.decode(), key_id, token


def post(sandbox, path, headers, body=b'{"aps":{}}', alpn=None):
    """One HTTP/2 POST over TLS; (status, body). `alpn`: the protocols offered, None for none."""
    context = ssl.create_default_context(cafile=sandbox.certificate)
    if alpn is not None:
        context.set_alpn_protocols(alpn)
    with socket.create_connection((sandbox.host, sandbox.port), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            assert tls.selected_alpn_protocol() == (None if alpn is None else "h2")
            connection = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=True))
            connection.initiate_connection()
            stream = connection.get_next_available_stream_id()
            connection.send_headers(stream, [(":method", "POST"), (":scheme", "https"), (":authority", "127.0.0.1"),
                                             (":path", path)] + headers)
            connection.send_data(stream, body, end_stream=True)
            tls.sendall(connection.data_to_send())
            status, answer = None, b""
            while True:
                data = tls.recv(65536)
                assert data, "the sandbox closed the connection without an answer"
                for event in connection.receive_data(data):
                    if isinstance(event, h2.events.ResponseReceived):
                        status = int(dict(event.headers)[b":status"])
                    elif isinstance(event, h2.events.DataReceived):
                        answer += event.data
                        connection.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                    elif isinstance(event, h2.events.StreamEnded):
                        return status, answer
                tls.sendall(connection.data_to_send())


def test_a_client_that_offers_no_alpn_speaks_http2_with_prior_knowledge(sandbox):
    _, _, token = provider_token()
    headers = [("authorization", "bearer " + token), ("apns-topic", "com.example.chat.voip"), ("apns-push-type", "voip")]
    assert post(sandbox, "/3/device/" + "a1" * 32, headers, alpn=None)[0] == 200
    assert post(sandbox, "/3/device/" + "a1" * 32, headers, alpn=["h2"])[0] == 200


def test_apples_answers_for_a_missing_token_and_a_missing_push_type(sandbox):
    _, _, token = provider_token()
    bearer = [("authorization", "bearer " + token)]
    status, body = post(sandbox, "/3/device/", bearer + [("apns-topic", "com.example.chat.voip"), ("apns-push-type", "voip")])
    assert (status, b"MissingDeviceToken" in body) == (400, True)
    # apns-push-type is required on watchOS only: an iOS push without it is taken.
    assert post(sandbox, "/3/device/" + "a2" * 32, bearer + [("apns-topic", "com.example.chat")])[0] == 200
    assert post(sandbox, "/3/device/" + "a3" * 32, bearer + [("apns-topic", "com.example.chat.voip")])[0] == 200


def test_stock_aioapns_sends_a_voip_push(sandbox):
    """aioapns as it ships: its own TLS context (no ALPN), no push type set."""
    from aioapns import APNs, NotificationRequest
    from aioapns import connection as apns_connection

    apns_connection.APNsDevelopmentClientProtocol.APNS_SERVER = sandbox.host
    apns_connection.APNsDevelopmentClientProtocol.APNS_PORT = sandbox.port
    pem, key_id, _ = provider_token()

    async def send():
        context = ssl.create_default_context(cafile=sandbox.certificate)
        client = APNs(key=pem, key_id=key_id, team_id="TEAM123456", topic="com.example.chat.voip", use_sandbox=True,
                      ssl_context=context)
        request = NotificationRequest(device_token="b1" * 32, message={"aps": {}, "call_id": "c-1"})
        return await asyncio.wait_for(client.send_notification(request), 20)

    result = asyncio.run(send())
    assert result.is_successful, result.description
