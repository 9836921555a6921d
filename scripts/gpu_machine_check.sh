#!/usr/bin/env bash
# The check run on a real GPU machine (an NVIDIA H200 lent to some sessions): what NVML discovers, the CDI spec the
# daemon would write for a claim on GPU 0 with the real driver root, and whether every host path in that spec exists.
#
#   bash scripts/gpu_machine_check.sh [DRIVER_ROOT...]     # default: / and /usr/local/nvidia (where present)
#
# Needs the package's runtime imports for discovery and CDI (PyYAML, jsonschema, nvidia-ml-py); nothing is written
# outside a temporary directory. Prints a summary line per driver root and exits non-zero if any check failed.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY="${PYTHON:-python3}"
roots=("$@")
if [ ${#roots[@]} -eq 0 ]; then
  roots=(/)
  [ -d /usr/local/nvidia ] && roots+=(/usr/local/nvidia)
fi

echo "== machine"
uname -a
nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total,pci.bus_id,mig.mode.current --format=csv 2>&1 || true
ls -l /dev/nvidia* 2>&1 | head -20
command -v nvidia-cdi-hook nvidia-ctk 2>/dev/null || echo "no nvidia-cdi-hook / nvidia-ctk on PATH"
ls /etc/cdi /var/run/cdi 2>/dev/null || echo "no CDI spec directories"

status=0
for root in "${roots[@]}"; do
  echo
  echo "== nvml_check --driver-root $root"
  out=$(mktemp)
  "$PY" scripts/nvml_check.py --seconds 3 --driver-root "$root" | tee "$out"
  rc=${PIPESTATUS[0]}
  echo "nvml_check exit status: $rc"
  [ "$rc" = 0 ] || status=1
  # Every host path the spec names must exist on this machine (device nodes and mounted driver files).
  "$PY" - "$out" "$root" <<'EOF' || status=1
import json, os, sys
text = open(sys.argv[1]).read()
start = text.find("\n{", text.find("--- CDI spec for GPU"))
if start < 0:
    print("no CDI spec printed"); sys.exit(1)
depth, end = 0, None
for i, ch in enumerate(text[start + 1:], start + 1):
    depth += ch == "{"
    depth -= ch == "}"
    if depth == 0:
        end = i + 1
        break
spec = json.loads(text[start + 1:end])
edits = [spec.get("containerEdits", {})] + [d.get("containerEdits", {}) for d in spec.get("devices", [])]
paths = [n.get("hostPath") or n["path"] for e in edits for n in e.get("deviceNodes", [])]
mounts = [m["hostPath"] for e in edits for m in e.get("mounts", [])]
hooks = [h["path"] for e in edits for h in e.get("hooks", [])]
missing = [p for p in paths + mounts + hooks if not os.path.exists(p)]
env = sorted({v for e in edits for v in e.get("env", [])})
print(f"spec for driver root {sys.argv[2]}: {len(paths)} device nodes, {len(mounts)} mounts, {len(hooks)} hooks, "
      f"env {env}; missing on host: {missing or 'none'}")
libs = sorted(os.path.basename(m) for m in mounts if ".so" in m)
print("libraries mounted:", ", ".join(libs) or "none")
sys.exit(1 if missing or not paths else 0)
EOF
  rm -f "$out"
done
echo
echo "gpu_machine_check: $([ $status = 0 ] && echo PASSED || echo FAILED)"
exit $status
