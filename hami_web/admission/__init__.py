"""The mutating admission webhook (docs/webhook-and-extender.md#the-admission-webhook-post-webhook): decide, for a pod
CREATE, whether hami-web schedules it.

Two layers, so the rules can be tested without HTTP: `review_pod` is the pure decision over one pod
(allowed or denied, plus the RFC 6902 operations), `review_admission` wraps it in the AdmissionReview
wire format and turns malformed requests into clear answers. The Flask route only decodes, calls
`review_admission`, logs and encodes.
"""

from hami_web.admission.admission_review import AdmissionAnswer, reject_unreadable_body, review_admission
from hami_web.admission.pod_review import AdmissionDecision, review_pod

__all__ = [
    "AdmissionAnswer",
    "AdmissionDecision",
    "reject_unreadable_body",
    "review_admission",
    "review_pod",
]
