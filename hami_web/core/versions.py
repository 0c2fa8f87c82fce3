"""Comparing two resourceVersions, where Kubernetes lets a client compare them.

A resourceVersion is opaque to clients, except that kube-apiserver backed by etcd hands out etcd's revisions: numbers
that grow with every write. Both the bind (has the cache caught up with the version our node lock was written at?)
and the cache (has the node stream shown our lock yet?) ask the same question; a version that is not a number answers
"no", which is the cautious answer for both.
"""

from __future__ import annotations


def not_older(version: str, than: str) -> bool:
    """Whether resourceVersion ``version`` is ``than`` or newer, when both are numbers (etcd revisions)."""
    return version.isdigit() and than.isdigit() and int(version) >= int(than)


def newer(version: str, than: str) -> bool:
    """Whether resourceVersion ``version`` is newer than ``than``, when both are numbers: an object seen newer than the
    version a write was preconditioned on shows that write (it was the next one) or something later."""
    return version.isdigit() and than.isdigit() and int(version) > int(than)
