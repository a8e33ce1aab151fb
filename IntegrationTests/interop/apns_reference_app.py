"""An APNs-shaped ASGI app for hypercorn, an HTTP/2 server the project did not write. It judges
every request by the rules Apple documents for its provider API ("Sending notification
requests to APNs", "Establishing a token-based connection to APNs", "Handling notification
responses from APNs") and answers as APNs does, so that the Switchboard APNs client and server
are not graded only by their own sandbox:

- POST /3/device/<64 hex> only (405 MethodNotAllowed, 404 BadPath, 400 BadDeviceToken);
- a provider token (ES256 JWT with `kid`, `iss` = the team, `iat`) that verifies with the key
  registered for its `kid` (403 InvalidProviderToken / MissingProviderToken), is at most an
  hour old (403 ExpiredProviderToken), and is not replaced by a new one within 20 minutes of
  the last (429 TooManyProviderTokenUpdates); or a client certificate (no token then);
- apns-topic present (400 MissingTopic) and one of the app's topics, `.voip` for VoIP pushes
  (400 DeviceTokenNotForTopic / InvalidPushType); apns-push-type one of Apple's; apns-priority
  10, 5 or 1 (400 BadPriority); apns-expiration an integer (400 BadExpirationDate); apns-id a
  lower-case UUID when given (400 BadMessageId); apns-collapse-id at most 64 bytes
  (400 BadCollapseId); a JSON payload of at most 4096 bytes, 5120 for VoIP (413 PayloadTooLarge);
- 200 with the request's apns-id (or a new one).

Every request is recorded with its verdict (GET /received). POST /faults queues Apple's
transient answers for the next requests, {"status": 429 | 500 | 503, "count": N}, or
{"stall": N}: the next N valid requests are recorded and never answered.

Configuration, from the environment: REFERENCE_KEYS (JSON: key id -> PEM public key),
REFERENCE_TEAM, REFERENCE_TOPICS (comma-separated bundle ids), REFERENCE_BAD_TOKENS
(comma-separated device tokens APNs does not know; all zeros by default)."""

import asyncio
import base64
import json
import os
import re
import time
import uuid

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, utils

