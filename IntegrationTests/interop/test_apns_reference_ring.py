"""`switchboard serve` ringing phones through the independent APNs reference (hypercorn + h2 and
IntegrationTests/interop/apns_reference_app.py, which judges each request by Apple's documented rules),
not through the project's own sandbox: every push it sends passes Apple's rules; under 429 and
503 answers every device still rings exactly once per call; a push that gets no answer is
reported as failed and never sent a second time; GOAWAY (from apns_reference_goaway.py, on the
h2 library) moves pushes to new connections, each phone still ringing exactly once."""

import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

import trustme
from cryptography.hazmat.primitives import serialization

from conftest import BINARY, Server, free_port
from test_apns_reference_server import make_key, received, start_reference_server

HERE = os.path.dirname(__file__)

CALLEES = [f"callee{i}" for i in range(6)]


def voip_token(index):
    return f"{index + 1:064x}"


def wait_for(what, condition, timeout=20):
    deadline = time.time() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def switchboard_through(apns_url, apns_ca, key_path, phones):
    """A `switchboard serve` whose app pushes with `key_path` to `apns_url`, with `phones` users
    each registered with an iPhone; returns (server, token function)."""
    data_dir = tempfile.mkdtemp(prefix="switchboard-reference-")
    created = subprocess.run([BINARY, "app", "create", "--name", "Chat", "--bundle-id", "com.example.chat", "--data-dir", data_dir],
                             capture_output=True, text=True, timeout=60, check=True)
    app = json.loads(created.stdout)
    subprocess.run([BINARY, "app", "push-key", "--api-key", app["api_key"], "--key-file", key_path, "--key-id", "ABC123DEFG",
                    "--team-id", "TEAM123456", "--data-dir", data_dir], capture_output=True, text=True, timeout=60, check=True)
    server = Server("--apns-url", apns_url, "--apns-ca-file", apns_ca, "--apns-request-timeout-seconds", "2",
                    "--invites-per-minute", "1000", "--invites-per-pair-per-minute", "1000", data_dir=data_dir)
    credentials = (app["api_key"], app["api_secret"])

    def token(identity):
        return server.token(identity, grants={"call": True}, credentials=credentials)

    for index, callee in enumerate(phones):
        server.request("PUT", "/v1/devices/phone", token=token(callee), body={
            "platform": "ios", "voip_token": voip_token(index), "environment": "sandbox",
            "bundle_id": "com.example.chat", "callkit_enabled": True})
    return server, token


def test_a_ring_storm_through_the_reference_follows_apples_rules_and_rings_each_phone_once():
    key_path, public_key = make_key()
    reference, apns = start_reference_server(keys={"ABC123DEFG": public_key})
    server, token = switchboard_through(apns["url"], apns["ca"], key_path, CALLEES)
    try:
        caller = token("alice")

        def ring_everyone():
            return {callee: server.request("POST", "/v1/calls", token=caller, body={"callees": [callee]})["call_id"] for callee in CALLEES}

        def pushes_for(call_id):
            return [r for r in received(apns) if r["headers"].get("apns-push-type") == "voip" and call_id.upper() in r["body"]]

        def accepted(calls):
            return all(any(r["status"] == 200 for r in pushes_for(c)) for c in calls.values())

        # 1. Every push the server sends is valid by Apple's rules, one per phone.
        calls = ring_everyone()
        wait_for("a push per phone", lambda: accepted(calls))
        for callee, call_id in calls.items():
            pushes = pushes_for(call_id)
            assert len(pushes) == 1, f"{callee}: {pushes}"
            push = pushes[0]
            assert (push["status"], push["reason"]) == (200, None), push
            assert push["path"] == f"/3/device/{voip_token(CALLEES.index(callee))}"
            assert push["headers"]["apns-topic"] == "com.example.chat.voip"
            assert int(push["headers"]["apns-expiration"]) <= time.time() + 60, "expires with the ring"
            assert json.loads(push["body"])["UUID"] == call_id.upper()
        tokens = {r["headers"]["authorization"] for r in received(apns)}
        assert len(tokens) == 1, "one provider token for all of them (a new one within 20 minutes would be refused)"

        # 2. Apple throttles and fails: 429 three times, 503 twice. Each phone rings once still.
        for fault in ({"status": 429, "count": 3}, {"status": 503, "count": 2}):
            urllib.request.urlopen(urllib.request.Request(apns["url"] + "/faults", data=json.dumps(fault).encode(), method="POST"),
                                   context=apns["context"])
        calls = ring_everyone()
        wait_for("every phone to ring through the faults", lambda: accepted(calls), timeout=60)
        refused = 0
        for callee, call_id in calls.items():
            pushes = pushes_for(call_id)
            assert [p["status"] for p in pushes].count(200) == 1, f"{callee} rang once: {[p['status'] for p in pushes]}"
            refused += len([p for p in pushes if p["status"] in (429, 503)])
        assert refused == 5, "each transient answer was retried"

        # 3. A push APNs takes and never answers: reported failed, never sent again.
        urllib.request.urlopen(urllib.request.Request(apns["url"] + "/faults", data=json.dumps({"stall": 1}).encode(), method="POST"),
                               context=apns["context"])
        stalled = server.request("POST", "/v1/calls", token=caller, body={"callees": [CALLEES[0]]})["call_id"]

        def outcome():
            trace = server.request("GET", f"/v1/calls/{stalled}/trace", token=caller)["trace"]
            return [t for t in trace if t["channel"] == "voip_push" and t["event"] in ("apns_accepted", "apns_refused")]
        entries = wait_for("the stalled push's outcome", outcome, timeout=30)
        assert entries[0]["event"] == "apns_refused" and entries[0]["reason"] == "Transport", entries
        time.sleep(0.5)  # after the outcome: anything resent would have been sent by now
        assert len(pushes_for(stalled)) == 1, "a push with no answer is not sent a second time"
        assert all(r["reason"] in (None, "TooManyRequests", "ServiceUnavailable", "stalled") for r in received(apns)), \
            "nothing the server sent broke Apple's rules"
    finally:
        server.stop()
        reference.terminate()
        reference.wait(timeout=10)


