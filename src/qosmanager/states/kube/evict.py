"""The Eviction API (``--evict-mode api``): the coordinator's ``api`` callable.

One ``POST /api/v1/namespaces/<ns>/pods/<name>/eviction`` with a ``policy/v1`` ``Eviction`` whose
delete options carry the pod's uid as a precondition (a new pod that took the name is never hit).
The answer becomes an :class:`~qosmanager.eviction.coordinator.ApiOutcome`:

* 201 (or 200): evicted; the pod counts as pending release until it leaves the pod list;
* 404 naming the pod: it is already gone (ok, ``gone``); so is 409 on the uid precondition (the
  name now belongs to another pod);
* the Eviction API not there: a 404 that names no pod (``pods/eviction`` not served), or the 400 an
  API server older than Kubernetes 1.22 answers to a ``policy/v1`` Eviction ("no kind "Eviction" is
  registered for version "policy/v1"").  Said once: an error in the log and the degraded condition
  ``kube/eviction-api``; until the API is asked again (``unserved_recheck`` later, by the next
  eviction) every eviction fails at once with that sentence and no request, so the log does not
  fill up with one failure per victim.  A later 201 clears the condition;
* 429: a PodDisruptionBudget (or the API server's rate limit) said no.  Not evicted: the
  coordinator audits the refusal, does not count the pod as released (another victim may go
  instead), and skips it until ``retry_after``: the server's ``Retry-After`` when given, otherwise
  an exponential backoff per pod (``backoff_base`` doubling up to ``backoff_max``);
* anything else (5xx, no answer): a failure with the API's message, retried at the next round.

Before any eviction, :class:`~qosmanager.states.kube.evictcheck.EvictionAPICheck` asks discovery and
a SelfSubjectAccessReview whether evictions can work and reports to :meth:`KubeEvictor.checked`:
a problem it finds raises the same condition at start (an eviction is still tried: a failed one stays
the ground truth, and a 201 clears the condition whoever raised it); a later check that finds the
problem gone clears it (and lifts a failed eviction's hold: the cluster changed since).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from qosmanager.api.pod import PodMeta
from qosmanager.eviction.coordinator import ApiOutcome
from qosmanager.framework.conditions import Conditions
from qosmanager.states.kube.client import KubeClient, KubeError

log = logging.getLogger(__name__)

MAX_TRACKED = 10_000  # pods with a refusal history kept for their backoff
CHANNEL = "evictions"  # its own connection: never behind an event post
COND_API = "kube/eviction-api"
MIN_KUBERNETES = "1.22"  # the first to accept policy/v1 Evictions


@dataclass(slots=True)
class _Refusals:
    count: int
    last: float


class KubeEvictor:
    """``KubeEvictor(client)(pod, reason) -> ApiOutcome`` (see the module docstring)."""

    def __init__(self, client: KubeClient, *, clock: Callable[[], float] = time.time,
                 backoff_base: float = 5.0, backoff_max: float = 300.0, timeout: float = 5.0,
                 conditions: Conditions | None = None, unserved_recheck: float = 60.0) -> None:
        self.client = client
        self.conditions = conditions if conditions is not None else Conditions(clock)
        self.unserved_recheck = unserved_recheck
        self._unserved = ""  # why the Eviction API is not there ("" while it is)
        self._unserved_until = 0.0  # no request before this time
        self._preflight = ""  # what the last check said cannot work ("" when nothing)
        self._lock = threading.Lock()  # the check reports from its own thread
        self.timeout = timeout  # the agent's loop waits for the answer: keep it short
        self.clock = clock
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self._refusals: dict[str, _Refusals] = {}
        self.stats = {"evicted": 0, "gone": 0, "refused": 0, "failed": 0}

    @staticmethod
    def body(pod: PodMeta) -> dict[str, object]:
        return {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod.name, "namespace": pod.namespace},
            # no gracePeriodSeconds: the pod's own terminationGracePeriodSeconds applies (koordlet's nil)
            "deleteOptions": {"preconditions": {"uid": pod.uid}},
        }

    def __call__(self, pod: PodMeta, reason: str) -> ApiOutcome:
        path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/eviction"
        if self._unserved and self.clock() < self._unserved_until:
            self.stats["failed"] += 1
            return ApiOutcome(ok=False, error=self._unserved)
        try:
            self.client.post(path, self.body(pod), channel=CHANNEL, timeout=self.timeout)
        except KubeError as e:
            return self._refused(pod, e)
        if self._unserved or self._preflight:
            with self._lock:
                self._unserved = self._preflight = ""
                self.conditions.clear(COND_API)
            log.warning("the Eviction API accepts policy/v1 Evictions again")
        self._refusals.pop(pod.uid, None)
        self.stats["evicted"] += 1
        log.info("evicted %s through the Eviction API (%s)", pod.key, reason)
        return ApiOutcome(ok=True)

    def _refused(self, pod: PodMeta, e: KubeError) -> ApiOutcome:
        if _unserved(pod, e):
            return self._not_served(e)
        if e.status == 404 or (e.status == 409 and "precondition" in e.message.lower()):
            self._refusals.pop(pod.uid, None)
            self.stats["gone"] += 1
            return ApiOutcome(ok=True, gone=True)
        if e.status == 429:
            self.stats["refused"] += 1
            delay = max(self._backoff(pod.uid), e.retry_after)
            return ApiOutcome(ok=False, retry_after=delay,
                              error=f"refused by the Eviction API (429 {e.reason or 'TooManyRequests'}): "
                                    f"{e.message}{_causes(e)}; retry in {delay:g}s")
        self.stats["failed"] += 1
        what = f"{e.status} {e.reason}".strip() if e.status else "no answer"
        return ApiOutcome(ok=False, error=f"Eviction API failed ({what}): {e.message}")

    def _not_served(self, e: KubeError) -> ApiOutcome:
        self.stats["failed"] += 1
        what = f"{e.status} {e.reason}".strip()
        message = (f"the API server does not take policy/v1 Evictions ({what}: {e.message}); "
                   f"--evict-mode api needs Kubernetes >= {MIN_KUBERNETES}: nothing is evicted until it "
                   f"does (asked again every {self.unserved_recheck:g}s); on an older cluster use "
                   "--evict-mode kill")
        with self._lock:
            self._unserved_until = self.clock() + self.unserved_recheck
            if message != self._unserved:
                log.error("%s", message)
            self._unserved = message
            self.conditions.set(COND_API, message)
        return ApiOutcome(ok=False, error=message)

    def checked(self, problem: str) -> None:
        """What the eviction check found: ``problem`` says why evictions cannot work ("" when they can).

        A problem raises :data:`COND_API` (logged once) unless a failed eviction already says why;
        evictions are still tried.  A check that finds a problem gone clears the condition and
        lifts a failed eviction's hold; one that finds nothing new leaves a failed eviction's word
        standing (a check that passed before the eviction failed says nothing new)."""
        with self._lock:
            was, self._preflight = self._preflight, problem
            if problem:
                if not self._unserved and self.conditions.set(COND_API, problem):
                    log.error("%s", problem)
                return
            if not was:
                return
            self._unserved = ""
            self._unserved_until = 0.0
            self.conditions.clear(COND_API)
        log.warning("evictions through the Eviction API can work now: %s is cleared", COND_API)

    def _backoff(self, uid: str) -> float:
        now = self.clock()
        r = self._refusals.get(uid)
        if r is None or now - r.last > 2 * self.backoff_max:
            r = _Refusals(0, now)  # a refusal long ago starts the backoff afresh
        r.count += 1
        r.last = now
        self._refusals[uid] = r
        if len(self._refusals) > MAX_TRACKED:
            for old in sorted(self._refusals, key=lambda u: self._refusals[u].last)[: MAX_TRACKED // 10]:
                del self._refusals[old]
        return min(self.backoff_max, self.backoff_base * 2.0 ** (r.count - 1))


def _unserved(pod: PodMeta, e: KubeError) -> bool:
    """Whether ``e`` says the Eviction API itself is missing, not the pod: a 404 whose Status does not
    name the pod (the real server names it: ``details: {name, kind: pods}``), or the 400 of a server
    that knows no policy/v1 Eviction."""
    if e.status == 404:
        return e.details.get("name") != pod.name
    return e.status == 400 and 'no kind "Eviction" is registered' in e.message


def _causes(e: KubeError) -> str:
    causes = e.details.get("causes")
    if not isinstance(causes, list):
        return ""
    msgs = [str(c.get("message")) for c in causes if isinstance(c, dict) and c.get("message")]
    return f" ({'; '.join(msgs)})" if msgs else ""
