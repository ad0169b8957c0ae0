// walk-webhooks.mjs: the owner's walk of the Webhooks page and of a
// channel's "Who has access" (imported by walk.mjs, run as the owner at
// 1280 px after the other pages; check.sh starts the server with
// GUILDHALL_WEBHOOK_ALLOW_PRIVATE=true so that a loopback receiver is allowed).
//   webhooks: one created for a receiver on loopback that answers 204; its
//             secret shown once (and gone after); a change of a role makes a
//             delivery, which appears on the page delivered and signed with
//             that secret; redelivered (202, the same webhook-id again);
//             disabled and enabled; its secret rotated (a new one, once);
//             the page fits 360 px; deleted after a confirmation, the
//             DELETE waiting for a look at the deliveries on its way;
//   access:   on a channel only the owner and one user may view, "Who has
//             access" lists exactly those, as GET /channels/{id}/access does.
import crypto from 'node:crypto';
import http from 'node:http';

/** A receiver on loopback that answers 204 and keeps what it got. */
async function receiver() {
  const got = [];
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      got.push({ headers: req.headers, body: Buffer.concat(chunks).toString('utf8') });
      res.writeHead(204).end();
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${server.address().port}/hook`, got, close: () => new Promise((resolve) => server.close(resolve)) };
}

/** Whether a delivery's webhook-signature holds the signature made with secret (Standard Webhooks). */
function signedWith(d, secret) {
  const key = Buffer.from(secret.replace(/^whsec_/, ''), 'base64');
  const mac = crypto.createHmac('sha256', key).update(`${d.headers['webhook-id']}.${d.headers['webhook-timestamp']}.${d.body}`).digest('base64');
  return String(d.headers['webhook-signature'] ?? '').split(' ').includes(`v1,${mac}`);
}

const until = async (f, what, ms = 15000) => {
  const end = Date.now() + ms;
  for (;;) {
    const v = await f();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
};

/** The change is delivered (signed with the secret shown), appears on the page, and is redelivered. */
async function delivers({ page, api, token, expect, hook, rx, secret, shot }) {
  // First through the API (the deliverer's pace), then on the page.
  await until(async () => ((await api('GET', `/webhooks/${hook.id}/deliveries`, token)).json?.items ?? []).some((d) => d.state === 'delivered'),
    `a delivered delivery in the API (the receiver got ${rx.got.length})`, 30000);
  const delivered = page.locator('[data-testid="deliveries"] li[data-state="delivered"]').first();
  await delivered.waitFor();
  const deliveryID = await delivered.getAttribute('data-delivery');
  const text = (await delivered.innerText()).replace(/\s+/g, ' ');
  expect(text.includes('1 attempt,') && text.includes('last answer 204'), `the delivery reads: ${text}`);
  const first = await until(() => rx.got.find((d) => d.headers['webhook-id'] === deliveryID), 'the delivery at the receiver');
  expect(signedWith(first, secret), 'the delivery is not signed with the secret shown');
  expect(JSON.parse(first.body).type === 'role.updated', `the delivery carries ${first.body.slice(0, 80)}`);
  await shot(page, 'webhooks-delivered', { fullPage: true });
  const redo = page.waitForResponse((r) => r.request().method() === 'POST' && r.url().endsWith(`/deliveries/${deliveryID}/redeliver`));
  await delivered.getByRole('button', { name: /^Redeliver/ }).click();
  expect((await redo).status() === 202, `redelivering answered ${(await redo).status()}`);
  await page.getByTestId('redelivered').waitFor();
  await until(() => rx.got.filter((d) => d.headers['webhook-id'] === deliveryID).length >= 2, 'the redelivery at the receiver');
  const twice = await until(async () => {
    const ds = (await api('GET', `/webhooks/${hook.id}/deliveries`, token)).json?.items ?? [];
    const d = ds.find((x) => x.id === deliveryID);
    return d && d.attempts === 2 && d.state === 'delivered' ? d : null;
  }, 'two attempts in the API');
  expect(twice.last_status === 204, `the redelivery's last status is ${twice.last_status}`);
  await page.getByRole('button', { name: 'Refresh' }).click();
  await page.locator(`[data-delivery="${deliveryID}"]`, { hasText: '2 attempts' }).waitFor();
}

