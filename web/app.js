// Switchboard web client: rooms and WebRTC mesh calls in plain JavaScript, on the documented
// protocol (docs/protocol.md). No build step.
"use strict";

const $ = (id) => document.getElementById(id);

const state = {
  token: null,
  socket: null,
  peerID: null,
  resumeToken: null,
  lastSeq: 0,
  room: null,
  iceServers: [],
  localStream: null,
  peers: new Map(), // peer id -> { pc, name, tile, pendingCandidates, remoteSet }
  nextRequestID: 1,
  pending: new Map(), // request id -> { resolve, reject }
  leaving: false,
  reconnectAttempts: 0,
  deviceID: sessionStorage.getItem("switchboard-device") || "web-" + Math.random().toString(36).slice(2, 10),
  call: null, // { id, role: "caller" | "callee", room, peer }
  identity: null,
};
sessionStorage.setItem("switchboard-device", state.deviceID);

// ---------- small helpers ----------

function setStatus(element, text, kind) {
  element.textContent = text;
  element.className = "status" + (kind ? " " + kind : "");
}

function log(text) {
  const item = document.createElement("li");
  item.textContent = `${new Date().toLocaleTimeString()} ${text}`;
  $("log").appendChild(item);
  item.scrollIntoView({ block: "nearest" });
}

async function checkHealth() {
  try {
    const [health, ready] = await Promise.all([fetch("/healthz"), fetch("/readyz")]);
    const ok = health.ok && ready.ok;
    setStatus($("health"), ok ? "server is up and ready" : "server is not ready", ok ? "ok" : "bad");
  } catch (error) {
    setStatus($("health"), "server unreachable", "bad");
  }
}

async function api(method, path, body) {
  const headers = { "Content-Type": "application/json" };
  if (state.token) headers.Authorization = "Bearer " + state.token;
  const response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await response.text();
  const json = text ? JSON.parse(text) : null;
  if (!response.ok) throw new Error(json && json.error ? `${json.error.code}: ${json.error.message}` : response.statusText);
  return json;
}

// ---------- tokens ----------

async function obtainToken(name) {
  const pasted = $("token").value.trim();
  if (pasted) return pasted;
  // The identity is the name: two windows with one name are two devices of one user.
  const identity = slug(name);
  const issued = await api("POST", "/v1/dev/tokens", { identity, name });
  return issued.token;
}

function slug(name) {
  return name.trim().toLowerCase().replace(/[^a-z0-9]+/g, "-").replace(/^-|-$/g, "") || "guest";
}

// ---------- signaling ----------

function request(type, data) {
  const id = state.nextRequestID++;
  const message = { type, id };
  if (data !== undefined) message.data = data;
  return new Promise((resolve, reject) => {
    state.pending.set(id, { resolve, reject });
    state.socket.send(JSON.stringify(message));
  });
}

function openSocket(resume) {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  let url = `${scheme}//${location.host}/v1/ws?access_token=${encodeURIComponent(state.token)}&device_id=${encodeURIComponent(state.deviceID)}`;
  if (resume) url += `&resume_token=${encodeURIComponent(state.resumeToken)}&last_seq=${state.lastSeq}`;
  const socket = new WebSocket(url);
  state.socket = socket;
  return new Promise((resolve, reject) => {
    let opened = false;
    socket.onmessage = (event) => {
      const message = JSON.parse(event.data);
      if (message.type === "session.welcome") {
        opened = true;
        state.peerID = message.data.peer_id;
        state.identity = message.data.identity;
        state.resumeToken = message.data.resume_token;
        state.lastSeq = 0;
        resolve({ resumed: false, failed: message.data.resume_failed });
        return;
      }
      if (message.type === "session.resumed") {
        opened = true;
        resolve({ resumed: true });
        return;
      }
      handleMessage(message);
    };
    socket.onclose = (event) => {
      for (const { reject: fail } of state.pending.values()) fail(new Error("connection closed"));
      state.pending.clear();
      if (!opened) reject(new Error(event.code === 1006 ? "refused or unreachable" : `closed (${event.code})`));
      else connectionLost(event);
    };
  });
}

