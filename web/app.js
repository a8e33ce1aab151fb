// Switchboard web client. Plain JavaScript on the documented protocol (docs/protocol.md).
"use strict";

const $ = (id) => document.getElementById(id);
let socket = null;
let nextRequestID = 1;

function setStatus(element, text, kind) {
  element.textContent = text;
  element.className = "status" + (kind ? " " + kind : "");
}

function logLine(direction, text) {
  const item = document.createElement("li");
  item.className = direction;
  item.textContent = text;
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

function send(type, data) {
  const message = { type, id: nextRequestID++ };
  if (data !== undefined) message.data = data;
  const text = JSON.stringify(message);
  socket.send(text);
  logLine("out", text);
}

function setConnected(connected) {
  $("connect-button").disabled = connected;
  $("ping-button").disabled = !connected;
  $("disconnect-button").disabled = !connected;
}

function connect(token) {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const url = `${scheme}//${location.host}/v1/ws?access_token=${encodeURIComponent(token)}`;
  socket = new WebSocket(url);
  setStatus($("session"), "connecting…");
  socket.onopen = () => setConnected(true);
  socket.onmessage = (event) => {
    logLine("in", event.data);
    const message = JSON.parse(event.data);
    if (message.type === "session.welcome") {
      setStatus($("session"), `connected as ${message.data.identity} (session ${message.data.session_id})`, "ok");
    }
  };
  socket.onclose = (event) => {
    setConnected(false);
    const reason = event.code === 1006 ? "refused or lost (check the token)" : `closed (${event.code})`;
    setStatus($("session"), reason, event.code === 1000 ? "" : "bad");
    socket = null;
  };
}

$("connect").addEventListener("submit", (event) => {
  event.preventDefault();
  const token = $("token").value.trim();
  if (token) connect(token);
});
$("ping-button").addEventListener("click", () => send("ping"));
$("disconnect-button").addEventListener("click", () => socket && socket.close(1000));

checkHealth();
