"""The APNs reference (apns_reference_app.verdict, Apple's documented rules) behind a plain HTTP/2
server on the `h2` library (the protocol stack hypercorn uses, which the project did not write),
for what an ASGI app cannot do: each connection gets GOAWAY after `--goaway-after` requests,
as APNs sends when it moves a client off a connection. The streams up to the GOAWAY's last
stream id are answered; later ones are not processed (RFC 9113 6.8: the client may retry them
elsewhere). Records every request with its verdict at GET http://127.0.0.1:ADMIN/received.

    python apns_reference_goaway.py --port P --admin-port A --cert C --key K --goaway-after N"""

import argparse
import asyncio
import json
import ssl
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import h2.config
import h2.connection
import h2.events
import h2.exceptions

from apns_reference_app import verdict

RECEIVED = []
LOCK = threading.Lock()


class Connection:
    def __init__(self, reader, writer, goaway_after, number):
        self.reader, self.writer, self.goaway_after, self.number = reader, writer, goaway_after, number
        self.h2 = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=False, header_encoding="utf-8"))
        self.streams = {}
        self.answered = 0
        self.last_stream = None  # set once GOAWAY is sent

    async def run(self):
        self.h2.initiate_connection()
        await self.flush()
        try:
            while True:
                data = await self.reader.read(65536)
                if not data:
                    return
                try:
                    events = self.h2.receive_data(data)
                except h2.exceptions.ProtocolError:
                    return
                for event in events:
                    if isinstance(event, h2.events.RequestReceived):
                        self.streams[event.stream_id] = (dict(event.headers), b"")
                    elif isinstance(event, h2.events.DataReceived):
                        headers, body = self.streams.get(event.stream_id, ({}, b""))
                        self.streams[event.stream_id] = (headers, body + event.data)
                        self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                    elif isinstance(event, h2.events.StreamEnded):
                        self.finish(event.stream_id)
                await self.flush()
        finally:
            self.writer.close()

    def finish(self, stream_id):
        headers, body = self.streams.pop(stream_id, ({}, b""))
        if self.last_stream is not None and stream_id > self.last_stream:
            with LOCK:
                RECEIVED.append({"connection": self.number, "stream": stream_id, "status": None, "reason": "after_goaway",
                                 "path": headers.get(":path"), "headers": headers, "body": body.decode(errors="replace")})
            return  # not processed: the client must send it again on another connection
        scope = {"method": headers.get(":method"), "path": headers.get(":path")}
        status, reason = verdict(scope, headers, body, certificate="authorization" not in headers)
        with LOCK:
            RECEIVED.append({"connection": self.number, "stream": stream_id, "status": status, "reason": reason,
                             "path": scope["path"], "headers": headers, "body": body.decode(errors="replace")})
        response = [(":status", str(status)), ("apns-id", headers.get("apns-id") or str(uuid.uuid4()))]
        payload = json.dumps({"reason": reason}).encode() if reason else b""
        if payload:
            response.append(("content-type", "application/json"))
        self.h2.send_headers(stream_id, response, end_stream=not payload)
        if payload:
            self.h2.send_data(stream_id, payload, end_stream=True)
        self.answered += 1
        if self.answered == self.goaway_after and self.last_stream is None:
            self.last_stream = stream_id
            self.h2.close_connection(last_stream_id=stream_id)

    async def flush(self):
        data = self.h2.data_to_send()
        if data:
            self.writer.write(data)
            await self.writer.drain()


class Admin(BaseHTTPRequestHandler):
    def do_GET(self):
        with LOCK:
            body = json.dumps(RECEIVED).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


async def main():
    parser = argparse.ArgumentParser()
    for name in ("--port", "--admin-port", "--goaway-after"):
        parser.add_argument(name, type=int, required=True)
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    args = parser.parse_args()
    admin = ThreadingHTTPServer(("127.0.0.1", args.admin_port), Admin)
    threading.Thread(target=admin.serve_forever, daemon=True).start()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(args.cert, args.key)
    context.set_alpn_protocols(["h2"])
    numbers = iter(range(1, 1_000_000))

    async def serve(reader, writer):
        await Connection(reader, writer, args.goaway_after, next(numbers)).run()

    server = await asyncio.start_server(serve, "127.0.0.1", args.port, ssl=context)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