function handleMessage(message) {
  if (message.type === "ok" || message.type === "error") {
    const waiter = state.pending.get(message.id);
    if (!waiter) return;
    state.pending.delete(message.id);
    if (message.type === "ok") waiter.resolve(message.data || {});
    else waiter.reject(new Error(`${message.error.code}: ${message.error.message}`));
    return;
  }
  if (message.seq !== undefined) state.lastSeq = message.seq;
  const data = message.data || {};
  switch (message.type) {
    case "room.peer_joined":
      log(`${data.peer.name || data.peer.identity} joined`);
      // The newcomer calls: wait for its offer.
      ensurePeer(data.peer.peer_id, data.peer.name || data.peer.identity);
      break;
    case "room.peer_left":
      log(`${describePeer(data.peer_id)} left (${data.reason})`);
      removePeer(data.peer_id);
      break;
    case "room.closed":
      log(`room closed (${data.reason})`);
      leaveRoom(false);
      break;
    case "room.data":
      log(`data from ${data.from ? describePeer(data.from) : "the server"}: ${JSON.stringify(data.data)}`);
      break;
    case "room.metadata":
      log(`room metadata: ${JSON.stringify(data.metadata)}`);
      break;
    case "signal":
      handleSignal(data.from, data.signal).catch((error) => log(`signal error: ${error.message}`));
      break;
    case "call.incoming":
    case "call.ringing":
    case "call.accepted":
    case "call.answered_elsewhere":
    case "call.declined":
    case "call.declined_elsewhere":
    case "call.busy":
    case "call.unavailable":
    case "call.held":
    case "call.cancelled":
    case "call.missed":
    case "call.ended":
      handleCallEvent(message.type, data).catch((error) => log(`call error: ${error.message}`));
      break;
    case "session.expiring":
      // The token runs out: a fresh one keeps the session (else it closes with 4003).
      refreshToken().catch((error) => log(`token refresh failed: ${error.message}`));
      break;
    default:
      log(`event ${message.type}`);
  }
}

async function refreshToken() {
  state.token = await obtainToken(state.name);
  await request("session.refresh", { access_token: state.token });
}

async function connectionLost(event) {
  if (state.leaving || (!state.room && !state.reachable)) {
    setStatus($("session"), `disconnected (${event.code})`);
    return;
  }
  // Resume: same peer id, the events we missed are replayed.
  const delay = Math.min(5000, 250 * 2 ** state.reconnectAttempts++);
  setStatus($("session"), `connection lost, reconnecting in ${delay} ms…`, "bad");
  await new Promise((resolve) => setTimeout(resolve, delay));
  try {
    // A fresh token: the one the session opened with may have expired (close code 4003).
    if (state.name) state.token = await obtainToken(state.name);
    const result = await openSocket(true);
    state.reconnectAttempts = 0;
    if (result.resumed) {
      setStatus($("session"), `reconnected as ${state.peerID}`, "ok");
    } else {
      log("session could not be resumed; joining again");
      for (const peerID of [...state.peers.keys()]) removePeer(peerID);
      if (state.room) await joinRoom(state.room);
    }
  } catch (error) {
    connectionLost({ code: 1006 });
  }
}

// ---------- WebRTC ----------

function describePeer(peerID) {
  const peer = state.peers.get(peerID);
  return peer ? peer.name : peerID;
}

function ensurePeer(peerID, name) {
  let peer = state.peers.get(peerID);
  if (peer) return peer;
  const pc = new RTCPeerConnection({ iceServers: state.iceServers });
  const tile = document.createElement("article");
  tile.className = "peer";
  tile.dataset.peerId = peerID;
  tile.innerHTML = `<video autoplay playsinline></video><h3></h3><p class="state">connecting…</p>`;
  tile.querySelector("h3").textContent = name;
  $("peers").appendChild(tile);
  peer = { pc, name, tile, pendingCandidates: [], remoteSet: false };
  state.peers.set(peerID, peer);

  for (const track of state.localStream.getTracks()) pc.addTrack(track, state.localStream);
  pc.onicecandidate = (event) => {
    const candidate = event.candidate
      ? { type: "candidate", candidate: event.candidate.candidate, sdpMid: event.candidate.sdpMid, sdpMLineIndex: event.candidate.sdpMLineIndex }
      : { type: "candidate", candidate: null };
    sendSignal(peerID, candidate);
  };
  pc.ontrack = (event) => {
    const video = tile.querySelector("video");
    if (video.srcObject !== event.streams[0]) video.srcObject = event.streams[0];
  };
  pc.onconnectionstatechange = () => {
    tile.querySelector(".state").textContent = pc.connectionState;
    tile.classList.toggle("connected", pc.connectionState === "connected");
    log(`${name}: ${pc.connectionState}`);
  };
  return peer;
}