export async function walkWebhooks({ page, base, token, api, expect, log, shot, summary, setStage }) {
  setStage('webhooks: create');
  const rx = await receiver();
  try {
    await page.goto(`${base}/console/#/webhooks`);
    expect(await page.locator('nav.tabs a', { hasText: 'Webhooks' }).count() === 1, 'the owner has no Webhooks tab');
    await page.locator('#webhooks-h').waitFor();
    await page.locator('input[name="webhook-url"]').fill(rx.url);
    await page.locator('input[name="webhook-events"]').fill('role.*, user.timeout');
    await page.locator('input[name="webhook-description"]').fill('Walk receiver');
    const created = page.waitForResponse((r) => r.request().method() === 'POST' && new URL(r.url()).pathname === '/api/webhooks');
    await page.getByRole('button', { name: 'Create webhook' }).click();
    expect((await created).status() === 201, `creating the webhook answered ${(await created).status()}`);
    const note = page.getByTestId('webhook-secret');
    await note.waitFor();
    const noteText = (await note.innerText()).replace(/\s+/g, ' ');
    expect(noteText.includes('copy it now') && noteText.includes('shown only once'), `the secret's notice reads: ${noteText}`);
    const secret = (await note.locator('code').textContent()).trim();
    expect(/^whsec_[A-Za-z0-9+/]{43}=$/.test(secret), `the secret shown is ${secret}`);
    const listed = (await api('GET', '/webhooks', token)).json?.items ?? [];
    const hook = listed.find((w) => w.url === rx.url);
    if (!expect(hook !== undefined, `the webhook is not listed by the API: ${JSON.stringify(listed)}`)) return;
    expect(hook.enabled && hook.events.join(',') === 'role.*,user.timeout' && hook.description === 'Walk receiver', `the webhook is ${JSON.stringify(hook)}`);
    const row = page.locator(`[data-webhook="${hook.id}"]`);
    const rowText = (await row.innerText()).replace(/\s+/g, ' ');
    expect(rowText.includes('role.*, user.timeout') && rowText.includes('enabled') && rowText.includes('creator: you'), `the webhook's row reads: ${rowText}`);
    await page.locator('#webhook-h').waitFor();
    await shot(page, 'webhooks-created', { fullPage: true });
    // Shown once: kept, it is gone, and a fresh page never shows it.
    await note.getByRole('button', { name: 'I have kept it' }).click();
    await note.waitFor({ state: 'detached' });
    await page.reload();
    await page.locator(`[data-webhook="${hook.id}"]`).waitFor();
    expect(!(await page.content()).includes(secret), 'the secret is shown again after a reload');
    log(`webhooks: created one for ${rx.url}, its secret shown once`);

    setStage('webhooks: a delivery');
    await page.locator(`[data-webhook="${hook.id}"] a`).click();
    await page.locator('#deliveries-h').waitFor();
    const role = await api('GET', '/roles/regulars', token);
    const patched = await api('PATCH', '/roles/regulars', token, { color: '#1971c2' }, { 'Content-Type': 'application/merge-patch+json', 'If-Match': role.etag });
    expect(patched.status === 200, `changing the role answered ${patched.status}`);
    await delivers({ page, api, token, expect, hook, rx, secret, shot });
    summary.push('a webhook delivery seen and redelivered');

    setStage('webhooks: disable, enable, rotate');
    await page.getByTestId('webhook-disable').click();
    await page.getByTestId('webhook-state').filter({ hasText: 'disabled' }).waitFor();
    const off = (await api('GET', `/webhooks/${hook.id}`, token)).json;
    expect(off?.enabled === false && off?.disabled_reason === 'disabled', `after Disable the webhook is ${JSON.stringify(off)}`);
    await page.getByTestId('webhook-enable').click();
    await page.getByTestId('webhook-state').filter({ hasText: 'enabled' }).waitFor();
    expect((await api('GET', `/webhooks/${hook.id}`, token)).json?.enabled === true, 'Enable did not enable the webhook');
    await page.getByTestId('webhook-rotate').click();
    await note.waitFor();
    const rotated = (await note.locator('code').textContent()).trim();
    expect(/^whsec_/.test(rotated) && rotated !== secret, 'rotating showed no new secret');
    expect((await note.innerText()).includes('copy it now'), 'the new secret has no "copy it now" notice');
    expect((await api('GET', `/webhooks/${hook.id}`, token)).json?.previous_secret_until != null, 'the rotation left no previous secret signing');

    setStage('webhooks: 360 px');
    await page.setViewportSize({ width: 360, height: 780 });
    await page.waitForTimeout(200);
    const w = await page.evaluate(() => document.documentElement.scrollWidth);
    expect(w <= 360, `#/webhooks is ${w} px wide at 360 px`);
    await shot(page, '360-webhooks', { fullPage: true });
    await page.setViewportSize({ width: 1280, height: 900 });

    setStage('webhooks: delete while a look at its deliveries is on its way');
    // The page looks at the deliveries again after any event: a look is
    // held here when Delete is confirmed. The DELETE must wait for its
    // answer; a look answered after the delete would be a 404 for nothing.
    const looks = `/api/webhooks/${hook.id}/deliveries`;
    let release;
    const released = new Promise((r) => { release = r; });
    let heldOne;
    const held = new Promise((r) => { heldOne = r; });
    let heldLook = null; // the first look held
    const hold = async (route) => {
      heldLook ??= route.request();
      heldOne();
      await released;
      await route.continue();
    };
    const isLook = (u) => u.pathname === looks;
    await page.route(isLook, hold);
    const seen = []; // the DELETE sent and the looks answered, in order
    const onRequest = (r) => { if (r.method() === 'DELETE' && new URL(r.url()).pathname === `/api/webhooks/${hook.id}`) seen.push('DELETE'); };
    const onResponse = (r) => {
      if (new URL(r.url()).pathname === looks) seen.push(`${r.request() === heldLook ? 'held look' : 'look'} ${r.status()}`);
    };
    page.on('request', onRequest);
    page.on('response', onResponse);
    try {
      const role = await api('GET', '/roles/regulars', token);
      const patched = await api('PATCH', '/roles/regulars', token, { color: '#2f9e44' }, { 'Content-Type': 'application/merge-patch+json', 'If-Match': role.etag });
      expect(patched.status === 200, `changing the role answered ${patched.status}`);
      let timer;
      await Promise.race([held, new Promise((_, fail) => { timer = setTimeout(() => fail(new Error('no look at the deliveries after an event')), 10000); })]);
      clearTimeout(timer);
      await page.getByTestId('webhook-delete').click();
      const dialog = page.locator('dialog.confirm');
      await dialog.waitFor();
      expect((await dialog.innerText()).includes(rx.url), 'the confirmation does not name the webhook');
      await dialog.getByRole('button', { name: 'Delete webhook' }).click();
      await page.waitForTimeout(700);
      expect(!seen.includes('DELETE'), `the DELETE was sent while a look at the deliveries was on its way: ${seen.join(', ')}`);
      release();
      await page.locator(`[data-webhook="${hook.id}"]`).waitFor({ state: 'detached' });
      const answered = seen.indexOf('held look 200');
      expect(answered >= 0 && answered < seen.indexOf('DELETE') && !seen.some((x) => x.endsWith(' 404')),
        `the held look answered, then the DELETE: ${seen.join(', ')}`);
    } finally {
      release();
      page.off('request', onRequest);
      page.off('response', onResponse);
      await page.unroute(isLook, hold);
    }
    expect((await api('GET', `/webhooks/${hook.id}`, token)).status === 404, 'the webhook was not deleted');
    summary.push('webhook created (secret once), disabled, enabled, rotated (new secret once), deleted once a look at its deliveries on its way was answered');
    log(`webhooks: a role change delivered (signed with the secret shown) and redelivered: ${rx.got.length} requests at the receiver`);
    log('webhooks: disabled, enabled, rotated (a new secret once), fits 360 px, deleted after a confirmation');
  } finally {
    await rx.close();
  }
}

