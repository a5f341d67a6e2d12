"""Hostile peers of the core manager and of client-mode VM ports (issue 24).

Run as a separate process, so that the daemon sees a peer of its own, with a
pid, a command line and threads, as it sees QEMU:

    python3 hostile_peers.py qmp --socket PATH --record FILE --behaviour B [...]
    python3 hostile_peers.py qga --socket PATH --record FILE --behaviour B [...]
    python3 hostile_peers.py frontend --socket PATH --record FILE --behaviour B

The QMP server names its socket on its command line (`--socket PATH`), as
QEMU's `-qmp unix:PATH,server=on,wait=off` does, unless `--socket-from-env`
is given: then the path comes from $HOSTILE_SOCKET and the command line does
not name it (a process that serves the socket but is not the VM's QEMU).

Every event is appended to the record file as one JSON object per line
(`ready`, `connect`, `command`, `close`), flushed at once, so the test reads
what the daemon did while it runs. `ready` carries the server's pid and the
tids of the threads it started to play vCPUs (`own_tids`), pinned to one
CPU with `--pin-own CPU` (so that "put back where it was" differs from
"allowed on every managed CPU").

QMP behaviours (`--behaviour`):
  foreign       query-cpus-fast names `--tids` (thread ids of other processes,
                chosen by the test) and then this process's own vCPU threads
  own           query-cpus-fast names only this process's own vCPU threads
  forge         query-cpus-fast is refused with a `desc` holding a newline
                and a forged log line after it
  slow          every message (greeting included) `--delay` s late; the
                reply to query-cpus-fast names the own vCPU threads
  never         accept, send nothing, hold the connection
  refuse-stop   `stop` is refused, every time, with one constant error
  refuse-cont   `cont` is refused the first time, accepted after

Guest agent behaviours (line JSON, no greeting; the client opens with 0xFF
and `guest-sync-delimited`):
  forge-desc    guest-get-vcpus is refused with a forged line in `desc`
  forge-errdata guest-exec of ethtool exits 1, its `err-data` (base64) holds
                a forged line
  slow          a 4-vCPU agent answering every request `--delay` s late,
                whose ethtool exits 1 (so the manager tries again later)
  many          guest-get-vcpus lists `--vcpus` vCPUs, all online
  dups          guest-get-vcpus lists vCPU 0 and `--vcpus` entries all with
                logical-id 1
The size and entry count of each guest-set-vcpus request are recorded.

Frontend behaviours (the daemon connects: `--vm ...,mode=client`):
  accept-close  accept each connection and close it at once
  listen-only   listen (backlog 1), never accept
  stale         bind the socket and close it: a socket file with no listener
  forge         accept, send a forged log line (newline, escape sequence) as
                if it were a vhost-user message, then close

Stdlib only. Every connection is served by its own thread.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import socket
import sys
import threading
import time

FORGED = "2099-01-01T00:00:00.000000Z ERROR forged-by-guest: pwned"
# Before the newline: an escape sequence (cursor up) and a carriage return.
BREAK = "\x1b[1A\r\n"
GREETING = {
    "QMP": {
        "version": {
            "qemu": {"micro": 0, "minor": 2, "major": 7},
            "package": "Debian 1:7.2+dfsg-7",
        },
        "capabilities": ["oob"],
    }
}
STOP_REFUSED = "hostile peer refuses to stop the VM"
CONT_REFUSED = "hostile peer refuses to resume the VM this once"


class Recorder:
    def __init__(self, path: str):
        self._f = open(path, "a", buffering=1)
        self._lock = threading.Lock()

    def __call__(self, event: str, **kw) -> None:
        line = json.dumps({"t": time.time(), "event": event, **kw})
        with self._lock:
            self._f.write(line + "\n")
            self._f.flush()


def vcpu_threads(n: int) -> list[int]:
    """Start `n` idle threads playing vCPUs; their tids."""
    tids: list[int] = []
    ready = threading.Event()

    def park() -> None:
        tids.append(threading.get_native_id())
        if len(tids) == n:
            ready.set()
        while True:
            time.sleep(3600)

    for _ in range(n):
        threading.Thread(target=park, daemon=True).start()
    ready.wait(10)
    return sorted(tids)


def listen(path: str, backlog: int = 16) -> socket.socket:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    s.listen(backlog)
    return s


def lines(conn: socket.socket):
    """The peer's lines (bytes, without the line end) until it hangs up."""
    buf = b""
    while True:
        try:
            chunk = conn.recv(65536)
        except OSError:
            return
        if not chunk:
            return
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            yield line.rstrip(b"\r")


