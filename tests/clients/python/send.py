"""Sends a known set of events through one real Python SDK, used the way its docs show, and prints
(one JSON object on stdout) what was sent: each event's type, sequence number and the messageId
the SDK assigned. tests/clients/test_python_sdks.py runs it (in the venv of sdkdeps.py).

    python send.py SDK URL WRITE_KEY RUN_ID EVENTS_PER_TYPE FLUSH_AT BIG
    SDK: segment (segment-analytics-python), rudder (rudder-sdk-python)
    BIG: 1 to add one track event over 32 KB, reported apart as "big"

The only option pointed away from the vendor's cloud is `host` (the data plane URL for
RudderStack, whose Client calls it host too). upload_size / upload_interval are set small so one
run makes many batches; everything else is the SDK's default (retries, gzip). For HTTPS the test
sets REQUESTS_CA_BUNDLE, as a deployment with a private CA does.
"""

import json
import sys

TYPES = ("track", "identify", "page", "screen", "group", "alias")
BIG_BYTES = 40 * 1024


def message(run_id, etype, seq):
    """Keyword arguments of the SDK call for one event; context.test carries the run and seq."""
    ctx = {"test": {"run": run_id, "seq": seq}}
    user = "user-%d" % (seq % 3) if isinstance(seq, int) else "user-big"
    if etype == "track":
        return dict(user_id=user, event="Order Completed", context=ctx,
                    properties={"seq": seq, "revenue": 1.5 * seq if isinstance(seq, int) else 0})
    if etype == "identify":
        return dict(user_id=user, traits={"seq": seq, "plan": "pro"}, context=ctx)
    if etype == "page":
        return dict(user_id=user, category="Docs", name="Quick start", properties={"seq": seq},
                    context=ctx)
    if etype == "screen":
        return dict(user_id=user, name="Home", properties={"seq": seq}, context=ctx)
    if etype == "group":
        return dict(user_id=user, group_id="group-%d" % (seq % 2), traits={"seq": seq},
                    context=ctx)
    return dict(user_id=user, previous_id="anon-%d" % seq, context=ctx)


def main():
    sdk, url, key, run_id, per_type, flush_at, big = sys.argv[1:8]
    per_type, flush_at = int(per_type), int(flush_at)
    failed = []  # (error, messageIds) the SDK reported through on_error

    def on_error(err, batch):
        failed.append({"error": str(err), "ids": [m.get("messageId") for m in batch]})

    if sdk == "segment":
        import segment.analytics as pkg
        from segment.analytics import Client
        package = "segment-analytics-python"
    elif sdk == "rudder":
        import rudderstack.analytics as pkg
        from rudderstack.analytics import Client
        package = "rudder-sdk-python"
    else:
        sys.exit("send.py: unknown SDK %s" % sdk)
    client = Client(key, host=url, on_error=on_error, upload_size=flush_at, upload_interval=0.2)

    events = []
    seq = 0
    for _ in range(per_type):
        for etype in TYPES:
            ok, msg = getattr(client, etype)(**message(run_id, etype, seq))
            events.append({"type": etype, "seq": seq, "messageId": msg.get("messageId")})
            if not ok:
                events[-1]["error"] = "not queued"
            seq += 1
    report_big = None
    if big == "1":
        kw = message(run_id, "track", "big")
        kw["properties"]["blob"] = "x" * BIG_BYTES
        try:
            ok, msg = client.track(**kw)
            report_big = {"messageId": msg.get("messageId"), "queued": ok}
        except Exception as e:  # the SDK's documented refusal of an oversized message
            report_big = {"error": "%s: %s" % (type(e).__name__, e)}
    client.flush()  # waits until the queue is drained, retries included
    client.join()

    bad = {i: f["error"] for f in failed for i in f["ids"]}
    for e in events:
        if e["messageId"] in bad:
            e["error"] = bad[e["messageId"]]
    if report_big and report_big.get("messageId") in bad:
        report_big["error"] = bad[report_big["messageId"]]
    print(json.dumps({"sdk": sdk, "package": package, "version": pkg.VERSION, "events": events,
                      "errors": [f["error"] for f in failed if set(f["ids"]) - set(
                          [report_big.get("messageId")] if report_big else [])],
                      "big": report_big}))


if __name__ == "__main__":
    main()
