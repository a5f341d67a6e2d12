"""From the far end of a veth wire: send COUNT frames of LENGTH bytes to
DST (EtherType 0x88b5, a sequence number in the payload), then count the
distinct frames addressed back to us for up to 2 s. Prints "sent received".

Usage (inside the wire's namespace): send_and_count.py IFACE DST_HEX COUNT LENGTH
"""

import socket
import struct
import sys
import time

iface, dst, count, length = (
    sys.argv[1],
    bytes.fromhex(sys.argv[2]),
    int(sys.argv[3]),
    int(sys.argv[4]),
)
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x88B5))
s.bind((iface, 0x88B5))
# Frames come back while we still send: the default receive buffer (about
# 256 small frames) would drop the rest before we read. Root may force more
# (SO_RCVBUFFORCE, 33 on Linux; Python does not name it).
try:
    s.setsockopt(socket.SOL_SOCKET, 33, 1 << 24)
except OSError:
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 24)
me = s.getsockname()[4]
sent = 0
for i in range(count):
    f = dst + me + b"\x88\xb5" + struct.pack("!I", i)
    f += bytes(max(0, length - len(f)))
    try:
        s.send(f)
        sent += 1
    except OSError:
        pass
s.settimeout(0.2)
got, end = set(), time.time() + 2
while time.time() < end and len(got) < sent:
    try:
        r = s.recv(65536)
    except TimeoutError:
        continue
    if r[:6] == me and r[12:14] == b"\x88\xb5":
        got.add(struct.unpack("!I", r[14:18])[0])
print(sent, len(got))
