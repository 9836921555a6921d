"""Run one real Helm action (helm-sdkpy, Helm v4's Go library) and print its result as one JSON line.

A separate process on purpose: the Go runtime inside helm-sdkpy reads the environment of the process as it was at
start (so `HELM_DRIVER=memory` must be in the environment before Python starts, not set with os.environ), and a Go
runtime loaded into pytest's process would stay there for every later test. `tests/chart/helm.py` starts it.

    HELM_DRIVER=memory python tests/chart/helmrun.py '{"action": "lint", "chart": "charts/dra-bridge"}'

With the memory driver a release lives only as long as its Helm configuration: an install and the upgrade of it
run as one request, `{"action": "steps", "steps": [{"action": "install", ...}, {"action": "upgrade", ...}]}`.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any


async def _run(req: dict[str, Any], cfg: Any = None) -> Any:
    import helm_sdkpy

    if cfg is None:
        cfg = helm_sdkpy.Configuration(namespace=req.get("namespace", "default"), kubeconfig=req.get("kubeconfig"))
    action = req["action"]
    if action == "steps":  # one configuration, one memory driver: an upgrade sees the release the install recorded
        return [await _run({**req, **step}, cfg) for step in req["steps"]]
    if action == "each":  # independent attempts in one process (one Go runtime start): each answers ok or error
        out = []
        for step in req["steps"]:
            try:
                out.append({"ok": True, "result": await _run({**req, **step}, cfg)})
            except Exception as err:
                out.append({"ok": False, "error": str(err)})
        return out
    if action == "lint":
        return await helm_sdkpy.Lint(cfg).run(req["chart"])
    if action == "install":
        return await helm_sdkpy.Install(cfg).run(req["release"], req["chart"], values=req.get("values") or {},
                                                 wait=False, timeout=int(req.get("timeout", 60)))
    if action == "upgrade":
        return await helm_sdkpy.Upgrade(cfg).run(req["release"], req["chart"], values=req.get("values") or {},
                                                 wait=False, timeout=int(req.get("timeout", 60)))
    if action == "version":
        return helm_sdkpy.get_version()
    raise SystemExit(f"unknown action {action!r}")


def main() -> None:
    req = json.loads(sys.argv[1])
    try:
        result = asyncio.run(_run(req))
    except Exception as err:  # the Helm error is the answer the test checks, not a crash
        print(json.dumps({"ok": False, "error": str(err), "type": type(err).__name__}))
        return
    print(json.dumps({"ok": True, "result": result}))


if __name__ == "__main__":
    main()
