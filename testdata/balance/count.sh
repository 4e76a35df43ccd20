#!/bin/sh
# Appends one line to $COUNT per run, lingers a little so concurrent callers pile
# up behind the run, then prints a reading.
echo run >> "$COUNT"
sleep 0.2
echo '{"remaining": 5, "windows": [{"name": "weekly", "remaining": 2.5, "capacity": 10}]}'
