"""Reference sender for the push benchmark: aioapns (PyPI) against the same local sandbox, with
the same count, concurrency and one connection. Prints the same JSON line as switchboard-bench."""

import argparse
import asyncio
import json
import ssl
import sys
import tempfile
import time

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

import aioapns
from aioapns import APNs, NotificationRequest, PushType
from aioapns import connection as apns_connection


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--ca-file", required=True)
    parser.add_argument("--count", type=int, default=20000)
    parser.add_argument("--concurrency", type=int, default=1000)
    args = parser.parse_args()

    # Point aioapns's development endpoint at the sandbox.
    apns_connection.APNsDevelopmentClientProtocol.APNS_SERVER = args.host
    apns_connection.APNsDevelopmentClientProtocol.APNS_PORT = args.port
    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    key_file = tempfile.NamedTemporaryFile(suffix=".p8", delete=False)
    key_file.write(pem)
    key_file.close()
    context = ssl.create_default_context(cafile=args.ca_file)
    context.set_alpn_protocols(["h2"])
    client = APNs(key=pem.decode(), key_id="BENCH12345", team_id="TEAM123456", topic="com.example.bench.voip",
                  use_sandbox=True, max_connections=1, ssl_context=context)
    message = {"call_id": "bench", "created_at": 1, "ring_expires_at": 2, "caller": "Alice"}

    def request(index):
        return NotificationRequest(device_token=f"{index + 1:064x}", message=message, time_to_live=0, priority=10,
                                   push_type=PushType.VOIP)

    await client.send_notification(request(0))  # warm up
    semaphore = asyncio.Semaphore(args.concurrency)
    failures = 0

    async def send(index):
        nonlocal failures
        async with semaphore:
            result = await client.send_notification(request(index))
            if not result.is_successful:
                failures += 1

    started = time.perf_counter()
    await asyncio.gather(*(send(i) for i in range(args.count)))
    seconds = time.perf_counter() - started
    print(json.dumps({"pushes_per_second": int(args.count / seconds), "count": args.count, "seconds": round(seconds, 3),
                      "failures": failures, "connections": 1}))


asyncio.run(main())