export async function walkAccess({ page, base, token, api, expect, log, shot, summary, setStage }) {
  setStage('who has access');
  const me = (await api('GET', '/me', token)).json;
  const carol = (await api('GET', '/users?q=carol', token)).json.items[0];
  expect((await api('POST', '/channels/hush/create', token, { name: 'Hush' })).status === 201, 'channel hush not created');
  expect((await api('POST', '/channels/hush/permissions', token, { target_type: 'everyone', allow: [], deny: ['VIEW_CHANNEL'] })).status === 200, 'hush not hidden');
  expect((await api('POST', '/channels/hush/permissions', token, { target_type: 'user', target_id: carol.id, allow: ['VIEW_CHANNEL'], deny: [] })).status === 200,
    'hush not shown to carol');
  const want = ((await api('GET', '/channels/hush/access?limit=200', token)).json?.items ?? []).map((u) => u.username);
  expect(want.includes(me.username) && want.includes('carol') && !want.includes('alice'), `the API says ${want.join(', ')} may view #hush`);
  await page.goto(`${base}/console/#/channels/hush`);
  const card = page.getByTestId('who-has-access');
  await card.waitFor();
  expect(await card.locator('select[name="access-permission"]').inputValue() === 'VIEW_CHANNEL', 'the permission picked first is not VIEW_CHANNEL');
  const options = await card.locator('select[name="access-permission"] option').allTextContents();
  expect(!options.includes('ADMINISTRATOR') && !options.includes('VIEW_AUDIT_LOG') && options.includes('SEND_MESSAGES'), `the picker offers ${options.join(', ')}`);
  await card.getByRole('button', { name: 'Show who has it' }).click();
  const list = card.locator('[data-testid="access-list"][data-permission="VIEW_CHANNEL"]');
  await list.waitFor();
  const shown = await list.locator('li').evaluateAll((ls) => ls.map((l) => l.dataset.user));
  expect(shown.join(',') === want.join(','), `Who has access lists ${shown.join(', ')}, the API ${want.join(', ')}`);
  // Another permission: what the API says of it.
  await card.locator('select[name="access-permission"]').selectOption('MANAGE_MESSAGES');
  await card.getByRole('button', { name: 'Show who has it' }).click();
  await card.locator('[role="status"]', { hasText: 'MANAGE_MESSAGES' }).waitFor();
  const wantMM = ((await api('GET', '/channels/hush/access?permission=MANAGE_MESSAGES&limit=200', token)).json?.items ?? []).map((u) => u.username);
  const shownMM = wantMM.length === 0 ? [] : await card.locator('[data-testid="access-list"][data-permission="MANAGE_MESSAGES"] li').evaluateAll((ls) => ls.map((l) => l.dataset.user));
  expect(shownMM.join(',') === wantMM.join(','), `MANAGE_MESSAGES: Who has access lists ${shownMM.join(', ')}, the API ${wantMM.join(', ')}`);
  await shot(page, 'channel-who-has-access', { fullPage: true });
  await page.goto(`${base}/console/#/channels`);
  const gone = (await api('POST', '/channels/hush/delete', token)).status;
  expect(gone === 204 || gone === 200, `deleting hush answered ${gone}`);
  summary.push(`who has access: #hush lists ${shown.join(', ')}`);
  log(`who has access: #hush viewed by ${shown.join(', ')}; MANAGE_MESSAGES held by ${wantMM.length}`);
}
