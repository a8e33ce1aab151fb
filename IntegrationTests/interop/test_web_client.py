"""The web client in a real browser: two headless Chromium pages join one room, connect over
WebRTC with fake media devices, and receive each other's audio."""

import os
import shutil
import time

import pytest

from conftest import Server

ARTIFACTS = os.environ.get("SWITCHBOARD_ARTIFACTS", os.path.join(os.path.dirname(__file__), "../../.build/artifacts"))


def only_loopback():
    """Whether this process's network namespace has no interface but loopback (/proc/net/dev is
    per namespace; /sys/class/net may still show the host's)."""
    with open("/proc/net/dev") as f:
        names = [line.split(":")[0].strip() for line in f.readlines()[2:]]
    return names == ["lo"]


@pytest.fixture
def browsers():
    if shutil.which("chromium") is None or shutil.which("chromedriver") is None:
        pytest.skip("chromium and chromium-driver are not installed (scripts/deps.sh test installs them)")
    if not only_loopback():
        pytest.skip("Chromium runs only in a network namespace with nothing but loopback; "
                    "run through `make interop` (unshare -n) as root")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    drivers = []
    for _ in range(2):
        options = webdriver.ChromeOptions()
        options.binary_location = shutil.which("chromium")
        for flag in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--use-fake-device-for-media-stream",
                     "--use-fake-ui-for-media-stream", "--allow-loopback-in-peer-connection",
                     "--autoplay-policy=no-user-gesture-required", "--disable-background-networking",
                     "--disable-component-update", "--no-first-run", "--window-size=1200,900"]:
            options.add_argument(flag)
        drivers.append(webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options))
    yield drivers
    for driver in drivers:
        driver.quit()


def wait_for(predicate, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}")


def wait_for_audio(browsers, whose):
    """Waits until every page's peer connection is connected and has received audio packets;
    returns each page's count."""
    for driver in browsers:
        wait_for(lambda: "connected" in driver.execute_script("return window.switchboard.connectionStates()"),
                 20, f"{whose} peer connection to connect")
    return [wait_for(lambda: driver.execute_async_script(
        "const done = arguments[arguments.length - 1]; window.switchboard.inboundAudioPackets().then(done);"),
        20, f"audio over {whose} peer connection") for driver in browsers]


def test_two_browsers_join_a_room_and_hear_each_other(browsers):
    from selenium.webdriver.common.by import By

    server = Server("--dev-tokens")
    try:
        for driver, name in zip(browsers, ["Ann", "Ben"]):
            driver.get(f"{server.base_url}/?room=webtest&name={name}")
            driver.find_element(By.ID, "join-button").click()
            wait_for(lambda: driver.execute_script("return window.switchboard.room"), 15, f"{name} to join")

        packets = wait_for_audio(browsers, "the room's")
        print(f"inbound audio packets: {packets}")
        assert all(count > 0 for count in packets)

        os.makedirs(ARTIFACTS, exist_ok=True)
        path = os.path.join(ARTIFACTS, "web-client.png")
        browsers[0].save_screenshot(path)
        print(f"screenshot: {os.path.abspath(path)}")
        tiles = browsers[0].find_elements(By.CSS_SELECTOR, ".peer.connected")
        assert len(tiles) == 1, "Ann sees Ben's tile connected"
    finally:
        server.stop()


def test_one_browser_calls_another_which_answers_and_both_see_the_history(browsers):
    from selenium.webdriver.common.by import By

    server = Server("--dev-tokens")
    ann, ben = browsers
    try:
        ben.get(f"{server.base_url}/?name=Ben")
        ben.find_element(By.ID, "signin-button").click()
        wait_for(lambda: ben.execute_script("return window.switchboard.identity") == "ben", 10, "Ben to be reachable")

        ann.get(f"{server.base_url}/?name=Ann")
        ann.find_element(By.ID, "callee").send_keys("Ben")
        ann.find_element(By.ID, "call-button").click()
        wait_for(lambda: ben.find_element(By.ID, "ring-panel").is_displayed(), 10, "Ben's phone to ring")
        assert "Ann is calling" in ben.find_element(By.ID, "ring-title").text
        os.makedirs(ARTIFACTS, exist_ok=True)
        ben.save_screenshot(os.path.join(ARTIFACTS, "web-client-ringing.png"))
        ben.find_element(By.ID, "answer-button").click()

        packets = wait_for_audio(browsers, "the call's")
        print(f"in-call inbound audio packets: {packets}")
        ann.save_screenshot(os.path.join(ARTIFACTS, "web-client-in-call.png"))

        ann.find_element(By.ID, "hangup-button").click()
        wait_for(lambda: ben.execute_script("return window.switchboard.call") is None, 10, "the call to end for Ben")
        assert "ended" in ben.find_element(By.ID, "call-status").text

        ann.find_element(By.ID, "history-button").click()
        wait_for(lambda: ann.find_element(By.ID, "history-panel").is_displayed(), 10, "the history page")
        rows = wait_for(lambda: ann.find_elements(By.CSS_SELECTOR, "#history tbody tr"), 10, "a history row")
        cells = [cell.text for cell in rows[0].find_elements(By.TAG_NAME, "td")]
        print(f"history: {cells}")
        assert cells[1] == "ben" and cells[2] == "outgoing" and cells[3] == "completed"
        ann.save_screenshot(os.path.join(ARTIFACTS, "web-client-history.png"))

        # Ben's ring screen told the server it was up (call.ack): the trace shows it.
        token = server.request("POST", "/v1/dev/tokens", {"identity": "ann"})["token"]
        call_id = server.request("GET", "/v1/calls?limit=1", token=token)["calls"][0]["call_id"]
        trace = server.request("GET", f"/v1/calls/{call_id}/trace", token=token)["trace"]
        assert any(e["user"] == "ben" and e["channel"] == "device" and e["event"] == "ringing_shown" for e in trace), trace
    finally:
        server.stop()
