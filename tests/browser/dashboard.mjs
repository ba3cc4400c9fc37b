// Browser test of the dashboard, in Debian's Chromium (headless) driven by playwright-core:
// create a dataset from Fashion-MNIST, start a short LeNet job, see the loss chart grow while
// it runs and the job finish, classify a test image and read the top-1 label on the page,
// optimize the job (bakusoku optimize as a job of its own) and read its table and plot;
// then a text dataset, a char-RNN job on it, and text written from its page.
// Saves a screenshot of each page.
// Usage: node dashboard.mjs BAKUSOKU_BINARY SCREENSHOT_DIR
import { spawn } from 'node:child_process';
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
try {
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--disable-gpu'] });
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  page.on('pageerror', e => { console.error('page error:', e.message); failed = true; });
  const shot = async name => page.screenshot({ path: path.join(shots, name + '.png'), fullPage: true });

  step('jobs page (empty)');
  await page.goto(url);
  await page.waitForSelector('h1:has-text("Jobs")');
  await shot('01-jobs-empty');

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

  step('start a short LeNet job');
  await page.click('text=New model');
  await page.waitForSelector('#create-model');
  await page.fill('input[name=name]', 'lenet-browser');
  await page.selectOption('select[name=network]', 'lenet');
  await page.fill('input[name=epochs]', '3');
  await page.fill('input[name=snapshot_epochs]', '1');
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
  await shot('05-job-running');

  step('the job finishes');
  await page.waitForFunction(() => document.querySelector('#job-head .state')?.textContent === 'done', null, { timeout: 300000 });
  await page.waitForSelector('#downloads a:has-text("iteration")');
  await shot('06-job-done');
  const usage = await page.evaluate(() => {
    const c = Chart.getChart('chart-usage');
    const m = c.data.datasets.find(d => d.label === 'memory MB');
    return { title: c.options.scales.y2 && c.options.scales.y2.title.text, axis: m && m.yAxisID };
  });
  if (usage.title !== 'memory MB' || usage.axis !== 'y2') throw new Error(`memory does not have its own axis: ${JSON.stringify(usage)}`);
  console.log(`  train-loss points: ${early} while running, ${await points()} at the end`);

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

  step('layer visualisations and the whole validation set');
  await page.click('#visualize');
  await page.waitForSelector('#layers img.viz');
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

  step('the model page draws the network');
  await page.click('header >> text=Models');
  await page.waitForSelector('h1:has-text("Models")');
  await shot('10-models');
  await page.click('text=lenet-browser');
  await page.waitForSelector('#graph');
  await page.waitForFunction(() => document.getElementById('graph').naturalWidth > 0, null, { timeout: 30000 });
  await shot('11-model');

  step('the datasets page');
  await page.click('header >> text=Datasets');
  await page.waitForSelector('h1:has-text("Datasets")');
  await shot('12-datasets');

  step('the jobs list says each job\'s latest loss and accuracy');
  await page.click('header >> text=Jobs');
  await page.waitForSelector('#jobs table');
  const latest = await page.$$eval('#jobs tr td:nth-child(6)', tds => tds.map(td => td.textContent.trim()));
  if (latest.some(t => t.startsWith(','))) throw new Error(`a jobs row starts with a comma: ${JSON.stringify(latest)}`);
  if (!latest.some(t => /^loss [0-9.e+-]+, accuracy [0-9.e+-]+ at iteration \d+$/.test(t))) throw new Error(`no row gives its loss and accuracy at an iteration: ${JSON.stringify(latest)}`);

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
