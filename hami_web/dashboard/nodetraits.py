"""What kube-scheduler's node rules read on each node (cordon, taints, labels, readiness), for the dashboard.

The what-if and pending pages must leave out the nodes kube-scheduler would never offer (a cordoned node, a
taint the pod does not tolerate, a label its selector does not match), or they promise room that does not
exist. The scheduling cache does not keep these facts — the extender never needs them, kube-scheduler has
applied its rules before calling it — so the dashboard reads them itself: one list of the nodes, then a
watch, each node reduced at once to its `NodeTraits` (no whole object is kept). The loop only starts when a
page first asks, so a dashboard nobody opens costs no API traffic; that first page waits for the first list
for at most `FIRST_LIST_WAIT_SECONDS`, and says so if the list is not there yet.

The pod side of the rules' resource check (cpu, memory and pod count of the bound pods) would need every pod
of the cluster; the dashboard leaves it out, ``kubectl hami capacity`` applies it.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Mapping

from hami_web.core.noderules import NodeTraits, RuleInputError, read_node_traits
from hami_web.kube import Kube, KubeError
from hami_web.state.nodes import node_name

log = logging.getLogger(__name__)

FIRST_LIST_WAIT_SECONDS = 3.0
WATCH_SECONDS = 300
RETRY_SECONDS = (1.0, 2.0, 5.0, 10.0, 30.0)


class NodeTraitsWatch:
    """The traits of every node the server schedules onto (``--node-label-selector``), kept current."""

    def __init__(self, kube: Kube, *, label_selector: str = "", stopping: threading.Event | None = None) -> None:
        self._kube = kube
        self._selector = label_selector
        self._stopping = stopping or threading.Event()
        self._traits: dict[str, NodeTraits] = {}
        self._listed = threading.Event()
        self._started = False
        self._start_lock = threading.Lock()
        self.unreadable: dict[str, str] = {}
        self.error = ""

    def traits(self, *, wait_seconds: float = FIRST_LIST_WAIT_SECONDS) -> dict[str, NodeTraits] | None:
        """The current traits by node name, or None while the first list has not arrived."""
        self._start()
        if not self._listed.wait(wait_seconds):
            return None
        return dict(self._traits)  # one C-level copy: consistent, while the loop replaces entries

    def _start(self) -> None:
        if self._started:
            return
        with self._start_lock:
            if not self._started:
                threading.Thread(target=self._run, name="dashboard-node-traits", daemon=True).start()
                self._started = True

    def _run(self) -> None:
        failures = 0
        while not self._stopping.is_set():
            try:
                version = self._list()
                failures = 0
                while not self._stopping.is_set():
                    version = self._watch(version)
            except KubeError as error:
                self.error = str(error)
                log.warning("dashboard: cannot read node traits (cordon, taints, labels): %s", error)
                wait = RETRY_SECONDS[min(failures, len(RETRY_SECONDS) - 1)]
                failures += 1
                if self._stopping.wait(wait):
                    return

    def _list(self) -> str:
        traits: dict[str, NodeTraits] = {}
        version = ""
        for page in self._kube.list_nodes(label_selector=self._selector):
            for node in page.items:
                self._observe(node, traits)
            version = page.resource_version
        self._traits = traits
        self.error = ""
        self._listed.set()
        return version

    def _watch(self, version: str) -> str:
        """Apply events until the watch ends; a 410 or broken stream raises and the loop lists again."""
        events = self._kube.watch_nodes(resource_version=version, timeout_seconds=math.ceil(WATCH_SECONDS),
                                        label_selector=self._selector)
        for event in events:
            if event.type == "ERROR":
                raise KubeError(f"watch nodes: {event.object.get('message') or event.object}",
                                status=int(event.object.get("code") or 0))
            if event.type == "DELETED":
                self._traits.pop(node_name(event.object), None)
            elif event.type != "BOOKMARK":
                self._observe(event.object, self._traits)
            metadata = event.object.get("metadata") if isinstance(event.object, Mapping) else None
            if isinstance(metadata, Mapping) and metadata.get("resourceVersion"):
                version = str(metadata["resourceVersion"])
            if self._stopping.is_set():
                break
        return version

    def _observe(self, node: Mapping[str, object], into: dict[str, NodeTraits]) -> None:
        name = node_name(node)
        try:
            into[name] = read_node_traits(node)
            self.unreadable.pop(name, None)
        except RuleInputError as error:
            into.pop(name, None)
            self.unreadable[name] = str(error)
