"""The DRA half of the node daemon: registration, NodePrepare/Unprepare, health stream, ResourceSlices.

Modules, by role:
* `registration` - the pluginregistration server the kubelet's plugin watcher calls (GetInfo, Notify...).
* `claims` - PURE: a ResourceClaim object -> the devices this node prepares for it (checks, request names).
* `prepare` - the prepare/unprepare core over plain dataclasses: ledger guard, exclusivity, two-phase checkpoint,
  CDI spec files, idempotence, the start-up sweep. No protobuf, testable without gRPC.
* `servicer` - thin gRPC adapters: v1 and v1beta1 `DRAPlugin` both call the one `prepare` core.
* `health` - the per-device health board and the `DRAResourceHealth` (v1alpha1 + v1) stream.
* `plugin` - the facade the daemon starts/stops: registration socket + DRA socket, rolling-update names.
* `crashpoints` - a test hook that SIGKILLs the process at a named step (no-op unless BRIDGE_CRASH_AT is set).
* `slices*` - ResourceSlice computation and publishing (owned separately).
"""
