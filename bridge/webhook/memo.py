"""A bounded memo of review answers, so the pods of one Deployment are translated once, not once per replica.

Why: `review` is pure - its answer depends only on the AdmissionReview request, the namespace's mode/target labels
and the fixed `ReviewConfig` - and the pods a ReplicaSet or Job controller creates are identical requests except
for `request.uid` (the pod name is generated after admission, so `generateName` is what the webhook sees). A
scale-up of N replicas is N identical reviews. Finding the uid in the body is far cheaper than reviewing it.

Invariants:
* the key is everything the answer depends on: the request body as received with the request's uid cut out
  (position and remaining bytes), plus the namespace's mode and target label values (or "unknown namespace"), plus
  the generation of the live facts snapshot (`ServeFacts.generation`: the API server check, the DeviceClass, the
  nodes); the config is fixed per memo. Cutting the first `"uid":"<uid>"` (or `"uid": "<uid>"`) is exact: two
  bodies with the same key differ only in that one JSON value (and that one space), so either it is `request.uid` in
  both, or (when the request's uid is spelled elsewhere) both have the same uid and are the same JSON. A body whose
  uid is not spelled that way is simply not memoised;
* a hit returns exactly what a fresh review would: the stored answer with the request's uid put back, and the
  encoded response byte-identical to encoding that answer;
* only answers of the ordinary `allow` shape are stored; bodies that are not AdmissionReviews, and answers from the
  internal-error path, are never stored (an internal error is retried, not remembered);
* an answer is stored the second time its key is seen, not the first: the first sighting only adds the key's
  hash to a set (bounded at 16 x `capacity`, emptied when full). A Deployment's replicas are reviewed twice, then
  answered from the memo; a stream of unrelated pods, each seen once, costs a hash per pod instead of building,
  storing and later evicting an entry per pod (which made a memo miss cost about a quarter more than a review
  without the memo). A hash collision only stores an answer one sighting early: lookups use the full key;
* bounded (`capacity` entries of about one request body each, oldest dropped first), safe from several threads.

Side effects are not the memo's business: a hit carries the same templates and Events as the fresh answer, and
the shell performs (or skips, on dryRun) them as for any answer.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bridge.webhook.policy import MODE_LABEL, TARGET_LABEL
from bridge.webhook import jsoncodec
from bridge.webhook.facts import ServeFacts
from bridge.webhook.review import NamespaceLabels, ReviewConfig, ReviewResult, review

_QUOTE = json.encoder.encode_basestring_ascii  # a str as the encoder writes it (ensure_ascii), without its overhead
_HEAD = b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":'
_BODY_KEYS = ["apiVersion", "kind", "response"]
_CACHED_OUTCOMES = frozenset({"translated", "shadow", "skipped", "no-gpu", "untranslatable", "invalid"})

Key = tuple[object, int, int, bytes]


def encode(body: Mapping[str, Any]) -> bytes:
    """The response body as the webhook sends it (compact JSON)."""
    return jsoncodec.dumps(body)


@dataclass(slots=True)
class _Entry:
    result: ReviewResult  # as reviewed, for the uid it was reviewed with
    tail: bytes  # the encoded response after the uid value

    def bind(self, uid: str) -> tuple[ReviewResult, bytes]:
        r = self.result
        body = r.body
        body = {**body, "response": {**body["response"], "uid": uid}}
        # every field, as dataclasses.replace(r, uid=uid, body=body) would give, at a tenth of its cost
        return (ReviewResult(r.status, body, r.outcome, r.mode, r.target, uid, r.namespace, r.pod, r.dry_run,
                             r.templates, r.events, r.reason),
                _HEAD + _QUOTE(uid).encode() + self.tail)

    @classmethod
    def of(cls, result: ReviewResult) -> tuple[_Entry | None, bytes]:
        """The entry for `result` (None when it must not be stored: see the module invariants) and the encoded
        response."""
        body = result.body
        encoded = encode(body)
        if result.status != 200 or result.outcome not in _CACHED_OUTCOMES:
            return None, encoded
        response = body.get("response")
        if (not isinstance(response, dict) or list(body) != _BODY_KEYS or next(iter(response), None) != "uid"
                or response["uid"] != result.uid):
            return None, encoded
        head = _HEAD + _QUOTE(result.uid).encode()
        if not encoded.startswith(head):
            return None, encoded
        return cls(result, encoded[len(head):]), encoded


class ReviewMemo:
    def __init__(self, config: ReviewConfig, capacity: int = 256) -> None:
        if capacity < 1:
            raise ValueError("memo capacity must be at least 1")
        self.config = config
        self._capacity = capacity
        # OrderedDict: dropping the oldest is O(1) (a dict's `next(iter())` after many front deletions is not)
        self._entries: OrderedDict[Key, _Entry] = OrderedDict()
        # the hashes of keys seen once (a collision only stores an answer one sighting early); emptied when full
        self._seen: set[int] = set()
        self._seen_capacity = 16 * capacity
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def review(self, body: bytes, doc: Any, namespace_labels: NamespaceLabels,
               reraise: tuple[type[Exception], ...] = (), serve: ServeFacts | None = None) -> tuple[ReviewResult, bytes]:
        """`review(doc, config, namespace_labels, reraise)` and its encoded response, from the memo when possible.
        `body` is the request body as received, `doc` its parsed JSON (or `body` itself when it did not parse)."""
        key, labels = self._key(body, doc, namespace_labels, serve.generation if serve is not None else -1)
        if key is None:
            result = review(doc, self.config, namespace_labels, reraise, serve)
            return result, encode(result.body)
        entry = self._entries.get(key)  # no lock: one lookup is atomic, and entries are complete when stored
        if entry is not None:
            self.hits += 1
            return entry.bind(doc["request"]["uid"])
        self.misses += 1
        result = review(doc, self.config, lambda _ns: labels, reraise, serve)
        sighting = hash(key)
        seen = self._seen
        if sighting not in seen:  # see the module docstring: an answer is kept from the second time its key is seen
            if len(seen) >= self._seen_capacity:
                seen.clear()
            seen.add(sighting)
            return result, encode(result.body)
        entry, encoded = _Entry.of(result)
        if entry is None:
            return result, encoded
        with self._lock:
            if len(self._entries) >= self._capacity:
                self._entries.popitem(last=False)
            self._entries[key] = entry
        return result, encoded

    def _key(self, body: bytes, doc: Any, namespace_labels: NamespaceLabels,
             generation: int) -> tuple[Key | None, Mapping[str, str] | None]:
        # no full validation here: an answer to a body that is not an AdmissionReview is a 400, never stored
        request = doc.get("request") if isinstance(doc, dict) else None
        if not isinstance(request, dict):
            return None, None
        uid, namespace = request.get("uid"), request.get("namespace")
        if not isinstance(uid, str) or not uid or not isinstance(namespace, str):
            return None, None
        value = _QUOTE(uid).encode()
        # the first `"uid":` followed by the value, compact (as the API server writes it) or after one space: one
        # pass over the body, which would otherwise be searched twice for a spaced one
        at = body.find(b'"uid":')
        while at >= 0:
            start = at + 6
            if body.startswith(value, start):
                end = start + len(value)
                break
            if body[start:start + 1] == b" " and body.startswith(value, start + 1):
                end = start + 1 + len(value)
                break
            at = body.find(b'"uid":', start)
        else:
            return None, None
        policy = self.config.policy
        labels: Mapping[str, str] | None = None
        label_key: object = "excluded"
        if namespace not in policy.excluded_namespaces and namespace != policy.own_namespace:
            labels = namespace_labels(namespace)
            label_key = None if labels is None else (labels.get(MODE_LABEL), labels.get(TARGET_LABEL))
        return (label_key, generation, at, body[:at] + body[end:]), labels
