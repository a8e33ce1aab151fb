"""Two real WebRTC peers (aiortc) connect through Switchboard's rooms and signaling, and audio
flows. Everything stays on loopback."""

import asyncio
import math
import os
import struct
import tempfile
import time
import wave

import aioice.ice
import pytest
from aiortc import RTCConfiguration, RTCIceServer, RTCPeerConnection, RTCSessionDescription
from aiortc.contrib.media import MediaPlayer
from aiortc.rtcconfiguration import RTCIceTransportPolicy
from aiortc.sdp import candidate_from_sdp

from conftest import Server
from signaling import SignalingClient

# aioice leaves 127.0.0.1 out of its host candidates and offers the machine's other addresses:
# keep ICE on loopback.
aioice.ice.get_host_addresses = lambda use_ipv4, use_ipv6: ["127.0.0.1"]

MIN_FRAMES = 100  # of 20 ms: two seconds of the three-second WAV


def make_wav(seconds=3.0, rate=48000):
    path = os.path.join(tempfile.mkdtemp(), "tone.wav")
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(b"".join(
            struct.pack("<h", int(12000 * math.sin(2 * math.pi * 440 * i / rate))) for i in range(int(seconds * rate))))
    return path


def split_candidates(sdp):
    """The SDP without its candidate lines, and the candidates as trickle signals."""
    lines, candidates, mid, index = [], [], None, -1
    for line in sdp.splitlines():
        if line.startswith("m="):
            index += 1
        if line.startswith("a=mid:"):
            mid = line[len("a=mid:"):]
        if line.startswith("a=candidate:"):
            candidates.append({"type": "candidate", "candidate": line[2:], "sdpMid": mid, "sdpMLineIndex": index})
        elif not line.startswith("a=end-of-candidates"):
            lines.append(line)
    return "\r\n".join(lines) + "\r\n", candidates


async def add_candidate(pc, signal):
    if signal.get("candidate") is None:
        await pc.addIceCandidate(None)
        return
    candidate = candidate_from_sdp(signal["candidate"].split(":", 1)[1])
    candidate.sdpMid = signal.get("sdpMid")
    candidate.sdpMLineIndex = signal.get("sdpMLineIndex")
    await pc.addIceCandidate(candidate)


async def send_description(client, room, to, description):
    sdp, candidates = split_candidates(description.sdp)
    await client.request("signal", {"room": room, "to": to, "signal": {"type": description.type, "sdp": sdp}})
    for candidate in candidates:
        await client.request("signal", {"room": room, "to": to, "signal": candidate})
    await client.request("signal", {"room": room, "to": to, "signal": {"type": "candidate", "candidate": None}})
    return len(candidates)


async def call(server, configuration_for, room="interop", frames_needed=MIN_FRAMES, timeout=15):
    """Bob waits in the room; Alice joins and calls him. Returns (frames Bob received, states)."""
    bob = await SignalingClient(server.ws_url, server.token("bob")).connect()
    alice = await SignalingClient(server.ws_url, server.token("alice")).connect()
    pcs = []
    try:
        assert (await bob.request("room.join", {"room": room}))["peers"] == []
        joined = await alice.request("room.join", {"room": room})
        assert [p["peer_id"] for p in joined["peers"]] == [bob.peer_id]
        assert (await bob.event("room.peer_joined"))["data"]["peer"]["peer_id"] == alice.peer_id

        alice_pc = RTCPeerConnection(configuration_for(alice))
        bob_pc = RTCPeerConnection(configuration_for(bob))
        pcs = [alice_pc, bob_pc]
        received = {"frames": 0}
        done = asyncio.Event()

        @bob_pc.on("track")
        def on_track(track):
            async def count():
                while True:
                    try:
                        await track.recv()
                    except Exception:
                        done.set()
                        return
                    received["frames"] += 1
                    if received["frames"] >= frames_needed:
                        done.set()
            asyncio.ensure_future(count())

        player = MediaPlayer(make_wav())
        alice_pc.addTrack(player.audio)

        async def bob_answers():
            while True:
                signal = (await bob.event("signal"))["data"]["signal"]
                if signal["type"] == "offer":
                    await bob_pc.setRemoteDescription(RTCSessionDescription(signal["sdp"], "offer"))
                    await bob_pc.setLocalDescription(await bob_pc.createAnswer())
                    await send_description(bob, room, alice.peer_id, bob_pc.localDescription)
                elif signal["type"] == "candidate":
                    await add_candidate(bob_pc, signal)
                    if signal.get("candidate") is None:
                        return

        async def alice_listens():
            while True:
                signal = (await alice.event("signal"))["data"]["signal"]
                if signal["type"] == "answer":
                    await alice_pc.setRemoteDescription(RTCSessionDescription(signal["sdp"], "answer"))
                elif signal["type"] == "candidate":
                    await add_candidate(alice_pc, signal)
                    if signal.get("candidate") is None:
                        return

        answering = asyncio.ensure_future(bob_answers())
        listening = asyncio.ensure_future(alice_listens())
        await alice_pc.setLocalDescription(await alice_pc.createOffer())
        sent = await send_description(alice, room, bob.peer_id, alice_pc.localDescription)
        assert sent > 0, "the offer had ICE candidates to trickle"
        await asyncio.wait_for(asyncio.gather(answering, listening), timeout)
        try:
            await asyncio.wait_for(done.wait(), timeout)
        except asyncio.TimeoutError:
            pass
        candidates = [l for l in alice_pc.localDescription.sdp.splitlines() if l.startswith("a=candidate:")]
        return received["frames"], alice_pc.iceConnectionState, candidates
    finally:
        for pc in pcs:
            await pc.close()
        await alice.close()
        await bob.close()


