"""`switchboard push` (the Switchboard APNs client) against hypercorn + h2, over TLS with ALPN h2."""

import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
import ssl
import socket

import pytest
import trustme

from conftest import BINARY, free_port

HERE = os.path.dirname(__file__)


def write_pems(ca, cert, prefix):
    """`ca`'s certificate, `cert`'s chain and its key as PEM files in a new directory: their paths."""
    work = tempfile.mkdtemp(prefix=prefix)
    paths = [os.path.join(work, name) for name in ("ca.pem", "cert.pem", "key.pem")]
    ca.cert_pem.write_to_path(paths[0])
    cert.cert_chain_pems[0].write_to_path(paths[1])
    cert.private_key_pem.write_to_path(paths[2])
    return paths


def start_reference_server(client_ca=None, keys=None, topics=("com.example.chat",)):
    """hypercorn with the reference app; `keys`: key id -> public key (provider tokens)."""
    ca = trustme.CA()
    ca_path, cert_path, key_path = write_pems(ca, ca.issue_cert("127.0.0.1", "localhost"), "apns-reference-")
    port = free_port()
    verify = []
    if client_ca:
        verify = ["--ca-certs", client_ca, "--verify-mode", "CERT_REQUIRED"]
    from cryptography.hazmat.primitives import serialization
    environment = dict(os.environ)
    environment["REFERENCE_KEYS"] = json.dumps({kid: key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode() for kid, key in (keys or {}).items()})
    environment["REFERENCE_TEAM"] = "TEAM123456"
    environment["REFERENCE_TOPICS"] = ",".join(topics)
    process = subprocess.Popen(
        [sys.executable, "-m", "hypercorn", "--bind", f"127.0.0.1:{port}", "--certfile", cert_path, "--keyfile", key_path,
         *verify, "apns_reference_app:app"], cwd=HERE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=environment)
    deadline = time.time() + 15
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if time.time() > deadline or process.poll() is not None:
                process.kill()
                raise RuntimeError("hypercorn did not start: " + process.stdout.read().decode())
            time.sleep(0.2)
    return process, {"url": f"https://127.0.0.1:{port}", "ca": ca_path, "context": ssl.create_default_context(cafile=ca_path)}


