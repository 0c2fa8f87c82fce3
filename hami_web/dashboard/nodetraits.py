"""What kube-scheduler's node rules read on each node (cordon, taints, labels, readiness), for the dashboard.

The what-if and pending pages must leave out the nodes kube-scheduler would never offer (a cordoned node, a
taint the pod does not tolerate, a label its selector does not match), or they promise room that does not
exist. The scheduling cache does not keep these facts — the extender never needs them, kube-scheduler has
applied its rules before calling it — so the dashboard keeps them itself, as a sink on the process's node
reflector (`state.reflector`): the nodes the cache lists and watches (``--node-label-selector``) reach it too,
each reduced at once to its `NodeTraits` (no whole object is kept), and no second list or watch of the nodes is
made. A page asked for before the first node list has arrived waits for it at most `FIRST_LIST_WAIT_SECONDS`,
and says so if it is not there yet.

The pod side of the rules' resource check (cpu, memory and pod count of the bound pods) would need every pod
of the cluster; the dashboard leaves it out, ``kubectl hami capacity`` applies it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from hami_web.core.noderules import NodeTraits, RuleInputError, read_node_traits
from hami_web.kube import JsonObject

FIRST_LIST_WAIT_SECONDS = 3.0


@dataclass(slots=True)
class _TraitsListing:
    sink: NodeTraitsSink
    traits: dict[str, NodeTraits] = field(default_factory=dict)
    unreadable: dict[str, str] = field(default_factory=dict)

    def add(self, key: str, obj: JsonObject) -> None:
        self.sink.read(key, obj, self.traits, self.unreadable)

    def done(self) -> None:
        self.sink.replace(self.traits, self.unreadable)


class NodeTraitsSink:
    """The traits of every node the server schedules onto, kept current by the node reflector.

    ``last_error`` (optional) says why the nodes could not be read, for a page shown before the first list.
    """

    def __init__(self, *, last_error: Callable[[], str] | None = None) -> None:
        self._traits: dict[str, NodeTraits] = {}
        self._listed = threading.Event()
        self._last_error = last_error
        self.unreadable: dict[str, str] = {}

    @property
    def error(self) -> str:
        """The node reflector's last error ("" when it is in step)."""
        return self._last_error() if self._last_error is not None else ""

    def traits(self, *, wait_seconds: float = FIRST_LIST_WAIT_SECONDS) -> dict[str, NodeTraits] | None:
        """The current traits by node name, or None while the first list has not arrived."""
        if not self._listed.wait(wait_seconds):
            return None
        return dict(self._traits)  # one C-level copy: consistent, while the reflector replaces entries

    # -- the sink (called on the node reflector's thread) -------------------------------------------------

    def listing(self) -> _TraitsListing:
        return _TraitsListing(self)

    def apply(self, kind: str, key: str, obj: JsonObject) -> None:
        if kind == "DELETED":
            self._traits.pop(key, None)
            self.unreadable.pop(key, None)
        else:
            self.read(key, obj, self._traits, self.unreadable)

    def current(self, at: float) -> None:
        pass

    def read(self, name: str, node: Mapping[str, object], into: dict[str, NodeTraits],
             unreadable: dict[str, str]) -> None:
        """Reduce one node to its traits in ``into``, or note why it cannot be read in ``unreadable``."""
        try:
            into[name] = read_node_traits(node)
            unreadable.pop(name, None)
        except RuleInputError as error:
            into.pop(name, None)
            unreadable[name] = str(error)

    def replace(self, traits: dict[str, NodeTraits], unreadable: dict[str, str]) -> None:
        """A full list's traits replace the previous ones."""
        self._traits, self.unreadable = traits, unreadable
        self._listed.set()
