"""`switchboard phone` used by hand, as the README's tour does: two softphones on a pseudo-terminal
each (and, the same way, on a pipe), commands typed one at a time, and every event shown as it
happens, before anything more is typed. A softphone that waits for the next line before it shows
what happened (it did, on a terminal and on a piped stdin) fails here."""

import os
import pty
import re
import select
import subprocess
import time

import pytest

from conftest import BINARY, Server


class Phone:
    """A softphone whose standard input is a terminal (`pty`) or a pipe, read as a person would."""

    def __init__(self, server, identity, mode):
        command = [BINARY, "phone", "--identity", identity, "--server", server.base_url, "--data-dir", server.data_dir]
        if mode == "pty":
            controller, terminal = pty.openpty()
            self.process = subprocess.Popen(command, stdin=terminal, stdout=terminal, stderr=terminal, close_fds=True)
            os.close(terminal)
            self.read_fd = self.write_fd = controller
        else:
            self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            self.read_fd, self.write_fd = self.process.stdout.fileno(), self.process.stdin.fileno()
        self.identity = identity
        self.seen = ""

    def type(self, line):
        os.write(self.write_fd, (line + "\n").encode())

    def expect(self, pattern, seconds=15):
        """Waits for `pattern` in what the phone printed, typing nothing meanwhile."""
        deadline = time.time() + seconds
        while True:
            match = re.search(pattern, self.seen)
            if match:
                self.seen = self.seen[match.end():]
                return match
            left = deadline - time.time()
            if left <= 0:
                raise AssertionError(f"{self.identity}: no {pattern!r} within {seconds} s without typing more; it showed:\n{self.seen}")
            if select.select([self.read_fd], [], [], min(left, 0.2))[0]:
                try:
                    chunk = os.read(self.read_fd, 65536)
                except OSError:  # the terminal closed with the process
                    chunk = b""
                if not chunk and self.process.poll() is not None:
                    raise AssertionError(f"{self.identity} exited ({self.process.returncode}) before {pattern!r}:\n{self.seen}")
                self.seen += chunk.decode(errors="replace").replace("\r\n", "\n")

    def quit(self):
        self.type("quit")
        try:
            return self.process.wait(timeout=20)
        finally:
            if self.process.poll() is None:
                self.process.kill()


@pytest.mark.parametrize("mode", ["pty", "pipe"])
def test_the_tour_typed_by_a_person_shows_each_event_as_it_happens(mode):
    server = Server()
    alice = bob = None
    try:
        alice, bob = Phone(server, "alice", mode), Phone(server, "bob", mode)
        alice.expect(r"ready: alice")
        bob.expect(r"ready: bob")
        alice.type("call bob")
        call = alice.expect(r"event: calling ([0-9a-f-]{36})").group(1)
        bob.expect(r"event: incoming " + call + r" from Alice")
        bob.type("answer")
        bob.expect(r"event: connected " + call)
        alice.expect(r"event: connected " + call)
        alice.type("status")
        alice.expect(r"status: " + call + r" to .*\(up\)")
        alice.type("hangup")
        alice.expect(r"event: ended " + call)
        bob.expect(r"event: ended " + call)
        assert alice.quit() == 0, alice.seen
        assert bob.quit() == 0, bob.seen
    finally:
        for phone in (alice, bob):
            if phone and phone.process.poll() is None:
                phone.process.kill()
        server.stop()
