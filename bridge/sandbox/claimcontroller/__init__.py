"""A stand-in for kube-controller-manager's resource claim controller, for the sandbox: creates ResourceClaims from
ResourceClaimTemplates for pods, drops reservations of pods that are gone, deallocates claims nobody reserves and
deletes generated claims with their pod.

    from bridge.sandbox.claimcontroller import ClaimController
    ctl = ClaimController(api, profile=profile_for("1.37")).start()   # api: a bridge.kube.KubeAPI
    ...
    ctl.stop()

Layout: `logic` (pure decisions), `workqueue` (client-go's work queue), `controller` (the I/O shell). A stand-in:
production code never imports it (import-linter contract "sandbox-not-in-production").
"""

from .controller import ClaimController

__all__ = ["ClaimController"]
