"""A minimal Switchboard signaling client in Python: only the documented protocol."""

import asyncio
import itertools
import json

import websockets


class SignalingError(Exception):
    def __init__(self, error):
        super().__init__(f"{error['code']}: {error['message']}")
        self.code = error["code"]


class SignalingClient:
    def __init__(self, ws_url, token):
        self.url = f"{ws_url}?access_token={token}"
        self.ids = itertools.count(1)
        self.pending = {}
        self.events = asyncio.Queue()
        self.peer_id = None

    async def connect(self):
        self.ws = await websockets.connect(self.url, max_size=2**20)
        welcome = json.loads(await self.ws.recv())
        assert welcome["type"] == "session.welcome", welcome
        self.peer_id = welcome["data"]["peer_id"]
        self.reader = asyncio.create_task(self._read())
        return self

    async def _read(self):
        last_seq = 0
        async for text in self.ws:
            message = json.loads(text)
            if message["type"] in ("ok", "error") and message.get("id") in self.pending:
                self.pending.pop(message["id"]).set_result(message)
            elif "seq" in message:
                assert message["seq"] == last_seq + 1, f"events out of order: {last_seq} then {message['seq']}"
                last_seq = message["seq"]
                await self.events.put(message)

    async def request(self, type, data=None):
        request_id = next(self.ids)
        future = asyncio.get_running_loop().create_future()
        self.pending[request_id] = future
        await self.ws.send(json.dumps({"type": type, "id": request_id, "data": data or {}}))
        reply = await asyncio.wait_for(future, 10)
        if reply["type"] == "error":
            raise SignalingError(reply["error"])
        return reply.get("data")

    async def event(self, type=None, timeout=10):
        while True:
            message = await asyncio.wait_for(self.events.get(), timeout)
            if type is None or message["type"] == type:
                return message

    async def close(self):
        self.reader.cancel()
        await self.ws.close()
