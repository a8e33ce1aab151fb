"""Fixtures for interop tests: a real Switchboard server and a real coturn, on loopback only."""

import json
import os
import re
import select
import shutil
import socket
import struct
import subprocess
import tempfile
import time
import urllib.request
import base64

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "../.."))
BINARY = os.environ.get("SWITCHBOARD_BIN", os.path.join(ROOT, ".build/debug/switchboard"))


def free_port(kind=socket.SOCK_STREAM):
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A `switchboard serve` process on 127.0.0.1 with its own data directory."""

    def __init__(self, *args, data_dir=None):
        self.data_dir = data_dir or tempfile.mkdtemp(prefix="switchboard-interop-")
        self.log = tempfile.TemporaryFile(mode="w+")
        self.process = subprocess.Popen(
            [BINARY, "serve", "--port", "0", "--data-dir", self.data_dir, "--web-root", os.path.join(ROOT, "web"),
             "--log-level", "warn", *args],
            stdout=subprocess.PIPE, stderr=self.log)
        # Read what it prints with a deadline: a server that prints nothing must fail the
        # fixture, not block it.
        out = ""
        deadline = time.time() + 20
        fd = self.process.stdout.fileno()
        while "Switchboard is running" not in out:
            left = deadline - time.time()
            if left <= 0 or self.process.poll() is not None:
                self.log.seek(0)
                raise RuntimeError("server did not start: " + out + self.log.read())
            ready, _, _ = select.select([fd], [], [], min(left, 0.2))
            if ready:
                out += os.read(fd, 65536).decode()
        self.base_url = re.search(r"Switchboard is running: (http://[^/]+)/", out).group(1)
        key = re.search(r"API key\s+(sbk_\w+)", out)
        secret = re.search(r"API secret\s+(\w+)", out)
        self.api_key = key.group(1) if key else None
        self.api_secret = secret.group(1) if secret else None

    @property
    def ws_url(self):
        return self.base_url.replace("http://", "ws://") + "/v1/ws"

    def request(self, method, path, body=None, token=None, basic=None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base_url + path, data=data, method=method)
        if token:
            req.add_header("Authorization", "Bearer " + token)
        if basic:
            req.add_header("Authorization", "Basic " + base64.b64encode(f"{basic[0]}:{basic[1]}".encode()).decode())
        with urllib.request.urlopen(req, timeout=10) as response:
            text = response.read().decode()
            return json.loads(text) if text else None

    def token(self, identity, grants=None, ttl=600, credentials=None):
        key, secret = credentials or (self.api_key, self.api_secret)
        body = {"identity": identity, "name": identity.capitalize(), "ttl": ttl,
                "grants": grants or {"room": "*", "roomJoin": True}}
        return self.request("POST", "/v1/tokens", body, basic=(key, secret))["token"]

    def stop(self):
        stop_process(self.process, self.log, timeout=10)


def stop_process(process, log, timeout):
    """Terminates `process` (killed past `timeout` seconds) and closes its log."""
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
    log.close()


class Coturn:
    """coturn in the foreground on loopback with the REST-API shared secret."""

    def __init__(self, secret):
        self.secret = secret
        self.port = free_port(socket.SOCK_DGRAM)
        self.dir = tempfile.mkdtemp(prefix="coturn-")
        relay = free_port(socket.SOCK_DGRAM)
        config = "\n".join([
            "listening-ip=127.0.0.1", "relay-ip=127.0.0.1", f"listening-port={self.port}",
            f"min-port={relay}", f"max-port={relay + 50}", "use-auth-secret",
            f"static-auth-secret={secret}", "realm=switchboard.test", "allow-loopback-peers",
            "no-tls", "no-dtls", "no-cli", "fingerprint", "simple-log", "log-file=stdout",
            f"pidfile={self.dir}/turnserver.pid", f"userdb={self.dir}/turndb",
        ])
        path = os.path.join(self.dir, "turnserver.conf")
        with open(path, "w") as f:
            f.write(config + "\n")
        self.log = open(os.path.join(self.dir, "turnserver.log"), "w")
        self.process = subprocess.Popen(["turnserver", "-c", path], stdout=self.log, stderr=subprocess.STDOUT)
        # Ready when it answers a STUN binding request (RFC 5389), not after a guessed sleep.
        deadline = time.time() + 20
        while not self.answers_stun():
            if self.process.poll() is not None or time.time() > deadline:
                raise RuntimeError("turnserver did not start: " + open(os.path.join(self.dir, "turnserver.log")).read())
            time.sleep(0.05)

    def answers_stun(self):
        request = struct.pack("!HHI12s", 0x0001, 0, 0x2112A442, os.urandom(12))
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(0.2)
            s.sendto(request, ("127.0.0.1", self.port))
            try:
                reply, _ = s.recvfrom(2048)
            except OSError:
                return False
        return len(reply) >= 20 and struct.unpack("!H", reply[:2])[0] == 0x0101 and reply[8:20] == request[8:20]

    @property
    def url(self):
        return f"turn:127.0.0.1:{self.port}?transport=udp"

    def stop(self):
        stop_process(self.process, self.log, timeout=5)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def server():
    s = Server()
    yield s
    s.stop()


@pytest.fixture
def coturn():
    if shutil.which("turnserver") is None:
        pytest.skip("coturn's turnserver is not installed (scripts/deps.sh test installs it)")
    c = Coturn(secret="interop-" + base64.b16encode(os.urandom(8)).decode())
    yield c
    c.stop()
