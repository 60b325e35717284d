// The test page's script: Segment's analytics.js (analytics-next, bundled by esbuild) sends
// events to ingestd, then the page tells the static server that served it what it sent.
//
// Everything comes from the page's query string, so one bundle serves every run:
//   host      ingestd's HOST:PORT (a different origin than the page's)
//   key       the write key
//   mode      "standard" (one keepalive fetch per event to /v1/t, /v1/p, /v1/i)
//             or "batching" (keepalive fetches of several events to /v1/b: the first three
//             when the batch is full, the rest when the page goes away, as on a real unload)
//   run       a tag put in every event, so the test finds exactly its own events
import { AnalyticsBrowser } from '@segment/analytics-next'

const q = new URLSearchParams(location.search)
const host = q.get('host')
const writeKey = q.get('key')
const mode = q.get('mode') || 'standard'
const run = q.get('run') || 'run'

// What a person changes to use ingestd: the Segment.io integration's apiHost (and protocol,
// here plain HTTP on loopback). Settings that analytics.js would fetch from Segment's CDN are
// given inline, so the page needs nothing but the page's origin and ingestd; remote metrics
// (which would also go to apiHost) are off.
const deliveryStrategy =
  mode === 'batching'
    ? // The timeout is longer than the test: what is left after the first full batch goes
      // out on pagehide, which is the delivery this mode is about.
      { strategy: 'batching', config: { size: 3, timeout: 600000, keepalive: true } }
    : { strategy: 'standard', config: { keepalive: true } }

const analytics = AnalyticsBrowser.load(
  {
    writeKey,
    cdnSettings: {
      integrations: { 'Segment.io': { apiKey: writeKey, deliveryStrategy } },
      metrics: { sampleRate: 0 },
    },
  },
  {
    integrations: { 'Segment.io': { apiHost: host + '/v1', protocol: 'http' } },
    // Each run is a fresh profile anyway; no event may linger in localStorage for a later one.
    disableClientPersistence: true,
  },
)

function report(body) {
  return fetch('/report', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify(body),
  })
}

async function main() {
  const calls =
    mode === 'batching'
      ? [
          () => analytics.track('Batch One', { run, n: 1 }),
          () => analytics.track('Batch Two', { run, n: 2 }),
          () => analytics.track('Batch Three', { run, n: 3 }),
          () => analytics.identify('user-b', { run, plan: 'team' }),
          () => analytics.page('Docs', 'Batching', { run }),
        ]
      : [
          () => analytics.identify('user-s', { run, plan: 'pro' }),
          () => analytics.page('Home', { run }),
          () => analytics.track('Signed Up', { run, n: 1 }),
          () => analytics.track('Clicked', { run, n: 2 }),
          () => analytics.track('Clicked', { run, n: 3 }),
        ]
  // All at once, as a page would. analytics.js resolves each when its delivery was tried
  // (standard) or when it was queued (batching).
  const ctxs = await Promise.all(calls.map((c) => c()))
  const sent = ctxs.map((ctx) => ({
    type: ctx.event.type,
    messageId: ctx.event.messageId,
    failed: Boolean(ctx.failedDelivery && ctx.failedDelivery()),
  }))
  await report({ run, mode, origin: location.origin, sent })
  // Leaving the page fires pagehide, on which analytics.js sends what it still holds, with
  // keepalive so the request outlives the page.
  if (mode === 'batching') location.href = '/bye?run=' + encodeURIComponent(run)
}

main().catch((e) => report({ run, mode, origin: location.origin, error: String(e && e.stack || e) }))
