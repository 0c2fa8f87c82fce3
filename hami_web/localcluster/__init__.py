"""An in-process Kubernetes API server with real state, for tests, the demo and the simulator.

Only `LocalCluster` is public; the modules under it are: `store` (objects, resourceVersion, history),
`objects` (create/update rules), `patching` (merge, strategic and JSON patch), `selectors` (label and field
selectors), `resources` (the served types), `errors` (``Status`` answers), `server` (REST routes, watches),
`cluster` (lifecycle and test helpers).
"""

from hami_web.localcluster.cluster import LocalCluster

__all__ = ["LocalCluster"]
