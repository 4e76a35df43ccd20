#!/bin/sh
# Prints more than balance.MaxOutput bytes on stdout.
head -c 1100000 /dev/zero | tr '\0' 'x'
