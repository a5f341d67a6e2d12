"""`vadapt capture PORT` against a running `vadapt serve` (issue 40, item 6),
through the release binary and the control socket.

A raw vhost-user frontend (vhost_raw.py, as test_tenancy.py's attacker)
sends known frames of several lengths from vm1 to an echo port, which
sends each back with its addresses swapped. Captures of vm1 are read back
with scapy (`rdpcap` reads pcapng) and compared with what was sent byte
for byte: the frames vm1 received from its VM (`--dir rx`) are the frames
sent, those handed to vm1 (`--dir tx`) their echoes.

- `-w FILE -c 2N`: both ways, every frame and every echo, each once.
- `-w -`: the stream on stdout, `--queue 0`, in the order sent.
- `-s 20`: each frame cut to 20 bytes, its length on the wire kept.
- `-w - | tcpdump -r -`: tcpdump (libpcap's pcapng reader) prints every
  frame sent, byte for byte in its hex dump.
- Ctrl-C: the file ends complete (its statistics block last), with every
  frame sent before it and the summary on stderr.
- SIGTERM to the daemon while a capture runs: the daemon ends the capture
  (its statistics block written) and joins its thread before it exits.
- A second capture of a port is refused while the first runs; a capture
  whose client is killed frees the port; a queue for `tx` frames and a
  port that is not there are refused, saying why.

No timing is asserted: counts and bytes only.
"""

from __future__ import annotations

import io
import re
import shutil
import signal
import struct
import subprocess
from pathlib import Path

from scapy.utils import rdpcap

from conftest import missing
from test_tenancy import RawSender, mac_bytes

import harness

VM1 = "02:00:00:00:40:a1"
ECHO = "02:00:00:00:40:ec"
N = 40


def frames() -> list[bytes]:
    """N Ethernet frames from vm1 to the echo port, 60 to 99 bytes, each
    with its index in its payload."""
    out = []
    for i in range(N):
        payload = struct.pack(">I", i) + bytes((i + j) & 0xFF for j in range(42 + i % 40))
        out.append(mac_bytes(ECHO) + mac_bytes(VM1) + b"\x88\xb5" + payload)
    return out


def echoed(f: bytes) -> bytes:
    return f[6:12] + f[0:6] + f[12:]


def start(vadapt_bin: Path, procs) -> tuple[harness.Vadapt, RawSender]:
    sock = procs.workdir / "vm1.sock"
    d = harness.Vadapt(
        vadapt_bin, procs.workdir, procs,
        ["--vm", f"name=vm1,socket={sock},mac={VM1}", "--echo", f"e0,mac={ECHO}",
         "--policy", "interrupt"],
    ).start([sock])  # fmt: skip
    return d, RawSender(sock)


class Capture:
    """A `vadapt capture` client, its stdout to `out` (a path) or a pipe."""

    def __init__(self, d: harness.Vadapt, *args: str, out: Path | None = None):
        self.out = out
        argv = [str(d.binary), "capture", "--control", str(d.control), *args]
        argv += ["-w", str(out) if out else "-"]
        self.popen = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def wait_started(self) -> None:
        """Until the daemon has started it (the client's first line)."""
        line = self.popen.stderr.readline().decode()
        assert "capturing" in line, line + self.popen.stderr.read().decode()

    def finish(self, timeout: float = 30) -> tuple[bytes, str]:
        out, err = self.popen.communicate(timeout=timeout)
        assert self.popen.returncode == 0, err.decode()
        return (self.out.read_bytes() if self.out else out), err.decode()


