"""The admission rules for one pod (docs/scheduling-rules.md#admission-in-order, steps 2–10), as a pure function.

The pod is never edited in place: the rules mutate a deep copy and the answer is
``jsonpatch.make_patch(original, mutated)``, so the patch holds only operations that really change
something, and running the rules on the patched pod yields no patch (every mutation first checks
whether its result is already there).

Privileged containers are never mutated. A privileged container sees every GPU of the node whatever
its limits say, so sharing limits on it would be a lie; with ``--privileged-policy=deny`` a GPU pod
holding one is refused, with ``skip`` (HAMi v2.4) the container is left out as if it asked for
nothing, and the rest of the pod is reviewed normally. Either way its environment is not touched:
device plugins and GPU exporters run privileged and rely on ``NVIDIA_VISIBLE_DEVICES``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import jsonpatch

from hami_web.admission.pod_shape import PodShapeError, check_pod_shape, iter_containers
from hami_web.core import names
from hami_web.core.families import AdmissionAsk, AdmissionRewrite, Family, ResourceNames
from hami_web.core.limits import MAX_GPUS_PER_CONTAINER, MAX_QUANTITY, quote
from hami_web.core.options import GO_FALSE, GO_TRUE, OptionsError, parse_scoring_weights, policy_warnings
from hami_web.core.policy import AdmissionPolicy
from hami_web.core.quantities import QuantityError, parse_whole_quantity
from hami_web.core.quota import EXCEEDING, QuotaBook
from hami_web.core.requests import (
    FULL_CARD_PERCENT,
    MAX_CORES,
    RequestDefaults,
    RequestError,
    pod_request,
    quantity_maximum,
)

DEFAULT_SCHEDULER = "default-scheduler"

# Status codes carried in a denied AdmissionReview: 400 = the pod is malformed (the user must fix a
# value), 403 = the pod is well-formed but our policy refuses it.
MALFORMED = 400
FORBIDDEN = 403

MESSAGE_NO_CONTAINERS = "pod has no containers"
MESSAGE_OTHER_SCHEDULER = "pod already has different scheduler assigned"
MESSAGE_NODE_ASSIGNED = "pod has node assigned"


@dataclass(frozen=True, slots=True)
class AdmissionDecision:
    """What the webhook answers for one pod.

    ``patch`` is an RFC 6902 operation list (empty when nothing changes, always empty when denied);
    ``code`` is 200 when allowed, else 400 (malformed pod) or 403 (refused by policy); ``warnings`` say what the
    rules changed or ignored where we are stricter than HAMi v2.10 but admit the pod as it does (kubectl prints them).
    """

    allowed: bool
    message: str
    patch: list[dict[str, Any]] = field(default_factory=list)
    code: int = 200
    warnings: tuple[str, ...] = ()


def review_pod(pod: object, policy: AdmissionPolicy, *, quotas: QuotaBook | None = None,
               namespace: str = "") -> AdmissionDecision:
    """Apply steps 2–10 of docs/scheduling-rules.md#admission-in-order to a pod object from a CREATE request.

    Never raises for bad input: a value that is not pod-shaped, or a resource value that is not a
    valid whole quantity, is a denial whose message names what is wrong. With ``quotas``, a pod that would take
    its namespace (``namespace``, else the pod's own) past a device quota is denied (docs/quotas.md#namespace-quotas).
    """
    try:
        check_pod_shape(pod)
    except PodShapeError as error:
        return _deny(MALFORMED, f"object is not a valid pod: {error}")
    pod = cast(dict[str, Any], pod)  # check_pod_shape has made sure of it
    spec = pod["spec"]
    if not spec.get("containers"):
        return _deny(MALFORMED, MESSAGE_NO_CONTAINERS)
    # As HAMi's webhook.Handle: another scheduler's pod is left alone, and so is default-scheduler's when
    # --force-overwrite-default-scheduler=false; a pod naming none is ours (the API has defaulted it before a
    # webhook sees it, so only a hand-made review has none).
    ours = (DEFAULT_SCHEDULER, policy.scheduler_name) if policy.force_overwrite_default_scheduler else (
        policy.scheduler_name,)
    if spec.get("schedulerName") and spec["schedulerName"] not in ours:
        return AdmissionDecision(allowed=True, message=MESSAGE_OTHER_SCHEDULER)

    mutated = _copy_json(pod)
    warnings: list[str] = []
    gpu_containers: list[str] = []
    privileged_containers: list[str] = []
    families_used: dict[str, Family] = {}
    try:
        _mutate_containers(mutated, policy, gpu_containers, privileged_containers, families_used, warnings)
    except (QuantityError, FamilyRefusal) as error:
        return _deny(MALFORMED, str(error))

    if (refusal := _pod_rules(mutated, families_used)):
        return _deny(MALFORMED, refusal)
    if not gpu_containers:
        message = "pod asks for no GPU"
        if privileged_containers and policy.privileged_policy == "skip":
            message += f" (privileged containers left alone: {', '.join(privileged_containers)})"
        return _allow(pod, mutated, message, warnings)
    if privileged_containers and policy.privileged_policy == "deny":
        return _deny(FORBIDDEN, f"container {privileged_containers[0]} is privileged")
    if spec.get("nodeName"):
        return _deny(FORBIDDEN, MESSAGE_NODE_ASSIGNED)
    # check_pod_shape has made sure metadata.annotations, when present, is a map of strings.
    weights = ((pod.get("metadata") or {}).get("annotations") or {}).get(names.POD_SCORING_WEIGHTS)
    if weights is not None:
        # HAMi v2.10's webhook lets it through and its filter then fails the pod on every cycle: it can never run, so
        # it is refused at creation instead of left Pending (the filter checks it too, for pods that skip us).
        try:
            parse_scoring_weights(weights)
        except OptionsError as error:
            return _deny(MALFORMED, str(error))
    if quotas is not None:
        quota_refusal = _quota_refusal(
            mutated, namespace or str((pod.get("metadata") or {}).get("namespace") or ""), policy, quotas, warnings)
        if quota_refusal is not None:
            return quota_refusal
    mutated["spec"]["schedulerName"] = policy.scheduler_name
    runtime_classes = [family.admission.runtime_class_name for family in families_used.values()
                       if family.admission.runtime_class_name]
    if runtime_classes and not mutated["spec"].get("runtimeClassName"):
        mutated["spec"]["runtimeClassName"] = runtime_classes[0]
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    warnings.extend(_annotation_warnings(annotations, families_used.values()))
    return _allow(pod, mutated, f"scheduled by {policy.scheduler_name}: GPU containers "
                                f"{', '.join(gpu_containers)}", warnings)


def _mutate_containers(mutated: dict[str, Any], policy: AdmissionPolicy, gpu_containers: list[str],
                       privileged_containers: list[str], families_used: dict[str, Family], warnings: list[str]) -> None:
    """Mutate every container of ``mutated`` in place, noting which ask for devices (and of which families) and
    which are privileged, and adding to ``warnings``. Raises `QuantityError` or `FamilyRefusal` as `_mutate_container`
    does."""
    metadata = mutated.setdefault("metadata", {})
    given = metadata.get("annotations")
    annotations = given if isinstance(given, dict) else {}
    for slot, container in iter_containers(mutated):
        target = container
        if _is_privileged(container):
            privileged_containers.append(slot.name)
            if policy.privileged_policy == "skip":
                continue
            # Still read (and validate) what it asks for, so a GPU pod is refused below, but mutate
            # a throw-away copy: a privileged container is never changed.
            target = _copy_json(container)
        used = _mutate_container(target, slot.name, policy, annotations, warnings)
        if used:
            gpu_containers.append(slot.name)
            families_used.update((family.cw, family) for family in used)
    if annotations and given is None:  # a family's rules annotated a pod that had no annotations
        metadata["annotations"] = annotations


def _pod_rules(mutated: dict[str, Any], families: Mapping[str, Family]) -> str:
    """Each used family's `AdmissionRules.pod_rule` on the mutated pod: its annotations added, or the first refusal
    (HAMi's words), "" when none refuses."""
    for family in families.values():
        rule = family.admission.pod_rule
        if rule is None:
            continue
        metadata = mutated.setdefault("metadata", {})
        annotations = metadata.get("annotations") if isinstance(metadata.get("annotations"), dict) else {}
        counts = [_count_in_limits(container, family) for _, container in iter_containers(mutated)]
        added, refusal = rule(annotations, [count for count in counts if count is not None])
        if refusal:
            return refusal
        if added:
            metadata["annotations"] = {**annotations, **added}
    return ""


def _count_in_limits(container: dict[str, Any], family: Family) -> int | None:
    """The family's count in the container's limits (None when absent), as the webhook validated it."""
    limits = (container.get("resources") or {}).get("limits") or {}
    raw = limits.get(family.resources.count) if isinstance(limits, dict) else None
    return None if raw is None else parse_whole_quantity(raw, container=str(container.get("name") or ""),
                                                         resource=family.resources.count, maximum=MAX_QUANTITY)


class FamilyRefusal(ValueError):
    """A family's admission rules refuse the container (Ascend's template and pairing rules), in HAMi's words."""


def _quota_refusal(mutated: dict[str, Any], namespace: str, policy: AdmissionPolicy,
                   quotas: QuotaBook, warnings: list[str]) -> AdmissionDecision | None:
    """The denial when the pod's spec asks more than its namespace's device quotas leave, else None (as HAMi v2.10's
    webhook: on the mutated spec, so defaults count as the filter will count them); adds to ``warnings`` where the
    filter counts what the spec cannot say (`NamespaceQuota.booked_cores_notes`)."""
    if not namespace:
        return None
    quota = quotas.namespace_quota(namespace)
    if not quota.limits:
        return None
    try:
        request = pod_request(mutated, RequestDefaults.of(policy.devices))
    except RequestError as error:
        return _deny(MALFORMED, str(error))
    excess = quota.admission_excess(request, policy.devices)
    if excess is None:
        warnings.extend(quota.booked_cores_notes(request, policy.devices))
        return None
    return _deny(FORBIDDEN, f"{EXCEEDING}: {excess.describe()}")


def _annotation_warnings(annotations: dict[str, str], families: Iterable[Family]) -> list[str]:
    """Warnings for pod annotations HAMi v2.10 reads otherwise than meant, without a word: a NUMA binding Go's
    ``ParseBool`` does not read (``assertNuma``), an unknown GPU or node policy (`policy_warnings`)."""
    warnings = policy_warnings(annotations)
    for family in families:
        value = annotations.get(family.numa_bind_key) if family.numa_bind_key else None
        if value is not None and value not in GO_TRUE and value not in GO_FALSE:
            warnings.append(f"{family.numa_bind_key} {quote(value)} is not a boolean (true, 1, t, false, 0, f, …): "
                            f"no NUMA binding, as HAMi v2.10 reads it")
    return warnings


def _mutate_container(container: dict[str, Any], name: str, policy: AdmissionPolicy,
                      annotations: dict[str, str], warnings: list[str]) -> list[Family]:
    """Validate one container's device resources of every family and apply each family's rewrites
    (docs/webhook-and-extender.md#the-admission-webhook-post-webhook for NVIDIA, docs/device-families.md#device-families
    for the others).

    Returns the families the container asks devices of after defaulting. Raises `QuantityError` naming the
    container and resource for a value that is not a whole number or is out of range, `FamilyRefusal` when a family's
    rules refuse it.
    """
    used: list[Family] = []
    unused: list[Family] = []
    for family in policy.devices:
        for variable, value in family.admission.every_container_env:
            _set_env(container, variable, value)
        if family.admission.notice and family.admission.notice not in warnings:
            warnings.append(family.admission.notice)
        if _mutate_for_family(container, name, family, annotations, warnings):
            used.append(family)
        else:
            unused.append(family)
    # A container that uses one Ascend chip must keep ASCEND_VISIBLE_DEVICES for it (HAMi blanks it per other chip).
    used_envs = {family.admission.visible_devices_env for family in used}
    for family in unused:
        rules = family.admission
        if rules.overwrite_env and rules.visible_devices_env and rules.visible_devices_env not in used_envs:
            _set_env(container, rules.visible_devices_env, rules.visible_devices_off)
    return used


def _mutate_for_family(container: dict[str, Any], name: str, family: Family, annotations: dict[str, str],
                       warnings: list[str]) -> bool:
    """One family's rules for one container; whether the container uses the family."""
    names = family.resources
    rules = family.admission
    asked = _read_quantities(container, name, family)
    if rules.any_resource_routes:
        return _route_any_resource(container, name, names, asked, warnings)
    limits = ((container.get("resources") or {}).get("limits") or {})
    count = asked.get(names.count) if rules.count_in_requests or names.count in limits else None
    if count is None and rules.default_count and any(
            asked.get(r) is not None for r in names.managed() if r != names.count):
        count = rules.default_count
        _limits(container)[names.count] = str(count)
    # A count given, even 0, makes the container the family's (HAMi v2.10's MutateAdmission of every family): the pod
    # is routed to us with the family's additions, and /filter and /bind pass it through. HAMi's AMD routes memory or
    # cores in limits too, adding no count.
    given = asked if rules.count_in_requests else limits
    uses = count is not None or (rules.route_without_count
                                 and any(r in given for r in names.managed() if r != names.count))
    if rules.positive_count and count is not None and count <= 0:
        raise FamilyRefusal(f"container {name}: {names.count} must be greater than 0")
    if rules.priority_env and names.priority and names.priority in limits:
        # HAMi reads the priority from limits only; _read_quantities took the limits value first.
        _set_env(container, rules.priority_env, str(asked[names.priority]))
    if not uses:
        return False
    if family.core_booking is not None:
        # A family that books cores its own way (AMD's percentage of compute units, AWS Neuron's cores) refuses the
        # asks its device plugin cannot take, in HAMi's words, and clamps nothing.
        try:
            family.core_booking.ask(count or 0, asked.get(names.cores) if names.cores else None, names)
        except ValueError as error:
            raise FamilyRefusal(f"container {name}: {error}") from None
    elif names.cores and (asked.get(names.cores) or 0) > MAX_CORES \
            and not (rules.cores_per_count and (count or 0) > 1):
        # HAMi v2.10 clamps the cores to 100 in every family's Fit ("core limit can't exceed 100"); we write the
        # clamp into the spec so the pod says what it is given, and tell the owner.
        _set_quantity(container, names.cores, MAX_CORES)
        warnings.append(f"container {name}: {names.cores} {asked[names.cores]} is over 100 (100 = one whole device): "
                        f"set to 100, as HAMi v2.10's filter clamps it")
        asked[names.cores] = MAX_CORES
    if rules.resize is not None and count is not None:
        _resize(container, name, family, rules.resize, count, asked, annotations)
    if rules.whole_card_cores and names.cores and names.cores not in asked and _asks_whole_card(asked, names):
        # A task that wants all of a card's memory gets all of its compute too (newer HAMi does the
        # same): the booking then shows the card as fully taken, and the extender's exclusive-card
        # check keeps it off cards that already run a task.
        _limits(container)[names.cores] = str(MAX_CORES)
    if rules.cores_per_count and names.cores and count is not None and count > 1:
        # Iluvatar (HAMi's MutateAdmission): several devices in one container means whole cards.
        _limits(container)[names.cores] = str(MAX_CORES * count)
    if rules.container_name_env and name and not any(
            isinstance(variable, dict) and variable.get("name") == rules.container_name_env
            for variable in container.get("env") or []):
        container.setdefault("env", []).append({"name": rules.container_name_env, "value": name})
    return True


def _route_any_resource(container: dict[str, Any], name: str, names: ResourceNames, asked: dict[str, int],
                        warnings: list[str]) -> bool:
    """`AdmissionRules.any_resource_routes` (HAMi v2.10's Enflame DRS ``MutateAdmission``): the count, else the memory
    or the cores, make the container the family's; each given is written to limits and requests where one lacks it.
    `FamilyRefusal` in HAMi's words for a count or memory of 0 or less, or cores outside (0, 100]; a count of more
    slices than any device is carved into is admitted, as HAMi admits it, with a warning that it cannot place."""
    given = [resource for resource in (names.count, names.memory, names.cores) if resource and resource in asked]
    if not given:
        return False
    if names.count in asked:
        if asked[names.count] <= 0:
            raise FamilyRefusal(f"container {name}: {names.count} must be greater than 0")
        if asked[names.count] > MAX_GPUS_PER_CONTAINER:
            warnings.append(f"container {name}: {names.count} {asked[names.count]} asks a partition of that many "
                            f"slices, far more than a device is carved into (its profiles hold a handful), so no "
                            f"node's profile fits it and the filter answers ModeNotFit; admitted, as HAMi v2.10 "
                            f"admits it")
        given = [names.count]
    elif names.memory in asked and asked[names.memory] <= 0:
        raise FamilyRefusal(f"container {name}: {names.memory} must be greater than 0")
    elif names.cores in asked and not 0 < asked[names.cores] <= MAX_CORES:
        raise FamilyRefusal(f"container {name}: {names.cores} must be in range (0,100]")
    limits = _limits(container)
    requests = container["resources"].get("requests")
    if not isinstance(requests, dict):
        requests = container["resources"]["requests"] = {}
    for resource in given:
        value = limits.get(resource, requests.get(resource))
        limits.setdefault(resource, value)
        requests.setdefault(resource, value)
    return True


def _resize(container: dict[str, Any], name: str, family: Family,
            resize: Callable[[Family, AdmissionAsk], AdmissionRewrite], count: int, asked: dict[str, int],
            annotations: dict[str, str]) -> None:
    """Apply the family's resize hook: the count it rounds to in limits (and requests when there), its memory in
    both; `FamilyRefusal` with the hook's words, naming the container."""
    names = family.resources
    limits = _limits(container)
    memory = asked.get(names.memory) if names.memory and names.memory in limits else None  # limits only, as HAMi
    soft_split = family.soft_split is not None and annotations.get(family.soft_split.key) == family.soft_split.mode
    outcome = resize(family, AdmissionAsk(count=count, memory=memory, cores=asked.get(names.cores) if names.cores
                                          else None, soft_split=soft_split))
    if outcome.refusal:
        raise FamilyRefusal(f"container {name}: {outcome.refusal}")
    requests = container["resources"].get("requests")
    if outcome.count != count:
        limits[names.count] = str(outcome.count)
        if isinstance(requests, dict) and names.count in requests:
            requests[names.count] = str(outcome.count)
    for resource, value in ((names.memory, outcome.memory), (names.cores, outcome.cores)):
        if value is not None and resource:
            limits[resource] = str(value)
            if not isinstance(requests, dict):
                requests = container["resources"]["requests"] = {}
            requests[resource] = str(value)
    annotations.update(outcome.pod_annotations)


def _read_quantities(container: dict[str, Any], name: str, family: Family) -> dict[str, int]:
    """Each of the family's resources, from limits else requests; every present value is validated.

    Values in both limits and requests are checked, so a bad value cannot hide behind a good one.
    """
    names = family.resources
    resources = container.get("resources") or {}
    sections = [resources.get("limits") or {}, resources.get("requests") or {}]
    values: dict[str, int] = {}
    for resource in names.all():
        for section in sections:
            if resource not in section:
                continue
            raw = section[resource]
            value = family.read_memory(raw, name, resource) if resource == names.memory and family.read_memory \
                else parse_whole_quantity(raw, container=name, resource=resource,
                                          maximum=quantity_maximum(family, resource))
            if resource == names.memory_percentage and value > FULL_CARD_PERCENT:
                raise QuantityError(f"container {name}: {resource}: {quote(raw)} is outside 0..100")
            values.setdefault(resource, value)
    return values


def _asks_whole_card(asked: dict[str, int], names: ResourceNames) -> bool:
    """Whether the memory ask is the whole card, decided by which keys are there (HAMi v2.10's
    ``defaultExclusiveCoreIfNeeded``): a percentage, when given, must be 100; else no memory may be given. A
    ``gpumem: 0`` or ``gpumem-percentage: 0`` is given, so it asks no exclusive card."""
    if names.memory_percentage and names.memory_percentage in asked:
        return asked[names.memory_percentage] == FULL_CARD_PERCENT
    return not names.memory or names.memory not in asked


def _is_privileged(container: dict[str, Any]) -> bool:
    return (container.get("securityContext") or {}).get("privileged") is True


def _set_quantity(container: dict[str, Any], resource: str, value: int) -> None:
    """Write ``value`` for ``resource`` in the container's limits and, where it is there, its requests."""
    _limits(container)[resource] = str(value)
    requests = container["resources"].get("requests")
    if isinstance(requests, dict) and resource in requests:
        requests[resource] = str(value)


def _limits(container: dict[str, Any]) -> dict[str, Any]:
    """The container's ``resources.limits``, created when absent or null."""
    if not isinstance(container.get("resources"), dict):
        container["resources"] = {}
    resources: dict[str, Any] = container["resources"]
    if not isinstance(resources.get("limits"), dict):
        resources["limits"] = {}
    limits: dict[str, Any] = resources["limits"]
    return limits


def _set_env(container: dict[str, Any], name: str, value: str) -> None:
    """Make ``name=value`` the container's setting for ``name``, without adding a second entry.

    Every existing entry of that name (Kubernetes allows duplicates; the last wins) becomes the plain
    value, dropping any ``valueFrom``; when there is none, one entry is appended.
    """
    wanted = {"name": name, "value": value}
    env = container.get("env")
    if env is None:
        env = container["env"] = []
    found = False
    for index, variable in enumerate(env):
        if variable.get("name") == name:
            found = True
            if variable != wanted:
                env[index] = dict(wanted)
    if not found:
        env.append(wanted)


def _allow(original: dict[str, Any], mutated: dict[str, Any], message: str,
           warnings: Iterable[str] = ()) -> AdmissionDecision:
    operations = jsonpatch.make_patch(*_differing_parts(original, mutated)).patch
    return AdmissionDecision(allowed=True, message=message, patch=operations, warnings=tuple(warnings))


def _differing_parts(original: dict[str, Any], mutated: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Both documents without the members the mutation left as they were, at every level of maps: the patch
    ``jsonpatch.make_patch`` makes of them is the one it makes of the whole pod, for a fraction of its time.

    ``make_patch`` walks every member in Python, most of a pod unchanged (half the webhook's time on a pod with one
    change); a member is left out only when both sides serialise alike, ``make_patch``'s own test of a change, and the
    members left keep their order, so the operations and their order are the same. Lists are kept whole: their
    operations are by index.
    """
    kept_original: dict[str, Any] = {}
    kept_mutated: dict[str, Any] = {}
    for key, before in original.items():
        if key not in mutated:
            kept_original[key] = before
            continue
        after = mutated[key]
        if after is before:
            continue  # one object (a value `_copy_json` shares, or one the mutation did not touch): no change
        if isinstance(before, dict) and isinstance(after, dict):
            kept_original[key], kept_mutated[key] = _differing_parts(before, after)
        elif json.dumps(before) != json.dumps(after):
            kept_original[key], kept_mutated[key] = before, after
    for key, after in mutated.items():
        if key not in original:
            kept_mutated[key] = after
    return kept_original, kept_mutated


def _copy_json(value: Any) -> Any:
    """A copy of a JSON document whose maps and lists can be changed without changing ``value``.

    `copy.deepcopy` keeps a memo of every object and dispatches per type; a decoded document has no shared parts and
    only maps, lists and immutable scalars, so a plain walk does the same for a fraction of the webhook's time
    (``benchmarks/front_cpu.py``: deepcopy was a quarter of review_pod's).
    """
    if isinstance(value, dict):
        return {key: _copy_json(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_copy_json(item) for item in value]
    return value


def _deny(code: int, message: str) -> AdmissionDecision:
    return AdmissionDecision(allowed=False, message=message, code=code)
