"""Reference relay for the relay benchmark: the subset of the Switchboard protocol that
`switchboard-bench relay` uses (room.join with its peer list, signal to one peer, ok replies),
served by Python `websockets` (PyPI) on asyncio. Every message is parsed as JSON and routed by
room and peer id, as the real server does; access tokens are not checked."""

import argparse
import asyncio
import itertools
import json

from websockets.asyncio.server import serve
from websockets.exceptions import ConnectionClosed

rooms: dict[str, dict[str, object]] = {}
ids = itertools.count(1)


def dumps(value):
    return json.dumps(value, separators=(",", ":"))


async def handle(connection):
    peer_id = f"p{next(ids)}"
    joined: list[str] = []
    try:
        async for raw in connection:
            message = json.loads(raw)
            kind, data = message.get("type"), message.get("data") or {}
            reply_id = message.get("id")
            if kind == "room.join":
                room = rooms.setdefault(data["room"], {})
                peers = [{"peer_id": other} for other in room]
                room[peer_id] = connection
                joined.append(data["room"])
                await connection.send(dumps({"type": "ok", "id": reply_id, "data": {"peer_id": peer_id, "peers": peers}}))
            elif kind == "signal":
                target = rooms.get(data.get("room"), {}).get(data.get("to"))
                if target is None:
                    await connection.send(dumps({"type": "error", "id": reply_id, "error": {"code": "peer_not_found"}}))
                    continue
                await target.send(dumps({"type": "signal", "data": {"room": data["room"], "from": peer_id, "signal": data.get("signal")}}))
                await connection.send(dumps({"type": "ok", "id": reply_id}))
    except ConnectionClosed:
        pass
    finally:
        for room in joined:
            rooms.get(room, {}).pop(peer_id, None)


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    async with serve(handle, "127.0.0.1", args.port, compression=None):
        print("listening", flush=True)
        await asyncio.Future()


asyncio.run(main())
