"""The taint eviction controller stand-in (kube-controller-manager's taint-eviction-controller): pods bound to a Node
tainted NoExecute that they do not tolerate, or tolerate for a while only, are deleted. See controller.py."""

from .controller import TaintEvictionController

__all__ = ["TaintEvictionController"]