function sendSignal(peerID, signal) {
  if (!state.room || !state.socket || state.socket.readyState !== WebSocket.OPEN) return;
  request("signal", { room: state.room, to: peerID, signal }).catch((error) => log(`signal to ${describePeer(peerID)} failed: ${error.message}`));
}

async function call(peerID, name) {
  const peer = ensurePeer(peerID, name);
  await peer.pc.setLocalDescription(await peer.pc.createOffer());
  sendSignal(peerID, { type: "offer", sdp: peer.pc.localDescription.sdp });
}

async function handleSignal(from, signal) {
  if (!signal || !signal.type) return;
  if (signal.type === "bye") {
    removePeer(from);
    return;
  }
  const peer = state.peers.get(from) || ensurePeer(from, from);
  const pc = peer.pc;
  if (signal.type === "offer") {
    await pc.setRemoteDescription({ type: "offer", sdp: signal.sdp });
    await flushCandidates(peer);
    await pc.setLocalDescription(await pc.createAnswer());
    sendSignal(from, { type: "answer", sdp: pc.localDescription.sdp });
  } else if (signal.type === "answer") {
    await pc.setRemoteDescription({ type: "answer", sdp: signal.sdp });
    await flushCandidates(peer);
  } else if (signal.type === "candidate") {
    const candidate = signal.candidate === null ? null : { candidate: signal.candidate, sdpMid: signal.sdpMid, sdpMLineIndex: signal.sdpMLineIndex };
    if (!peer.remoteSet) peer.pendingCandidates.push(candidate);
    else if (candidate) await pc.addIceCandidate(candidate);
  }
}

async function flushCandidates(peer) {
  peer.remoteSet = true;
  for (const candidate of peer.pendingCandidates.splice(0)) {
    if (candidate) await peer.pc.addIceCandidate(candidate);
  }
}

function removePeer(peerID) {
  const peer = state.peers.get(peerID);
  if (!peer) return;
  peer.pc.close();
  peer.tile.remove();
  state.peers.delete(peerID);
}

// ---------- session ----------

async function ensureConnected(name) {
  if (state.socket && state.socket.readyState === WebSocket.OPEN) return;
  state.name = name;
  state.token = await obtainToken(name);
  setStatus($("session"), "connecting…");
  await openSocket(false);
  setStatus($("session"), `connected as ${state.identity} (${state.peerID})`, "ok");
}

async function startLocalMedia(video) {
  if (state.localStream) return;
  state.localStream = await navigator.mediaDevices.getUserMedia({ audio: true, video });
  $("local-video").srcObject = state.localStream;
}

// ---------- calls ----------

function myName() {
  const name = $("name").value.trim();
  if (!name) throw new Error("enter your name first");
  return name;
}

async function beReachable() {
  try {
    state.reachable = true;
    await ensureConnected(myName());
    setStatus($("call-status"), `reachable as ${state.identity}: others can call "${$("name").value.trim()}"`, "ok");
  } catch (error) {
    setStatus($("call-status"), error.message, "bad");
  }
}

async function placeCall() {
  try {
    const callee = slug($("callee").value);
    if (!$("callee").value.trim()) throw new Error("enter who to call");
    state.reachable = true;
    await ensureConnected(myName());
    const call = await request("call.create", { callees: [callee], video: $("call-video").checked });
    state.call = { id: call.call_id, role: "caller", room: call.media && call.media.room, peer: callee, video: call.video };
    $("outgoing-title").textContent = `Calling ${$("callee").value.trim()}…`;
    $("outgoing-panel").hidden = false;
    $("outgoing-panel").scrollIntoView({ block: "start" });
    setStatus($("call-status"), "calling…");
    log(`calling ${callee} (${call.call_id})`);
  } catch (error) {
    setStatus($("call-status"), error.message, "bad");
  }
}

