# Role ping: ping $VADAPT_PEER $VADAPT_COUNT times (default 5), then power off.
. /roles/lib.sh
vping "$VADAPT_PEER" "${VADAPT_COUNT:-5}"
