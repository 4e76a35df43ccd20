#!/bin/sh
# Prints $OUTPUT on stdout and $ERRTEXT on stderr, then exits with $CODE (default 0).
printf '%s' "$OUTPUT"
if [ -n "$ERRTEXT" ]; then printf '%s\n' "$ERRTEXT" >&2; fi
exit "${CODE:-0}"
