# Role shell: run each line read from the serial console as a command (the
# helpers of lib.sh are available) and answer "VADAPT-DONE rc=N" after it.
# A line "exit" ends the role (the guest then powers off). Echo is turned
# off so that the host reads only what commands print.
. /roles/lib.sh
stty -echo 2>/dev/null
echo "VADAPT-READY"
while IFS= read -r line; do
    [ "$line" = exit ] && break
    eval "$line"
    echo "VADAPT-DONE rc=$?"
done
