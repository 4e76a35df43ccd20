#!/usr/bin/env python3
"""A gatectl balance script: DeepSeek's balance, printed as the script contract.

gatectl runs it as an argv (never through a shell), in the config's directory, with
only PATH, HOME, the entry's literal `env` and the key named by `apiKeyEnv`. It
prints one JSON object on stdout:

    {"remaining": 110.0}

and exits 0; any failure exits non-zero, which gatectl reads as a missing reading.
stdout carries nothing else. Diagnostics go to stderr, and never the key: gatectl
discards stderr anyway, but people run these by hand.

Environment:
    DEEPSEEK_API_KEY        the key (required unless faking)
    DEEPSEEK_BASE_URL       default https://api.deepseek.com; tests point it at a
                            local server
    DEEPSEEK_CURRENCY       pick this currency's entry (default: the first one)
    BALANCE_FAKE_REMAINING  print this remaining without any request (demos)
    BALANCE_HTTP_TIMEOUT    seconds, default 4 (keep it under the entry's timeout)

Standard library only, so it runs on any python3.
"""

import json
import os
import sys
import urllib.error
import urllib.request


def fail(msg):
    print("balance: " + msg, file=sys.stderr)
    return 1


def main():
    fake = os.environ.get("BALANCE_FAKE_REMAINING")
    if fake:
        print(json.dumps({"remaining": float(fake)}))
        return 0

    key = os.environ.get("DEEPSEEK_API_KEY")
    if not key:
        return fail("DEEPSEEK_API_KEY is not set")
    base = os.environ.get("DEEPSEEK_BASE_URL", "https://api.deepseek.com").rstrip("/")
    timeout = float(os.environ.get("BALANCE_HTTP_TIMEOUT", "4"))
    req = urllib.request.Request(
        base + "/user/balance",
        headers={"Authorization": "Bearer " + key, "Accept": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            body = json.load(resp)
    except urllib.error.HTTPError as e:
        return fail("the balance endpoint answered %d" % e.code)
    except (urllib.error.URLError, OSError, ValueError) as e:
        return fail("the balance request failed (%s)" % type(e).__name__)

    infos = body.get("balance_infos") or []
    currency = os.environ.get("DEEPSEEK_CURRENCY")
    if currency:
        infos = [i for i in infos if i.get("currency") == currency]
    if not infos:
        return fail("no balance entry in the answer")
    try:
        remaining = float(infos[0]["total_balance"])
    except (KeyError, TypeError, ValueError):
        return fail("total_balance is missing or not a number")

    reading = {"remaining": remaining}
    if body.get("is_available") is False:
        reading["error"] = "the balance cannot pay for API calls"
    print(json.dumps(reading))
    return 0


if __name__ == "__main__":
    sys.exit(main())
