"""`switchboard serve` ringing phones through the independent APNs reference (hypercorn + h2 and
tests/interop/apns_reference_app.py, which judges each request by Apple's documented rules),
not through the project's own sandbox: every push it sends passes Apple's rules; under 429 and
503 answers every device still rings exactly once per call; a push that gets no answer is
reported as failed and never sent a second time."""

import json
import subprocess
import tempfile
import time
import urllib.request

from conftest import BINARY, Server
from test_apns_reference_server import make_key, received, start_reference_server

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


def test_a_ring_storm_through_the_reference_follows_apples_rules_and_rings_each_phone_once():
    key_path, public_key = make_key()
    reference, apns = start_reference_server(keys={"ABC123DEFG": public_key})
    data_dir = tempfile.mkdtemp(prefix="switchboard-reference-")
    created = subprocess.run([BINARY, "app", "create", "--name", "Chat", "--bundle-id", "com.example.chat", "--data-dir", data_dir],
                             capture_output=True, text=True, timeout=60, check=True)
    app = json.loads(created.stdout)
    subprocess.run([BINARY, "app", "push-key", "--api-key", app["api_key"], "--key-file", key_path, "--key-id", "ABC123DEFG",
                    "--team-id", "TEAM123456", "--data-dir", data_dir], capture_output=True, text=True, timeout=60, check=True)
    server = Server("--apns-url", apns["url"], "--apns-ca-file", apns["ca"], "--apns-request-timeout-seconds", "2",
                    "--invites-per-minute", "1000", "--invites-per-pair-per-minute", "1000", data_dir=data_dir)
    credentials = (app["api_key"], app["api_secret"])
    try:
        def token(identity):
            return server.token(identity, grants={"call": True}, credentials=credentials)

        for index, callee in enumerate(CALLEES):
            server.request("PUT", "/v1/devices/phone", token=token(callee), body={
                "platform": "ios", "voip_token": voip_token(index), "environment": "sandbox",
                "bundle_id": "com.example.chat", "callkit_enabled": True})
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
