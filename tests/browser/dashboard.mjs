// Browser test of the dashboard, in Debian's Chromium (headless) driven by playwright-core:
// create a dataset from Fashion-MNIST, start a short LeNet job, see the loss chart grow while
// it runs and the job finish, classify a test image and read the top-1 label on the page,
// optimize the job (bakusoku optimize as a job of its own) and read its table and plot;
// clone it into an edited copy that is aborted and resumed, fine-tune from it, compare jobs
// on one chart; a job killed before its first snapshot; deletes that ask first; then a text
// dataset, a char-RNN job on it, and text written from its page; a phone-sized window.
// Checks the defects of issue 16 on the way. Saves a screenshot of each page.
// Usage: node dashboard.mjs BAKUSOKU_BINARY SCREENSHOT_DIR
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const [binary, shots] = process.argv.slice(2);
if (!binary || !shots) { console.error('usage: node dashboard.mjs BAKUSOKU_BINARY SCREENSHOT_DIR'); process.exit(2); }
let chromium;
try {
  ({ chromium } = await import('playwright-core'));
} catch (e) {
  console.error('playwright-core is missing: run `npm ci --prefix tests/browser` (scripts/test.sh does)');
  process.exit(1);
}
const CHROMIUM = '/usr/bin/chromium';
if (!fs.existsSync(CHROMIUM)) { console.error(`${CHROMIUM} is missing: install Debian's chromium (scripts/install_deps.sh does)`); process.exit(1); }
fs.mkdirSync(shots, { recursive: true });

const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'bks-browser-'));
const server = spawn(binary, ['serve', '--port', '0', '--data-dir', dataDir, '--slots', '1', '--threads', '2'], { stdio: ['ignore', 'pipe', 'inherit'] });
const url = await new Promise((resolve, reject) => {
  let out = '';
  server.stdout.on('data', d => {
    out += d;
    const m = out.match(/http:\/\/[^\s?]+/);
    if (m) resolve(m[0]);
  });
  server.on('exit', code => reject(new Error(`bakusoku serve exited with ${code}: ${out}`)));
  setTimeout(() => reject(new Error('bakusoku serve printed no URL within 20 s')), 20000);
});

