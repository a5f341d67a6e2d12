#!/bin/sh
# Run by `nc -e` in vrecv: the TCP stream is stdin.
cat >/tmp/rx.bin
