// walk-revert.mjs: the owner's walk of "Revert…" on an audit entry
// (imported by walk.mjs, run as the owner at 1280 px after the other pages).
//   revert: a role's permissions changed through the API; on its audit
//           entry, "Revert…" shows the dry run's change (before and after)
//           and writes nothing until confirmed; confirmed, the role has its
//           permissions back, with an entry whose reason is "revert of
//           <seq>"; the same entry reverted again is refused as a clear
//           message naming the later entry (409); the dialog fits 360 px.

const until = async (f, what, ms = 15000) => {
  const end = Date.now() + ms;
  for (;;) {
    const v = await f();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
};

export async function walkRevert({ page, base, token, api, expect, log, shot, summary, setStage }) {
  setStage('revert: an entry');
  // On the audit log first: a page left open on a channel deleted before
  // (walkAccess's) would ask again about it on the role events below.
  await page.goto(`${base}/console/#/audit`);
  await page.locator('[data-testid="audit"]').waitFor();
  expect((await api('POST', '/roles/revertees/create', token, { name: 'Revertees', permissions: ['ADD_REACTIONS'] })).status === 201,
    'role revertees not created');
  expect((await api('PUT', '/roles/revertees/permissions', token, { permissions: ['EMBED_LINKS', 'ADD_REACTIONS'] })).status === 200,
    "revertees' permissions not changed");
  const newest = async () => (await api('GET', '/audit-log?limit=1', token)).json?.items?.[0];
  const changed = await newest();
  expect(changed?.type === 'role.permissions.set' && changed.subject === 'role:revertees', `the newest entry is ${JSON.stringify(changed)}`);
  const perms = async () => (await api('GET', '/roles/revertees', token)).json?.permissions?.join(',');

  await page.locator('input[name="subject"]').fill('role:revertees');
  await page.getByRole('button', { name: 'Filter' }).click();
  const entry = page.locator(`[data-testid="revert"][data-seq="${changed.seq}"]`);
  await entry.waitFor();
  expect(await page.locator('[data-type="role.created"] [data-testid="revert"]').count() === 0, 'a role.created entry offers Revert…');

  setStage('revert: the dry run');
  const dry = page.waitForResponse((r) => r.request().method() === 'POST' && r.url().includes(`/audit-log/${changed.seq}/revert?dry_run=true`));
  await entry.getByTestId('revert-ask').click();
  expect((await dry).status() === 200, `the dry run answered ${(await dry).status()}`);
  const dialog = page.getByTestId('revert-review');
  await dialog.waitFor();
  const row = dialog.locator('tr[data-kind="role"][data-id="revertees"]');
  await row.waitFor();
  const rowText = (await row.innerText()).replace(/\s+/g, ' ');
  expect(rowText.includes('EMBED_LINKS') && rowText.includes('ADD_REACTIONS'), `the change reads: ${rowText}`);
  expect(await row.locator('.removed', { hasText: 'EMBED_LINKS' }).count() === 1, 'the change does not mark EMBED_LINKS as taken away');
  expect((await newest())?.seq === changed.seq, 'the dry run wrote an entry');
  expect((await perms()) === 'EMBED_LINKS,ADD_REACTIONS', `the dry run changed the role: ${await perms()}`);
  await shot(page, 'audit-revert-review', { fullPage: true });

  setStage('revert: 360 px');
  await page.setViewportSize({ width: 360, height: 780 });
  await page.waitForTimeout(200);
  const box = await dialog.boundingBox();
  expect(box !== null && box.x >= 0 && box.x + box.width <= 360, `the revert dialog is ${JSON.stringify(box)} at 360 px`);
  await shot(page, '360-audit-revert-review');
  await page.setViewportSize({ width: 1280, height: 900 });

  setStage('revert: confirmed');
  const made = page.waitForResponse((r) => r.request().method() === 'POST' && r.url().endsWith(`/audit-log/${changed.seq}/revert`));
  await dialog.getByTestId('revert-apply').click();
  expect((await made).status() === 200, `the revert answered ${(await made).status()}`);
  await entry.getByTestId('reverted').waitFor();
  expect((await entry.getByTestId('reverted').innerText()).includes('1 change'), 'the revert does not say what it made');
  await dialog.waitFor({ state: 'detached' });
  expect((await perms()) === 'ADD_REACTIONS', `after the revert the role has ${await perms()}`);
  const revert = await until(async () => {
    const e = await newest();
    return e && e.seq > changed.seq ? e : null;
  }, "the revert's entry");
  expect(revert.type === 'role.permissions.set' && revert.reason === `revert of ${changed.seq}`, `the revert's entry is ${JSON.stringify(revert)}`);
  // The live log shows it, with a Revert… of its own.
  await page.locator(`[data-testid="revert"][data-seq="${revert.seq}"]`).waitFor();

  setStage('revert: a conflict');
  await entry.getByTestId('revert-ask').click();
  const refused = entry.getByTestId('revert-conflict');
  await refused.waitFor();
  const refusedText = (await refused.innerText()).replace(/\s+/g, ' ');
  expect(refusedText.includes('changed again since') && refusedText.includes(`seq ${revert.seq}`),
    `the conflict reads: ${refusedText}`);
  expect(await page.getByTestId('revert-review').count() === 0, 'a refused revert opened its dialog');
  expect((await perms()) === 'ADD_REACTIONS', 'the refused revert changed the role');
  await shot(page, 'audit-revert-conflict', { fullPage: true });

  expect((await api('POST', '/roles/revertees/delete', token)).status === 204, 'role revertees not deleted');
  summary.push(`audit entry ${changed.seq} reverted after its dry run; reverting it again refused, naming ${revert.seq}`);
  log(`revert: entry ${changed.seq} reviewed (nothing written), reverted (entry ${revert.seq}), then refused as a conflict`);
}
