#!/usr/bin/env node
// walk.mjs BASE_URL OWNER_TOKEN SCREENSHOT_DIR   (run by check.sh)
//
// Uses the admin console (/console/) as people would, in Debian's headless
// chromium driven by playwright-core (no browser download):
//   owner:     signs in with a pasted token; creates a role, a channel and a
//              user (and the user's token, shown once); sets an overwrite in
//              the matrix; asks "Why?" and reads the reason; reorders roles
//              by drag and drop and by keyboard; uploads an attachment by
//              drag and drop; ticks MODERATE_MEMBERS in a role; creates a
//              category and channels in it (synced), reorders them by drag
//              and drop and Alt+ArrowUp (one reorder request), moves a channel
//              into the category by drag and drop (PATCH) and out with its
//              settings; edits the category's matrix, which warns how many
//              synced channels the edit changes; unsyncs a channel by an edit
//              of its own (warned) and syncs it again with its button; Why? names the category an
//              overwrite was copied from, and a timeout; times a member out
//              with a preset, watches the countdown, ends it early; selects
//              every user on a page and gives them a role in one request,
//              takes it from two; pages a role's members; views as a role,
//              every cell as the server's preview, with Why? per cell;
//              exports the template (byte for byte), imports an edited one
//              after reviewing every change, prune chosen and reviewed again;
//              a second tab keeps the audit log open and must see each of
//              those actions arrive live;
//   stale:     a save over a change made meanwhile shows "Changed meanwhile"
//              with the fresh state (If-Match, 412);
//   moderator: sees disabled controls with the missing permission as the
//              reason, and a refused save as a readable 403; times out a
//              member below them (and ends it), not one above (the reason);
//              bulk role changes, view as roles and templates disabled;
//   member:    without VIEW_AUDIT_LOG the live state does not look live, and a
//              channel they cannot see reads as one that does not exist;
//              moving channels, timeouts (of themself, of others), bulk role
//              changes, a role's member removal, view as roles and templates
//              are each disabled with the reason;
//   webhooks:  (walk-webhooks.mjs) one created for a loopback receiver, its
//              secret shown once, a delivery seen and redelivered, disabled,
//              enabled, rotated, deleted; a channel's "Who has access" lists
//              what the API lists;
//   history:   (walk-history.mjs) a channel's matrix and Why? "as of" an
//              instant show what the API answers then, the matrix read-only;
//   revert:    (walk-revert.mjs) "Revert…" on an audit entry shows the dry
//              run's change, makes it once confirmed, and a second revert of
//              the same entry reads as a conflict naming the later entry;
//   360 px:    every page fits (no horizontal page scroll);
//   always:    no request leaves loopback, no page error, no CSP violation,
//              no layout shift on load.
// Each state is checked through the public API as well as on screen.
// Screenshots of every page go to SCREENSHOT_DIR. Last line: console: OK|FAILED - ...
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createRequire } from 'node:module';
import { walkHistory } from './walk-history.mjs';
import { walkRevert } from './walk-revert.mjs';
import { walkAccess, walkWebhooks } from './walk-webhooks.mjs';

const [base, token, shotDir] = process.argv.slice(2);
if (!base || !token || !shotDir) {
  console.error('usage: walk.mjs BASE_URL OWNER_TOKEN SCREENSHOT_DIR');
  process.exit(2);
}
const contractDir = path.join(path.dirname(new URL(import.meta.url).pathname), '..', 'contract');
const require = createRequire(path.join(contractDir, 'package.json'));
const { chromium } = require('playwright-core');

const timeout = Number(process.env.TIMEOUT_MS || 15000);
const loopback = new Set(['127.0.0.1', 'localhost', '[::1]', '::1']);
const failures = [];
const blocked = [];
const pageErrors = [];
let rateLimited = 0;
const t0 = Date.now();
const log = (msg) => console.log(`console: ${msg} (${((Date.now() - t0) / 1000).toFixed(1)} s)`);
const expect = (cond, msg) => { if (!cond) failures.push(msg); return cond; };
// A check that records its failure and lets the walk go on (the later
// checks do not depend on it).
const soft = async (name, f) => {
  try { await f(); } catch (e) { failures.push(`${name}: ${e.message.split('\n')[0]}`); }
};
let shots = 0;
const shot = async (page, name, opts = {}) => {
  shots++;
  await page.screenshot({ path: path.join(shotDir, `${String(shots).padStart(2, '0')}-${name}.png`), ...opts });
};

// The public API, for setting up the moderator and checking what the UI did.
// It shares the owner's rate-limit bucket with the browser, so a 429 is waited
// out (Retry-After) and asked again, as the console itself does; a check must
// never read a 429's problem as the state it is checking.
let apiRateLimited = 0;
async function api(method, p, tok, body, headers = {}) {
  let r;
  for (let attempt = 0; ; attempt++) {
    r = await fetch(`${base}/api${p}`, {
      method,
      headers: { Authorization: `Bearer ${tok}`, ...(body ? { 'Content-Type': 'application/json' } : {}), ...headers },
      body: body ? JSON.stringify(body) : undefined,
    });
    if (r.status !== 429 || attempt === 10) break;
    apiRateLimited++;
    await r.arrayBuffer();
    const wait = Math.min(Number(r.headers.get('Retry-After')) || 1, 5);
    await new Promise((resolve) => setTimeout(resolve, wait * 1000));
  }
  const text = await r.text();
  let json = null;
  try { json = text ? JSON.parse(text) : null; } catch { json = null; }
  return { status: r.status, json, etag: r.headers.get('ETag'), text };
}

// The audit log names users, roles, channels and tokens (deleted ones too),
// with the ID on hover only: no ID in the visible text of any entry.
async function auditNamed(p, { alice, bob }) {
  const table = p.locator('[data-testid="audit"]');
  // Names are looked up after the entries show: wait until none is pending.
  await p.waitForFunction(() => ![...document.querySelectorAll('[data-testid="audit"] .ref')].some((r) => r.textContent === '…'));
  const text = await table.locator('tbody').innerText();
  expect(!/\bparent_id\b/.test(text), 'the audit log shows parent_id, not the category by name');
  const raw = text.match(/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|\b(user|role|channel|token|attachment):[^\s,;]+|\bunknown (user|role|channel|token)\b/g) ?? [];
  expect(raw.length === 0, `the audit log shows IDs, not names: ${[...new Set(raw)].slice(0, 4).join(', ')}`);
  // [type, subject, what it says, the ID on hover]
  const want = [
    ['user.created', `user:${alice.id}`, 'user Alice Liddell', `user:${alice.id}`],
    ['user.role.assigned', `user:${alice.id}`, '+Muted', 'role:muted'],
    ['channel.overwrite.set', 'channel:ops', 'target role Muted', 'role:muted'],
    ['user.token.deleted', `user:${alice.id}`, 'token to revoke', 'token:'],
    ['user.deleted', `user:${bob.id}`, 'user bob', `user:${bob.id}`],
    ['user.created', `user:${bob.id}`, 'user bob', `user:${bob.id}`],
    ['role.deleted', 'role:helpers', 'role Helpers', 'role:helpers'],
    ['channel.deleted', 'channel:scratch', '#Scratch pad', 'channel:scratch'],
    ['channel.attachment.deleted', 'attachment:ops/logo.png', 'logo.png in #Operations', 'channel:ops'],
    // A channel created in a category names it.
    ['channel.created', 'channel:rules', 'category #Staff', 'channel:staff'],
  ];
  for (const [type, subject, name, title] of want) {
    const hover = title.endsWith(':') ? `[title^="${title}"]` : `[title="${title}"]`;
    // (A user's role changes name every role they hold: the row meant is the one that says it.)
    const rows = table.locator(`tbody tr[data-type="${type}"][data-subject="${subject}"]`).filter({ has: p.locator(hover) });
    const r = (type.startsWith('user.role.') ? rows.filter({ hasText: name }) : rows).first();
    if (!expect(await r.count() === 1, `no ${type} entry of ${subject} with ${title} on hover`)) continue;
    const t = (await r.innerText()).replace(/\s+/g, ' ');
    expect(t.includes(name), `the ${type} entry does not say "${name}": ${t}`);
  }
}

// Every disabled control says why in visible text, not only in a tooltip
// (which keyboard and touch users never see): a button's reason is in the
// text of the page, and a disabled matrix cell's section says why. (A
// control disabled by its own state, such as Save with nothing changed or
// Next on the last page, is exempt: what it lacks is in sight.)
const stateReasons = ['nothing changed', 'this is the first page', 'this is the last page', 'no older events', 'nothing selected',
  'review the changes first', 'nothing to change', 'not timed out'];
async function reasonsVisible(p, where) {
  const missing = await p.evaluate((exempt) => {
    const text = document.body.innerText;
    const out = [];
    for (const b of document.querySelectorAll('button[disabled][data-reason]')) {
      if (!b.checkVisibility()) continue;
      const r = b.dataset.reason;
      if (!exempt.includes(r) && !text.includes(r)) out.push(`"${b.textContent.trim()}" (${r})`);
    }
    for (const card of document.querySelectorAll('.card')) {
      if (!card.querySelector('button.tri[disabled]')) continue;
      const says = [...card.querySelectorAll('.why, .readonly')].some((x) => x.checkVisibility() && x.textContent.trim() !== '');
      if (!says) out.push(`the disabled cells of "${card.querySelector('h2')?.textContent.trim()}"`);
    }
    return [...new Set(out)];
  }, stateReasons);
  expect(missing.length === 0, `${where}: disabled with the reason in a tooltip only: ${missing.join(', ')}`);
}

const userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'guildhall-console-'));
fs.mkdirSync(shotDir, { recursive: true });
let context;
let stage = 'start';
const summary = [];
try {
  context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    viewport: { width: 1280, height: 900 },
    timeout,
    acceptDownloads: true,
  });
  context.setDefaultTimeout(timeout);
  await context.route('**/*', (route) => {
    const u = new URL(route.request().url());
    if (loopback.has(u.hostname) || u.protocol === 'data:' || u.protocol === 'blob:') return route.continue();
    blocked.push(u.href);
    return route.abort('blockedbyclient');
  });
  // Layout shifts, summed per page load (the Layout Instability API).
  await context.addInitScript(() => {
    window.__cls = 0;
    new PerformanceObserver((l) => { for (const e of l.getEntries()) if (!e.hadRecentInput) window.__cls += e.value; })
      .observe({ type: 'layout-shift', buffered: true });
  });
  // What the walk provokes on purpose: channels that are not there (or not
  // visible: 404, and 400 for their permissions), a role deleted meanwhile,
  // and the members of the role helpers, which its page reloads on a user
  // event (bob's deletion, just before) that may arrive after the walk
  // deleted the role.
  const provoked = [/\/api\/channels\/(nope|vault)(\/permissions)?$/, /\/permissions\?channelID=(nope|vault)$/, /\/api\/users\/[^/]+\/roles\/doomed$/,
    /\/api\/roles\/helpers\/members\?limit=10$/];
  const watch = (page, who) => {
    page.on('pageerror', (e) => pageErrors.push(`${who} pageerror: ${e.message}`));
    page.on('console', (m) => {
      // A refused request (401, 403, 412) is logged by chromium as a failed
      // resource: expected here. A 429 is retried by the console after
      // Retry-After: counted, not a failure (the walk is faster than people).
      if (m.type() !== 'error') return;
      if (/status of 429/.test(m.text())) rateLimited++;
      else if (/status of (400|404)/.test(m.text()) && provoked.some((r) => r.test(m.location().url))) return;
      // walk-revert.mjs reverts an entry twice: the second is a conflict.
      else if (/status of 409/.test(m.text()) && /\/api\/audit-log\/\d+\/revert(\?dry_run=true)?$/.test(m.location().url)) return;
      else if (!/status of (401|403|412)/.test(m.text())) pageErrors.push(`${who} console: ${m.text()} (${m.location().url})`);
    });
  };
  const page = context.pages()[0] || (await context.newPage());
  watch(page, 'owner');
  log(`chromium ${context.browser()?.version() ?? '?'}`);

  const signIn = async (p, tok) => {
    const resp = await p.goto(`${base}/console/`, { waitUntil: 'domcontentloaded' });
    expect(resp?.status() === 200, `/console/ answered ${resp?.status()}`);
    const csp = resp?.headers()['content-security-policy'] ?? '';
    expect(csp.includes("script-src 'self'") && !csp.includes('unsafe-inline'), `CSP is ${csp}`);
    await p.locator('#token').fill(tok);
    await p.getByRole('button', { name: 'Sign in' }).click();
    await p.getByTestId('whoami').waitFor();
  };

  // ---------------------------------------------------------------- sign in
  stage = 'sign in';
  await page.goto(`${base}/console`, { waitUntil: 'domcontentloaded' });
  expect(new URL(page.url()).pathname === '/console/', `/console did not redirect to /console/ (${page.url()})`);
  await page.locator('#token').waitFor();
  await shot(page, 'sign-in');
  // A wrong token is a readable 401.
  await page.locator('#token').fill('gh_not_a_token_at_all_0123456789abcdef');
  await page.getByRole('button', { name: 'Sign in' }).click();
  const bad = page.locator('.problem[data-status="401"]');
  await bad.waitFor();
  expect(!(await bad.textContent()).includes('{'), 'the 401 is shown as raw JSON');
  await signIn(page, token);
  expect((await page.getByTestId('whoami').textContent()).includes('owner'), 'whoami does not say owner');
  expect(await page.evaluate(() => !location.href.includes('gh_') && sessionStorage.getItem('guildhall.token') !== null), 'the token is not in sessionStorage only');
  log('signed in as the owner');

  // The audit log stays open in a second tab for the whole walk.
  const audit = await context.newPage();
  watch(audit, 'audit tab');
  await signIn(audit, token);
  await audit.goto(`${base}/console/#/audit`);
  await audit.getByTestId('live').filter({ hasText: '● live' }).waitFor();
  const liveColor = await audit.getByTestId('live').evaluate((el) => getComputedStyle(el).color);
  await audit.locator('[data-testid="audit"]').waitFor();
  // The walk happens in the first tab; a background tab's rendering is
  // throttled, so it comes to the front (the audit tab keeps streaming).
  await page.bringToFront();
  const liveRow = (type, subject) => audit.locator(`[data-testid="audit"] tr.fresh[data-type="${type}"]${subject ? `[data-subject="${subject}"]` : ''}`).first();
  // What each action must have written, checked in the audit tab (rows that
  // arrived live carry the class "fresh") once it is brought to the front:
  // a background tab's rendering is throttled.
  const wantLive = [];
  const expectLive = (type, subject) => wantLive.push([type, subject]);

  // ------------------------------------------------------------------ roles
  stage = 'roles: create';
  await page.goto(`${base}/console/#/roles`);
  const createRole = async (id, name) => {
    await page.locator('input[name="role-id"]').fill(id);
    await page.locator('input[name="role-name"]').fill(name);
    await page.getByRole('button', { name: 'Create role' }).click();
    await page.locator(`[data-testid="role-list"] [data-role="${id}"]`).waitFor();
  };
  await createRole('mods', 'Moderators');
  await createRole('muted', 'Muted');
  await createRole('helpers', 'Helpers');
  // Moderators' permissions, as checkboxes with the catalog's descriptions.
  await page.locator('[data-role="mods"]').click();
  for (const p of ['MANAGE_CHANNELS', 'MANAGE_MESSAGES', 'VIEW_AUDIT_LOG']) await page.locator(`.perms input[name="${p}"]`).check();
  await page.locator('#role-h').filter({ hasText: 'Moderators' }).waitFor();
  await page.getByRole('button', { name: 'Save' }).click();
  await page.getByRole('button', { name: 'Save' }).and(page.locator('[data-reason="nothing changed"]')).waitFor();
  const mods = await api('GET', '/roles/mods', token);
  expect(mods.json?.permissions?.length === 3 && ['MANAGE_CHANNELS', 'MANAGE_MESSAGES', 'VIEW_AUDIT_LOG'].every((p) => mods.json.permissions.includes(p)),
    `mods permissions ${JSON.stringify(mods.json?.permissions)}`);
  expectLive('role.created', 'role:mods');
  expectLive('role.permissions.set', 'role:mods');
  log('created roles mods, muted, helpers; set the permissions of mods; ');

  stage = 'roles: reorder';
  const order = async () => (await api('GET', '/roles', token)).json.items.map((r) => r.id).join(',');
  // Created in this order, each at position 1: mods (3), muted (2), helpers (1).
  expect(await order() === 'mods,muted,helpers', `initial order ${await order()}`);
  // Drag and drop: helpers onto mods -> helpers at the top.
  await page.locator('[data-role="helpers"]').dragTo(page.locator('[data-role="mods"]'));
  await page.waitForFunction(() => document.querySelector('[data-testid="role-list"] li')?.getAttribute('data-role') === 'helpers');
  expect(await order() === 'helpers,mods,muted', `after drag and drop: ${await order()}`);
  // Keyboard: muted up one (Alt+ArrowUp).
  await page.locator('[data-role="muted"]').focus();
  await page.keyboard.press('Alt+ArrowUp');
  await page.waitForFunction(() => [...document.querySelectorAll('[data-testid="role-list"] li')].map((l) => l.getAttribute('data-role')).join(',') === 'helpers,muted,mods');
  expect(await order() === 'helpers,muted,mods', `after Alt+ArrowUp: ${await order()}`);
  expectLive('role.moved', 'role:helpers');
  expectLive('role.moved', 'role:muted');
  await shot(page, 'roles');
  summary.push('roles reordered by drag and drop and keyboard');
  log(`reordered roles by drag and drop and by keyboard: ${await order()}`);

  // --------------------------------------------------------------- channels
  stage = 'channels: create';
  await page.goto(`${base}/console/#/channels`);
  await page.locator('input[name="channel-id"]').fill('ops');
  await page.locator('input[name="channel-name"]').fill('Operations');
  await page.locator('input[name="channel-topic"]').fill('Where the moderators meet.');
  await page.getByRole('button', { name: 'Create channel' }).click();
  await page.locator('#settings-h').filter({ hasText: 'Operations' }).waitFor();
  expect((await api('GET', '/channels/ops', token)).json?.topic === 'Where the moderators meet.', 'channel ops not created with its topic');
  expectLive('channel.created', 'channel:ops');
  log('created channel ops');

  // A channel that is not there reads so, whichever of the three requests
  // answers first: the channel's own (404) is held here until the
  // permissions question (400 for a channel that is not there) has been
  // answered, the order in which "Request is invalid" used to win.
  const noChannel = async (p, id) => {
    const permsAnswered = p.waitForResponse((r) => r.url().includes(`/permissions?channelID=${id}`));
    const hold = async (route) => { await permsAnswered.catch(() => {}); await route.continue(); };
    const urls = [`**/api/channels/${id}`, `**/api/channels/${id}/permissions`];
    for (const u of urls) await p.route(u, hold);
    try {
      await p.goto(`${base}/console/#/channels/${id}`);
      const box = p.locator('.detail .problem');
      await box.waitFor();
      const says = (await box.textContent()).replace(/\s+/g, ' ');
      expect(says.includes(`No channel “${id}”`) && says.includes('does not exist') && !says.includes('invalid'),
        `#/channels/${id} says: ${says}`);
      return says;
    } finally {
      for (const u of urls) await p.unroute(u);
    }
  };
  stage = 'channels: one that is not there';
  await soft(stage, async () => {
    const says = await noChannel(page, 'nope');
    await shot(page, 'channel-not-there');
    log(`#/channels/nope says: ${says}`);
  });

  // ------------------------------------------------------------------ users
  stage = 'users: create';
  await page.goto(`${base}/console/#/users`);
  const createUser = async (username, display) => {
    await page.locator('form.create input[name="username"]').fill(username);
    await page.locator('form.create input[name="display_name"]').fill(display);
    await page.getByRole('button', { name: 'Create user' }).click();
    await page.locator('#user-h').filter({ hasText: display }).waitFor();
  };
  await createUser('alice', 'Alice Liddell');
  // A role's box ticks at once (page.check() fails when a click does not
  // change it), marked pending until the server answers: the answer is held
  // here until the mark has been seen.
  stage = 'users: a role ticks at once';
  await soft(stage, async () => {
    let release;
    const answered = new Promise((r) => { release = r; });
    await page.route('**/api/users/*/roles/muted', async (route) => { await answered; await route.continue(); }, { times: 1 });
    try {
      await page.locator('input[name="role-muted"]').check();
      await page.locator('label[data-pending="true"]:has(input[name="role-muted"]:checked)').waitFor();
      await shot(page, 'users-role-pending');
    } finally {
      release();
    }
  });
  await page.locator('label:not([data-pending]):has(input[name="role-muted"]:checked)').waitFor();
  const alice = (await api('GET', '/users?q=alice', token)).json.items[0];
  expect(alice?.roles?.includes('muted'), `alice's roles ${JSON.stringify(alice?.roles)}`);
  // A refused one is set back with the reason: a role deleted meanwhile.
  stage = 'users: a refused role is set back';
  await soft(stage, async () => {
    expect((await api('POST', '/roles/doomed/create', token, { name: 'Doomed' })).status === 201, 'role doomed not created');
    await page.reload();
    await page.locator('[data-testid="user-list"] a', { hasText: 'Alice' }).click();
    await page.locator('#user-h').filter({ hasText: 'Alice' }).waitFor();
    const doomed = page.locator('input[name="role-doomed"]');
    await doomed.waitFor();
    expect((await api('POST', '/roles/doomed/delete', token)).status === 204, 'role doomed not deleted');
    // The box ticks at once; the refusal is held until page.check() has seen it ticked.
    let releaseDoomed;
    const doomedHeld = new Promise((r) => { releaseDoomed = r; });
    await page.route('**/api/users/*/roles/doomed', async (route) => { await doomedHeld; await route.continue(); }, { times: 1 });
    try {
      await doomed.check();
    } finally {
      releaseDoomed();
    }
    const note = page.getByTestId('role-refused');
    await note.waitFor();
    const says = (await note.textContent()).replace(/\s+/g, ' ');
    expect(says.includes('not assigned') && says.includes('Not found'), `the refused role says: ${says}`);
    expect(!(await doomed.isChecked()), 'the refused role is still ticked');
    expect(await page.locator('.problem[data-status="404"]').count() === 1, 'the refusal is not shown in words');
    await shot(page, 'users-role-refused');
    log(`a role deleted meanwhile: its box ticked at once, then set back: "${says}"`);
  });
  expectLive('user.created');
  expectLive('user.role.assigned');
  // The moderator, with a token made here: its secret is shown once.
  await createUser('morgan', 'Morgan Mod');
  await page.locator('input[name="role-mods"]').click();
  await page.locator('label:not([data-pending]):has(input[name="role-mods"]:checked)').waitFor();
  await page.locator('input[name="token-name"]').fill('console walk');
  await page.getByRole('button', { name: 'Create token' }).click();
  const secretBox = page.getByTestId('token-secret');
  await secretBox.waitFor();
  const modToken = (await secretBox.locator('code').textContent()).trim();
  expect(modToken.length >= 32, 'no token secret shown');
  await shot(page, 'users-token-once');
  await page.getByRole('button', { name: 'I have kept it' }).click();
  expect(await secretBox.count() === 0, 'the secret is still shown');
  // Search: the users filter by text.
  await page.locator('input[name="q"]').fill('ali');
  await page.getByRole('button', { name: 'Search' }).click();
  await page.waitForFunction(() => document.querySelectorAll('[data-testid="user-list"] li').length === 1);
  expect((await page.getByTestId('user-list').textContent()).includes('Alice'), 'search for "ali" does not list Alice');
  await page.locator('[data-testid="user-list"] a').first().click();
  await page.locator('#user-h').filter({ hasText: 'Alice' }).waitFor();
  await shot(page, 'users');
  log('created users alice (muted) and morgan (mods, with a token); searched');

  // ---------------------------------------------------- the overwrite matrix
  stage = 'channels: overwrite matrix';
  await page.goto(`${base}/console/#/channels/ops`);
  await page.getByTestId('matrix').waitFor();
  await page.locator('select[name="add-role"]').selectOption('muted');
  const cell = page.locator('[data-testid="matrix"] tr[data-row="role:muted"] button[aria-label^="SEND_MESSAGES for"]');
  await cell.click(); // inherit -> allow
  await cell.click(); // allow -> deny
  expect(await cell.getAttribute('data-value') === 'deny', `the cell is ${await cell.getAttribute('data-value')}`);
  const modsView = page.locator('[data-testid="matrix"] tr[data-row="everyone"] button[aria-label^="VIEW_CHANNEL for"]');
  await modsView.click(); // everyone: VIEW_CHANNEL allow (harmless, exercises a second row)
  await page.getByTestId('matrix-save').click();
  await page.locator('[data-testid="matrix"] tr[data-row="role:muted"] button[aria-label="SEND_MESSAGES for role Muted: deny"]:not(.changed)').waitFor();
  const ows = (await api('GET', '/channels/ops/permissions', token)).json.items;
  const mutedOw = ows.find((o) => o.target_type === 'role' && o.target_id === 'muted');
  expect(mutedOw && mutedOw.deny.includes('SEND_MESSAGES'), `overwrites after save: ${JSON.stringify(ows)}`);
  expectLive('channel.overwrite.set', 'channel:ops');
  await shot(page, 'channel-matrix', { fullPage: true });
  summary.push('overwrite set in the matrix');
  log('set SEND_MESSAGES deny for Muted in #ops through the matrix');

  // A change made meanwhile is shown, not overwritten (If-Match -> 412).
  stage = 'channels: changed meanwhile';
  await page.locator('[data-testid="matrix"] tr[data-row="role:muted"] button[aria-label^="ADD_REACTIONS for"]').click();
  const before = await api('GET', '/channels/ops/permissions', token);
  const other = await api('POST', '/channels/ops/permissions', token, { target_type: 'role', target_id: 'helpers', allow: ['MANAGE_MESSAGES'], deny: [] });
  expect(other.status === 200 && before.etag !== other.etag, `the concurrent change answered ${other.status}`);
  await page.getByTestId('matrix-save').click();
  const stale = page.locator('.problem.stale');
  await stale.waitFor();
  expect((await stale.textContent()).includes('Changed meanwhile'), 'the 412 is not shown as "Changed meanwhile"');
  await page.locator('[data-testid="matrix"] tr[data-row="role:helpers"]').waitFor(); // the fresh state, with the other change
  const after = (await api('GET', '/channels/ops/permissions', token)).json.items.find((o) => o.target_id === 'muted');
  expect(!after.allow.includes('ADD_REACTIONS'), 'the stale save overwrote the change made meanwhile');
  await shot(page, 'channel-changed-meanwhile');
  summary.push('412 shown as changed meanwhile');
  log('a save over a change made meanwhile showed "Changed meanwhile" and the fresh state');

  // ------------------------------------------------------------ attachments
  stage = 'attachments: drag and drop';
  const drop = page.getByTestId('dropzone');
  const dt = await page.evaluateHandle(() => {
    const d = new DataTransfer();
    d.items.add(new File(['Guildhall console walk\n'.repeat(2000)], 'walk notes.txt', { type: 'text/plain' }));
    return d;
  });
  await drop.dispatchEvent('dragover', { dataTransfer: dt });
  await drop.dispatchEvent('drop', { dataTransfer: dt });
  await page.locator('[data-testid="attachments"] td', { hasText: 'walk-notes.txt' }).waitFor();
  const att = await api('GET', '/channels/ops/attachments', token);
  expect(att.json?.items?.some((a) => a.id === 'walk-notes.txt' && a.size === 46000), `attachments ${JSON.stringify(att.json?.items)}`);
  expectLive('channel.attachment.created');
  // Download it back.
  const [download] = await Promise.all([page.waitForEvent('download'), page.getByRole('button', { name: 'Download walk-notes.txt' }).click()]);
  const got = fs.readFileSync(await download.path(), 'utf8');
  expect(got.length === 46000, `downloaded ${got.length} bytes`);
  await shot(page, 'channel', { fullPage: true });
  // The file picker works too; delete what it uploaded.
  await page.locator('.drop input[type="file"]').setInputFiles({ name: 'logo.png', mimeType: 'image/png', buffer: Buffer.from('89504e470d0a1a0a', 'hex') });
  await page.getByRole('button', { name: 'Delete logo.png' }).click();
  await page.locator('dialog.confirm').getByRole('button', { name: 'Delete attachment' }).click();
  await page.getByRole('button', { name: 'Delete logo.png' }).waitFor({ state: 'detached' });
  expect((await api('GET', '/channels/ops/attachments', token)).json?.items?.map((a) => a.id).join() === 'walk-notes.txt', 'logo.png was not deleted');
  expectLive('channel.attachment.deleted', 'attachment:ops/logo.png');
  summary.push('attachment uploaded by drag and drop');
  log('uploaded walk-notes.txt by drag and drop, downloaded it back; uploaded logo.png with the file picker, deleted it');

  // ------------------------------------------- rename, suspend, delete
  stage = 'channels: rename, delete';
  await page.goto(`${base}/console/#/channels`);
  await page.locator('input[name="channel-id"]').fill('scratch');
  await page.locator('input[name="channel-name"]').fill('Scratch');
  await page.getByRole('button', { name: 'Create channel' }).click();
  await page.locator('#settings-h').filter({ hasText: 'Scratch' }).waitFor();
  await page.locator('input[name="name"]').fill('Scratch pad');
  await page.getByRole('button', { name: 'Save' }).first().click();
  await page.locator('#settings-h').filter({ hasText: 'Scratch pad' }).waitFor();
  expect((await api('GET', '/channels/scratch', token)).json?.name === 'Scratch pad', 'the channel was not renamed');
  await page.getByRole('button', { name: 'Delete channel…' }).click();
  const dialog = page.locator('dialog.confirm');
  await dialog.waitFor();
  const says = (await dialog.textContent()).replace(/\s+/g, ' ');
  expect(says.includes('0 permission overwrites') && says.includes('0 attachments'), `the delete confirmation says: ${says}`);
  await dialog.getByRole('button', { name: 'Delete channel' }).click();
  await page.waitForFunction(() => location.hash === '#/channels');
  expect((await api('GET', '/channels/scratch', token)).status === 404, 'the channel was not deleted');
  expectLive('channel.updated', 'channel:scratch');
  expectLive('channel.deleted', 'channel:scratch');

  stage = 'users: suspend, revoke';
  await page.goto(`${base}/console/#/users`);
  await page.locator('[data-testid="user-list"] a', { hasText: 'Alice' }).click();
  await page.locator('#user-h').filter({ hasText: 'Alice' }).waitFor();
  await page.getByRole('button', { name: 'Suspend' }).click();
  await page.locator('#user-h .badge.warn').waitFor();
  expect((await api('GET', `/users/${alice.id}`, token)).json?.status === 'suspended', 'alice is not suspended');
  await page.getByRole('button', { name: 'Reactivate' }).click();
  await page.getByRole('button', { name: 'Suspend' }).waitFor();
  expect((await api('GET', `/users/${alice.id}`, token)).json?.status === 'active', 'alice is not active again');
  expectLive('user.updated', `user:${alice.id}`);
  await page.locator('input[name="token-name"]').fill('to revoke');
  await page.getByRole('button', { name: 'Create token' }).click();
  await page.getByTestId('token-secret').waitFor();
  await page.getByRole('button', { name: 'Revoke to revoke' }).click();
  await page.locator('dialog.confirm').getByRole('button', { name: 'Revoke token' }).click();
  await page.getByRole('button', { name: 'Revoke to revoke' }).waitFor({ state: 'detached' });
  expect((await api('GET', `/users/${alice.id}/tokens`, token)).json?.items?.length === 0, 'the token was not revoked');
  expectLive('user.token.deleted');
  stage = 'users: delete';
  await createUser('bob', 'Bob Builder');
  const bob = (await api('GET', '/users?q=bob', token)).json.items[0];
  // The user page reloads on user events: one that arrives after bob's
  // deletion may ask for his tokens once more, a 404 the console shows
  // nothing for.
  provoked.push(new RegExp(`/api/users/${bob.id}/tokens$`));
  await page.getByRole('button', { name: 'Delete user…' }).click();
  await page.locator('dialog.confirm').getByRole('button', { name: 'Delete user' }).click();
  await page.locator('#user-h').waitFor({ state: 'detached' });
  expect((await api('GET', `/users/${bob.id}`, token)).status === 404, 'bob was not deleted');
  expectLive('user.deleted', `user:${bob.id}`);

  stage = 'roles: delete';
  await page.goto(`${base}/console/#/roles`);
  await page.locator('[data-role="helpers"]').click();
  await page.getByRole('button', { name: 'Delete role…' }).click();
  await page.locator('dialog.confirm').getByRole('button', { name: 'Delete role' }).click();
  await page.locator('[data-role="helpers"]').waitFor({ state: 'detached' });
  expect(await order() === 'muted,mods', `roles after deleting helpers: ${await order()}`);
  expectLive('role.deleted', 'role:helpers');
  log('renamed and deleted a channel (the confirmation says what goes with it), suspended and reactivated a user, revoked a token, deleted a user and a role');

  // ------------------------------------------------------------------- Why?
  stage = 'permissions: why';
  await page.goto(`${base}/console/#/permissions`);
  await page.locator('input[name="why-user"]').fill('alice');
  await page.locator('.suggest button', { hasText: 'alice' }).click();
  await page.locator('select[name="why-channel"]').selectOption('ops');
  await page.getByRole('button', { name: 'Explain' }).click();
  const why = page.locator('[data-testid="explain"] tr[data-permission="SEND_MESSAGES"]');
  await why.waitFor();
  const reason = (await why.textContent()).replace(/\s+/g, ' ');
  expect(reason.includes('not granted') && reason.includes('denied by the overwrite of role Muted in #Operations'), `Why? SEND_MESSAGES: ${reason}`);
  await shot(page, 'permissions-why', { fullPage: true });
  summary.push(`Why? reads "${reason.match(/denied by [^.]*?#Operations/)?.[0]}"`);
  log(`Why? alice in #ops, SEND_MESSAGES: ${reason}`);

  // ------------------------------------------- MODERATE_MEMBERS in pickers
  stage = 'permissions: MODERATE_MEMBERS in the pickers';
  await page.goto(`${base}/console/#/roles`);
  await page.locator('[data-role="mods"]').click();
  await page.locator('#role-h').filter({ hasText: 'Moderators' }).waitFor();
  await page.locator('.perms input[name="MODERATE_MEMBERS"]').check();
  await page.getByRole('button', { name: 'Save' }).click();
  await page.getByRole('button', { name: 'Save' }).and(page.locator('[data-reason="nothing changed"]')).waitFor();
  const modsMod = (await api('GET', '/roles/mods', token)).json;
  expect(modsMod?.permissions?.includes('MODERATE_MEMBERS'), `mods permissions after ticking MODERATE_MEMBERS: ${JSON.stringify(modsMod?.permissions)}`);
  expectLive('role.permissions.set', 'role:mods');
  await page.goto(`${base}/console/#/permissions`);
  await page.locator('#global-h').waitFor();
  await page.locator('.perms input[name="MODERATE_MEMBERS"]').waitFor();
  log('MODERATE_MEMBERS is in the role and global pickers; Moderators hold it now');

  // ------------------------------------------------------------- categories
  stage = 'categories: create';
  await page.goto(`${base}/console/#/channels`);
  const createIn = async (kind, id, name, parent) => {
    await page.locator('select[name="channel-kind"]').selectOption(kind);
    if (kind === 'text') await page.locator('select[name="channel-parent"]').selectOption(parent ?? '');
    await page.locator('input[name="channel-id"]').fill(id);
    await page.locator('input[name="channel-name"]').fill(name);
    await page.getByRole('button', { name: kind === 'category' ? 'Create category' : 'Create channel' }).click();
    await page.locator('#settings-h').filter({ hasText: name }).waitFor();
  };
  await createIn('category', 'staff', 'Staff');
  const staffCh = (await api('GET', '/channels/staff', token)).json;
  expect(staffCh?.kind === 'category' && staffCh.parent_id === null, `staff is ${JSON.stringify(staffCh)}`);
  await createIn('text', 'rules', 'Rules', 'staff');
  // A channel made in a category starts synced, and says so.
  await page.locator('[data-testid="synced"][data-synced="true"]', { hasText: 'synced with Staff' }).waitFor();
  await createIn('text', 'lounge', 'Lounge', 'staff');
  for (const id of ['rules', 'lounge']) {
    const ch = (await api('GET', `/channels/${id}`, token)).json;
    expect(ch?.parent_id === 'staff' && ch.synced === true && ch.kind === 'text', `${id} is ${JSON.stringify(ch)}`);
  }
  expectLive('channel.created', 'channel:staff');
  expectLive('channel.created', 'channel:rules');
  // The tree: each category's channels nested in it, everything in the server's (tree) order.
  await page.locator('[data-channel="staff"] li[data-channel="lounge"]').waitFor();
  const treeOrder = () => page.evaluate(() => [...document.querySelectorAll('[data-testid="channel-list"] li[data-channel]')].map((l) => l.dataset.channel).join(','));
  const apiOrder = async (q = '') => (await api('GET', `/channels?limit=200${q}`, token)).json.items.map((c) => c.id).join(',');
  const childOrder = () => page.evaluate(() => [...document.querySelectorAll('[data-channel="staff"] li[data-channel]')].map((l) => l.dataset.channel).join(','));
  const waitChildren = (want) => page.waitForFunction((w) => [...document.querySelectorAll('[data-channel="staff"] li[data-channel]')].map((l) => l.dataset.channel).join(',') === w, want);
  expect(await treeOrder() === await apiOrder(), `the tree shows ${await treeOrder()}, the server lists ${await apiOrder()}`);
  expect(await childOrder() === 'rules,lounge', `staff holds ${await childOrder()}`);
  log(`created the category staff with rules and lounge in it (synced): ${await treeOrder()}`);

  stage = 'categories: reorder';
  // Drag and drop: lounge onto rules -> lounge first (one reorder request).
  let reorderSent = page.waitForRequest((r) => r.method() === 'POST' && r.url().endsWith('/api/channels/reorder'));
  await page.locator('[data-channel="lounge"] > a').dragTo(page.locator('[data-channel="rules"] > a'));
  await reorderSent;
  await waitChildren('lounge,rules');
  expect(await apiOrder('&parent_id=staff') === 'lounge,rules', `after drag and drop, staff holds ${await apiOrder('&parent_id=staff')}`);
  // Keyboard: rules up one (Alt+ArrowUp).
  reorderSent = page.waitForRequest((r) => r.method() === 'POST' && r.url().endsWith('/api/channels/reorder'));
  await page.locator('[data-channel="rules"] > a').focus();
  await page.keyboard.press('Alt+ArrowUp');
  await reorderSent;
  await waitChildren('rules,lounge');
  expect(await apiOrder('&parent_id=staff') === 'rules,lounge', `after Alt+ArrowUp, staff holds ${await apiOrder('&parent_id=staff')}`);
  // At the category's edge a keyboard move says why it goes no further.
  await page.locator('[data-channel="rules"] > a').focus();
  await page.keyboard.press('Alt+ArrowUp');
  await page.getByTestId('move-edge').filter({ hasText: '#Rules is already first in Staff' }).waitFor();
  expectLive('channel.moved', 'channel:lounge');

  stage = 'categories: move between categories';
  // Drag ops onto the category: a single move (PATCH), last in staff, not synced (its overwrites differ).
  const patchSent = page.waitForRequest((r) => r.method() === 'PATCH' && r.url().endsWith('/api/channels/ops'));
  await page.locator('[data-channel="ops"] > a').dragTo(page.locator('[data-channel="staff"] > a'));
  const patchBody = JSON.parse((await patchSent).postData() ?? '{}');
  expect(patchBody.parent_id === 'staff', `the move sent ${JSON.stringify(patchBody)}`);
  await waitChildren('rules,lounge,ops');
  const opsMoved = (await api('GET', '/channels/ops', token)).json;
  expect(opsMoved?.parent_id === 'staff' && opsMoved.synced === false, `ops after the move: ${JSON.stringify(opsMoved)}`);
  expect(await treeOrder() === await apiOrder(), `the tree shows ${await treeOrder()}, the server lists ${await apiOrder()}`);
  await page.goto(`${base}/console/#/channels/ops`);
  await page.locator('[data-testid="synced"][data-synced="false"]', { hasText: 'not synced with Staff' }).waitFor();
  await page.getByTestId('sync').filter({ hasText: 'Sync with Staff' }).waitFor();
  await shot(page, 'channels-tree', { fullPage: true });
  // And back out with its settings (the accessible way): Category "none".
  await page.locator('select[name="parent"]').selectOption('');
  await page.getByRole('button', { name: 'Save' }).first().click();
  await page.locator('[data-testid="channel-list"] > li[data-channel="ops"]').waitFor();
  await page.locator('#settings-h [data-testid="synced"]').waitFor({ state: 'detached' });
  expect((await api('GET', '/channels/ops', token)).json?.parent_id === null, 'ops did not leave the category');
  expectLive('channel.moved', 'channel:ops');
  summary.push('channels reordered and moved between categories by drag and drop, keyboard and settings');
  log(`reordered staff by drag and drop and Alt+ArrowUp; moved ops into staff by drag and drop and out with its settings: ${await treeOrder()}`);

  stage = 'categories: the matrix warns';
  await page.goto(`${base}/console/#/channels/staff`);
  await page.getByTestId('matrix').waitFor();
  const catNote = (await page.getByTestId('category-synced').textContent()).replace(/\s+/g, ' ');
  expect(catNote.includes('2 of its 2 channels are synced'), `the category's matrix says: ${catNote}`);
  await page.locator('select[name="add-role"]').selectOption('muted');
  const catCell = page.locator('[data-testid="matrix"] tr[data-row="role:muted"] button[aria-label^="SEND_MESSAGES for"]');
  await catCell.click(); // inherit -> allow
  await catCell.click(); // allow -> deny
  const syncWarn = page.getByTestId('sync-warning');
  await syncWarn.waitFor();
  const warns = (await syncWarn.textContent()).replace(/\s+/g, ' ');
  expect(warns.includes('2 synced channels') && warns.includes('#Rules') && warns.includes('#Lounge'), `the warning says: ${warns}`);
  await shot(page, 'category-matrix-warning', { fullPage: true });
  await page.getByTestId('matrix-save').click();
  await page.locator('[data-testid="matrix"] tr[data-row="role:muted"] button[aria-label="SEND_MESSAGES for role Muted: deny"]:not(.changed)').waitFor();
  for (const id of ['rules', 'lounge']) {
    const ows = (await api('GET', `/channels/${id}/permissions`, token)).json?.items ?? [];
    const ch = (await api('GET', `/channels/${id}`, token)).json;
    expect(ows.some((o) => o.target_id === 'muted' && o.deny.includes('SEND_MESSAGES')) && ch?.synced === true,
      `#${id} after the category's edit: synced ${ch?.synced}, overwrites ${JSON.stringify(ows)}`);
  }
  expectLive('channel.overwrite.set', 'channel:staff');
  summary.push(`a category's matrix warns "${warns.trim()}"`);
  log(`the category's matrix warned "${warns.trim()}"; the edit reached both synced channels`);

  // A synced channel says so; an edit of its own unsyncs it (it warns first), and "Sync with Staff" syncs it again.
  stage = 'categories: unsync and sync';
  await page.goto(`${base}/console/#/channels/rules`);
  await page.getByTestId('synced-note').filter({ hasText: 'Staff' }).waitFor();
  await page.locator('#settings-h [data-testid="synced"][data-synced="true"]').waitFor();
  await page.locator('[data-testid="matrix"] tr[data-row="everyone"] button[aria-label^="ADD_REACTIONS for"]').click();
  await page.getByTestId('sync-warning').filter({ hasText: 'Saving unsyncs #Rules from Staff' }).waitFor();
  await page.getByTestId('matrix-save').click();
  await page.locator('#settings-h [data-testid="synced"][data-synced="false"]').waitFor();
  expect((await api('GET', '/channels/rules', token)).json?.synced === false, 'rules is still synced after an edit of its own');
  // The keyboard stays where the work is, not on <body>.
  const focusIn = () => page.evaluate(() => document.activeElement?.closest('.card')?.querySelector('h2')?.id ?? document.activeElement?.tagName);
  await page.waitForFunction(() => document.activeElement?.id === 'matrix-h').catch(async () => {
    failures.push(`after saving the matrix the focus is on ${await focusIn()}`);
  });
  // "Sync with Staff" replaces the channel's own overwrites: it asks first, and Cancel changes nothing.
  await page.getByTestId('sync').click();
  const syncAsk = page.locator('dialog.confirm[open]');
  await syncAsk.filter({ hasText: 'Sync #Rules with Staff?' }).waitFor();
  expect((await syncAsk.textContent()).includes('replaces the'), `the sync confirmation reads: ${await syncAsk.textContent()}`);
  await syncAsk.getByRole('button', { name: 'Cancel' }).click();
  await syncAsk.waitFor({ state: 'detached' });
  expect((await api('GET', '/channels/rules', token)).json?.synced === false, 'cancelling the sync synced rules');
  await page.getByTestId('sync').click();
  await syncAsk.getByRole('button', { name: 'Sync with Staff' }).click();
  await page.locator('#settings-h [data-testid="synced"][data-synced="true"]').waitFor();
  await page.waitForFunction(() => document.activeElement?.id === 'settings-h').catch(async () => {
    failures.push(`after "Sync with Staff" the focus is on ${await focusIn()}`);
  });
  const rulesOws = (await api('GET', '/channels/rules/permissions', token)).json?.items ?? [];
  const staffOws = (await api('GET', '/channels/staff/permissions', token)).json?.items ?? [];
  expect((await api('GET', '/channels/rules', token)).json?.synced === true && JSON.stringify(rulesOws) === JSON.stringify(staffOws),
    `rules after "Sync with Staff": ${JSON.stringify(rulesOws)} (staff: ${JSON.stringify(staffOws)})`);
  log('an edit of its own unsynced #rules (warned first, the focus kept); "Sync with Staff" asked first, then synced it again (the focus kept)');

  // "Why?" with a fresh page each time (a question asked again on the same page would read the last answer).
  const askWhy = async (username, channelID, perm) => {
    await page.goto('about:blank');
    await page.goto(`${base}/console/#/permissions`);
    await page.locator('input[name="why-user"]').fill(username);
    await page.locator('.suggest button', { hasText: username }).click();
    await page.locator('select[name="why-channel"]').selectOption(channelID);
    await page.getByRole('button', { name: 'Explain' }).click();
    const row = page.locator(`[data-testid="explain"] tr[data-permission="${perm}"]`);
    await row.waitFor();
    return (await row.textContent()).replace(/\s+/g, ' ');
  };
  stage = 'categories: Why? names the category';
  const copied = await askWhy('alice', 'rules', 'SEND_MESSAGES');
  expect(copied.includes('not granted') && copied.includes('denied by the overwrite of role Muted in #Rules (copied from category Staff)'), `Why? in #rules: ${copied}`);
  await shot(page, 'permissions-why-category', { fullPage: true });
  log(`Why? alice in #rules, SEND_MESSAGES: ${copied}`);

  // --------------------------------------------------------------- timeouts
  stage = 'users: time out';
  await page.goto(`${base}/console/#/users`);
  await page.locator('[data-testid="user-list"] a', { hasText: 'Alice' }).click();
  await page.locator('#user-h').filter({ hasText: 'Alice' }).waitFor();
  await page.getByTestId('timeout-state').filter({ hasText: 'is not timed out' }).waitFor();
  const presetNames = await page.getByTestId('timeout').locator('button[aria-label^="Time out for"]').allTextContents();
  expect(presetNames.join('|') === '60 s|5 min|10 min|1 h|1 day|1 week', `the timeout presets are ${presetNames.join('|')}`);
  const timedAt = Date.now();
  await page.getByRole('button', { name: 'Time out for 10 minutes' }).click();
  const left = page.getByTestId('timeout-left');
  await left.waitFor();
  const until = Date.parse((await api('GET', `/users/${alice.id}`, token)).json?.timeout_until ?? '');
  expect(until >= timedAt + 595_000 && until <= Date.now() + 605_000, `alice's timeout ends ${new Date(until).toISOString()}, not in 10 minutes`);
  // The time left counts down, live.
  const leftFirst = (await left.textContent()).trim();
  expect(/^(10:00|9:[0-5]\d)$/.test(leftFirst), `the time left reads ${leftFirst}`);
  await page.waitForFunction((f) => { const t = document.querySelector('[data-testid="timeout-left"]')?.textContent?.trim(); return t && t !== f; }, leftFirst);
  const leftNext = (await left.textContent()).trim();
  await page.locator('[data-testid="user-list"] li[data-user="alice"] .badge', { hasText: 'timed out' }).waitFor();
  await shot(page, 'users-timeout', { fullPage: true });
  expectLive('user.timeout', `user:${alice.id}`);
  // Why? names the timeout and its end (on what she would hold otherwise).
  const cut = await askWhy('alice', 'ops', 'ADD_REACTIONS');
  expect(cut.includes('not granted') && cut.includes('denied: timed out until'), `Why? while timed out: ${cut}`);
  const stillViews = await page.locator('[data-testid="explain"] tr[data-permission="VIEW_CHANNEL"]').textContent();
  expect(stillViews.includes('✓ granted'), `VIEW_CHANNEL while timed out: ${stillViews}`);
  // Ended early.
  await page.goto(`${base}/console/#/users`);
  await page.locator('[data-testid="user-list"] a', { hasText: 'Alice' }).click();
  await page.getByTestId('timeout-left').waitFor();
  await page.getByTestId('timeout-end').click();
  await page.locator('[data-testid="timeout-state"][data-active="false"]').waitFor();
  const aliceAfter = (await api('GET', `/users/${alice.id}`, token)).json;
  expect(aliceAfter?.timeout_until == null || Date.parse(aliceAfter.timeout_until) <= Date.now(), `alice's timeout did not end: ${aliceAfter?.timeout_until}`);
  summary.push(`timeout counted down live (${leftFirst} -> ${leftNext}), named by Why?, ended early`);
  log(`timed alice out for 10 minutes (${leftFirst} -> ${leftNext} left); Why? says "${cut.match(/denied: timed out until [^✓✗]*/)?.[0]?.trim()}"; ended it early`);

  // ------------------------------------------------------ bulk role changes
  stage = 'users: select many';
  expect((await api('POST', '/roles/regulars/create', token, { name: 'Regulars', permissions: [], color: '#2b8a3e' })).status === 201, 'role regulars not created');
  const extras = Array.from({ length: 12 }, (_, i) => `extra${String(i + 1).padStart(2, '0')}`);
  for (const [username, display_name] of [['carol', 'Carol Danvers'], ...extras.map((x) => [x, `Extra ${x.slice(5)}`])]) {
    expect((await api('POST', '/users', token, { username, display_name })).status === 201, `user ${username} not created`);
  }
  const carol = (await api('GET', '/users?q=carol', token)).json.items[0];
  // Fresh, so that the new role is in the console's list.
  await page.goto('about:blank');
  await page.goto(`${base}/console/#/users`);
  await page.locator('[data-testid="user-list"] li[data-user="extra12"]').waitFor();
  const onPage = await page.locator('[data-testid="user-list"] li').count();
  expect(onPage === 16, `${onPage} users on the first page, not 16`);
  await page.locator('input[name="pick-all"]').check();
  await page.getByTestId('bulk-count').filter({ hasText: `${onPage} selected` }).waitFor();
  expect(await page.locator('[data-testid="user-list"] input[type="checkbox"]:not(:checked)').count() === 0, 'select all left users unticked');
  await page.locator('select[name="bulk-role"]').selectOption('regulars');
  const bulkSent = page.waitForRequest((r) => r.method() === 'POST' && r.url().endsWith('/api/roles/regulars/members'));
  await page.getByTestId('bulk-add').click();
  const bulkBody = JSON.parse((await bulkSent).postData() ?? '{}');
  expect(bulkBody.add?.length === onPage && !bulkBody.remove, `one request adds everyone: ${JSON.stringify(bulkBody).slice(0, 120)}`);
  const bulkResult = page.getByTestId('bulk-result');
  await bulkResult.filter({ hasText: `Regulars given to ${onPage} users` }).waitFor();
  const regulars = async () => (await api('GET', '/roles/regulars/members?limit=200', token)).json?.items?.map((u) => u.username).sort() ?? [];
  expect((await regulars()).length === onPage, `regulars has ${(await regulars()).length} members`);
  // Two by hand, then removed at once.
  await page.locator('input[name="pick-all"]').uncheck();
  await page.getByTestId('bulk-count').filter({ hasText: '0 selected' }).waitFor();
  await page.locator('input[name="pick-alice"]').check();
  await page.locator('input[name="pick-carol"]').check();
  expect(await page.locator('input[name="pick-all"]').evaluate((el) => el.indeterminate), '"select all" does not show that some are ticked');
  await page.getByTestId('bulk-count').filter({ hasText: '2 selected' }).waitFor();
  await shot(page, 'users-bulk', { fullPage: true });
  await page.getByTestId('bulk-remove').click();
  await bulkResult.filter({ hasText: 'Regulars taken from 2 users' }).waitFor();
  const left14 = await regulars();
  expect(left14.length === onPage - 2 && !left14.includes('alice') && !left14.includes('carol'), `regulars after removing two: ${left14.join(',')}`);
  expectLive('user.role.assigned', `user:${carol.id}`);
  expectLive('user.role.removed', `user:${carol.id}`);
  summary.push(`${onPage} users given a role in one request, 2 taken off`);
  log(`selected all ${onPage} users on the page and gave them Regulars in one request; took it from alice and carol`);
  // A timeout that ends by itself: the list's badge goes with it, with no reload.
  stage = 'users: a timeout ends by itself';
  const shortEnd = new Date(Date.now() + 4000).toISOString();
  const shortTimeout = await api('PATCH', `/users/${carol.id}`, token, { timeout_until: shortEnd }, { 'Content-Type': 'application/merge-patch+json' });
  expect(shortTimeout.status === 200, `timing carol out for 4 s answered ${shortTimeout.status}`);
  await page.goto('about:blank');
  await page.goto(`${base}/console/#/users`);
  const carolBadge = page.locator('[data-testid="user-list"] li[data-user="carol"] .badge', { hasText: 'timed out' });
  await carolBadge.waitFor();
  await carolBadge.waitFor({ state: 'detached', timeout: 10_000 });
  expect(Date.now() >= Date.parse(shortEnd), 'the badge went before the timeout ended');
  log('a 4 s timeout: the users list\'s badge ended with it, with no reload');

  stage = 'roles: members, paged';
  await page.goto(`${base}/console/#/roles`);
  await page.locator('[data-role="regulars"]').click();
  const membersCard = page.getByTestId('role-members');
  await membersCard.getByTestId('members-range').filter({ hasText: '1–10, more' }).waitFor();
  const page1 = await membersCard.locator('li[data-member]').evaluateAll((l) => l.map((x) => x.dataset.member));
  await shot(page, 'role-members', { fullPage: true });
  await membersCard.getByTestId('members-next').click();
  await membersCard.getByTestId('members-range').filter({ hasText: `11–${onPage - 2}` }).waitFor();
  const page2 = await membersCard.locator('li[data-member]').evaluateAll((l) => l.map((x) => x.dataset.member));
  expect(await membersCard.getByTestId('members-next').isDisabled(), 'Next is enabled on the last page of members');
  expect(page1.length === 10 && [...page1, ...page2].sort().join() === left14.join(), `the role's pages list ${page1.join(',')} | ${page2.join(',')}`);
  log(`the role's page lists its ${page1.length + page2.length} members in two pages`);

  // --------------------------------------------------------- view as roles
  stage = 'view as roles';
  await page.goto(`${base}/console/#/preview`);
  await page.locator('input[name="as-muted"]').check();
  // Explanations are asked for a page of channels at a time (at most 50
  // named in channel_ids); the rows come from a preview without them.
  const explainAsked = [];
  const onPreview = (r) => {
    if (r.method() === 'POST' && r.url().endsWith('/api/permissions/preview')) explainAsked.push(r.postDataJSON());
  };
  page.on('request', onPreview);
  await page.getByRole('button', { name: 'Preview' }).click();
  await page.getByTestId('preview').waitFor();
  page.off('request', onPreview);
  const explainWrong = explainAsked.filter((b) => b.explain && !(Array.isArray(b.channel_ids) && b.channel_ids.length <= 50));
  expect(explainAsked.some((b) => b.explain) && explainWrong.length === 0, `view as roles asked for explanations with ${JSON.stringify(explainWrong.map((b) => b.channel_ids?.length ?? 'every channel'))}`);
  const pv = (await api('POST', '/permissions/preview', token, { roles: ['muted'] })).json;
  const rowsShown = await page.locator('[data-testid="preview"] tbody tr').evaluateAll((l) => l.map((r) => r.dataset.channel));
  expect(rowsShown.join() === ['base', ...(await apiOrder()).split(',')].join(), `view as roles lists ${rowsShown.join()}`);
  const cells = Object.fromEntries(await page.locator('[data-testid="preview"] button[data-cell]').evaluateAll((l) => l.map((b) => [b.dataset.cell, b.dataset.value])));
  const wrongCells = [];
  for (const [key, value] of Object.entries(cells)) {
    const [ch, perm] = key.split('/');
    const granted = ch === 'base' ? pv.base.includes(perm) : pv.channels.find((x) => x.channel_id === ch)?.permissions?.includes(perm);
    if ((value === 'allow') !== Boolean(granted)) wrongCells.push(key);
  }
  const channelScoped = (await api('GET', '/permissions', token)).json.items.filter((p) => p.scopes.includes('channel')).length;
  expect(Object.keys(cells).length === channelScoped * rowsShown.length && wrongCells.length === 0, `view as roles differs from the server in ${wrongCells.join(', ') || 'the number of cells'}`);
  expect(cells['ops/SEND_MESSAGES'] === 'deny' && cells['ops/VIEW_CHANNEL'] === 'allow', `as Muted in #ops: ${cells['ops/SEND_MESSAGES']}, ${cells['ops/VIEW_CHANNEL']}`);
  await page.locator('[data-cell="ops/SEND_MESSAGES"]').click();
  const cellWhy = page.getByTestId('preview-why');
  await cellWhy.filter({ hasText: 'in #Operations' }).waitFor();
  const whyOps = (await cellWhy.textContent()).replace(/\s+/g, ' ');
  expect(whyOps.includes('denied by the overwrite of role Muted in #Operations'), `Why? of the cell: ${whyOps}`);
  await page.locator('[data-cell="rules/SEND_MESSAGES"]').click();
  await cellWhy.filter({ hasText: 'in #Rules' }).waitFor();
  const whyRules = (await cellWhy.textContent()).replace(/\s+/g, ' ');
  expect(whyRules.includes('copied from category Staff'), `Why? of the #rules cell: ${whyRules}`);
  await shot(page, 'view-as-roles', { fullPage: true });
  summary.push(`view as roles: ${Object.keys(cells).length} cells as the server says, Why? per cell`);
  log(`viewed as Muted: ${rowsShown.length} rows in tree order, every cell as the server's preview; Why? of #ops reads "${whyOps.match(/denied by [^.]*#Operations/)?.[0]}"`);

  // -------------------------------------------------------------- templates
  stage = 'settings: export';
  await page.goto(`${base}/console/#/settings`);
  const [tplDownload] = await Promise.all([page.waitForEvent('download'), page.getByTestId('export').click()]);
  const exported = fs.readFileSync(await tplDownload.path(), 'utf8');
  expect(tplDownload.suggestedFilename().endsWith('.json'), `the template downloads as ${tplDownload.suggestedFilename()}`);
  const exportedNow = await api('GET', '/export', token);
  expect(exported === exportedNow.text, 'the downloaded template is not the export, byte for byte');
  const tpl = JSON.parse(exported);
  expect(tpl.format === 'guildhall-template/1' && tpl.roles.some((r) => r.id === 'muted') && tpl.channels.some((c) => c.id === 'staff' && c.kind === 'category'),
    `the template: ${exported.slice(0, 200)}`);
  await page.getByTestId('exported').waitFor();
  stage = 'settings: import, reviewed';
  const edited = structuredClone(tpl);
  edited.roles.unshift({ id: 'guests', name: 'Guests', position: Math.max(...edited.roles.map((r) => r.position)) + 1, color: '#868e96', permissions: [] });
  const lastTop = Math.max(...edited.channels.filter((c) => c.parent_id === null).map((c) => c.position));
  edited.channels.push({ id: 'announcements', name: 'Announcements', kind: 'text', parent_id: null, position: lastTop + 1, topic: 'News.', overwrites: [] });
  edited.channels.find((c) => c.id === 'rules').topic = 'Read these first.';
  edited.channels = edited.channels.filter((c) => c.id !== 'lounge');
  const tplFile = path.join(userDataDir, 'template.json');
  fs.writeFileSync(tplFile, JSON.stringify(edited, null, 2));
  // Every import the console sends names the community it reviewed (If-Match: the export's ETag).
  const importsSent = [];
  const onImport = (r) => { if (r.method() === 'POST' && new URL(r.url()).pathname === '/api/import') importsSent.push(r); };
  page.on('request', onImport);
  await page.locator('input[name="template-file"]').setInputFiles(tplFile);
  expect(await page.getByTestId('apply').getAttribute('data-reason') === 'review the changes first', 'Apply is not disabled before a review');
  await page.getByTestId('review').click();
  const review = page.getByTestId('import-review');
  await review.waitFor();
  const dry = (await api('POST', '/import?dry_run=true', token, edited)).json;
  const reviewed = review.locator('tbody tr');
  expect(await reviewed.count() === dry.changes.length, `the review lists ${await reviewed.count()} changes, the dry run ${dry.changes.length}`);
  expect(await review.locator('tr[data-op="create"][data-kind="role"][data-id="guests"]').count() === 1, 'the review does not list the role to create');
  expect(await review.locator('tr[data-op="create"][data-kind="channel"][data-id="announcements"]').count() === 1, 'the review does not list the channel to create');
  const topicRow = review.locator('tr[data-op="update"][data-kind="channel"][data-id="rules"]');
  expect(await topicRow.count() === 1, 'the review does not list the channel to update');
  const [topicBefore, topicAfter] = await topicRow.locator('td').allTextContents();
  expect(topicBefore.includes('topic') && topicBefore.includes('none') && topicAfter.includes('Read these first.'), `the update reads ${topicBefore} -> ${topicAfter}`);
  expect(await review.locator('tr[data-op="delete"]').count() === 0, 'without prune, the review deletes something');
  expect((await api('GET', '/roles/guests', token)).status === 404, 'the review wrote something');
  await shot(page, 'settings-import-review', { fullPage: true });
  // Pruning is a choice of its own, reviewed again.
  await page.locator('input[name="prune"]').check();
  await review.waitFor({ state: 'detached' });
  expect(await page.getByTestId('apply').getAttribute('data-reason') === 'review the changes first', 'Apply is not disabled after prune changed');
  await page.getByTestId('review').click();
  await review.locator('tr[data-op="delete"][data-kind="channel"][data-id="lounge"]').waitFor();
  expect(await review.locator('tr[data-op="update"][data-kind="channel"][data-id="rules"]').count() === 1, 'the pruning review does not update rules');
  await shot(page, 'settings-import-prune', { fullPage: true });
  // The community changes after the review (rules gets the topic the
  // template gives it): the apply is refused (412), nothing is applied,
  // and the user is told to review again.
  stage = 'settings: import, changed since the review';
  const reviewedTag = (await api('GET', '/export', token)).etag;
  const meanwhile = await api('PATCH', '/channels/rules', token, { topic: 'Read these first.' }, { 'Content-Type': 'application/merge-patch+json' });
  expect(meanwhile.status === 200, `changing rules meanwhile answered ${meanwhile.status}`);
  expect((await api('GET', '/export', token)).etag !== reviewedTag, 'the export ETag did not change with the community');
  const staleSent = page.waitForResponse((r) => r.request().method() === 'POST' && /\/api\/import\?prune=true$/.test(r.url()));
  await page.getByTestId('apply').click();
  expect((await staleSent).status() === 412, `applying a stale review answered ${(await staleSent).status()}`);
  await page.getByTestId('import-stale').waitFor();
  await review.waitFor({ state: 'detached' });
  expect((await page.getByTestId('import-stale').textContent()).includes('changed since you reviewed'), 'the stale import is not explained');
  expect((await api('GET', '/roles/guests', token)).status === 404, 'a stale import applied something');
  expect(await page.getByTestId('apply').getAttribute('data-reason') === 'review the changes first', 'Apply is not disabled after a stale apply');
  await shot(page, 'settings-import-stale', { fullPage: true });
  await page.getByTestId('review').click();
  await review.locator('tr[data-op="delete"][data-kind="channel"][data-id="lounge"]').waitFor();
  expect(await page.getByTestId('import-stale').count() === 0, 'the stale notice outlives a new review');
  expect(await review.locator('tr[data-op="update"][data-kind="channel"][data-id="rules"]').count() === 0, 'the new review still updates rules');
  const tagNow = (await api('GET', '/export', token)).etag;
  const dryPrune = (await api('POST', '/import?dry_run=true&prune=true', token, edited, { 'If-Match': tagNow })).json;
  expect(await reviewed.count() === dryPrune.changes.length, `the pruning review lists ${await reviewed.count()} changes, the dry run ${dryPrune.changes.length}`);
  const applyLabel = await page.getByTestId('apply').textContent();
  expect(applyLabel.includes(`Apply ${dryPrune.changes.length} changes`) && applyLabel.includes('deletion'), `the apply button reads ${applyLabel}`);
  stage = 'settings: import, applied';
  const importSent = page.waitForRequest((r) => r.method() === 'POST' && /\/api\/import\?prune=true$/.test(r.url()));
  await page.getByTestId('apply').click();
  expect((await importSent).postData() === JSON.stringify(edited), 'the import applied is not the template reviewed');
  expect((await importSent).headers()['if-match'] === tagNow, `the import applied sent If-Match ${(await importSent).headers()['if-match']}, not ${tagNow}`);
  await page.getByTestId('applied').filter({ hasText: `Applied ${dryPrune.changes.length} change` }).waitFor();
  expect((await api('GET', '/roles/guests', token)).status === 200, 'the role guests was not created');
  expect((await api('GET', '/channels/announcements', token)).json?.topic === 'News.', 'the channel announcements was not created');
  expect((await api('GET', '/channels/rules', token)).json?.topic === 'Read these first.', 'the topic of rules was not updated');
  expect((await api('GET', '/channels/lounge', token)).status === 404, 'lounge was not pruned');
  // The same template again: nothing left to change.
  await page.getByTestId('review').click();
  await review.filter({ hasText: 'Nothing to change' }).waitFor();
  expect(await page.getByTestId('apply').getAttribute('data-reason') === 'nothing to change', 'Apply is not disabled with nothing to change');
  page.off('request', onImport);
  const noTag = importsSent.filter((r) => !r.headers()['if-match']).map((r) => r.url());
  expect(importsSent.length >= 5 && noTag.length === 0, `imports sent without If-Match: ${noTag.join(', ')} (of ${importsSent.length})`);
  expectLive('role.created', 'role:guests');
  expectLive('channel.deleted', 'channel:lounge');
  summary.push(`template exported byte for byte, ${dryPrune.changes.length} changes reviewed then applied (prune chosen)`);
  log(`exported the template (${exported.length} bytes); reviewed ${dry.changes.length} changes, ${dryPrune.changes.length} with prune, applied them; reviewed again: nothing to change`);

  // ------------------------------------------------------- audit log, live
  stage = 'audit log';
  await audit.bringToFront();
  for (const [type, subject] of wantLive) {
    stage = `audit log: ${type} ${subject ?? ''}`;
    await liveRow(type, subject).waitFor();
  }
  const seen = await audit.locator('[data-testid="audit"] tr.fresh').count();
  expect(seen >= 10, `only ${seen} events arrived live`);
  const perm = audit.locator('[data-testid="audit"] tr.fresh[data-type="role.permissions.set"][data-subject="role:mods"]').last();
  expect((await perm.textContent()).includes('+MANAGE_CHANNELS'), 'the audit row of role.permissions.set shows no before/after');
  stage = 'audit log: moves and timeouts in words';
  const moved = (await liveRow('channel.moved', 'channel:ops').innerText()).replace(/\s+/g, ' ');
  expect(moved.includes('from category #Staff') && moved.includes('to no category'), `the channel.moved row reads: ${moved}`);
  const timeoutRow = (await liveRow('user.timeout', `user:${alice.id}`).innerText()).replace(/\s+/g, ' ');
  expect(timeoutRow.includes('before: timed out until') && timeoutRow.includes('after: not timed out'), `the user.timeout row reads: ${timeoutRow}`);
  const copiedRow = (await liveRow('channel.overwrite.set', 'channel:lounge').innerText()).replace(/\s+/g, ' ');
  expect(copiedRow.includes('copied from #Staff'), `the overwrite copied to a synced channel reads: ${copiedRow}`);
  stage = 'audit log: names, not IDs';
  await soft(stage, () => auditNamed(audit, { alice, bob }));
  await shot(audit, 'audit-log', { fullPage: true });
  // Filtered: role events only.
  await audit.locator('select[name="type"]').selectOption('role.*');
  await audit.getByRole('button', { name: 'Filter' }).click();
  await audit.waitForFunction(() => [...document.querySelectorAll('[data-testid="audit"] tbody tr')].every((r) => r.dataset.type?.startsWith('role.')));
  const roleRows = await audit.locator('[data-testid="audit"] tbody tr').count();
  expect(roleRows >= 6, `the role.* filter shows ${roleRows} rows`);
  summary.push(`${seen} events seen live in the audit log`);
  log(`the audit tab saw ${seen} events arrive live, each of the ${wantLive.length} actions checked among them`);
  await audit.close();

  // ------------------------------------------------------ no layout shift
  stage = 'layout shift';
  for (const p of ['channels/ops', 'channels/staff', 'roles', 'users', 'permissions', 'preview', 'audit', 'webhooks', 'settings']) {
    await page.goto('about:blank');
    await page.goto(`${base}/console/#/${p}`);
    await page.waitForLoadState('networkidle');
    const cls = await page.evaluate(() => window.__cls);
    expect(cls < 0.1, `layout shift on loading #/${p}: ${cls.toFixed(3)}`);
    if (p === 'audit') {
      await soft('audit log loaded: names, not IDs', async () => {
        // Every entry of the walk, older pages too.
        const older = page.getByRole('button', { name: 'Older events' });
        for (let i = 0; i < 20 && await older.isEnabled(); i++) {
          const n = await page.locator('[data-testid="audit"] tbody tr').count();
          await older.click();
          await page.waitForFunction((k) => document.querySelectorAll('[data-testid="audit"] tbody tr').length > k, n);
        }
        await auditNamed(page, { alice, bob });
      });
    }
  }

  // ------------------------------------------------------------------ 360 px
  stage = '360 px';
  await page.setViewportSize({ width: 360, height: 780 });
  for (const p of ['channels/ops', 'channels/staff', 'roles', 'users', 'permissions', 'preview', 'audit', 'webhooks', 'settings']) {
    await page.goto(`${base}/console/#/${p}`);
    await page.waitForLoadState('networkidle');
    const w = await page.evaluate(() => document.documentElement.scrollWidth);
    expect(w <= 360, `#/${p} is ${w} px wide at 360 px`);
    await shot(page, `360-${p.replace('/', '-')}`, { fullPage: true });
  }
  // The new pages with their results: a preview, a user's timeout, an import's review.
  const fits = async (what) => {
    const w = await page.evaluate(() => document.documentElement.scrollWidth);
    expect(w <= 360, `${what} is ${w} px wide at 360 px`);
    await shot(page, `360-${what.replace(/[^a-z]+/g, '-')}`, { fullPage: true });
  };
  await page.goto(`${base}/console/#/preview`);
  await page.locator('input[name="as-muted"]').check();
  await page.getByRole('button', { name: 'Preview' }).click();
  await page.locator('[data-cell="ops/SEND_MESSAGES"]').click();
  await page.getByTestId('preview-why').waitFor();
  await fits('view as roles');
  // Picked from the list, the details come into view with the focus (they are far below it).
  const shownAndFocused = async (sel, what) => {
    await page.waitForFunction((q) => document.activeElement === document.querySelector(q), sel).catch(() => {});
    const at = await page.evaluate((q) => {
      const el = document.querySelector(q);
      const r = el?.getBoundingClientRect();
      return { focused: document.activeElement === el, top: r?.top ?? -1, bottom: r?.bottom ?? -1, h: window.innerHeight };
    }, sel);
    expect(at.focused && at.top >= -1 && at.bottom <= at.h, `at 360 px ${what} is not in view with the focus: ${JSON.stringify(at)}`);
  };
  await page.goto(`${base}/console/#/users`);
  await page.locator('[data-testid="user-list"] a', { hasText: 'Carol' }).click();
  await page.getByTestId('timeout').waitFor();
  await shownAndFocused('#user-h', "Carol's details");
  await fits('users timeout');
  await page.goto(`${base}/console/#/channels/ops`);
  await page.locator('#settings-h').waitFor();
  await page.locator('[data-channel="rules"] > a').click();
  await page.locator('#settings-h', { hasText: 'Rules' }).waitFor();
  await shownAndFocused('#settings-h', "#rules's settings");
  // Every section's tab in sight (they wrap, none scrolled off screen).
  const offTabs = await page.evaluate(() => [...document.querySelectorAll('nav.tabs a')].filter((a) => {
    const r = a.getBoundingClientRect();
    return r.left < 0 || r.right > window.innerWidth || r.width === 0;
  }).map((a) => a.textContent));
  expect(offTabs.length === 0, `at 360 px these tabs are off screen: ${offTabs.join(', ')}`);
  // The template as first exported: its review undoes the import (lounge back, the topic of rules).
  const firstFile = path.join(userDataDir, 'template-first.json');
  fs.writeFileSync(firstFile, exported);
  await page.goto(`${base}/console/#/settings`);
  await page.locator('input[name="template-file"]').setInputFiles(firstFile);
  await page.getByTestId('review').click();
  await page.locator('[data-testid="import-review"] tr[data-op="create"][data-id="lounge"]').waitFor();
  await fits('settings review');
  await page.setViewportSize({ width: 1280, height: 900 });
  summary.push('360 px fits');
  log('every page fits 360 px');

  // ------------------------------------------- webhooks, who has access
  const walkCtx = { page, base, token, api, expect, log, shot, summary, setStage: (s) => { stage = s; } };
  await soft('webhooks', () => walkWebhooks(walkCtx));
  await soft('who has access', () => walkAccess(walkCtx));
  await soft('history', () => walkHistory(walkCtx));
  await soft('revert', () => walkRevert(walkCtx));

  // -------------------------------------------------------------- moderator
  stage = 'moderator';
  // #secret, which no one but the owner may view: the moderator (MANAGE_CHANNELS) knows of it.
  expect((await api('POST', '/channels/secret/create', token, { name: 'Secret' })).status === 201, 'channel secret not created');
  expect((await api('POST', '/channels/secret/permissions', token, { target_type: 'everyone', allow: [], deny: ['VIEW_CHANNEL'] })).status === 200,
    'secret not hidden');
  await page.getByRole('button', { name: 'Sign out' }).click();
  // Every API request the moderator's console makes, with its answer.
  const modAnswers = [];
  const onModAnswer = (r) => { if (new URL(r.url()).pathname.startsWith('/api/')) modAnswers.push([r.request().method(), new URL(r.url()).pathname, r.status()]); };
  page.on('response', onModAnswer);
  await signIn(page, modToken);
  expect((await page.getByTestId('whoami').textContent()).includes('Moderators'), 'the moderator does not see their role');
  // Webhooks need MANAGE_WEBHOOKS as well as VIEW_AUDIT_LOG: no tab for them.
  expect(await page.locator('nav.tabs a', { hasText: 'Webhooks' }).count() === 0, 'the moderator (no MANAGE_WEBHOOKS) has a Webhooks tab');
  stage = 'moderator: a channel they cannot view, in the tree';
  await soft(stage, async () => {
    await page.goto(`${base}/console/#/channels`);
    const secretRow = page.locator('[data-channel="secret"] > a');
    await secretRow.waitFor();
    expect(await secretRow.getAttribute('data-viewable') === 'false', 'the moderator\'s tree does not mark #secret as not viewable');
    expect((await secretRow.innerText()).includes('you cannot view it'), `the moderator's #secret row reads: ${await secretRow.innerText()}`);
    const asked = modAnswers.length;
    await secretRow.click();
    await page.getByTestId('unviewable-channel').waitFor();
    await page.waitForLoadState('networkidle');
    const secretAsked = modAnswers.slice(asked).filter(([, p]) => p.startsWith('/api/channels/secret') || p.includes('channelID=secret'));
    expect(secretAsked.length === 0, `the console asked for what the moderator cannot view: ${secretAsked.map((x) => x.join(' ')).join(', ')}`);
    await shot(page, 'moderator-unviewable', { fullPage: true });
    log('moderator: #secret listed in the tree, marked as one they cannot view; its details not asked for');
  });
  stage = 'moderator: the audit log';
  await soft(stage, async () => {
    const asked = modAnswers.length;
    await page.goto(`${base}/console/#/audit`);
    await page.getByTestId('audit').waitFor();
    await page.waitForFunction(() => ![...document.querySelectorAll('[data-testid="audit"] .ref')].some((r) => r.textContent === '…'));
    await page.waitForLoadState('networkidle');
    const refused = modAnswers.slice(asked).filter(([, , st]) => st >= 400);
    expect(refused.length === 0, `the moderator's audit page was refused: ${refused.map((x) => x.join(' ')).join(', ')}`);
    const byID = modAnswers.slice(asked).filter(([m, p]) => m === 'GET' && /^\/api\/channels\/[^/]+$/.test(p));
    expect(byID.length === 0, `the moderator's audit page asked channels one by one: ${byID.map((x) => x[1]).join(', ')}`);
    const secretRow = page.locator('[data-testid="audit"] tbody tr[data-type="channel.overwrite.set"][data-subject="channel:secret"]').first();
    const t = (await secretRow.innerText()).replace(/\s+/g, ' ');
    expect(t.includes('#Secret'), `the moderator's audit entry of #secret reads: ${t}`);
    await shot(page, 'moderator-audit', { fullPage: true });
    log(`moderator: the audit page made ${modAnswers.length - asked} requests, none refused; #secret named`);
  });
  page.off('response', onModAnswer);
  // Roles: no MANAGE_ROLES.
  await page.goto(`${base}/console/#/roles`);
  await page.locator('.readonly', { hasText: 'you need MANAGE_ROLES' }).waitFor();
  expect(await page.getByRole('button', { name: 'Create role' }).isDisabled(), 'Create role is enabled for the moderator');
  await shot(page, 'moderator-roles');
  // Users: no MANAGE_USERS.
  await page.goto(`${base}/console/#/users`);
  const cu = page.getByRole('button', { name: 'Create user' });
  expect(await cu.isDisabled() && (await cu.getAttribute('data-reason')) === 'you need MANAGE_USERS', 'Create user is not disabled with "you need MANAGE_USERS"');
  // Permissions: global needs ADMINISTRATOR.
  await page.goto(`${base}/console/#/permissions`);
  await page.locator('.readonly', { hasText: 'you need ADMINISTRATOR' }).waitFor();

  // Timeouts: Alice is above the moderator, Carol below.
  stage = 'moderator: timeouts';
  await page.goto(`${base}/console/#/users`);
  await page.locator('[data-testid="user-list"] a', { hasText: 'Alice' }).click();
  await page.locator('#user-h').filter({ hasText: 'Alice' }).waitFor();
  const aboveMe = page.getByRole('button', { name: 'Time out for 10 minutes' });
  expect(await aboveMe.isDisabled() && (await aboveMe.getAttribute('data-reason')) === "Alice Liddell's highest role is not below yours",
    `timing Alice out: ${await aboveMe.getAttribute('data-reason')}`);
  await page.locator('[data-testid="user-list"] a', { hasText: 'Carol' }).click();
  await page.locator('#user-h').filter({ hasText: 'Carol' }).waitFor();
  const modTimedAt = Date.now();
  await page.getByRole('button', { name: 'Time out for 60 seconds' }).click();
  await page.getByTestId('timeout-left').waitFor();
  const carolUntil = Date.parse((await api('GET', `/users/${carol.id}`, token)).json?.timeout_until ?? '');
  expect(carolUntil >= modTimedAt + 55_000 && carolUntil <= Date.now() + 65_000, `carol's timeout ends ${new Date(carolUntil).toISOString()}, not in 60 s`);
  await shot(page, 'moderator-timeout', { fullPage: true });
  await page.getByTestId('timeout-end').click();
  await page.locator('[data-testid="timeout-state"][data-active="false"]').waitFor();
  const carolAfter = (await api('GET', `/users/${carol.id}`, token)).json;
  expect(carolAfter?.timeout_until == null || Date.parse(carolAfter.timeout_until) <= Date.now(), `carol's timeout did not end: ${carolAfter?.timeout_until}`);
  // Bulk role changes, view as roles and templates: disabled, with the reason.
  stage = 'moderator: bulk, view as roles, templates';
  await page.locator('input[name="pick-carol"]').check();
  await page.locator('select[name="bulk-role"]').selectOption('regulars');
  expect(await page.getByTestId('bulk-add').getAttribute('data-reason') === 'you need MANAGE_ROLES', `bulk add for the moderator: ${await page.getByTestId('bulk-add').getAttribute('data-reason')}`);
  await page.goto(`${base}/console/#/preview`);
  await page.locator('.readonly', { hasText: 'you need MANAGE_ROLES' }).waitFor();
  expect(await page.getByRole('button', { name: 'Preview' }).isDisabled(), 'Preview is enabled for the moderator');
  await page.goto(`${base}/console/#/settings`);
  expect(await page.getByTestId('export').getAttribute('data-reason') === 'only the owner may export or import templates', 'Export is not disabled for the moderator');
  const readOnlyWords = await page.locator('.readonly').first().textContent();
  expect(readOnlyWords === 'Read-only: only the owner may export or import templates.', `the settings read: ${readOnlyWords}`);
  await reasonsVisible(page, 'moderator, settings');
  await shot(page, 'moderator-settings');
  log('moderator: timed Carol out for 60 s and ended it; Alice (above) disabled with the reason; bulk, view as roles and templates disabled with theirs');
  // The channel: may edit it (MANAGE_CHANNELS) but not its overwrites (MANAGE_ROLES in #ops).
  await page.goto(`${base}/console/#/channels/ops`);
  await page.getByTestId('matrix').waitFor();
  const save = page.getByTestId('matrix-save');
  expect(await save.isDisabled() && (await save.getAttribute('data-reason')) === 'you need MANAGE_ROLES in #ops',
    `matrix save reason ${await save.getAttribute('data-reason')}`);
  await reasonsVisible(page, 'moderator, #ops');
  // VIEW_AUDIT_LOG is enough to ask who has access (the answer is the server's).
  await soft('moderator: who has access', async () => {
    const card = page.getByTestId('who-has-access');
    await card.getByRole('button', { name: 'Show who has it' }).click();
    await card.locator('[data-testid="access-list"][data-permission="VIEW_CHANNEL"]').waitFor();
    const want = ((await api('GET', '/channels/ops/access?limit=20', token)).json?.items ?? []).map((u) => u.username);
    const shown = await card.locator('[data-testid="access-list"] li').evaluateAll((ls) => ls.map((l) => l.dataset.user));
    expect(shown.join(',') === want.join(','), `the moderator's Who has access in #ops lists ${shown.join(', ')}, the API ${want.join(', ')}`);
  });
  await shot(page, 'moderator-channel', { fullPage: true });
  // The owner takes MANAGE_CHANNELS away meanwhile: the save is refused, and the 403 reads in words.
  const modsNow = await api('GET', '/roles/mods', token);
  const taken = await api('PUT', '/roles/mods/permissions', token, { permissions: ['MANAGE_MESSAGES', 'VIEW_AUDIT_LOG'] });
  expect(taken.status === 200, `taking MANAGE_CHANNELS answered ${taken.status} (etag ${modsNow.etag})`);
  await page.locator('textarea[name="topic"]').fill('Moderators only.');
  await page.getByRole('button', { name: 'Save' }).first().click();
  const refused = page.locator('.problem[data-status="403"]');
  await refused.waitFor();
  const words = (await refused.textContent()).replace(/\s+/g, ' ');
  expect(words.includes('you need MANAGE_CHANNELS in #ops') && !words.includes('{'), `the 403 reads: ${words}`);
  expect((await api('GET', '/channels/ops', token)).json?.topic === 'Where the moderators meet.', 'the refused save changed the topic');
  // What the moderator may do here is computed again: Save disables itself, with the reason, and is not sent twice.
  await page.waitForFunction(() => {
    const b = [...document.querySelectorAll('#settings-h ~ form button[type="submit"]')][0];
    return b?.disabled && b.dataset.reason === 'you need MANAGE_CHANNELS in #ops';
  }).catch(() => failures.push('after the refused save, Save is not disabled with "you need MANAGE_CHANNELS in #ops"'));
  expect(await page.locator('textarea[name="topic"]').isDisabled(), 'after the refused save, the topic is still editable');
  expect((await refused.count()) === 1, 'the refusal is no longer shown');
  await reasonsVisible(page, 'moderator, #ops after the refusal');
  // With MANAGE_ROLES in #rules the moderator may set overwrites there, but
  // only of what they hold: the other cells are greyed, and say why in words.
  stage = 'moderator: cells they may not grant';
  await soft(stage, async () => {
    expect((await api('POST', '/channels/rules/permissions', token, { target_type: 'role', target_id: 'mods', allow: ['MANAGE_ROLES'], deny: [] })).status === 200,
      'MANAGE_ROLES in #rules not given to mods');
    await page.goto(`${base}/console/#/channels/rules`);
    await page.getByTestId('matrix').waitFor();
    const cellsWhy = page.getByTestId('cells-why');
    await cellsWhy.waitFor();
    const says = (await cellsWhy.textContent()).replace(/\s+/g, ' ');
    expect(says.includes('you do not hold') && says.includes('so you cannot grant or revoke'), `the greyed cells say: ${says}`);
    const cells = page.locator('[data-testid="matrix"] tr[data-row="everyone"] button.tri');
    const disabled = await page.locator('[data-testid="matrix"] tr[data-row="everyone"] button.tri[disabled]').count();
    expect(disabled > 0 && disabled < await cells.count(), `${disabled} of ${await cells.count()} cells disabled for the moderator in #rules`);
    await reasonsVisible(page, 'moderator, #rules');
    await shot(page, 'moderator-cells-why', { fullPage: true });
    log(`moderator in #rules: ${disabled} cells greyed, saying "${says}"`);
  });
  await shot(page, 'moderator-403');
  summary.push(`moderator: disabled controls with reasons, 403 reads "${words.match(/Refused: [^.]*?#ops/)?.[0]}"`);
  log(`moderator: controls disabled with reasons; the refused save reads "${words}"`);

  // ---------------------------------------------------------------- member
  stage = 'member';
  // #vault, which everyone but the owner is denied.
  expect((await api('POST', '/channels/vault/create', token, { name: 'Vault' })).status === 201, 'channel vault not created');
  expect((await api('POST', '/channels/vault/permissions', token, { target_type: 'everyone', allow: [], deny: ['VIEW_CHANNEL'] })).status === 200,
    'vault not hidden');
  const aliceToken = (await api('POST', `/users/${alice.id}/tokens`, token, { name: 'console walk' })).json?.token;
  await page.getByRole('button', { name: 'Sign out' }).click();
  await signIn(page, aliceToken);
  stage = 'member: live off';
  await soft(stage, async () => {
    const off = page.getByTestId('live').filter({ hasText: 'live off (needs VIEW_AUDIT_LOG)' });
    await off.waitFor();
    const color = await off.evaluate((el) => getComputedStyle(el).color);
    expect(color !== liveColor, `"live off" has the colour of "live" (${color})`);
    log(`member: "live off" is ${color}, "● live" ${liveColor}`);
  });
  stage = 'member: a channel they cannot see';
  await soft(stage, async () => {
    const says = await noChannel(page, 'vault');
    await shot(page, 'member-hidden-channel');
    log(`member: #/channels/vault says: ${says}`);
  });
  stage = 'member: disabled, with the reason';
  await soft(stage, async () => {
    const reasonOf = async (loc, want, what) => {
      await loc.waitFor();
      const got = await loc.getAttribute('data-reason');
      expect(await loc.isDisabled() && got === want, `${what}: disabled ${await loc.isDisabled()}, reason ${got}`);
    };
    await page.goto(`${base}/console/#/channels`);
    const opsRow = page.locator('[data-channel="ops"] > a');
    await opsRow.waitFor();
    expect(await opsRow.getAttribute('draggable') === 'false', 'a member can drag channels');
    expect((await page.locator('#move-why').textContent()).includes('you need MANAGE_CHANNELS'), 'moving channels is not disabled with the reason');
    await reasonOf(page.getByRole('button', { name: 'Create channel' }), 'you need MANAGE_CHANNELS', 'create a channel');
    await reasonsVisible(page, 'member, channels');
    await page.goto(`${base}/console/#/users`);
    await page.locator('[data-testid="user-list"] a', { hasText: 'Alice' }).click();
    await page.locator('#user-h').filter({ hasText: 'Alice' }).waitFor();
    await reasonOf(page.getByRole('button', { name: 'Time out for 1 hour' }), 'you cannot time yourself out', 'time oneself out');
    await page.locator('[data-testid="user-list"] a', { hasText: 'Carol' }).click();
    await page.locator('#user-h').filter({ hasText: 'Carol' }).waitFor();
    await reasonOf(page.getByRole('button', { name: 'Time out for 1 hour' }), 'you need MODERATE_MEMBERS', 'time Carol out');
    await page.locator('.readonly', { hasText: 'you need MANAGE_ROLES to assign or remove roles' }).waitFor();
    expect(await page.locator('input[name="role-regulars"]').isDisabled(), "a member can tick Carol's roles");
    await page.locator('input[name="pick-carol"]').check();
    await page.locator('select[name="bulk-role"]').selectOption('regulars');
    await reasonOf(page.getByTestId('bulk-add'), 'you need MANAGE_ROLES', 'bulk add');
    await reasonOf(page.getByTestId('bulk-remove'), 'you need MANAGE_ROLES', 'bulk remove');
    await reasonsVisible(page, 'member, users');
    await shot(page, 'member-users', { fullPage: true });
    await page.goto(`${base}/console/#/roles`);
    await page.locator('[data-role="regulars"]').click();
    await reasonOf(page.getByTestId('role-members').getByRole('button', { name: 'Take Regulars from extra01' }), 'you need MANAGE_ROLES', 'take a role from a member');
    await page.goto(`${base}/console/#/preview`);
    await page.locator('.readonly', { hasText: 'you need MANAGE_ROLES' }).waitFor();
    await reasonOf(page.getByRole('button', { name: 'Preview' }), 'you need MANAGE_ROLES', 'view as roles');
    await reasonsVisible(page, 'member, view as roles');
    // Why? about someone else: Explain disabled, the reason beside it.
    await page.goto(`${base}/console/#/permissions`);
    await page.locator('input[name="why-user"]').fill('carol');
    await page.locator('.suggest button', { hasText: 'carol' }).click();
    await reasonOf(page.getByRole('button', { name: 'Explain' }), 'you need MANAGE_ROLES', 'explain for someone else');
    await reasonsVisible(page, 'member, Why?');
    await page.goto(`${base}/console/#/settings`);
    await reasonOf(page.getByTestId('export'), 'only the owner may export or import templates', 'export');
    await reasonOf(page.getByTestId('review'), 'only the owner may export or import templates', 'import');
    await reasonsVisible(page, 'member, settings');
    await shot(page, 'member-settings');
    log('member: moving channels, timeouts, bulk role changes, view as roles and templates are disabled, each with its reason');
  });
  summary.push('member: live off looks off, a hidden channel reads as not there, every new action disabled with its reason');
} catch (e) {
  failures.push(`${stage}: ${e.message.split('\n')[0]}`);
} finally {
  await context?.close().catch(() => {});
  fs.rmSync(userDataDir, { recursive: true, force: true });
}
expect(blocked.length === 0, `requests left loopback: ${blocked.join(', ')}`);
expect(pageErrors.length === 0, `page errors: ${pageErrors.join(' | ')}`);
log(`external requests: ${blocked.length}; page errors: ${pageErrors.length}; 429s retried: ${rateLimited} (console), ${apiRateLimited} (checks); ${shots} screenshots in ${shotDir}`);
for (const f of failures) console.log(`  FAIL ${f}`);
if (failures.length > 0) {
  console.log(`console: FAILED - ${failures.length} problems`);
  process.exit(1);
}
console.log(`console: OK - ${summary.join('; ')}`);
