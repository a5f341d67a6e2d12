# Role server: receive one TCP stream on $VADAPT_PORT (default 5001), then
# keep the network up and take commands like the shell role.
. /roles/lib.sh
vrecv "${VADAPT_PORT:-5001}"
sh /roles/shell.sh
