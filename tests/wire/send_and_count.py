"""From the far end of a veth wire: send COUNT frames of LENGTH bytes to
DST (EtherType 0x88b5, a sequence number in the payload), then count the
distinct frames addressed back to us for up to 2 s. Prints "sent received".

With LIARS, also send that many 802.3 frames to DST whose length field says
1000 bytes in a 60-byte frame (a receiver must count them undersize and drop
them), spread among the others; then it prints "sent received liars_sent".

Usage (inside the wire's namespace):
send_and_count.py IFACE DST_HEX COUNT LENGTH [LIARS]
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
liars = int(sys.argv[5]) if len(sys.argv) > 5 else None
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
liar = dst + me + (1000).to_bytes(2, "big") + bytes(46)


def send(frame):
    """True if the frame went out."""
    try:
        s.send(frame)
        return True
    except OSError:
        return False


sent, liars_sent = 0, 0
# One liar after every `every` frames; any left over at the end.
every = max(1, count // liars) if liars else 0
for i in range(count):
    f = dst + me + b"\x88\xb5" + struct.pack("!I", i)
    f += bytes(max(0, length - len(f)))
    sent += send(f)
    if liars_sent < (liars or 0) and (i + 1) % every == 0:
        liars_sent += send(liar)
for _ in range((liars or 0) - liars_sent):
    liars_sent += send(liar)
s.settimeout(0.2)
got, end = set(), time.time() + 2
while time.time() < end and len(got) < sent:
    try:
        r = s.recv(65536)
    except TimeoutError:
        continue
    if r[:6] == me and r[12:14] == b"\x88\xb5":
        got.add(struct.unpack("!I", r[14:18])[0])
if liars is None:
    print(sent, len(got))
else:
    print(sent, len(got), liars_sent)
