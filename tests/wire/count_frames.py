"""At the far end of a veth wire: count the frames of EtherType 0x88b5
that arrive (a sequence number after the EtherType), until WANT distinct
ones came or none came for 3 s. Prints "ready" once listening, then
"frames distinct".

Usage (inside the wire's namespace): count_frames.py IFACE WANT
"""

import socket
import struct
import sys
import time

iface, want = sys.argv[1], int(sys.argv[2])
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x88B5))
# A burst of thousands arrives before we read: a receive buffer of 32 MiB
# (SO_RCVBUFFORCE, 33 on Linux; Python does not name it) holds it.
s.setsockopt(socket.SOL_SOCKET, 33, 1 << 25)
s.bind((iface, 0x88B5))
print("ready", flush=True)
s.settimeout(0.2)
got, frames, last = set(), 0, time.time()
while len(got) < want and time.time() - last < 3:
    try:
        r = s.recv(65536)
    except TimeoutError:
        continue
    if r[12:14] == b"\x88\xb5":
        frames += 1
        got.add(struct.unpack("!I", r[14:18])[0])
        last = time.time()
print(frames, len(got), flush=True)