RECEIVED = []
FAULTS = []  # ("status", code) or ("stall",), consumed one per valid request
TOKENS = {}  # key id -> (jwt, iat, accepted_at)
KEYS = {kid: serialization.load_pem_public_key(pem.encode()) for kid, pem in json.loads(os.environ.get("REFERENCE_KEYS", "{}")).items()}
TEAM = os.environ.get("REFERENCE_TEAM", "")
TOPICS = [t for t in os.environ.get("REFERENCE_TOPICS", "").split(",") if t]
# Tokens APNs does not know for this environment (400 BadDeviceToken).
BAD_TOKENS = {t.lower() for t in os.environ.get("REFERENCE_BAD_TOKENS", "0" * 64).split(",") if t}
PUSH_TYPES = {"alert", "background", "voip", "complication", "fileprovider", "mdm", "location", "liveactivity", "pushtotalk", "widgets"}
REASONS = {429: "TooManyRequests", 500: "InternalServerError", 503: "ServiceUnavailable"}
UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def b64decode(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def check_token(authorization, now):
    """None when the provider token is good, else (status, reason)."""
    if not authorization.startswith("bearer "):
        return 403, "MissingProviderToken"
    jwt = authorization[len("bearer "):]
    try:
        head, claims, signature = jwt.split(".")
        header, payload, raw = json.loads(b64decode(head)), json.loads(b64decode(claims)), b64decode(signature)
        key = KEYS[header["kid"]]
        if header.get("alg") != "ES256" or payload.get("iss") != TEAM or not isinstance(payload.get("iat"), int) or len(raw) != 64:
            return 403, "InvalidProviderToken"
        der = utils.encode_dss_signature(int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big"))
        key.verify(der, f"{head}.{claims}".encode(), ec.ECDSA(hashes.SHA256()))
    except (ValueError, KeyError, InvalidSignature):
        return 403, "InvalidProviderToken"
    if now - payload["iat"] > 3600:
        return 403, "ExpiredProviderToken"
    current = TOKENS.get(header["kid"])
    if current and current[0] != jwt and now - current[2] < 20 * 60:
        return 429, "TooManyProviderTokenUpdates"
    if not current or current[0] != jwt:
        TOKENS[header["kid"]] = (jwt, payload["iat"], now)
    return None


def verdict(scope, headers, body, certificate):
    """(status, reason) by Apple's rules, reason None for a good request."""
    if scope["method"] != "POST":
        return 405, "MethodNotAllowed"
    match = re.fullmatch(r"/3/device(?:/([^/]*))?", scope["path"])
    if not match:
        return 404, "BadPath"
    if not match.group(1):
        return 400, "MissingDeviceToken"
    if not re.fullmatch(r"[0-9a-fA-F]{64}", match.group(1)) or match.group(1).lower() in BAD_TOKENS:
        return 400, "BadDeviceToken"
    if not certificate:
        refused = check_token(headers.get("authorization", ""), int(time.time()))
        if refused:
            return refused
    topic = headers.get("apns-topic")
    if topic is None:
        return 400, "MissingTopic"
    # Required on watchOS only: without it, a .voip topic's push is a VoIP push, any other an alert.
    push_type = headers.get("apns-push-type") or ("voip" if topic.endswith(".voip") else "alert")
    if push_type not in PUSH_TYPES:
        return 400, "InvalidPushType"
    base = topic[: -len(".voip")] if topic.endswith(".voip") else topic
    if base not in TOPICS:
        return 400, "TopicDisallowed"
    if (push_type == "voip") != topic.endswith(".voip"):
        return 400, "DeviceTokenNotForTopic"
    if headers.get("apns-priority", "10") not in ("10", "5", "1"):
        return 400, "BadPriority"
    if not re.fullmatch(r"\d+", headers.get("apns-expiration", "0")):
        return 400, "BadExpirationDate"
    if "apns-id" in headers and not UUID_RE.match(headers["apns-id"]):
        return 400, "BadMessageId"
    if len(headers.get("apns-collapse-id", "").encode()) > 64:
        return 400, "BadCollapseId"
    if len(body) > (5120 if push_type == "voip" else 4096):
        return 413, "PayloadTooLarge"
    try:
        if not isinstance(json.loads(body), dict):
            return 400, "PayloadEmpty"
    except ValueError:
        return 400, "PayloadEmpty"
    return 200, None


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    headers = {k.decode(): v.decode() for k, v in scope["headers"]}
    if scope["path"] == "/received":
        await respond(send, 200, json.dumps(RECEIVED).encode())
        return
    if scope["path"] == "/faults":
        fault = json.loads(body)
        FAULTS.extend([("stall",)] * fault["stall"] if "stall" in fault else [("status", fault["status"])] * fault["count"])
        await respond(send, 204, b"")
        return
    certificate = bool(scope.get("extensions", {}).get("tls", {}).get("client_cert_chain")) or "authorization" not in headers
    status, reason = verdict(scope, headers, body, certificate)
    record = {"http_version": scope["http_version"], "method": scope["method"], "path": scope["path"],
              "headers": headers, "body": body.decode(errors="replace"), "status": status, "reason": reason}
    RECEIVED.append(record)
    if status == 200 and FAULTS:
        fault = FAULTS.pop(0)
        if fault[0] == "stall":
            record["status"], record["reason"] = None, "stalled"
            await asyncio.sleep(3600)
            return
        status, reason = fault[1], REASONS[fault[1]]
        record["status"], record["reason"] = status, reason
    apns_id = headers.get("apns-id") or str(uuid.uuid4())
    if reason:
        await respond(send, status, json.dumps({"reason": reason}).encode(), apns_id)
    else:
        await respond(send, 200, b"", apns_id)


async def respond(send, status, body, apns_id=None):
    headers = [(b"content-type", b"application/json")]
    if apns_id:
        headers.append((b"apns-id", apns_id.encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
