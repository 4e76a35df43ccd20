#!/bin/sh
# Starts a child (in the script's own process group), records "<own pid> <child pid>" in $PIDS,
# then hangs: only a kill of the whole group ends both.
sleep 30 &
echo "$$ $!" > "$PIDS.tmp" && mv "$PIDS.tmp" "$PIDS"
sleep 30
echo '{"remaining": 1}'
