// The second test page's script: RudderStack's JavaScript SDK v3 (@rudderstack/analytics-js,
// its "bundled" build, which carries its plugins: nothing is fetched from a CDN), bundled by
// esbuild, sends events to ingestd; then the page tells the static server what it sent.
//
// Query string (one bundle serves every run):
//   host      ingestd's HOST:PORT (a different origin than the page's)
//   key       the write key
//   mode      "standard" (one XHR per event, to /v1/track, /v1/page, /v1/identify)
//             or "batching" (XHRs of several events to /v1/batch)
//   run       a tag put in every event, so the test finds exactly its own events
//
// The SDK sends Authorization: Basic, Content-Type: application/json and its own AnonymousId
// and SentAt headers, so the browser asks a CORS preflight for those names first.
import { RudderAnalytics } from '@rudderstack/analytics-js/bundled'

const q = new URLSearchParams(location.search)
const host = q.get('host')
const writeKey = q.get('key')
const mode = q.get('mode') || 'standard'
const run = q.get('run') || 'run'

function report(body) {
  return fetch('/report', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify(body),
  })
}

// What a person changes to use ingestd: the data plane URL. The source configuration the SDK
// would fetch from RudderStack's control plane is given inline (getSourceConfig): no
// destinations, so nothing but ingestd is ever called.
const analytics = new RudderAnalytics()
analytics.load(writeKey, 'http://' + host, {
  getSourceConfig: () => ({
    source: {
      id: 'ingestd-test-source',
      name: 'ingestd test',
      workspaceId: 'ingestd-test',
      enabled: true,
      config: {},
      destinations: [],
    },
  }),
  plugins: ['XhrQueue'],
  polyfillIfRequired: false,
  loadIntegration: false,
  queueOptions:
    mode === 'batching'
      ? // Three events fill a batch; the last two go when the flush interval passes.
        { batch: { enabled: true, maxItems: 3, flushInterval: 1000 } }
      : {},
})

function sent(type, n) {
  return new Promise((resolve) => {
    const cb = (ev) => resolve({ type, messageId: ev && ev.messageId })
    if (type === 'identify') analytics.identify('user-' + mode, { run, plan: 'pro' }, cb)
    else if (type === 'page') analytics.page('Docs', 'Home', { run }, cb)
    else analytics.track('Clicked', { run, n }, cb)
  })
}

function main() {
  analytics.ready(async () => {
    try {
      // The callbacks fire once each event is queued for delivery, with its messageId.
      const events = await Promise.all(
        ['identify', 'page', 'track', 'track', 'track'].map((t, n) => sent(t, n)),
      )
      await report({ run, mode, origin: location.origin, sent: events })
    } catch (e) {
      await report({ run, mode, origin: location.origin, error: String((e && e.stack) || e) })
    }
  })
}

main()
