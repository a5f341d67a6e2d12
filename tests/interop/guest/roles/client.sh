# Role client: ping $VADAPT_PEER, then send vpattern $VADAPT_COUNT to it on
# $VADAPT_PORT (default 5001).
. /roles/lib.sh
vping "$VADAPT_PEER" 3
vsend "$VADAPT_PEER" "${VADAPT_PORT:-5001}" "${VADAPT_COUNT:-280000}"
