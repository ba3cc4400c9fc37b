// bakusoku dashboard: one page, hash routes, built only on the JSON API (docs/api.md).
'use strict';

const page = document.getElementById('page');
let cleanup = [];  // timers and event streams of the page on screen

// ---- API ----------------------------------------------------------------------------
function token() { return localStorage.getItem('bakusoku-token') || ''; }
(function takeTokenFromUrl() {
  const t = new URLSearchParams(location.search).get('token');
  if (t) localStorage.setItem('bakusoku-token', t);
})();

async function api(method, path, body) {
  const opts = { method, headers: {} };
  if (token()) opts.headers['Authorization'] = 'Bearer ' + token();
  if (body instanceof FormData) opts.body = body;
  else if (body !== undefined) { opts.headers['Content-Type'] = 'application/json'; opts.body = JSON.stringify(body); }
  const res = await fetch(path, opts);
  let data = null;
  try { data = await res.json(); } catch (e) { data = { error: res.statusText }; }
  if (res.status === 401) {
    const t = prompt('This server needs its token (printed by bakusoku serve):');
    if (t) { localStorage.setItem('bakusoku-token', t); return api(method, path, body); }
  }
  if (!res.ok) { const err = new Error(data.error || res.statusText); err.field = data.field; err.status = res.status; throw err; }
  return data;
}
function withToken(url) { return token() ? url + (url.includes('?') ? '&' : '?') + 'token=' + encodeURIComponent(token()) : url; }

