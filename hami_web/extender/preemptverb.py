"""``/preempt``: the extender's ``preemptVerb`` (``ProcessPreemption``), so kube-scheduler's own preemption stays
correct for pods that ask for devices (docs/preemption.md).

When kube-scheduler's preemption finds victims for what it sees itself (CPU, memory, pods), it asks the extender about
each candidate node before deleting anyone. Its victims alone may not free the devices the pod needs there: for each
node the devices are fitted with those victims gone (`core.preemption.extend_victims`); a node where they fit keeps its
victims, one where more device holders of lower priority must go gets them added (chosen as ``SelectVictimsOnNode``
chooses, their PDB violations added), and one where no choice frees the devices is dropped. kube-scheduler then picks
among the nodes answered and deletes their victims; it never calls this for a pod with ``preemptionPolicy: Never``.
"""

from __future__ import annotations

import logging

from hami_web.core.options import OptionsError
from hami_web.core.policy import SchedulingPolicy
from hami_web.core.preemption import Preemptor, preemption_terms
from hami_web.core.requests import RequestError
from hami_web.extender.outcomes import PreemptAnswer, PreemptOutcome, PreemptRefused, PreemptRequest, UnreadableArgs
from hami_web.state.faces import Preemption

log = logging.getLogger(__name__)


class PreemptVerb:
    """Answers kube-scheduler's preempt calls from the cache (see the module)."""

    def __init__(self, *, policy: SchedulingPolicy, cache: Preemption) -> None:
        self._policy = policy
        self._cache = cache

    def process(self, request: PreemptRequest | UnreadableArgs) -> PreemptOutcome:
        """kube-scheduler's candidates, each kept, given device victims too, or dropped."""
        if isinstance(request, UnreadableArgs):
            log.warning("preempt: %s", request.error)
            return PreemptRefused(request.error, request)
        ref = request.ref
        try:
            pod_request = self._policy.request_of(request.pod)
            options = self._policy.options_of(request.pod["metadata"].get("annotations") or {})
        except (RequestError, OptionsError) as error:
            return PreemptRefused(f"pod {ref.key}: {error}", request)
        if not pod_request.asks_for_gpu:
            return PreemptAnswer(request, dict(request.proposals), {})
        priority, _ = preemption_terms(request.pod)
        preemptor = Preemptor(uid=ref.uid, namespace=ref.namespace, name=ref.name, priority=priority,
                              request=pod_request, options=options)
        kept: dict[str, tuple[tuple[str, ...], int]] = {}
        dropped: dict[str, str] = {}
        for node, (uids, violations) in request.proposals.items():
            result = self._cache.extend_victims(preemptor, node, uids)
            if isinstance(result, str):
                dropped[node] = result
                continue
            added = tuple(victim.uid for victim in result.victims if victim.uid not in uids)
            kept[node] = ((*uids, *added), violations + result.pdb_violations)
        log.info("preempt pod=%s kept=%s dropped=%s", ref.key, ",".join(sorted(kept)) or "-",
                 "; ".join(f"{node}: {why}" for node, why in sorted(dropped.items())) or "-",
                 extra={"pod": ref.key})
        return PreemptAnswer(request, kept, dropped)
