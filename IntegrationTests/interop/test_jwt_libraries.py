"""Access tokens signed by JWT libraries the project did not write (PyJWT and jwcrypto), as an
app's backend would sign them: accepted with only iss, sub and exp, refused with a message that
names what is wrong. And the tokens the server issues verify under both libraries."""

import json
import time
import urllib.error
import urllib.request

import jwt as pyjwt
import pytest
from jwcrypto import jwk
from jwcrypto import jwt as jwcrypto_jwt
from websockets.sync.client import connect


def get_turn(server, token):
    """GET /v1/turn with a Bearer token: (status, parsed body)."""
    request = urllib.request.Request(server.base_url + "/v1/turn", headers={"Authorization": "Bearer " + token})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def pyjwt_token(server, claims, secret=None, algorithm="HS256"):
    return pyjwt.encode(claims, secret or server.api_secret, algorithm=algorithm)


def jwcrypto_token(server, claims, header=None):
    key = jwk.JWK.from_password(server.api_secret)
    token = jwcrypto_jwt.JWT(header=header or {"alg": "HS256"}, claims=claims)
    token.make_signed_token(key)
    return token.serialize()


def minimal(server, **extra):
    return {"iss": server.api_key, "sub": "alice", "exp": int(time.time()) + 600, **extra}


@pytest.mark.parametrize("library", ["pyjwt", "jwcrypto"])
def test_tokens_with_only_iss_sub_and_exp_are_accepted(server, library):
    sign = pyjwt_token if library == "pyjwt" else jwcrypto_token
    cases = {
        "iss, sub, exp": minimal(server),
        "with iat, no nbf": minimal(server, iat=int(time.time())),
        "with nbf, no iat": minimal(server, nbf=int(time.time()) - 5),
        "with grants and a name": minimal(server, name="Alice", grants={"call": True}),
        "with claims Switchboard does not use": minimal(server, aud="chat", jti="1"),
    }
    for what, claims in cases.items():
        status, body = get_turn(server, sign(server, claims))
        assert status == 200, f"{library}, {what}: {body}"
        assert "ice_servers" in body

    # The same token opens a session; no grants claim means no grants.
    with connect(server.ws_url + "?access_token=" + sign(server, minimal(server)), open_timeout=10) as ws:
        welcome = json.loads(ws.recv(timeout=10))
        assert welcome["type"] == "session.welcome"
        assert welcome["data"]["identity"] == "alice"
        ws.send(json.dumps({"type": "session.info", "id": 1}))
        info = json.loads(ws.recv(timeout=10))
        assert info["data"]["grants"] == {}, info
        ws.send(json.dumps({"type": "room.join", "id": 2, "data": {"room": "lobby"}}))
        assert json.loads(ws.recv(timeout=10))["error"]["code"] == "forbidden"


@pytest.mark.parametrize("library", ["pyjwt", "jwcrypto"])
def test_refusals_name_what_is_wrong(server, library):
    sign = pyjwt_token if library == "pyjwt" else jwcrypto_token
    now = int(time.time())
    cases = [
        ("no exp", {"iss": server.api_key, "sub": "alice"}, "unauthorized", "'exp'"),
        ("no sub", {"iss": server.api_key, "exp": now + 600}, "unauthorized", "'sub'"),
        ("no iss", {"sub": "alice", "exp": now + 600}, "unauthorized", "'iss'"),
        ("exp as text", minimal(server, exp="tomorrow"), "unauthorized", "'exp'"),
        ("grants not an object", minimal(server, grants=["call"]), "unauthorized", "'grants'"),
        ("a grant not a boolean", minimal(server, grants={"call": "yes"}), "unauthorized", "'grants.call'"),
        ("expired", minimal(server, exp=now - 3600), "token_expired", "expired"),
        ("not yet valid", minimal(server, nbf=now + 3600), "unauthorized", "not valid yet"),
        ("unknown API key", minimal(server, iss="sbk_nobody"), "unauthorized", "unknown API key"),
    ]
    for what, claims, code, words in cases:
        status, body = get_turn(server, sign(server, claims))
        assert status == 401, f"{library}, {what}: {body}"
        assert body["error"]["code"] == code, f"{library}, {what}: {body}"
        assert words in body["error"]["message"], f"{library}, {what}: {body}"


def test_wrong_secrets_and_algorithms_are_refused(server):
    wrong = pyjwt.encode(minimal(server), "not-the-secret-not-the-secret-not-the-secret", algorithm="HS256")
    status, body = get_turn(server, wrong)
    assert (status, body["error"]["code"]) == (401, "unauthorized")
    assert "signature" in body["error"]["message"]
    for algorithm in ["HS384", "HS512"]:
        status, body = get_turn(server, pyjwt_token(server, minimal(server), algorithm=algorithm))
        assert status == 401 and algorithm in body["error"]["message"], body
    unsigned = pyjwt.encode(minimal(server), None, algorithm="none")
    status, body = get_turn(server, unsigned)
    assert status == 401 and "none" in body["error"]["message"], body


def test_tokens_the_server_issues_verify_under_both_libraries(server):
    token = server.token("bob", grants={"call": True, "room": "team-*", "roomJoin": True}, ttl=900)
    claims = pyjwt.decode(token, server.api_secret, algorithms=["HS256"], options={"require": ["iss", "sub", "exp"]})
    assert claims["iss"] == server.api_key and claims["sub"] == "bob"
    assert claims["grants"] == {"call": True, "room": "team-*", "roomJoin": True}
    assert 890 <= claims["exp"] - int(time.time()) <= 900
    assert pyjwt.get_unverified_header(token) == {"alg": "HS256", "typ": "JWT"}
    verified = jwcrypto_jwt.JWT(jwt=token, key=jwk.JWK.from_password(server.api_secret), algs=["HS256"])
    assert json.loads(verified.claims)["sub"] == "bob"
    with pytest.raises(pyjwt.InvalidSignatureError):
        pyjwt.decode(token, "another-secret-another-secret-another", algorithms=["HS256"])
