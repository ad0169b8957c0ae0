// walk-history.mjs: the owner's walk of history in the console (imported by
// walk.mjs, run as the owner at 1280 px after "Who has access").
//   matrix:  a channel whose @everyone overwrite changed after an instant;
//            "As of" that instant shows the overwrites as they were, the
//            same as GET /channels/{id}/permissions?at=, read-only (no Save,
//            no editable cell); "Now" gives the live, editable matrix back;
//   why:     the Why? panel as of that instant explains what the user had
//            then (the same as GET /users/{id}/permissions?at=&explain=true),
//            and without it, what they have now.

/** A datetime-local value (the browser's time zone, which is this process's) for a time. */
function localOf(d) {
  const p = (n) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export async function walkHistory({ page, base, token, api, expect, log, shot, summary, setStage }) {
  setStage('history: set up');
  const carol = (await api('GET', '/users?q=carol', token)).json.items[0];
  expect((await api('POST', '/channels/past/create', token, { name: 'Past' })).status === 201, 'channel past not created');
  expect((await api('POST', '/channels/past/permissions', token, { target_type: 'everyone', allow: [], deny: ['SEND_MESSAGES'] })).status === 200,
    'past: SEND_MESSAGES not denied');
  // The instant: a whole second (what the picker takes) after that change and before the next.
  await sleep(1100);
  const then = new Date(Math.floor(Date.now() / 1000) * 1000);
  await sleep(1100);
  expect((await api('POST', '/channels/past/permissions', token, { target_type: 'everyone', allow: ['ADD_REACTIONS'], deny: [] })).status === 200,
    'past: the overwrite not changed');
  const at = then.toISOString();
  const wantThen = (await api('GET', `/channels/past/permissions?at=${encodeURIComponent(at)}`, token)).json?.items ?? [];
  expect(wantThen.length === 1 && wantThen[0].deny.includes('SEND_MESSAGES') && wantThen[0].allow.length === 0,
    `the API's overwrites of #past then: ${JSON.stringify(wantThen)}`);

  setStage('history: the matrix as of');
  await page.goto(`${base}/console/#/channels/past`);
  await page.getByTestId('matrix').waitFor();
  expect(await page.getByTestId('matrix-save').count() === 1, 'the live matrix has no Save');
  await page.locator('input[name="matrix-at"]').fill(localOf(then));
  const past = page.locator(`[data-testid="matrix-history"][data-at="${at}"]`);
  await past.waitFor();
  const cell = async (perm) => past.locator('tr[data-row="everyone"] td span.tri').nth(await columnOf(past, perm)).getAttribute('data-value');
  expect(await cell('SEND_MESSAGES') === 'deny', `as of then, @everyone SEND_MESSAGES is ${await cell('SEND_MESSAGES')}`);
  expect(await cell('ADD_REACTIONS') === 'inherit', `as of then, @everyone ADD_REACTIONS is ${await cell('ADD_REACTIONS')}`);
  expect(await page.getByTestId('matrix-save').count() === 0, 'the matrix as of then has a Save button');
  expect(await past.locator('button, input, select').count() === 0, 'the matrix as of then has controls');
  await shot(page, 'channel-matrix-as-of', { fullPage: true });
  await page.getByTestId('matrix-at-now').click();
  await page.getByTestId('matrix').waitFor();
  const live = page.locator('[data-testid="matrix"] tr[data-row="everyone"]');
  expect((await live.innerText()).includes('✓'), 'now, the live matrix does not show the allowed ADD_REACTIONS');

  setStage('history: why, as of');
  await page.goto(`${base}/console/#/permissions`);
  await page.locator('input[name="why-user"]').fill('carol');
  await page.locator('.suggest button', { hasText: 'carol' }).click();
  await page.locator('select[name="why-channel"]').selectOption('past');
  await page.locator('input[name="why-at"]').fill(localOf(then));
  await page.getByRole('button', { name: 'Explain' }).click();
  const row = page.locator(`[data-testid="explain"][data-at="${at}"] tr[data-permission="SEND_MESSAGES"]`);
  await row.waitFor();
  const text = (await row.innerText()).replace(/\s+/g, ' ');
  const api0 = (await api('GET', `/users/${carol.id}/permissions?channelID=past&explain=true&at=${encodeURIComponent(at)}`, token)).json;
  const granted = api0.explain.find((x) => x.permission === 'SEND_MESSAGES').granted;
  expect(!granted && text.includes('not granted') && text.includes('denied by the @everyone overwrite'), `Why? as of then, SEND_MESSAGES: ${text}`);
  await shot(page, 'permissions-why-as-of', { fullPage: true });
  await page.getByTestId('why-at-now').click();
  await page.getByRole('button', { name: 'Explain' }).click();
  const nowRow = page.locator('[data-testid="explain"]:not([data-at]) tr[data-permission="SEND_MESSAGES"], [data-testid="explain"][data-at=""] tr[data-permission="SEND_MESSAGES"]');
  await nowRow.first().waitFor();
  const nowText = (await nowRow.first().innerText()).replace(/\s+/g, ' ');
  expect(nowText.includes('✓ granted'), `Why? now, SEND_MESSAGES: ${nowText}`);

  const gone = (await api('POST', '/channels/past/delete', token)).status;
  expect(gone === 204, `deleting past answered ${gone}`);
  summary.push(`history: #past as of ${at} shows @everyone denied SEND_MESSAGES, read-only; Why? as of then agrees`);
  log(`history: the matrix and Why? as of ${at} show what the API answers then; "Now" gives back the live matrix`);
}

/** The index, among the matrix's permission columns, of a permission. */
async function columnOf(table, perm) {
  const heads = await table.locator('thead th').allTextContents();
  return heads.slice(1).findIndex((h) => h.trim() === perm);
}
