#!/usr/bin/env node
// browser-test.mjs BASE_URL TOKEN SCREENSHOT_DIR   (run by browser.sh)
//
// Uses the server's Swagger UI (/docs/) as a person would, in Debian's
// headless chromium driven by playwright-core (no browser download):
//   1. every operation of the served contract is rendered, no more, no less;
//   2. Authorize takes the bearer token;
//   3. GET /permissions: "Try it out", "Execute", and the live answer is a 200
//      with the catalog (ADMINISTRATOR ...), sent with the token;
//   4. no request leaves loopback (any other host is aborted and fails the test);
//   5. no page errors.
// Screenshots go to SCREENSHOT_DIR. Last line:  browser: OK|FAILED - ...
// Env: CHROMIUM (default /usr/bin/chromium), TIMEOUT_MS (default 30000).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { chromium } from 'playwright-core';

const [base, token, shotDir] = process.argv.slice(2);
if (!base || !token || !shotDir) {
  console.error('usage: browser-test.mjs BASE_URL TOKEN SCREENSHOT_DIR');
  process.exit(2);
}
const timeout = Number(process.env.TIMEOUT_MS || 30000);
const loopback = new Set(['127.0.0.1', 'localhost', '[::1]', '::1']);
const failures = [];
const blocked = [];
const pageErrors = [];
const t0 = Date.now();
const log = (msg) => console.log(`browser: ${msg} (${((Date.now() - t0) / 1000).toFixed(1)} s)`);
const expect = (cond, msg) => { if (!cond) failures.push(msg); return cond; };

// The operations of the contract the server serves.
const doc = await (await fetch(`${base}/api/openapi.json`)).json();
const methods = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'];
const contractOps = [];
for (const [p, item] of Object.entries(doc.paths)) {
  for (const m of methods) if (item[m]) contractOps.push(`${m.toUpperCase()} ${p}`);
}
const catalogOp = doc.paths['/permissions']?.get;
if (!catalogOp) { console.log('browser: FAILED - the contract has no GET /permissions'); process.exit(1); }

const userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'guildhall-chromium-'));
fs.mkdirSync(shotDir, { recursive: true });
let context;
let summary = '';
let stage = 'start';
try {
  context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    viewport: { width: 1280, height: 900 },
    timeout,
  });
  context.setDefaultTimeout(timeout);
  // Nothing may leave loopback: abort and record anything else.
  await context.route('**/*', (route) => {
    const u = new URL(route.request().url());
    if (loopback.has(u.hostname) || u.protocol === 'data:' || u.protocol === 'blob:') return route.continue();
    blocked.push(u.href);
    return route.abort('blockedbyclient');
  });
  const page = context.pages()[0] || (await context.newPage());
  page.on('pageerror', (e) => pageErrors.push(`pageerror: ${e.message}`));
  page.on('console', (m) => { if (m.type() === 'error') pageErrors.push(`console: ${m.text()}`); });
  let catalogAuth = null;
  page.on('request', (req) => {
    if (new URL(req.url()).pathname === '/api/permissions') catalogAuth = req.headers()['authorization'] ?? '';
  });
  log(`chromium ${context.browser()?.version() ?? '?'} via playwright-core ${JSON.parse(fs.readFileSync(new URL('./node_modules/playwright-core/package.json', import.meta.url))).version}`);

  // 1. The page and every operation.
  stage = 'load /docs/';
  const resp = await page.goto(`${base}/docs/`, { waitUntil: 'domcontentloaded' });
  expect(resp?.status() === 200, `/docs/ answered ${resp?.status()}`);
  await page.waitForSelector('.swagger-ui .opblock');
  await page.waitForLoadState('networkidle', { timeout: 10000 }).catch(() => {});
  const title = (await page.locator('.swagger-ui .info .title').first().textContent())?.replace(/\s+/g, ' ').trim();
  log(`loaded ${base}/docs/: ${title}`);
  const rendered = await page.$$eval('.swagger-ui .opblock', (els) => els.map((e) => {
    const method = (e.querySelector('.opblock-summary-method')?.textContent || '?').trim();
    const p = e.querySelector('.opblock-summary-path, .opblock-summary-path__deprecated');
    return `${method} ${(p?.getAttribute('data-path') || p?.textContent || '?').replace(/\u200b/g, '').trim()}`;
  }));
  const want = new Set(contractOps);
  const got = new Set(rendered);
  const missing = contractOps.filter((o) => !got.has(o));
  const extra = rendered.filter((o) => !want.has(o));
  expect(rendered.length === contractOps.length, `${rendered.length} operations rendered, the contract has ${contractOps.length}`);
  expect(missing.length === 0, `not rendered: ${missing.join(', ')}`);
  expect(extra.length === 0, `rendered but not in the contract: ${extra.join(', ')}`);
  const uiErrors = await page.locator('.swagger-ui .errors-wrapper .error-wrapper').count();
  expect(uiErrors === 0, `Swagger UI shows ${uiErrors} errors`);
  log(`${rendered.length} of ${contractOps.length} operations rendered`);
  await page.screenshot({ path: path.join(shotDir, '1-docs.png'), fullPage: true });

  // 2. Authorize with the bearer token.
  stage = 'Authorize';
  await page.locator('.swagger-ui .auth-wrapper button.authorize').click();
  const dialog = page.locator('.swagger-ui .dialog-ux .modal-ux');
  await dialog.waitFor();
  const bearer = dialog.locator('.auth-container').filter({ hasText: 'bearerAuth' });
  await bearer.locator('input').first().fill(token);
  await bearer.locator('button.authorize').click();
  await bearer.locator('button', { hasText: 'Logout' }).waitFor(); // authorized: the form now offers Logout
  await page.screenshot({ path: path.join(shotDir, '2-authorized.png') });
  await dialog.locator('button.close-modal').click();
  await dialog.waitFor({ state: 'detached' });
  log('authorized with the bearer token');

  // 3. GET /permissions: Try it out, Execute.
  stage = 'Try it out on GET /permissions';
  const tag = catalogOp.tags?.[0] ?? 'default';
  const op = page.locator(`#operations-${tag}-${catalogOp.operationId}`);
  await op.locator('.opblock-summary').first().click();
  await op.locator('button.try-out__btn').click();
  await op.locator('button.execute').click();
  const status = op.locator('.live-responses-table .response .response-col_status').first();
  await status.waitFor();
  const statusText = (await status.textContent())?.trim();
  const bodyText = (await op.locator('.live-responses-table .response .response-col_description pre').first().textContent()) ?? '';
  expect(statusText === '200', `Try it out on GET /permissions answered ${statusText}`);
  expect(bodyText.includes('"ADMINISTRATOR"'), 'the live answer does not show the catalog (no ADMINISTRATOR)');
  expect(catalogAuth === `Bearer ${token}`, `the request to /api/permissions carried Authorization ${JSON.stringify(catalogAuth)}`);
  let names = 0;
  try { names = JSON.parse(bodyText).items.length; } catch { expect(false, 'the live answer is not JSON'); }
  await op.screenshot({ path: path.join(shotDir, '3-try-it-out.png') });
  log(`Try it out: GET /api/permissions -> ${statusText}, ${names} permissions in the catalog`);

  summary = `${rendered.length} of ${contractOps.length} operations rendered, Try it out GET /permissions -> ${statusText} (${names} permissions)`;
} catch (e) {
  failures.push(`${stage}: ${e.message.split('\n')[0]}`);
} finally {
  await context?.close().catch(() => {});
  fs.rmSync(userDataDir, { recursive: true, force: true });
}
expect(blocked.length === 0, `requests left loopback: ${blocked.join(', ')}`);
expect(pageErrors.length === 0, `page errors: ${pageErrors.join(' | ')}`);
log(`external requests: ${blocked.length}; page errors: ${pageErrors.length}; screenshots in ${shotDir}`);
for (const f of failures) console.log(`  FAIL ${f}`);
if (failures.length > 0) {
  console.log(`browser: FAILED - ${failures.length} problems`);
  process.exit(1);
}
console.log(`browser: OK - ${summary}, ${blocked.length} requests left loopback`);
