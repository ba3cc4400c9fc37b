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
function lineChart(canvas, yTitle, xTitle = 'iteration') {
  return new Chart(canvas, {
    type: 'line',
    data: { datasets: [] },
    options: {
      animation: false, parsing: false, normalized: true, maintainAspectRatio: false,
      elements: { point: { radius: 0 }, line: { borderWidth: 1.5 } },
      scales: { x: { type: 'linear', min: 0, title: { display: true, text: xTitle } }, y: { title: { display: true, text: yTitle } } },
      plugins: { legend: { position: 'bottom' } },
    },
  });
}
// A y axis from zero to just above the largest value (Chart.js gives a constant series,
// such as a fixed learning rate, an axis of +-1 around it).
function zeroBased(chart) {
  let top = 0;
  for (const d of chart.data.datasets) for (const p of d.data) top = Math.max(top, p.y);
  chart.options.scales.y.min = 0;
  chart.options.scales.y.max = top > 0 ? 1.1 * top : undefined;
}
const palette = ['#c2410c', '#1d4ed8', '#15803d', '#7c3aed', '#be185d', '#0e7490', '#a16207', '#4b5563'];
// sparse: few points (test results), drawn as dots too.
function series(chart, label, colorIndex, sparse) {
  let s = chart.data.datasets.find(d => d.label === label);
  if (!s) {
    const color = palette[colorIndex % palette.length];
    s = { label, data: [], borderColor: color, backgroundColor: color, pointRadius: sparse ? 3 : 0 };
    chart.data.datasets.push(s);
  }
  return s;
}