def run_refused(d: harness.Vadapt, *args: str) -> str:
    r = subprocess.run(
        [str(d.binary), "capture", "--control", str(d.control), *args],
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert r.returncode != 0, r.stderr
    return r.stderr


def packets(pcapng: bytes) -> list:
    return list(rdpcap(io.BytesIO(pcapng)))


def wait_written(path: Path, n: int) -> None:
    """Until the file at `path` holds `n` frames (a file cut inside a block
    reads as not yet)."""

    def written() -> bool:
        try:
            return len(packets(path.read_bytes())) == n
        except Exception:  # noqa: BLE001 - a file cut inside a block
            return False

    assert harness.poll(written, 20), "the frames never reached the file"


def last_block_type(pcapng: bytes) -> int:
    """The type of the stream's last block (native byte order: the
    daemon's host is this one)."""
    (length,) = struct.unpack_from("=I", pcapng, len(pcapng) - 4)
    return struct.unpack_from("=I", pcapng, len(pcapng) - length)[0]


def test_capture_reads_back_what_was_sent(vadapt_bin, procs):
    d, vm1 = start(vadapt_bin, procs)
    sent = frames()
    try:
        # Both ways, to a file, ended by its count.
        c = Capture(d, "vm1", "-c", str(2 * N), out=procs.workdir / "both.pcapng")
        c.wait_started()
        vm1.send_frames(sent, N)
        data, err = c.finish()
        got = [bytes(p) for p in packets(data)]
        assert sorted(got) == sorted(sent + [echoed(f) for f in sent]), err
        assert f"{2 * N} frame(s) captured" in err and "0 dropped" in err, err
        assert last_block_type(data) == 5, "the statistics block ends the file"

        # Received frames on queue 0, streamed on stdout, in their order.
        c = Capture(d, "vm1", "--dir", "rx", "--queue", "0", "-c", str(N))
        c.wait_started()
        vm1.send_frames(sent, N)
        data, _ = c.finish()
        assert [bytes(p) for p in packets(data)] == sent

        # Frames handed to vm1, cut to 20 bytes; their wire length kept.
        c = Capture(d, "vm1", "--dir", "tx", "-s", "20", "-c", str(N))
        c.wait_started()
        vm1.send_frames(sent, N)
        data, _ = c.finish()
        got = packets(data)
        assert [bytes(p) for p in got] == [echoed(f)[:20] for f in sent]
        assert [p.wirelen for p in got] == [len(f) for f in sent]
    finally:
        vm1.close()


def tcpdump_frames(text: str) -> list[bytes]:
    """The frames in `tcpdump -xx` output: each header line, then its hex
    lines (`\t0x0000:  0200 0000 40ec ...`)."""
    out: list[bytes] = []
    for line in text.splitlines():
        m = re.match(r"\s+0x[0-9a-f]+:\s+((?:[0-9a-f]{2,4}\s?)+)", line)
        if m:
            out[-1] += bytes.fromhex(m.group(1).replace(" ", ""))
        elif line and not line[0].isspace():
            out.append(b"")
    return out


def test_tcpdump_reads_the_stream_from_a_pipe(vadapt_bin, procs):
    tcpdump = shutil.which("tcpdump")
    if tcpdump is None:
        missing("tcpdump (scripts/install-deps.sh installs it)")
    d, vm1 = start(vadapt_bin, procs)
    sent = frames()
    try:
        c = Capture(d, "vm1", "--dir", "rx", "-c", str(N))
        c.wait_started()
        td = subprocess.Popen(
            [tcpdump, "-r", "-", "-nn", "-e", "-xx"],
            stdin=c.popen.stdout,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        c.popen.stdout.close()
        vm1.send_frames(sent, N)
        out, err = td.communicate(timeout=30)
        assert c.popen.wait(timeout=30) == 0, c.popen.stderr.read().decode()
        assert td.returncode == 0, err
        assert tcpdump_frames(out) == sent, out[:2000]
        assert out.count(f"{VM1} > {ECHO}") == N, out[:2000]
    finally:
        vm1.close()


def test_ctrl_c_ends_a_capture_with_a_complete_file(vadapt_bin, procs):
    d, vm1 = start(vadapt_bin, procs)
    sent = frames()
    path = procs.workdir / "ctrl-c.pcapng"
    try:
        c = Capture(d, "vm1", "--dir", "rx", out=path)
        c.wait_started()
        # A second capture of the port is refused while this one runs.
        err = run_refused(d, "vm1", "-w", str(procs.workdir / "second.pcapng"))
        assert "being captured already" in err, err
        vm1.send_frames(sent, N)
        wait_written(path, N)
        c.popen.send_signal(signal.SIGINT)
        data, err = c.finish()
        assert [bytes(p) for p in packets(data)] == sent
        assert last_block_type(data) == 5, "the statistics block ends the file"
        assert f"{N} frame(s) captured" in err and "0 dropped" in err, err
    finally:
        vm1.close()


def test_a_stopping_daemon_ends_a_running_capture_with_a_complete_file(vadapt_bin, procs):
    d, vm1 = start(vadapt_bin, procs)
    sent = frames()
    path = procs.workdir / "sigterm.pcapng"
    try:
        c = Capture(d, "vm1", "--dir", "rx", out=path)
        c.wait_started()
        vm1.send_frames(sent, N)
        wait_written(path, N)
    finally:
        vm1.close()
    d.proc.popen.send_signal(signal.SIGTERM)
    assert d.proc.wait_exit(30) == 0, d.proc.tail()
    data, err = c.finish()
    assert [bytes(p) for p in packets(data)] == sent
    assert last_block_type(data) == 5, "the statistics block ends the file"
    assert f"{N} frame(s) captured" in err and "0 dropped" in err, err


def test_a_gone_client_frees_the_port_and_refusals_say_why(vadapt_bin, procs):
    d, vm1 = start(vadapt_bin, procs)
    try:
        c = Capture(d, "vm1", out=procs.workdir / "killed.pcapng")
        c.wait_started()
        c.popen.kill()
        c.popen.communicate(timeout=10)

        def free() -> bool:
            r = subprocess.run(
                [str(d.binary), "capture", "--control", str(d.control), "vm1",
                 "--duration", "0.2", "-w", str(procs.workdir / "after.pcapng")],
                capture_output=True, timeout=20,
            )  # fmt: skip
            return r.returncode == 0

        assert harness.poll(free, 10, step=0.2), "the killed client's capture still holds vm1"
        err = run_refused(d, "vm1", "--dir", "tx", "--queue", "0", "-w", "-")
        assert "--queue selects frames the port received" in err, err
        err = run_refused(d, "vm9", "-w", "-")
        assert "no port vm9" in err and "vm1" in err and "e0" in err, err
        err = run_refused(d, "vm1", "-s", "0", "-w", "-")
        assert "snap length 0" in err, err
    finally:
        vm1.close()
