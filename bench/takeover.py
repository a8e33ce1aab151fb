"""Takeover time of make bench's cluster section: a call rings, created on node A for a callee
connected to node B; node A is killed (SIGKILL); the callee answers again every 100 ms until
node B (or any survivor) accepts the answer. Prints one JSON line per call:
{"name": "takeover", "lease_seconds": L, "seconds": time from the kill to the accepted answer}.

    python3 takeover.py URL_A URL_B API_KEY API_SECRET PID_A LEASE_SECONDS

Runs with the project's virtualenv (the websockets package). The token is an HS256 JWT signed
here with the app's secret, as an app's backend signs it.
"""
import base64, hashlib, hmac, json, os, secrets, signal, sys, time

from websockets.sync.client import connect


def token(key, secret, identity):
    def b64(data):
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()
    now = int(time.time())
    claims = {"exp": now + 3600, "grants": {"call": True}, "iat": now, "iss": key, "nbf": now, "sub": identity}
    signing = b64(b'{"alg":"HS256","typ":"JWT"}') + "." + b64(json.dumps(claims, separators=(",", ":")).encode())
    return signing + "." + b64(hmac.new(secret.encode(), signing.encode(), hashlib.sha256).digest())


def session(url, key, secret, identity):
    for _ in range(20):
        try:
            return connect(f"{url}/v1/ws?access_token={token(key, secret, identity)}", open_timeout=5)
        except Exception:
            time.sleep(0.5)
    sys.exit(f"cannot connect to {url}")


def wait_for(ws, predicate, seconds=10):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        message = json.loads(ws.recv(timeout=max(0.01, deadline - time.monotonic())))
        if predicate(message):
            return message
    sys.exit("timed out")


def main():
    url_a, url_b, key, secret, pid_a, lease = sys.argv[1:7]
    run = secrets.token_hex(4)
    caller = session(url_a, key, secret, f"caller-{run}")
    callee = session(url_b, key, secret, f"callee-{run}")
    # The callee's session is open (and its node listens for it) once welcomed: a call placed
    # before that may find nobody to ring.
    wait_for(callee, lambda m: m.get("type") == "session.welcome")
    caller.send(json.dumps({"type": "call.create", "id": 1, "data": {"callees": [f"callee-{run}"], "ring_timeout_seconds": 120}}))
    reply = wait_for(caller, lambda m: m.get("id") == 1)
    if reply.get("type") != "ok":
        sys.exit(f"call.create: {reply}")
    call_id = reply["data"]["call_id"]
    wait_for(callee, lambda m: m.get("type") == "call.incoming" and m.get("data", {}).get("call_id") == call_id)
    killed = time.monotonic()
    os.kill(int(pid_a), signal.SIGKILL)
    attempt = 0
    while True:
        attempt += 1
        callee.send(json.dumps({"type": "call.answer", "id": 100 + attempt, "data": {"call_id": call_id}}))
        answer = wait_for(callee, lambda m: m.get("id") == 100 + attempt, seconds=60)
        if attempt == 1:
            first = {"first_reply_seconds": round(time.monotonic() - killed, 3), "first_reply": answer.get("error", {}).get("code", "ok")}
        if answer.get("type") == "ok":
            break
        if time.monotonic() - killed > 60:
            sys.exit(f"no node took the call over in 60 s: {answer}")
        time.sleep(0.1)
    print(json.dumps({"name": "takeover", "lease_seconds": int(lease), "seconds": round(time.monotonic() - killed, 3), "attempts": attempt, **first}))
    callee.close()


main()
