// xrdmon dashboard: plain JavaScript over the query API (/api/v1).
//
// Rule: every string that comes from the API (paths, user names, server
// names, app info, event payloads: all from packets anyone can send) goes
// into the page as text, through el() and textContent; never innerHTML.
'use strict';
(() => {
  const $ = (id) => document.getElementById(id);

  // --- state, kept in the URL's hash (permalinks) ---------------------------
  const defaults = { tab: 'health', range: '1h', from: '', to: '', refresh: '0', by: 'site', order: 'bytes',
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
  const fmt = {
    bytes: (v) => si(v, 'B'), rate: (v) => si(v, 'B/s'), count: (v) => si(v, ''), per: (v) => si(v, '/s'),
    secs: (v) => (v === null || v === undefined ? '—' : v < 1 ? (v * 1000).toFixed(0) + ' ms' : si(v, 's')),
    pct: (v) => (v === null || v === undefined || isNaN(v) ? '—' : (v * 100).toFixed(1) + ' %'),
    time: (s) => new Date(s).toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z'),
  };

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
  const palette = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2', '#17becf', '#bcbd22', '#7f7f7f'];
  const charts = {};
  // chart draws series ({label, values}) over xs (Unix seconds) in the box
  // id. stacked: areas on top of each other. sum: the raw total the box
  // keeps in data-sum (for tests and tooltips), when given.
  function chart(id, xs, series, format, opts) {
    opts = opts || {};
    const box = $(id);
    if (charts[id]) { charts[id].destroy(); delete charts[id]; }
    box.replaceChildren();
    box.dataset.points = String(xs.length);
    box.dataset.series = String(series.length);
    if (opts.sum !== undefined) box.dataset.sum = String(opts.sum);
    if (!xs.length || !series.some((s) => s.values.some((v) => v !== null && v !== undefined))) {
      box.append(el('div', { class: 'empty' }, opts.empty || 'no data in this range'));
      return;
    }
    const css = getComputedStyle(document.documentElement);
    const muted = css.getPropertyValue('--muted').trim(), line = css.getPropertyValue('--line').trim();
    const raw = series.map((s) => s.values);
    let data = raw;
    if (opts.stacked) {
      const acc = xs.map(() => 0);
      data = raw.map((vals) => vals.map((v, i) => (acc[i] += v || 0)));
    }
    const order = opts.stacked ? series.map((_, i) => series.length - 1 - i) : series.map((_, i) => i);
    const useries = [{}].concat(order.map((i) => ({
      label: visible(series[i].label),
      stroke: palette[i % palette.length],
      fill: opts.stacked ? palette[i % palette.length] + 'b0' : undefined,
      width: 1.5,
      spanGaps: !opts.stacked,
      value: (u, v, si_, di) => (di === null || di === undefined ? '—' : format(raw[i][di])),
    })));
    const u = new uPlot({
      width: Math.max(300, box.clientWidth - 4), height: 220,
      series: useries,
      scales: { x: { time: true } },
      tzDate: (ts) => uPlot.tzDate(new Date(ts * 1e3), 'Etc/UTC'),
      axes: [
        { stroke: muted, grid: { stroke: line, width: 1 }, ticks: { stroke: line } },
        { stroke: muted, grid: { stroke: line, width: 1 }, ticks: { stroke: line }, size: 84, values: (u, vals) => vals.map(format) },
      ],
      legend: { live: true },
    }, [xs].concat(order.map((i) => data[i])), box);
    charts[id] = u;
  }
  // align merges per-series points ({time, value}) onto one x axis.
  function align(list) {
    const xs = [...new Set(list.flatMap((s) => s.points.map((p) => p.t)))].sort((a, b) => a - b);
    const pos = new Map(xs.map((x, i) => [x, i]));
    return { xs, series: list.map((s) => {
      const v = xs.map(() => null);
      for (const p of s.points) v[pos.get(p.t)] = p.v;
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
    const from = Math.max(w.from, w.to - 3600);
    const [h, st] = await Promise.all([api('health', { from: String(from) }), api('status')]);
    await loadVerdict(h);
    // The collector keeps the last hour of its own samples; show those in
    // the chosen range.
    h.samples = h.samples.filter((s) => secs(s.time) <= w.to);
    const xs = h.samples.map((s) => secs(s.time));
    const col = (name) => { const i = h.names.indexOf(name); return h.samples.map((s) => (i < 0 ? null : s.values[i])); };
    const rate = (vals) => vals.map((v, k) => {
      if (k === 0 || v === null || vals[k - 1] === null) return null;
      const dt = xs[k] - xs[k - 1];
      return dt > 0 ? Math.max(0, v - vals[k - 1]) / dt : null;
    });
    const pick = (re) => h.names.filter((n) => re.test(n));
    const label = (n) => { const m = /\{(.*)\}$/.exec(n); return m ? m[1].replace(/^[a-z_]+="(.*)"$/, '$1') : n.replace(/^xrdmon_/, ''); };
    const rs = xs.slice(1);
    const rates = (names, lab) => names.map((n) => ({ label: lab ? lab(n) : label(n), values: rate(col(n)).slice(1) }));
    const present = (names) => names.filter((n) => h.names.includes(n));
    const inputs = present(['xrdmon_udp_packets_received_total', 'xrdmon_amqp_messages_received_total', 'xrdmon_file_packets_read_total']);
    // data-sum: the packets received over the samples shown.
    const received = inputs.reduce((acc, n) => { const v = col(n).filter((x) => x !== null); return acc + (v.length ? v[v.length - 1] - v[0] : 0); }, 0);
    chart('c-in', rs, rates(inputs,
      (n) => ({ xrdmon_udp_packets_received_total: 'UDP', xrdmon_amqp_messages_received_total: 'RabbitMQ', xrdmon_file_packets_read_total: 'files' })[n]), fmt.per, { sum: received });
    chart('c-outcome', rs, rates(present(['xrdmon_packets_total{outcome="accounted"}', 'xrdmon_packets_total{outcome="rejected"}',
      'xrdmon_packets_lost_total', 'xrdmon_udp_kernel_drops_total']), (n) => (n.includes('outcome') ? label(n) : { xrdmon_packets_lost_total: 'lost (sequence gaps)', xrdmon_udp_kernel_drops_total: 'kernel drops' })[n] || label(n)), fmt.per);
    const rej = pick(/^xrdmon_packets_rejected_total\{/).filter((n) => col(n).some((v) => v > 0));
    chart('c-rejected', rs, rates(rej), fmt.per, { empty: 'nothing rejected in this range' });
    chart('c-backlog', xs, pick(/^xrdmon_sink_backlog_records\{/).map((n) => ({ label: label(n), values: col(n) })), fmt.count);
    chart('c-state', xs, pick(/^xrdmon_state_bytes(\{|$)/).filter((n) => n.includes('{') || pick(/^xrdmon_state_bytes\{/).length === 0)
      .map((n) => ({ label: label(n), values: col(n) })), fmt.bytes);
    const hits = rate(col('xrdmon_dns_cache_hits_total')), misses = rate(col('xrdmon_dns_cache_misses_total'));
    chart('c-dns', rs, [
      { label: 'hit ratio', values: hits.slice(1).map((v, k) => (v === null || misses[k + 1] === null || v + misses[k + 1] === 0 ? null : v / (v + misses[k + 1]))) },
    ], fmt.pct, { empty: h.names.includes('xrdmon_dns_cache_hits_total') ? 'no lookups in this range' : 'reverse DNS is off (dns.enabled)' });
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
  const topSeries = 8;
  async function loadTraffic() {
    const w = window_();
    const q = { from: String(w.from), to: String(w.to) };
    const [total, by] = await Promise.all([
      api('rollups', q),
      api('rollups', { ...q, by: state.by, limit: String(topSeries) }),
    ]);
    const local = await api('rollups', { ...q, by: 'locality' }).catch(() => ({ series: [] }));
    const step = { '1m': 60, '1h': 3600, '1d': 86400 }[total.step] || 60;
    const t = (total.series[0] || { points: [], total: {} });
    const xs = t.points.map((p) => secs(p.time));
    const pos = new Map(xs.map((x, i) => [x, i]));
    const tot = t.total || {};
    const read = (p) => (p.read_bytes || 0) + (p.readv_bytes || 0);
    $('traffic-total').replaceChildren(el('span', {
      id: 'traffic-sums', data: { read: read(tot), write: tot.write_bytes || 0, transfers: tot.transfers || 0, partial: tot.partial || 0 },
    }, `${fmt.bytes(read(tot))} read, ${fmt.bytes(tot.write_bytes || 0)} written, ${(tot.transfers || 0).toLocaleString('en')} transfers, ` +
       `${(tot.partial || 0).toLocaleString('en')} partial, ${(tot.users || 0).toLocaleString('en')} users (step ${total.step})`));
    // stacked: the top series, then "other" (the total minus them).
    const stack = (get) => {
      const list = by.series.map((s) => {
        const v = xs.map(() => 0);
        for (const p of s.points) { const i = pos.get(secs(p.time)); if (i !== undefined) v[i] = get(p); }
        return { label: s.keys.join(' / ') || '(none)', values: v };
      });
      const other = t.points.map((p, i) => Math.max(0, get(p) - list.reduce((a, s) => a + s.values[i], 0)));
      if (other.some((v) => v > 0)) list.push({ label: 'other', values: other });
      return list.map((s) => ({ label: s.label, values: s.values.map((v) => v / step) }));
    };
    chart('c-read', xs, stack(read), fmt.rate, { stacked: true, sum: read(tot) });
    chart('c-write', xs, stack((p) => p.write_bytes || 0), fmt.rate, { stacked: true, sum: tot.write_bytes || 0 });
    chart('c-xfers', xs, [
      { label: 'complete', values: t.points.map((p) => (p.transfers || 0) / step) },
      { label: 'partial', values: t.points.map((p) => (p.partial || 0) / step) },
    ], fmt.per, { stacked: true, sum: (tot.transfers || 0) + (tot.partial || 0) });
    const reasons = [...new Set(t.points.flatMap((p) => Object.keys(p.partial_by || {})))].sort();
    chart('c-partial', xs, reasons.map((r) => ({ label: r, values: t.points.map((p) => ((p.partial_by || {})[r] || 0) / step) })), fmt.per, { stacked: true, empty: 'no partial transfers in this range' });
    const q3 = (key, scale) => ['p50', 'p90', 'p99'].map((q) => ({ label: q, values: t.points.map((p) => (p[key] && p[key][q] !== undefined ? p[key][q] * scale : null)) }));
    chart('c-duration', xs, q3('duration_ms', 0.001), fmt.secs);
    chart('c-size', xs, q3('size_bytes', 1), fmt.bytes);
    const lx = align(local.series.map((s) => ({ label: s.keys.join(' / ') || '(none)', points: s.points.map((p) => ({ t: secs(p.time), v: read(p) / step })) })));
    chart('c-local', lx.xs, lx.series, fmt.rate, { stacked: true });
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
          el('td', { title: name }, cell),
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
  function recordQuery() {
    const w = window_();
    return { from: String(w.from), to: String(w.to), user: state.user, path_prefix: state.path, server: state.server, site: state.site,
      partial: state.partial ? 'true' : '', limit: '50' };
  }
  async function loadTransfers(more) {
    for (const [k, id] of [['user', 'q-user'], ['path', 'q-path'], ['server', 'q-server'], ['site', 'q-site']]) $(id).value = state[k];
    $('q-partial').checked = !!state.partial;
    const a = await api('records', { ...recordQuery(), cursor: more ? nextCursor : '' });
    nextCursor = a.next || '';
    shown = more ? shown.concat(a.records) : a.records;
    $('more').hidden = !nextCursor;
    $('rec-count').textContent = `(${shown.length}${nextCursor ? '+' : ''})`;
    const rows = shown.map((r, i) => el('tr', { data: { index: i }, on: { click: (ev) => showRecord(i, ev.currentTarget) } },
      el('td', {}, fmt.time(r.end)), el('td', { title: r.user || '' }, r.user || ''),
      el('td', { title: r.server_host || r.server_ip }, r.server_host || r.server_ip), el('td', { title: r.path || '' }, r.path || ''),
      el('td', { class: 'num' }, fmt.bytes((r.read_bytes || 0) + (r.readv_bytes || 0))), el('td', { class: 'num' }, fmt.bytes(r.write_bytes || 0)),
      el('td', { class: 'num' }, fmt.secs((Date.parse(r.end) - Date.parse(r.start)) / 1000)), el('td', {}, r.reason || '')));
    table('records', [{ label: 'end (UTC)' }, { label: 'user' }, { label: 'server' }, { label: 'path' }, { label: 'read', num: 1 }, { label: 'written', num: 1 }, { label: 'duration', num: 1 }, { label: 'partial' }], rows);
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
  async function loadServers() {
    const w = window_();
    const q = { from: String(w.from), to: String(w.to) };
    const [sum, cache, tpc, redir, recs] = await Promise.all([
      api('summary', { ...q, name: 'link.num,sched.threads,link.in,link.out' }),
      api('events', { ...q, type: 'cache_file_close', limit: '1000' }),
      api('events', { ...q, type: 'tpc', limit: '1000' }),
      api('events', { ...q, type: 'redirect', limit: '1000' }),
      api('records', { ...q, limit: '1000' }),
    ]);
    const per = (name, get) => align((sum.servers || []).map((s) => {
      const ser = (s.series || []).filter((x) => name.includes(x.name));
      const pts = new Map();
      for (const x of ser) for (const p of x.points) { const t = secs(p.time); pts.set(t, (pts.get(t) || 0) + (get(p) || 0)); }
      return { label: s.src || s.server_ip, points: [...pts].map(([t, v]) => ({ t, v })) };
    }).filter((s) => s.points.length));
    const c = per(['link.num'], (p) => p.last); chart('c-conn', c.xs, c.series, fmt.count);
    const th = per(['sched.threads'], (p) => p.last); chart('c-threads', th.xs, th.series, fmt.count);
    const lk = per(['link.in', 'link.out'], (p) => p.rate); chart('c-link', lk.xs, lk.series, fmt.rate);
    const note = (a) => (a.next ? ' (first 1,000 events of the range)' : '');
    const group = (evs, key, add) => {
      const m = new Map();
      for (const e of evs) { const k = key(e); if (!m.has(k)) m.set(k, {}); add(m.get(k), e.data || {}); }
      return [...m].sort((a, b) => (a[0] < b[0] ? -1 : 1));
    };
    const server = (e) => e.server_host || e.server_ip;
    const cg = group(cache.events, server, (o, d) => { o.n = (o.n || 0) + 1; o.hit = (o.hit || 0) + (d.b_hit || 0); o.miss = (o.miss || 0) + (d.b_miss || 0); o.bypass = (o.bypass || 0) + (d.b_bypass || 0); });
    table('t-cache', [{ label: 'cache' + note(cache) }, { label: 'files', num: 1 }, { label: 'hit', num: 1 }, { label: 'miss', num: 1 }, { label: 'bypass', num: 1 }, { label: 'hit ratio', num: 1 }],
      cg.map(([k, o]) => el('tr', {}, el('td', {}, k), el('td', { class: 'num' }, o.n), el('td', { class: 'num' }, fmt.bytes(o.hit)), el('td', { class: 'num' }, fmt.bytes(o.miss)),
        el('td', { class: 'num' }, fmt.bytes(o.bypass)), el('td', { class: 'num' }, fmt.pct(o.hit / (o.hit + o.miss + o.bypass))))));
    const tg = group(tpc.events, server, (o, d) => {
      o.n = (o.n || 0) + 1; o.bytes = (o.bytes || 0) + (d.size || 0); o.failed = (o.failed || 0) + (d.rc ? 1 : 0);
      const dt = (Date.parse(d.end) - Date.parse(d.begin)) / 1000; if (dt > 0 && d.size) { o.secs = (o.secs || 0) + dt; o.rb = (o.rb || 0) + d.size; }
    });
    table('t-tpc', [{ label: 'server' + note(tpc) }, { label: 'copies', num: 1 }, { label: 'failed', num: 1 }, { label: 'bytes', num: 1 }, { label: 'mean rate', num: 1 }],
      tg.map(([k, o]) => el('tr', {}, el('td', {}, k), el('td', { class: 'num' }, o.n), el('td', { class: 'num' }, o.failed || 0), el('td', { class: 'num' }, fmt.bytes(o.bytes)),
        el('td', { class: 'num' }, o.secs ? fmt.rate(o.rb / o.secs) : '—'))));
    const rg = group(redir.events, server, (o, d) => { o.n = (o.n || 0) + 1; o.targets = o.targets || new Set(); o.targets.add(d.target_host); });
    const hops = recs.records.filter((r) => r.redirect_hops > 0);
    const mean = (f) => (hops.length ? hops.reduce((a, r) => a + (f(r) || 0), 0) / hops.length : null);
    const rows = rg.map(([k, o]) => el('tr', {}, el('td', {}, k), el('td', { class: 'num' }, o.n), el('td', { class: 'num' }, o.targets.size), el('td', {}, ''), el('td', {}, '')));
    rows.push(el('tr', { data: { key: 'delay' } }, el('td', {}, 'transfers redirected' + (recs.next ? ' (of the newest 1,000)' : '')), el('td', { class: 'num' }, hops.length),
      el('td', { class: 'num' }, hops.length ? 'hops ' + mean((r) => r.redirect_hops).toFixed(2) : '—'),
      el('td', { class: 'num' }, hops.length ? 'delay ≥ ' + fmt.secs(mean((r) => r.redirect_delay_ms) / 1000) : '—'),
      el('td', { class: 'num' }, hops.length ? '≤ ' + fmt.secs(mean((r) => r.redirect_delay_max_ms) / 1000) : '—')));
    table('t-redirect', [{ label: 'redirector' + note(redir) }, { label: 'redirects', num: 1 }, { label: 'targets', num: 1 }, { label: '' }, { label: '' }], rows);
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
    $('by').value = state.by;
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
    if (+state.refresh > 0) timer = setInterval(render, +state.refresh * 1000);
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
    $('by').addEventListener('change', () => { state.by = $('by').value; render(); });
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