def test_two_aiortc_peers_connect_through_a_room_and_audio_flows(server):
    frames, state, _ = asyncio.run(call(server, lambda _: RTCConfiguration(iceServers=[])))
    print(f"direct: {frames} audio frames received, ICE {state}")
    assert frames >= MIN_FRAMES


def turn_configuration(server, client_token):
    credentials = server.request("GET", "/v1/turn", token=client_token)
    servers = [RTCIceServer(urls=s["urls"], username=s.get("username"), credential=s.get("credential"))
               for s in credentials["ice_servers"] if s.get("username")]
    assert servers, "the server hands out TURN credentials"
    return RTCConfiguration(iceServers=servers, iceTransportPolicy=RTCIceTransportPolicy.RELAY), credentials


def test_relay_only_peers_connect_through_coturn_with_credentials_from_the_server(coturn):
    server = Server("--turn-urls", coturn.url, "--turn-secret", coturn.secret, "--turn-ttl-seconds", "600")
    try:
        token = server.token("relay-check")
        configuration, credentials = turn_configuration(server, token)
        username = next(s["username"] for s in credentials["ice_servers"] if s.get("username"))
        assert username.endswith(":relay-check")
        assert coturn.secret not in str(credentials)

        frames, state, candidates = asyncio.run(call(server, lambda _client: configuration, room="relay"))
        print(f"relay: {frames} audio frames received, ICE {state}, candidates {[c.split()[7] for c in candidates]}")
        assert candidates and all(" typ relay" in c for c in candidates), "relay-only ICE offers only relay candidates"
        assert frames >= MIN_FRAMES
    finally:
        server.stop()


async def relay_candidates(configuration):
    pc = RTCPeerConnection(configuration)
    pc.addTransceiver("audio")
    await pc.setLocalDescription(await pc.createOffer())
    candidates = [line for line in pc.localDescription.sdp.splitlines() if line.startswith("a=candidate:")]
    await pc.close()
    return candidates


# Covers: limit:turn_ttl_seconds
def test_turn_credentials_past_their_expiry_are_refused(coturn):
    server = Server("--turn-urls", coturn.url, "--turn-secret", coturn.secret, "--turn-ttl-seconds", "1")
    try:
        token = server.token("late")
        configuration, credentials = turn_configuration(server, token)
        fresh = asyncio.run(relay_candidates(configuration))
        assert any(" typ relay" in c for c in fresh), "fresh credentials allocate a relay"
        time.sleep(2.5)
        expired = asyncio.run(relay_candidates(configuration))
        print(f"expired credentials ({credentials['expires_at']}): {len(expired)} relay candidates")
        assert expired == [], "coturn refuses an allocation with expired credentials"
        # coturn is alive and still allocates for fresh credentials: the refusal was the expiry.
        renewed, _ = turn_configuration(server, server.token("late"))
        assert any(" typ relay" in c for c in asyncio.run(relay_candidates(renewed))), "fresh credentials still allocate"
    finally:
        server.stop()
