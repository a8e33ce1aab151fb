"""One attack on a Switchboard server for a fixed time, for `make bench` (BENCH=abuse).

While it runs, scripts/bench.sh measures a well-behaved client's signal latency next to it.
Prints one JSON line with what the attacker did and what the server let through.

    abuse.py --base http://127.0.0.1:PORT --api-key K --api-secret S --attack NAME --seconds N
"""

import argparse
import asyncio
import base64
import json
import os
import time
import urllib.request

WS_KEY = "dGhlIHNhbXBsZSBub25jZQ=="


def token(base, key, secret, identity, grants):
    body = json.dumps({"identity": identity, "ttl": 3600, "grants": grants}).encode()
    request = urllib.request.Request(base + "/v1/tokens", data=body, method="POST")
    request.add_header("Authorization", "Basic " + base64.b64encode(f"{key}:{secret}".encode()).decode())
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())["token"]


def frame(opcode, payload):
    """A masked client frame (RFC 6455 5.2)."""
    mask = os.urandom(4)
    head = bytes([0x80 | opcode])
    n = len(payload)
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 65536:
        head += bytes([0x80 | 126]) + n.to_bytes(2, "big")
    else:
        head += bytes([0x80 | 127]) + n.to_bytes(8, "big")
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


async def websocket(host, port, access_token, device=None):
    """A raw WebSocket: (reader, writer) after the upgrade."""
    reader, writer = await asyncio.open_connection(host, port)
    query = f"access_token={access_token}" + (f"&device_id={device}" if device else "")
    writer.write((f"GET /v1/ws?{query} HTTP/1.1\r\nHost: {host}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
                  f"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {WS_KEY}\r\n\r\n").encode())
    head = await reader.readuntil(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 101"):
        raise RuntimeError(head.decode(errors="replace"))
    return reader, writer


async def frames(reader):
    """Yields (opcode, payload) of server frames (unmasked)."""
    while True:
        b0, b1 = await reader.readexactly(2)
        n = b1 & 0x7F
        if n == 126:
            n = int.from_bytes(await reader.readexactly(2), "big")
        elif n == 127:
            n = int.from_bytes(await reader.readexactly(8), "big")
        yield b0 & 0x0F, await reader.readexactly(n)


class Attack:
    def __init__(self, args):
        self.args = args
        self.base = args.base
        self.host, port = args.base.split("//")[1].split(":")
        self.port = int(port)
        self.deadline = time.monotonic() + args.seconds
        self.stats = {"attack": args.attack}

    def count(self, key, n=1):
        self.stats[key] = self.stats.get(key, 0) + n

    def running(self):
        return time.monotonic() < self.deadline

    def token(self, identity, grants=None):
        return token(self.base, self.args.api_key, self.args.api_secret, identity,
                     grants or {"room": "*", "roomJoin": True, "call": True})

    async def slowloris(self, connections=1000):
        """Opens connections that send a request head one header a second, and reopens each as
        the server closes it."""
        lifetimes = []

        async def one():
            while self.running():
                opened = time.monotonic()
                try:
                    reader, writer = await asyncio.open_connection(self.host, self.port)
                except OSError:
                    self.count("connect_failures")
                    await asyncio.sleep(0.5)
                    continue
                self.count("connections_opened")
                writer.write(b"GET /v1/ws HTTP/1.1\r\nHost: x\r\n")
                closed = asyncio.ensure_future(reader.read(1))
                while self.running() and not closed.done():
                    await asyncio.wait([closed], timeout=1)
                    if not closed.done():
                        writer.write(b"X-Slow: 1\r\n")
                if closed.done():
                    self.count("closed_by_server")
                    lifetimes.append(time.monotonic() - opened)
                else:
                    closed.cancel()
                writer.close()

        await asyncio.gather(*(one() for _ in range(connections)))
        lifetimes.sort()
        self.stats["median_seconds_before_cut"] = round(lifetimes[len(lifetimes) // 2], 2) if lifetimes else None

    async def keep_connected(self, access, device, work):
        """Runs `work(reader, writer)` on a WebSocket, opening a new one whenever the server
        drops it, until the time is up."""
        while self.running():
            try:
                reader, writer = await websocket(self.host, self.port, access, device)
            except (OSError, RuntimeError):
                self.count("connect_failures")
                await asyncio.sleep(0.1)
                continue
            self.count("connections_opened")
            try:
                await work(reader, writer)
            except (asyncio.IncompleteReadError, ConnectionError):
                pass
            if self.running():
                self.count("dropped_by_server")
            writer.close()

    async def read_replies(self, reader):
        """Counts what the server answers: pongs, `ok`, errors by code, the close code."""
        try:
            async for opcode, data in frames(reader):
                if opcode == 0xA:
                    self.count("pongs")
                elif opcode == 0x8:
                    self.count(f"closed_{int.from_bytes(data[:2], 'big')}")
                    return
                elif opcode == 0x1:
                    message = json.loads(data)
                    if message.get("type") == "ok":
                        self.count("accepted")
                    elif message.get("type") == "error":
                        self.count("refused_" + message["error"]["code"])
        except (asyncio.IncompleteReadError, ConnectionError):
            pass

    async def send_until_dropped(self, reader, writer, batch, counter, per_batch):
        """Writes `batch` as fast as the socket takes it until the server closes."""
        reading = asyncio.ensure_future(self.read_replies(reader))
        try:
            while self.running() and not reading.done():
                writer.write(batch())
                await writer.drain()
                self.count(counter, per_batch)
                await asyncio.sleep(0)
        finally:
            reading.cancel()

    async def ping_flood(self, connections=20):
        """WebSocket ping frames as fast as the sockets take them."""
        access = self.token("pinger")
        pings = frame(0x9, b"flood") * 256

        async def flood(reader, writer):
            await self.send_until_dropped(reader, writer, lambda: pings, "pings_sent", 256)

        await asyncio.gather(*(self.keep_connected(access, f"pinger-{i}", flood) for i in range(connections)))

    async def invite_storm(self):
        """One caller pipelining call.create to 16 callees as fast as the socket takes them."""
        access = self.token("storm-caller")
        callees = [f"storm-callee-{i}" for i in range(16)]
        sent = iter(range(1 << 62))

        def invites():
            return b"".join(
                frame(0x1, json.dumps({"type": "call.create", "id": next(sent), "data": {"callees": callees}}).encode())
                for _ in range(50))

        async def storm(reader, writer):
            await self.send_until_dropped(reader, writer, invites, "invites_sent", 50)

        await self.keep_connected(access, "storm-caller-web", storm)

    async def registration_spam(self, connections=8):
        """One user's token registering new devices over keep-alive HTTP connections."""
        access = self.token("spammer")

        async def one(index):
            reader, writer = await asyncio.open_connection(self.host, self.port)
            n = 0
            while self.running():
                body = b'{"platform":"web"}'
                writer.write((f"PUT /v1/devices/spam-{index}-{n} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {access}\r\n"
                              f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body)
                n += 1
                head = await reader.readuntil(b"\r\n\r\n")
                status = int(head.split(b" ", 2)[1])
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                await reader.readexactly(length)
                self.count(f"status_{status}")
            writer.close()

        await asyncio.gather(*(one(i) for i in range(connections)))

    async def nested_json(self, connections=10):
        """Messages just under the size limit, nested as deep as they can be."""
        access = self.token("nester")
        depth = 30000
        messages = frame(0x1, b"[" * depth + b"]" * depth) * 10

        async def nest(reader, writer):
            await self.send_until_dropped(reader, writer, lambda: messages, "messages_sent", 10)

        await asyncio.gather(*(self.keep_connected(access, f"nester-{i}", nest) for i in range(connections)))

    async def oversized(self, connections=10):
        """1 MiB messages (the limit is 64 KiB): each connection is closed, and reopened."""
        access = self.token("oversizer")
        payload = frame(0x1, b'"' + b"x" * (1 << 20) + b'"')

        async def oversize(reader, writer):
            writer.write(payload)
            await writer.drain()
            await self.read_replies(reader)

        await asyncio.gather(*(self.keep_connected(access, f"oversizer-{i}", oversize) for i in range(connections)))

    async def none(self):
        await asyncio.sleep(self.args.seconds)


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", required=True)
    parser.add_argument("--api-key", required=True)
    parser.add_argument("--api-secret", required=True)
    parser.add_argument("--attack", required=True,
                        choices=["none", "slowloris", "ping-flood", "invite-storm", "registration-spam", "nested-json", "oversized"])
    parser.add_argument("--seconds", type=float, default=10)
    args = parser.parse_args()
    attack = Attack(args)
    await getattr(attack, args.attack.replace("-", "_"))()
    print(json.dumps(attack.stats), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
