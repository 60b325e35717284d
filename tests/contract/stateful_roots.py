"""schemathesis hooks file of tests/contract/test_schemathesis.py (loaded via SCHEMATHESIS_HOOKS):
lets the stateful phase start its scenarios with the ingest POSTs, and gives the events it sends
a messageId the spec's links can read (issue #28).

Why: the stateful phase starts each scenario with a "root" operation and follows the spec's links
from its responses. schemathesis 4.32.5 picks the roots with its dependency inference, which takes
every body field named `<x>Id` for a reference to a resource "<X>" that another operation must
create first: Segment's `messageId`, `userId`, `anonymousId`, `previousId` and `groupId` become
the resources Message, User, Anonymous, Previous and Group, which no operation returns, so every
ingest POST is demoted to a "fallback" root. Fallback roots are used only when there is no
"reliable" one, and GET /v1/log (a GET without path parameters) is reliable: the phase called
nothing but GET /v1/log, and followed 1 link of 21 (/v1/log -> its next page). In this API those
ids are the client's own names, never references: a POST creates an event from nothing. So a
POST is a reliable root here, as schemathesis counts any POST that has no unmet reference.

Then the links from a POST read the lookup's messageId from the request (`$request.body#/messageId`,
`#/batch/0/messageId`): `messageId` is optional, and generation leaves it out of about half the
bodies (the server then assigns a UUID the link cannot read). So in the stateful phase only,
`before_call` gives such an event a fresh one; the other phases still send events without.

The patch is of an internal function of the pinned version (requirements.txt): if a new pin no
longer has it, loading this file fails the run instead of silently testing one link again.
"""

import itertools
import uuid

import schemathesis
import schemathesis.specs.openapi.stateful as stateful

_original = getattr(stateful, "is_likely_root_transition", None)
if _original is None or not hasattr(stateful, "classify_root_transitions"):
    raise RuntimeError("schemathesis no longer has stateful.is_likely_root_transition: "
                       "re-check tests/contract/stateful_roots.py against the pinned version")


def is_likely_root_transition(operation, node, produced_anywhere):
    if operation.method == "post":
        return True
    return _original(operation, node, produced_anywhere)


stateful.is_likely_root_transition = is_likely_root_transition


BATCH_PATHS = ("/v1/batch", "/v1/import", "/v1/b")
_RUN = uuid.uuid4().hex[:12]
_counter = itertools.count()


@schemathesis.hook
def before_call(context, case, **kwargs):
    if case.meta is None or case.meta.phase.name.value != "stateful" or case.method != "POST":
        return
    body = case.body
    if case.operation.path in BATCH_PATHS:
        batch = body.get("batch") if isinstance(body, dict) else None
        body = batch[0] if isinstance(batch, list) and batch else None
    if isinstance(body, dict) and "messageId" not in body:
        body["messageId"] = "contract-%s-%d" % (_RUN, next(_counter))