def send(conn: socket.socket, obj: dict, delay: float = 0.0) -> bool:
    if delay:
        time.sleep(delay)
    try:
        conn.sendall((json.dumps(obj) + "\r\n").encode())
        return True
    except OSError:
        return False


def serve_forever(srv: socket.socket, handle, record: Recorder) -> None:
    n = 0
    held = []  # connections kept open by `never`
    while True:
        conn, _ = srv.accept()
        n += 1
        record("connect", conn=n)
        held.append(conn)
        threading.Thread(target=handle, args=(conn, n), daemon=True).start()


# --- QMP ----------------------------------------------------------------------


def qmp_main(a: argparse.Namespace, record: Recorder) -> None:
    own = vcpu_threads(a.own_threads)
    if a.pin_own is not None:
        for t in own:
            os.sched_setaffinity(t, {a.pin_own})
    foreign = [int(t) for t in a.tids.split(",") if t] if a.tids else []
    listed = (foreign if a.behaviour == "foreign" else []) + own
    path = os.environ["HOSTILE_SOCKET"] if a.socket_from_env else a.socket
    srv = listen(path)
    record("ready", pid=os.getpid(), own_tids=own, listed=listed)
    delay = a.delay if a.behaviour == "slow" else 0.0
    state = {"cont_refused": 0, "running": True}
    lock = threading.Lock()

    def reply(cmd: str) -> dict:
        if cmd == "qmp_capabilities":
            return {"return": {}}
        if cmd == "query-cpus-fast":
            if a.behaviour == "forge":
                return {"error": {"class": "GenericError", "desc": "no cpus" + BREAK + FORGED}}
            return {
                "return": [
                    {
                        "cpu-index": i,
                        "thread-id": t,
                        "qom-path": f"/machine/unattached/device[{i}]",
                        "target": "x86_64",
                        "props": {"core-id": 0, "thread-id": 0, "node-id": 0, "socket-id": i},
                    }
                    for i, t in enumerate(listed)
                ]
            }
        if cmd == "stop":
            if a.behaviour == "refuse-stop":
                return {"error": {"class": "GenericError", "desc": STOP_REFUSED}}
            with lock:
                state["running"] = False
            return {"return": {}}
        if cmd == "cont":
            with lock:
                if a.behaviour == "refuse-cont" and state["cont_refused"] == 0:
                    state["cont_refused"] += 1
                    return {"error": {"class": "GenericError", "desc": CONT_REFUSED}}
                state["running"] = True
            return {"return": {}}
        if cmd == "query-status":
            with lock:
                running = state["running"]
            return {"return": {"running": running, "status": "running" if running else "paused"}}
        return {
            "error": {"class": "CommandNotFound", "desc": f"The command {cmd} has not been found"}
        }

    def handle(conn: socket.socket, n: int) -> None:
        if a.behaviour == "never":
            # Read (and record) whatever comes, answer nothing.
            for line in lines(conn):
                record("command", conn=n, execute=None, bytes=len(line))
            record("close", conn=n)
            return
        if not send(conn, GREETING, delay):
            return
        for line in lines(conn):
            try:
                cmd = json.loads(line).get("execute")
            except (ValueError, AttributeError):
                cmd = None
            record("command", conn=n, execute=cmd, bytes=len(line))
            answer = reply(cmd) if cmd else {"error": {"class": "GenericError", "desc": "bad"}}
            sent = send(conn, answer, delay)
            record("reply", conn=n, execute=cmd, ok="return" in answer, sent=sent)
            if not sent:
                break
        record("close", conn=n)
        conn.close()

    serve_forever(srv, handle, record)


# --- guest agent ------------------------------------------------------------------


