"""The reaction-latency ceiling: the least a controller can do when a pod ends.

A bare asyncio process (aiohttp, raw JSON): it lists and watches the pods of one namespace,
and when one ends (phase Succeeded or Failed) it creates a ConfigMap `react-<pod>`. The
benchmark's watcher times pod end -> ConfigMap seen, exactly as it times pod end -> job status
seen for the operator, so the two latencies differ only by what the operator does beyond one
watch and one write.

    python -m bench._reactor SERVER CA CERT KEY NAMESPACE
"""

from __future__ import annotations

import asyncio
import json
import signal
import ssl
import sys

import aiohttp

UA = "trainjobs-bench-reactor"


async def run(server: str, ca: str, cert: str, key: str, ns: str) -> None:
    ctx = ssl.create_default_context(cafile=ca)
    ctx.load_cert_chain(cert, key)
    ended: set[str] = set()
    pods = f"{server}/api/v1/namespaces/{ns}/pods"
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=32, ssl=ctx),
                                     headers={"User-Agent": UA}) as s:
        async def react(name: str) -> None:
            body = {"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": f"react-{name}"}, "data": {"pod": name}}
            async with s.post(f"{server}/api/v1/namespaces/{ns}/configmaps",
                              data=json.dumps(body),
                              headers={"Content-Type": "application/json"}) as r:
                await r.read()

        tasks: set[asyncio.Task[None]] = set()
        async with s.get(pods) as r:
            listed = json.loads(await r.read())
        for pod in listed.get("items") or []:
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                ended.add(pod["metadata"]["name"])
        rv = listed["metadata"]["resourceVersion"]
        print("ready", flush=True)
        params = {"watch": "true", "resourceVersion": rv, "timeoutSeconds": "3600"}
        async with s.get(pods, params=params, timeout=aiohttp.ClientTimeout(total=None)) as r:
            buffer = b""
            async for chunk in r.content.iter_any():
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if not line.strip():
                        continue
                    obj = json.loads(line).get("object") or {}
                    name = (obj.get("metadata") or {}).get("name", "")
                    phase = (obj.get("status") or {}).get("phase")
                    if phase in ("Succeeded", "Failed") and name not in ended:
                        ended.add(name)
                        task = asyncio.create_task(react(name))
                        tasks.add(task)
                        task.add_done_callback(tasks.discard)


def main() -> int:
    server, ca, cert, key, ns = sys.argv[1:6]
    loop = asyncio.new_event_loop()
    main_task = loop.create_task(run(server, ca, cert, key, ns))
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, main_task.cancel)
    try:
        loop.run_until_complete(main_task)
    except asyncio.CancelledError:
        pass
    finally:
        loop.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