let browser, failed = false;
const step = name => console.log(`- ${name}`);
const fashion = ['T-shirt/top', 'Trouser', 'Pullover', 'Dress', 'Coat', 'Sandal', 'Shirt', 'Sneaker', 'Bag', 'Ankle boot'];
try {
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--disable-gpu'] });
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  page.on('pageerror', e => { console.error('page error:', e.message); failed = true; });
  // Files the page asks for and the server lacks (the favicon was one).
  const missing = [];
  page.on('response', r => { if (r.status() === 404 && !new URL(r.url()).pathname.startsWith('/api/')) missing.push(r.url()); });
  const hashId = async () => Number((await page.evaluate(() => location.hash)).match(/\d+$/)[0]);
  const api = async path => (await fetch(url + path.replace(/^\//, ''))).json();
  const waitState = (want, timeout = 300000) =>
    page.waitForFunction(w => document.querySelector('#job-head .state')?.textContent === w, want, { timeout });
  const shot = async name => page.screenshot({ path: path.join(shots, name + '.png'), fullPage: true });

  step('jobs page (empty)');
  await page.goto(url);
  await page.waitForSelector('h1:has-text("Jobs")');
  await shot('01-jobs-empty');
  if ((await page.getAttribute('header .brand img', 'alt')) !== '爆速') throw new Error('the logo is not the 爆速 image');
  if (!(await page.evaluate(() => document.querySelector('header .brand img').naturalWidth > 0))) throw new Error('the logo image did not load');

  step('New model without a dataset says to create one first, with a link');
  await page.click('text=New model');
  await page.waitForSelector('#no-dataset a[href="#/datasets/new"]');
  if (!(await page.textContent('#no-dataset')).includes('create a dataset first')) throw new Error(`no-dataset message: ${await page.textContent('#no-dataset')}`);

  step('create a dataset from Fashion-MNIST');
  await page.click('text=New dataset');
  await page.waitForSelector('#create-dataset');
  await shot('02-new-dataset');
  await page.fill('input[name=name]', 'fashion-mnist');
  await page.click('#create-dataset');
  await page.waitForSelector('text=training and 10000 validation images', { timeout: 120000 });
  await page.waitForSelector('.thumbs img');
  await page.waitForFunction(() => [...document.images].every(i => i.complete && i.naturalWidth > 0), null, { timeout: 30000 });
  await shot('03-dataset');

  step('a second dataset of the same name is refused, naming the field');
  await page.click('text=New dataset');
  await page.waitForSelector('#create-dataset');
  await page.fill('input[name=name]', 'fashion-mnist');
  await page.click('#create-dataset');
  await page.waitForFunction(() => /already/.test(document.querySelector('[data-error-for=name]').textContent), null, { timeout: 10000 });

  step('start a short LeNet job');
  await page.click('text=New model');
  await page.waitForSelector('#create-model');
  await page.fill('input[name=name]', 'lenet-browser');
  await page.selectOption('select[name=network]', 'lenet');
  await page.fill('input[name=epochs]', '3');
  await page.fill('input[name=snapshot_epochs]', '1');

  // The chosen dataset's name and shape fit in its box (they were clipped).
  const clipped = await page.evaluate(() => {
    const sel = document.querySelector('select[name=dataset_id]'), span = document.createElement('span');
    span.style.font = getComputedStyle(sel).font;
    span.textContent = sel.selectedOptions[0].textContent;
    document.body.appendChild(span);
    const over = span.getBoundingClientRect().width > sel.clientWidth - 28;  // the arrow's room
    span.remove();
    return over;
  });
  if (clipped) throw new Error('the dataset option text is clipped');

  step('the form shows only the solver fields the learning-rate policy reads');
  const shown = () => page.evaluate(() => ['gamma', 'step_epochs', 'stepvalue_epochs', 'power'].filter(n => document.querySelector(`input[name=${n}]`).offsetParent !== null).join(' '));
  if ((await shown()) !== '') throw new Error(`policy fixed shows ${await shown()}`);
  await page.selectOption('select[name=lr_policy]', 'step');
  if ((await shown()) !== 'gamma step_epochs') throw new Error(`policy step shows ${await shown()}`);
  await page.selectOption('select[name=lr_policy]', 'multistep');
  if ((await shown()) !== 'gamma stepvalue_epochs') throw new Error(`policy multistep shows ${await shown()}`);
  await page.selectOption('select[name=lr_policy]', 'fixed');

  step('a custom network starts from LeNet, validates, and an edit clears the verdict; an error names its line once');
  await page.selectOption('select[name=network]', 'custom');
  await page.selectOption('#start-from', 'lenet');
  await page.waitForFunction(() => document.querySelector('textarea[name=prototxt]').value.includes('conv1'));
  await page.click('#validate');
  await page.waitForFunction(() => document.getElementById('valid').textContent === 'valid');
  const lenetText = await page.inputValue('textarea[name=prototxt]');
  await page.fill('textarea[name=prototxt]', lenetText.replace('num_output: 20', 'num_outputt: 20'));
  if ((await page.textContent('#valid')) !== '') throw new Error('the "valid" mark stayed after an edit');
  await page.click('#validate');
  await page.waitForFunction(() => document.getElementById('prototxt-error').textContent !== '');
  const verdict = await page.textContent('#prototxt-error');
  console.log(`  validate: ${verdict}`);
  if (!/^line \d+(, column \d+)?: /.test(verdict) || (verdict.match(/line \d+/g) || []).length !== 1 || /custom\.prototxt|Parameter\b|bks\.proto/.test(verdict))
    throw new Error(`the error does not name its line once, plainly: ${verdict}`);
  await page.selectOption('select[name=network]', 'lenet');
  await shot('04-new-model');
  await page.click('#create-model');
  await page.waitForSelector('#chart-loss');

  step('the loss chart grows while the job runs');
  const points = () => page.evaluate(() => {
    const c = Chart.getChart('chart-loss');
    const train = c && c.data.datasets.find(d => d.label === 'train loss');
    return train ? train.data.length : 0;
  });
  const jobState = () => page.textContent('#job-head .state');
  await page.waitForFunction(() => {
    const c = Chart.getChart('chart-loss');
    const t = c && c.data.datasets.find(d => d.label === 'train loss');
    return t && t.data.length >= 2;
  }, null, { timeout: 120000 });
  const early = await points(), earlyState = await jobState();
  await page.waitForFunction(n => {
    const t = Chart.getChart('chart-loss').data.datasets.find(d => d.label === 'train loss');
    return t.data.length > n;
  }, early, { timeout: 120000 });
  if (earlyState.trim().toLowerCase() !== 'running') throw new Error(`the chart grew, but the job was ${earlyState}, not running`);
  const firstJob = await hashId();
  if (!/^epoch [0-9.]+ of 3$/.test(await page.textContent('#epoch'))) throw new Error(`the header's epoch: ${await page.textContent('#epoch')}`);
  const lr = await page.evaluate(() => Chart.getChart('chart-lr').data.datasets[0].stepped);
  if (lr !== 'after') throw new Error(`the learning rate is drawn as slopes (stepped: ${lr})`);
  await page.check('#chart-lr-tools .log');
  if ((await page.evaluate(() => Chart.getChart('chart-lr').options.scales.y.type)) !== 'logarithmic') throw new Error('the log-scale toggle did not take');
  await page.uncheck('#chart-lr-tools .log');
  await shot('05-job-running');

  step('the first snapshot reaches the downloads while the job runs');
  await page.waitForSelector('#snapshots a', { timeout: 120000 });
  if ((await jobState()).trim() !== 'running') throw new Error('the snapshot link came only when the job ended');

  step('the job finishes');
  await page.waitForFunction(() => document.querySelector('#job-head .state')?.textContent === 'done', null, { timeout: 300000 });
  await page.waitForSelector('#downloads a:has-text("iteration")');
  await shot('06-job-done');
  // Every chart of the job has its toggles.
  const tools = await page.$$eval('.chart .tools', ts => ts.map(t => [t.id, t.querySelectorAll('.log').length, t.querySelectorAll('.smooth').length].join(':')));
  if (tools.join(' ') !== 'chart-loss-tools:1:1 chart-acc-tools:1:0 chart-lr-tools:1:0 chart-speed-tools:1:1 chart-usage-tools:1:1') throw new Error(`chart toggles: ${tools}`);
  const usage = await page.evaluate(() => {
    const c = Chart.getChart('chart-usage');
    const m = c.data.datasets.find(d => d.label === 'memory MB');
    return { title: c.options.scales.y2 && c.options.scales.y2.title.text, axis: m && m.yAxisID };
  });
  if (usage.title !== 'memory MB' || usage.axis !== 'y2') throw new Error(`memory does not have its own axis: ${JSON.stringify(usage)}`);
  console.log(`  train-loss points: ${early} while running, ${await points()} at the end`);
  if (!(await page.isVisible('#best-accuracy'))) throw new Error('the header does not give the best accuracy');
  // Smoothing draws a steadier train loss over the same points, and gives them back at 0.
  const spread = () => page.evaluate(() => {
    const t = Chart.getChart('chart-loss').data.datasets.find(d => d.label === 'train loss');
    // Roughness: the mean squared step from one point to the next.
    const ys = t.data.map(p => p.y);
    return { n: ys.length, raw: t.data === t.raw, roughness: ys.slice(1).reduce((a, y, k) => a + (y - ys[k]) ** 2, 0) / (ys.length - 1) };
  });
  const smoothTo = v => page.$eval('#chart-loss-tools .smooth', (el, v) => { el.value = v; el.dispatchEvent(new Event('input')); }, v);
  const rough = await spread();
  await smoothTo('0.9');
  const smooth = await spread();
  await smoothTo('0');
  if (smooth.n !== rough.n || smooth.raw || !(smooth.roughness < 0.2 * rough.roughness) || !(await spread()).raw) throw new Error(`smoothing: ${JSON.stringify([rough, smooth])}`);

  step('a reloaded finished job still draws its CPU and memory');
  await page.reload();
  await page.waitForFunction(() => {
    const c = Chart.getChart('chart-usage');
    const cpu = c && c.data.datasets.find(d => d.label === 'CPU %');
    return cpu && cpu.data.length > 0;
  }, null, { timeout: 30000 });

  step('classify a test image (a Trouser from the dataset) and read the top-1 label');
  const img = path.join(dataDir, 'trouser.png');
  const res = await fetch(url + 'api/datasets/1/images/1_0.png');
  fs.writeFileSync(img, Buffer.from(await res.arrayBuffer()));
  await page.setInputFiles('#image', img);
  await page.click('#classify-upload');
  await page.waitForSelector('#top1');
  const top1 = (await page.textContent('#top1')).trim();
  await shot('07-classified');
  console.log(`  top-1: ${top1}`);
  if (top1 !== 'Trouser') throw new Error(`top-1 is "${top1}", expected "Trouser"`);

  step('classify a folder of images: a table of each, and the surest images of each class');
  const folder = path.join(dataDir, 'folder');
  fs.mkdirSync(folder);
  const thumbs = (await api('/api/datasets/1')).info.thumbnails.slice(0, 30);
  for (const t of thumbs) fs.writeFileSync(path.join(folder, t.file), Buffer.from(await (await fetch(url + `api/datasets/1/images/${t.file}`)).arrayBuffer()));
  fs.writeFileSync(path.join(folder, 'broken.png'), 'not a png');
  fs.writeFileSync(path.join(folder, 'notes.txt'), 'not an image at all');
  await page.setInputFiles('#many-folder', folder);
  await page.click('#classify-many');
  await page.waitForSelector('#many-images', { timeout: 60000 });
  const many = await page.$$eval('#many-images tr', rows => rows.slice(1).map(r => [r.cells[0].textContent, r.cells[1].textContent]));
  const classes = await page.$$eval('#many-classes tr', rows => rows.length - 1);
  const right = many.filter(([name, top]) => { const t = thumbs.find(x => name.endsWith(x.file)); return t && fashion[t.class] === top; }).length;
  console.log(`  ${many.length} rows, ${right} of ${thumbs.length} right, ${classes} classes with images`);
  if (many.length !== thumbs.length + 1 || !many.some(([name, top]) => name.endsWith('broken.png') && /PNG or JPEG/.test(top))) throw new Error(`the per-image table: ${JSON.stringify(many)}`);
  if (right < 0.7 * thumbs.length || classes < 5) throw new Error('classifying the folder went wrong');
  await shot('07b-classified-folder');

  step('layer visualisations and the whole validation set');
  await page.click('#visualize');
  await page.waitForSelector('#layers img.viz');
  // Each drawing says when it leaves channels out, with histograms; ip1 shows its own values
  // (negative ones too), not what relu1 later wrote over them in place.
  const rowOf = name => page.evaluate(n => {
    const row = [...document.querySelectorAll('#layers tr')].find(r => r.cells[0].textContent.startsWith(n));
    return { shown: row.cells[2].querySelector('.shown')?.textContent, histograms: row.querySelectorAll('.histogram svg').length, text: row.cells[2].textContent };
  }, name);
  const conv1 = await rowOf('conv1'), ip1 = await rowOf('ip1');
  if (conv1.shown !== '16 of 20 channels drawn' || conv1.histograms !== 2) throw new Error(`conv1's row: ${JSON.stringify(conv1)}`);
  if (!/· \[-/.test(ip1.text)) throw new Error(`ip1 shows no negative value, as if after relu1: ${ip1.text}`);
  await page.click('#evaluate');
  await page.waitForSelector('#split-accuracy');
  const acc = parseFloat(await page.textContent('#split-accuracy'));
  console.log(`  validation accuracy: ${acc}%`);
  if (!(acc > 70)) throw new Error(`validation accuracy ${acc}% after 3 epochs`);
  await shot('08-layers-and-confusion');

  step('optimize the job from its page: the search runs as a job and shows its table and plot');
  const trainHash = await page.evaluate(() => location.hash);
  await page.fill('#optimize-form input[name=budget_minutes]', '0.3');
  await page.fill('#optimize-form input[name=max_accuracy_drop]', '1');
  await page.click('#start-optimize');
  await page.waitForFunction(h => location.hash !== h, trainHash);
  await page.waitForSelector('#search');
  // While it runs the card says so (the search takes at least its 18 s budget).
  await page.waitForFunction(() => document.getElementById('search').textContent.includes('Searching'), null, { timeout: 10000 });
  await page.waitForSelector('#candidates', { timeout: 300000 });
  await page.waitForFunction(() => document.getElementById('search-plot').naturalWidth > 0, null, { timeout: 30000 });
  const chosen = await page.textContent('#candidates tr.best td:nth-child(2)');
  const rows = await page.$$eval('#candidates tr:not(.untried)', r => r.length - 1);
  const bundle = await page.getAttribute('#best-bundle', 'href');
  const got = await fetch(url + bundle.replace(/^\//, ''));
  if (got.status !== 200 || (await got.arrayBuffer()).byteLength < 1000) throw new Error(`the chosen bundle did not download (${got.status})`);
  await shot('09-optimize');
  console.log(`  ${rows} candidates; chosen: ${chosen}`);
  await page.goto(url + trainHash);
  await page.waitForSelector('#optimize-runs a');

  step('deploy the job as an FP32 bundle; download it with its prototxt and labels, and run it with bakusoku bench');
  await page.waitForFunction(() => document.querySelectorAll('#deploy-form select[name=iter] option').length === 3);
  await page.selectOption('#deploy-form select[name=precision]', 'fp32');
  await page.click('#start-deploy');
  await page.waitForSelector('#bench-figures', { timeout: 180000 });
  const shipped = path.join(dataDir, 'shipped.bks');
  const bks = await fetch(url + (await page.getAttribute('#bundle-download', 'href')).replace(/^\//, ''));
  fs.writeFileSync(shipped, Buffer.from(await bks.arrayBuffer()));
  const bench = spawnSync(binary, ['bench', shipped, '--iterations', '5', '--threads', '1'], { encoding: 'utf8' });
  if (bench.status !== 0 || !bench.stdout.includes('items/s')) throw new Error(`bakusoku bench on the downloaded bundle: ${bench.status} ${bench.stdout}${bench.stderr}`);
  const deployJob = await hashId();
  const prototxt = await (await fetch(url + `api/jobs/${deployJob}/deploy/deploy.prototxt`)).text();
  const labels = (await (await fetch(url + `api/jobs/${deployJob}/deploy/labels.txt`)).text()).trim().split('\n');
  if (!prototxt.includes('type: "Input"') || !prototxt.includes('type: "Softmax"') || /Data"|Accuracy|loss_weight/.test(prototxt)) throw new Error(`deploy.prototxt: ${prototxt}`);
  if (labels.length !== 10 || labels[1] !== 'Trouser') throw new Error(`labels.txt: ${labels}`);
  console.log(`  bench of the download: ${bench.stdout.trim().split('\n').pop()}`);
  await shot('09b-deployed');

  step('the model page draws the network');
  await page.click('header >> text=Models');
  await page.waitForSelector('h1:has-text("Models")');
  await shot('10-models');
  await page.click('text=lenet-browser');
  await page.waitForSelector('#graph');
  await page.waitForFunction(() => document.getElementById('graph').naturalWidth > 0, null, { timeout: 30000 });
  const drawing = await (await fetch(url + (await page.getAttribute('#graph', 'src')).replace(/^\//, ''))).text();
  if (!drawing.includes('64×20×24×24') || drawing.includes('()') || !drawing.includes('width="100%"')) throw new Error('the drawing does not show the chosen batch across the width');
  const graphWidth = await page.evaluate(() => document.getElementById('graph').getBoundingClientRect().width / document.getElementById('graph').parentElement.clientWidth);
  if (graphWidth < 0.9) throw new Error(`the drawing takes ${graphWidth} of the width`);
  await shot('11-model');

  step('the datasets page');
  await page.click('header >> text=Datasets');
  await page.waitForSelector('h1:has-text("Datasets")');
  await shot('12-datasets');

  step('the jobs list says each job\'s latest loss and accuracy');
  await page.click('header >> text=Jobs');
  await page.waitForSelector('#jobs table');
  const latest = await page.$$eval('#jobs td.latest', tds => tds.map(td => td.textContent.trim()));
  if (latest.some(t => t.startsWith(','))) throw new Error(`a jobs row starts with a comma: ${JSON.stringify(latest)}`);
  if (!latest.some(t => /^loss [0-9.e+-]+, accuracy [0-9.e+-]+ at iteration \d+$/.test(t))) throw new Error(`no row gives its loss and accuracy at an iteration: ${JSON.stringify(latest)}`);
  // Leaving while its poll is in flight must not throw in the page (pageerror fails the test).
  for (let k = 0; k < 3; ++k) {
    await page.goto(url + '#/');
    await page.click('header >> text=Models');
    await page.waitForSelector('h1:has-text("Models")');
  }

  step('clone and edit: the form is filled from the job; the edited copy is aborted and resumed');
  await page.goto(url + `#/jobs/${firstJob}`);
  await page.waitForSelector(`h1:has-text("Job ${firstJob}:")`);
  await page.click('#clone');
  await page.waitForSelector('#create-model');
  const filled = await page.evaluate(() => ['name', 'base_lr', 'epochs', 'network'].map(n => document.querySelector(`[name=${n}]`).value).join('|'));
  if (filled !== 'lenet-browser (clone)|0.01|3|lenet') throw new Error(`the clone form holds ${filled}`);
  await page.fill('input[name=base_lr]', '0.02');
  // Three epochs, as filled: the abort below must find the job still running after its
  // first snapshot shows (looked up every 3 s), and one LeNet epoch takes about that long
  // on a fast machine.
  await page.fill('input[name=snapshot_epochs]', '0.2');
  await page.click('#create-model');
  await page.waitForSelector('#chart-loss');
  const cloneJob = await hashId();
  await page.waitForSelector('#snapshots a', { timeout: 120000 });
  // Replies about the job asked for before the resume reach the page 3 s late, after it
  // shows the resumed job running (a busy server once answered that late): the copy of the
  // page that asked is gone by then and must not draw its aborted job over the new one.
  await page.evaluate(() => {
    const fetchNow = window.fetch;
    window.$fetchNow = fetchNow;
    window.$holding = true;
    window.$held = 0;
    window.fetch = async (url, opts) => {
      const held = window.$holding && /\/api\/jobs\/\d+$/.test(url) && !(opts && opts.method && opts.method !== 'GET');
      window.$held += held;
      const reply = await fetchNow(url, opts);
      if (held) await new Promise(done => setTimeout(done, 3000));
      window.$held -= held;
      return reply;
    };
  });
  await page.click('#abort');
  await waitState('aborted', 120000);
  await page.evaluate(() => {
    window.$holding = false;
    // Every header drawn from here on: once one says running, none may say aborted or finished.
    window.$stale = null;
    let running = false;
    new MutationObserver(() => {
      const head = document.getElementById('job-head');
      if (!head) return;
      running = running || head.querySelector('.state')?.textContent === 'running';
      if (running && !window.$stale && /finished|aborted/.test(head.textContent)) window.$stale = head.textContent;
    }).observe(document.body, { childList: true, subtree: true, characterData: true });
  });
  await page.click('#resume');
  await waitState('running', 60000);
  await page.waitForFunction(() => window.$held === 0, null, { timeout: 30000 });
  await page.waitForTimeout(300);
  const staleHead = await page.evaluate(() => { window.fetch = window.$fetchNow; return window.$stale; });
  if (staleHead) throw new Error(`the resumed job's header showed the aborted attempt: ${staleHead.replace(/\s+/g, ' ').trim()}`);
  // The log refreshes while the job runs, and stays where its reader scrolled it.
  await page.waitForFunction(() => document.getElementById('log').scrollHeight > document.getElementById('log').clientHeight + 40, null, { timeout: 30000 });
  await page.$eval('#log', l => { l.scrollTop = 20; });
  await page.waitForTimeout(2500);
  if ((await page.$eval('#log', l => l.scrollTop)) !== 20) throw new Error('the log jumped while the reader was scrolled up');
  await page.waitForFunction(() => Chart.getChart('chart-usage').data.datasets.length > 0, null, { timeout: 30000 });
  await waitState('done');
  await page.waitForFunction(() => (Chart.getChart('chart-usage').$marks || []).length === 1, null, { timeout: 10000 });
  const marks = await page.evaluate(() => (Chart.getChart('chart-loss').$marks || []).map(m => m.x));
  if (marks.length !== 1 || !(marks[0] > 0)) throw new Error(`the loss chart marks the resume at ${JSON.stringify(marks)}`);
  await shot('15-resumed');

  step('fine-tune from the first job: its weights, conv1 frozen');
  await page.goto(url + `#/jobs/${firstJob}`);
  // The clone's page, shown before, has a Fine-tune button too: wait for the first job's.
  await page.waitForSelector(`h1:has-text("Job ${firstJob}:")`);
  await page.click('#fine-tune');
  await page.waitForSelector('select[name=weights_iter]');
  if ((await page.$$eval('select[name=weights_iter] option', o => o.length)) !== 3) throw new Error('the fine-tune form does not offer the job\'s 3 snapshots');
  await page.fill('input[name=epochs]', '0.2');
  await page.fill('input[name=lr_mult]', 'conv1: 0');
  await shot('16-fine-tune-form');
  await page.click('#create-model');
  await page.waitForSelector('#chart-acc');
  await page.waitForFunction(() => {
    const a = Chart.getChart('chart-acc').data.datasets.find(d => d.label === 'test accuracy');
    return a && a.raw.length > 0;
  }, null, { timeout: 120000 });
  const start = await page.evaluate(() => Chart.getChart('chart-acc').data.datasets.find(d => d.label === 'test accuracy').raw[0]);
  console.log(`  fine-tune starts at accuracy ${start.y} (iteration ${start.x})`);
  if (start.x !== 0 || !(start.y > 0.7)) throw new Error('the fine-tuned job did not start from the trained weights');
  if (!(await page.textContent('#job-head')).includes(`fine-tuned from job ${firstJob}`)) throw new Error('the header does not say where the weights came from');
  await waitState('done');

  step('compare the first job and its clone on one chart; sort the table by best accuracy');
  await page.goto(url + '#/');
  await page.waitForSelector(`input.choose[value="${cloneJob}"]`);
  await page.check(`input.choose[value="${firstJob}"]`);
  await page.check(`input.choose[value="${cloneJob}"]`);
  await page.click('#compare');
  await page.waitForSelector('#compare-table');
  await page.waitForFunction(() => Chart.getChart('compare-loss').data.datasets.filter(d => d.data.length > 0).length === 2, null, { timeout: 30000 });
  const differs = await page.$$eval('#compare-table tr.differs th', ths => ths.map(th => th.textContent));
  if (!differs.includes('base_lr') || differs.includes('network')) throw new Error(`the comparison marks ${differs} as differing`);
  await shot('17-compare');
  await page.goto(url + '#/');
  await page.waitForSelector('#jobs table');
  await page.click('th:has-text("best accuracy")');
  await page.waitForSelector('th:has-text("best accuracy ▾")');
  const bests = (await page.$$eval('#jobs td.best', tds => tds.map(td => parseFloat(td.textContent)))).filter(x => !isNaN(x));
  if (bests.length < 3 || bests.some((b, k) => k > 0 && b > bests[k - 1])) throw new Error(`best accuracies not in descending order: ${bests}`);
  await shot('18-jobs-sorted');
  await page.fill('#job-filter', 'clone');
  const filtered = await page.$$eval('#jobs tr[data-job] td:nth-child(3)', tds => tds.map(td => td.textContent));
  if (filtered.length !== 1 || !filtered[0].includes('(clone)')) throw new Error(`the filter 'clone' shows ${filtered}`);
  await page.fill('#job-filter', '');

  step('a job killed before its first snapshot offers neither Resume nor the test section');
  await page.click('text=New model');
  await page.waitForSelector('#create-model');
  await page.fill('input[name=name]', 'doomed');
  await page.fill('input[name=epochs]', '3');
  await page.fill('input[name=snapshot_epochs]', '3');
  // It starts from the first job's weights, uploaded through the page.
  const upload = path.join(dataDir, 'first-job.safetensors');
  const lastSnapshot = (await api(`/api/jobs/${firstJob}`)).snapshots.pop().iter;
  fs.writeFileSync(upload, Buffer.from(await (await fetch(url + `api/jobs/${firstJob}/snapshots/${lastSnapshot}.safetensors`)).arrayBuffer()));
  await page.setInputFiles('#weights-upload', upload);
  await page.waitForFunction(() => document.querySelector('input[name=weights_file]').value.endsWith('imports/uploads/first-job.safetensors'));
  // The uploads are listed with the folder's room: a spare one goes (asked first), and Use
  // fills the field with the one kept.
  const spare = path.join(dataDir, 'spare.safetensors');
  fs.copyFileSync(upload, spare);
  await page.setInputFiles('#weights-upload', spare);
  await page.waitForFunction(() => document.querySelectorAll('#uploads-list tr').length === 2);
  if (!(await page.textContent('#uploads-summary')).includes('2 file(s)')) throw new Error(`uploads: ${await page.textContent('#uploads-summary')}`);
  await page.click('#uploads-box summary');
  page.once('dialog', d => d.accept());
  await page.click('#uploads-list button[data-delete="spare.safetensors"]');
  await page.waitForFunction(() => document.querySelectorAll('#uploads-list tr').length === 1);
  if ((await api('/api/weights')).files.some(f => f.name === 'spare.safetensors')) throw new Error('the deleted upload is still there');
  await page.click('#uploads-list button[data-use]');
  await page.waitForFunction(() => document.querySelector('input[name=weights_file]').value.endsWith('imports/uploads/first-job.safetensors'));
  await shot('18b-uploaded-weights');
  await page.click('#create-model');
  await page.waitForSelector('#chart-loss');
  const doomed = await hashId();
  if (!(await page.textContent('#job-head')).includes('started from')) throw new Error('the job does not say it started from the uploaded weights');
  await waitState('running', 60000);
  let pid = 0;
  for (let k = 0; k < 100 && !pid; ++k) { pid = (await api(`/api/jobs/${doomed}`)).pid || 0; if (!pid) await new Promise(r => setTimeout(r, 100)); }
  process.kill(pid, 'SIGKILL');
  await waitState('failed', 60000);
  if (await page.$('#resume')) throw new Error('a failed job without a snapshot offers Resume');
  if (!(await page.isHidden('#test-section')) || !(await page.isVisible('#no-snapshot'))) throw new Error('a job without a snapshot offers the test section');
  await shot('19-failed-without-snapshot');

  step('delete asks first: dismissed keeps the job, accepted deletes it; the model too');
  const asked = [];
  page.once('dialog', d => { asked.push(d.message()); d.dismiss(); });
  await page.click('#delete');
  await page.waitForTimeout(300);
  if (asked.length !== 1 || (await fetch(url + `api/jobs/${doomed}`)).status !== 200) throw new Error(`a dismissed delete: ${asked}`);
  const doomedModel = (await api(`/api/jobs/${doomed}`)).model_id;
  page.once('dialog', d => { asked.push(d.message()); d.accept(); });
  await page.click('#delete');
  await page.waitForFunction(() => location.hash === '#/');
  if ((await fetch(url + `api/jobs/${doomed}`)).status !== 404) throw new Error('an accepted delete left the job');
  await page.goto(url + `#/models/${doomedModel}`);
  page.once('dialog', d => { asked.push(d.message()); d.accept(); });
  await page.click('#delete-model');
  await page.waitForSelector('h1:has-text("Models")');
  if ((await fetch(url + `api/models/${doomedModel}`)).status !== 404) throw new Error('an accepted delete left the model');
  console.log(`  asked: ${asked.join(' | ')}`);

  step('a text dataset trains the char-RNN, whose job page writes text from a primer');
  fs.mkdirSync(path.join(dataDir, 'imports'), { recursive: true });
  const textFile = path.join(dataDir, 'imports', 'hello.txt');
  fs.writeFileSync(textFile, 'hello world. '.repeat(550));
  await page.click('text=New dataset');
  await page.waitForSelector('#create-dataset');
  await page.fill('input[name=name]', 'hello');
  await page.selectOption('select[name=source]', 'text');
  if (!(await page.isHidden('#geometry'))) throw new Error('a text dataset still asks for a width and height');
  await page.fill('input[name=file]', textFile);
  await page.click('#create-dataset');
  await page.waitForSelector('#vocabulary-size', { timeout: 60000 });
  if ((await page.textContent('#vocabulary-size')) !== '9') throw new Error('the text dataset does not show its 9 characters');
  await shot('13-text-dataset');
  await page.click('text=New model');
  await page.waitForSelector('#create-model');
  await page.selectOption('select[name=dataset_id]', { label: 'hello (text, 9 characters)' });
  if ((await page.inputValue('select[name=network]')) !== 'char_rnn') throw new Error('a text dataset did not choose the char-RNN');
  await page.fill('input[name=batch_size]', '8');
  await page.fill('input[name=epochs]', '2');
  await page.click('#create-model');
  await page.waitForSelector('#chart-loss');
  await page.waitForFunction(() => document.querySelector('#job-head .state')?.textContent === 'done', null, { timeout: 300000 });
  await page.waitForSelector('#sample');
  await page.fill('#primer', 'hello');
  await page.click('#sample');
  await page.waitForSelector('#sample-text');
  const written = await page.textContent('#sample-text');
  if (!written.startsWith('hello') || written.length !== 305) throw new Error(`the sample is not the primer and 300 characters: ${JSON.stringify(written)}`);
  if (!(await page.isHidden('#optimize-form'))) throw new Error('a text job offers the image deployment search');
  const speedTitle = await page.evaluate(() => Chart.getChart(document.getElementById('chart-speed')).options.scales.y.title.text);
  if (speedTitle !== 'characters/s') throw new Error(`a text job's speed chart counts ${speedTitle}`);
  await shot('14-text-job');
  console.log(`  wrote: ${JSON.stringify(written.slice(0, 60))}`);

  step('the text model and then its dataset are deleted, each after a confirmation');
  const textModel = (await api(`/api/jobs/${await hashId()}`)).model_id;
  const textDataset = (await api(`/api/models/${textModel}`)).dataset_id;
  await page.goto(url + `#/models/${textModel}`);
  page.once('dialog', d => d.accept());
  await page.click('#delete-model');
  await page.waitForSelector('h1:has-text("Models")');
  await page.goto(url + `#/datasets/${textDataset}`);
  await page.waitForSelector('#delete-dataset');
  page.once('dialog', d => d.accept());
  await page.click('#delete-dataset');
  await page.waitForSelector('h1:has-text("Datasets")');
  if ((await fetch(url + `api/datasets/${textDataset}`)).status !== 404) throw new Error('an accepted delete left the dataset');

  step('at 390 px wide nothing overflows and the navigation does not overlap');
  await page.setViewportSize({ width: 390, height: 844 });
  for (const [where, name] of [['#/', '20-phone-jobs'], [`#/jobs/${firstJob}`, '21-phone-job']]) {
    await page.goto(url + where);
    await page.waitForSelector('h1');
    await page.waitForTimeout(500);
    const layout = await page.evaluate(() => {
      const boxes = [...document.querySelectorAll('header a')].map(a => a.getBoundingClientRect());
      const overlap = boxes.some((a, i) => boxes.some((b, j) => j > i && a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom));
      return { width: document.documentElement.scrollWidth, overlap };
    });
    await shot(name);
    if (layout.width > 390 || layout.overlap) throw new Error(`at 390 px ${where}: ${JSON.stringify(layout)}`);
  }
  await page.setViewportSize({ width: 1280, height: 900 });

  step('page load on loopback with a warm browser');
  const loads = [];
  await page.goto(url + '#/datasets');
  for (let k = 0; k < 4; ++k) {
    await page.reload();
    await page.waitForSelector('h1:has-text("Datasets")');
    loads.push(await page.evaluate(() => performance.getEntriesByType('navigation')[0].loadEventEnd));
  }
  console.log(`  page loads: ${loads.map(t => t.toFixed(0)).join(', ')} ms (the first warms the cache)`);
  if (missing.length) throw new Error(`the page asked for files the server lacks: ${missing.join(', ')}`);
} catch (e) {
  failed = true;
  console.error('FAILED:', e.message);
} finally {
  if (browser) await browser.close();
  server.kill('SIGTERM');
  await new Promise(r => server.on('exit', r));
  fs.rmSync(dataDir, { recursive: true, force: true });
}
console.log(failed ? 'browser test failed' : `browser test passed; screenshots in ${shots}`);
process.exit(failed ? 1 : 0);