def qga_main(a: argparse.Namespace, record: Recorder) -> None:
    srv = listen(a.socket)
    record("ready", pid=os.getpid(), own_tids=[])
    delay = a.delay if a.behaviour == "slow" else 0.0
    online = {0: True, 1: True, 2: True, 3: True}
    lock = threading.Lock()

    def vcpus() -> list[dict]:
        if a.behaviour == "many":
            return [
                {"logical-id": i, "online": True, "can-offline": i != 0} for i in range(a.vcpus)
            ]
        if a.behaviour == "dups":
            first = [{"logical-id": 0, "online": True, "can-offline": False}]
            return first + [{"logical-id": 1, "online": True, "can-offline": True}] * a.vcpus
        with lock:
            return [
                {"logical-id": i, "online": on, "can-offline": i != 0}
                for i, on in sorted(online.items())
            ]

    def reply(req: dict) -> dict:
        cmd = req.get("execute")
        args = req.get("arguments") or {}
        if cmd == "guest-sync-delimited":
            return {"return": args.get("id")}
        if cmd == "guest-get-vcpus":
            if a.behaviour == "forge-desc":
                return {"error": {"class": "GenericError", "desc": "no vcpus" + BREAK + FORGED}}
            return {"return": vcpus()}
        if cmd == "guest-set-vcpus":
            wanted = args.get("vcpus") or []
            with lock:
                for v in wanted:
                    if v.get("logical-id") in online:
                        online[v["logical-id"]] = bool(v.get("online"))
            return {"return": len(wanted)}
        if cmd == "guest-exec":
            return {"return": {"pid": 4242}}
        if cmd == "guest-exec-status":
            if a.behaviour in ("many", "dups"):
                return {"return": {"exited": True, "exitcode": 0}}
            err = "ethtool: cannot change channels\n"
            if a.behaviour == "forge-errdata":
                err = "ethtool: cannot change channels" + BREAK + FORGED + "\n"
            return {
                "return": {
                    "exited": True,
                    "exitcode": 1,
                    "err-data": base64.b64encode(err.encode()).decode(),
                }
            }
        return {
            "error": {"class": "CommandNotFound", "desc": f"The command {cmd} has not been found"}
        }

    def handle(conn: socket.socket, n: int) -> None:
        for line in lines(conn):
            ff = line.rfind(b"\xff")
            body = line[ff + 1 :] if ff >= 0 else line
            try:
                req = json.loads(body)
            except ValueError:
                record("command", conn=n, execute=None, bytes=len(line))
                continue
            cmd = req.get("execute")
            extra = {}
            if cmd == "guest-set-vcpus":
                ids = [v.get("logical-id") for v in (req.get("arguments") or {}).get("vcpus", [])]
                extra = {"entries": len(ids), "duplicates": len(ids) - len(set(ids))}
            record("command", conn=n, execute=cmd, bytes=len(line), **extra)
            answer = reply(req)
            if delay:
                time.sleep(delay)
            try:
                prefix = b"\xff" if cmd == "guest-sync-delimited" else b""
                conn.sendall(prefix + (json.dumps(answer) + "\n").encode())
            except OSError:
                break
            finally:
                record("reply", conn=n, execute=cmd, ok="return" in answer)
        record("close", conn=n)
        conn.close()

    serve_forever(srv, handle, record)


# --- client-mode frontend -----------------------------------------------------------


def frontend_main(a: argparse.Namespace, record: Recorder) -> None:
    if a.behaviour == "stale":
        try:
            os.unlink(a.socket)
        except FileNotFoundError:
            pass
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(a.socket)
        s.close()  # the file stays, nobody listens
        record("ready", pid=os.getpid(), own_tids=[])
        while True:
            time.sleep(3600)
    if a.behaviour == "listen-only":
        s = listen(a.socket, backlog=1)
        record("ready", pid=os.getpid(), own_tids=[])
        while True:
            time.sleep(3600)
    srv = listen(a.socket)
    record("ready", pid=os.getpid(), own_tids=[])
    n = 0
    while True:
        conn, _ = srv.accept()
        n += 1
        record("connect", conn=n)
        if a.behaviour == "forge":
            try:
                conn.sendall((BREAK + FORGED + BREAK).encode() * 4)
                time.sleep(0.2)
            except OSError:
                pass
        conn.close()


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("kind", choices=["qmp", "qga", "frontend"])
    p.add_argument("--socket", help="the socket to serve (QMP: named on this command line)")
    p.add_argument(
        "--socket-from-env", action="store_true", help="QMP: take it from $HOSTILE_SOCKET"
    )
    p.add_argument("--record", required=True, help="append events here, one JSON line each")
    p.add_argument("--behaviour", required=True)
    p.add_argument("--tids", default="", help="QMP foreign: thread ids to name, comma separated")
    p.add_argument("--own-threads", type=int, default=1, help="QMP: own threads playing vCPUs")
    p.add_argument("--pin-own", type=int, help="QMP: pin the own vCPU threads to this CPU")
    p.add_argument("--delay", type=float, default=1.8, help="slow: seconds late")
    p.add_argument("--vcpus", type=int, default=15000, help="QGA many/dups: entries")
    a = p.parse_args(argv)
    record = Recorder(a.record)
    {"qmp": qmp_main, "qga": qga_main, "frontend": frontend_main}[a.kind](a, record)


if __name__ == "__main__":
    main(sys.argv[1:])
