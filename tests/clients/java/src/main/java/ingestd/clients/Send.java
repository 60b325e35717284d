package ingestd.clients;

import com.segment.analytics.Analytics;
import com.segment.analytics.Callback;
import com.segment.analytics.messages.AliasMessage;
import com.segment.analytics.messages.GroupMessage;
import com.segment.analytics.messages.IdentifyMessage;
import com.segment.analytics.messages.Message;
import com.segment.analytics.messages.MessageBuilder;
import com.segment.analytics.messages.PageMessage;
import com.segment.analytics.messages.ScreenMessage;
import com.segment.analytics.messages.TrackMessage;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

/**
 * Sends a known set of events through Segment's analytics-java, used the way its README shows
 * with only the endpoint pointed at ingestd (the proxy), and prints one JSON line: each event's
 * type, sequence number and the messageId the SDK assigned (tests/clients/sdkcase.py reads it).
 *
 * <pre>java -cp CP ingestd.clients.Send URL WRITE_KEY RUN_ID EVENTS_PER_TYPE FLUSH_AT BIG</pre>
 *
 * flushQueueSize / flushInterval are set small (1 s is its least interval) so one run makes many batches; everything else
 * (retries, gzip) is the SDK's default. For HTTPS the test passes a trust store with the test CA
 * (-Djavax.net.ssl.trustStore), as a deployment with a private CA does.
 */
public final class Send {
    private static final String[] TYPES = {"track", "identify", "page", "screen", "group", "alias"};
    private static final int BIG_BYTES = 40 * 1024;

    /** One event as reported; seq is an Integer, or "big". */
    private static final class Sent {
        final String type;
        final Object seq;
        volatile String messageId;
        volatile String error;

        Sent(String type, Object seq) {
            this.type = type;
            this.seq = seq;
        }

        String json() {
            StringBuilder b = new StringBuilder("{");
            if (!"big".equals(seq)) {
                b.append("\"type\":").append(q(type)).append(",\"seq\":").append(seq).append(',');
            }
            b.append("\"messageId\":").append(messageId == null ? "null" : q(messageId));
            if (error != null) {
                b.append(",\"error\":").append(q(error));
            }
            return b.append('}').toString();
        }
    }

    private static String q(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') {
                b.append('\\').append(c);
            } else if (c < 0x20) {
                b.append(String.format("\\u%04x", (int) c));
            } else {
                b.append(c);
            }
        }
        return b.append('"').toString();
    }

    private static MessageBuilder<?, ?> message(String runId, String type, Object seq) {
        Map<String, Object> test = new LinkedHashMap<>();
        test.put("run", runId);
        test.put("seq", seq);
        Map<String, Object> context = new LinkedHashMap<>();
        context.put("test", test);
        Map<String, Object> props = new LinkedHashMap<>();
        props.put("seq", seq);
        String user = "user-" + seq;
        MessageBuilder<?, ?> m;
        switch (type) {
            case "identify":
                m = IdentifyMessage.builder().traits(props);
                break;
            case "page":
                m = PageMessage.builder("Quick start").properties(props);
                break;
            case "screen":
                m = ScreenMessage.builder("Home").properties(props);
                break;
            case "group":
                m = GroupMessage.builder("group-1").traits(props);
                break;
            case "alias":
                m = AliasMessage.builder("anon-" + seq);
                break;
            default:
                if ("big".equals(seq)) {
                    props.put("blob", "x".repeat(BIG_BYTES));
                }
                m = TrackMessage.builder("Order Completed").properties(props);
        }
        return m.userId(user).context(context);
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 6) {
            System.err.println("usage: Send URL WRITE_KEY RUN_ID EVENTS_PER_TYPE FLUSH_AT BIG");
            System.exit(2);
        }
        String url = args[0], key = args[1], runId = args[2];
        int perType = Integer.parseInt(args[3]), flushAt = Integer.parseInt(args[4]);
        boolean sendBig = "1".equals(args[5]);

        List<Sent> events = new ArrayList<>();
        for (int i = 0; i < perType * TYPES.length; i++) {
            events.add(new Sent(TYPES[i % TYPES.length], i));
        }
        Sent big = sendBig ? new Sent("track", "big") : null;
        CountDownLatch settled = new CountDownLatch(events.size() + (sendBig ? 1 : 0));
        List<String> errors = new ArrayList<>();

        Callback callback = new Callback() {
            private Sent find(Message m) {
                Object t = m.context() == null ? null : m.context().get("test");
                Object seq = t instanceof Map ? ((Map<?, ?>) t).get("seq") : null;
                if ("big".equals(seq)) {
                    return big;
                }
                return seq instanceof Number ? events.get(((Number) seq).intValue()) : null;
            }

            @Override
            public void success(Message m) {
                Sent s = find(m);
                if (s != null) {
                    s.messageId = m.messageId();
                    settled.countDown();
                }
            }

            @Override
            public void failure(Message m, Throwable t) {
                Sent s = find(m);
                if (s == null) {
                    return;
                }
                s.messageId = m.messageId();
                s.error = String.valueOf(t);
                if (s != big) {
                    synchronized (errors) {
                        errors.add(s.error);
                    }
                }
                settled.countDown();
            }
        };

        Analytics analytics = Analytics.builder(key)
                .endpoint(url)
                .flushQueueSize(flushAt)
                .flushInterval(1, TimeUnit.SECONDS) // its minimum
                .callback(callback)
                .build();
        for (Sent e : events) {
            analytics.enqueue(message(runId, e.type, e.seq));
        }
        if (sendBig) {
            try {
                analytics.enqueue(message(runId, "track", "big"));
            } catch (RuntimeException ex) { // the SDK's refusal of an oversized message
                big.error = ex.toString();
                settled.countDown();
            }
        }
        analytics.flush();
        // Wait for every callback before shutdown(), which stops retries that are still due.
        boolean ok = settled.await(90, TimeUnit.SECONDS);
        analytics.shutdown();
        if (!ok) {
            System.err.println("events not all settled after 90 s");
            System.exit(3);
        }
        StringBuilder out = new StringBuilder("{\"sdk\":\"segment\",\"package\":");
        out.append(q("com.segment.analytics.java:analytics")).append(",\"version\":");
        out.append(q(String.valueOf(com.segment.analytics.internal.AnalyticsVersion.get())));
        out.append(",\"events\":[");
        for (int i = 0; i < events.size(); i++) {
            out.append(i > 0 ? "," : "").append(events.get(i).json());
        }
        out.append("],\"errors\":[");
        for (int i = 0; i < errors.size(); i++) {
            out.append(i > 0 ? "," : "").append(q(errors.get(i)));
        }
        out.append("],\"big\":").append(big == null ? "null" : big.json()).append('}');
        System.out.println(out);
        System.exit(0);
    }
}
