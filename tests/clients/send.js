#!/usr/bin/env node
// Sends a known set of events through one real Node SDK, used the way its docs show, and
// prints (one JSON object on stdout) what was sent: each event's type, sequence number and the
// messageId the SDK assigned. tests/clients/test_node_sdks.py runs it against ingestd.
//
//   node send.js SDK URL WRITE_KEY RUN_ID [EVENTS_PER_TYPE] [FLUSH_AT]
//   SDK: segment-next (@segment/analytics-node), segment-classic (analytics-node),
//        rudderstack (@rudderstack/rudder-sdk-node)
//
// The only SDK option pointed away from the vendor's cloud is the one the README names:
// `host` (both Segment libraries) or `dataPlaneUrl` (RudderStack). flushAt / flushInterval are
// set small so one run makes many batches; everything else is the SDK's default (retry
// counts, back-off, gzip for RudderStack, writeKey in the body for @segment/analytics-node).
'use strict';

const zlib = require('zlib');

const TYPES = ['track', 'identify', 'page', 'screen', 'group', 'alias'];

function usage(msg) {
    process.stderr.write(`send.js: ${msg}\n`);
    process.exit(2);
}

const [sdk, url, writeKey, runId, perTypeArg, flushAtArg] = process.argv.slice(2);
if (!sdk || !url || !writeKey || !runId) {
    usage('usage: send.js SDK URL WRITE_KEY RUN_ID [EVENTS_PER_TYPE] [FLUSH_AT]');
}
const perType = Number(perTypeArg || 5);
const flushAt = Number(flushAtArg || 4);

// One event's fields, common to all three SDKs' message shapes. context.test carries the
// run id and a sequence number: the classic SDKs hand the whole batch to each callback, and
// this is how the script finds which messageId the SDK gave which event.
function message(type, seq) {
    const context = { test: { run: runId, seq } };
    const user = { userId: `user-${seq % 3}`, context };
    switch (type) {
    case 'track':
        return { ...user, event: 'Order Completed', properties: { seq, revenue: seq * 1.5 } };
    case 'identify':
        return { ...user, traits: { seq, plan: 'pro' } };
    case 'page':
        return { ...user, category: 'Docs', name: 'Quick start', properties: { seq } };
    case 'screen':
        return { ...user, name: 'Home', properties: { seq } };
    case 'group':
        return { ...user, groupId: `group-${seq % 2}`, traits: { seq } };
    case 'alias':
        return { userId: `user-${seq % 3}`, previousId: `anon-${seq}`, context };
    default:
        throw new Error(`unknown type ${type}`);
    }
}

function plan() {
    const out = [];
    let seq = 0;
    for (let i = 0; i < perType; i++) {
        for (const type of TYPES) {
            out.push({ type, seq: seq++ });
        }
    }
    return out;
}

// The batch an SDK callback reports, as an array of messages (RudderStack hands the gzipped
// request body to the callback when gzip is on, which is its default).
function batchOf(data) {
    if (!data) {
        return [];
    }
    if (Buffer.isBuffer(data)) {
        data = JSON.parse(zlib.gunzipSync(data).toString('utf8'));
    }
    return Array.isArray(data.batch) ? data.batch : [];
}

function seqOf(msg) {
    const t = msg && msg.context && msg.context.test;
    return t && t.run === runId ? t.seq : undefined;
}

// @segment/analytics-node: the callback gets (err, ctx); ctx.event is the event as sent.
async function runSegmentNext(events) {
    const { Analytics } = require('@segment/analytics-node');
    const analytics = new Analytics({ writeKey, host: url, flushAt, flushInterval: 200 });
    const errors = [];
    analytics.on('error', (err) => errors.push(String((err && err.reason) || err)));
    const done = events.map(
        (ev) =>
            new Promise((resolve) => {
                analytics[ev.type](message(ev.type, ev.seq), (err, ctx) => {
                    ev.messageId = ctx && ctx.event ? ctx.event.messageId : undefined;
                    if (err) {
                        ev.error = String((err && err.reason) || err);
                    }
                    resolve();
                });
            })
    );
    await analytics.closeAndFlush({ timeout: 60000 });
    await Promise.all(done);
    return errors;
}

// analytics-node and @rudderstack/rudder-sdk-node share the classic API: the callback gets
// (err, data) where data is the whole batch; flush() sends what is left in the queue.
async function runClassic(events, Analytics, options) {
    const analytics = new Analytics(writeKey, { ...options, flushAt, flushInterval: 200 });
    const done = events.map(
        (ev) =>
            new Promise((resolve) => {
                analytics[ev.type](message(ev.type, ev.seq), (err, data) => {
                    const mine = batchOf(data).find((m) => seqOf(m) === ev.seq);
                    ev.messageId = mine ? mine.messageId : undefined;
                    if (err) {
                        ev.error = String(err.message || err);
                    }
                    resolve();
                });
            })
    );
    await analytics.flush();
    await Promise.all(done);
    return [];
}

async function main() {
    const events = plan();
    let errors;
    const timer = setTimeout(() => {
        process.stderr.write('send.js: events not all delivered after 90 s\n');
        process.exit(3);
    }, 90000);
    switch (sdk) {
    case 'segment-next':
        errors = await runSegmentNext(events);
        break;
    case 'segment-classic':
        errors = await runClassic(events, require('analytics-node'), { host: url });
        break;
    case 'rudderstack':
        errors = await runClassic(events, require('@rudderstack/rudder-sdk-node'), {
            dataPlaneUrl: url,
            logLevel: 'error',
        });
        break;
    default:
        usage(`unknown SDK ${sdk}`);
    }
    clearTimeout(timer);
    const pkg = {
        'segment-next': '@segment/analytics-node',
        'segment-classic': 'analytics-node',
        rudderstack: '@rudderstack/rudder-sdk-node',
    }[sdk];
    const version = require(`${pkg}/package.json`).version;
    process.stdout.write(`${JSON.stringify({ sdk, package: pkg, version, events, errors })}\n`);
}

main().catch((err) => {
    process.stderr.write(`send.js: ${(err && err.stack) || err}\n`);
    process.exit(1);
});
