/* dashboard.js: GET /dashboard's script. Polls /stats and /metrics once a second and draws
 * them with uPlot (vendor/uplot/); docs/operations.md says what each chart means. */
(function () {
  "use strict";

  const TOKEN_KEY = "ingestd.adminToken"; // sessionStorage: gone when the tab closes
  const PERIOD_MS = 1000;
  const POINTS = 300; // five minutes of one-second samples per chart
  const HEADLINE_MS = 5000; // headline rates span 5 s: steadier than one interval
  // Relative to where the page is, so it also works behind a proxy that adds a path prefix.
  const PREFIX = location.pathname.replace(/dashboard\/?$/, "");

  const $ = (id) => document.getElementById(id);
  const samples = []; // {t, stats, req, fsync}: the last HEADLINE_MS and a little more
  const charts = {}; // id -> {def, plot, data, names}
  let timer = null;

  class AuthError extends Error {}

  // ---- fetching ------------------------------------------------------------------------

  async function get(path, text) {
    const headers = {};
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (token) headers.Authorization = "Bearer " + token;
    const r = await fetch(PREFIX + path, { headers, cache: "no-store" });
    if (r.status === 401) throw new AuthError("admin token needed");
    if (!r.ok) throw new Error(path + ": HTTP " + r.status);
    return text ? r.text() : r.json();
  }

  // Sums the cumulative `name`_bucket lines whose labels pass keep(): Map le -> count.
  function buckets(text, name, keep) {
    const out = new Map();
    const re = new RegExp("^" + name + "_bucket\\{([^}]*)\\} (\\S+)$", "gm");
    for (const m of text.matchAll(re)) {
      if (keep && !keep(m[1])) continue;
      const le = /le="([^"]*)"/.exec(m[1])[1];
      out.set(le, (out.get(le) || 0) + Number(m[2]));
    }
    return out;
  }

  // Prometheus' histogram_quantile() over the samples between two scrapes; null when none.
  function quantile(q, cur, prev) {
    const bound = (le) => (le === "+Inf" ? Infinity : Number(le));
    const les = [...cur.keys()].sort((a, b) => bound(a) - bound(b));
    const inc = les.map((le) => cur.get(le) - ((prev && prev.get(le)) || 0));
    const total = inc[inc.length - 1];
    if (!(total > 0)) return null;
    const rank = q * total;
    let lower = 0, below = 0;
    for (let i = 0; i < les.length; i++) {
      if (inc[i] >= rank) {
        if (bound(les[i]) === Infinity) return lower; // as Prometheus: the highest finite bound
        return lower + ((bound(les[i]) - lower) * (rank - below)) / (inc[i] - below || 1);
      }
      lower = bound(les[i]);
      below = inc[i];
    }
    return null;
  }

  // The ingest routes: what clients wait on (not /stats, /metrics or long-polls of /v1/log).
  const INGEST = (labels) => /route="\/v1\/(?!log|events)/.test(labels);

  async function sample() {
    const [stats, metrics] = await Promise.all([get("stats"), get("metrics", true)]);
    return {
      t: Date.now(),
      stats,
      view: view(stats),
      req: buckets(metrics, "ingestd_request_duration_seconds", INGEST),
      fsync: buckets(metrics, "ingestd_fsync_duration_seconds"),
    };
  }

  // ---- charts --------------------------------------------------------------------------

  // [label, colour, scale]: scale "y" (left axis) unless named; a named one gets the right axis.
  const CHARTS = [
    { id: "rates", title: "events/s", series: [["accepted", "#2e7d32"],
      ["duplicates", "#ef6c00"], ["rejected", "#c62828"]] },
    { id: "dupratio", title: "duplicate ratio (%)", series: [["duplicates %", "#ef6c00"]] },
    { id: "window", title: "dedupe window (hours)", series: [["effective", "#1565c0"],
      ["configured", "#90a4ae"], ["floor", "#8e24aa"]] },
    { id: "keys", title: "keys and store size", series: [["keys", "#1565c0"],
      ["store MB", "#6d4c41", "MB"]] },
    { id: "commit", title: "group commit: batch size and fsync", series: [
      ["events/batch", "#2e7d32"], ["fsync avg ms", "#c62828", "ms"],
      ["fsync p99 ms", "#ad1457", "ms"]] },
    { id: "latency", title: "request latency, ingest routes (ms)", series: [["p50", "#1565c0"],
      ["p99", "#c62828"]] },
    { id: "lag", title: "lag (records): consumer groups, or a worker's partitions",
      series: [] }, // one series per group or partition, as they appear
  ];
  const PALETTE = ["#1565c0", "#2e7d32", "#ef6c00", "#6a1b9a", "#00838f", "#c62828"];

  // Axis ticks as 950, 12k, 3.4M: long numbers would not fit beside the plot.
  function compact(u, ticks) {
    return ticks.map((v) => {
      const a = Math.abs(v);
      if (a >= 1e9) return +(v / 1e9).toFixed(1) + "G";
      if (a >= 1e6) return +(v / 1e6).toFixed(1) + "M";
      if (a >= 1e4) return +(v / 1e3).toFixed(1) + "k";
      return +v.toFixed(3) + "";
    });
  }

  function chartWidth(el) {
    return Math.max(300, el.clientWidth - 16);
  }

  function makePlot(c) {
    const scales = [...new Set(c.names.map((s) => s[2]).filter(Boolean))];
    const axes = [{}, { scale: "y", size: 56, values: compact }].concat(scales.map((s) =>
      ({ scale: s, side: 1, size: 56, grid: { show: false }, label: s, values: compact })));
    const opts = {
      width: chartWidth(c.el),
      height: 190,
      scales: { x: { time: true } },
      series: [{}].concat(c.names.map(([label, stroke, scale]) =>
        ({ label, stroke, width: 2, scale: scale || "y" }))),
      axes,
    };
    if (c.plot) c.plot.destroy();
    c.plot = new uPlot(opts, c.data, c.box);
  }

  function setupCharts() {
    for (const def of CHARTS) {
      const el = document.createElement("div");
      el.className = "chart";
      el.id = "chart-" + def.id;
      el.innerHTML = "<h2></h2><div class=\"empty\"></div><div class=\"plot\"></div>";
      el.querySelector("h2").textContent = def.title;
      $("charts").appendChild(el);
      const c = { def, el, box: el.querySelector(".plot"), names: def.series.slice(), plot: null };
      c.data = [[]].concat(c.names.map(() => []));
      charts[def.id] = c;
      makePlot(c);
    }
    window.addEventListener("resize", () => {
      for (const c of Object.values(charts)) c.plot.setSize({ width: chartWidth(c.el), height: 190 });
    });
  }

  // Appends one point (x in seconds, ys by series label) to chart `id`, keeping POINTS.
  function push(id, x, ys) {
    const c = charts[id];
    const missing = Object.keys(ys).filter((k) => !c.names.some((s) => s[0] === k));
    if (missing.length) { // a new consumer group: a new series, with gaps before it
      for (const k of missing) {
        c.names.push([k, PALETTE[c.names.length % PALETTE.length]]);
        c.data.push(c.data[0].map(() => null));
      }
      makePlot(c);
    }
    c.data[0].push(x);
    c.names.forEach((s, i) => c.data[i + 1].push(ys[s[0]] === undefined ? null : ys[s[0]]));
    if (c.data[0].length > POINTS) c.data.forEach((a) => a.shift());
    c.plot.setData(c.data);
    c.el.querySelector(".empty").textContent = c.names.length ? "" : "nothing to show yet";
  }

  const pick = (o, path) => path.split(".").reduce((v, k) => (v == null ? undefined : v[k]), o);
  const num = (v) => (typeof v === "number" ? v : null);
  const ms = (s) => (s == null ? null : s * 1000);

  // ---- one shape for every role --------------------------------------------------------

  // /stats of `serve` (single node), `serve --role edge` and `ingestd worker` in one shape:
  // cumulative counters, and per-series maps for the charts that have one line per group or
  // partition. Absent figures are null: their lines stay empty.
  function view(s) {
    const v = {
      role: s.role || "single node", version: s.version, uptime: num(s.uptime_seconds),
      accepted: num(pick(s, "events.accepted")), duplicates: num(pick(s, "events.duplicates")),
      rejected: num(pick(s, "events.rejected")),
      window: num(pick(s, "dedupe.effective_window_seconds")),
      configured: num(pick(s, "dedupe.window_seconds")),
      floor: num(pick(s, "dedupe.window_floor_seconds")),
      belowFloor: pick(s, "dedupe.window_below_floor") === true,
      keys: { keys: num(pick(s, "dedupe.keys")) }, windows: {}, lags: {},
      storeBytes: num(pick(s, "dedupe.store_used_bytes")),
      batches: num(pick(s, "commit.batches")), batchEvents: num(pick(s, "commit.events")),
      fsyncs: num(pick(s, "commit.fsyncs")),
      fsyncMs: (pick(s, "commit.fsync_ms_avg") || 0) * (pick(s, "commit.fsyncs") || 0),
    };
    for (const g of s.groups || []) v.lags[g.name] = g.lag;
    sources(s, v);
    const failed = pick(s, "storage.failed") === true;
    v.storage = { text: failed ? "failed" : "ok", bad: failed,
      sub: (pick(s, "dedupe.store") || "") + ", " + fmt(pick(s, "storage.recoveries"), 0) +
        " recoveries" + (failed ? ": re-establishing from disk" : "") };
    if (s.role === "edge")
      v.storage = { text: "edge", bad: false, sub: "no local storage: the workers de-duplicate" };
    if (s.role === "worker") worker(s, v);
    return v;
  }

  // Each source's own window (--max-keys is a budget per source): a line per source in the
  // window chart once it has forgotten a key. (Its keys are in /stats: beside the total, one
  // busy source's line would hide the total's.)
  function sources(s, v) {
    for (const src of pick(s, "dedupe.sources") || [])
      if (typeof src.effective_window_seconds === "number")
        v.windows["source " + src.source] = src.effective_window_seconds / 3600;
  }

  // The worker: produced events are its accepted ones, malformed its rejected; keys, window and
  // lag per partition (the shortest window is the one a retry can fall out of).
  function worker(s, v) {
    const parts = s.partitions || [];
    v.accepted = num(pick(s, "events.produced"));
    v.rejected = num(pick(s, "events.malformed"));
    v.window = parts.length ? Math.min(...parts.map((p) => p.effective_window_seconds)) : null;
    v.keys = { keys: parts.reduce((n, p) => n + p.keys, 0) };
    for (const p of parts) {
      const name = "partition " + p.partition;
      v.keys[name] = p.keys;
      v.windows[name] = p.effective_window_seconds / 3600;
      v.lags[name] = p.lag;
    }
    v.storage = { text: s.ready ? "ready" : "not ready", bad: !s.ready,
      sub: parts.length + " partitions, " + fmt(pick(s, "store_errors"), 0) + " store errors" };
  }

  // Per-second values between two samples, into every chart.
  function draw(prev, cur) {
    const a = prev.view, b = cur.view, dt = (cur.t - prev.t) / 1000, x = cur.t / 1000;
    const d = (k) => (b[k] == null || a[k] == null ? null : b[k] - a[k]);
    const per = (k) => (d(k) == null ? null : d(k) / dt);
    const acc = d("accepted"), dup = d("duplicates");
    push("rates", x, { accepted: per("accepted"), duplicates: per("duplicates"),
      rejected: per("rejected") });
    push("dupratio", x, { "duplicates %": acc + dup > 0 ? (100 * dup) / (acc + dup) : null });
    const h = (sec) => (sec == null ? null : sec / 3600);
    // A floor of 0 is no floor (--window-floor off): no line for it.
    push("window", x, Object.assign({ effective: h(b.window), configured: h(b.configured),
      floor: b.floor ? h(b.floor) : null }, b.windows));
    push("keys", x, Object.assign({ "store MB": b.storeBytes == null ? null : b.storeBytes / 1e6 },
      b.keys));
    const nb = d("batches"), nf = d("fsyncs");
    push("commit", x, { "events/batch": nb > 0 ? d("batchEvents") / nb : null,
      "fsync avg ms": nf > 0 ? d("fsyncMs") / nf : null,
      "fsync p99 ms": ms(quantile(0.99, cur.fsync, prev.fsync)) });
    push("latency", x, { p50: ms(quantile(0.5, cur.req, prev.req)),
      p99: ms(quantile(0.99, cur.req, prev.req)) });
    push("lag", x, b.lags);
  }

  // ---- headline ------------------------------------------------------------------------

  function tile(id, text, value, sub, cls) {
    const el = $(id);
    el.textContent = text;
    el.dataset.value = value == null ? "" : String(value);
    el.className = "value" + (cls ? " " + cls : "");
    $(id + "-sub").textContent = sub || "";
  }

  function fmt(n, digits) {
    return n == null ? "–" : n.toLocaleString("en-US", { maximumFractionDigits: digits });
  }

  // The sample nearest HEADLINE_MS before `cur` (or the oldest one kept).
  function baseline(cur) {
    for (let i = samples.length - 2; i >= 0; i--)
      if (cur.t - samples[i].t >= HEADLINE_MS - PERIOD_MS / 4) return samples[i];
    return samples.length > 1 ? samples[0] : null;
  }

  function headline(cur) {
    const v = cur.view, base = baseline(cur);
    // Hours, as operators size windows; under an hour (a fresh start) also in s or min.
    const short = v.window == null || v.window >= 3600 ? ""
      : (v.window < 90 ? Math.round(v.window) + " s" : Math.round(v.window / 60) + " min") + "; ";
    tile("h-window", v.window == null ? "–" : (v.window / 3600).toFixed(2) + " h", v.window,
      short + (v.configured == null ? "" : "of " + fmt(v.configured / 3600, 2) + " h configured") +
      (v.floor ? ", floor " + fmt(v.floor / 3600, 2) + " h" : ""), v.belowFloor ? "bad" : "");
    let rate = null, ratio = null, dupRate = null, rejRate = null;
    if (base) {
      const f = base.view, dt = (cur.t - base.t) / 1000;
      rate = (v.accepted - f.accepted) / dt;
      dupRate = (v.duplicates - f.duplicates) / dt;
      rejRate = (v.rejected - f.rejected) / dt;
      const n = v.accepted - f.accepted + v.duplicates - f.duplicates;
      ratio = n > 0 ? (100 * (v.duplicates - f.duplicates)) / n : null;
    }
    tile("h-rate", fmt(rate, 0), rate == null ? null : rate.toFixed(3),
      rate == null ? "" : fmt(dupRate, 0) + " duplicates/s, " + fmt(rejRate, 0) + " rejected/s");
    const all = v.accepted + v.duplicates;
    tile("h-dup", ratio == null ? "–" : fmt(ratio, 2) + " %",
      ratio == null ? null : ratio.toFixed(4),
      all > 0 ? fmt((100 * v.duplicates) / all, 2) + " % since start" : "");
    tile("h-storage", v.storage.text, v.storage.text, v.storage.sub, v.storage.bad ? "bad" : "ok");
    $("h-window").dataset.t = String(cur.t);
    $("role").textContent = v.role;
    $("version").textContent = v.version ? "v" + v.version : "";
    $("uptime").textContent = v.uptime == null ? "" : "up " + (v.uptime < 3600
      ? Math.floor(v.uptime / 60) + " min" : fmt(v.uptime / 3600, 1) + " h");
  }

  // ---- the loop and the token ----------------------------------------------------------

  function status(text, ok) {
    $("status").textContent = text;
    $("status").className = "status " + (ok ? "ok" : "bad");
  }

  async function tick() {
    const started = Date.now();
    try {
      const cur = await sample();
      samples.push(cur);
      while (samples.length > 2 && cur.t - samples[1].t > HEADLINE_MS + 2 * PERIOD_MS)
        samples.shift();
      if (samples.length > 1) draw(samples[samples.length - 2], cur);
      headline(cur);
      window.ingestd.samples++;
      window.ingestd.last = cur.stats;
      status("live, updated " + new Date(cur.t).toLocaleTimeString(), true);
    } catch (e) {
      if (e instanceof AuthError) return askToken(true);
      status("cannot reach the server: " + e.message, false);
    }
    timer = setTimeout(tick, Math.max(0, PERIOD_MS - (Date.now() - started)));
  }

  function askToken(refused) {
    clearTimeout(timer);
    const had = sessionStorage.getItem(TOKEN_KEY);
    sessionStorage.removeItem(TOKEN_KEY);
    $("main").hidden = true;
    $("login").hidden = false;
    if (refused && had) $("login-why").textContent = "The server refused that token. Enter it again.";
    status("admin token needed", false);
    $("token").focus();
  }

  function start() {
    $("login").hidden = true;
    $("main").hidden = false;
    if (!Object.keys(charts).length) setupCharts();
    tick();
  }

  // ---- one messageId (GET /v1/events/{messageId}) ---------------------------------------

  // The verdict in a sentence, from the route's answer (README, "Looking up one messageId").
  function verdict(status, j) {
    if (status === 200)
      return ["seen at offset " + j.offset + ", received " + j.receivedAt +
              (j.partition !== undefined ? " (partition " + j.partition + ")" : ""), true];
    if (status === 404 && j.status === "unseen")
      return ["unseen: not inside the window, which starts " + (j.window_start || "(empty)"), false];
    if (status === 404 && j.status === "not_owned") return ["not here: " + j.reason, false];
    if (status === 404) return ["lookup needs the server's --admin-token", false];
    return [(j && j.error) || "HTTP " + status, false];
  }

  async function lookup() {
    const id = $("lookup-id").value;
    if (!id) return;
    const source = $("lookup-source").value.trim() || "default";
    const headers = {};
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (token) headers.Authorization = "Bearer " + token;
    const path = "v1/events/" + encodeURIComponent(id) + "?source=" + encodeURIComponent(source);
    let status = 0, j = null;
    try {
      const r = await fetch(PREFIX + path, { headers, cache: "no-store" });
      status = r.status;
      j = await r.json();
    } catch (e) {
      j = { error: "cannot reach the server: " + e.message };
    }
    if (status === 401) return askToken(true);
    const [text, ok] = verdict(status, j);
    $("lookup-verdict").textContent = text;
    $("lookup-verdict").className = "verdict " + (ok ? "ok" : "bad");
    $("lookup-out").textContent = JSON.stringify(j, null, 2);
    $("lookup-out").hidden = false;
    window.ingestd.lookups++;
  }

  window.ingestd = { samples: 0, last: null, charts, lookups: 0 }; // for tests and the curious
  $("lookup").addEventListener("submit", (ev) => {
    ev.preventDefault();
    lookup();
  });
  $("login").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const t = $("token").value.trim();
    if (!t) return;
    sessionStorage.setItem(TOKEN_KEY, t);
    $("token").value = "";
    start();
  });
  start();
})();