async function handleCallEvent(type, data) {
  const current = state.call;
  log(`${type} ${data.call_id}`);
  if (type === "call.incoming") {
    if (current) return; // already in a call: let it ring elsewhere
    state.call = { id: data.call_id, role: "callee", room: data.media && data.media.room, peer: data.caller.identity, video: data.video };
    $("ring-title").textContent = `${data.caller.name || data.caller.identity} is calling`;
    $("ring-detail").textContent = data.video ? "video call" : "audio call";
    $("ring-panel").hidden = false;
    // It sits at the top of the page: brought into view wherever the page was scrolled to.
    $("ring-panel").scrollIntoView({ block: "start" });
    // The ring screen is up: the server's trace shows it (ringing_shown).
    request("call.ack", { call_id: data.call_id }).catch((error) => log(`ack failed: ${error.message}`));
    return;
  }
  if (!current || current.id !== data.call_id) return;
  switch (type) {
    case "call.ringing":
      $("outgoing-title").textContent = `Ringing ${data.callee}…`;
      break;
    case "call.accepted":
      if (current.role === "caller" && !state.room) {
        $("outgoing-panel").hidden = true;
        await enterCallRoom();
      }
      break;
    case "call.answered_elsewhere":
    case "call.declined_elsewhere":
    case "call.cancelled":
    case "call.missed":
      endCallUI(type.replace("call.", "").replace("_", " "));
      break;
    case "call.busy":
      endCallUI(`${data.callee} is busy`);
      break;
    case "call.unavailable":
      endCallUI(`${data.callee} is unavailable`);
      break;
    case "call.held":
      setStatus($("call-status"), data.on_hold ? `${data.by} put the call on hold` : `in a call with ${current.peer}`, data.on_hold ? "" : "ok");
      break;
    case "call.declined":
      break;
    case "call.ended":
      endCallUI(`call ended (${data.outcome}${data.by ? ", by " + data.by : ""})`);
      break;
  }
}

async function answerCall() {
  const current = state.call;
  if (!current) return;
  try {
    await request("call.answer", { call_id: current.id });
    $("ring-panel").hidden = true;
    await enterCallRoom();
  } catch (error) {
    endCallUI(`could not answer: ${error.message}`);
  }
}

async function declineCall() {
  const current = state.call;
  if (!current) return;
  request("call.decline", { call_id: current.id }).catch(() => {});
  endCallUI("declined");
}

async function cancelCall() {
  const current = state.call;
  if (!current) return;
  request("call.cancel", { call_id: current.id }).catch(() => {});
  endCallUI("cancelled");
}

async function hangUp() {
  const current = state.call;
  if (current) request("call.end", { call_id: current.id, reason: "hangup" }).catch(() => {});
  endCallUI("you hung up");
}

/// Both sides of an answered call meet in the call's room; the callee joins first and the
/// caller, joining after, calls it (the room convention: the newcomer calls).
async function enterCallRoom() {
  const current = state.call;
  if (!current || !current.room) return;
  await startLocalMedia(Boolean(current.video));
  $("me-name").textContent = `${$("name").value.trim()} (you)`;
  await joinRoom(current.room);
  $("room-panel").hidden = false;
  $("leave-button").hidden = true;
  $("hangup-button").hidden = false;
  setStatus($("call-status"), `in a call with ${current.peer}`, "ok");
}

function endCallUI(reason) {
  const wasInRoom = Boolean(state.room);
  $("ring-panel").hidden = true;
  $("outgoing-panel").hidden = true;
  if (wasInRoom) {
    for (const peerID of [...state.peers.keys()]) removePeer(peerID);
    if (state.socket && state.socket.readyState === WebSocket.OPEN) request("room.leave", { room: state.room }).catch(() => {});
    state.room = null;
    stopLocalMedia();
    $("room-panel").hidden = true;
    $("leave-button").hidden = false;
    $("hangup-button").hidden = true;
  }
  state.call = null;
  setStatus($("call-status"), reason);
}

async function showHistory() {
  try {
    await ensureConnected(myName());
    const page = await api("GET", "/v1/calls?limit=50");
    const body = $("history").querySelector("tbody");
    body.innerHTML = "";
    for (const entry of page.calls) {
      const row = document.createElement("tr");
      const cells = [
        new Date(entry.created_at).toLocaleString(), entry.peers.join(", "), entry.direction, entry.outcome || `in progress (${entry.state})`,
        entry.duration_ms ? `${Math.round(entry.duration_ms / 1000)} s` : "—",
      ];
      for (const text of cells) {
        const cell = document.createElement("td");
        cell.textContent = text;
        row.appendChild(cell);
      }
      body.appendChild(row);
    }
    $("history-panel").hidden = false;
  } catch (error) {
    setStatus($("call-status"), `history: ${error.message}`, "bad");
  }
}

