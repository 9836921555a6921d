"""`helm` for the guide tests: the Helm CLI's `install`, `upgrade`, `uninstall`, `status` and `get values`, backed by
real Helm (helm-sdkpy: Helm v4's Go library), so a guide's `helm ...` lines run unchanged.

    python tests/guides/helmcli.py install dra-bridge charts/dra-bridge -n dra-bridge -f values.yaml --set a.b=1

The tests put a `helm` wrapper that runs this file on PATH. Options follow the Helm CLI (helm.sh/helm/v4
pkg/cmd/{install,upgrade,uninstall,status,get_values}.go): `-n/--namespace`, `-f/--values` (repeatable, later files
win, maps merged key by key as Helm coalesces them), `--set`/`--set-string` (repeatable; parsed as Helm's strvals:
`a.b=c`, `a\\.b` for a literal dot, `{x,y}` lists, `true`/`false`/`null` and integers typed unless `--set-string`),
`--create-namespace`, `--reuse-values`, `--reset-values`, `--install`, `--wait` (accepted; nothing waits here:
the sandbox's stand-ins start workloads on their own), `--timeout`, `--kubeconfig` and `KUBECONFIG`.
Anything else is refused with exit 1 and the option named, never ignored. Release records are Helm's default
(Secrets), so an upgrade or uninstall in a later process finds the install.
Output: Helm's release summary (NAME, LAST DEPLOYED, NAMESPACE, STATUS, REVISION) and the chart's NOTES.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import yaml


class UsageError(Exception):
    pass


def _split_unescaped(text: str, sep: str) -> list[str]:
    """Split at `sep` outside `\\`-escapes and `{...}` lists."""
    parts, cur, i, depth = [], "", 0, 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            cur += text[i:i + 2]
            i += 2
            continue
        depth += {"{": 1, "}": -1}.get(c, 0)
        if c == sep and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += c
        i += 1
    parts.append(cur)
    return parts


def _typed(value: str, as_string: bool) -> Any:
    if as_string:
        return value
    low = value.lower()
    if low == "true":
        return True
    if low == "false":
        return False
    if low == "null":
        return None
    if re.fullmatch(r"-?(0|[1-9][0-9]*)", value):
        return int(value)
    return value


def parse_set(expr: str, as_string: bool = False) -> dict[str, Any]:
    """One `--set` argument (comma-separated assignments) as a nested dict (helm.sh/helm pkg/strvals/parser.go)."""
    out: dict[str, Any] = {}
    for assignment in _split_unescaped(expr, ","):
        if not assignment:
            continue
        key, sep, value = assignment.partition("=")
        if not sep:
            raise UsageError(f"--set {expr!r}: key {key!r} has no value (expected key=value)")
        path = [p.replace("\\.", ".") for p in _split_unescaped(key, ".")]
        if any(not p for p in path):
            raise UsageError(f"--set {expr!r}: empty key segment")
        if value.startswith("{") and value.endswith("}"):
            typed: Any = [_typed(v, as_string) for v in value[1:-1].split(",") if v != ""]
        else:
            typed = _typed(value.replace("\\,", ","), as_string)
        node = out
        for p in path[:-1]:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise UsageError(f"--set {expr!r}: {p} is not a map")
        node[path[-1]] = typed
    return out


def coalesce(base: Any, over: Any) -> Any:
    """Maps merge key by key, `over` wins, a null deletes the key (helm.sh/helm pkg/chart/common/util/coalesce.go)."""
    if not isinstance(base, dict) or not isinstance(over, dict):
        return copy.deepcopy(over)
    out = copy.deepcopy(base)
    for k, v in over.items():
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = coalesce(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


FLAGS_WITH_VALUE = {"-n": "namespace", "--namespace": "namespace", "-f": "values", "--values": "values",
                    "--set": "set", "--set-string": "set_string", "--timeout": "timeout",
                    "--kubeconfig": "kubeconfig", "--kube-context": "context", "-o": "output", "--output": "output"}
BOOL_FLAGS = {"--create-namespace", "--reuse-values", "--reset-values", "--install", "-i", "--wait", "--atomic",
              "--all"}


def parse_args(argv: list[str]) -> tuple[list[str], dict[str, Any]]:
    positional: list[str] = []
    opts: dict[str, Any] = {"values": [], "set": [], "set_string": []}
    i = 0
    while i < len(argv):
        a = argv[i]
        name, eq, inline = a.partition("=")
        if name in FLAGS_WITH_VALUE:
            if eq:
                value = inline
            else:
                if i + 1 >= len(argv):
                    raise UsageError(f"flag needs an argument: {name}")
                i += 1
                value = argv[i]
            key = FLAGS_WITH_VALUE[name]
            if key in ("values", "set", "set_string"):
                opts[key].append(value)
            else:
                opts[key] = value
        elif a in BOOL_FLAGS:
            opts[a.lstrip("-").replace("-", "_")] = True
        elif a.startswith("-"):
            raise UsageError(f"unknown flag: {a} (this Helm stand-in runs install, upgrade, uninstall, status and get "
                             "values with -n, -f, --set, --set-string, --create-namespace, --reuse-values, "
                             "--reset-values, --install, --wait, --timeout, --kubeconfig)")
        else:
            positional.append(a)
        i += 1
    return positional, opts


def user_values(opts: dict[str, Any]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for f in opts["values"]:
        try:
            doc = yaml.safe_load(Path(f).read_text()) or {}
        except OSError as err:
            raise UsageError(f"open {f}: {err.strerror}") from err
        if not isinstance(doc, dict):
            raise UsageError(f"{f}: values must be a map")
        values = coalesce(values, doc)
    for s in opts["set"]:
        values = coalesce(values, parse_set(s))
    for s in opts["set_string"]:
        values = coalesce(values, parse_set(s, as_string=True))
    return values


def summary(release: dict[str, Any]) -> str:
    info = release.get("info") or {}
    lines = [f"NAME: {release.get('name')}", f"LAST DEPLOYED: {info.get('last_deployed', '')}",
             f"NAMESPACE: {release.get('namespace')}", f"STATUS: {info.get('status')}",
             f"REVISION: {release.get('version')}"]
    notes = info.get("notes") or ""
    if notes:
        lines += ["NOTES:", notes.rstrip()]
    return "\n".join(lines) + "\n"


async def run(argv: list[str]) -> str:
    import helm_sdkpy

    positional, opts = parse_args(argv)
    if not positional:
        raise UsageError("usage: helm install|upgrade|uninstall|status|get values ...")
    verb, args = positional[0], positional[1:]
    cfg = helm_sdkpy.Configuration(namespace=opts.get("namespace", "default"),
                                   kubeconfig=opts.get("kubeconfig") or os.environ.get("KUBECONFIG"),
                                   kubecontext=opts.get("context"))
    timeout = int(str(opts.get("timeout", "300")).rstrip("s") or 300)
    if verb == "install":
        if len(args) != 2:
            raise UsageError("helm install NAME CHART")
        rel = await helm_sdkpy.Install(cfg).run(args[0], args[1], values=user_values(opts), wait=False,
                                                timeout=timeout, create_namespace=bool(opts.get("create_namespace")))
        return summary(rel)
    if verb == "upgrade":
        if len(args) != 2:
            raise UsageError("helm upgrade NAME CHART")
        rel = await helm_sdkpy.Upgrade(cfg).run(
            args[0], args[1], values=user_values(opts), wait=False, timeout=timeout,
            install=bool(opts.get("install") or opts.get("i")), create_namespace=bool(opts.get("create_namespace")),
            reuse_values=bool(opts.get("reuse_values")), reset_values=bool(opts.get("reset_values")))
        return f'Release "{args[0]}" has been upgraded. Happy Helming!\n' + summary(rel)
    if verb == "uninstall":
        if len(args) != 1:
            raise UsageError("helm uninstall NAME")
        await helm_sdkpy.Uninstall(cfg).run(args[0], wait=False, timeout=timeout)
        return f'release "{args[0]}" uninstalled\n'
    if verb == "status":
        if len(args) != 1:
            raise UsageError("helm status NAME")
        return summary(await helm_sdkpy.Status(cfg).run(args[0]))
    if verb == "get" and args[:1] == ["values"] and len(args) == 2:
        values = await helm_sdkpy.GetValues(cfg).run(args[1], all=bool(opts.get("all")))
        if opts.get("output") == "json":
            return json.dumps(values) + "\n"
        return "USER-SUPPLIED VALUES:\n" + yaml.safe_dump(values, sort_keys=True)
    raise UsageError(f"this Helm stand-in does not run `helm {verb}`")


def main(argv: list[str]) -> int:
    try:
        out = asyncio.run(run(argv))
    except UsageError as err:
        print(f"Error: {err}", file=sys.stderr)
        return 1
    except Exception as err:  # Helm's own error, as the CLI prints it
        print(f"Error: {err}", file=sys.stderr)
        return 1
    sys.stdout.write(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
