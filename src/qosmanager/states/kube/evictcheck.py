"""Whether evictions through the Eviction API can work, asked before the first one is needed.

A cluster that cannot take the agent's ``policy/v1`` Evictions (older than Kubernetes 1.22, a proxy
without the subresource, an RBAC role without ``create pods/eviction``) otherwise shows only at the
first eviction, under memory or CPU pressure: until then ``/healthz`` says healthy while the node
cannot be protected.  So, at start (once the pods and the Node are known), every ``interval``
seconds, and soon after a watch relisted, :class:`EvictionAPICheck` asks the API server:

1. discovery, ``GET /api/v1``: the core group lists the subresource ``pods/eviction`` with the
   group and version of the Eviction it takes -- ``policy/v1`` from 1.22, ``policy/v1beta1``
   before; no entry: not served.  An entry without a version (a server older than discovery's
   ``group``/``version`` fields) is not taken as a problem;
2. permission, a ``SelfSubjectAccessReview`` for ``create pods/eviction`` at the cluster scope
   (every namespace: the agent evicts pods of any namespace on its node).  An account that may not
   create reviews is said once in the log and not taken as a problem: the permission is then
   known only at the first eviction, as before.

What it finds goes to :meth:`KubeEvictor.checked <qosmanager.states.kube.evict.KubeEvictor.checked>`,
which raises or clears the degraded condition ``kube/eviction-api`` (``/healthz``,
``qosmanager_degraded``).  A check the API server does not answer (no connection, 5xx, 429, an
answer that cannot be read) is no verdict: nothing changes, and it is asked again ``retry``
seconds later.  Eviction behaviour does not change: evictions are still tried and a failed one
stays the ground truth.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from qosmanager.states.kube.client import KubeClient, KubeError
from qosmanager.states.kube.evict import MIN_KUBERNETES, KubeEvictor

log = logging.getLogger(__name__)

CHANNEL = "eviction-check"  # its own connection: never behind a watch, an event or an eviction
DISCOVERY = "/api/v1"
ACCESS_REVIEW = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
KILL_MODE = "or run with --evict-mode kill (deploy/overlays/kill-mode)"
RBAC_RULE = ('apiGroups: [""], resources: ["pods/eviction"], verbs: ["create"], '
             "as deploy/kubernetes/clusterrole.yaml has it")


class NoVerdict(Exception):
    """The API server did not answer the check in a way that says anything."""


class EvictionAPICheck:
    """Asks whether evictions can work (see the module docstring); :meth:`check` once,
    or :meth:`start` a thread that asks every ``interval`` seconds (``retry`` after no verdict)
    and at once after :meth:`poke`."""

    def __init__(self, client: KubeClient, evictor: KubeEvictor, *, interval: float = 600.0,
                 retry: float = 60.0, timeout: float = 5.0) -> None:
        self.client = client
        self.evictor = evictor
        self.interval = interval
        self.retry = retry
        self.timeout = timeout
        self.checks = 0  # checks that reached a verdict
        self.no_verdict = 0  # checks the API server did not answer
        self._review_refused = False  # said once: the account may not create SelfSubjectAccessReviews
        self._unanswered = False  # said once per streak of checks without a verdict
        self._wake = threading.Event()
        self._stopped = False
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ the check
    def check(self) -> bool | None:
        """Ask now: True when evictions can work, False when they cannot (the condition is set),
        None when the API server gave no verdict (nothing changes)."""
        try:
            problem = self._discovery() or self._access()
        except NoVerdict as e:
            self.no_verdict += 1
            if not self._unanswered:
                log.info("cannot check whether evictions can work (%s); asked again in %gs, "
                         "the last verdict stands meanwhile", e, self.retry)
            self._unanswered = True
            return None
        self._unanswered = False
        self.checks += 1
        self.evictor.checked(problem)
        return not problem

    def _ask(self, method: str, path: str, body: Any = None) -> Any:
        try:
            return self.client.request(method, path, body=body, channel=CHANNEL, timeout=self.timeout)
        except KubeError as e:
            if e.status == 0 or e.status >= 500 or e.status in (408, 429):
                raise NoVerdict(f"{method} {path}: {e}") from None
            raise

    def _discovery(self) -> str:
        try:
            doc = self._ask("GET", DISCOVERY)
        except KubeError as e:  # an answer, but no discovery document: nothing to conclude from
            raise NoVerdict(f"GET {DISCOVERY}: {e}") from None
        resources = doc.get("resources") if isinstance(doc, dict) else None
        if not isinstance(resources, list):
            raise NoVerdict(f"GET {DISCOVERY}: not an APIResourceList")
        entry = next((r for r in resources if isinstance(r, dict) and r.get("name") == "pods/eviction"), None)
        if entry is None:
            return ("the API server does not serve pods/eviction (its discovery at /api/v1 lists no such "
                    "subresource): --evict-mode api can evict nothing here; use an API server that serves "
                    f"policy/v1 Evictions (Kubernetes >= {MIN_KUBERNETES}), {KILL_MODE}")
        group, version = str(entry.get("group") or ""), str(entry.get("version") or "")
        if not version or (group, version) == ("policy", "v1"):
            return ""
        return (f"the API server takes Evictions as {group or 'policy'}/{version} only (discovery of "
                f"pods/eviction), not the policy/v1 the agent sends: Kubernetes older than "
                f"{MIN_KUBERNETES}; --evict-mode api can evict nothing here; upgrade the cluster to "
                f">= {MIN_KUBERNETES}, {KILL_MODE}")

    def _access(self) -> str:
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                "spec": {"resourceAttributes": {"namespace": "", "verb": "create", "group": "",
                                                "resource": "pods", "subresource": "eviction"}}}
        try:
            answer = self._ask("POST", ACCESS_REVIEW, body)
        except KubeError as e:
            if not self._review_refused:
                log.warning("cannot ask the API server whether this agent may create pods/eviction "
                            "(SelfSubjectAccessReview: %s); the permission shows at the first eviction "
                            "(grant create on selfsubjectaccessreviews.authorization.k8s.io to have it "
                            "checked at start)", e)
            self._review_refused = True
            return ""
        status = answer.get("status") if isinstance(answer, dict) else None
        if not isinstance(status, dict) or not isinstance(status.get("allowed"), bool):
            raise NoVerdict(f"POST {ACCESS_REVIEW}: not a SelfSubjectAccessReview status")
        if status["allowed"]:
            return ""
        why = str(status.get("reason") or status.get("evaluationError") or "").strip()
        return ("the agent's service account may not create pods/eviction (SelfSubjectAccessReview: "
                f"denied{': ' + why if why else ''}): --evict-mode api can evict nothing; grant it in "
                f"its ClusterRole ({RBAC_RULE}), {KILL_MODE}")

    # ------------------------------------------------------------------ the thread
    def start(self, first_delay: float | None = None) -> None:
        """Ask every ``interval`` seconds on a thread, the first time after ``first_delay``
        (default: ``interval``; the agent asks once itself at start)."""
        if self._thread is not None:
            return
        delay = self.interval if first_delay is None else first_delay
        self._thread = threading.Thread(target=self._run, args=(delay,), name="kube-eviction-check",
                                        daemon=True)
        self._thread.start()

    def poke(self) -> None:
        """Ask soon (a watch relisted: the API server may have been replaced or upgraded)."""
        self._wake.set()

    def stop(self, timeout: float = 2.0) -> None:
        self._stopped = True
        self._wake.set()
        self.client.interrupt(CHANNEL)
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self, delay: float) -> None:
        while True:
            self._wake.wait(delay)
            if self._stopped:
                return
            self._wake.clear()
            try:
                verdict = self.check()
            except Exception:  # a bug must not end the thread (nor the agent)
                log.exception("the eviction check failed unexpectedly")
                verdict = None
            delay = self.retry if verdict is None else self.interval