// ---- routes -------------------------------------------------------------------------
const routes = [
  [/^#?\/?$/, jobsPage],
  [/^#\/datasets$/, datasetsPage],
  [/^#\/datasets\/new$/, newDatasetPage],
  [/^#\/datasets\/(\d+)$/, datasetPage],
  [/^#\/models$/, modelsPage],
  [/^#\/models\/new$/, newModelPage],
  [/^#\/models\/(\d+)$/, modelPage],
  [/^#\/jobs\/(\d+)$/, jobPage],
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
async function jobsPage() {
  page.innerHTML = '<h1>Jobs</h1><div id="jobs"></div>';
  const draw = async () => {
    const jobs = await api('GET', '/api/jobs');
    const rows = jobs.slice()
                     .reverse()
                     .map(
                         j => `<tr>
      <td>${j.id}</td><td><a href="#/jobs/${j.id}">${esc(j.name)}</a></td><td>${esc(j.kind)}${
                             (j.processes || 1) > 1 ? ' ×' + j.processes : ''}</td>
      <td>${state(j.state)}</td><td>${bar(j.progress)}</td>
      <td>${latest(j)}</td>
      <td>${when(j.created)}</td></tr>`)
                     .join('');
    document.getElementById('jobs').innerHTML = jobs.length
      ? `<table><tr><th>#</th><th>name</th><th>kind</th><th>state</th><th>progress</th><th>latest</th><th>created</th></tr>${rows}</table>`
      : '<p class="muted">No jobs yet: create a dataset, then a model.</p>';
  };
  await draw();
  const timer = setInterval(() => draw().catch(() => {}), 2000);
  cleanup.push(() => clearInterval(timer));
}

async function jobPage(id) {
  const job = await api('GET', `/api/jobs/${id}`);
  page.innerHTML = `<h1>Job ${job.id}: <span id="job-name">${esc(job.name)}</span></h1>
    <div class="card" id="job-head"></div>
    <div id="job-actions"></div>
    ${job.kind === 'train' ? `
    <h2>Training <label style="display:inline;font-weight:400;margin-left:12px"><input type="checkbox" id="by-epoch"> by epoch</label></h2>
    <div class="charts">
      <div class="chart"><canvas id="chart-loss"></canvas></div>
      <div class="chart"><canvas id="chart-acc"></canvas></div>
      <div class="chart"><canvas id="chart-lr"></canvas></div>
      <div class="chart"><canvas id="chart-speed"></canvas></div>
      <div class="chart"><canvas id="chart-usage"></canvas></div>
    </div>
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
    </div>
    <h2>Downloads</h2><div class="card" id="downloads"></div>
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
    </form>` : ''}
    ${job.kind === 'optimize' ? `<h2>Search</h2><div class="card" id="search"></div>` : ''}
    <h2>Log</h2><pre class="log" id="log"></pre>`;
  let current = job;
  const head = () => {
    const j = current;
    document.getElementById('job-head').innerHTML = `${state(j.state)} ${bar(j.progress)}
      <span class="muted">attempt ${j.attempts || 0} · created ${when(j.created)}${j.finished ? ' · finished ' + when(j.finished) : ''}</span>
      ${j.params ? `<div class="muted">base_lr ${j.params.base_lr} · batch ${j.params.batch_size}<span id="world-size">${(j.processes || 1) > 1 ? ` · ${j.processes} processes (batch ${j.params.batch_size / j.processes} each)` : ' · 1 process'}</span>${j.slurm_id ? `<span id="slurm"> · Slurm job ${esc(j.slurm_id)}${j.slurm_state ? ' ' + esc(j.slurm_state) : ''}</span>` : ''}</div>` : ''}
      ${j.reason ? `<div class="${j.state === 'failed' ? 'reason' : 'muted'}" id="reason">${esc(j.reason)}</div>` : ''}`;
    const can = { abort: ['queued', 'running'].includes(j.state), resume: ['aborted', 'failed'].includes(j.state) };
    document.getElementById('job-actions').innerHTML =
      (can.abort ? '<button id="abort">Abort</button>' : '') + (can.resume ? '<button id="resume">Resume</button>' : '') +
      (j.kind === 'train' ? '<button id="clone" class="secondary">Clone</button>' : '') +
      (j.kind !== 'dataset' ? '<button id="delete" class="secondary">Delete</button>' : '');
    const act = (name, method, path, after) => {
      const b = document.getElementById(name);
      if (b) b.onclick = async () => { try { const r = await api(method, path, {}); after(r); } catch (e) { alert(e.message); } };
    };
    act('abort', 'POST', `/api/jobs/${id}/abort`, r => { current = r; head(); });
    act('resume', 'POST', `/api/jobs/${id}/resume`, () => route());
    act('clone', 'POST', `/api/jobs/${id}/clone`, r => { location.hash = `#/jobs/${r.id}`; });
    act('delete', 'DELETE', `/api/jobs/${id}`, () => { location.hash = '#/'; });
    const log = document.getElementById('log');
    if (j.log_tail) log.textContent = j.log_tail.join('\n');
  };
  head();
  api('GET', `/api/jobs/${id}/log`).then(r => { document.getElementById('log').textContent = r.lines.join('\n'); }).catch(() => {});
  if (job.kind !== 'train') {
    let shown = false, searching = false;
    const tick = async () => {
      current = await api('GET', `/api/jobs/${id}`);
      head();
      const live = ['queued', 'running'].includes(current.state);
      if (current.kind === 'optimize' && live && !searching) {
        searching = true;
        searchReport(id, current);
      }
      if (current.kind === 'optimize' && !shown && !live) {
        shown = true;
        searchReport(id, current);
        api('GET', `/api/jobs/${id}/log`).then(r => { document.getElementById('log').textContent = r.lines.join('\n'); }).catch(() => {});
      }
    };
    await tick();
    const timer = setInterval(() => tick().catch(() => {}), 1000);
    cleanup.push(() => clearInterval(timer));
    return;
  }
  optimizeForm(id);
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
  charts.acc.options.scales.y.min = 0;  // accuracy lives in [0, 1]
  charts.acc.options.scales.y.max = 1;
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
        charts.speed.update('none');
      })
      .catch(() => {});
  const records = [];
  const usageStart = Date.now() / 1000;
  const add = r => {
    const x = byEpoch.checked ? r.epoch : r.iter;
    if (r.phase === 'train') {
      if (r.loss !== undefined) series(charts.loss, 'train loss', 0).data.push({ x, y: r.loss });
      if (r.lr !== undefined) series(charts.lr, 'lr', 2).data.push({ x, y: r.lr });
      if (r.images_per_s !== undefined) series(charts.speed, speedUnit, 3).data.push({x, y: r.images_per_s});
    } else {
      if (r.loss !== undefined) series(charts.loss, 'test loss', 1, true).data.push({ x, y: r.loss });
      for (const [k, v] of Object.entries(r))
        if (k.startsWith('accuracy')) series(charts.acc, 'test ' + k, k === 'accuracy' ? 1 : 4, true).data.push({ x, y: v });
    }
  };
  const redraw = () => { zeroBased(charts.lr); for (const c of Object.values(charts)) c.update('none'); };
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
  es.addEventListener('metric', e => { const r = JSON.parse(e.data); records.push(r); add(r); later(); });
  es.addEventListener('job', e => { current = JSON.parse(e.data); head(); });
  es.addEventListener('usage', e => {
    const u = JSON.parse(e.data);
    series(charts.usage, 'CPU %', 0).data.push({ x: u.time - usageStart, y: u.cpu_percent });
    const memory = series(charts.usage, 'memory MB', 1);
    memory.yAxisID = 'y2';
    memory.data.push({x: u.time - usageStart, y: u.rss_mb});
    charts.usage.options.scales.y.title.text =
        `CPU % (${u.processes} process${u.processes === 1 ? '' : 'es'} together)`;
    later();
  });
  es.addEventListener('end', async () => {
    es.close();
    current = await api('GET', `/api/jobs/${id}`);
    head();
    downloads();
    api('GET', `/api/jobs/${id}/log`).then(r => { document.getElementById('log').textContent = r.lines.join('\n'); });
  });
  cleanup.push(() => es.close());
  // The log, live while the job runs.
  const logTimer = setInterval(async () => {
    if (!['queued', 'running'].includes(current.state)) return;
    try {
      const r = await api('GET', `/api/jobs/${id}/log`);
      const log = document.getElementById('log');
      const atEnd = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
      log.textContent = r.lines.join('\n');
      if (atEnd) log.scrollTop = log.scrollHeight;
    } catch (e) { /* the next tick tries again */ }
  }, 2000);
  cleanup.push(() => clearInterval(logTimer));
  const downloads = async () => {
    const j = await api('GET', `/api/jobs/${id}`);
    const snaps = (j.snapshots || []).map(s => `<a href="${withToken(`/api/jobs/${id}/snapshots/${s.iter}.safetensors`)}">iteration ${s.iter}</a>`).join(' · ');
    document.getElementById('downloads').innerHTML =
      `<a href="${withToken(`/api/jobs/${id}/files/net.prototxt`)}">net.prototxt</a> · <a href="${withToken(`/api/jobs/${id}/files/solver.prototxt`)}">solver.prototxt</a>
       <div>weights (safetensors): ${snaps || '<span class="muted">no snapshot yet</span>'}</div>`;
  };
  downloads();
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
        if (d.info && d.info.kind === 'text') textJob(id);
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
      document.getElementById('layers').innerHTML = `<h2>Layers${r.index !== undefined ? ` (sample ${r.index}, ${esc(r.label_name ?? r.label)})` : ''}</h2>
        <table><tr><th>layer</th><th>output</th><th>activations</th><th>weights</th></tr>${r.layers.map(l => `<tr>
        <td><b>${esc(l.name)}</b><br><span class="muted">${esc(l.type)}</span></td><td>${l.shape.join('×')}</td>
        <td>${l.activation_image ? `<img class="viz" src="${l.activation_image}" alt="activations of ${esc(l.name)}"><br>` : ''}<span class="muted">${stat(l.activation)}</span></td>
        <td>${l.weights_image ? `<img class="viz" src="${l.weights_image}" alt="filters of ${esc(l.name)}"><br>` : ''}<span class="muted">${l.weights_shape ? l.weights_shape.join('×') + ' · ' + stat(l.weights) : ''}</span></td>
        </tr>`).join('')}</table>`;
    } catch (e) { failed('layers', e); }
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
           of [document.getElementById('optimize-form'),
               document.getElementById('optimize-form')?.previousElementSibling,
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
    <div class="card">${esc(m.network)} on dataset <a href="#/datasets/${m.dataset_id}">${m.dataset_id}</a> · ${esc(m.solver.type)}, lr policy ${esc(m.solver.lr_policy)}, ${m.solver.epochs} epochs</div>
    <table><tr><th>job</th><th>base_lr</th><th>batch</th><th>state</th><th>latest</th></tr>
    ${m.jobs.map(j => `<tr><td><a href="#/jobs/${j.id}">${esc(j.name)}</a></td><td>${j.params.base_lr}</td><td>${j.params.batch_size}</td><td>${state(j.state)}</td>
      <td>${j.last_test && j.last_test.accuracy !== undefined ? 'accuracy ' + fmt(j.last_test.accuracy) : ''}</td></tr>`).join('')}</table>
    <h2>${m.jobs.length > 1 ? 'Sweep: every job on one chart' : 'Curves'} (by epoch)</h2>
    <div class="charts"><div class="chart"><canvas id="cmp-loss"></canvas></div><div class="chart"><canvas id="cmp-acc"></canvas></div></div>
    <h2>Network</h2><div class="card graph">${m.jobs.length ? `<img id="graph" src="${withToken(`/api/models/${id}/graph.svg`)}" alt="the network">` : ''}</div>`;
  const loss = lineChart(document.getElementById('cmp-loss'), 'train loss', 'epoch');
  const acc = lineChart(document.getElementById('cmp-acc'), 'test accuracy', 'epoch');
  acc.options.scales.y.min = 0;
  acc.options.scales.y.max = 1;
  const draw = async () => {
    for (const [k, j] of m.jobs.entries()) {
      const recs = await api('GET', `/api/jobs/${j.id}/metrics`);
      series(loss, j.name, k).data = recs.filter(r => r.phase === 'train').map(r => ({ x: r.epoch, y: r.loss }));
      series(acc, j.name, k, true).data = recs.filter(r => r.phase === 'test' && r.accuracy !== undefined).map(r => ({ x: r.epoch, y: r.accuracy }));
    }
    loss.update('none');
    acc.update('none');
  };
  await draw();
  const timer = setInterval(() => draw().catch(() => {}), 3000);
  cleanup.push(() => clearInterval(timer));
}

async function newModelPage() {
  const [datasets, networks] = await Promise.all([api('GET', '/api/datasets'), api('GET', '/api/networks')]);
  const ready = datasets.filter(d => d.status === 'done');
  page.innerHTML = `<h1>New model</h1><form id="form">
    <div class="row"><div><label>Name</label><input type="text" name="name" value="lenet"><div class="error" data-error-for="name"></div></div>
    <div><label>Dataset</label><select name="dataset_id">${
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
      <textarea name="prototxt" spellcheck="false"></textarea><div class="error" data-error-for="prototxt" id="prototxt-error"></div>
      <button type="button" id="validate" class="secondary">Validate</button><span id="valid" class="ok"></span></div>
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
      <div><label>gamma</label><input type="number" step="any" name="gamma" value="0.1"><div class="error" data-error-for="gamma"></div></div>
      <div><label>step (epochs)</label><input type="number" name="step_epochs" value="1"><div class="error" data-error-for="step_epochs"></div></div>
      <div><label>steps (epochs, comma-separated; multistep)</label><input type="text" name="stepvalue_epochs" value="1"><div class="error" data-error-for="stepvalue_epochs"></div></div>
      <div><label>power</label><input type="number" step="any" name="power" value="0.75"><div class="error" data-error-for="power"></div></div>
      <div><label>Momentum</label><input type="number" step="any" name="momentum" value="0.9"><div class="error" data-error-for="momentum"></div></div>
      <div><label>Weight decay</label><input type="number" step="any" name="weight_decay" value="0.0005"><div class="error" data-error-for="weight_decay"></div></div>
      <div><label>Snapshot every (epochs)</label><input type="number" step="any" name="snapshot_epochs" value="1"><div class="error" data-error-for="snapshot_epochs"></div></div>
      <div><label>Keep newest snapshots (0: all)</label><input type="number" step="1" name="keep_snapshots" value="5"><div class="error" data-error-for="keep_snapshots"></div></div>
      <div><label>Processes (data-parallel ranks; the batch is split among them)</label><input type="number" step="1" min="1" name="processes" value="1"><div class="error" data-error-for="processes"></div></div>
    </div>
    <h2>Learning rate schedule</h2><div class="chart"><canvas id="lr-preview"></canvas></div>
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
    const solver = { type: form.type.value, base_lr: list(form.base_lr.value), batch_size: list(form.batch_size.value), epochs: Number(form.epochs.value),
      lr_policy: form.lr_policy.value, gamma: Number(form.gamma.value), step_epochs: Number(form.step_epochs.value), power: Number(form.power.value),
      momentum: Number(form.momentum.value), weight_decay: Number(form.weight_decay.value), snapshot_epochs: Number(form.snapshot_epochs.value),
      keep_snapshots: Number(form.keep_snapshots.value) };
    if (solver.lr_policy === 'multistep') solver.stepvalue_epochs = list(form.stepvalue_epochs.value);
    return solver;
  };
  // The schedule preview: the server's learning_rate() (POST /api/lr_schedule), one series
  // per base_lr of a sweep, asked again a moment after the last change.
  const preview = lineChart(document.getElementById('lr-preview'), 'learning rate', 'epoch');
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
      answers.forEach((a, k) => { series(preview, 'base_lr ' + lrs[k], k).data = a.points.map(p => ({ x: p.epoch, y: p.lr })); });
      zeroBased(preview);
      preview.update('none');
    } catch (err) {
      if (gone || n !== asked) return;
      previewSlot = showError(form, err);
    }
  };
  form.oninput = () => { clearTimeout(previewTimer); previewTimer = setTimeout(drawPreview, 250); };
  fitDataset();
  drawPreview();
  document.getElementById('validate').onclick = async () => {
    const body = { prototxt: form.prototxt.value };
    if (form.dataset_id.value) body.dataset_id = Number(form.dataset_id.value);
    const err = document.getElementById('prototxt-error'), ok = document.getElementById('valid');
    err.textContent = ''; ok.textContent = '';
    try {
      const r = await api('POST', '/api/models/validate', body);
      if (r.ok) { ok.textContent = 'valid'; return; }
      err.textContent = (r.line ? `line ${r.line}: ` : '') + r.error;
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
    try {
      const m = await api('POST', '/api/models', body);
      location.hash = m.jobs.length === 1 ? `#/jobs/${m.jobs[0].id}` : `#/models/${m.id}`;
    } catch (err) { showError(form, err); }
  };
}