def make_key():
    # A P-256 key in PKCS#8 PEM, like Apple's AuthKey_XXXX.p8.
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives import serialization
    key = ec.generate_private_key(ec.SECP256R1())
    path = os.path.join(tempfile.mkdtemp(), "AuthKey_ABC123DEFG.p8")
    with open(path, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return path, key.public_key()


@pytest.fixture
def reference_server():
    key_path, public_key = make_key()
    process, server = start_reference_server(keys={"ABC123DEFG": public_key})
    server["key_path"], server["public_key"] = key_path, public_key
    yield server
    process.terminate()
    process.wait(timeout=10)


def received(server, context=None):
    return json.loads(urllib.request.urlopen(server["url"] + "/received", context=context or server["context"]).read())


def test_push_reaches_an_independent_http2_server(reference_server):
    key_path, public_key = reference_server["key_path"], reference_server["public_key"]
    token = "a1" * 32
    out = subprocess.run(
        [BINARY, "push", token, "--topic", "com.example.chat", "--key-file", key_path, "--key-id", "ABC123DEFG",
         "--team-id", "TEAM123456", "--url", reference_server["url"], "--ca-file", reference_server["ca"],
         "--expiration", "0"], capture_output=True, text=True, timeout=60)
    print(out.stdout, out.stderr)
    assert out.returncode == 0
    assert "status: 200" in out.stdout
    apns_id = re.search(r"apns-id: ([0-9a-f-]{36})", out.stdout).group(1)

    received = json.loads(urllib.request.urlopen(reference_server["url"] + "/received", context=reference_server["context"]).read())
    assert len(received) == 1
    request = received[0]
    assert (request["status"], request["reason"]) == (200, None), "valid by Apple's rules"
    assert request["http_version"] == "2"
    assert request["method"] == "POST"
    assert request["path"] == f"/3/device/{token}"
    headers = request["headers"]
    assert headers["apns-push-type"] == "voip"
    assert headers["apns-topic"] == "com.example.chat.voip"
    assert headers["apns-priority"] == "10"
    assert headers["apns-expiration"] == "0"
    assert headers["apns-id"] == apns_id
    payload = json.loads(request["body"])
    assert set(payload) == {"UUID", "handle", "hasVideo"}

    # The provider token is an ES256 JWT that verifies with the key's public half.
    import base64
    from cryptography.hazmat.primitives.asymmetric import ec, utils
    from cryptography.hazmat.primitives import hashes
    jwt = headers["authorization"].split(" ", 1)[1]
    head, claims, signature = jwt.split(".")
    pad = lambda s: s + "=" * (-len(s) % 4)
    assert json.loads(base64.urlsafe_b64decode(pad(head))) == {"alg": "ES256", "kid": "ABC123DEFG"}
    assert json.loads(base64.urlsafe_b64decode(pad(claims)))["iss"] == "TEAM123456"
    raw = base64.urlsafe_b64decode(pad(signature))
    assert len(raw) == 64
    der = utils.encode_dss_signature(int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big"))
    public_key.verify(der, f"{head}.{claims}".encode(), ec.ECDSA(hashes.SHA256()))


def test_push_reports_apples_reason(reference_server):
    key_path = reference_server["key_path"]
    out = subprocess.run(
        [BINARY, "push", "0" * 64, "--topic", "com.example.chat", "--key-file", key_path, "--key-id", "ABC123DEFG",
         "--team-id", "TEAM123456", "--url", reference_server["url"], "--ca-file", reference_server["ca"]],
        capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert "status: 400" in out.stdout
    assert "reason: BadDeviceToken" in out.stdout


def test_certificate_authentication_presents_the_client_certificate():
    """Certificate-based authentication (PEM with key, and .p12) against a server that requires a
    client certificate signed by a given CA, as APNs does for VoIP services certificates."""
    client_ca = trustme.CA()
    client = client_ca.issue_cert("com.example.chat.voip")
    ca_path, cert_path, key_path = write_pems(client_ca, client, "apns-client-cert-")
    work = os.path.dirname(ca_path)

    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12
    p12_path = os.path.join(work, "voip.p12")
    with open(p12_path, "wb") as f:
        f.write(pkcs12.serialize_key_and_certificates(
            b"voip", serialization.load_pem_private_key(client.private_key_pem.bytes(), None),
            x509.load_pem_x509_certificate(client.cert_chain_pems[0].bytes()), None,
            serialization.BestAvailableEncryption(b"s3cret")))

    process, server = start_reference_server(client_ca=ca_path)
    try:
        base = [BINARY, "push", "b2" * 32, "--topic", "com.example.chat", "--url", server["url"], "--ca-file", server["ca"]]
        with_pem = subprocess.run(base + ["--cert", cert_path, "--cert-key", key_path], capture_output=True, text=True, timeout=60)
        print(with_pem.stdout, with_pem.stderr)
        assert with_pem.returncode == 0 and "status: 200" in with_pem.stdout
        with_p12 = subprocess.run(base + ["--cert", p12_path, "--cert-password", "s3cret"], capture_output=True, text=True, timeout=60)
        print(with_p12.stdout, with_p12.stderr)
        assert with_p12.returncode == 0 and "status: 200" in with_p12.stdout
        received = json.loads(urllib.request.urlopen(
            urllib.request.Request(server["url"] + "/received"),
            context=client_context(server["ca"], cert_path, key_path)).read())
        assert len(received) == 2
        assert all("authorization" not in r["headers"] for r in received), "no provider token with certificates"
        # Without a client certificate (a provider token instead) the TLS handshake is refused.
        key_path_p8, _ = make_key()
        anonymous = subprocess.run(base + ["--key-file", key_path_p8, "--key-id", "ABC123DEFG", "--team-id", "TEAM123456",
                                           "--timeout", "5"], capture_output=True, text=True, timeout=60)
        assert anonymous.returncode == 1
        assert "reason: Transport" in anonymous.stdout
        # It was the handshake, not a dead server: nothing of it arrived, and a push with the
        # certificate still goes through.
        again = subprocess.run(base + ["--cert", cert_path, "--cert-key", key_path], capture_output=True, text=True, timeout=60)
        assert again.returncode == 0 and "status: 200" in again.stdout, again.stdout + again.stderr
        received = json.loads(urllib.request.urlopen(
            urllib.request.Request(server["url"] + "/received"),
            context=client_context(server["ca"], cert_path, key_path)).read())
        assert len(received) == 3, "the anonymous push never reached the server's handler"
    finally:
        process.terminate()
        process.wait(timeout=10)


def client_context(ca, cert, key):
    context = ssl.create_default_context(cafile=ca)
    context.load_cert_chain(cert, key)
    return context