// ---------- room ----------

async function joinRoom(room) {
  const joined = await request("room.join", { room, metadata: { camera: $("camera").checked } });
  state.room = room;
  state.iceServers = joined.ice_servers || [];
  $("room-name").textContent = room;
  log(`joined ${room} as ${state.peerID}; ${joined.peers.length} already here`);
  // The newcomer calls everyone already in the room.
  for (const peer of joined.peers) {
    call(peer.peer_id, peer.name || peer.identity).catch((error) => log(`call failed: ${error.message}`));
  }
}

async function join(event) {
  event.preventDefault();
  const name = $("name").value.trim();
  const room = $("room").value.trim();
  if (!name || !room) return;
  $("join-button").disabled = true;
  state.leaving = false;
  try {
    await startLocalMedia($("camera").checked);
    $("me-name").textContent = `${name} (you)`;
    await ensureConnected(name);
    await joinRoom(room);
    setStatus($("session"), `connected as ${state.peerID}`, "ok");
    $("join-panel").hidden = true;
    $("room-panel").hidden = false;
  } catch (error) {
    setStatus($("session"), error.message, "bad");
    stopLocalMedia();
  } finally {
    $("join-button").disabled = false;
  }
}

async function createRoom() {
  const name = $("name").value.trim() || "guest";
  try {
    state.token = state.token || (await obtainToken(name));
    const room = await api("POST", "/v1/rooms", {});
    $("room").value = room.name;
    log(`created room ${room.name}`);
  } catch (error) {
    setStatus($("session"), `could not create a room: ${error.message}`, "bad");
  }
}

function stopLocalMedia() {
  if (state.localStream) state.localStream.getTracks().forEach((track) => track.stop());
  state.localStream = null;
}

function leaveRoom(tellServer) {
  state.leaving = !state.reachable;
  for (const peerID of [...state.peers.keys()]) removePeer(peerID);
  if (tellServer && state.room && state.socket && state.socket.readyState === WebSocket.OPEN) {
    request("room.leave", { room: state.room }).catch(() => {});
  }
  if (state.socket && !state.reachable) state.socket.close(1000);
  state.room = null;
  stopLocalMedia();
  $("room-panel").hidden = true;
  $("join-panel").hidden = false;
  setStatus($("session"), "left the room");
}

function toggleMute() {
  if (!state.localStream) return;
  const track = state.localStream.getAudioTracks()[0];
  if (!track) return;
  track.enabled = !track.enabled;
  $("mute-button").textContent = track.enabled ? "Mute" : "Unmute";
  $("me-state").textContent = track.enabled ? "microphone on" : "muted";
}

// ---------- what tests and curious people can read ----------

window.switchboard = {
  get peerID() { return state.peerID; },
  get room() { return state.room; },
  get identity() { return state.identity; },
  get call() { return state.call; },
  connectionStates() {
    return [...state.peers.values()].map((peer) => peer.pc.connectionState);
  },
  async inboundAudioPackets() {
    let total = 0;
    for (const peer of state.peers.values()) {
      const stats = await peer.pc.getStats();
      stats.forEach((report) => {
        if (report.type === "inbound-rtp" && report.kind === "audio") total += report.packetsReceived || 0;
      });
    }
    return total;
  },
};

$("join-form").addEventListener("submit", join);
$("create-button").addEventListener("click", createRoom);
$("leave-button").addEventListener("click", () => leaveRoom(true));
$("mute-button").addEventListener("click", toggleMute);
$("call-button").addEventListener("click", placeCall);
$("signin-button").addEventListener("click", beReachable);
$("history-button").addEventListener("click", showHistory);
$("answer-button").addEventListener("click", answerCall);
$("decline-button").addEventListener("click", declineCall);
$("cancel-button").addEventListener("click", cancelCall);
$("hangup-button").addEventListener("click", hangUp);
const params = new URLSearchParams(location.search);
if (params.get("room")) $("room").value = params.get("room");
if (params.get("name")) $("name").value = params.get("name");
checkHealth();
