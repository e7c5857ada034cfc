// xrdmon dashboard: plain JavaScript over the query API (/api/v1).
//
// Rule: every string that comes from the API (paths, user names, server
// names, app info, event payloads: all from packets anyone can send) goes
// into the page as text, through el() and textContent; never innerHTML.
'use strict';
(() => {
  const $ = (id) => document.getElementById(id);

  // --- state, kept in the URL's hash (permalinks) ---------------------------
  const defaults = { tab: 'health', range: '1h', from: '', to: '', refresh: 'auto', tz: 'utc', by: 'site', n: '8', order: 'bytes',
    user: '', path: '', server: '', site: '', partial: '' };
  const state = { ...defaults };
  const ranges = { '1h': 3600, '6h': 6 * 3600, '24h': 86400, '7d': 7 * 86400, '30d': 30 * 86400 };

  function readHash() {
    const p = new URLSearchParams(location.hash.slice(1));
    for (const k of Object.keys(defaults)) state[k] = p.has(k) ? p.get(k) : defaults[k];
    if (!(state.range in ranges) && state.range !== 'custom') state.range = defaults.range;
  }
  function writeHash() {
    const p = new URLSearchParams();
    for (const k of Object.keys(defaults)) if (state[k] !== defaults[k]) p.set(k, state[k]);
    const h = '#' + p.toString();
    if (location.hash !== h) history.replaceState(null, '', h === '#' ? location.pathname : h);
  }

  // window returns the chosen time range as Unix seconds.
  function window_() {
    if (state.range === 'custom' && state.from && state.to) {
      const f = Date.parse(state.from), t = Date.parse(state.to);
      if (!isNaN(f) && !isNaN(t) && t > f) return { from: Math.floor(f / 1000), to: Math.floor(t / 1000) };
    }
    const now = Math.floor(Date.now() / 1000);
    return { from: now - (ranges[state.range] || 3600), to: now };
  }

  // --- DOM helpers ---------------------------------------------------------
  // Bidirectional controls (U+061C, U+200E/F, U+202A-202E, U+2066-2069)
  // reorder the text around them: a path ending in "\u202Egnp.exe" reads
  // "exe.png". visible shows each as a mark ("<U+202E>") instead, as the
  // command line's table escapes them.
  const bidi = /[\u061C\u200E\u200F\u202A-\u202E\u2066-\u2069]/g;
  function visible(s) {
    return String(s).replace(bidi, (c) => '<U+' + c.codePointAt(0).toString(16).toUpperCase().padStart(4, '0') + '>');
  }
  // el builds an element; children that are not nodes become text nodes,
  // through visible (attribute values too).
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null) continue;
      if (k === 'class') e.className = v;
      else if (k === 'on') for (const [ev, fn] of Object.entries(v)) e.addEventListener(ev, fn);
      else if (k === 'data') for (const [dk, dv] of Object.entries(v)) e.dataset[dk] = String(dv);
      else e.setAttribute(k, visible(v));
    }
    for (const c of children.flat()) {
      if (c === undefined || c === null) continue;
      e.append(c instanceof Node ? c : document.createTextNode(visible(c)));
    }
    return e;
  }
  function table(id, head, rows) {
    const t = $(id);
    t.replaceChildren(
      el('thead', {}, el('tr', {}, head.map((h) => el('th', { class: h.num ? 'num' : null }, h.label)))),
      el('tbody', {}, rows.length ? rows : [el('tr', {}, el('td', { colspan: head.length }, 'nothing in this range'))]));
  }

  // --- formatting ------------------------------------------------------------
  function si(v, unit) {
    if (v === null || v === undefined || isNaN(v)) return '—';
    const a = Math.abs(v);
    const p = [[1e15, 'P'], [1e12, 'T'], [1e9, 'G'], [1e6, 'M'], [1e3, 'k']].find(([f]) => a >= f);
    const digits = (x) => (x >= 100 ? 0 : x >= 10 ? 1 : 2);
    if (!p) return (Number.isInteger(v) ? v : v.toFixed(digits(a))) + (unit ? ' ' + unit : '');
    return (v / p[0]).toFixed(digits(a / p[0])) + ' ' + p[1] + (unit || '');
  }
  // dur formats seconds in the unit a person reads: ms, s, min, h, d.
  function dur(v) {
    if (v === null || v === undefined || isNaN(v)) return '—';
    const a = Math.abs(v);
    if (a === 0) return '0 s';
    if (a < 1) return (v * 1000).toFixed(a < 0.01 ? 1 : 0) + ' ms';
    for (const [f, u] of [[86400, 'd'], [3600, 'h'], [60, 'min']]) if (a >= f) return +(v / f).toFixed(a / f >= 10 ? 0 : 1) + ' ' + u;
    return +v.toFixed(a >= 10 ? 0 : 1) + ' s';
  }
  // per formats an event rate: per second, or per minute or hour when
  // fewer than one a second (no "0.03 /s").
  function per(v) {
    if (v === null || v === undefined || isNaN(v)) return '—';
    const a = Math.abs(v);
    if (a === 0 || a >= 1) return si(v, '/s');
    if (a * 60 >= 1) return si(+(v * 60).toPrecision(3), '/min');
    return si(+(v * 3600).toPrecision(3), '/h');
  }
  // perTicks labels a rate axis in one unit, the one its largest tick
  // reads best in.
  function perTicks(vals) {
    const top = Math.max(...vals.map((v) => Math.abs(v || 0)));
    const [f, u] = top === 0 || top >= 1 ? [1, '/s'] : top * 60 >= 1 ? [60, '/min'] : [3600, '/h'];
    return vals.map((v) => (v === null ? '' : si(+(v * f).toPrecision(3), u)));
  }
  const fmt = {
    bytes: (v) => si(v, 'B'), rate: (v) => si(v, 'B/s'), count: (v) => si(v, ''), per,
    secs: dur,
    pct: (v) => (v === null || v === undefined || isNaN(v) ? '—' : (v * 100).toFixed(1) + ' %'),
    time: (s) => isoTime(s) + (tz() === 'utc' ? 'Z' : ''),
  };
  // tz is the time convention of every label: 'utc' (the default, as the
  // API and the logs) or 'local' (the browser's zone).
  const tz = () => (state.tz === 'local' ? 'local' : 'utc');
  // isoTime formats a time (ms, or anything Date takes) as
  // YYYY-MM-DD HH:MM:SS, 24-hour, in the chosen convention.
  function isoTime(ms) {
    const d = new Date(ms);
    if (isNaN(d)) return '—';
    if (tz() === 'utc') return d.toISOString().slice(0, 19).replace('T', ' ');
    const p = (n) => String(n).padStart(2, '0');
    return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
  }

  // --- API ---------------------------------------------------------------------
  const tokenKey = 'xrdmon-api-token';
  async function api(path, params) {
    const u = new URL('/api/v1/' + path, location.origin);
    for (const [k, v] of Object.entries(params || {})) if (v !== '' && v !== undefined && v !== null) u.searchParams.set(k, v);
    const headers = {};
    const tok = sessionStorage.getItem(tokenKey);
    if (tok) headers.Authorization = 'Bearer ' + tok;
    let r = await fetch(u, { headers });
    // The collector serves a few queries at once and answers the rest 503
    // with Retry-After: wait and ask again, a few times.
    for (let i = 0; r.status === 503 && r.headers.get('Retry-After') && i < 5; i++) {
      await new Promise((ok) => setTimeout(ok, 1000 * Math.min(Number(r.headers.get('Retry-After')) || 1, 10)));
      r = await fetch(u, { headers });
    }
    if (r.status === 401) {
      $('tokenbox').hidden = false;
      throw new Error('the API needs a token');
    }
    const j = await r.json().catch(() => ({}));
    if (!r.ok) throw new Error(path + ': ' + (j.error || r.statusText));
    return j;
  }
  function showError(e) {
    const box = $('error');
    if (!e) { box.hidden = true; return; }
    box.hidden = false;
    box.textContent = String(e.message || e);
  }

  // --- charts (uPlot) ------------------------------------------------------------
  // palette: 20 colours, distinct in light and dark themes; beyond them a
  // series gets a colour of its own from the golden angle (no two series of
  // one chart share a colour).
  const palette = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2', '#17becf', '#bcbd22', '#7f7f7f',
    '#aec7e8', '#ffbb78', '#98df8a', '#ff9896', '#c5b0d5', '#c49c94', '#f7b6d2', '#9edae5', '#dbdb8d', '#393b79'];
  const colour = (i) => (i < palette.length ? palette[i] : `hsl(${Math.round((i * 137.508) % 360)}, 65%, 50%)`);
  const translucent = (c) => (c.startsWith('#') ? c + 'b0' : c.replace('hsl(', 'hsla(').replace(')', ', 0.7)'));
  const charts = {};
  // chart draws series ({label, values}) over xs (Unix seconds) in the box
  // id. The x axis covers opts.range ({from, to}, Unix seconds): the time
  // the user chose, whatever the data cover. A null value is a gap, drawn
  // as one (never bridged): an outage never looks like traffic. stacked:
  // areas on top of each other. sum: the raw total the box keeps in
  // data-sum (for tests and tooltips), when given.
  function chart(id, xs, series, format, opts) {
    opts = opts || {};
    const box = $(id);
    if (charts[id]) { charts[id].destroy(); delete charts[id]; delete box.uplot; }
    box.replaceChildren();
    box.dataset.points = String(xs.length);
    box.dataset.series = String(series.length);
    if (opts.sum !== undefined) box.dataset.sum = String(opts.sum);
    delete box.dataset.xmin; delete box.dataset.xmax;
    if (!xs.length || !series.some((s) => s.values.some((v) => v !== null && v !== undefined))) {
      box.append(el('div', { class: 'empty' }, opts.empty || 'no data in this range'));
      return;
    }
    const css = getComputedStyle(document.documentElement);
    const muted = css.getPropertyValue('--muted').trim(), line = css.getPropertyValue('--line').trim();
    const raw = series.map((s) => s.values);
    let data = raw;
    if (opts.stacked) {
      // A gap in any series is a gap of the stack (null stays null).
      const acc = xs.map(() => 0);
      data = raw.map((vals) => vals.map((v, i) => (v === null || v === undefined || acc[i] === null ? (acc[i] = null) : (acc[i] += v))));
    }
    const order = opts.stacked ? series.map((_, i) => series.length - 1 - i) : series.map((_, i) => i);
    const useries = [{ value: (u, v) => (v === null || v === undefined ? '—' : fmt.time(v * 1000)) }].concat(order.map((i) => ({
      label: visible(series[i].label),
      stroke: colour(i),
      fill: opts.stacked ? translucent(colour(i)) : undefined,
      width: 1.5,
      spanGaps: false,
      points: { show: xs.length < 3 },
      value: (u, v, si_, di) => (di === null || di === undefined ? '—' : format(raw[i][di])),
    })));
    const r = opts.range;
    const axisFmt = opts.axis || format;
    const width = Math.max(300, box.clientWidth - 4);
    const u = new uPlot({
      width, height: 220,
      series: useries,
      scales: { x: { time: true, range: r ? () => [r.from, r.to] : undefined } },
      tzDate: (ts) => (tz() === 'utc' ? uPlot.tzDate(new Date(ts * 1e3), 'Etc/UTC') : new Date(ts * 1e3)),
      axes: [
        { stroke: muted, grid: { stroke: line, width: 1 }, ticks: { stroke: line }, values: timeTicks, space: 70 },
        { stroke: muted, grid: { stroke: line, width: 1 }, ticks: { stroke: line }, size: 84, values: (u, vals) => (axisFmt === per ? perTicks(vals) : vals.map(axisFmt)) },
      ],
      legend: { live: true },
      hooks: { setScale: [(u, key) => { if (key === 'x') { box.dataset.xmin = String(Math.round(u.scales.x.min)); box.dataset.xmax = String(Math.round(u.scales.x.max)); } }] },
    }, [xs].concat(order.map((i) => data[i])), box);
    charts[id] = u;
    box.uplot = u; // for tests and the console: the data and scales drawn
    box.dataset.xmin = String(Math.round(u.scales.x.min ?? (r ? r.from : xs[0])));
    box.dataset.xmax = String(Math.round(u.scales.x.max ?? (r ? r.to : xs[xs.length - 1])));
  }
  // timeTicks labels the x axis in 24-hour time (UTC, or local time when
  // chosen): the time of day, with the date where the day changes or the
  // ticks are days apart.
  function timeTicks(u, vals, axis, space, incr) {
    let prevDay = '';
    return vals.map((v) => {
      const iso = isoTime(v * 1000);
      const day = iso.slice(0, 10), hm = iso.slice(11, 16);
      const label = incr >= 86400 ? day.slice(5) : day !== prevDay ? day.slice(5) + ' ' + hm : hm;
      prevDay = day;
      return label;
    });
  }
  // grid returns every step (seconds) from the range's first bucket to its
  // last, so that a bucket the API does not send (nothing happened, or the
  // collector was down) has a place on the axis.
  function grid(w, step) {
    const xs = [];
    const n = Math.ceil((w.to - w.from) / step) + 1;
    if (n > 5000) return null;
    for (let t = Math.floor(w.from / step) * step; t < w.to; t += step) xs.push(t);
    return xs;
  }
  // align merges per-series points ({t, v}) onto one x axis: the grid
  // when given (missing points are null), else the union of their times.
  function align(list, xs0) {
    const xs = xs0 || [...new Set(list.flatMap((s) => s.points.map((p) => p.t)))].sort((a, b) => a - b);
    const pos = new Map(xs.map((x, i) => [x, i]));
    return { xs, series: list.map((s) => {
      const v = xs.map(() => null);
      for (const p of s.points) { const i = pos.get(p.t); if (i !== undefined) v[i] = p.v; }
      return { label: s.label, values: v };
    }) };
  }
  const secs = (iso) => Math.floor(Date.parse(iso) / 1000);

  // --- health ------------------------------------------------------------------
  async function loadVerdict(h) {
    const v = (h || await api('health', { from: '1m' })).keeping_up;
    const b = $('verdict');
    b.className = 'verdict ' + v.status;
    b.textContent = { ok: 'keeping up', warn: 'keeping up, with warnings', bad: 'NOT keeping up' }[v.status] || v.status;
    b.dataset.status = v.status;
    $('reasons').replaceChildren(...v.reasons.map((r) => el('li', { class: v.status }, r)));
    return v;
  }

  async function loadHealth() {
    const w = window_();
    const [h, st] = await Promise.all([api('health', { from: String(w.from) }), api('status')]);
    await loadVerdict(h);
    // The collector keeps its own samples (the last hours, across
    // restarts); show those in the chosen range, on the chosen axis.
    h.samples = h.samples.filter((s) => secs(s.time) <= w.to);
    const step = h.step_seconds || 10;
    const range = { from: w.from, to: w.to };
    // broken(k): samples k-1 and k are further apart than a few steps (the
    // collector was down, or restarted): nothing is drawn between them.
    const xs0 = h.samples.map((s) => secs(s.time));
    const broken = (k) => k > 0 && xs0[k] - xs0[k - 1] > 2.5 * step;
    // The axis: each sample, and a gap marker after the last one before a
    // break.
    const xs = [];
    const at = [];
    for (let k = 0; k < xs0.length; k++) {
      if (broken(k)) { xs.push(xs0[k - 1] + step); at.push(-1); }
      xs.push(xs0[k]); at.push(k);
    }
    const spread = (vals) => at.map((k) => (k < 0 ? null : vals[k]));
    const col = (name) => { const i = h.names.indexOf(name); return h.samples.map((s) => (i < 0 ? null : s.values[i])); };
    // delta: a counter's increase from the previous sample, null across a
    // break or where it went down (a counter reset at a restart): a reset
    // never draws a spike.
    const delta = (vals) => vals.map((v, k) => (k === 0 || v === null || vals[k - 1] === null || broken(k) || v < vals[k - 1] ? null : v - vals[k - 1]));
    const rate = (vals) => delta(vals).map((d, k) => (d === null || xs0[k] <= xs0[k - 1] ? null : d / (xs0[k] - xs0[k - 1])));
    const pick = (re) => h.names.filter((n) => re.test(n));
    const label = (n) => { const m = /\{(.*)\}$/.exec(n); return m ? m[1].replace(/^[a-z_]+="(.*)"$/, '$1') : n.replace(/^xrdmon_/, ''); };
    const rates = (names, lab) => names.map((n) => ({ label: lab ? lab(n) : label(n), values: spread(rate(col(n))) }));
    const levels = (names) => names.map((n) => ({ label: label(n), values: spread(col(n)) }));
    const present = (names) => names.filter((n) => h.names.includes(n));
    const inputs = present(['xrdmon_udp_packets_received_total', 'xrdmon_amqp_messages_received_total', 'xrdmon_file_packets_read_total']);
    // data-sum: the packets received over the samples shown.
    const received = inputs.reduce((acc, n) => acc + delta(col(n)).reduce((a, d) => a + (d || 0), 0), 0);
    const o = (extra) => ({ range, ...extra });
    chart('c-in', xs, rates(inputs,
      (n) => ({ xrdmon_udp_packets_received_total: 'UDP', xrdmon_amqp_messages_received_total: 'RabbitMQ', xrdmon_file_packets_read_total: 'files' })[n]), fmt.per, o({ sum: received }));
    chart('c-outcome', xs, rates(present(['xrdmon_packets_total{outcome="accounted"}', 'xrdmon_packets_total{outcome="rejected"}',
      'xrdmon_packets_lost_total', 'xrdmon_udp_kernel_drops_total']), (n) => (n.includes('outcome') ? label(n) : { xrdmon_packets_lost_total: 'lost (sequence gaps)', xrdmon_udp_kernel_drops_total: 'kernel drops' })[n] || label(n)), fmt.per, o());
    const rej = pick(/^xrdmon_packets_rejected_total\{/).filter((n) => col(n).some((v) => v > 0));
    chart('c-rejected', xs, rates(rej), fmt.per, o({ empty: 'nothing rejected in this range' }));
    chart('c-backlog', xs, levels(pick(/^xrdmon_sink_backlog_records\{/)), fmt.count, o());
    chart('c-state', xs, levels(pick(/^xrdmon_state_bytes(\{|$)/).filter((n) => n.includes('{') || pick(/^xrdmon_state_bytes\{/).length === 0)), fmt.bytes, o());
    const hits = rate(col('xrdmon_dns_cache_hits_total')), misses = rate(col('xrdmon_dns_cache_misses_total'));
    chart('c-dns', xs, [
      { label: 'hit ratio', values: spread(hits.map((v, k) => (v === null || misses[k] === null || v + misses[k] === 0 ? null : v / (v + misses[k])))) },
    ], fmt.pct, o({ empty: h.names.includes('xrdmon_dns_cache_hits_total') ? 'no lookups in this range' : 'reverse DNS is off (dns.enabled)' }));
    const rows = [
      ['running since', fmt.time(st.started)],
      ['packets handled', st.packets.handled], ['accounted', st.packets.accounted], ['rejected', st.packets.rejected],
      ['lost (sequence gaps)', st.packets.lost], ['duplicates', st.packets.duplicates], ['reordered', st.packets.reordered],
      ['records complete', st.records.complete], ['records partial', st.records.partial], ['events', st.events],
      ['servers', st.state.servers], ['sessions', st.state.sessions], ['open files', st.state.open_files],
      ['state bytes', fmt.bytes(st.state.bytes)], ['store last sequence', st.store.last_seq],
    ];
    for (const [name, s] of Object.entries(st.store.sinks || {})) rows.push(['backlog of ' + name, s.backlog]);
    $('t-status').replaceChildren(...rows.map(([k, v]) => el('tr', {}, el('th', {}, k), el('td', { data: { key: k } }, typeof v === 'number' ? v.toLocaleString('en') : v))));
  }

  // --- traffic -------------------------------------------------------------------
  async function loadTraffic() {
    const w = window_();
    const q = { from: String(w.from), to: String(w.to) };
    const [total, by] = await Promise.all([
      api('rollups', q),
      api('rollups', { ...q, by: state.by, limit: String(Math.min(30, Math.max(1, +state.n || 8))) }),
    ]);
    const local = await api('rollups', { ...q, by: 'locality' }).catch(() => ({ series: [] }));
    const step = { '1m': 60, '1h': 3600, '1d': 86400 }[total.step] || 60;
    const t = (total.series[0] || { points: [], total: {} });
    // Every bucket of the range has a place: one the API does not send
    // had no transfer end in it (zero), and an outage shows as zero, never
    // as a ramp between the buckets around it.
    const xs = grid(w, step) || t.points.map((p) => secs(p.time));
    const pos = new Map(xs.map((x, i) => [x, i]));
    const at = (points, get, none) => {
      const v = xs.map(() => none);
      for (const p of points) { const i = pos.get(secs(p.time)); if (i !== undefined) v[i] = get(p); }
      return v;
    };
    const range = { from: w.from, to: w.to };
    const tot = t.total || {};
    const read = (p) => (p.read_bytes || 0) + (p.readv_bytes || 0);
    $('traffic-total').replaceChildren(el('span', {
      id: 'traffic-sums', data: { read: read(tot), write: tot.write_bytes || 0, transfers: tot.transfers || 0, partial: tot.partial || 0 },
    }, `${fmt.bytes(read(tot))} read, ${fmt.bytes(tot.write_bytes || 0)} written, ${(tot.transfers || 0).toLocaleString('en')} transfers, ` +
       `${(tot.partial || 0).toLocaleString('en')} partial, ${(tot.users || 0).toLocaleString('en')} users (step ${total.step})`));
    // stacked: the top series, then "other" (the total minus them).
    const stack = (get) => {
      const list = by.series.map((s) => ({ label: s.keys.join(' / ') || '(none)', values: at(s.points, get, 0) }));
      const all = at(t.points, get, 0);
      const other = all.map((v, i) => Math.max(0, v - list.reduce((a, s) => a + s.values[i], 0)));
      if (other.some((v) => v > 0)) list.push({ label: 'other', values: other });
      return list.map((s) => ({ label: s.label, values: s.values.map((v) => v / step) }));
    };
    chart('c-read', xs, stack(read), fmt.rate, { stacked: true, sum: read(tot), range });
    chart('c-write', xs, stack((p) => p.write_bytes || 0), fmt.rate, { stacked: true, sum: tot.write_bytes || 0, range });
    chart('c-xfers', xs, [
      { label: 'complete', values: at(t.points, (p) => (p.transfers || 0) / step, 0) },
      { label: 'partial', values: at(t.points, (p) => (p.partial || 0) / step, 0) },
    ], fmt.per, { stacked: true, sum: (tot.transfers || 0) + (tot.partial || 0), range });
    const reasons = [...new Set(t.points.flatMap((p) => Object.keys(p.partial_by || {})))].sort();
    chart('c-partial', xs, reasons.map((r) => ({ label: r, values: at(t.points, (p) => ((p.partial_by || {})[r] || 0) / step, 0) })), fmt.per,
      { stacked: true, empty: 'no partial transfers in this range', range });
    // Quantiles exist only where transfers ended: a gap elsewhere.
    const q3 = (key, scale) => ['p50', 'p90', 'p99'].map((q) => ({ label: q, values: at(t.points, (p) => (p[key] && p[key][q] !== undefined ? p[key][q] * scale : null), null) }));
    chart('c-duration', xs, q3('duration_ms', 0.001), fmt.secs, { range });
    chart('c-size', xs, q3('size_bytes', 1), fmt.bytes, { range });
    const lx = align(local.series.map((s) => ({ label: s.keys.join(' / ') || '(none)', points: s.points.map((p) => ({ t: secs(p.time), v: read(p) / step })) })), xs);
    for (const s of lx.series) s.values = s.values.map((v) => v ?? 0);
    chart('c-local', lx.xs, lx.series, fmt.rate, { stacked: true, range });
  }

  // --- top ----------------------------------------------------------------------------
  const topTables = [['user', 'top-user', 'user'], ['dir', 'top-dir', 'path'], ['domain', 'top-domain', null], ['server', 'top-server', 'server']];
  async function loadTop() {
    const w = window_();
    await Promise.all(topTables.map(async ([by, id, filter]) => {
      const a = await api('top', { by, from: String(w.from), to: String(w.to), order: state.order, n: '15' });
      const rows = a.rows.map((r) => {
        const name = r.keys.join(' / ');
        const cell = filter ? el('a', { class: 'link', on: { click: () => { state.tab = 'transfers'; state.user = ''; state.path = ''; state.server = ''; state.site = ''; state[filter] = name; render(); } } }, name || '(none)') : (name || '(none)');
        const rd = (r.read_bytes || 0) + (r.readv_bytes || 0);
        return el('tr', { data: { key: name } },
          el('td', { title: name, class: 'name' }, cell),
          el('td', { class: 'num' }, fmt.bytes(rd)), el('td', { class: 'num' }, fmt.bytes(r.write_bytes || 0)),
          el('td', { class: 'num' }, (r.transfers || 0).toLocaleString('en')), el('td', { class: 'num' }, (r.partial || 0).toLocaleString('en')),
          el('td', { class: 'num' }, (r.users || 0).toLocaleString('en')),
          el('td', { class: 'num' }, r.duration_ms_sum ? fmt.rate((rd + (r.write_bytes || 0)) / (r.duration_ms_sum / 1000)) : '—'));
      });
      table(id, [{ label: by }, { label: 'read', num: 1 }, { label: 'written', num: 1 }, { label: 'transfers', num: 1 }, { label: 'partial', num: 1 }, { label: 'users', num: 1 }, { label: 'mean rate', num: 1 }], rows);
    }));
  }

  // --- transfers ------------------------------------------------------------------
  let nextCursor = '';
  let shown = [];
  let total = { n: 0, complete: true };
  // exportCSV points the CSV link at the records shown (exact values, the
  // record's JSON names). A cell a spreadsheet would take for a formula
  // (=, +, -, @ first) is quoted with a leading apostrophe: strings come
  // from packets.
  const csvColumns = ['end', 'start', 'server_host', 'server_ip', 'site', 'user', 'vo', 'client_host', 'protocol', 'path', 'read_bytes', 'readv_bytes', 'write_bytes', 'reason', 'record_id'];
  let csvURL = null;
  function exportCSV() {
    const cell = (v) => {
      let s = v === undefined || v === null ? '' : String(v);
      if (/^[=+\-@\t\r]/.test(s) && typeof v === 'string') s = "'" + s;
      return /[",\n\r]/.test(s) ? '"' + s.replace(/"/g, '""') + '"' : s;
    };
    const text = [csvColumns.join(',')].concat(shown.map((r) => csvColumns.map((c) => cell(r[c])).join(','))).join('\r\n') + '\r\n';
    if (csvURL) URL.revokeObjectURL(csvURL);
    csvURL = URL.createObjectURL(new Blob([text], { type: 'text/csv' }));
    const a = $('export');
    a.href = csvURL;
    a.csv = text; // for tests
  }
  function recordQuery() {
    const w = window_();
    return { from: String(w.from), to: String(w.to), user: state.user, path_prefix: state.path, server: state.server, site: state.site,
      partial: state.partial ? 'true' : '', limit: '50' };
  }
  async function loadTransfers(more) {
    for (const [k, id] of [['user', 'q-user'], ['path', 'q-path'], ['server', 'q-server'], ['site', 'q-site']]) $(id).value = state[k];
    $('q-partial').checked = !!state.partial;
    const a = await api('records', { ...recordQuery(), cursor: more ? nextCursor : '', count: more ? '' : 'true' });
    nextCursor = a.next || '';
    shown = more ? shown.concat(a.records) : a.records;
    if (!more) total = { n: a.total || a.records.length, complete: !a.next || a.total_complete };
    $('more').hidden = !nextCursor;
    $('rec-count').dataset.total = String(total.n);
    $('rec-count').textContent = `(${shown.length.toLocaleString('en')} of ${total.complete ? '' : 'more than '}${total.n.toLocaleString('en')})`;
    exportCSV();
    const rows = shown.map((r, i) => el('tr', { data: { index: i }, on: { click: (ev) => showRecord(i, ev.currentTarget) } },
      el('td', {}, fmt.time(r.end)), el('td', { title: r.user || '', class: 'short' }, r.user || ''),
      el('td', { title: r.server_host || r.server_ip, class: 'short' }, r.server_host || r.server_ip), el('td', { title: r.path || '', class: 'name' }, r.path || ''),
      el('td', { class: 'num' }, fmt.bytes((r.read_bytes || 0) + (r.readv_bytes || 0))), el('td', { class: 'num' }, fmt.bytes(r.write_bytes || 0)),
      el('td', { class: 'num' }, fmt.secs((Date.parse(r.end) - Date.parse(r.start)) / 1000)), el('td', {}, r.reason || '')));
    table('records', [{ label: 'end' + (tz() === 'utc' ? ' (UTC)' : '') }, { label: 'user' }, { label: 'server' }, { label: 'path' }, { label: 'read', num: 1 }, { label: 'written', num: 1 }, { label: 'duration', num: 1 }, { label: 'partial' }], rows);
    $('detail-panel').hidden = true;
  }
  function showRecord(i, tr) {
    for (const r of $('records').querySelectorAll('tr.selected')) r.classList.remove('selected');
    if (tr) tr.classList.add('selected');
    const r = shown[i];
    $('detail-panel').hidden = false;
    $('detail').replaceChildren(...Object.entries(r).map(([k, v]) =>
      el('tr', {}, el('th', {}, k), el('td', { data: { field: k } }, typeof v === 'object' ? JSON.stringify(v) : String(v)))));
  }

  // --- servers ------------------------------------------------------------------------
  // ago says how long before now t (ISO) was, in the readable unit.
  const ago = (t, now) => (t ? dur(Math.max(0, (now - Date.parse(t)) / 1000)) + ' ago' : '—');
  async function loadHeard() {
    const a = await api('servers').catch((e) => { if (/no server activity/.test(String(e))) return null; throw e; });
    if (!a) { table('t-heard', [{ label: 'server' }], []); return; }
    const now = Date.now();
    const streams = ['map', 'fstream', 'gstream', 'trace', 'redir', 'summary'];
    // At most 500 rows (silent ones come first): a federation's thousands
    // of servers are in /api/v1/servers.
    const rowsMax = 500;
    $('heard-count').textContent = `(${a.servers.length.toLocaleString('en')} servers, ${a.silent} silent` +
      (a.servers.length > rowsMax ? `; the first ${rowsMax} shown)` : ')');
    table('t-heard', [{ label: 'server' }, { label: 'site' }, { label: 'state' }, { label: 'last heard', num: 1 }, { label: 'usual interval', num: 1 },
      { label: 'open files', num: 1 }, { label: 'lost packets', num: 1 }].concat(streams.map((s) => ({ label: s, num: 1 }))),
    a.servers.slice(0, rowsMax).map((s) => el('tr', { class: s.silent ? 'silent' : null, data: { key: s.server_ip, silent: s.silent } },
      el('td', { class: 'name', title: s.server_ip }, s.host || s.server_ip), el('td', { class: 'short' }, s.site || ''),
      el('td', {}, s.silent ? 'SILENT' : 'ok'),
      el('td', { class: 'num', title: fmt.time(s.last_heard) }, ago(s.last_heard, now)),
      el('td', { class: 'num' }, s.usual_interval_seconds ? dur(s.usual_interval_seconds) : '—'),
      el('td', { class: 'num' }, (s.open_files || 0).toLocaleString('en')),
      el('td', { class: 'num', data: { lost: s.lost_packets || 0 } }, (s.lost_packets || 0).toLocaleString('en')),
      streams.map((k) => el('td', { class: 'num', title: s.heard[k] ? fmt.time(s.heard[k]) : 'never' }, s.heard[k] ? ago(s.heard[k], now) : '—')))));
  }
  async function loadServers() {
    await loadHeard();
    const w = window_();
    const q = { from: String(w.from), to: String(w.to) };
    const [sum, act] = await Promise.all([
      api('summary', { ...q, name: ['link.num', 'sched.threads', 'link.in', 'link.out', 'xrootd.ops.open', 'xrootd.ops.rd', 'xrootd.ops.wr',
        'xrootd.err', 'ofs.err'].concat([0, 1, 2, 3].flatMap((i) => [`oss.paths.${i}.free`, `oss.space.${i}.usg`])).join(',') }),
      api('activity', q),
    ]);
    const per = (name, get) => align((sum.servers || []).map((s) => {
      const ser = (s.series || []).filter((x) => name.includes(x.name));
      const pts = new Map();
      for (const x of ser) for (const p of x.points) { const t = secs(p.time); pts.set(t, (pts.get(t) || 0) + (get(p) || 0)); }
      return { label: s.src || s.server_ip, points: [...pts].map(([t, v]) => ({ t, v })) };
    }).filter((s) => s.points.length), sgrid);
    // One bucket per step of the range: a server that sent no summary in a
    // bucket has a gap there.
    const sgrid = grid(w, { '1m': 60, '1h': 3600, '1d': 86400 }[sum.step] || 60);
    const range = { from: w.from, to: w.to };
    const c = per(['link.num'], (p) => p.last); chart('c-conn', c.xs, c.series, fmt.count, { range });
    const th = per(['sched.threads'], (p) => p.last); chart('c-threads', th.xs, th.series, fmt.count, { range });
    // data-sum of a counter chart: its increase over the range (the sum of
    // the buckets' deltas), as the servers' own counters say.
    const deltas = (names) => (sum.servers || []).reduce((a, s) => a + (s.series || []).filter((x) => names.includes(x.name))
      .reduce((b, x) => b + x.points.reduce((c, p) => c + (p.delta || 0), 0), 0), 0);
    const li = per(['link.in'], (p) => p.rate); chart('c-link-in', li.xs, li.series, fmt.rate, { range, sum: deltas(['link.in']) });
    const lk = per(['link.out'], (p) => p.rate); chart('c-link', lk.xs, lk.series, fmt.rate, { range, sum: deltas(['link.out']) });
    // Operations by kind, summed over the servers.
    let opsX = [];
    const ops = [['xrootd.ops.open', 'open'], ['xrootd.ops.rd', 'read'], ['xrootd.ops.wr', 'write']].map(([n, label]) => {
      const one = per([n], (p) => p.rate);
      opsX = one.xs;
      return { label, values: one.xs.map((_, i) => one.series.reduce((a, s) => (s.values[i] === null ? a : (a ?? 0) + s.values[i]), null)) };
    });
    chart('c-ops', opsX, ops, fmt.per, { range, sum: deltas(['xrootd.ops.open']), empty: 'no operation counters in the summaries' });
    const er = per(['xrootd.err', 'ofs.err'], (p) => p.rate);
    chart('c-err', er.xs, er.series, fmt.per, { range, sum: deltas(['xrootd.err', 'ofs.err']), empty: 'no error counters in the summaries' });
    const dk = per(['oss.paths.0.free', 'oss.paths.1.free', 'oss.paths.2.free', 'oss.paths.3.free'], (p) => p.last);
    chart('c-disk', dk.xs, dk.series, fmt.bytes, { range, empty: 'no oss.paths in the summaries (xrd.report … all)' });
    // Space used (oss.space usg): on an XCache, the cache's disk.
    const sp = per(['oss.space.0.usg', 'oss.space.1.usg', 'oss.space.2.usg', 'oss.space.3.usg'], (p) => p.last);
    chart('c-space', sp.xs, sp.series, fmt.bytes, { range, empty: 'no oss.space in the summaries (xrd.report … all)' });
    // The tables: sums over every event of the range, made by the
    // collector (/activity); "newest" only where it had to stop.
    const note = act.complete ? '' : ` (the newest ${act.events.toLocaleString('en')} events)`;
    const n = (v) => el('td', { class: 'num' }, (v || 0).toLocaleString('en'));
    const b = (v) => el('td', { class: 'num' }, fmt.bytes(v || 0));
    table('t-cache', [{ label: 'cache' + note }, { label: 'files', num: 1 }, { label: 'hit', num: 1 }, { label: 'miss', num: 1 }, { label: 'bypass', num: 1 }, { label: 'hit ratio', num: 1 }],
      act.caches.map((o) => el('tr', { data: { key: o.server } }, el('td', { class: 'name', title: o.server }, o.server), n(o.files), b(o.hit_bytes), b(o.miss_bytes), b(o.bypass_bytes),
        el('td', { class: 'num' }, fmt.pct(o.hit_bytes / ((o.hit_bytes + o.miss_bytes + o.bypass_bytes) || NaN))))));
    table('t-tpc', [{ label: 'server' + note }, { label: 'copies', num: 1 }, { label: 'failed', num: 1 }, { label: 'bytes', num: 1 }, { label: 'mean rate', num: 1 }],
      act.copies.map((o) => el('tr', { data: { key: o.server } }, el('td', { class: 'name', title: o.server }, o.server), n(o.copies), n(o.failed), b(o.bytes),
        el('td', { class: 'num' }, o.seconds ? fmt.rate(o.timed_bytes / o.seconds) : '—'))));
    const rd = act.redirected;
    const mean = (v) => (rd.transfers ? v / rd.transfers : null);
    const rows = act.redirectors.map((o) => el('tr', { data: { key: o.server } }, el('td', { class: 'name', title: o.server }, o.server), n(o.redirects), n(o.targets), el('td', {}, ''), el('td', {}, '')));
    rows.push(el('tr', { data: { key: 'delay' } },
      el('td', {}, 'transfers redirected' + (rd.records_complete ? '' : ` (of the newest ${rd.records_scanned.toLocaleString('en')})`)), n(rd.transfers),
      el('td', { class: 'num' }, rd.transfers ? 'hops ' + mean(rd.hops).toFixed(2) : '—'),
      el('td', { class: 'num' }, rd.transfers ? 'delay ≥ ' + fmt.secs(mean(rd.delay_ms) / 1000) : '—'),
      el('td', { class: 'num' }, rd.transfers ? '≤ ' + fmt.secs(mean(rd.delay_max_ms) / 1000) : '—')));
    table('t-redirect', [{ label: 'redirector' + note }, { label: 'redirects', num: 1 }, { label: 'targets', num: 1 }, { label: 'mean' }, { label: '' }], rows);
  }

  // --- wiring ----------------------------------------------------------------------------
  const loaders = { health: loadHealth, traffic: loadTraffic, top: loadTop, transfers: () => loadTransfers(false), servers: loadServers };
  let timer = null;
  let seq = 0;
  async function render() {
    writeHash();
    for (const a of document.querySelectorAll('#tabs a')) a.classList.toggle('active', a.dataset.tab === state.tab);
    for (const s of document.querySelectorAll('section.tab')) s.hidden = s.id !== state.tab;
    $('range').value = state.range;
    $('custom').hidden = state.range !== 'custom';
    $('refresh').value = state.refresh;
    $('tz').value = tz();
    $('by').value = state.by;
    $('n').value = state.n;
    $('order').value = state.order;
    const my = ++seq;
    document.body.dataset.loading = 'true';
    try {
      await (loaders[state.tab] || loadHealth)();
      if (state.tab !== 'health') await loadVerdict().catch(() => {});
      showError(null);
      $('updated').textContent = 'updated ' + fmt.time(new Date().toISOString());
    } catch (e) {
      showError(e);
    } finally {
      // data-render: the number of the last finished render, for tests
      // and scripts that wait for the page (body[data-loading] is true
      // while one runs).
      if (my === seq) { document.body.dataset.loading = 'false'; document.body.dataset.render = String(my); }
    }
    clearInterval(timer);
    const every = refreshSeconds();
    document.body.dataset.refresh = String(every);
    if (every > 0) timer = setInterval(render, every * 1000);
  }

  // refreshSeconds: the auto-refresh period; "auto" refreshes ranges up
  // to six hours that end now every 30 s, and leaves longer or custom
  // ones (which do not move) alone.
  function refreshSeconds() {
    if (state.refresh === 'auto') return state.range !== 'custom' && ranges[state.range] <= 6 * 3600 ? 30 : 0;
    return +state.refresh > 0 ? +state.refresh : 0;
  }
  function toLocalInput(unix) { return new Date(unix * 1000).toISOString().slice(0, 16); }
  function init() {
    const theme = localStorage.getItem('xrdmon-theme') || (matchMedia('(prefers-color-scheme: dark)').matches ? 'dark' : 'light');
    document.documentElement.dataset.theme = theme;
    readHash();
    for (const a of document.querySelectorAll('#tabs a')) a.addEventListener('click', (e) => { e.preventDefault(); state.tab = a.dataset.tab; render(); });
    $('range').addEventListener('change', () => {
      state.range = $('range').value;
      if (state.range === 'custom') {
        const w = window_();
        $('from').value = state.from ? state.from.slice(0, 16) : toLocalInput(w.from);
        $('to').value = state.to ? state.to.slice(0, 16) : toLocalInput(w.to);
        $('custom').hidden = false;
        return;
      }
      state.from = state.to = '';
      render();
    });
    $('apply').addEventListener('click', () => { state.from = $('from').value + ':00Z'; state.to = $('to').value + ':00Z'; render(); });
    if (state.range === 'custom') { $('from').value = state.from.slice(0, 16); $('to').value = state.to.slice(0, 16); }
    $('refresh').addEventListener('change', () => { state.refresh = $('refresh').value; render(); });
    $('tz').addEventListener('change', () => { state.tz = $('tz').value; render(); });
    $('by').addEventListener('change', () => { state.by = $('by').value; render(); });
    $('n').addEventListener('change', () => { state.n = $('n').value; render(); });
    $('order').addEventListener('change', () => { state.order = $('order').value; render(); });
    $('search').addEventListener('submit', (e) => {
      e.preventDefault();
      state.user = $('q-user').value.trim(); state.path = $('q-path').value.trim();
      state.server = $('q-server').value.trim(); state.site = $('q-site').value.trim();
      state.partial = $('q-partial').checked ? '1' : '';
      render();
    });
    $('q-clear').addEventListener('click', () => { state.user = state.path = state.server = state.site = state.partial = ''; render(); });
    $('more').addEventListener('click', () => loadTransfers(true).catch(showError));
    $('theme').addEventListener('click', () => {
      const t = document.documentElement.dataset.theme === 'dark' ? 'light' : 'dark';
      document.documentElement.dataset.theme = t;
      localStorage.setItem('xrdmon-theme', t);
      render();
    });
    $('tokenform').addEventListener('submit', (e) => {
      e.preventDefault();
      sessionStorage.setItem(tokenKey, $('token').value);
      $('tokenbox').hidden = true;
      render();
    });
    window.addEventListener('hashchange', () => { readHash(); render(); });
    let resize = null;
    window.addEventListener('resize', () => { clearTimeout(resize); resize = setTimeout(render, 300); });
    render();
  }
  init();
})();