def test_goaway_moves_pushes_to_new_connections_and_rings_each_phone_once():
    """APNs sends GOAWAY to move a client off a connection: streams past its last stream id were
    not processed and must be sent again on a new connection; the others must not be."""
    key_path, public_key = make_key()
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    work = tempfile.mkdtemp(prefix="apns-goaway-")
    paths = {name: os.path.join(work, name) for name in ("ca.pem", "cert.pem", "key.pem")}
    ca.cert_pem.write_to_path(paths["ca.pem"])
    cert.cert_chain_pems[0].write_to_path(paths["cert.pem"])
    cert.private_key_pem.write_to_path(paths["key.pem"])
    port, admin = free_port(), free_port()
    environment = dict(os.environ, REFERENCE_TEAM="TEAM123456", REFERENCE_TOPICS="com.example.chat", REFERENCE_KEYS=json.dumps(
        {"ABC123DEFG": public_key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()}))
    reference = subprocess.Popen(
        [sys.executable, os.path.join(HERE, "apns_reference_goaway.py"), "--port", str(port), "--admin-port", str(admin),
         "--cert", paths["cert.pem"], "--key", paths["key.pem"], "--goaway-after", "3"],
        cwd=HERE, env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    def records():
        return json.loads(urllib.request.urlopen(f"http://127.0.0.1:{admin}/received", timeout=5).read())
    wait_for("the GOAWAY reference to start", lambda: reference.poll() is None and _answers(admin), timeout=15)
    phones = [f"phone{i}" for i in range(12)]
    server, token = switchboard_through(f"https://127.0.0.1:{port}", paths["ca.pem"], key_path, phones)
    try:
        caller = token("alice")
        calls = {callee: server.request("POST", "/v1/calls", token=caller, body={"callees": [callee]})["call_id"] for callee in phones}

        def per_call():
            found = {c: [r for r in records() if c.upper() in r["body"]] for c in calls.values()}
            return found if all(any(r["status"] == 200 for r in rs) for rs in found.values()) else None
        found = wait_for("every phone to ring through the GOAWAYs", per_call, timeout=60)
        for callee, call_id in calls.items():
            statuses = [r["status"] for r in found[call_id]]
            assert statuses.count(200) == 1, f"{callee} rang exactly once: {found[call_id]}"
        everything = records()
        assert len({r["connection"] for r in everything}) >= 4, "GOAWAY after 3 moved the pushes to new connections"
        assert all(r["status"] == 200 or r["reason"] == "after_goaway" for r in everything), \
            [r for r in everything if r["status"] != 200 and r["reason"] != "after_goaway"]
    finally:
        server.stop()
        reference.terminate()
        reference.wait(timeout=10)


def _answers(port):
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/received", timeout=1).read()
        return True
    except OSError:
        return False
