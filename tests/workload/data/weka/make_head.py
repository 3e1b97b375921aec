"""Writes trace_0010_head.json from Weka's published traces/trace_0010.json (KV-cache-tester, commit 94f6046):
    git -C kv-cache-tester show 94f6046:traces/trace_0010.json | python make_head.py > trace_0010_head.json
Not run by the tests; kept so the sample can be made again from the published file."""

import json
import math
import sys

SCALE, KEEP, SUB_KEEP = 32, 14, 3  # lengths divided by SCALE; the first KEEP entries; SUB_KEEP requests a sub-agent


def main() -> None:
    d = json.load(sys.stdin)

    def shrink(r: dict) -> dict:
        r = dict(r, **{"in": math.ceil(r["in"] / SCALE), "out": math.ceil(r["out"] / SCALE)})
        r["hash_ids"] = r["hash_ids"][: math.ceil(r["in"] / d["block_size"])]
        return r

    entries = []
    for r in d["requests"][:KEEP]:
        if r["type"] == "subagent":
            entries.append(dict(r, requests=[shrink(x) for x in r["requests"][:SUB_KEEP]]))
        else:
            entries.append(shrink(r))
    d["requests"] = entries
    d.pop("totals", None)
    json.dump(d, sys.stdout, indent=1)


if __name__ == "__main__":
    main()
