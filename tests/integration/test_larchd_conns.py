"""larchd against clients that hold connections without sending requests
(slowloris): the request-head deadline (header_timeout), the cap on
connections from one address (max_connections_per_ip), what they count in
GET /metrics and log. Other client addresses are simulated by binding raw
sockets to 127.0.0.2, 127.0.0.3, ... (all loopback on Linux); 127.0.0.1 is
exempt from the cap."""
import re
import socket
import threading
import time

import requests

from larchd import Larchd

HEAD = b"GET /healthz HTTP/1.1\r\nHost: x\r\n"


def connect(server, source="127.0.0.1", timeout=10):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.bind((source, 0))
    s.connect(("127.0.0.1", server.port))
    return s


def closed_by_peer(s):
    """Has the server closed s (end of file or reset)? Does not block."""
    s.setblocking(False)
    try:
        return s.recv(4096) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        s.settimeout(10)


def get_on(s):
    """A GET /healthz on an open socket, kept alive: the status line, or
    None when the server closed or reset the connection instead."""
    try:
        s.sendall(HEAD + b"\r\n")
        reply = b""
        while b"\r\n\r\n" not in reply or not reply.rstrip().endswith(b"}"):
            chunk = s.recv(4096)
            if not chunk:
                return None
            reply += chunk
    except OSError:
        return None
    return reply.split(b"\r\n", 1)[0]


class Trickle:
    """Connections that send a request head a byte every `every` seconds
    and never finish it; records when the server closed each."""

    def __init__(self, server, sources, per_source, every=0.1):
        self.socks, self.opened = [], []
        for src in sources:
            for _ in range(per_source):
                self.socks.append(connect(server, src))
                self.opened.append(time.monotonic())
        self.closed = [None] * len(self.socks)
        self.every = every
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        head = HEAD + b"X-Slow: " + b"a" * 100000
        i = 0
        while not self.stop.is_set() and None in self.closed:
            for k, s in enumerate(self.socks):
                if self.closed[k] is not None:
                    continue
                try:
                    s.send(head[i:i + 1])
                except OSError:
                    self.closed[k] = time.monotonic()
                    continue
                if closed_by_peer(s):
                    self.closed[k] = time.monotonic()
            i += 1
            self.stop.wait(self.every)

    def wait_all_closed(self, timeout):
        self.thread.join(timeout)
        self.stop.set()
        self.thread.join()
        return sum(c is not None for c in self.closed)

    def close(self):
        self.stop.set()
        self.thread.join()
        for s in self.socks:
            s.close()


def dropped(server, reason):
    text = requests.get(server.url + "/metrics", headers=server.auth(), timeout=10).text
    m = re.search(r'^larch_http_connections_dropped_total\{reason="%s"\} (\d+)$' % reason,
                  text, re.M)
    assert m, text
    return int(m.group(1))


def test_trickled_heads_are_closed_and_others_served(tmp_path):
    """300 connections from four addresses (75 each, under the cap of 100)
    trickle a request head and never finish it, more than the 128 slots
    larchd is given: each is closed once the 1 s deadline passes, so the
    slots come free and a well-behaved client is served throughout (without
    the deadline it would wait for ever). No log line per connection: one
    warning for them all."""
    server = Larchd(tmp_path, args=["--header-timeout", "1", "--max-connections", "128",
                                    "--max-connections-per-ip", "100"]).start()
    trickle = None
    try:
        trickle = Trickle(server, [f"127.0.0.{i}" for i in range(2, 6)], 75)
        served = 0
        while None in trickle.closed and served < 20:
            r = requests.get(server.url + "/healthz", timeout=8)
            assert r.status_code == 200
            served += 1
            time.sleep(0.05)
        assert served >= 5                      # served while the trickle went on
        assert trickle.wait_all_closed(timeout=20) == 300
        # none before its deadline
        assert min(c - o for c, o in zip(trickle.closed, trickle.opened)) >= 1.0
        assert dropped(server, "header_timeout") == 300
        assert dropped(server, "per_ip_limit") == 0
        server.wait_log(r"warn  http: in the last 10s, \d+ connections sent no whole request "
                        r"head within 1s and were closed \(latest from 127\.0\.0\.[2-5]\)")
        warnings = re.findall(r"sent no whole request head", server.log())
        assert 1 <= len(warnings) <= 3, server.log()[-3000:]
        assert len(server.log().splitlines()) < 100   # no line per connection
    finally:
        if trickle:
            trickle.close()
        server.stop()


def test_kept_alive_connection_idle_past_the_deadline_is_closed(tmp_path):
    """Between requests a kept-alive connection has header_timeout to start
    the next one; a request in progress (a parked long poll) has no such
    deadline. Idle closes count as "idle", not as slow heads."""
    server = Larchd(tmp_path, args=["--header-timeout", "1"]).start()
    try:
        with connect(server) as s:
            assert get_on(s) == b"HTTP/1.1 200 OK"
            done = time.monotonic()
            while not closed_by_peer(s):
                assert time.monotonic() - done < 10, "the idle connection was never closed"
                time.sleep(0.05)
            assert time.monotonic() - done >= 1.0
        # a long poll parked for 2 s, twice the deadline, answers normally
        first = requests.get(server.url + "/v1/events", headers=server.auth(), timeout=10).json()
        with requests.Session() as session:
            start = time.monotonic()
            r = session.get(server.url + "/v1/events", headers=server.auth(), timeout=10,
                            params={"after": first["last"], "stream": first["stream"],
                                    "timeout": 2})
            assert r.status_code == 200 and r.json()["changes"] == []
            assert time.monotonic() - start >= 1.9
        assert dropped(server, "idle") >= 1
        assert dropped(server, "header_timeout") == 0
        assert "sent no whole request head" not in server.log()
    finally:
        server.stop()


def test_connections_over_the_per_address_cap_are_refused(tmp_path):
    """With max_connections_per_ip 4, a fifth connection from 127.0.0.2 is
    closed unanswered while 127.0.0.3 is served; 127.0.0.1 is not capped;
    once one of the four closes, 127.0.0.2 gets a place again."""
    server = Larchd(tmp_path, args=["--max-connections-per-ip", "4"]).start()
    held, local = [], []
    try:
        for _ in range(4):
            held.append(connect(server, "127.0.0.2"))
            assert get_on(held[-1]) == b"HTTP/1.1 200 OK"
        with connect(server, "127.0.0.2") as fifth:
            assert get_on(fifth) is None
        with connect(server, "127.0.0.3") as other:
            assert get_on(other) == b"HTTP/1.1 200 OK"
        for _ in range(10):
            local.append(connect(server, "127.0.0.1"))
            assert get_on(local[-1]) == b"HTTP/1.1 200 OK"
        # the four still work, kept alive
        assert all(get_on(s) == b"HTTP/1.1 200 OK" for s in held)
        held.pop().close()
        deadline = time.monotonic() + 10
        while True:
            with connect(server, "127.0.0.2") as again:
                if get_on(again) == b"HTTP/1.1 200 OK":
                    break
            assert time.monotonic() < deadline, "127.0.0.2 never got its place back"
            time.sleep(0.05)
        assert dropped(server, "per_ip_limit") >= 1
        server.wait_log(r"warn  http: in the last 10s, \d+ connections were refused for having "
                        r"max_connections_per_ip \(4\) open from their address "
                        r"\(latest 127\.0\.0\.2\)")
    finally:
        for s in held + local:
            s.close()
        server.stop()
