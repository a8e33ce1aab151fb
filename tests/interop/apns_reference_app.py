"""A minimal APNs-shaped ASGI app for hypercorn (an HTTP/2 server the project did not write):
records each request and answers 200 with an apns-id, or Apple's 400 BadDeviceToken for a
token of zeros. Used to show the Switchboard APNs client is not tuned to its own sandbox."""

import json

RECEIVED = []


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
    token = scope["path"].rsplit("/", 1)[-1]
    RECEIVED.append({"http_version": scope["http_version"], "method": scope["method"], "path": scope["path"],
                     "headers": headers, "body": body.decode()})
    if token == "0" * 64:
        await respond(send, 400, b'{"reason":"BadDeviceToken"}', headers.get("apns-id"))
    else:
        await respond(send, 200, b"", headers.get("apns-id"))


async def respond(send, status, body, apns_id=None):
    headers = [(b"content-type", b"application/json")]
    if apns_id:
        headers.append((b"apns-id", apns_id.encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
