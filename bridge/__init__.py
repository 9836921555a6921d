"""dra-bridge: serve GPUs through the device-plugin API and DRA from one inventory, and migrate workloads
namespace by namespace. See README.md and docs/architecture.md."""

__version__ = "0.1.0"
