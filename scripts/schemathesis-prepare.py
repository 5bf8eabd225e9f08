#!/usr/bin/env python3
"""Prepares a daemon for scripts/schemathesis and prints the OpenAPI document to test with.

Reads BERTH_ST_URL, BERTH_ST_KEY and BERTH_ST_IMAGE (the fixture image). Makes a domain with
three running instances of the image (`web`, `ex`, `arch`), a spare domain, a workspace `ws` and
a lease on it; then prints the daemon's /v1/openapi.json with those as the examples of the path
parameters, the image as the example spec's image and the only image a generated spec may name,
and an exec frame as the exec body's example. Waits on the daemon's answers, never a fixed time.
"""

import json
import os
import sys
import time
import urllib.error
import urllib.request

URL = os.environ["BERTH_ST_URL"]
KEY = os.environ["BERTH_ST_KEY"]
IMAGE = os.environ["BERTH_ST_IMAGE"]


def call(method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(URL + path, data=data, method=method)
    req.add_header("Authorization", "Bearer " + KEY)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=60) as res:
            return json.load(res)
    except urllib.error.HTTPError as e:
        sys.exit(f"{method} {path}: {e.code} {e.read().decode(errors='replace')}")


doc = call("GET", "/v1/openapi.json")
schemas = doc["components"]["schemas"]
spec_schema = schemas["ResourceInstanceSpec"]


def spec(alias):
    s = json.loads(json.dumps(spec_schema["example"]))
    s["alias"] = alias
    s["image"] = IMAGE
    return s


domain = call("POST", "/v1/resource-domains", {"name": "schemathesis"})["resourceDomainId"]
spare = call("POST", "/v1/resource-domains", {"name": "schemathesis-spare"})["resourceDomainId"]
for key in ["web", "ex", "arch"]:
    call("POST", f"/v1/resource-domains/{domain}/instances/{key}/up",
         {"spec": spec(key), "cause": "use"})
deadline = time.monotonic() + 120
for key in ["web", "ex", "arch"]:
    while True:
        state = call("GET", f"/v1/resource-domains/{domain}/instances/{key}")["state"]
        if state["kind"] == "running":
            break
        if state["kind"] == "failed" or time.monotonic() > deadline:
            sys.exit(f"instance {key} did not come up: {json.dumps(state)}")
        time.sleep(0.2)
call("PUT", "/v1/workspaces/ws", {"containers": [], "selector": None})
lease = call("POST", "/v1/workspaces/ws/leases", {"ttlSeconds": 3600})["leaseId"]

# The only image a generated spec may name: the fixture, on this machine's registry.
spec_schema["properties"]["image"] = {"type": "string", "enum": [IMAGE]}
spec_schema["example"] = spec("web")
schemas["UpRequest"]["example"] = {"spec": spec("web"), "cause": "use"}

for path, item in doc["paths"].items():
    for method, op in item.items():
        for param in op.get("parameters", []):
            name = param["name"]
            if name == "resourceDomainId":
                on_spare = path.endswith("/fence") or path.endswith("/unfence") or \
                    path == "/v1/resource-domains/{resourceDomainId}/archive"
                param["example"] = spare if on_spare else domain
            elif name == "key":
                if path.endswith("/exec"):
                    param["example"] = "ex"
                elif path.endswith("/instances/{key}/archive"):
                    param["example"] = "arch"
                else:
                    param["example"] = "web"
            elif name == "workspaceId":
                param["example"] = "ws"
            elif name == "leaseId":
                param["example"] = lease
            elif name == "follow":
                # follow=true streams until the container stops, which a request with a
                # timeout cannot wait for: the run asks for what is there now.
                param["schema"] = {"type": "boolean", "enum": [False]}
            elif name == "timeoutMs" and path.endswith("/wait"):
                # A wait for a state that does not come lasts its whole timeout (up to five
                # minutes): the run keeps each one short. Without timeoutMs the daemon's default
                # (30 s) applies, which the run's request timeout leaves room for.
                param["schema"] = {"type": "integer", "minimum": 0, "maximum": 1000}
                param["example"] = 200
        content = op.get("requestBody", {}).get("content", {})
        if path.endswith("/exec"):
            for media in content.values():
                media["example"] = json.dumps(
                    {"argv": ["sh", "-c", "cat >/dev/null; echo ok"], "user": None, "timeoutMs": 10000}
                ) + "\nstdin\n"
        elif path.endswith("/instances/{key}/stop"):
            content["application/json"]["example"] = {"by": "schemathesis"}
        elif path.endswith("/instances/{key}/up"):
            content["application/json"]["example"] = {"spec": spec("web"), "cause": "use"}

json.dump(doc, sys.stdout)