// ---- helpers ------------------------------------------------------------------------
function esc(s) { return String(s ?? '').replace(/[&<>"']/g, c => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }[c])); }
function fmt(x, digits = 4) { return x === undefined || x === null ? '' : Number(x).toPrecision(digits); }
function state(s) { return `<span class="state ${esc(s)}">${esc(s)}</span>`; }
function bar(p) { return `<span class="bar"><div style="width:${Math.round(100 * (p || 0))}%"></div></span>`; }
function when(t) { return t ? new Date(t * 1000).toLocaleString() : ''; }
function showError(form, err) {
  form.querySelectorAll('.error').forEach(e => e.textContent = '');
  const slot = (err.field && form.querySelector(`[data-error-for="${err.field}"]`)) || form.querySelector('[data-error-for=""]');
  slot.textContent = err.message;
  return slot;
}
// A chart's box: the canvas in a sized plot area and a row for its toggles (chartTools).
function chartBox(id) {
  return `<div class="chart"><div class="plot"><canvas id="${id}"></canvas></div><div class="tools" id="${
      id}-tools"></div></div>`;
}
function lineChart(canvas, yTitle, xTitle = 'iteration') {
  return new Chart(canvas, {
    type: 'line',
    data: {datasets: []},
    options: {
      animation: false,
      parsing: false,
      normalized: true,
      maintainAspectRatio: false,
      elements: {point: {radius: 0}, line: {borderWidth: 1.5}},
      scales: {
        x: {type: 'linear', min: 0, title: {display: true, text: xTitle}},
        y: {title: {display: true, text: yTitle}}
      },
      plugins: {legend: {position: 'bottom'}},
    },
    plugins: [verticalMarks],
  });
}
// Dashed vertical lines at chart.$marks [{x, label}]: where a job was resumed.
const verticalMarks = {
  id: 'verticalMarks',
  afterDatasetsDraw(chart) {
    const marks = chart.$marks || [], x = chart.scales.x, area = chart.chartArea;
    if (!marks.length || !x) return;
    const ctx = chart.ctx;
    ctx.save();
    ctx.strokeStyle = '#6b7280';
    ctx.fillStyle = '#4b5563';
    ctx.setLineDash([4, 3]);
    ctx.font = '11px system-ui, sans-serif';
    for (const m of marks) {
      const px = x.getPixelForValue(m.x);
      if (!(px >= area.left && px <= area.right)) continue;
      ctx.beginPath();
      ctx.moveTo(px, area.top);
      ctx.lineTo(px, area.bottom);
      ctx.stroke();
      ctx.fillText(m.label, px + 3, area.top + 10);
    }
    ctx.restore();
  },
};
// A y axis from zero to just above the largest value (Chart.js gives a constant series,
// such as a fixed learning rate, an axis of +-1 around it); left to Chart.js on a log scale.
function zeroBased(chart) {
  if (chart.options.scales.y.type === 'logarithmic') return;
  let top = 0;
  for (const d of chart.data.datasets) for (const p of d.data) top = Math.max(top, p.y);
  chart.options.scales.y.min = 0;
  chart.options.scales.y.max = top > 0 ? 1.1 * top : undefined;
}
const palette = ['#c2410c', '#1d4ed8', '#15803d', '#7c3aed', '#be185d', '#0e7490', '#a16207', '#4b5563'];
// A chart's series by label. Callers put measurements in `raw`; `data` is what is drawn (raw,
// or smoothed by render()). sparse: few points (test results), drawn as dots and never smoothed.
function series(chart, label, colorIndex, sparse) {
  let s = chart.data.datasets.find(d => d.label === label);
  if (!s) {
    const color = palette[colorIndex % palette.length];
    s = {
      label,
      raw: [],
      data: [],
      borderColor: color,
      backgroundColor: color,
      pointRadius: sparse ? 3 : 0,
      sparse: !!sparse
    };
    s.data = s.raw;
    chart.data.datasets.push(s);
  }
  return s;
}
// What each series draws: its measurements, or with chart.$smooth = w in (0, 1) their
// exponential moving average, debiased at the start as TensorBoard does.
function render(chart) {
  const w = chart.$smooth || 0;
  for (const d of chart.data.datasets) {
    if (!d.raw) continue;
    if (!w || d.sparse) {
      d.data = d.raw;
      continue;
    }
    let avg = 0, n = 0;
    d.data = d.raw.map(p => {
      if (p.y === null || !isFinite(p.y)) return p;
      avg = w * avg + (1 - w) * p.y;
      n += 1;
      return {x: p.x, y: avg / (1 - Math.pow(w, n))};
    });
  }
}
function draw(chart) {
  render(chart);
  if (chart.$zeroBased) zeroBased(chart);
  chart.update('none');
}
// The toggles under a chart: a log y axis and, for noisy series, smoothing.
function chartTools(chart, {log = true, smooth = false} = {}) {
  const slot = document.getElementById(chart.canvas.id + '-tools');
  if (!slot) return;
  slot.innerHTML = (log ? '<label><input type="checkbox" class="log"> log scale</label>' : '') +
      (smooth ?
           '<label>smoothing <input type="range" class="smooth" min="0" max="0.99" step="0.01" value="0"> <span class="muted">0</span></label>' :
           '');
  const box = slot.querySelector('.log'), slider = slot.querySelector('.smooth');
  if (box)
    box.onchange = () => {
      const y = chart.options.scales.y;
      y.type = box.checked ? 'logarithmic' : 'linear';
      if (box.checked) {
        delete y.min;
        delete y.max;
      } else if (chart.$range)
        Object.assign(y, chart.$range);
      draw(chart);
    };
  if (slider)
    slider.oninput = () => {
      chart.$smooth = Number(slider.value);
      slider.nextElementSibling.textContent = slider.value;
      draw(chart);
    };
}
// A fixed y range (accuracy: [0, 1]) that the log toggle gives back when turned off.
function fixedRange(chart, min, max) {
  chart.$range = {min, max};
  Object.assign(chart.options.scales.y, chart.$range);
}
function duration(seconds) {
  if (!(seconds >= 0)) return '';
  const s = Math.round(seconds), h = Math.floor(s / 3600), m = Math.floor(s / 60) % 60;
  return h ? `${h} h ${m} min` : m ? `${m} min ${s % 60} s` : `${s} s`;
}
// A histogram {lo, hi, counts[]} as a small bar chart (inline SVG), with its range below.
function histogram(h, what) {
  if (!h || !h.counts || !h.counts.length) return '';
  const top = Math.max(...h.counts, 1), w = 240, ht = 48, bw = w / h.counts.length;
  const bars =
      h.counts
          .map(
              (c, k) => `<rect x="${(k * bw).toFixed(1)}" y="${(ht - ht * c / top).toFixed(1)}" width="${
                  Math.max(1, bw - 1).toFixed(1)}" height="${(ht * c / top).toFixed(1)}"><title>${c}</title></rect>`)
          .join('');
  return `<div class="histogram"><svg viewBox="0 0 ${w} ${ht}" width="${w}" height="${ht}" role="img" aria-label="${
      what} histogram">${bars}</svg>
    <div class="muted">${what} values from ${fmt(h.lo, 3)} to ${fmt(h.hi, 3)}${
      h.non_finite ? ` · ${h.non_finite} not finite` : ''}</div></div>`;
}
// Asks before a delete that cannot be undone.
function confirmDelete(what) { return confirm(`Delete ${what}? This cannot be undone.`); }

// ---- routes -------------------------------------------------------------------------
const routes = [
  [/^#?\/?$/, jobsPage],
  [/^#\/datasets$/, datasetsPage],
  [/^#\/datasets\/new$/, newDatasetPage],
  [/^#\/datasets\/(\d+)$/, datasetPage],
  [/^#\/models$/, modelsPage],
  [/^#\/models\/new(?:\?(.*))?$/, newModelPage],
  [/^#\/models\/(\d+)$/, modelPage],
  [/^#\/jobs\/(\d+)$/, jobPage],
  [/^#\/compare\/([\d,]+)$/, comparePage],
];
async function route() {
  cleanup.forEach(f => f());
  cleanup = [];
  for (const [re, fn] of routes) {
    const m = location.hash.match(re);
    if (m) {
      try { await fn(...m.slice(1)); } catch (e) { page.innerHTML = `<div class="reason">${esc(e.message)}</div>`; }
      return;
    }
  }
  page.innerHTML = '<p>No such page.</p>';
}
window.addEventListener('hashchange', route);
route();

// ---- jobs ---------------------------------------------------------------------------
// A job's latest training loss and test accuracy (with the iteration it was measured at).
function latest(j) {
  const t = j.last_test;
  return [
    j.last_train ? 'loss ' + fmt(j.last_train.loss) : '',
    t && t.accuracy !== undefined ?
        `accuracy ${fmt(t.accuracy)}${t.iter !== undefined ? ' at iteration ' + t.iter : ''}` :
        ''
  ].filter(Boolean)
      .join(', ');
}
// The jobs table's columns: header, sort key, cell. Settings columns are added for the
// settings that differ among the jobs shown.
const jobColumns = [
  ['#', j => j.id, j => String(j.id)],
  ['name', j => j.name, j => `<a href="#/jobs/${j.id}">${esc(j.name)}</a>`],
  ['kind', j => j.kind, j => esc(j.kind) + ((j.processes || 1) > 1 ? ' ×' + j.processes : '')],
  ['state', j => j.state, j => `${state(j.state)} ${bar(j.progress)}`],
  ['latest', j => (j.last_train ? j.last_train.loss : undefined), j => latest(j), 'latest'],
  [
    'best accuracy', j => (j.best_test ? j.best_test.accuracy : undefined),
    j => (j.best_test ? `${fmt(j.best_test.accuracy)} <span class="muted">at ${j.best_test.iter}</span>` : ''), 'best'
  ],
  [
    'iterations', j => (j.last_train ? j.last_train.iter : undefined),
    j => (j.last_train ? `${j.last_train.iter}${j.max_iter ? ' / ' + j.max_iter : ''}` : '')
  ],
  ['wall time', j => wallTime(j), j => duration(wallTime(j))],
  [
    'items/s', j => (j.last_train ? j.last_train.images_per_s : undefined),
    j => (j.last_train && j.last_train.images_per_s !== undefined ? Math.round(j.last_train.images_per_s) : '')
  ],
  ['created', j => j.created, j => when(j.created)],
];
// Seconds a job has run, all attempts together.
function wallTime(j) {
  if (!j.started) return undefined;
  return (j.run_seconds || 0) +
      (j.state === 'running'                         ? Date.now() / 1000 - j.started :
           j.run_seconds === undefined && j.finished ? j.finished - j.started :
                                                       0);
}
// The settings a training job was made with: its model's and its own.
function settingsOf(j, models) {
  const m = models.get(j.model_id), out = {};
  if (m) {
    out.network = m.network;
    out.solver = m.solver.type;
    out['lr policy'] = m.solver.lr_policy;
    out.epochs = m.solver.epochs;
  }
  if (j.params) {
    out.base_lr = j.params.base_lr;
    out.batch = j.params.batch_size;
  }
  out.processes = j.processes || 1;
  return out;
}
async function jobsPage() {
  page.innerHTML = `<h1>Jobs</h1>
    <div class="toolbar"><input type="search" id="job-filter" placeholder="filter: name, state or kind">
      <button id="compare" class="secondary" disabled>Compare selected</button></div>
    <div id="jobs"></div>`;
  const chosen = new Set();
  let sortBy = 0, descending = true, jobs = [], models = new Map();
  const filter = document.getElementById('job-filter'), compare = document.getElementById('compare');
  const render = () => {
    const slot = document.getElementById('jobs');
    if (!slot) return;  // left the page while a request was in flight
    if (!jobs.length) {
      slot.innerHTML = '<p class="muted">No jobs yet: create a dataset, then a model.</p>';
      return;
    }
    const words = filter.value.trim().toLowerCase();
    const shown =
        jobs.filter(j => !words || [j.name, j.state, j.kind].some(t => String(t).toLowerCase().includes(words)));
    const settings = new Map(shown.filter(j => j.kind === 'train').map(j => [j.id, settingsOf(j, models)]));
    const keys = [...new Set([...settings.values()].flatMap(Object.keys))].filter(
        k => new Set([...settings.values()].map(v => JSON.stringify(v[k]))).size > 1);
    const columns = jobColumns.concat(keys.map(
        k => [k, j => (settings.get(j.id) || {})[k], j => esc((settings.get(j.id) || {})[k] ?? ''), 'setting']));
    const key = columns[sortBy] ? columns[sortBy][1] : columns[0][1];
    const order = shown.slice().sort((x, y) => {
      const a = key(x), b = key(y);
      if (a === b) return 0;
      if (a === undefined || a === null) return 1;  // unknowns last either way
      if (b === undefined || b === null) return -1;
      return (a < b ? -1 : 1) * (descending ? -1 : 1);
    });
    slot.innerHTML = `<table class="jobs"><tr><th></th>${
        columns
            .map(
                (c, k) => `<th class="sortable${c[3] === 'setting' ? ' setting' : ''}" data-column="${k}">${esc(c[0])}${
                    k === sortBy ? (descending ? ' ▾' : ' ▴') : ''}</th>`)
            .join('')}</tr>
      ${
        order
            .map(
                j => `<tr data-job="${j.id}"><td>${
                    j.kind === 'train' ? `<input type="checkbox" class="choose" value="${j.id}"${
                                             chosen.has(j.id) ? ' checked' : ''} aria-label="compare job ${j.id}">` :
                                         ''}</td>
        ${columns.map(c => `<td${c[3] ? ` class="${c[3]}"` : ''}>${c[2](j)}</td>`).join('')}</tr>`)
            .join('')}</table>
      ${
        order.length < jobs.length ? `<p class="muted">${jobs.length - order.length} more hidden by the filter.</p>` :
                                     ''}`;
    slot.querySelectorAll('th.sortable').forEach(th => th.onclick = () => {
      const k = Number(th.dataset.column);
      descending = k === sortBy ? !descending : true;
      sortBy = k;
      render();
    });
    slot.querySelectorAll('input.choose').forEach(box => box.onchange = () => {
      if (box.checked)
        chosen.add(Number(box.value));
      else
        chosen.delete(Number(box.value));
      compare.disabled = chosen.size < 2;
    });
  };
  filter.oninput = render;
  compare.onclick = () => {
    location.hash = `#/compare/${[...chosen].sort((a, b) => a - b).join(',')}`;
  };
  const refresh = async () => {
    const [js, ms] = await Promise.all([api('GET', '/api/jobs'), api('GET', '/api/models')]);
    jobs = js;
    models = new Map(ms.map(m => [m.id, m]));
    render();
  };
  await refresh();
  const timer = setInterval(() => refresh().catch(() => {}), 2000);
  cleanup.push(() => clearInterval(timer));
}

// Chosen jobs' curves on one chart each (loss, accuracy), by iteration or epoch, and their
// settings and results side by side.
async function comparePage(list) {
  const ids = list.split(',').map(Number).filter(x => x > 0).slice(0, 16);
  const [jobs, models] =
      await Promise.all([Promise.all(ids.map(i => api('GET', `/api/jobs/${i}`))), api('GET', '/api/models')]);
  const byModel = new Map(models.map(m => [m.id, m]));
  const settings = jobs.map(j => settingsOf(j, byModel));
  const keys = [...new Set(settings.flatMap(Object.keys))];
  const differs = k => new Set(settings.map(v => JSON.stringify(v[k]))).size > 1;
  page.innerHTML = `<h1>Compare ${
      jobs.length} jobs <label class="inline"><input type="checkbox" id="by-epoch"> by epoch</label></h1>
    <div class="charts">${chartBox('compare-loss')}${chartBox('compare-acc')}</div>
    <h2>Settings and results</h2>
    <table id="compare-table"><tr><th></th>${
      jobs.map(
              (j, k) =>
                  `<th><span class="swatch" style="background:${palette[k % palette.length]}"></span><a href="#/jobs/${
                      j.id}">${esc(j.name)}</a> <span class="muted">#${j.id}</span></th>`)
          .join('')}</tr>
    ${
      keys.map(
              k => `<tr class="${differs(k) ? 'differs' : ''}"><th>${esc(k)}</th>${
                  settings.map(v => `<td>${esc(v[k] ?? '')}</td>`).join('')}</tr>`)
          .join('')}
    <tr><th>state</th>${jobs.map(j => `<td>${state(j.state)}</td>`).join('')}</tr>
    <tr><th>best accuracy</th>${
      jobs.map(
              j => `<td class="best-accuracy">${
                  j.best_test ? fmt(j.best_test.accuracy) + ' at ' + j.best_test.iter : ''}</td>`)
          .join('')}</tr>
    <tr><th>final accuracy</th>${
      jobs.map(j => `<td>${j.last_test && j.last_test.accuracy !== undefined ? fmt(j.last_test.accuracy) : ''}</td>`)
          .join('')}</tr>
    <tr><th>final loss</th>${jobs.map(j => `<td>${j.last_train ? fmt(j.last_train.loss) : ''}</td>`).join('')}</tr>
    <tr><th>wall time</th>${jobs.map(j => `<td>${duration(wallTime(j))}</td>`).join('')}</tr></table>`;
  const loss = lineChart(document.getElementById('compare-loss'), 'train loss');
  const acc = lineChart(document.getElementById('compare-acc'), 'test accuracy');
  fixedRange(acc, 0, 1);
  chartTools(loss, {smooth: true});
  chartTools(acc);
  const byEpoch = document.getElementById('by-epoch');
  const metrics = await Promise.all(ids.map(i => api('GET', `/api/jobs/${i}/metrics`).catch(() => [])));
  const fill = () => {
    const x = r => (byEpoch.checked ? r.epoch : r.iter);
    for (const c of [loss, acc]) {
      c.data.datasets = [];
      c.options.scales.x.title.text = byEpoch.checked ? 'epoch' : 'iteration';
    }
    jobs.forEach((j, k) => {
      const label = `${j.name} (#${j.id})`;
      series(loss, label, k).raw =
          metrics[k].filter(r => r.phase === 'train' && r.loss !== undefined).map(r => ({x: x(r), y: r.loss}));
      series(acc, label, k, true).raw =
          metrics[k].filter(r => r.phase === 'test' && r.accuracy !== undefined).map(r => ({x: x(r), y: r.accuracy}));
    });
    draw(loss);
    draw(acc);
  };
  byEpoch.onchange = fill;
  fill();
}

async function jobPage(id) {
  const job = await api('GET', `/api/jobs/${id}`);
  page.innerHTML = `<h1>Job ${job.id}: <span id="job-name">${esc(job.name)}</span></h1>
    <div class="card" id="job-head"></div>
    <div id="job-actions"></div>
    ${
      job.kind === 'train' ?
          `
    <h2>Training <label class="inline"><input type="checkbox" id="by-epoch"> by epoch</label></h2>
    <div class="charts">${
                  ['chart-loss', 'chart-acc', 'chart-lr', 'chart-speed', 'chart-usage'].map(chartBox).join('')}</div>
    <section id="test-section">
    <h2>Test the model</h2>
    <div class="card" id="classify">
      <input type="file" id="image" accept="image/png,image/jpeg">
      <button id="classify-upload">Classify image</button>
      <button id="classify-sample" class="secondary">Classify validation sample</button>
      <input type="number" id="sample-index" min="0" placeholder="# (random)" style="width:110px">
      <button id="visualize" class="secondary">Show layers</button>
      <button id="evaluate" class="secondary">Classify the whole validation set</button>
      <div id="classify-result"></div>
      <div id="layers"></div>
      <div id="evaluation"></div>
      <div class="many"><label>Classify many: pick a folder, or several images</label>
        <input type="file" id="many-folder" webkitdirectory> <input type="file" id="many-files" accept="image/png,image/jpeg" multiple>
        <button id="classify-many" class="secondary">Classify them</button>
        <div id="many-result"></div></div>
    </div></section>
    <p class="muted" id="no-snapshot" hidden>This job wrote no snapshot, so there is nothing to test, download or optimize.</p>
    <h2>Downloads</h2><div class="card" id="downloads"></div>
    <section id="deploy-section">
    <h2>Deploy</h2>
    <form id="deploy-form" class="card">
      <p class="muted">Builds an inference bundle from a snapshot (<code>bakusoku deploy</code>: layers fused, kernels chosen for this machine) and times it (<code>bakusoku bench</code>); then download it with a deploy prototxt and the labels.</p>
      <div class="row">
        <div><label>Precision</label><select name="precision"><option value="fp32">FP32</option><option value="bf16">BF16 (CPUs with AVX-512 BF16 or AMX)</option><option value="int8">INT8 (calibrated on the validation set)</option></select><div class="error" data-error-for="precision"></div></div>
        <div><label>Snapshot</label><select name="iter"></select><div class="error" data-error-for="iter"></div></div>
      </div>
      <div class="error" data-error-for=""></div>
      <button type="submit" id="start-deploy">Deploy</button>
      <div id="deploy-runs"></div>
    </form></section>
    <section id="optimize-section">
    <h2>Optimize for deployment</h2>
    <form id="optimize-form" class="card">
      <p class="muted">Searches INT8/BF16, pruning, low-rank and their combinations on the latest snapshot; every candidate is deployed, scored on the whole validation set and timed here (<code>bakusoku optimize</code>).</p>
      <div class="row">
        <div><label>Objective</label><select name="objective"><option value="latency">latency (batch 1)</option><option value="throughput">throughput (batch 64)</option><option value="size">bundle size</option></select>
          <div class="error" data-error-for="objective"></div></div>
        <div><label>Accuracy it may lose (points)</label><input type="number" step="any" name="max_accuracy_drop" value="0.5"><div class="error" data-error-for="max_accuracy_drop"></div></div>
        <div><label>Time budget (minutes)</label><input type="number" step="any" name="budget_minutes" value="15"><div class="error" data-error-for="budget_minutes"></div></div>
        <div><label><input type="checkbox" name="allow_training"> Also fine-tune (QAT, pruning)</label>
          <input type="number" step="1" name="fine_tune_iterations" value="1000" title="iterations per fine-tune"><div class="error" data-error-for="fine_tune_iterations"></div></div>
      </div>
      <div class="error" data-error-for=""></div><div class="error" data-error-for="allow_training"></div>
      <button type="submit" id="start-optimize">Start optimize</button>
      <div id="optimize-runs"></div>
    </form></section>` :
          ''}
    ${job.kind === 'optimize' ? `<h2>Search</h2><div class="card" id="search"></div>` : ''}
    ${job.kind === 'deploy' ? `<h2>Bundle</h2><div class="card" id="bundle"></div>` : ''}
    <h2>Log</h2><pre class="log" id="log"></pre>`;
  let current = job;
  // Left (a resume routes to a fresh copy of this page): replies and timers still in flight
  // would otherwise draw this copy's stale job into the next one's elements, looked up by id.
  let gone = false;
  cleanup.push(() => { gone = true; });
  const records = [];  // every metrics record so far (train jobs)
  const live = () => ['queued', 'running'].includes(current.state);
  // The header: state, times, and for training where it stands (epoch, best accuracy, ETA).
  const head = () => {
    const j = current;
    const slot = document.getElementById('job-head');
    if (!slot || gone) return;
    const ended = ['done', 'failed', 'aborted'].includes(j.state);
    // Every attempt together once ended (run_seconds), this attempt while it runs.
    const elapsed = !j.started               ? undefined :
        ended && j.run_seconds !== undefined ? j.run_seconds :
                                               (ended && j.finished ? j.finished : Date.now() / 1000) - j.started;
    const facts = [`attempt ${j.attempts || 0}`, `created ${when(j.created)}`];
    if (j.state === 'running' && j.started) facts.push(`running for <span id="elapsed">${duration(elapsed)}</span>`);
    if (ended && j.finished)
      facts.push(`finished ${when(j.finished)}${
          elapsed > 0 ? ` after ${duration(elapsed)}${(j.attempts || 0) > 1 ? ` in ${j.attempts} attempts` : ''}` :
                                                                              ''                                                      }`);
    const train = records.filter(r => r.phase === 'train'), last = train[train.length - 1];
    let progress = '';
    if (j.kind === 'train' && j.max_iter) {
      const perEpoch = j.iterations_per_epoch || j.max_iter;
      const epochs = j.max_iter / perEpoch;
      const at = last ? last.iter : 0;
      const short = x => String(+Number(x).toPrecision(3));  // 3, not 3.00
      progress = `<span id="epoch">epoch ${short(at / perEpoch)} of ${short(epochs)}</span> · iteration ${at} of ${
          j.max_iter}`;
      // ETA from this attempt's pace (a record's time counts from its attempt's start).
      let first = train.length - 1;
      while (first > 0 && train[first - 1].time <= train[first].time) first -= 1;
      if (j.state === 'running' && last && last.time > train[first].time && last.iter > train[first].iter) {
        const pace = (last.iter - train[first].iter) / (last.time - train[first].time);
        progress += ` · <span id="eta">about ${duration((j.max_iter - last.iter) / pace)} left</span>`;
      }
      const tests = records.filter(r => r.phase === 'test' && typeof r.accuracy === 'number');
      if (tests.length) {
        const best = tests.reduce((a, b) => (b.accuracy > a.accuracy ? b : a));
        progress += ` · best accuracy <span id="best-accuracy">${fmt(best.accuracy)}</span> at iteration ${best.iter}`;
      }
    }
    slot.innerHTML = `${state(j.state)} ${bar(j.progress)} <span class="muted">${facts.join(' · ')}</span>
      ${progress ? `<div>${progress}</div>` : ''}
      ${
        j.params ?
            `<div class="muted">base_lr ${j.params.base_lr} · batch ${j.params.batch_size}<span id="world-size">${
                (j.processes || 1) > 1 ?
                    ` · ${j.processes} processes (batch ${j.params.batch_size / j.processes} each)` :
                    ' · 1 process'}</span>${
                j.slurm_id ? `<span id="slurm"> · Slurm job ${esc(j.slurm_id)}${
                                 j.slurm_state ? ' ' + esc(j.slurm_state) : ''}</span>` :
                             ''}${
                j.cloned_from ? ` · cloned from <a href="#/jobs/${j.cloned_from}">job ${j.cloned_from}</a>` : ''}${
                j.weights_from ?
                    (j.weights_from.file ? ` · started from <code>${esc(j.weights_from.file)}</code>` :
                                           ` · fine-tuned from <a href="#/jobs/${j.weights_from.job_id}">job ${
                                               j.weights_from.job_id}</a> (iteration ${j.weights_from.iter})`) :
                    ''}</div>` :
            ''}
      ${
        j.reason ? `<div class="${j.state === 'failed' ? 'reason' : 'muted'}" id="reason">${esc(j.reason)}</div>` :
                   ''}`;
    // A failed training job without a snapshot would fail the same way again from the start.
    const snapshotless = j.kind === 'train' && snapshots !== null && snapshots.length === 0;
    const can = {abort: live(), resume: j.state === 'aborted' || (j.state === 'failed' && !snapshotless)};
    // Replaced only when they change: the header is redrawn as records arrive, and a button
    // replaced between press and release would lose the click.
    const actions = (can.abort ? '<button id="abort">Abort</button>' : '') +
        (can.resume ? '<button id="resume">Resume</button>' : '') +
        (j.kind === 'train' ?
             `<a class="btn secondary" id="clone" href="#/models/new?from=${j.id}">Clone and edit</a>` :
             '') +
        (j.kind === 'train' && snapshots && snapshots.length ?
             `<a class="btn secondary" id="fine-tune" href="#/models/new?from=${
                 j.id}&fine_tune=1">Fine-tune from this job</a>` :
             '') +
        (j.kind !== 'dataset' ? '<button id="delete" class="secondary">Delete</button>' : '');
    if (actions === shownActions) return;
    shownActions = actions;
    document.getElementById('job-actions').innerHTML = actions;
    const act = (name, method, path, after, ask) => {
      const b = document.getElementById(name);
      if (b)
        b.onclick = async () => {
          if (ask && !ask()) return;
          try {
            const r = await api(method, path, {});
            after(r);
          } catch (e) {
            alert(e.message);
          }
        };
    };
    act('abort', 'POST', `/api/jobs/${id}/abort`, r => { current = r; head(); });
    act('resume', 'POST', `/api/jobs/${id}/resume`, () => route());
    act('delete', 'DELETE', `/api/jobs/${id}`, () => {
      location.hash = '#/';
    }, () => confirmDelete(`job ${id} (${j.name}) and its files`));
  };
  // The job's snapshots (null until known): they decide what the page offers.
  let snapshots = job.kind === 'train' ? job.snapshots || [] : null;
  let shownActions = null;
  head();
  const ticker = setInterval(() => {
    const e = document.getElementById('elapsed');
    if (e && current.started) e.textContent = duration(Date.now() / 1000 - current.started);
  }, 1000);
  cleanup.push(() => clearInterval(ticker));
  // The log: loaded whole, then kept at its end only if the reader is there.
  const showLog = lines => {
    const log = document.getElementById('log');
    if (!log || gone) return;
    const atEnd = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
    const top = log.scrollTop;
    log.textContent = lines.join('\n');
    log.scrollTop = atEnd ? log.scrollHeight : top;
  };
  const loadLog = () => api('GET', `/api/jobs/${id}/log`).then(r => showLog(r.lines)).catch(() => {});
  loadLog();
  if (job.kind !== 'train') {
    let shown = false, searching = false;
    const tick = async () => {
      current = await api('GET', `/api/jobs/${id}`);
      if (gone) return;
      head();
      if (current.kind === 'optimize' && live() && !searching) {
        searching = true;
        searchReport(id, current);
      }
      if (current.kind === 'optimize' && !shown && !live()) {
        shown = true;
        searchReport(id, current);
        loadLog();
      }
      if (current.kind === 'deploy' && !shown) {
        if (!live()) shown = true;
        deployReport(id, current);
        if (!live()) loadLog();
      }
    };
    await tick();
    const timer = setInterval(() => tick().catch(() => {}), 1000);
    cleanup.push(() => clearInterval(timer));
    return;
  }
  optimizeForm(id);
  deployForm(id);
  // Charts, filled from the event stream (which starts with every record so far).
  const byEpoch = document.getElementById('by-epoch');
  const charts = {
    loss: lineChart(document.getElementById('chart-loss'), 'loss'),
    acc: lineChart(document.getElementById('chart-acc'), 'accuracy'),
    lr: lineChart(document.getElementById('chart-lr'), 'learning rate'),
    speed: lineChart(document.getElementById('chart-speed'), 'images/s'),
    usage: lineChart(document.getElementById('chart-usage'), 'CPU %', 'seconds'),
  };
  // Memory on its own axis: hundreds of MB would flatten the CPU percentages.
  charts.usage.options.scales
      .y2 = {position: 'right', title: {display: true, text: 'memory MB'}, grid: {drawOnChartArea: false}};
  fixedRange(charts.acc, 0, 1);  // accuracy lives in [0, 1]
  charts.lr.$zeroBased = true;
  chartTools(charts.loss, {smooth: true});
  chartTools(charts.acc);
  chartTools(charts.lr);
  chartTools(charts.speed, {smooth: true});
  chartTools(charts.usage, {smooth: true});
  // The job's dataset, fetched once: its kind names the speed unit and picks the test
  // section, its validation count bounds a random sample.
  const dataset = api('GET', `/api/datasets/${job.dataset_id}`);
  // The trainer's rate counts batch items: characters for a text dataset.
  let speedUnit = 'images/s';
  dataset
      .then(d => {
        if (!(d.info && d.info.kind === 'text')) return;
        speedUnit = 'characters/s';
        charts.speed.options.scales.y.title.text = speedUnit;
        for (const s of charts.speed.data.datasets) s.label = speedUnit;
        draw(charts.speed);
      })
      .catch(() => {});
  // Where each later attempt took over: the iteration it resumed from (marked on the charts).
  const resumes = () =>
      (current.resumes ||
       []).map(r => ({x: byEpoch.checked ? r.iter / (current.iterations_per_epoch || 1) : r.iter, label: 'resumed'}));
  const add = r => {
    const x = byEpoch.checked ? r.epoch : r.iter;
    if (r.phase === 'train') {
      if (r.loss !== undefined) series(charts.loss, 'train loss', 0).raw.push({x, y: r.loss});
      if (r.lr !== undefined) {
        const s = series(charts.lr, 'lr', 2);
        s.stepped = 'after';  // the rate holds until the next record: steps, not slopes
        s.raw.push({x, y: r.lr});
      }
      if (r.images_per_s !== undefined) series(charts.speed, speedUnit, 3).raw.push({x, y: r.images_per_s});
    } else {
      if (r.loss !== undefined) series(charts.loss, 'test loss', 1, true).raw.push({x, y: r.loss});
      for (const [k, v] of Object.entries(r))
        if (k.startsWith('accuracy'))
          series(charts.acc, 'test ' + k, k === 'accuracy' ? 1 : 4, true).raw.push({x, y: v});
    }
  };
  const redraw = () => {
    const marks = resumes();
    for (const c of [charts.loss, charts.acc, charts.lr, charts.speed]) c.$marks = marks;
    charts.usage.$marks = usageMarks;
    for (const c of Object.values(charts)) draw(c);
    head();
  };
  byEpoch.onchange = () => {
    for (const c of [charts.loss, charts.acc, charts.lr, charts.speed]) {
      c.data.datasets = [];
      c.options.scales.x.title.text = byEpoch.checked ? 'epoch' : 'iteration';
    }
    records.forEach(add);
    redraw();
  };
  const es = new EventSource(withToken(`/api/jobs/${id}/events`));
  let pending = false;
  const later = () => { if (!pending) { pending = true; setTimeout(() => { pending = false; redraw(); }, 250); } };
  es.addEventListener('metric', e => {
    const r = JSON.parse(e.data);
    records.push(r);
    add(r);
    later();
    checkSnapshots();
  });
  es.addEventListener('job', e => {
    current = JSON.parse(e.data);
    later();
    checkSnapshots();
  });
  // CPU and memory, measured by the server every second the job runs (all attempts, so a
  // reloaded or resumed job keeps its history); x is seconds since the first measurement.
  let usageStart = null, usageMarks = [], lastAttempt = null;
  es.addEventListener('usage', e => {
    const u = JSON.parse(e.data);
    if (usageStart === null) usageStart = u.time;
    if (lastAttempt !== null && u.attempt !== undefined && u.attempt !== lastAttempt)
      usageMarks.push({x: u.time - usageStart, label: 'resumed'});
    if (u.attempt !== undefined) lastAttempt = u.attempt;
    series(charts.usage, 'CPU %', 0).raw.push({x: u.time - usageStart, y: u.cpu_percent});
    const memory = series(charts.usage, 'memory MB', 1);
    memory.yAxisID = 'y2';
    memory.raw.push({x: u.time - usageStart, y: u.rss_mb});
    charts.usage.options.scales.y.title.text =
        `CPU % (${u.processes} process${u.processes === 1 ? '' : 'es'} together)`;
    later();
  });
  es.addEventListener('end', async () => {
    es.close();
    current = await api('GET', `/api/jobs/${id}`);
    snapshots = current.snapshots || [];
    redraw();
    snapshotsShown();
    loadLog();
  });
  cleanup.push(() => es.close());
  // The log, live while the job runs.
  const logTimer = setInterval(() => {
    if (live()) loadLog();
  }, 2000);
  cleanup.push(() => clearInterval(logTimer));
  // Snapshots arrive while the job runs: the downloads, the test section and the actions
  // follow them (looked up at most every 3 s, when the job reports progress).
  let lastCheck = 0;
  const checkSnapshots = async () => {
    if (!live() || Date.now() - lastCheck < 3000) return;
    lastCheck = Date.now();
    try {
      const j = await api('GET', `/api/jobs/${id}`);
      const seen = JSON.stringify(snapshots);
      snapshots = j.snapshots || [];
      if (JSON.stringify(snapshots) !== seen) snapshotsShown();
    } catch (e) { /* the next progress tries again */
    }
  };
  const snapshotsShown = () => {
    const none = snapshots.length === 0;
    const snaps =
        snapshots
            .map(
                s =>
                    `<a href="${withToken(`/api/jobs/${id}/snapshots/${s.iter}.safetensors`)}">iteration ${s.iter}</a>`)
            .join(' · ');
    const downloads = document.getElementById('downloads');
    if (!downloads || gone) return;
    downloads.innerHTML = `<a href="${withToken(`/api/jobs/${id}/files/net.prototxt`)}">net.prototxt</a> · <a href="${
        withToken(`/api/jobs/${id}/files/solver.prototxt`)}">solver.prototxt</a>
       <div id="snapshots">weights (safetensors): ${
        snaps || `<span class="muted">${live() ? 'no snapshot yet' : 'none'}</span>`}</div>`;
    // Nothing to test or optimize before the first snapshot; and a "no snapshot" error
    // from a click before it came is stale once one exists.
    const ended = !live();
    document.getElementById('test-section').hidden = none && ended;
    document.getElementById('optimize-section').hidden = none && ended || textDataset;
    document.getElementById('deploy-section').hidden = none || textDataset;
    document.querySelector('#deploy-form select[name=iter]').innerHTML =
        snapshots.slice().reverse().map(sn => `<option value="${sn.iter}">iteration ${sn.iter}</option>`).join('');
    document.getElementById('no-snapshot').hidden = !(none && ended);
    if (!none)
      for (const slot of ['classify-result', 'layers', 'evaluation']) {
        const el = document.getElementById(slot);
        if (el && /snapshot/i.test(el.textContent) && el.querySelector('.error')) el.innerHTML = '';
      }
    head();
  };
  let textDataset = false;
  snapshotsShown();
  const showTop = r => {
    const rows = r.top.map(t => `<tr><td>${esc(t.name)}</td><td>${(100 * t.probability).toFixed(2)}%</td>
      <td><div class="prob" style="width:${Math.max(1, 100 * t.probability)}%"></div></td></tr>`).join('');
    document.getElementById('classify-result').innerHTML = `<p>top-1: <span id="top1">${esc(r.top[0].name)}</span>
      ${r.label !== undefined ? `<span class="muted">(sample ${r.index}, labelled ${esc(r.label_name ?? r.label)})</span>` : ''}
      <span class="muted">· snapshot at iteration ${r.iter}</span></p><table class="top5">${rows}</table>`;
  };
  document.getElementById('classify-upload').onclick = async () => {
    const f = document.getElementById('image').files[0];
    if (!f) return alert('Choose a PNG or JPEG image first.');
    const form = new FormData();
    form.append('image', f);
    lastInput = null;
    try { showTop(await api('POST', `/api/jobs/${id}/classify`, form)); } catch (e) { failed('classify-result', e); }
  };
  // The input of the last classification, for "Show layers".
  let lastInput = null;
  let valCount = 1;  // validation images to pick a random one from
  dataset
      .then(d => {
        valCount = Math.max(1, d.info ? d.info.val_count : 1);
        if (d.info && d.info.kind === 'text') {
          textDataset = true;
          textJob(id);
        }
      })
      .catch(() => {});
  const failed = (slot, e) => { document.getElementById(slot).innerHTML = `<div class="error">${esc(e.message)}</div>`; };
  document.getElementById('classify-sample').onclick = async () => {
    const chosen = document.getElementById('sample-index').value;
    lastInput = { split: 'val', index: chosen !== '' ? Number(chosen) : Math.floor(Math.random() * valCount) };
    try { showTop(await api('POST', `/api/jobs/${id}/classify`, lastInput)); } catch (e) { failed('classify-result', e); }
  };
  document.getElementById('visualize').onclick = async () => {
    const f = document.getElementById('image').files[0];
    let body = lastInput || { split: 'val', index: 0 };
    if (f) { body = new FormData(); body.append('image', f); }
    try {
      const r = await api('POST', `/api/jobs/${id}/visualize`, body);
      const stat = s => s ? `mean ${fmt(s.mean, 3)} · std ${fmt(s.std, 3)} · [${fmt(s.min, 3)}, ${fmt(s.max, 3)}]` : '';
      const part = (shown, all, what) =>
          (all !== undefined && shown > 0 && shown < all ?
               `<div class="muted shown">${shown} of ${all} ${what} drawn</div>` :
               '');
      document.getElementById('layers').innerHTML =
          `<h2>Layers${r.index !== undefined ? ` (sample ${r.index}, ${esc(r.label_name ?? r.label)})` : ''}</h2>
        <table><tr><th>layer</th><th>output</th><th>activations</th><th>weights</th></tr>${
              r.layers
                  .map(
                      l => `<tr>
        <td><b>${esc(l.name)}</b><br><span class="muted">${esc(l.type)}</span>${
                          l.in_place_after ?
                              `<div class="muted">shown after ${esc(l.in_place_after)}, which writes in place</div>` :
                              ''}</td><td>${l.shape.join('×')}</td>
        <td>${
                          l.activation_image ?
                              `<img class="viz" src="${l.activation_image}" alt="activations of ${esc(l.name)}">` :
                              ''}${part(l.activation_channels_shown, l.activation_channels, 'channels')}
          <span class="muted">${stat(l.activation)}</span>${histogram(l.activation_histogram, 'activation')}</td>
        <td>${l.weights_image ? `<img class="viz" src="${l.weights_image}" alt="filters of ${esc(l.name)}">` : ''}${
                          part(l.weights_filters_shown, l.weights_filters, 'filters')}
          <span class="muted">${l.weights_shape ? l.weights_shape.join('×') + ' · ' + stat(l.weights) : ''}</span>${
                          histogram(l.weights_histogram, 'weight')}</td>
        </tr>`).join('')}</table>`;
    } catch (e) { failed('layers', e); }
  };
  document.getElementById('classify-many').onclick = async () => {
    const picked = [
      ...document.getElementById('many-folder').files, ...document.getElementById('many-files').files
    ].filter(f => /\.(png|jpe?g)$/i.test(f.name));
    const slot = document.getElementById('many-result');
    if (!picked.length) return alert('Pick a folder or some PNG or JPEG images first.');
    const form = new FormData();
    for (const f of picked) form.append('images', f, f.webkitRelativePath || f.name);
    slot.innerHTML = `<p class="muted">Classifying ${picked.length} images…</p>`;
    try {
      const r = await api('POST', `/api/jobs/${id}/classify_many`, form);
      const url = k => URL.createObjectURL(picked[k]);
      const failedCount = r.results.filter(x => x.error).length;
      slot.innerHTML = `<h3>${r.count} images <span class="muted">(snapshot at iteration ${r.iter}${
          failedCount ? `; ${failedCount} could not be read` : ''})</span></h3>
        <h3>The surest images of each class</h3>
        <table id="many-classes"><tr><th>class</th><th>images</th><th>the surest</th></tr>${
          r.per_class.filter(c => c.count)
              .map(
                  c => `<tr>
          <td>${esc(c.name)}</td><td>${c.count}</td><td class="thumbs">${
                      c.best
                          .map(
                              k => `<img src="${url(k)}" title="${esc(r.results[k].name)}: ${
                                  (100 * r.results[k].top[0].probability).toFixed(1)}%">`)
                          .join('')}</td></tr>`)
              .join('')}</table>
        <h3>Each image</h3>
        <div class="scroll"><table id="many-images"><tr><th>image</th><th>top-1</th><th>probability</th><th>then</th></tr>${
          r.results
              .map(
                  x => x.error ? `<tr><td>${esc(x.name)}</td><td colspan="3" class="error">${esc(x.error)}</td></tr>` :
                                 `<tr><td>${esc(x.name)}</td><td class="top1">${esc(x.top[0].name)}</td><td>${
                                     (100 * x.top[0].probability).toFixed(1)}%</td>
             <td class="muted">${
                                     x.top.slice(1, 3)
                                         .map(t => `${esc(t.name)} ${(100 * t.probability).toFixed(1)}%`)
                                         .join(' · ')}</td></tr>`)
              .join('')}</table></div>`;
    } catch (e) {
      failed('many-result', e);
    }
  };
  document.getElementById('evaluate').onclick = async () => {
    document.getElementById('evaluation').innerHTML = '<p class="muted">Classifying…</p>';
    try {
      const r = await api('POST', `/api/jobs/${id}/evaluate`, { split: 'val' });
      const names = r.per_class.map(c => c.name);
      const max = Math.max(...r.confusion.flat());
      document.getElementById('evaluation').innerHTML = `<h2>Validation set: accuracy <span id="split-accuracy">${(100 * r.accuracy).toFixed(2)}%</span> of ${r.count} images</h2>
        <table class="confusion"><tr><th>true / predicted</th>${names.map(n => `<th>${esc(n)}</th>`).join('')}<th>accuracy</th></tr>
        ${r.confusion.map((row, i) => `<tr><th>${esc(names[i])}</th>${row.map(v => `<td style="background:rgba(194,65,12,${(v / max).toFixed(3)})">${v}</td>`).join('')}
          <td>${(100 * r.per_class[i].accuracy).toFixed(1)}%</td></tr>`).join('')}</table>`;
    } catch (e) { failed('evaluation', e); }
  };
}

// A job that learned text: its test card writes text (POST /api/jobs/<id>/sample) instead of
// classifying images, and the deployment search (which scores accuracy on images) is hidden.
function textJob(id) {
  const card = document.getElementById('classify');
  if (!card) return;
  card.innerHTML = `<div class="row">
      <div><label>Primer (the text the net reads first; empty: one random character)</label><input type="text" id="primer" value=""></div>
      <div><label>Length</label><input type="number" id="sample-length" value="300" min="0" max="2000"></div>
      <div><label>Temperature</label><input type="number" id="temperature" value="0.8" step="any" min="0"></div>
      <div><label>Seed</label><input type="number" id="seed" value="1" min="0"></div></div>
    <button id="sample">Write text</button>
    <div id="sample-result"></div>`;
  // Hidden: the deployment search and the accuracy chart (a text job's test output is its loss).
  for (const hidden
           of [document.getElementById('optimize-section'), document.getElementById('deploy-section'),
               document.getElementById('chart-acc')?.closest('.chart')])
    if (hidden) hidden.hidden = true;
  document.getElementById('sample').onclick = async () => {
    const slot = document.getElementById('sample-result');
    slot.innerHTML = '<p class="muted">Writing…</p>';
    const body = {
      primer: document.getElementById('primer').value,
      length: Number(document.getElementById('sample-length').value),
      temperature: Number(document.getElementById('temperature').value),
      seed: Number(document.getElementById('seed').value)
    };
    try {
      const r = await api('POST', `/api/jobs/${id}/sample`, body);
      slot.innerHTML = `<p class="muted">snapshot at iteration ${r.iter} · ${r.characters} characters in ${
          r.seconds.toFixed(2)} s</p>
        <pre class="text-sample" id="sample-text"><b>${esc(r.primer)}</b>${esc(r.text.slice(r.primer.length))}</pre>`;
    } catch (e) {
      slot.innerHTML = `<div class="error">${esc(e.message)}</div>`;
    }
  };
}

// ---- optimize -----------------------------------------------------------------------
// The form on a training job's page that starts `bakusoku optimize` on its latest snapshot,
// and links to the searches already made from it.
function optimizeForm(id) {
  const form = document.getElementById('optimize-form');
  const runs = async () => {
    const mine = (await api('GET', '/api/jobs')).filter(j => j.kind === 'optimize' && j.source_job === Number(id));
    document.getElementById('optimize-runs').innerHTML = mine.length
      ? `<p>Searches: ${mine.map(j => `<a href="#/jobs/${j.id}">job ${j.id}</a> (${esc(j.spec.objective)}) ${state(j.state)}`).join(' · ')}</p>` : '';
  };
  runs().catch(() => {});
  form.onsubmit = async e => {
    e.preventDefault();
    const body = { objective: form.objective.value, max_accuracy_drop: Number(form.max_accuracy_drop.value),
      budget_minutes: Number(form.budget_minutes.value), allow_training: form.allow_training.checked };
    if (body.allow_training) body.fine_tune_iterations = Number(form.fine_tune_iterations.value);
    try { const j = await api('POST', `/api/jobs/${id}/optimize`, body); location.hash = `#/jobs/${j.id}`; } catch (err) { showError(form, err); }
  };
}

// The form on a training job's page that deploys a snapshot as a job of its own, and
// links to the bundles already made from it.
function deployForm(id) {
  const form = document.getElementById('deploy-form');
  const runs = async () => {
    const mine = (await api('GET', '/api/jobs')).filter(j => j.kind === 'deploy' && j.source_job === Number(id));
    document.getElementById('deploy-runs').innerHTML = mine.length ?
        `<p>Bundles: ${
            mine.map(
                    j => `<a href="#/jobs/${j.id}">job ${j.id}</a> (${esc(j.spec.precision)}, iteration ${
                        j.source_iter}) ${state(j.state)}`)
                .join(' · ')}</p>` :
        '';
  };
  runs().catch(() => {});
  // BF16 only where this server's CPU has it (the server refuses it elsewhere too).
  api('GET', '/api/status')
      .then(s => {
        const bf16 = form.querySelector('option[value=bf16]');
        if (bf16 && !(s.precisions || []).includes('bf16')) {
          bf16.disabled = true;
          bf16.textContent = 'BF16 (not on this server: its CPU has neither AVX-512 BF16 nor AMX)';
        }
      })
      .catch(() => {});
  form.onsubmit = async e => {
    e.preventDefault();
    const body = {precision: form.precision.value};
    if (form.iter.value) body.iter = Number(form.iter.value);
    try {
      const j = await api('POST', `/api/jobs/${id}/deploy`, body);
      location.hash = `#/jobs/${j.id}`;
    } catch (err) {
      showError(form, err);
    }
  };
}

// A deploy job: while it runs, what it does; when done, the bundle and what ships with it,
// and bakusoku bench's figures.
async function deployReport(id, job) {
  const slot = document.getElementById('bundle');
  if (!slot) return;
  const asked = `<p class="muted">From <a href="#/jobs/${job.source_job}">job ${
      job.source_job}</a> (snapshot at iteration ${job.source_iter}) · ${esc(job.spec.precision)}</p>`;
  if (job.state === 'queued' || job.state === 'running') {
    slot.innerHTML = asked + '<p class="muted">Deploying, then timing the bundle: the log below follows both.</p>';
    return;
  }
  if (job.state !== 'done') {
    slot.innerHTML = asked + '<p class="muted">No bundle: the job did not finish.</p>';
    return;
  }
  let r = null;
  try {
    r = await api('GET', `/api/jobs/${id}/deploy/bench.json`);
  } catch (e) { /* the downloads stand without it */
  }
  const file = f => withToken(`/api/jobs/${id}/deploy/${f}`);
  const rows = r ? r.results
                       .map(
                           x => `<tr><td>${x.batch}</td><td>${x.latency_ms.median.toFixed(3)}</td><td>${
                               x.latency_ms.p90.toFixed(3)}</td><td>${x.latency_ms.p99.toFixed(3)}</td>
    <td>${x.latency_ms.mean.toFixed(3)}</td><td>${Math.round(x.throughput_per_s)}</td></tr>`)
                       .join('') :
                   '';
  slot.innerHTML = `${asked}<p><a class="btn" id="bundle-download" href="${
      file('model.bks')}">Download the bundle (.bks)</a>
    <a href="${file('deploy.prototxt')}">deploy.prototxt</a> · <a href="${file('labels.txt')}">labels.txt</a> ·
    <a href="${withToken(`/api/datasets/${job.dataset_id}/images/mean.png`)}" download="mean.png">mean.png</a>
    <span class="muted">(the inputs are the images' pixels / 256; the mean is for reference)</span></p>
    ${
      r ? `<h3>bakusoku bench (${r.threads} threads, ${
              r.iterations} runs each)</h3><table id="bench-figures"><tr><th>batch</th><th>median ms</th><th>p90 ms</th><th>p99 ms</th><th>mean ms</th><th>items/s</th></tr>${
              rows}</table>` :
          ''}
    <p class="muted">Run it in your own program with the C++ API (<code>include/bakusoku/</code>) or time it again: <code>bakusoku bench job${
      id}.bks</code>.</p>`;
}

// A finished search: its summary, the plot, every candidate with the front and the choice
// marked, and the chosen bundle to download.
async function searchReport(id, job) {
  const slot = document.getElementById('search');
  const spec = job.spec;
  const asked = `<p class="muted">From <a href="#/jobs/${job.source_job}">job ${job.source_job}</a> (snapshot at iteration ${job.source_iter}) · ${esc(spec.objective)} · may lose ${spec.max_accuracy_drop} points · ${spec.budget_minutes} minutes${spec.allow_training ? ` · fine-tunes of ${spec.fine_tune_iterations} iterations` : ''}</p>`;
  if (job.state === 'queued' || job.state === 'running') {
    slot.innerHTML = asked + '<p class="muted">Searching: each candidate gets a line in the log below as it is measured; the table and the plot come when the search is done.</p>';
    return;
  }
  if (job.state !== 'done') { slot.innerHTML = asked + '<p class="muted">No report: the search did not finish.</p>'; return; }
  let r;
  try { r = await api('GET', `/api/jobs/${id}/optimize/report.json`); } catch (e) { slot.innerHTML = asked + `<div class="error">${esc(e.message)}</div>`; return; }
  const base = r.candidates[0];
  const speed = r.objective === 'throughput' ? 'items/s' : 'ms per batch';
  // Throughput with the batch tuned: each candidate ran at its own batch.
  const batches = r.batch === 'auto';
  const span = batches ? 6 : 5;
  const rows = r.candidates.map((c, i) => c.error
    ? `<tr><td>${i + 1}</td><td>${esc(c.name)}</td><td colspan="${span}" class="error">failed: ${esc(c.error)}</td></tr>`
    : `<tr class="${i === r.best ? 'best' : ''}"><td>${i + 1}</td><td>${esc(c.name)}</td><td>${(100 * c.accuracy).toFixed(2)}%</td>
      <td>${(100 * (c.accuracy - base.accuracy)).toFixed(2)}</td><td>${r.objective === 'throughput' ? Math.round(c.items_per_s) : c.latency_ms.toFixed(4)}</td>
      ${batches ? `<td>${c.batch}</td>` : ''}<td>${(c.bytes / 1e3).toFixed(1)}</td><td>${[i === r.best ? 'chosen' : '', c.pareto ? 'front' : '', c.fits ? '' : 'over budget'].filter(x => x).join(', ')}</td></tr>`).join('');
  slot.innerHTML = `${asked}<p id="search-summary">${esc(r.summary || '')}</p>
    ${r.best !== null ? `<p><a class="btn" id="best-bundle" href="${withToken(`/api/jobs/${id}/optimize/best.bks`)}">Download the chosen bundle (best.bks)</a></p>` : ''}
    <div class="graph"><img id="search-plot" src="${withToken(`/api/jobs/${id}/optimize/plot.svg`)}" alt="accuracy against ${esc(r.objective)}"></div>
    <table id="candidates"><tr><th>#</th><th>candidate</th><th>accuracy</th><th>change (points)</th><th>${speed}</th>${batches ? '<th>batch</th>' : ''}<th>KB</th><th></th></tr>${rows}
    ${r.not_tried.map(n => `<tr class="untried"><td></td><td>${esc(n)}</td><td colspan="${span}" class="muted">not tried: the time budget ran out</td></tr>`).join('')}</table>`;
}

// ---- datasets -----------------------------------------------------------------------
async function datasetsPage() {
  const ds = await api('GET', '/api/datasets');
  page.innerHTML = `<h1>Datasets</h1>${ds.length ? `<table><tr><th>#</th><th>name</th><th>status</th><th>images</th><th>shape</th><th>classes</th></tr>
    ${ds.map(d => `<tr><td>${d.id}</td><td><a href="#/datasets/${d.id}">${esc(d.name)}</a></td><td>${state(d.status)} ${d.status === 'running' ? bar(d.progress) : ''}</td>
      <td>${d.info ? d.info.train_count + ' + ' + d.info.val_count : ''}</td><td>${d.info ? d.info.shape.join('×') : ''}</td>
      <td>${d.info ? d.info.classes.length : ''}</td></tr>`).join('')}</table>` : '<p class="muted">No datasets yet.</p>'}
    <a class="btn" href="#/datasets/new">New dataset</a>`;
}

async function datasetPage(id) {
  const draw = async () => {
    const d = await api('GET', `/api/datasets/${id}`);
    let html = `<h1>Dataset ${d.id}: ${esc(d.name)}</h1><div class="card">${state(d.status)} ${bar(d.progress)}
      <button id="delete-dataset" class="secondary small">Delete</button>
      <span class="muted">${
        esc(d.spec.source === 'idx'      ? d.spec.train_images :
                d.spec.source === 'text' ? d.spec.file :
                                           d.spec.root)}</span>
      ${d.reason && d.status === 'failed' ? `<div class="reason">${esc(d.reason)}</div>` : ''}</div>`;
    if (d.info && d.info.kind === 'text') {
      const i = d.info;
      html += `<p>${i.train_count} training and ${i.val_count} validation characters; <span id="vocabulary-size">${
          i.classes.length}</span> distinct characters.</p>
        <h2>Characters</h2><div class="card"><code>${
          i.classes.map(
                       c =>
                           esc(c === '\n'    ? '⏎' :
                                   c === ' ' ? '␣' :
                                               c))
              .join(' ')}</code></div>
        <h2>The text begins</h2><pre class="card text-sample">${esc(i.preview)}</pre>`;
    } else if (d.info) {
      const i = d.info;
      html += `<p>${i.train_count} training and ${i.val_count} validation images of ${i.shape.join('×')} (channels × height × width).</p>
        <h2>Classes</h2><table><tr><th>#</th><th>class</th><th>train</th><th>val</th><th>samples</th></tr>
        ${i.classes.map((c, k) => `<tr><td>${k}</td><td>${esc(c)}</td><td>${i.train_per_class[k]}</td><td>${i.val_per_class[k]}</td>
          <td class="thumbs">${i.thumbnails.filter(t => t.class === k).map(t => `<img alt="${esc(c)}" src="${withToken(`/api/datasets/${id}/images/${t.file}`)}">`).join('')}</td></tr>`).join('')}
        </table><h2>Mean image</h2><div class="thumbs"><img src="${withToken(`/api/datasets/${id}/images/mean.png`)}" alt="mean"></div>`;
    }
    page.innerHTML = html;
    document.getElementById('delete-dataset').onclick = async () => {
      if (!confirmDelete(`dataset ${d.id} (${d.name}) and its packed files`)) return;
      try {
        await api('DELETE', `/api/datasets/${id}`);
        location.hash = '#/datasets';
      } catch (e) {
        alert(e.message);
      }
    };
    return d.status;
  };
  const s = await draw();
  if (s === 'queued' || s === 'running') {
    const timer = setInterval(async () => { const st = await draw(); if (st !== 'queued' && st !== 'running') clearInterval(timer); }, 1000);
    cleanup.push(() => clearInterval(timer));
  }
}

const fashionClasses = ['T-shirt/top', 'Trouser', 'Pullover', 'Dress', 'Coat', 'Sandal', 'Shirt', 'Sneaker', 'Bag', 'Ankle boot'];

function newDatasetPage() {
  page.innerHTML = `<h1>New dataset</h1><form id="form">
    <label>Name</label><input type="text" name="name" value="fashion-mnist"><div class="error" data-error-for="name"></div>
    <label>Source</label><select name="source"><option value="idx">IDX files (MNIST / Fashion-MNIST)</option><option value="folder">Image folder: root/&lt;label&gt;/*.png|jpg</option><option value="text">Text file (UTF-8; character-level models)</option></select>
    <div class="error" data-error-for="source"></div>
    <div id="idx"><label>Training images (IDX; labels beside them)</label><input type="text" name="train_images" value="/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz">
      <div class="error" data-error-for="train_images"></div>
      <label>Test images (optional: used as validation set)</label><input type="text" name="test_images" value="/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz">
      <div class="error" data-error-for="test_images"></div>
      <label><input type="checkbox" name="fashion" checked> Fashion-MNIST class names</label></div>
    <div id="folder" hidden><label>Folder</label><input type="text" name="root" placeholder="/path/to/images (inside the server's import folders)">
      <div class="error" data-error-for="root"></div></div>
    <div id="text" hidden><label>Text file</label><input type="text" name="file" placeholder="/path/to/text.txt (inside the server's import folders)">
      <div class="error" data-error-for="file"></div></div>
    <div class="row" id="geometry"><div><label>Width</label><input type="number" name="width" placeholder="as stored"><div class="error" data-error-for="width"></div></div>
      <div><label>Height</label><input type="number" name="height" placeholder="as stored"><div class="error" data-error-for="height"></div></div>
      <div><label>Colour</label><select name="color"><option value="">as stored</option><option value="grayscale">grayscale</option><option value="color">colour</option></select>
      <div class="error" data-error-for="color"></div></div></div>
    <label>Validation % (when there is no test set)</label><input type="number" name="val_percent" value="10"><div class="error" data-error-for="val_percent"></div>
    <div class="error" data-error-for=""></div>
    <button type="submit" id="create-dataset">Create dataset</button></form>`;
  const form = document.getElementById('form');
  form.source.onchange = () => {
    for (const kind of ['idx', 'folder', 'text']) document.getElementById(kind).hidden = form.source.value !== kind;
    document.getElementById('geometry').hidden = form.source.value === 'text';
  };
  form.onsubmit = async e => {
    e.preventDefault();
    const body = { name: form.name.value, source: form.source.value, val_percent: Number(form.val_percent.value) };
    if (body.source === 'idx') {
      body.train_images = form.train_images.value;
      if (form.test_images.value) body.test_images = form.test_images.value;
      if (form.fashion.checked) body.class_names = fashionClasses;
    } else if (body.source === 'text') {
      body.file = form.file.value;
    } else {
      body.root = form.root.value;
    }
    // Empty: the files' own size and colour (folders: 28x28 grey). Text has neither.
    if (body.source !== 'text') {
      if (form.width.value) body.width = Number(form.width.value);
      if (form.height.value) body.height = Number(form.height.value);
      if (form.color.value) body.color = form.color.value;
    }
    try { const d = await api('POST', '/api/datasets', body); location.hash = `#/datasets/${d.id}`; } catch (err) { showError(form, err); }
  };
}

// ---- models -------------------------------------------------------------------------
async function modelsPage() {
  const ms = await api('GET', '/api/models');
  page.innerHTML = `<h1>Models</h1>${ms.length ? `<table><tr><th>#</th><th>name</th><th>network</th><th>dataset</th><th>jobs</th></tr>
    ${ms.map(m => `<tr><td>${m.id}</td><td><a href="#/models/${m.id}">${esc(m.name)}</a></td><td>${esc(m.network)}</td><td>${m.dataset_id}</td>
      <td>${m.jobs.map(j => `<a href="#/jobs/${j.id}">${j.id}</a> ${state(j.state)}`).join(' ')}</td></tr>`).join('')}</table>` : '<p class="muted">No models yet.</p>'}
    <a class="btn" href="#/models/new">New model</a>`;
}

async function modelPage(id) {
  const m = await api('GET', `/api/models/${id}`);
  page.innerHTML = `<h1>Model ${m.id}: ${esc(m.name)}</h1>
    <div class="card">${esc(m.network)} on dataset <a href="#/datasets/${m.dataset_id}">${m.dataset_id}</a> · ${
      esc(m.solver.type)}, lr policy ${esc(m.solver.lr_policy)}, ${m.solver.epochs} epochs
      <button id="delete-model" class="secondary small">Delete</button></div>
    <table><tr><th>job</th><th>base_lr</th><th>batch</th><th>state</th><th>latest</th></tr>
    ${
      m.jobs
          .map(
              j => `<tr><td><a href="#/jobs/${j.id}">${esc(j.name)}</a></td><td>${j.params.base_lr}</td><td>${
                  j.params.batch_size}</td><td>${state(j.state)}</td>
      <td>${
                  j.last_test && j.last_test.accuracy !== undefined ? 'accuracy ' + fmt(j.last_test.accuracy) :
                                                                      ''}</td></tr>`)
          .join('')}</table>
    <h2>${m.jobs.length > 1 ? 'Sweep: every job on one chart' : 'Curves'} (by epoch)</h2>
    <div class="charts">${chartBox('cmp-loss')}${chartBox('cmp-acc')}</div>
    <h2>Network</h2><div class="card graph">${
      m.jobs.length ? `<img id="graph" src="${withToken(`/api/models/${id}/graph.svg`)}" alt="the network">` :
                      ''}</div>`;
  document.getElementById('delete-model').onclick = async () => {
    if (!confirmDelete(
            `model ${m.id} (${m.name}) and its ${m.jobs.length} job${m.jobs.length === 1 ? '' : 's'} with their files`))
      return;
    try {
      await api('DELETE', `/api/models/${id}`);
      location.hash = '#/models';
    } catch (e) {
      alert(e.message);
    }
  };
  const loss = lineChart(document.getElementById('cmp-loss'), 'train loss', 'epoch');
  const acc = lineChart(document.getElementById('cmp-acc'), 'test accuracy', 'epoch');
  fixedRange(acc, 0, 1);
  chartTools(loss, {smooth: true});
  chartTools(acc);
  const refresh = async () => {
    for (const [k, j] of m.jobs.entries()) {
      const recs = await api('GET', `/api/jobs/${j.id}/metrics`);
      series(loss, j.name, k).raw = recs.filter(r => r.phase === 'train').map(r => ({x: r.epoch, y: r.loss}));
      series(acc, j.name, k, true).raw =
          recs.filter(r => r.phase === 'test' && r.accuracy !== undefined).map(r => ({x: r.epoch, y: r.accuracy}));
    }
    draw(loss);
    draw(acc);
  };
  await refresh();
  const timer = setInterval(() => refresh().catch(() => {}), 3000);
  cleanup.push(() => clearInterval(timer));
}

// The solver fields each lr policy reads (the others are hidden); momentum is not used by
// AdaGrad and RMSProp.
const policyFields = {
  gamma: ['step', 'exp', 'inv', 'multistep', 'sigmoid'],
  step_epochs: ['step', 'sigmoid'],
  stepvalue_epochs: ['multistep'],
  power: ['inv', 'poly']
};

// query: "from=<job>" opens the form filled from that job's model and settings (clone and
// edit); "&fine_tune=1" also starts from one of its snapshots.
async function newModelPage(query) {
  const args = new URLSearchParams(query || '');
  const fromId = Number(args.get('from')) || 0, fineTune = fromId && args.get('fine_tune') === '1';
  const [datasets, networks] = await Promise.all([api('GET', '/api/datasets'), api('GET', '/api/networks')]);
  const ready = datasets.filter(d => d.status === 'done');
  if (!ready.length) {
    const packing = datasets.filter(d => d.status === 'queued' || d.status === 'running');
    page.innerHTML = `<h1>New model</h1><div class="card" id="no-dataset">${
        packing.length ?
            `A model trains on a dataset: <a href="#/datasets/${packing[0].id}">${
                esc(packing[0].name)}</a> is still being packed; come back when it is done.` :
            'A model trains on a dataset, and there is none yet: <a href="#/datasets/new">create a dataset first</a>.'}</div>`;
    return;
  }
  let source = null, sourceModel = null;
  if (fromId) {
    source = await api('GET', `/api/jobs/${fromId}`);
    sourceModel = await api('GET', `/api/models/${source.model_id}`);
  }
  const field = (name, label, value, extra = '') =>
      `<div${policyFields[name] ? ` data-policies="${policyFields[name].join(' ')}"` : ''}><label>${
          label}</label><input type="${extra.includes('text') ? 'text' : 'number'}" step="any" name="${name}" value="${
          value}"><div class="error" data-error-for="${name}"></div></div>`;
  page.innerHTML = `<h1>New model${
      source ? ` <span class="muted">from job ${source.id}</span>` : ''}</h1><form id="form">
    <div class="row"><div><label>Name</label><input type="text" name="name" value="lenet"><div class="error" data-error-for="name"></div></div>
    <div class="span2"><label>Dataset</label><select name="dataset_id">${
      ready
          .map(
              d => `<option value="${d.id}">${esc(d.name)} (${
                  d.info.kind === 'text' ? `text, ${d.info.classes.length} characters` :
                                           d.info.shape.join('×')})</option>`)
          .join('')}</select>
      <div class="error" data-error-for="dataset_id"></div></div>
    <div><label>Network</label><select name="network">${
      networks.map(n => `<option value="${n.name}" title="${esc(n.about)}">${esc(n.title)}</option>`).join('')}</select>
      <div class="error" data-error-for="network"></div></div></div>
    <div id="custom" hidden><label>Custom network (prototxt; its layers read 'data' and 'label', the dataset's Data layers are added)</label>
      <div class="toolbar">Start from <select id="start-from"><option value="">(keep the text)</option>${
      networks.filter(n => n.name !== 'custom')
          .map(n => `<option value="${n.name}">${esc(n.title)}</option>`)
          .join('')}</select></div>
      <textarea name="prototxt" spellcheck="false"></textarea><div class="error" data-error-for="prototxt" id="prototxt-error"></div>
      <button type="button" id="validate" class="secondary">Validate</button><span id="valid" class="ok"></span></div>
    ${
      fineTune ? `<div id="fine-tune-box"><h2>Fine-tune</h2><div class="row">
      <div><label>Start from the weights of job ${source.id} at</label><select name="weights_iter">${
                     (source.snapshots || [])
                         .slice()
                         .reverse()
                         .map(sn => `<option value="${sn.iter}">iteration ${sn.iter}</option>`)
                         .join('')}</select>
        <div class="error" data-error-for="weights_from"></div></div>
      <div><label>Learning-rate multiplier per layer (e.g. <code>conv1: 0, ip2: 10</code>; 0 freezes a layer)</label><input type="text" name="lr_mult" placeholder="layer: multiplier, ..."><div class="error" data-error-for="lr_mult"></div></div></div>
      <p class="muted">Layers whose weights do not fit the new network (a renamed layer, a classifier resized for another class count) start from their fillers.</p></div>` :
                 `
    <div class="row"><div class="wide"><label>Start from weights (optional: a .safetensors or .caffemodel file inside the server's import folders, or upload one of up to 16 MB)</label>
      <div class="toolbar"><input type="text" name="weights_file" placeholder="/path/to/model.caffemodel"><input type="file" id="weights-upload" accept=".safetensors,.caffemodel"></div>
      <div class="error" data-error-for="weights_from"></div><div class="error" data-error-for="weights"></div>
      <details id="uploads-box" hidden><summary id="uploads-summary"></summary><table><tbody id="uploads-list"></tbody></table></details></div></div>`}
    <h2>Solver</h2><div class="row">
      <div><label>Type</label><select name="type">${
          ['SGD', 'Nesterov', 'Adam', 'RMSProp', 'AdaGrad', 'AdaDelta']
              .map(t => `<option>${t}</option>`)
              .join('')}</select></div>
      <div><label>Base learning rate (list: a sweep)</label><input type="text" name="base_lr" value="0.01"><div class="error" data-error-for="base_lr"></div></div>
      <div><label>Batch size (list: a sweep)</label><input type="text" name="batch_size" value="64"><div class="error" data-error-for="batch_size"></div></div>
      <div><label>Epochs</label><input type="number" step="any" name="epochs" value="2"><div class="error" data-error-for="epochs"></div></div>
      <div><label>Learning rate policy</label><select name="lr_policy">${
          ['fixed', 'step', 'exp', 'inv', 'multistep', 'poly', 'sigmoid']
              .map(t => `<option>${t}</option>`)
              .join('')}</select></div>
      ${field('gamma', 'gamma', 0.1)}
      ${field('step_epochs', 'step (epochs)', 1)}
      ${field('stepvalue_epochs', 'steps (epochs, comma-separated)', 1, 'text')}
      ${field('power', 'power', 0.75)}
      <div id="momentum-field"><label>Momentum</label><input type="number" step="any" name="momentum" value="0.9"><div class="error" data-error-for="momentum"></div></div>
      <div><label>Weight decay</label><input type="number" step="any" name="weight_decay" value="0.0005"><div class="error" data-error-for="weight_decay"></div></div>
      <div><label>Test every (epochs)</label><input type="number" step="any" name="test_epochs" value="1"><div class="error" data-error-for="test_epochs"></div></div>
      <div><label>Display every (iterations; empty: about 10 per epoch)</label><input type="number" step="1" name="display" placeholder="auto"><div class="error" data-error-for="display"></div></div>
      <div><label>Random seed</label><input type="number" step="1" name="seed" value="1"><div class="error" data-error-for="seed"></div></div>
      <div><label>Snapshot every (epochs)</label><input type="number" step="any" name="snapshot_epochs" value="1"><div class="error" data-error-for="snapshot_epochs"></div></div>
      <div><label>Keep newest snapshots (0: all)</label><input type="number" step="1" name="keep_snapshots" value="5"><div class="error" data-error-for="keep_snapshots"></div></div>
      <div><label>Processes (data-parallel ranks; the batch is split among them)</label><input type="number" step="1" min="1" name="processes" value="1"><div class="error" data-error-for="processes"></div></div>
    </div>
    <h2>Learning rate schedule</h2>${chartBox('lr-preview')}
    <div class="error" data-error-for=""></div><div class="error" data-error-for="solver"></div><div class="error" data-error-for="type"></div><div class="error" data-error-for="lr_policy"></div>
    <button type="submit" id="create-model">Create and train</button></form>`;
  const form = document.getElementById('form');
  const list = v => v.split(/[\s,]+/).filter(x => x).map(Number);
  form.network.onchange = () => { document.getElementById('custom').hidden = form.network.value !== 'custom'; };
  // A text dataset takes the char-RNN (examples/char_rnn) with Adam (the example's RMSProp
  // needs its gradient clipping, which the form does not offer); an image one, LeNet's.
  const isText = () => {
    const d = ready.find(x => String(x.id) === form.dataset_id.value);
    return !!(d && d.info.kind === 'text');
  };
  const fitDataset = () => {
    const text = isText();
    if (text === (form.network.value === 'char_rnn')) return;
    const set = text ?
        {network: 'char_rnn', name: 'char-rnn', type: 'Adam', base_lr: '0.002', batch_size: '32', weight_decay: '0'} :
        {network: 'lenet', name: 'lenet', type: 'SGD', base_lr: '0.01', batch_size: '64', weight_decay: '0.0005'};
    for (const [k, v] of Object.entries(set)) form[k].value = v;
    form.network.onchange();
  };
  form.dataset_id.onchange = () => {
    fitDataset();
    drawPreview();
  };
  // The solver settings as POST /api/models takes them (the preview sends the same).
  const solverOf = () => {
    const solver = {
      type: form.type.value,
      base_lr: list(form.base_lr.value),
      batch_size: list(form.batch_size.value),
      epochs: Number(form.epochs.value),
      lr_policy: form.lr_policy.value,
      gamma: Number(form.gamma.value),
      step_epochs: Number(form.step_epochs.value),
      power: Number(form.power.value),
      momentum: Number(form.momentum.value),
      weight_decay: Number(form.weight_decay.value),
      snapshot_epochs: Number(form.snapshot_epochs.value),
      keep_snapshots: Number(form.keep_snapshots.value),
      test_epochs: Number(form.test_epochs.value),
      seed: Number(form.seed.value)
    };
    if (form.display.value) solver.display = Number(form.display.value);
    if (solver.lr_policy === 'multistep') solver.stepvalue_epochs = list(form.stepvalue_epochs.value);
    return solver;
  };
  // Only the fields the chosen policy and solver read.
  const showFields = () => {
    form.querySelectorAll('[data-policies]').forEach(d => {
      d.hidden = !d.dataset.policies.split(' ').includes(form.lr_policy.value);
    });
    document.getElementById('momentum-field').hidden = ['AdaGrad', 'RMSProp'].includes(form.type.value);
  };
  form.lr_policy.addEventListener('change', showFields);
  form.type.addEventListener('change', showFields);
  // A standard network's layers as the custom network's starting text.
  document.getElementById('start-from').onchange = async e => {
    const name = e.target.value;
    if (!name) return;
    if (form.prototxt.value.trim() && !confirm('Replace the text in the editor?')) {
      e.target.value = '';
      return;
    }
    try {
      const r = await api('GET', `/api/networks/${name}?dataset_id=${form.dataset_id.value}`);
      form.prototxt.value = r.prototxt;
      form.prototxt.dispatchEvent(new Event('input'));
    } catch (err) {
      document.getElementById('prototxt-error').textContent = err.message;
    }
    e.target.value = '';
  };
  // Uploaded weights (the server's limit counts them all): each can fill the field or go.
  const uploadsBox = document.getElementById('uploads-box');
  const mib = b => (b / 1048576).toFixed(1);
  const showUploads = async () => {
    if (!uploadsBox) return;
    const u = await api('GET', '/api/weights');
    uploadsBox.hidden = !u.files.length;
    document.getElementById('uploads-summary').textContent =
        `Uploaded weights: ${u.files.length} file(s), ${mib(u.bytes)} of ${mib(u.limit_bytes)} MiB`;
    document.getElementById('uploads-list').innerHTML =
        u.files
            .map(f => `<tr><td>${esc(f.name)}</td><td>${mib(f.bytes)} MiB</td><td>${when(f.modified)}</td><td>
          <button type="button" class="secondary" data-use="${esc(f.path)}">Use</button>
          <button type="button" class="secondary" data-delete="${esc(f.name)}">Delete</button></td></tr>`)
            .join('');
  };
  if (uploadsBox) {
    uploadsBox.onclick = async e => {
      const b = e.target.closest('button');
      if (!b) return;
      if (b.dataset.use) form.weights_file.value = b.dataset.use;
      if (!b.dataset.delete || !confirmDelete(b.dataset.delete)) return;
      try {
        await api('DELETE', `/api/weights/${encodeURIComponent(b.dataset.delete)}`);
        await showUploads();
      } catch (err) {
        showError(form, err);
      }
    };
    showUploads().catch(err => showError(form, err));
  }
  // An uploaded weights file lands in the import folder; its path fills the field.
  const upload = document.getElementById('weights-upload');
  if (upload)
    upload.onchange = async () => {
      if (!upload.files[0]) return;
      const body = new FormData();
      body.append('weights', upload.files[0]);
      try {
        form.weights_file.value = (await api('POST', '/api/weights', body)).path;
        await showUploads();
      } catch (err) {
        showError(form, err);
      }
    };
  // An edit makes the last verdict stale.
  form.prototxt.addEventListener('input', () => {
    document.getElementById('valid').textContent = '';
    document.getElementById('prototxt-error').textContent = '';
  });
  // The schedule preview: the server's learning_rate() (POST /api/lr_schedule), one series
  // per base_lr of a sweep, asked again a moment after the last change.
  const preview = lineChart(document.getElementById('lr-preview'), 'learning rate', 'epoch');
  preview.$zeroBased = true;
  chartTools(preview);
  let asked = 0, previewSlot = null, previewTimer = null, gone = false;
  cleanup.push(() => { gone = true; clearTimeout(previewTimer); });
  const drawPreview = async () => {
    const n = ++asked, solver = solverOf();
    const where = form.dataset_id.value ? { dataset_id: Number(form.dataset_id.value) } : { iterations_per_epoch: 1000 };
    const lrs = solver.base_lr.length ? solver.base_lr : [undefined];  // none: the server names the field
    try {
      const answers = await Promise.all(lrs.map(lr => api('POST', '/api/lr_schedule', { ...where, solver: lr === undefined ? solver : { ...solver, base_lr: lr } })));
      if (gone || n !== asked) return;  // a newer request or another page
      if (previewSlot) { previewSlot.textContent = ''; previewSlot = null; }
      preview.data.datasets = [];
      answers.forEach((a, k) => {
        const s = series(preview, 'base_lr ' + lrs[k], k);
        s.stepped = 'after';
        s.raw = a.points.map(p => ({x: p.epoch, y: p.lr}));
      });
      draw(preview);
    } catch (err) {
      if (gone || n !== asked) return;
      previewSlot = showError(form, err);
    }
  };
  form.oninput = () => { clearTimeout(previewTimer); previewTimer = setTimeout(drawPreview, 250); };
  if (source) {  // clone and edit: the source job's model and its own point of a sweep
    const sv = sourceModel.solver, set = {
      name: `${source.name} (${fineTune ? 'fine-tuned' : 'clone'})`,
      dataset_id: sourceModel.dataset_id,
      network: sourceModel.network,
      type: sv.type,
      base_lr: source.params.base_lr,
      batch_size: source.params.batch_size,
      epochs: sv.epochs,
      lr_policy: sv.lr_policy,
      gamma: sv.gamma,
      step_epochs: sv.step_epochs,
      power: sv.power,
      momentum: sv.momentum,
      weight_decay: sv.weight_decay,
      snapshot_epochs: sv.snapshot_epochs,
      keep_snapshots: sv.keep_snapshots,
      processes: source.processes || 1,
      test_epochs: sv.test_epochs ?? 1,
      seed: sv.seed ?? 1,
      display: sv.display ?? ''
    };
    if (sv.stepvalue_epochs) set.stepvalue_epochs = sv.stepvalue_epochs.join(', ');
    for (const [k, v] of Object.entries(set))
      if (form[k] && v !== undefined) form[k].value = v;
    if (sourceModel.prototxt) form.prototxt.value = sourceModel.prototxt;
    form.network.onchange();
  } else {
    fitDataset();
  }
  showFields();
  drawPreview();
  document.getElementById('validate').onclick = async () => {
    const body = { prototxt: form.prototxt.value };
    if (form.dataset_id.value) body.dataset_id = Number(form.dataset_id.value);
    const err = document.getElementById('prototxt-error'), ok = document.getElementById('valid');
    err.textContent = ''; ok.textContent = '';
    try {
      const r = await api('POST', '/api/models/validate', body);
      if (r.ok) { ok.textContent = 'valid'; return; }
      err.textContent = (r.line ? `line ${r.line}${r.column ? `, column ${r.column}` : ''}: ` : '') + r.error;
      if (r.line) {  // select the line in the editor
        const lines = form.prototxt.value.split('\n');
        const start = lines.slice(0, r.line - 1).join('\n').length + (r.line > 1 ? 1 : 0);
        form.prototxt.focus();
        form.prototxt.setSelectionRange(start, start + (lines[r.line - 1] || '').length);
      }
    } catch (e) { err.textContent = e.message; }
  };
  form.onsubmit = async e => {
    e.preventDefault();
    const body = { name: form.name.value, network: form.network.value, dataset_id: Number(form.dataset_id.value), solver: solverOf(),
      processes: Number(form.processes.value) };
    if (body.network === 'custom') body.prototxt = form.prototxt.value;
    if (!fineTune && form.weights_file.value.trim()) body.weights_from = {file: form.weights_file.value.trim()};
    if (fineTune) {
      body.weights_from = {job_id: source.id, iter: Number(form.weights_iter.value)};
      const mults = {};
      for (const part of form.lr_mult.value.split(/[,\n]+/).map(x => x.trim()).filter(Boolean)) {
        const m = part.match(/^([^:\s]+)\s*:\s*(\S+)$/);
        if (!m)
          return showError(form, Object.assign(new Error(`"${part}" is not "layer: multiplier"`), {field: 'lr_mult'}));
        mults[m[1]] = Number(m[2]);
      }
      if (Object.keys(mults).length) body.lr_mult = mults;
    }
    try {
      const m = await api('POST', '/api/models', body);
      location.hash = m.jobs.length === 1 ? `#/jobs/${m.jobs[0].id}` : `#/models/${m.id}`;
    } catch (err) { showError(form, err); }
  };
}
