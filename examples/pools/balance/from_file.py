#!/usr/bin/env python3
"""A balance script that runs anywhere: it reports one provider's allowance from a
local JSON file (balances.json beside the config), in the balance script contract:

    {"remaining": 2.94, "windows": [{"name": "weekly", "remaining": 2.94, "capacity": 35}]}

Edit balances.json and watch `gatectl routes --offline --config examples/pools/gatectl.yaml`
change. A real script would call the provider's billing endpoint with the key that
gatectl hands it in the environment (see examples/balance/script_example.py).

usage: from_file.py PROVIDER
"""
import json
import os
import sys


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: from_file.py PROVIDER", file=sys.stderr)
        return 2
    path = os.environ.get("BALANCES_FILE", "balances.json")
    with open(path, encoding="utf-8") as f:
        balances = json.load(f)
    reading = balances.get(sys.argv[1])
    if reading is None:
        print(f"no balance for {sys.argv[1]} in {path}", file=sys.stderr)
        return 1
    json.dump(reading, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
